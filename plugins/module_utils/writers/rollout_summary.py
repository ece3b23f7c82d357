# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's summary (summary.md, summary.json) on the control node: the action gpufleet.vllm.rollout_summary."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import files as reportfile
from ansible_collections.gpufleet.vllm.plugins.module_utils.writers.common import ControllerFiles, WriterFailed

ARGUMENT_SPEC = dict(
    path=dict(type='path', required=True),
    rows=dict(type='list', elements='dict', required=True),
    batches=dict(type='list', elements='list', default=[]),
)


def run(params, mode):
    """Write the summary into params['path'] (nothing in check mode, MODE a common.Mode); the task's result."""
    check_mode = mode.check_mode
    path, rows, batches = params['path'], params['rows'], params['batches']
    report = os.path.join(path, 'report.md')
    benchmark_report = report if os.path.isfile(report) else None
    lines = ['report: %s' % os.path.join(path, 'summary.md'),
             'batches: %s' % (rollout_report.batches_line(batches) or 'none')]
    if rollout_report.balancer_line(rows):
        lines.append(rollout_report.balancer_line(rows))
    # (without a failure's words or a skip's reason: the run printed each where it happened; summary.md has them)
    lines.extend(rollout_report.host_line(row, with_why=False) for row in rows)
    hosts = dict(failed_hosts=rollout_report.failed_hosts(rows), skipped_hosts=rollout_report.skipped_hosts(rows),
                 host_failures=rollout_report.host_failures(rows, os.path.join(path, 'summary.md')))
    files = []
    if not check_mode:
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            for name, text in (('summary.json', rollout_report.summary_json(rows, batches, benchmark_report)),
                               ('summary.md', rollout_report.markdown(rows, batches, 'report.md' if benchmark_report else None,
                                                                      lock_file=os.path.isfile(os.path.join(path, 'fleet.lock'))))):
                reportfile.write_atomic(ControllerFiles, os.path.join(path, name), text)
                files.append(os.path.join(path, name))
        except (OSError, IOError, ValueError) as exc:
            raise WriterFailed('Could not write the rollout summary into %s: %s. The hosts are as the lines below say.'
                               % (path, to_native(exc)), lines=lines, files=files, **hosts)
    # a report is a new file on the control node each run, not a change to the fleet
    return dict(changed=False, check_mode=check_mode, lines=lines, files=files, benchmark_report=benchmark_report, **hosts)
