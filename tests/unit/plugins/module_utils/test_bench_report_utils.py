# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils.bench.report and the trend of module_utils.bench.history, function by function: the branches the
module's tests do not reach on their own (kept results never overwritten, what a run directory holds, each part of
report.md, the trend's edge cases, the lock's wait)."""

import json
import os
import shutil

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import history as bench_history
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as bench_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline, DeadlinePassed

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'filter', 'fixtures')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


# --------------------------------------------------------------------------- plan_results


def test_plan_results_plans_missing_files_and_leaves_the_same_ones(tmp_path):
    results = [{'host': 'gpu-node-1', 'files': {'c1.json': '{"a": 1}', 'c8.json': {'b': 2}},
                'summary': {'status': 'ok'}}]
    planned = bench_report.plan_results(str(tmp_path), results)
    assert planned == [(str(tmp_path / 'gpu-node-1' / 'c1.json'), b'{"a": 1}'),
                       (str(tmp_path / 'gpu-node-1' / 'c8.json'), b'{"b": 2}'),
                       (str(tmp_path / 'gpu-node-1' / 'summary.json'), b'{\n  "status": "ok"\n}\n')]
    for path, data in planned:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as handle:
            handle.write(data)
    assert bench_report.plan_results(str(tmp_path), results) == []
    assert bench_report.plan_results(str(tmp_path), None) == []
    changed = [dict(results[0], summary={'status': 'failed'})]
    with pytest.raises(bench_report.HistoryError, match='summary.json is already kept with other content'):
        bench_report.plan_results(str(tmp_path), changed)


@pytest.mark.parametrize('results, why', [
    (['not a dict'], 'each result must be a dict'),
    ([{'host': None}], "host name None cannot name a directory"),
    ([{'host': '../etc'}], "host name '../etc' cannot name a directory"),
    ([{'host': '.hidden'}], "host name '.hidden' cannot name a directory"),
    ([{'host': 'gpu-node-1\n'}], "host name 'gpu-node-1\\\\n' cannot name a directory"),
    ([{'host': 'h', 'files': {'../x.json': '{}'}}], "file name '../x.json' of host h is not a plain file name"),
    ([{'host': 'h', 'files': {'a/b.json': '{}'}}], "file name 'a/b.json' of host h is not a plain file name"),
    ([{'host': 'h', 'files': {'c1.json\n': '{}'}}], "file name 'c1.json\\\\n' of host h is not a plain file name"),
])
def test_plan_results_refuses_what_cannot_be_a_plain_name(tmp_path, results, why):
    with pytest.raises(bench_report.HistoryError, match=why):
        bench_report.plan_results(str(tmp_path), results)


# --------------------------------------------------------------------------- collect_run


def summary_of(names):
    rows = [bench.parse_result(fixture(name)) for name in names]
    return bench.summarize(rows)


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / 'run'
    done = run / 'gpu-node-10'
    done.mkdir(parents=True)
    summary = summary_of(['vllm-0.33.0-c1.json', 'vllm-0.33.0-c64.json'])
    (done / 'summary.json').write_text(json.dumps({'model': 'kimi-k2.5', 'summary': summary, 'verdict': 'not a dict'}))
    cut = run / 'gpu-node-2'
    cut.mkdir()
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), str(cut / 'c1.json'))
    (cut / 'c1.pytorch.json').write_text('{"trace": 1}')
    (cut / 'c2.json').write_text('{"truncated": ')
    (cut / 'notes.txt').write_text('x')
    (cut / 'sub.json').mkdir()
    (run / 'empty-host').mkdir()
    (run / '.hidden').mkdir()
    (run / '.hidden' / 'c1.json').write_text('{}')
    (run / 'a-file').write_text('x')
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), str(elsewhere / 'c1.json'))
    os.symlink(str(elsewhere), str(run / 'linked-host'))
    return run


def test_collect_run_reads_summaries_and_level_files_and_skips_the_rest(run_dir):
    entries = bench_report.collect_run(str(run_dir))
    assert [entry['host'] for entry in entries] == ['gpu-node-10', 'gpu-node-2']
    done, cut = entries
    assert done['status'] == 'ok' and done['verdict'] is None and done['problems'] == []
    assert done['meta'] == {'model': 'kimi-k2.5'} and len(done['summary']['levels']) == 2
    assert cut['status'] == 'incomplete' and cut['verdict'] is None and cut['meta'] == {}
    assert [row['concurrency'] for row in cut['summary']['levels']] == [1]
    assert len(cut['problems']) == 1 and cut['problems'][0].startswith(str(run_dir / 'gpu-node-2' / 'c2.json') + ': ')


def test_collect_run_status_comes_from_the_summary_when_the_file_has_none(tmp_path):
    run = tmp_path / 'run'
    for host, ok in (('good', True), ('bad', False)):
        (run / host).mkdir(parents=True)
        summary = {'ok': ok, 'levels': 'not a list', 'peak_tok_s': 'NaN', 'single_stream_tok_s': '82.5',
                   'peak_concurrency': 2.5, 'failed_requests': -1}
        (run / host / 'summary.json').write_text(json.dumps({'summary': summary}))
    (run / 'said' / 'summary.json').parent.mkdir()
    (run / 'said' / 'summary.json').write_text(json.dumps({'status': 'regressed', 'summary': {'levels': [1, {}]}}))
    entries = dict((entry['host'], entry) for entry in bench_report.collect_run(str(run)))
    assert entries['good']['status'] == 'ok' and entries['bad']['status'] == 'failed'
    assert entries['said']['status'] == 'regressed' and len(entries['said']['summary']['levels']) == 1
    clean = entries['good']['summary']
    assert clean['levels'] == [] and clean['peak_tok_s'] is None and clean['single_stream_tok_s'] == 82.5
    assert clean['peak_concurrency'] is None and clean['failed_requests'] is None


def test_collect_run_lists_a_summary_too_large_or_unreadable_and_goes_on(tmp_path):
    run = tmp_path / 'run'
    (run / 'big').mkdir(parents=True)
    (run / 'big' / 'summary.json').write_text(json.dumps({'summary': {}, 'pad': 'x' * 200}))
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), str(run / 'big' / 'c1.json'))
    (run / 'broken').mkdir()
    (run / 'broken' / 'summary.json').write_text('{')
    entries = dict((entry['host'], entry) for entry in bench_report.collect_run(str(run), max_bytes=150))
    assert entries['big']['problems'][0] == ('%s: larger than 150 bytes, more than a file is read up to; not read'
                                             % (run / 'big' / 'summary.json'))
    # the level file is larger than 150 bytes too: listed, not read
    assert len(entries['big']['problems']) == 2 and entries['big']['status'] == 'incomplete'
    assert entries['broken']['status'] == 'incomplete' and len(entries['broken']['problems']) == 1


def test_collect_run_stops_at_the_deadline_naming_where(run_dir):
    now = [0.0]
    deadline = Deadline(5, clock=lambda: now[0])
    assert len(bench_report.collect_run(str(run_dir), deadline=deadline)) == 2
    now[0] = 10.0
    with pytest.raises(DeadlinePassed, match='before the files of host empty-host were read'):
        bench_report.collect_run(str(run_dir), deadline=deadline)


# --------------------------------------------------------------------------- render_markdown


def entry(host='gpu-node-1', status='ok', verdict=None, meta=None, levels=None, problems=None):
    summary = {'levels': levels if levels is not None else [
        {'concurrency': 1, 'num_prompts': 10, 'completed': 10, 'failed': 0, 'output_tok_s': 82.0,
         'total_tok_s': 1234.5, 'request_s': 1.234, 'mean_ttft_ms': 10.0, 'median_ttft_ms': 9.0, 'p99_ttft_ms': 20.0},
        {'concurrency': 64, 'num_prompts': 10, 'completed': 0, 'failed': 10, 'output_tok_s': 0.0}],
        'single_stream_tok_s': 82.0, 'peak_tok_s': 2276.0, 'peak_concurrency': 64, 'failed_requests': 10}
    return {'host': host, 'status': status, 'summary': summary, 'verdict': verdict, 'meta': meta or {},
            'problems': problems or []}


def test_render_markdown_fleet_table_and_host_section():
    md = bench_report.render_markdown([entry(meta={'model': 'kimi', 'quantization': 'int4', 'input_len': 128,
                                                   'vllm_version': '', 'started': None})], 'r1')
    assert md.startswith('# vLLM benchmark fleet report\n\nRun `r1`: 1 host. ')
    assert '![%s](report.png)' % bench_report.PNG_ALT in md
    assert '| gpu-node-1 | kimi | ok | 82.0 | 2,276.0 | 64 | 10 | - |' in md
    assert 'model: kimi; quantisation: int4; input tokens: 128\n' in md and 'vLLM:' not in md
    assert '| 1 | 10 | 10 | 0 | 82.0 | 1,234.5 | 1.23 | 10.0 / 9.0 / 20.0 | - / - / - | - / - / - |' in md
    # a level where nothing completed has no latencies
    assert '| 64 | 10 | 0 | 10 | 0.0 | - | - | - | - | - |' in md
    assert md.endswith('\n') and '## Trend' not in md and 'No figure' not in md and 'Record mode' not in md


def test_render_markdown_says_why_there_is_no_figure_and_counts_hosts():
    two = [entry(), entry('gpu-node-2')]
    md = bench_report.render_markdown(two, 'r1', png_name=None, plot_note='matplotlib cannot be imported')
    assert 'Run `r1`: 2 hosts.' in md and 'No figure: matplotlib cannot be imported.' in md and '![' not in md
    assert 'No figure' not in bench_report.render_markdown(two, 'r1', png_name=None)
    assert 'No figure' not in bench_report.render_markdown(two, 'r1', plot_note='ignored: there is a figure')


def test_render_markdown_verdicts_regression_record_mode_and_failure():
    regressed = entry(status='regressed', verdict={'regressed': True, 'message': 'peak 10% below'})
    kept = entry('h2', verdict={'regressed': False, 'message': 'within 10%'})
    recorded = entry('h3', status='recorded', verdict={'regressed': True, 'message': 'peak 20% below'},
                     meta={'mode': 'record'})
    failed = entry('h4', status='failed', verdict={'regressed': False, 'message': 'not used'},
                   meta={'failure': 'the server died'}, problems=['c8.json: not JSON'])
    md = bench_report.render_markdown([regressed, kept, recorded, failed], 'r1', record_file='baselines.yml')
    assert '\n**Regression**: peak 10% below\n' in md
    assert '\nBaseline: within 10%\n' in md
    assert '\nRecord mode, not gated; against the current baseline: peak 20% below\n' in md
    assert '| record mode, not gated; against the current baseline: peak 20% below |' in md
    assert '\n**Failed:** the server died\n\nNot compared with the baseline: the sweep did not finish.\n' in md
    assert '| the server died |' in md and 'not used' not in md
    assert '\nUnreadable: c8.json: not JSON\n' in md
    assert ('Record mode: no gate. The baselines measured are in `baselines.yml`: review it, then copy its entries '
            'under `benchmark_baselines` in the inventory.') in md


def test_render_markdown_trend_section():
    md = bench_report.render_markdown([entry()], 'r1', trend=['h (m q): peak -1.0 %', 'a *b*'], trend_png='trend.png')
    assert md.endswith('## Trend\n\nEach host against its own earlier runs of the same model and quantisation (the '
                       'benchmark history), first to last of the runs named:\n\n- h (m q): peak -1.0 %%\n- a \\*b\\*\n\n'
                       '![%s](trend.png)\n' % bench_report.TREND_ALT)
    assert '![' + bench_report.TREND_ALT not in bench_report.render_markdown([entry()], 'r1', trend=['x'])


def test_host_figures_and_numbers():
    figures = bench_report.host_figures({'host': b'gpu-\xff', 'status': 'ok', 'meta': {'model': 7, 'failure': None},
                                         'summary': {'levels': [{}, {}]}, 'verdict': {'regressed': 1, 'message': 2}})
    assert figures == {'host': 'gpu-\\xff', 'model': 7, 'status': 'ok', 'single_stream_tok_s': None, 'peak_tok_s': None,
                       'peak_concurrency': None, 'failed_requests': None, 'levels': 2, 'regressed': True,
                       'verdict': 2, 'failure': None, 'quality': None}
    assert bench_report.host_figures({})['levels'] == 0
    assert [bench_report._num(value) for value in (None, True, 'x', '1234.56', 2)] == ['-', '-', '-', '1,234.6', '2.0']
    assert bench_report._num(1234.5, 0) == '1,234' and bench_report._num(1234.5, 2) == '1,234.50'


def test_md_text_and_md_code():
    assert bench_report.md_text('a|b <i>&\n\tc') == 'a\\|b &lt;i&gt;&amp; c'
    assert bench_report.md_text(None) == 'None'
    assert bench_report.md_code('``x`') == '``` ``x` ```'
    assert bench_report.md_code('a\x1bb') == '`a\\x1bb`'


# --------------------------------------------------------------------------- the history's trend and lock


def hline(run_id, peak=2276.0, single=82.0, **extra):
    data = {'schema': 1, 'run_id': run_id, 'date': None, 'host': 'h', 'model': 'm', 'quantization': 'q',
            'vllm_version': None, 'mode': 'gate', 'status': 'ok', 'single_stream_tok_s': single, 'peak_tok_s': peak,
            'peak_concurrency': 64, 'baseline_single_stream_tok_s': 82.0, 'baseline_peak_tok_s': 2276.0,
            'tolerance': 0.1}
    data.update(extra)
    return data


def test_trend_edges():
    assert bench_history.trend([]) == {'single_stream_tok_s': {'runs': 0, 'change': None, 'first': None, 'last': None},
                                       'peak_tok_s': {'runs': 0, 'change': None, 'first': None, 'last': None}}
    zero = bench_history.trend([hline('r1', peak=0.0), hline('r2', peak=10.0)])['peak_tok_s']
    assert zero == {'runs': 2, 'change': None, 'first': 0.0, 'last': 10.0}
    skipped = [hline('r1', peak=100.0), hline('r2', peak=1.0, status='failed'), hline('r3', peak=1.0, status='incomplete'),
               hline('r4', peak=None), hline('r5', peak=110.0)]
    found = bench_history.trend(skipped)['peak_tok_s']
    assert found == {'runs': 2, 'first': 100.0, 'last': 110.0, 'change': pytest.approx(0.1), 'from': 'r1', 'to': 'r5'}
    assert bench_history.trend([hline('r%d' % n, peak=100.0 + n) for n in range(9)], runs=3)['peak_tok_s']['from'] == 'r6'
    sentence = bench_history.trend_sentence('h', 'm', 'q', [hline('r1', peak=None, single=None)])
    assert sentence == 'h (m q): peak: no run measured it; single stream: no run measured it'
    assert bench_history._percent(0.0004) == '\u00b10.0 %' and bench_history._percent(-0.0006) == '-0.1 %'
    assert bench_history._percent(0.25) == '+25.0 %'


def test_below_the_floor_only_in_gate_mode_with_a_baseline():
    assert bench_history._below(hline('r', peak=2000.0), 'peak_tok_s') is True
    assert bench_history._below(hline('r', peak=2100.0), 'peak_tok_s') is False  # 2,048.4 is the floor
    assert bench_history._below(hline('r', peak=2000.0, mode='record'), 'peak_tok_s') is False
    assert bench_history._below(hline('r', peak=2000.0, tolerance=None), 'peak_tok_s') is False
    assert bench_history._below(hline('r', peak=2000.0, baseline_peak_tok_s=None), 'peak_tok_s') is False
    assert bench_history._below(hline('r', peak=2000.0, tolerance=0.0), 'peak_tok_s') is True


@pytest.mark.parametrize('extra, tick', [
    ({'date': '2026-12-07T10:05:00Z', 'vllm_version': '0.33.0'}, '12-07 10:05\n0.33.0'),
    ({'date': '20261207T1005', 'vllm_version': '0.33.0rc2.dev123+gabcdef'}, '12-07 10:05\n0.33.0rc2.dev\u2026'),
    ({'date': '2026-12-07', 'vllm_version': None}, '12-07 00:00\n?'),
    ({'date': None, 'run_id': '20261207T100000Z'}, '12-07 10:00\n?'),
    ({'date': 'last tuesday evening'}, 'last tuesda\n?'),
    ({'date': 'a\u202eb', 'vllm_version': 'x\u200b'}, 'a\\u202eb\nx\\u200b'),
])
def test_the_trend_ticks_say_date_and_build(extra, tick):
    assert bench_history._tick(dict(hline('r1'), **extra)) == tick


def test_the_lock_is_waited_for_within_its_bound_then_refused(tmp_path):
    path = str(tmp_path / 'h' / 'm.q.jsonl')
    assert bench_history.append(path, hline('r1')) is True
    now, slept = [0.0], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds
    import fcntl
    with open(path, 'rb') as holder:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        with open(path, 'rb') as handle:
            with pytest.raises(bench_history.HistoryFileError,
                               match='another run holds the lock of %s for more than 2 s' % path):
                bench_history._lock(handle, seconds=2, clock=lambda: now[0], sleep=sleep, name=path)
    assert 19 <= len(slept) <= 21


@pytest.mark.parametrize('max_lines, max_bytes', [(1, 1 << 20), (2, 1024)])
def test_the_history_bounds_must_allow_two_lines(tmp_path, max_lines, max_bytes):
    with pytest.raises(bench_history.HistoryFileError, match='must allow 2 lines'):
        bench_history.append(str(tmp_path / 'h' / 'f.jsonl'), hline('r1'), max_lines=max_lines, max_bytes=max_bytes)


def test_a_line_longer_than_a_history_line_is_not_appended(tmp_path):
    with pytest.raises(bench_history.HistoryFileError, match='more than %d' % bench_history.MAX_LINE_BYTES):
        bench_history.append(str(tmp_path / 'h' / 'f.jsonl'), hline('r1', extra='x' * bench_history.MAX_LINE_BYTES))


def test_the_same_run_of_another_host_is_another_line_and_a_json_infinity_is_no_figure(tmp_path):
    path = tmp_path / 'h' / 'f.jsonl'
    assert bench_history.append(str(path), hline('r1')) is True
    assert bench_history.append(str(path), dict(hline('r1'), host='other')) is True
    assert bench_history.append(str(path), hline('r1')) is False
    with open(str(path), 'a') as handle:
        handle.write('{"schema": 1, "run_id": "r2", "host": "h", "model": "m", "status": "ok", "peak_tok_s": Infinity}\n')
        handle.write('{"schema": 1, "run_id": "r3", "host": "h", "model": "m", "status": "ok", "tolerance": 0}\n')
    lines, problems = bench_history.read(str(path))
    assert [(item['host'], item['run_id']) for item in lines] == [('h', 'r1'), ('other', 'r1'), ('h', 'r3')]
    assert lines[-1]['tolerance'] == 0.0
    assert problems == ['%s:3: peak_tok_s is the number inf, not a number from 0 to 10,000,000 (tok/s), skipped' % path]
    assert bench_history.read(str(path), max_lines=2)[0][0]['host'] == 'other'


def test_results_are_neither_written_nor_read_through_a_link(tmp_path):
    secret = tmp_path / 'secret.json'
    secret.write_text('{"summary": {"levels": []}, "model": "read through a link"}')
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    run = tmp_path / 'run'
    (run / 'gpu-node-1').mkdir(parents=True)
    os.symlink(str(secret), str(run / 'gpu-node-1' / 'summary.json'))
    os.symlink(str(secret), str(run / 'gpu-node-1' / 'c1.json'))
    os.mkfifo(str(run / 'gpu-node-1' / 'c2.json'))
    entries = bench_report.collect_run(str(run))
    assert len(entries) == 1 and entries[0]['status'] == 'incomplete'
    assert entries[0]['problems'] == [
        '%s: a symbolic link; only plain files are read' % (run / 'gpu-node-1' / 'summary.json'),
        '%s: a symbolic link; only plain files are read' % (run / 'gpu-node-1' / 'c1.json')]
    os.symlink(str(elsewhere), str(run / 'gpu-node-2'))
    with pytest.raises(bench_report.HistoryError, match='gpu-node-2 is a symbolic link: the results of a host'):
        bench_report.plan_results(str(run), [{'host': 'gpu-node-2', 'files': {'c1.json': '{}'}}])
    (run / 'gpu-node-3').write_text('')
    with pytest.raises(bench_report.HistoryError, match='gpu-node-3 is not a directory'):
        bench_report.plan_results(str(run), [{'host': 'gpu-node-3', 'files': {'c1.json': '{}'}}])
    with pytest.raises(bench_report.HistoryError, match='c1.json is a symbolic link: results are written only'):
        bench_report.plan_results(str(run), [{'host': 'gpu-node-1', 'files': {'c1.json': '{}'}}])
    assert os.listdir(str(elsewhere)) == []


def test_render_markdown_names_an_inconclusive_verdict_as_such():
    starved = entry(status='inconclusive', verdict={'regressed': False, 'inconclusive': True,
                                                    'message': 'inconclusive, not a regression: the client was starved'})
    md = bench_report.render_markdown([starved], 'r1')
    assert '\n**Inconclusive**: inconclusive, not a regression: the client was starved\n' in md
    assert 'Baseline: inconclusive' not in md and '**Regression**' not in md
