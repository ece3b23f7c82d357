#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: report_files
short_description: Write a set of report files under a report directory in one task (the drift diffs)
version_added: 0.1.0
description:
  - Writes each file of O(files) below O(path), creating the directories between, each file atomically (a temporary
    file renamed over it), in one module run; the audit and the rollout write the diffs of the modified vLLM files
    (P(gpufleet.vllm.drift_diff_files#filter)) with one task, not one task result per file.
  - Every relative path is checked before anything is written (in check mode too); a path that is absolute, empty,
    holds C(.), C(..), an empty part, a control character or a part longer than 255 bytes is refused, and so is a path
    below a symbolic link or a file, over a directory, or given twice (or as a file and as a directory of another
    file), so nothing is written outside O(path) and no file of the run hides another. Each file is checked again
    just before it is written.
  - The run is bounded by O(max_files) and O(max_bytes), checked before anything is written.
  - It is an action plugin and runs on the control node, in the Python that runs Ansible, whatever host the task is
    for. No module is sent to a host and no connection is opened, so the task needs no C(delegate_to).
  - The result's C(changed) is always false, since report files are new files on the control node each run, not a
    change to the fleet.
options:
  path:
    description: The report directory; created when missing.
    type: path
    required: true
  files:
    description: The files, each a dict of C(file) (the path relative to O(path)) and C(content) (text, written as UTF-8).
    type: list
    elements: dict
    required: true
  max_files:
    description: The most files one run writes; more is an error before anything is written.
    type: int
    default: 10000
  max_bytes:
    description: The most bytes all the files together may hold; more is an error before anything is written.
    type: int
    default: 268435456
extends_documentation_fragment:
  - gpufleet.vllm.attributes.controller_writer
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.vllm.internal.module
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written; the paths are checked and returned all the same.
  diff_mode:
    support: none
seealso:
  - module: gpufleet.vllm.drift_info
  - module: gpufleet.vllm.rollout_summary
author:
  - gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Write the diffs of the modified files (diffs/<host>/<file path>.diff)
  gpufleet.vllm.report_files:
    path: "{{ gpufleet_report_dir }}"
    files: "{{ ansible_play_hosts | gpufleet.vllm.drift_diff_files(hostvars) }}"
  run_once: true
"""

RETURN = r"""
files:
  description: The files written, as paths below O(path) (the ones that would be written, in check mode).
  returned: always
  type: list
  elements: str
bytes:
  description: The bytes of all the files.
  returned: always
  type: int
check_mode:
  description: Whether this run was in check mode (nothing written).
  returned: always
  type: bool
"""
