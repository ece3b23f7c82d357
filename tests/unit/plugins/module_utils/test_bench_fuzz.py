# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile ``vllm bench serve`` results through the parser of bench_serve and the bench filters.

Whatever the file holds (wrong types, NaN/Infinity, huge numbers, deep
nesting, keys that are not text), the parser returns a row whose figures
are finite numbers or None, or raises BenchResultError (the filters:
AnsibleFilterError). Never another exception.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.vllm.plugins.filter import bench as bench_filters
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench

KNOWN_KEYS = ['max_concurrency', 'num_prompts', 'completed', 'failed', 'errors', 'duration', 'benchmark_duration',
              'total_input_tokens', 'total_output_tokens', 'output_throughput', 'input_throughput',
              'total_token_throughput', 'request_throughput', 'request_inthroughput', 'max_output_tokens_per_s',
              'mean_ttft_ms', 'median_tpot_ms', 'p99_itl_ms', 'p50_e2el_ms', 'ttft', 'ttft_ms', 'tpot_s', 'metrics',
              'ttfts', 'latencies', 'itls', 'model_id', 'backend', 'date', 'label', 'endpoint_type']
NUMERIC = ('concurrency', 'num_prompts', 'completed', 'failed', 'duration_s', 'output_tok_s', 'input_tok_s',
           'total_tok_s', 'request_s', 'peak_output_tok_s', 'total_input_tokens', 'total_output_tokens') + bench.ROW_METRICS

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.sampled_from([10 ** 309, -10 ** 400, 2 ** 63, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(['nan', 'inf', '-1', '1e999', '12', ' 3.5 ', '', '\x00', '\udcff']),
    st.text(max_size=20),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5),
    st.dictionaries(st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=8)), inner, max_size=5)), max_leaves=12)
results = st.dictionaries(st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=8)), values, max_size=10)
# what a filter may be handed from YAML: keys need not be text
python_results = st.dictionaries(st.one_of(st.sampled_from(KNOWN_KEYS), st.integers(), st.none()), values, max_size=10)


def check_row(row):
    for key in NUMERIC:
        value = row[key]
        assert value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)), (key, value)
    assert isinstance(row['notes'], list)
    json.dumps(row, allow_nan=False)


def parse(data, **kwargs):
    try:
        row = bench.parse_result(data, **kwargs)
    except bench.BenchResultError as exc:
        assert str(exc)
        return None
    check_row(row)
    return row


@SETTINGS
@given(results, st.one_of(st.none(), st.integers(), st.text(max_size=4), st.floats()))
def test_parse_result_of_any_dict_is_a_clean_row_or_a_clean_error(data, concurrency):
    parse(data, concurrency=concurrency)


@SETTINGS
@given(st.one_of(results, values))
def test_parse_result_of_any_json_text_is_a_clean_row_or_a_clean_error(data):
    text = json.dumps(data)  # NaN and Infinity as Python's json writes them, as vllm does
    parse(text)
    parse(text.encode('utf-8', 'surrogatepass'))
    parse('\n'.join([text, text[:len(text) // 2]]))


@SETTINGS
@given(st.binary(max_size=200))
def test_parse_result_of_any_bytes_is_a_clean_row_or_a_clean_error(raw):
    parse(raw)


@settings(SETTINGS, max_examples=50)
@given(st.lists(st.one_of(results, python_results), max_size=3), st.integers(min_value=-2, max_value=70))
def test_summary_and_compare_of_any_results(rows, single):
    try:
        summary = bench.summarize(rows, single_stream_concurrency=single)
    except bench.BenchResultError:
        return
    json.dumps(summary, allow_nan=False)
    for row in summary['levels']:
        check_row(row)
    verdict = bench.compare(summary, {'m': {'single_stream_tok_s': 10, 'peak_tok_s': 1e308}}, model='m')
    assert verdict['checked'] is True


@SETTINGS
@given(python_results, st.one_of(st.none(), st.text(max_size=4), st.lists(st.integers(), max_size=2)))
def test_filters_raise_only_ansible_filter_errors(data, model):
    try:
        row = bench_filters.bench_parse(data, source='c1.json')
    except AnsibleFilterError as exc:
        assert 'bench_parse' in str(exc)
    else:
        check_row(row)
    try:
        summary = bench_filters.bench_summary([data, data])
    except AnsibleFilterError as exc:
        assert 'bench_summary' in str(exc)
        return
    try:
        bench_filters.bench_compare(summary, {'x': {'peak_tok_s': 1}}, model=model)
    except AnsibleFilterError as exc:
        assert 'bench_compare' in str(exc)


@pytest.mark.parametrize('text', [
    '[' * 100000 + ']' * 100000,
    '{"completed": 1, "metrics": ' * 5000 + '{}' + '}' * 5000,
    '{"completed": %s}' % ('9' * 5000),
])
def test_deep_or_huge_json_is_a_clean_error(text):
    with pytest.raises(bench.BenchResultError) as exc:
        bench.parse_result(text)
    assert 'result' in str(exc.value)


def test_huge_numbers_are_not_figures():
    row = bench.parse_result({'completed': 10 ** 400, 'num_prompts': 4, 'failed': 0, 'output_throughput': -10 ** 400,
                              'duration': 10 ** 309})
    assert row['output_tok_s'] is None and row['duration_s'] is None
    assert row['completed'] == 4 and 'completed = num_prompts - failed (no "completed" field)' in row['notes']


def test_nested_metrics_deeper_than_json_allows_are_bounded():
    data = {'completed': 1, 'failed': 0}
    cursor = data
    for dummy in range(3000):
        cursor['metrics'] = {}
        cursor = cursor['metrics']
    cursor['ttft_ms'] = {'mean': 5}
    row = bench.parse_result(data)
    assert row['mean_ttft_ms'] is None
    assert row['completed'] == 1


def test_summary_of_rows_with_wrong_types():
    rows = [{'concurrency': 'one', 'output_tok_s': 'fast', 'notes': [], 'completed': 3, 'failed': 0},
            {'concurrency': 2, 'output_tok_s': 5.0, 'notes': 'x', 'completed': 1, 'failed': 0}]
    summary = bench.summarize(rows)
    assert summary['peak_tok_s'] == 5.0
    json.dumps(summary, allow_nan=False)


def test_summary_with_mixed_key_types():
    with pytest.raises(bench.BenchResultError) as exc:
        bench.summarize([{1: 2, 'a': 3}])
    assert 'not a vllm bench serve result' in str(exc.value)


@SETTINGS
@given(st.one_of(scalars, st.lists(scalars, max_size=2)), st.one_of(scalars), st.one_of(scalars),
       st.one_of(st.none(), st.dictionaries(scalars.filter(lambda v: not isinstance(v, float) or not math.isnan(v)), scalars, max_size=3)))
def test_bench_prompts_raises_only_ansible_filter_errors(concurrency, minimum, per_concurrency, per_level):
    try:
        prompts = bench_filters.bench_prompts(concurrency, minimum, per_concurrency, per_level)
    except AnsibleFilterError as exc:
        assert str(exc).startswith('bench_prompts: ')
    else:
        assert isinstance(prompts, int)


@pytest.mark.parametrize('args', [(float('inf'),), (1, float('inf')), (1, 8, 2, {1: float('inf')})])
def test_bench_prompts_of_infinity_is_a_filter_error(args):
    with pytest.raises(AnsibleFilterError) as exc:
        bench_filters.bench_prompts(*args)
    assert 'bench_prompts:' in str(exc.value)
