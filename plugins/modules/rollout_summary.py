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
    runs this module once, on the control node.
  - Every value is written on one line of the table (control characters escaped, C(|) escaped), so a host name or a
    failure message cannot break the table.
  - Both files are written atomically (a temporary file renamed over the old one).
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
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
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
- name: Write the summary on the control node
  gpufleet.vllm.rollout_summary:
    path: "{{ gpufleet_report_dir }}"
    rows: "{{ rollout_targets | gpufleet.vllm.rollout_rows(hostvars) }}"
    batches: "{{ rollout_targets | gpufleet.vllm.rollout_batches(hostvars) }}"
  delegate_to: localhost
  run_once: true
  register: rollout_summary
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (nothing written on the control node).
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

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import files as reportfile


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            rows=dict(type='list', elements='dict', required=True),
            batches=dict(type='list', elements='list', default=[]),
        ),
        supports_check_mode=True,
    )
    path, rows, batches = module.params['path'], module.params['rows'], module.params['batches']
    report = os.path.join(path, 'report.md')
    benchmark_report = report if os.path.isfile(report) else None
    lines = ['report: %s' % os.path.join(path, 'summary.md'),
             'batches: %s' % (rollout_report.batches_line(batches) or 'none')]
    if rollout_report.balancer_line(rows):
        lines.append(rollout_report.balancer_line(rows))
    # (without a failure's words or a skip's reason: the run printed each where it happened; summary.md has them)
    lines.extend(rollout_report.host_line(row, with_why=False) for row in rows)
    files = []
    if not module.check_mode:
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            for name, text in (('summary.json', rollout_report.summary_json(rows, batches, benchmark_report)),
                               ('summary.md', rollout_report.markdown(rows, batches, 'report.md' if benchmark_report else None,
                                                                      lock_file=os.path.isfile(os.path.join(path, 'fleet.lock'))))):
                reportfile.write_atomic(module, os.path.join(path, name), text)
                files.append(os.path.join(path, name))
        except (OSError, IOError, ValueError) as exc:
            module.fail_json(msg='Could not write the rollout summary into %s: %s. The hosts are as the lines below say.'
                             % (path, to_native(exc)), lines=lines, files=files,
                             failed_hosts=rollout_report.failed_hosts(rows),
                             skipped_hosts=rollout_report.skipped_hosts(rows),
                             host_failures=rollout_report.host_failures(rows, os.path.join(path, 'summary.md')))
    # a report is a new file on the control node each run, not a change to the fleet
    module.exit_json(changed=False, check_mode=module.check_mode, lines=lines, files=files, failed_hosts=rollout_report.failed_hosts(rows),
                     skipped_hosts=rollout_report.skipped_hosts(rows), benchmark_report=benchmark_report,
                     host_failures=rollout_report.host_failures(rows, os.path.join(path, 'summary.md')))


if __name__ == '__main__':
    main()
