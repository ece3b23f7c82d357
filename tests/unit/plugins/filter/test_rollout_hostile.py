# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_line and audit_line on hostile values: one line, no control characters, no exception."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_line
from ansible_collections.gpufleet.vllm.plugins.filter.rollout import rollout_line

CONTROL = re.compile('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]')
KEYS = ['host', 'status', 'build_before', 'build_after', 'pristine_before', 'downtime_s', 'artifacts_removed',
        'artifacts_bytes', 'config_keys_removed', 'pristine', 'single_stream_tok_s', 'peak_tok_s', 'benchmark',
        'needed', 'failure', 'drift', 'reason', 'build', 'integrity', 'config_keys_present', 'dumps', 'dumps_bytes',
        'unit', 'unit_state', 'config_errors', 'gpu_problems', 'config_policy', 'config_reason']
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.binary().map(os.fsdecode))
values = st.one_of(scalars, st.lists(scalars, max_size=3))


def one_clean_line(line):
    assert isinstance(line, str)
    line.encode('utf-8')
    assert not CONTROL.search(line), line


def test_a_failure_with_newlines_and_terminal_escapes_stays_on_one_line():
    line = rollout_line({'host': 'gpu-a01\ngpu-a02: updated', 'status': 'failed',
                         'failure': 'uv said:\nerror: boom\r\n\x1b[2J\x1b[31mred\ttab\u2028'})
    assert line == ('gpu-a01\\ngpu-a02: updated: failed -- uv said:\\nerror: boom\\r\\n\\x1b[2J\\x1b[31mred\\ttab\\u2028')


def test_odd_bytes_in_a_value_are_escaped():
    line = rollout_line({'host': os.fsdecode(b'gpu-\xff'), 'status': 'updated', 'build_after': b'0.33\xfe'})
    assert line == 'gpu-\\xff: updated, vllm ? -> 0.33\\xfe'


def test_audit_line_survives_wrong_types():
    line = audit_line({'host': 'h\n1', 'drift': ['config', 7, None], 'config_keys_present': 'many\n', 'dumps': [1],
                       'config_errors': 'one error\nsecond line', 'gpu_problems': [b'\xff', 3]})
    assert line == ('h\\n1: DRIFT: config, 7, None, integrity unknown, unit unknown, one error\\nsecond line, '
                    '\\xff, 3')


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=12))
def test_any_row_gives_one_clean_line(row):
    one_clean_line(rollout_line(row))
    one_clean_line(audit_line(row))
