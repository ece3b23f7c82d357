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
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
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
  delegate_to: localhost
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

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import files as reportfile
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import control_character, shown, valid_text


def path_problem(relative):
    """Why RELATIVE cannot be written below the report directory, or None."""
    if not isinstance(relative, str) or not relative:
        return "the path is empty or not text"
    if control_character(relative) is not None:
        return "the path holds a control character"
    if relative.startswith("/"):
        return "the path is absolute"
    for part in relative.split("/"):
        if part in ("", ".", ".."):
            return "the path has an empty, '.' or '..' part"
        if len(valid_text(part).encode("utf-8")) > 255:
            return "a part of the path is longer than 255 bytes"
    return None


def tree_problem(base, relative, planned_dirs, planned_files):
    """Why RELATIVE cannot be written below BASE as it is now, given the files before it in this run, or None."""
    parts = relative.split("/")
    here = base
    for depth, part in enumerate(parts[:-1]):
        here = os.path.join(here, part)
        prefix = "/".join(parts[:depth + 1])
        if prefix in planned_files:
            return "%s is another file of this run" % prefix
        if os.path.islink(here):
            return "%s is a symbolic link; report files are not written through links" % here
        if os.path.lexists(here) and not os.path.isdir(here):
            return "%s is there and is not a directory" % here
    target = os.path.join(base, relative)
    if relative in planned_files:
        return "another file of this run has the same path"
    if relative in planned_dirs:
        return "another file of this run needs it as a directory"
    if os.path.isdir(target) and not os.path.islink(target):
        return "a directory of that name is there"
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            files=dict(type='list', elements='dict', required=True),
            max_files=dict(type='int', default=10000),
            max_bytes=dict(type='int', default=268435456),
        ),
        supports_check_mode=True,
    )
    base, files = module.params['path'], module.params['files']
    if len(files) > module.params['max_files']:
        module.fail_json(msg='%d report files were given, more than max_files (%d); nothing was written.'
                         % (len(files), module.params['max_files']))
    planned, total = [], 0
    planned_dirs, planned_files = set(), set()
    for index, entry in enumerate(files):
        relative, content = entry.get('file'), entry.get('content')
        problem = path_problem(relative)
        if problem is None and not isinstance(content, str):
            problem = "its content is not text"
        if problem is None:
            problem = tree_problem(base, relative, planned_dirs, planned_files)
        if problem:
            module.fail_json(msg='Report file %d (%s) cannot be written below %s: %s; nothing was written.'
                             % (index + 1, shown(valid_text(relative)), base, problem))
        data = valid_text(content).encode('utf-8')
        total += len(data)
        planned.append((relative, data))
        planned_files.add(relative)
        parts = relative.split("/")
        planned_dirs.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
    if total > module.params['max_bytes']:
        module.fail_json(msg='The report files hold %d bytes, more than max_bytes (%d); nothing was written.'
                         % (total, module.params['max_bytes']))
    written = []
    if not module.check_mode:
        for relative, data in planned:
            try:
                # checked again: the tree may have changed since the plan (another run writing the same directory)
                problem = tree_problem(base, relative, set(), set())
                if problem:
                    raise ValueError(problem)
                target = os.path.join(base, relative)
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                reportfile.write_atomic(module, target, data)
            except (OSError, IOError, ValueError) as exc:
                module.fail_json(msg='Could not write the report file %s below %s: %s. Written before it: %d of %d.'
                                 % (shown(relative), base, to_native(exc), len(written), len(planned)),
                                 files=written, bytes=total, check_mode=False)
            written.append(relative)
    # report files are new files on the control node each run, not a change to the fleet
    module.exit_json(changed=False, files=written if not module.check_mode else [relative for relative, dummy in planned],
                     bytes=total, check_mode=module.check_mode)


if __name__ == '__main__':
    main()
