#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: rollout_summary
short_description: Write the rollout's summary (summary.md, summary.json) into the run's report directory
version_added: 0.1.0
description:
  - Writes the summary of a rollout run, one row per host, as a Markdown table (C(summary.md)) and as JSON
    (C(summary.json)) into O(path), and returns one readable line per host for the play output.
  - The rows come from the filter P(gpufleet.vllm.rollout_rows#filter); the playbook C(gpufleet.vllm.rollout)
    runs it once per run (C(run_once)).
  - It is an action plugin and runs on the control node, in the Python that runs Ansible, whatever host the task is
    for. No module is sent to a host and no connection is opened, so the task needs no C(delegate_to).
  - "When the quality gate ran on a host (its row's C(quality), from the host's C(quality_result)), its figures stand
    next to the reference's: in the host's line (V(quality passed: 8/8 answers, NLL 1.2345), then the reference's NLL
    and the relative difference),
    in an C(answer quality) column of the table, and in a small table per host under C(## Answer quality) at the end
    of C(summary.md) (verdict, answers matched, the passage's NLL and the reference's, the relative difference and its
    tolerance, the build and the reference's), with what failed or why nothing was measured."
  - Every value is written on one line of the table (control characters escaped, C(|) escaped), so a host name or a
    failure message cannot break the table.
  - Both files are written atomically (a temporary file renamed over the old one). The result's C(changed) is always
    false, since a report is a new file on the control node each run, not a change to the fleet.
options:
  path:
    description: The run's report directory; created when missing.
    type: path
    required: true
  rows:
    description: One dict per host, as P(gpufleet.vllm.rollout_rows#filter) returns them.
    type: list
    elements: dict
    required: true
  batches:
    description: The batches in the order they ran (lists of host names); the first is the canary.
    type: list
    elements: list
    default: []
extends_documentation_fragment:
  - gpufleet.vllm.attributes.controller_writer
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.vllm.internal.module
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written; the lines are returned all the same.
  diff_mode:
    support: none
seealso:
  - module: gpufleet.vllm.bench_report
author:
  - gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Write the summary on the control node (once per run)
  gpufleet.vllm.rollout_summary:
    path: "{{ gpufleet_report_dir }}"
    rows: "{{ rollout_targets | gpufleet.vllm.rollout_rows(hostvars) }}"
    batches: "{{ rollout_targets | gpufleet.vllm.rollout_batches(hostvars) }}"
  run_once: true
  register: rollout_summary
"""

RETURN = r"""
check_mode:
  description:
    - Whether the task ran in check mode (nothing written on the control node).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
lines:
  description:
    - The report's path, the batches, the load balancer's sentence (when a host restarted), then one line per host (as
      P(gpufleet.vllm.rollout_line#filter) writes it) without a failed host's failure or a skipped host's reason,
      which the run printed where they happened (the failed task, the host's plan) and C(summary.md) has in full.
  returned: always
  type: list
  elements: str
failed_hosts:
  description: The hosts whose status starts with C(FAILED).
  returned: always
  type: list
  elements: str
skipped_hosts:
  description: The hosts with status C(SKIPPED), left untouched because their GPUs are not healthy (row C(skipped) says
    why).
  returned: always
  type: list
  elements: str
host_failures:
  description:
    - For each host of RV(failed_hosts) and RV(skipped_hosts), the sentence that fails it at the end of the run. For a
      failed host, whether it was rolled back and where to read why (the run printed its failure where it happened,
      and C(summary.md) has it); for a skipped host, where to read why (its plan, printed in the pre-flight, and
      C(summary.md)).
  returned: always
  type: dict
  sample: {"gpu-node-2": "gpu-node-2 failed and was rolled back: why is printed above, where it failed, and in
    ./gpufleet-reports/rollout-20261206T101500Z/summary.md."}
files:
  description: The files written (none in check mode).
  returned: always
  type: list
  elements: str
benchmark_report:
  description: The benchmark's fleet report of this run (C(report.md) in O(path)) when there is one, else null.
  returned: always
  type: str
"""
