# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the quality gate (documented in quality_*.yml next to this file).

The logic lives in plugins/module_utils/quality.py, shared with gpufleet.vllm.vllm_quality_info.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils import quality
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import one_line


class _IndentedDumper(yaml.SafeDumper):
    """Sequences indented under their key, as yamllint's default (and ansible-lint) want in group_vars."""

    def increase_indent(self, flow=False, indentless=False):
        return super(_IndentedDumper, self).increase_indent(flow, False)


def quality_recorded(hosts, hostvars, nll_tolerance=0.05, recorded_at=''):
    """The references the HOSTS recorded (their quality_result.entry) -> one table, the hosts' agreement, the file."""
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(host, str) for host in hosts):
        raise AnsibleFilterError('quality_recorded: expected a list of host names, got %s' % type(hosts).__name__)
    try:
        tolerance = float(nll_tolerance)
    except (TypeError, ValueError):
        tolerance = None
    # (NaN compares false with everything: every host would be said to agree)
    if tolerance is None or not 0 <= tolerance <= 10:
        raise AnsibleFilterError('quality_recorded: nll_tolerance must be a number from 0 to 10, got %r' % (
            nll_tolerance,))
    records = []
    for host in hosts:
        result = (hostvars or {}).get(host, {}).get('quality_result')
        if isinstance(result, dict) and isinstance(result.get('entry'), dict):
            records.append({'host': host, 'entry': result['entry']})
    merged = quality.merge_recorded(records, nll_tolerance=tolerance)
    lines = ['# Quality references recorded %s by gpufleet.vllm.quality (quality_mode=record) on %s.' % (
        one_line(recorded_at or 'now'), one_line(', '.join(record['host'] for record in records) or 'no host'))]
    lines.extend('# %s.' % one_line(note) for note in merged['notes'])
    lines.append('# Review them, then copy quality_references into your inventory (group_vars) and gate with '
                 'quality_mode=gate.')
    # (plain data: the values Ansible hands a filter are its own tagged types, which safe_dump does not know)
    plain = json.loads(json.dumps({'quality_references': merged['references']}))
    body = yaml.dump(plain, Dumper=_IndentedDumper, default_flow_style=False, sort_keys=True, allow_unicode=False,
                     width=120)
    merged['content'] = '\n'.join(lines) + '\n---\n' + body
    return merged


class FilterModule(object):
    def filters(self):
        return {'quality_recorded': quality_recorded}
