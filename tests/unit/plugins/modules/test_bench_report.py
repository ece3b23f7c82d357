# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.bench_report, its action plugin run in-process on real results of vllm bench serve (the figure: test_bench_plot)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import sys

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as report_utils
from writer_actions import action_runner

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'filter', 'fixtures')


def png_size(path):
    """(width, height) of a PNG as matplotlib reads it back."""
    from matplotlib import image
    pixels = image.imread(str(path), format='png')
    return pixels.shape[1], pixels.shape[0]


# --------------------------------------------------------------------------- the module


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


@pytest.fixture
def run_dir(tmp_path):
    """A run with a clean host (summary.json written by the role), a host cut short (no summary) and junk."""
    run = tmp_path / '20261202T153000Z'
    good = run / 'gpu-node-1'
    good.mkdir(parents=True)
    rows = []
    for name in ('vllm-0.33.0-c1.json', 'vllm-0.33.0-c64.json'):
        shutil.copy(os.path.join(FIXTURES, name), str(good / ('c%d.json' % fixture(name)['max_concurrency'])))
        rows.append(bench.parse_result(fixture(name)))
    summary = bench.summarize(rows)
    verdict = bench.compare(summary, {'kimi-k2.5': {'single_stream_tok_s': 82, 'peak_tok_s': 2276}}, 'kimi-k2.5')
    (good / 'summary.json').write_text(json.dumps({
        'schema': 1, 'host': 'gpu-node-1', 'run_id': run.name, 'model': 'kimi-k2.5', 'status': 'ok',
        'failure': None, 'input_len': 128, 'output_len': 256, 'base_url': 'http://127.0.0.1:8000',
        'summary': summary, 'verdict': verdict}))
    cut = run / 'gpu-node-2'
    cut.mkdir()
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), str(cut / 'c1.json'))
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c8-server-killed.json'), str(cut / 'c8.json'))
    (cut / 'c16.json').write_text('{"truncated": ')
    (run / 'empty-host').mkdir()
    (run / 'notes.txt').write_text('not a host')
    return run


@pytest.fixture
def run():
    return action_runner('bench_report')


def test_report_writes_markdown_and_plot(run_dir, run):
    code, result = run({'path': str(run_dir)})
    assert code == 0 and result['changed'] is True
    assert result['run_id'] == '20261202T153000Z'
    assert [h['host'] for h in result['hosts']] == ['gpu-node-1', 'gpu-node-2']
    node1, node2 = result['hosts']
    assert node1['status'] == 'ok' and node1['model'] == 'kimi-k2.5'
    assert node1['single_stream_tok_s'] == pytest.approx(81.61000645358799)
    assert (node1['peak_tok_s'], node1['peak_concurrency']) == (pytest.approx(2263.0864882173037), 64)
    assert node2['status'] == 'incomplete' and node2['failed_requests'] == 16
    assert len(result['problems']) == 1 and 'c16.json' in result['problems'][0]

    markdown = (run_dir / 'report.md').read_text()
    assert markdown.startswith('# vLLM benchmark fleet report\n')
    assert '![%s](report.png)' % report_utils.PNG_ALT in markdown
    assert '| gpu-node-1 | kimi-k2.5 | ok | 81.6 | 2,263.1 | 64 | 0 | within 10% of the baseline of kimi-k2.5' \
        in markdown
    assert '| gpu-node-2 | - | incomplete | 81.6 | 81.6 | 1 | 16 | - |' in markdown
    assert '| 64 | 128 | 128 | 0 | 2,263.1 | 3,394.6 | 8.84 |' in markdown
    assert '| 8 | 24 | 8 | 16 | 435.0 |' in markdown
    assert 'Unreadable: ' in markdown and 'empty-host' not in markdown and 'notes.txt' not in markdown

    assert png_size(run_dir / 'report.png') == (1400, 800)
    assert result['png'] == str(run_dir / 'report.png') and result['plot_skipped'] is None


def test_report_is_idempotent_and_follows_new_results(run_dir, run):
    run({'path': str(run_dir)})
    before = (run_dir / 'report.png').read_bytes()
    code, again = run({'path': str(run_dir)})
    assert again['changed'] is False
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c64.json'), str(run_dir / 'gpu-node-2' / 'c64.json'))
    code, updated = run({'path': str(run_dir)})
    assert updated['changed'] is True
    assert updated['hosts'][1]['peak_tok_s'] == pytest.approx(2263.0864882173037)
    assert (run_dir / 'report.png').read_bytes() != before


def test_report_check_mode_writes_nothing_and_diff_shows_markdown(run_dir, run):
    code, result = run({'path': str(run_dir), 'title': 'Reload of 2 Dec'}, check=True, diff=True)
    assert code == 0 and result['changed'] is True
    assert not (run_dir / 'report.md').exists() and not (run_dir / 'report.png').exists()
    assert result['diff']['before'] == ''
    assert result['diff']['after'].startswith('# Reload of 2 Dec\n')


def test_report_without_png(run_dir, run):
    code, result = run({'path': str(run_dir), 'png': False, 'run_id': 'nightly'})
    assert result['png'] is None and not (run_dir / 'report.png').exists()
    markdown = (run_dir / 'report.md').read_text()
    assert 'report.png' not in markdown and 'Run `nightly`' in markdown


def test_without_matplotlib_the_results_are_kept_and_the_markdown_says_why(tmp_path, run, monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)  # what an import on a control node without it does
    path = tmp_path / 'r1'
    code, result = run({'path': str(path), 'results': [record()]})
    warned = result.get('warnings') or []  # (Ansible shows a result's warnings)
    assert code == 0 and result['changed'] is True
    assert (path / 'gpu-node-3' / 'summary.json').is_file() and not (path / 'report.png').exists()
    assert result['png'] is None
    assert 'matplotlib cannot be imported on the control node' in result['plot_skipped']
    assert 'requirements/control.txt' in result['plot_skipped']
    assert len(warned) == 1 and warned[0].startswith('report.png was not drawn: matplotlib cannot be imported')
    markdown = (path / 'report.md').read_text()
    assert 'report.png' not in markdown
    assert 'No figure: matplotlib cannot be imported on the control node' in markdown
    assert '| gpu-node-3 | kimi-k2.5 | ok | 81.6 |' in markdown


def test_report_fails_clearly_without_the_run(tmp_path, run):
    code, result = run({'path': str(tmp_path / 'missing')})
    assert code == 1 and result['failed'] is True
    assert 'does not exist' in result['msg'] and 'run the benchmark role first' in result['msg']
    assert 'does not exist on the control node' in result['msg']  # (where the action runs, whatever the task's host)


# --------------------------------------------------------------------------- keeping results (the role's records)


def record(run_id='r1', host='gpu-node-3', c1='vllm-0.33.0-c1.json'):
    with open(os.path.join(FIXTURES, c1)) as handle:
        text = handle.read()
    rows = [bench.parse_result(text)]
    summary = bench.summarize(rows)
    return {'run_id': run_id, 'host': host, 'files': {'c1.json': text},
            'summary': {'host': host, 'run_id': run_id, 'model': 'kimi-k2.5', 'status': 'ok', 'failure': None,
                        'summary': summary, 'verdict': None}}


def test_results_are_kept_then_never_overwritten(tmp_path, run):
    path = tmp_path / 'r1'
    code, result = run({'path': str(path), 'results': [record()]})
    assert code == 0 and result['changed'] is True
    kept = path / 'gpu-node-3'
    assert sorted(os.listdir(str(kept))) == ['c1.json', 'summary.json']
    with open(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), 'rb') as handle:
        assert (kept / 'c1.json').read_bytes() == handle.read()
    assert json.loads((kept / 'summary.json').read_text())['status'] == 'ok'
    assert result['hosts'][0]['single_stream_tok_s'] == pytest.approx(81.61000645358799)
    assert str(kept / 'c1.json') in result['written'] and str(path / 'report.md') in result['written']

    code, again = run({'path': str(path), 'results': [record()]})
    assert code == 0 and again['changed'] is False and again['written'] == []

    code, clash = run({'path': str(path), 'results': [record(c1='vllm-0.33.0-c64.json')]})
    assert code == 1 and 'is already kept with other content: results are never overwritten' in clash['msg']
    with open(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), 'rb') as handle:
        assert (kept / 'c1.json').read_bytes() == handle.read()


def test_results_of_another_run_or_with_unsafe_names_are_refused(tmp_path, run):
    code, result = run({'path': str(tmp_path / 'r1'), 'results': [record(run_id='r0')]})
    assert code == 1 and 'belong to run r0, not to run r1' in result['msg']
    bad = record(host='../etc')
    code, result = run({'path': str(tmp_path / 'r1'), 'results': [bad]})
    assert code == 1 and 'cannot name a directory' in result['msg']
    bad = record()
    bad['files'] = {'../c1.json': '{}'}
    code, result = run({'path': str(tmp_path / 'r1'), 'results': [bad]})
    assert code == 1 and 'is not a plain file name' in result['msg']
    assert not (tmp_path / 'r1').exists()


def test_results_in_check_mode_write_nothing_but_show_in_the_report(tmp_path, run):
    code, result = run({'path': str(tmp_path / 'r1'), 'results': [record()]}, check=True, diff=True)
    assert code == 0 and result['changed'] is True
    assert not (tmp_path / 'r1').exists()
    assert result['hosts'][0]['host'] == 'gpu-node-3'
    assert '| gpu-node-3 | kimi-k2.5 | ok | 81.6 |' in result['diff']['after']


def test_render_false_only_keeps_results(tmp_path, run):
    code, result = run({'path': str(tmp_path / 'r1'), 'results': [record()], 'render': False})
    assert code == 0 and result['markdown'] is None and result['png'] is None
    assert sorted(os.listdir(str(tmp_path / 'r1'))) == ['gpu-node-3']


def test_a_failed_host_is_reported_as_failed_not_as_regressed(tmp_path, run):
    rows = [bench.parse_result(fixture(name)) for name in ('vllm-0.33.0-c1.json', 'vllm-0.33.0-c1-server-down.json')]
    rows[1]['concurrency'] = 8
    summary = bench.summarize(rows)
    item = record()
    item['summary'].update({'status': 'failed', 'failure': '4 of 4 requests failed at concurrency 8 (0 completed).',
                            'summary': summary,
                            'verdict': bench.compare(summary, {'peak_tok_s': 2276}, 'kimi-k2.5')})
    code, result = run({'path': str(tmp_path / 'r1'), 'results': [item]})
    assert code == 0 and result['hosts'][0]['status'] == 'failed'
    markdown = (tmp_path / 'r1' / 'report.md').read_text()
    assert '| gpu-node-3 | kimi-k2.5 | failed | 81.6 | 81.6 | 1 | 4 | 4 of 4 requests failed at concurrency 8' in markdown
    assert 'Not compared with the baseline: the sweep did not finish.' in markdown
    assert '**Regression**' not in markdown
    assert '| 8 | 4 | 0 | 4 | 0.0 | 0.0 | 0.00 | - | - | - |' in markdown
