# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark history: every field of a line checked for its type when read, and never a link below the
history directory, whether it was there before or is swapped in while a run waits for the lock."""

import json
import os

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import history as bench_history


def line(run_id, host='gpu-node-1', peak=2276.0, single=82.0, status='ok', **extra):
    data = {'schema': 1, 'run_id': run_id, 'date': '2026-12-0%sT10:00:00Z' % run_id[-1], 'host': host,
            'model': 'kimi-k2.5', 'quantization': 'int4', 'vllm_version': '0.11.1', 'mode': 'gate', 'status': status,
            'single_stream_tok_s': single, 'peak_tok_s': peak, 'peak_concurrency': 64,
            'baseline_single_stream_tok_s': 82.0, 'baseline_peak_tok_s': 2276.0, 'tolerance': 0.1}
    data.update(extra)
    return data


def write_lines(path, items):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(''.join((item if isinstance(item, str) else json.dumps(item)) + '\n' for item in items))


# --------------------------------------------------------------------------- the schema, when read

BAD_LINES = [
    (dict(line('r2'), run_id=20261207), "run_id is the number 20261207, not text"),
    (dict(line('r2'), date=1765100000), "date is the number 1765100000, not text"),
    (dict(line('r2'), vllm_version=['0.11', '1']), "vllm_version is a list, not text"),
    (dict(line('r2'), host={'name': 'h'}), "host is an object, not text"),
    (dict(line('r2'), model=True), "model is a boolean, not text"),
    (dict(line('r2'), quantization=4), "quantization is the number 4, not text"),
    (dict(line('r2'), mode=['gate']), "mode is a list, not text"),
    (dict(line('r2'), status=0), "status is the number 0, not text"),
    (dict(line('r2'), schema=True), "schema a boolean, not 1"),
    (dict(line('r2'), schema='1'), "schema the text '1', not 1"),
    (dict(line('r2'), schema=2), "schema 2, not 1"),
    (dict(line('r2'), peak_tok_s=-5.0), "peak_tok_s is the number -5.0, not a number from 0 to 10,000,000 (tok/s)"),
    (dict(line('r2'), single_stream_tok_s='82'), "single_stream_tok_s is the text '82', not a number from 0 to 10,000,000 (tok/s)"),
    (dict(line('r2'), baseline_peak_tok_s=[1]), "baseline_peak_tok_s is a list, not a number from 0 to 10,000,000 (tok/s)"),
    (dict(line('r2'), baseline_single_stream_tok_s=True),
     "baseline_single_stream_tok_s is a boolean, not a number from 0 to 10,000,000 (tok/s)"),
    (dict(line('r2'), peak_concurrency=64.5), "peak_concurrency is the number 64.5, not a whole number of at least 0"),
    (dict(line('r2'), peak_concurrency=-1), "peak_concurrency is the number -1, not a whole number of at least 0"),
    (dict(line('r2'), tolerance=1.5), "tolerance is the number 1.5, not a number from 0 to 1"),
    (dict(line('r2'), tolerance=1), "tolerance is the number 1, not a number from 0 to 1"),
    (dict(line('r2'), run_id=''), "without run_id"),
    (dict(line('r2'), host=None), "without host"),
    (dict(line('r2'), model=' \n'), "model holds no printable text"),
]


@pytest.mark.parametrize('bad, why', BAD_LINES, ids=[why for dummy, why in BAD_LINES])
def test_a_line_of_the_wrong_types_is_skipped_and_named(tmp_path, bad, why):
    path = tmp_path / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl'
    write_lines(path, [line('r1'), bad, line('r3')])
    lines, problems = bench_history.read(str(path))
    assert [item['run_id'] for item in lines] == ['r1', 'r3']
    assert problems == ['%s:2: %s, skipped' % (path, why)]


def test_numbers_as_text_in_a_line_no_longer_break_the_trend_and_its_figure(tmp_path):
    """A run id or date that is a number, a build that is a list: the trend and its figure are drawn from the rest."""
    pytest.importorskip('matplotlib')
    path = tmp_path / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl'
    write_lines(path, [line('r1'), dict(line('r2'), run_id=2), dict(line('r3'), date=20261203),
                       dict(line('r4'), vllm_version=['0.11.2', 'x' * 20]), line('r5', peak=2200.0)])
    lines, problems = bench_history.read(str(path))
    assert [item['run_id'] for item in lines] == ['r1', 'r5']
    assert [problem.split(': ', 1)[0] for problem in problems] == ['%s:%d' % (path, n) for n in (2, 3, 4)]
    sentence = bench_history.trend_sentence('gpu-node-1', 'kimi-k2.5', 'int4', lines)
    assert sentence.startswith('gpu-node-1 (kimi-k2.5 int4): peak -3.3 % over the last 2 runs')
    png = bench_history.render_trend_png([{'host': 'gpu-node-1', 'model': 'kimi-k2.5', 'quantization': 'int4',
                                           'lines': lines}])
    assert png.startswith(b'\x89PNG')


def test_a_line_read_holds_the_fields_of_the_schema_only_its_text_escaped(tmp_path):
    path = tmp_path / 'h' / 'm.q.jsonl'
    write_lines(path, [dict(line('r1', peak=2276), extra={'nested': [1]}, model='kimi\u202eevil\u200b',
                            peak_concurrency=None, quantization='', vllm_version='x' * 300)])
    lines, problems = bench_history.read(str(path))
    assert problems == []
    assert sorted(lines[0]) == sorted(['schema'] + [name for name, dummy in bench_history.FIELDS])
    assert lines[0]['model'] == 'kimi\\u202eevil\\u200b'
    assert lines[0]['peak_tok_s'] == 2276.0 and isinstance(lines[0]['peak_tok_s'], float)
    assert lines[0]['peak_concurrency'] is None and lines[0]['quantization'] is None
    assert len(lines[0]['vllm_version']) == 200
    # a line that was never a line at all: too long, not UTF-8, not JSON, nested beyond the parser's depth
    write_lines(path, [line('r1'), '{"run_id": "%s"}' % ('x' * bench_history.MAX_LINE_BYTES), '[' * 10000, line('r4')])
    lines, problems = bench_history.read(str(path))
    assert [item['run_id'] for item in lines] == ['r1', 'r4']
    assert problems[0] == '%s:2: %d bytes, more than a history line is (%d), skipped' % (
        path, bench_history.MAX_LINE_BYTES + 14, bench_history.MAX_LINE_BYTES)
    assert problems[1] == '%s:3: not JSON, skipped' % path


def test_lines_of_a_cut_file_are_named_from_the_first_byte_read(tmp_path):
    path = tmp_path / 'h' / 'm.q.jsonl'
    write_lines(path, [line('r%d' % (n % 10)) for n in range(60)] + ['{"bad": ', line('r9')])
    lines, problems = bench_history.read(str(path), max_bytes=2048)
    start = os.path.getsize(str(path)) - 2048
    assert problems[0] == '%s: only the last 2048 bytes were read (from byte %d)' % (path, start)
    assert len(problems) == 2 and problems[1].startswith('%s: line ' % path)
    assert problems[1].endswith(' after byte %d: not JSON, skipped' % start)


def test_what_is_appended_is_checked_by_the_same_schema(tmp_path):
    path = str(tmp_path / 'h' / 'm.q.jsonl')
    for bad, why in ((dict(line('r1'), run_id=7), 'run_id is the number 7, not text'),
                     (dict(line('r1'), vllm_version=['a']), 'vllm_version is a list, not text'),
                     (dict(line('r1'), tolerance=2.0), 'tolerance is the number 2.0, not a number from 0 to 1')):
        with pytest.raises(bench_history.HistoryFileError, match='refusing to append a history line %s' % why):
            bench_history.append(path, bad)
    assert not os.path.exists(path)


def test_history_line_of_a_host_entry_passes_the_schema():
    entry = {'host': 'gpu-node-1', 'status': 'ok',
             'meta': {'run_id': 20261207, 'started': 1765100000, 'model': ['kimi'], 'vllm_version': {'v': 1}},
             'summary': {'single_stream_tok_s': '82.5', 'peak_tok_s': 2276, 'peak_concurrency': 64.0},
             'verdict': {'tolerance': 0.1, 'metrics': {'peak_tok_s': {'baseline': 2276}}}}
    made = bench_history.history_line(entry, 'fallback')
    assert bench_history.checked_line(made) == (made, None)
    assert made['run_id'] == '20261207' and made['date'] == '1765100000'
    assert made['single_stream_tok_s'] == 82.5 and made['peak_concurrency'] == 64
    assert bench_history.history_line(dict(entry, status='incomplete'), 'r') is None
    assert bench_history.history_line('not a dict', 'r') is None
    assert bench_history.history_line(dict(entry, verdict={'tolerance': 1.0}), 'r')['tolerance'] is None


# --------------------------------------------------------------------------- links below the history directory


@pytest.fixture
def outside(tmp_path):
    place = tmp_path / 'outside'
    place.mkdir()
    return place


def test_a_host_directory_that_is_a_link_is_refused(tmp_path, outside):
    history = tmp_path / 'history'
    history.mkdir()
    os.symlink(str(outside), str(history / 'gpu-node-1'))
    path = bench_history.history_path(str(history), line('r1'))
    with pytest.raises(bench_history.HistoryFileError) as caught:
        bench_history.append(path, line('r1'))
    assert str(caught.value).startswith('%s is a symbolic link: ' % (history / 'gpu-node-1'))
    assert 'never through a link' in str(caught.value)
    assert os.listdir(str(outside)) == []
    # what is there is not read either, and says why
    write_lines(outside / 'kimi-k2.5.int4.jsonl', [line('r0')])
    lines, problems = bench_history.read(path)
    assert lines == [] and len(problems) == 1 and problems[0].startswith('%s is a symbolic link' % (history / 'gpu-node-1'))


def test_a_host_directory_that_is_a_file_is_refused(tmp_path):
    history = tmp_path / 'history'
    history.mkdir()
    (history / 'gpu-node-1').write_text('')
    path = bench_history.history_path(str(history), line('r1'))
    with pytest.raises(bench_history.HistoryFileError, match='is not a directory'):
        bench_history.append(path, line('r1'))
    lines, problems = bench_history.read(path)
    assert lines == [] and 'is not a directory' in problems[0]


def test_a_history_file_that_is_a_link_or_not_a_file_is_refused(tmp_path, outside):
    history = tmp_path / 'history'
    (history / 'gpu-node-1').mkdir(parents=True)
    path = bench_history.history_path(str(history), line('r1'))
    os.symlink(str(outside / 'f.jsonl'), path)
    with pytest.raises(bench_history.HistoryFileError, match='symbolic link'):
        bench_history.append(path, line('r1'))
    assert os.listdir(str(outside)) == []
    lines, problems = bench_history.read(path)
    assert lines == [] and 'symbolic link' in problems[0]
    os.unlink(path)
    os.mkfifo(path)
    with pytest.raises(bench_history.HistoryFileError, match='not a plain file'):
        bench_history.append(path, line('r1'))
    assert bench_history.read(path) == ([], ['%s: not a plain file, not read' % path])


def test_the_history_directory_itself_may_be_a_link_and_is_made_when_missing(tmp_path):
    real = tmp_path / 'real'
    real.mkdir()
    os.symlink(str(real), str(tmp_path / 'history'))
    path = bench_history.history_path(str(tmp_path / 'history'), line('r1'))
    assert bench_history.append(path, line('r1')) is True
    assert (real / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl').is_file()
    fresh = bench_history.history_path(str(tmp_path / 'new' / 'deeper'), line('r1'))
    assert bench_history.read(fresh) == ([], [])
    assert not (tmp_path / 'new').exists()
    assert bench_history.append(fresh, line('r1')) is True
    assert [item['run_id'] for item in bench_history.read(fresh)[0]] == ['r1']


def test_a_link_swapped_in_while_a_run_waits_for_the_lock_is_not_followed(tmp_path, outside, monkeypatch):
    """The race: the host's directory is replaced by a link to elsewhere after the run opened it. The run goes on in
    the directory it opened (moved aside), and writes nothing where the link leads, also when it trims the file."""
    history = tmp_path / 'history'
    path = bench_history.history_path(str(history), line('r1'))
    for number in range(4):
        bench_history.append(path, line('r%d' % number), max_lines=4)
    real_lock, swapped = bench_history._lock, []

    def lock_after_a_swap(handle, *args, **kwargs):
        if not swapped:
            swapped.append(True)
            os.rename(str(history / 'gpu-node-1'), str(history / 'moved'))
            os.symlink(str(outside), str(history / 'gpu-node-1'))
        return real_lock(handle, *args, **kwargs)
    monkeypatch.setattr(bench_history, '_lock', lock_after_a_swap)
    assert bench_history.append(path, line('r9'), max_lines=4) is True  # five lines: trimmed, renamed in place
    assert swapped and os.listdir(str(outside)) == []
    kept = [json.loads(text)['run_id'] for text in (history / 'moved' / 'kimi-k2.5.int4.jsonl').read_text().splitlines()]
    assert kept[-1] == 'r9'
    assert not [name for name in os.listdir(str(history / 'moved')) if name.startswith('.gpufleet-tmp-')]


# --------------------------------------------------------------------------- figures beyond any fleet's


@pytest.mark.parametrize('name', ['single_stream_tok_s', 'peak_tok_s', 'baseline_single_stream_tok_s',
                                  'baseline_peak_tok_s'])
@pytest.mark.parametrize('value', [1.7976931348623157e308, 1e308, 10000000.5])
def test_a_figure_beyond_the_bound_is_skipped_and_named(tmp_path, name, value):
    path = tmp_path / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl'
    write_lines(path, [line('r1'), dict(line('r2'), **{name: value}), line('r3', peak=2200.0)])
    lines, problems = bench_history.read(str(path))
    assert [item['run_id'] for item in lines] == ['r1', 'r3']
    assert problems == ['%s:2: %s is the number %r, not a number from 0 to 10,000,000 (tok/s), skipped'
                        % (path, name, value)]
    assert bench_history.checked_line(dict(line('r4'), **{name: bench_history.MAX_FIGURE}))[1] is None


def test_the_trend_of_a_huge_line_draws_and_its_sentence_stays_short(tmp_path):
    """The reviewer's line: 1.7976931348623157e308 tok/s made the figure raise 'Axis limits cannot be NaN or Inf'."""
    pytest.importorskip('matplotlib')
    path = tmp_path / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl'
    write_lines(path, [line('r1'), line('r2', peak=1.7976931348623157e308, single=1.7976931348623157e308), line('r3')])
    lines, problems = bench_history.read(str(path))
    assert [item['run_id'] for item in lines] == ['r1', 'r3'] and len(problems) == 1
    png = bench_history.render_trend_png([{'host': 'gpu-node-1', 'model': 'kimi-k2.5', 'quantization': 'int4',
                                           'lines': lines}])
    assert png.startswith(b'\x89PNG')


def test_a_trend_from_nearly_nothing_says_more_than_not_inf_or_300_digits():
    lines = [line('r1', peak=1e-300, single=5e-324), line('r2', peak=bench_history.MAX_FIGURE, single=82.0)]
    sentence = bench_history.trend_sentence('gpu-node-1', 'kimi-k2.5', 'int4', lines)
    assert 'peak more than +10,000 % over the last 2 runs (0.0 to 10,000,000.0 tok/s)' in sentence, sentence
    assert 'inf' not in sentence and len(sentence) < 250, sentence
    down = bench_history.trend_sentence('h', 'm', 'q', [line('r1', peak=2276.0), line('r2', peak=2000.0)])
    assert 'peak -12.1 %' in down
