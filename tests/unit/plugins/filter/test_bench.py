# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark filters (bench_parse, bench_summary, bench_compare) on real results of vllm bench serve.

The fixtures are described in fixtures/README.md: real captures of vLLM
0.33.0 against the stand-in, and the same numbers in the field sets of
older and newer vLLM versions.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import json
import os
import subprocess
import sys

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.vllm.plugins.filter import bench as bench_filter
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures')
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FILTERS = bench_filter.FilterModule().filters()
PARSE, SUMMARY, COMPARE = FILTERS['bench_parse'], FILTERS['bench_summary'], FILTERS['bench_compare']
BASELINES = {'kimi-k2.5': {'single_stream_tok_s': 82, 'peak_tok_s': 2276}, 'minimax-m2.5': {'peak_tok_s': 4000}}

C1_TOK_S = 81.61000645358799
C64_TOK_S = 2263.0864882173037


def text(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def load(name):
    return json.loads(text(name))


# --------------------------------------------------------------------------- bench_parse


def test_parse_real_single_stream_level():
    row = PARSE(text('vllm-0.33.0-c1.json'), concurrency=1, source='c1.json')
    assert row['concurrency'] == 1
    assert (row['num_prompts'], row['completed'], row['failed']) == (4, 4, 0)
    assert row['output_tok_s'] == pytest.approx(C1_TOK_S)
    assert row['total_tok_s'] == pytest.approx(122.41500968038198)
    assert row['request_s'] == pytest.approx(0.31878908770932807)
    assert row['duration_s'] == pytest.approx(12.54748093399985)
    assert row['input_tok_s'] == pytest.approx(512 / 12.54748093399985)
    assert row['peak_output_tok_s'] == 82.0
    assert row['mean_ttft_ms'] == pytest.approx(25.73110250011723)
    assert row['median_tpot_ms'] == pytest.approx(12.196588166667498)
    assert row['p99_itl_ms'] == pytest.approx(24.942350820260774)
    assert row['p99_e2el_ms'] == pytest.approx(3141.441377350343)
    assert (row['total_input_tokens'], row['total_output_tokens']) == (512, 1024)
    assert (row['model_id'], row['backend'], row['source']) == ('kimi-k2.5', 'vllm', 'c1.json')
    assert row['ok'] is True
    assert row['notes'] == []


def test_parse_real_high_concurrency_level():
    row = PARSE(load('vllm-0.33.0-c64.json'))
    assert row['concurrency'] == 64
    assert (row['completed'], row['failed']) == (128, 0)
    assert row['output_tok_s'] == pytest.approx(C64_TOK_S)
    # the stand-in's aggregate cap: 2,276 tok/s
    assert abs(row['output_tok_s'] - 2276) / 2276 < 0.03
    assert row['total_tok_s'] == pytest.approx(3394.6297323259555)
    assert row['ok'] is True


def test_parse_real_server_killed_mid_level():
    row = PARSE(text('vllm-0.33.0-c8-server-killed.json'), concurrency=8)
    assert (row['completed'], row['failed']) == (8, 16)
    assert row['ok'] is False


def test_parse_real_server_down():
    row = PARSE(text('vllm-0.33.0-c1-server-down.json'), concurrency=1)
    assert (row['completed'], row['failed']) == (0, 4)
    assert row['output_tok_s'] == 0.0
    assert row['ok'] is False


@pytest.mark.parametrize('name,failed', [('variant-vllm-0.6-c64.json', 0), ('variant-vllm-0.6-c8-server-killed.json', 16)])
def test_parse_vllm_06_counts_failures_from_the_errors_list(name, failed):
    row = PARSE(text(name))
    assert row['failed'] == failed
    assert row['ok'] is (failed == 0)
    assert any('errors list' in note for note in row['notes'])
    assert row['mean_e2el_ms'] is None and row['peak_output_tok_s'] is None
    # the same numbers as the 0.33 capture they come from
    real = PARSE(text('vllm-0.33.0-' + name.split('-', 3)[3]))
    for key in ('output_tok_s', 'total_tok_s', 'request_s', 'mean_ttft_ms', 'median_itl_ms', 'p99_tpot_ms'):
        assert row[key] == pytest.approx(real[key]), key


def test_parse_vllm_04_oldest_field_set():
    row = PARSE(text('variant-vllm-0.4-c1.json'), concurrency=1)
    assert row['concurrency'] == 1  # no max_concurrency in the file: the sweep's level
    assert row['failed'] == 0  # num_prompts - completed
    assert row['request_s'] == pytest.approx(0.31878908770932807)  # from request_inthroughput
    assert row['total_tok_s'] == pytest.approx(C1_TOK_S + 512 / 12.54748093399985)
    assert row['mean_itl_ms'] is None
    assert row['mean_tpot_ms'] == pytest.approx(12.198167680392489)
    assert row['ok'] is True
    assert any('num_prompts - completed' in note for note in row['notes'])
    assert any('total_tok_s' in note for note in row['notes'])


def test_parse_future_nested_layout_with_strings():
    row = PARSE(text('variant-future-nested-c64.json'))
    real = PARSE(text('vllm-0.33.0-c64.json'))
    assert row['concurrency'] == 64 and row['num_prompts'] == 128
    for key in ('output_tok_s', 'total_tok_s', 'request_s', 'duration_s') + bench.ROW_METRICS:
        assert row[key] == pytest.approx(real[key]), key


def test_parse_append_result_file_takes_the_last_run():
    row = PARSE(text('variant-append-result-c1.jsonl'))
    assert row['output_tok_s'] == pytest.approx(C1_TOK_S)


def test_parse_derives_latencies_from_detailed_samples():
    data = load('vllm-0.33.0-c2-detailed.json')
    reported = PARSE(copy.deepcopy(data))
    for key in list(data):
        if key.endswith('_ms'):
            del data[key]
    derived = PARSE(data)
    for key in ('mean_ttft_ms', 'median_ttft_ms', 'p99_ttft_ms', 'mean_itl_ms', 'median_itl_ms', 'p99_itl_ms'):
        assert derived[key] == pytest.approx(reported[key], rel=1e-9), key
    assert derived['mean_tpot_ms'] is None  # not derivable without per-request output lengths
    assert any('per-request samples' in note for note in derived['notes'])


def test_parse_survives_malformed_fields():
    data = load('vllm-0.33.0-c1.json')
    data.update({'output_throughput': 'NaN', 'total_token_throughput': True, 'failed': 'n/a',
                 'mean_ttft_ms': None, 'max_concurrency': None, 'request_throughput': [1]})
    row = PARSE(data, concurrency=1)
    assert row['output_tok_s'] == pytest.approx(1024 / 12.54748093399985)
    assert row['total_tok_s'] == pytest.approx((1024 + 512) / 12.54748093399985)
    assert row['request_s'] == pytest.approx(4 / 12.54748093399985)
    assert row['failed'] == 0 and row['concurrency'] == 1
    assert row['mean_ttft_ms'] is None
    assert row['median_ttft_ms'] == pytest.approx(24.49618950004151)


def test_parse_notes_a_concurrency_mismatch():
    row = PARSE(text('vllm-0.33.0-c64.json'), concurrency=32)
    assert row['concurrency'] == 64
    assert any('asked for 32' in note for note in row['notes'])


@pytest.mark.parametrize('data,words', [
    ('', 'empty'),
    ('Traceback (most recent call last):', 'not JSON'),
    ('[1, 2]', 'without any result'),
    ('"text"', 'not a result object'),
    ('{"date": "x", "model_id": "m"}', 'neither "completed"'),
])
def test_parse_refuses_what_is_not_a_result(data, words):
    with pytest.raises(AnsibleFilterError) as exc:
        PARSE(data, source='/results/c1.json')
    assert words in str(exc.value)
    assert '/results/c1.json' in str(exc.value)


# --------------------------------------------------------------------------- bench_summary


def rows(*names):
    return [PARSE(text(name)) for name in names]


def test_summary_of_a_clean_sweep():
    summary = SUMMARY(rows('vllm-0.33.0-c64.json', 'vllm-0.33.0-c2-detailed.json', 'vllm-0.33.0-c1.json'))
    assert summary['concurrencies'] == [1, 2, 64]
    assert summary['single_stream_tok_s'] == pytest.approx(C1_TOK_S)
    assert summary['single_stream_decode_tok_s'] == pytest.approx(1000 / 12.198167680392489)
    assert summary['peak_tok_s'] == pytest.approx(C64_TOK_S)
    assert summary['peak_concurrency'] == 64
    assert summary['peak_total_tok_s'] == pytest.approx(3394.6297323259555)
    assert (summary['completed_requests'], summary['failed_requests']) == (136, 0)
    assert summary['failed_levels'] == [] and summary['ok'] is True


def test_summary_accepts_raw_result_dicts():
    summary = SUMMARY([load('vllm-0.33.0-c1.json'), load('vllm-0.33.0-c64.json')])
    assert summary['single_stream_tok_s'] == pytest.approx(C1_TOK_S)
    assert summary['peak_tok_s'] == pytest.approx(C64_TOK_S)


def test_summary_keeps_failed_levels_out_of_the_peak():
    summary = SUMMARY(rows('vllm-0.33.0-c1.json', 'vllm-0.33.0-c8-server-killed.json'))
    assert summary['failed_levels'] == [8]
    assert summary['failed_requests'] == 16
    assert summary['ok'] is False
    assert summary['peak_tok_s'] == pytest.approx(C1_TOK_S)  # not the killed level's 435 tok/s
    assert summary['peak_concurrency'] == 1


def test_summary_without_a_single_stream_level():
    summary = SUMMARY(rows('vllm-0.33.0-c64.json'))
    assert summary['single_stream_tok_s'] is None and summary['single_stream_decode_tok_s'] is None
    assert summary['peak_tok_s'] == pytest.approx(C64_TOK_S)
    assert SUMMARY(rows('vllm-0.33.0-c2-detailed.json'), single_stream_concurrency=2)['single_stream_tok_s'] == \
        pytest.approx(141.79619900846382)


def test_summary_of_nothing_is_not_ok():
    summary = SUMMARY([])
    assert summary['ok'] is False
    assert summary['single_stream_tok_s'] is None and summary['peak_tok_s'] is None
    with pytest.raises(AnsibleFilterError):
        SUMMARY('c1.json')


def test_summary_of_a_sweep_where_the_server_was_down():
    summary = SUMMARY(rows('vllm-0.33.0-c1-server-down.json'))
    assert summary['ok'] is False and summary['failed_levels'] == [1]
    assert summary['single_stream_tok_s'] is None


# --------------------------------------------------------------------------- bench_compare


@pytest.fixture
def clean_summary():
    return SUMMARY(rows('vllm-0.33.0-c1.json', 'vllm-0.33.0-c64.json'))


def test_compare_within_tolerance(clean_summary):
    verdict = COMPARE(clean_summary, BASELINES, model='kimi-k2.5', tolerance=0.10)
    assert verdict['checked'] is True and verdict['regressed'] is False
    assert verdict['regressions'] == []
    assert verdict['metrics']['single_stream_tok_s']['status'] == 'ok'
    assert verdict['metrics']['single_stream_tok_s']['ratio'] == pytest.approx(C1_TOK_S / 82)
    assert verdict['metrics']['peak_tok_s']['floor'] == pytest.approx(2276 * 0.9)
    # in words, not the result's keys
    assert verdict['message'] == ('within 10%% of the baseline of kimi-k2.5: single stream %s tok/s (baseline 82.0), '
                                  'peak 2,263.1 tok/s (baseline 2,276.0)' % '{:,.1f}'.format(C1_TOK_S))
    assert '_tok_s' not in verdict['message']


def test_compare_regression(clean_summary):
    verdict = COMPARE(clean_summary, {'kimi-k2.5': {'single_stream_tok_s': 100, 'peak_tok_s': 3000}},
                      model='kimi-k2.5', tolerance=0.05)
    assert verdict['regressed'] is True
    assert [m for m, e in verdict['metrics'].items() if e['status'] == 'regressed'] == \
        ['single_stream_tok_s', 'peak_tok_s']
    assert verdict['regressions'][0].startswith('single stream: 81.6 tok/s is 18.4% below the baseline 100.0')
    assert '24.6% below the baseline 3,000.0' in verdict['regressions'][1]
    assert verdict['message'].startswith('regression against the baseline of kimi-k2.5')


def test_compare_boundary_is_inclusive():
    at_floor = {'single_stream_tok_s': 90.0, 'peak_tok_s': None}
    below = {'single_stream_tok_s': 89.99, 'peak_tok_s': None}
    baseline = {'m': {'single_stream_tok_s': 100}}
    assert COMPARE(at_floor, baseline, model='m', tolerance=0.10)['regressed'] is False
    assert COMPARE(below, baseline, model='m', tolerance=0.10)['regressed'] is True
    assert COMPARE(below, baseline, model='m', tolerance=0)['regressed'] is True


def test_compare_not_measured_is_not_a_regression():
    summary = SUMMARY(rows('vllm-0.33.0-c64.json'))
    verdict = COMPARE(summary, BASELINES, model='kimi-k2.5')
    assert verdict['metrics']['single_stream_tok_s']['status'] == 'not_measured'
    assert verdict['metrics']['peak_tok_s']['status'] == 'ok'
    assert verdict['checked'] is True and verdict['regressed'] is False


def test_compare_model_lookup_and_partial_baselines(clean_summary):
    assert COMPARE(clean_summary, BASELINES, model='Kimi-K2.5')['baseline_model'] == 'kimi-k2.5'
    minimax = COMPARE(clean_summary, BASELINES, model='minimax-m2.5')
    assert minimax['metrics']['single_stream_tok_s']['status'] == 'no_baseline'
    assert minimax['metrics']['peak_tok_s']['status'] == 'regressed'  # 2,263 against 4,000
    unknown = COMPARE(clean_summary, BASELINES, model='llama-3')
    assert unknown['checked'] is False and unknown['regressed'] is False
    assert unknown['message'] == 'no baseline for model llama-3: nothing compared'
    single = COMPARE(clean_summary, {'single_stream_tok_s': 60, 'peak_tok_s': None}, model='anything')
    assert single['checked'] is True and single['metrics']['single_stream_tok_s']['status'] == 'above'
    assert single['message'].endswith('(above the baseline by more than the tolerance: single stream; '
                                      'consider raising the baseline)')


@pytest.mark.parametrize('tolerance', [1, 1.5, -0.1, 'ten percent', None])
def test_compare_refuses_a_bad_tolerance(clean_summary, tolerance):
    with pytest.raises(AnsibleFilterError) as exc:
        COMPARE(clean_summary, BASELINES, model='kimi-k2.5', tolerance=tolerance)
    assert 'tolerance must be a fraction' in str(exc.value)


def test_compare_refuses_a_baseline_that_is_not_a_dict(clean_summary):
    with pytest.raises(AnsibleFilterError) as exc:
        COMPARE(clean_summary, {'kimi-k2.5': 82}, model='kimi-k2.5')
    assert 'must be a dict' in str(exc.value)


# --------------------------------------------------------------------------- through Ansible itself


def test_filters_resolve_by_their_collection_name(tmp_path):
    """ansible-core finds the filters as gpufleet.vllm.* and they work inside a template."""
    ansible = os.path.join(os.path.dirname(sys.executable), 'ansible')
    if not os.path.exists(ansible):
        pytest.skip('ansible is not installed next to %s' % sys.executable)
    files = (os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), os.path.join(FIXTURES, 'vllm-0.33.0-c64.json'))
    expr = ("{{ [lookup('file', '%s') | gpufleet.vllm.bench_parse, lookup('file', '%s') | gpufleet.vllm.bench_parse]"
            " | gpufleet.vllm.bench_summary | gpufleet.vllm.bench_compare({'kimi-k2.5': {'peak_tok_s': 2276}},"
            " model='kimi-k2.5') | to_json }}" % files)
    config = tmp_path / 'ansible.cfg'
    config.write_text('[defaults]\n')
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.cache', 'collections'),
               ANSIBLE_LOCALHOST_WARNING='false', ANSIBLE_INVENTORY_UNPARSED_WARNING='false', NO_COLOR='1',
               ANSIBLE_STDOUT_CALLBACK='ansible.builtin.minimal', ANSIBLE_CONFIG=str(config))
    result = subprocess.run([ansible, 'localhost', '-c', 'local', '-m', 'ansible.builtin.debug', '-a',
                             'msg="%s"' % expr.replace('"', '\\"')], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False)
    output = result.stdout.decode()
    assert result.returncode == 0, output
    verdict = json.loads(json.loads(output[output.index('{'):])['msg'])
    assert verdict['metrics']['peak_tok_s']['measured'] == pytest.approx(C64_TOK_S)
    assert verdict['regressed'] is False


# --------------------------------------------------------------------------- bench_prompts


def test_prompts_per_level():
    prompts = FILTERS['bench_prompts']
    assert [prompts(level) for level in (1, 4, 8, 64, 256)] == [8, 8, 16, 128, 512]
    assert [prompts(level, 4, 2) for level in (1, 16, 64)] == [4, 32, 128]
    assert prompts(8, 4, 2, {8: 24}) == 24 and prompts(8, 4, 2, {'8': 24}) == 24 and prompts(16, 4, 2, {8: 24}) == 32
    assert prompts('64', '2', '3') == 192
    for bad in (('x',), (8, 4, 2, {'eight': 1}), (8, 4, 2, [8]), (8, 4, 2, {8: 'many'})):
        with pytest.raises(AnsibleFilterError):
            prompts(*bad)
