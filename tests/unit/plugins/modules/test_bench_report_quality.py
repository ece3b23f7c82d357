# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.bench_report: a host's quality gate figures (the benchmark role's record passes quality_result in its
summary) kept in summary.json as a checked digest and shown in report.md as the host's Answer quality table."""

import json
import os
import re

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench

import quality_results as results
from writer_actions import action_runner

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'filter', 'fixtures')
RUN = '20261207T120000Z'


def level_files():
    files, rows = {}, []
    for name in ('vllm-0.33.0-c1.json', 'vllm-0.33.0-c64.json'):
        with open(os.path.join(FIXTURES, name)) as handle:
            data = json.load(handle)
        files['c%d.json' % data['max_concurrency']] = json.dumps(data)
        rows.append(bench.parse_result(data))
    return files, bench.summarize(rows)


def record(host, quality):
    """A host's record as roles/benchmark/tasks/run.yml builds it, its summary's quality the host's quality_result."""
    files, summary = level_files()
    verdict = bench.compare(summary, {'kimi-k2.5': {'single_stream_tok_s': 82, 'peak_tok_s': 2276}}, 'kimi-k2.5')
    return {'host': host, 'run_id': RUN, 'files': files, 'summary': {
        'schema': 1, 'host': host, 'run_id': RUN, 'model': 'kimi-k2.5', 'quantization': 'nvfp4', 'mode': 'gate',
        'vllm_version': '0.33.0', 'status': 'ok', 'failure': None, 'summary': summary, 'verdict': verdict,
        'quality': quality}}


@pytest.fixture
def run():
    return action_runner('bench_report')


def report_of(run, tmp_path, records, check=False):
    rc, result = run({'path': str(tmp_path / RUN), 'run_id': RUN, 'png': False, 'results': records}, check=check)
    assert rc == 0, result
    return result


def host_section(markdown, host):
    """The lines of HOST's section of report.md (from its heading to the next host's)."""
    lines = markdown.splitlines()
    start = lines.index('## %s' % host)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith('## ')), len(lines))
    return lines[start:end]


def test_each_host_gets_its_answer_quality_table_and_summary_json_a_digest(run, tmp_path):
    failed = results.gated(nll=6.9, differing=7)
    result = report_of(run, tmp_path, [record('gpu-a01', results.gated()), record('gpu-a02', failed),
                                       record('gpu-a03', results.not_gated()), record('gpu-a04', None),
                                       record('gpu-a05', results.skipped())])
    md = (tmp_path / RUN / 'report.md').read_text()
    a01 = host_section(md, 'gpu-a01')
    assert '### Answer quality' in a01
    assert '| verdict | passed |  |  |' in a01
    assert '| passage mean NLL per token | 1.2345 over 120 tokens | 1.2301 over 120 tokens | same token count |' in a01
    assert '| relative difference | +0.4 % |  | within ±5.0 % |' in a01
    assert '| build | 0.33.0 | 0.32.0, recorded 2026-12-01T10:00:00Z |  |' in a01
    a02 = host_section(md, 'gpu-a02')
    assert '| verdict | **FAILED** |  |  |' in a02
    assert ('| greedy answers matching the reference | 1 of 8 (12 %) |  | at least 80 %, first 16 tokens compared |'
            in a02)
    assert '| relative difference | +460.9 % |  | within ±5.0 % |' in a02
    assert any(line.startswith('- the passage\'s mean NLL is 6.9000 per token') for line in a02)
    assert '| verdict | not gated: no reference for this model and quantisation |  |  |' in host_section(md, 'gpu-a03')
    for host in ('gpu-a04', 'gpu-a05'):
        assert not any('quality' in line.lower() for line in host_section(md, host))
    kept = json.loads((tmp_path / RUN / 'gpu-a02' / 'summary.json').read_text())
    assert kept['quality']['verdict'] == 'failed' and kept['quality']['passage']['reference_nll'] == 1.2301
    assert 'figures' not in kept['quality'] and 'per_prompt' not in json.dumps(kept['quality'])
    # the gate did not run: summary.json as before, without the key
    assert 'quality' not in json.loads((tmp_path / RUN / 'gpu-a04' / 'summary.json').read_text())
    assert 'quality' not in json.loads((tmp_path / RUN / 'gpu-a05' / 'summary.json').read_text())
    hosts = dict((line['host'], line['quality']) for line in result['hosts'])
    assert hosts == {'gpu-a01': 'quality passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %)',
                     'gpu-a02': 'quality FAILED: 1/8 answers, NLL 6.9000 (ref 1.2301, +460.9 %)',
                     'gpu-a03': 'quality not gated (no reference): NLL 1.2345', 'gpu-a04': None, 'gpu-a05': None}


def test_a_second_run_of_the_same_records_changes_nothing(run, tmp_path):
    records = [record('gpu-a01', results.gated())]
    report_of(run, tmp_path, records)
    again = report_of(run, tmp_path, records)
    assert again['changed'] is False and again['written'] == []


def test_check_mode_shows_the_table_of_the_planned_host(run, tmp_path):
    result = report_of(run, tmp_path, [record('gpu-a01', results.not_measured())], check=True)
    assert result['hosts'][0]['quality'] == 'quality not measured (timed out)'
    assert not (tmp_path / RUN).exists()


def test_hostile_strings_in_a_quality_result_or_a_hand_edited_summary_stay_text(run, tmp_path):
    hostile = '0.33.0\u202e\n## heading <img src=x> | [a](http://x)'
    result = results.gated(nll=6.9, differing=7, build=hostile)
    result.update(failures=['one\ntwo | <b>x</b>'], reference={'build': hostile, 'recorded_at': '\u202e'})
    report_of(run, tmp_path, [record('gpu-a01', result), record('gpu-a02', results.not_measured(hostile, hostile))])
    # a summary.json edited by hand after the run: read again, checked again
    edited = tmp_path / RUN / 'gpu-a03'
    edited.mkdir()
    summary = record('gpu-a03', None)['summary']
    summary['quality'] = {'verdict': 'passed', 'answers': {'matched': '<b>8</b>', 'total': 8},
                          'passage': {'nll': 'NaN', 'reference_nll': float('inf')}, 'build': ['x'], 'msg': hostile}
    (edited / 'summary.json').write_text(json.dumps(summary))
    report_of(run, tmp_path, [])
    md = (tmp_path / RUN / 'report.md').read_text()
    assert '\u202e' not in md and '\\u202e' in md
    assert not re.search(r'(?<!\\)<(img|b)|(?<!\\)\]\(http', md)
    assert '\n## heading' not in md and '\ntwo' not in md
    for line in md.splitlines():
        quality_rows = ('| answer quality', '| verdict', '| build', '| passage', '| relative', '| greedy')
        if line.startswith(quality_rows):
            assert line.replace('\\|', '').count('|') == 5, line
    a03 = host_section(md, 'gpu-a03')
    assert '| verdict | passed |  |  |' in a03 and '| passage mean NLL per token | infinite |  |  |' in a03
    assert not any('<b>8' in line or 'NaN' in line for line in a03)
