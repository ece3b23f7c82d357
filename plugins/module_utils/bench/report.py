# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report of a benchmark run: collect per-host results, render Markdown and a PNG plot.

Layout of a run directory (written by the gpufleet.vllm.benchmark role)::

    <run_dir>/<host>/c<concurrency>.json   what vllm bench serve --save-result wrote
    <run_dir>/<host>/summary.json          the role's summary and verdict for the host
    <run_dir>/report.md, report.png        written from the above

Public API:

* ``collect_run(run_dir) -> list of host entries`` (summary.json, or the
  level files summarized on the spot when the host has no summary yet)
* ``render_markdown(entries, run_id, title, png_name, plot_note) -> str``
* ``render_png(entries, run_id) -> bytes`` (the figure of ``bench_plot``,
  drawn with matplotlib; raises ``bench_plot.PlotUnavailable`` without it)
* ``host_figures(entry) -> dict`` (the per-host line of the fleet table)
* ``plan_results(run_dir, results) -> list of (path, bytes)``: the files of
  host results to write (summary.json and the level files), unchanged files
  left out; raises ``HistoryError`` when a kept file would change
* ``md_text(value) -> str``: a value from a host made safe for Markdown
* ``with_quality(summary) -> dict``: a host's summary with its quality gate's
  figures as summary.json keeps them (report.quality's digest), shown in
  report.md as the host's "Answer quality" table

Links: a host directory of the run that is a symbolic link is skipped;
a result or summary file that is one is not read (listed as a problem);
``plan_results`` refuses to write through either.

Bounds: a result or summary file larger than ``max_bytes`` (default
``MAX_FILE_BYTES``) is not read (it is listed as a problem); figures of a
summary.json that are not finite numbers are shown as ``-``. Every value
that comes from a host (names, model, messages) is escaped for Markdown
(``md_text``): it cannot break a table or add markup, links or HTML.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import stat

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import plot as bench_plot
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import quality as quality_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import printable_block, valid_text

SUMMARY_NAME = 'summary.json'
REPORT_FILES = ('report.md', 'report.png')
SAFE_NAME = re.compile(r'^[A-Za-z0-9_+-][A-Za-z0-9._+-]*\Z')
MAX_FILE_BYTES = 64 * 1024 * 1024
# line breaks (each run of them is shown as one space; every other control character is escaped)
_BREAKS = re.compile('[\r\n\t\x0b\x0c\x85\u2028\u2029]+')
_MARKDOWN = re.compile(r'([\\`*_\[\]|~])')


class HistoryError(ValueError):
    """A result would overwrite a different file already kept, or a name is unsafe."""


def read_current(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def plan_results(run_dir, results):
    """The files to write for ``results`` (each: host, files {name: text}, summary dict).

    Returns [(path, bytes)] for the files that are missing; a file that is
    already there with the same bytes is left alone; one with other bytes
    raises HistoryError (kept results are never overwritten).
    """
    planned = []
    for item in results or []:
        if not isinstance(item, dict):
            raise HistoryError('each result must be a dict with host, files and summary, got %r' % (item,))
        host = item.get('host')
        if not isinstance(host, str) or not SAFE_NAME.match(host):
            raise HistoryError('host name %r cannot name a directory (letters, digits, ., _, +, - only)' % (host,))
        here = os.path.join(run_dir, host)
        if os.path.islink(here) or (os.path.lexists(here) and not os.path.isdir(here)):
            raise HistoryError('%s is %s: the results of a host are kept in a plain directory of the run, never '
                               'written through a link' % (here, 'a symbolic link' if os.path.islink(here)
                                                           else 'not a directory'))
        files = dict(item.get('files') or {})
        if item.get('summary') is not None:
            files[SUMMARY_NAME] = json.dumps(with_quality(item['summary']), indent=2, sort_keys=False) + '\n'
        for name in sorted(files):
            if not isinstance(name, str) or not SAFE_NAME.match(name):
                raise HistoryError('file name %r of host %s is not a plain file name' % (name, host))
            text = files[name]
            data = text.encode('utf-8') if isinstance(text, str) else json.dumps(text).encode('utf-8')
            path = os.path.join(run_dir, host, name)
            if os.path.islink(path):
                raise HistoryError('%s is a symbolic link: results are written only to plain files' % path)
            current = read_current(path)
            if current is None:
                planned.append((path, data))
            elif current != data:
                raise HistoryError('%s is already kept with other content: results are never overwritten (use a new '
                                   'run id)' % path)
    return planned


def with_quality(summary):
    """A host's summary as summary.json keeps it: its ``quality`` (the host's quality_result, which the benchmark
    role passes) as report.quality's digest, the figures next to the reference's, small and checked; left out when
    the quality gate did not run (None, skipped)."""
    if not isinstance(summary, dict) or 'quality' not in summary:
        return summary
    kept = dict(summary)
    quality = quality_report.digest(kept.pop('quality'))
    if quality is not None:
        kept['quality'] = quality
    return kept


def text(value):
    """VALUE as valid text: odd bytes (surrogate escapes of file names) as backslash escapes."""
    return valid_text(value)


def md_text(value):
    """VALUE as inline Markdown text: no line breaks, markup, links or HTML, whatever it holds; control, invisible
    and bidirectional characters (U+202E, U+200B) as backslash escapes (safetext.printable_block)."""
    value = printable_block(_BREAKS.sub(' ', text(value)))
    value = _MARKDOWN.sub(r'\\\1', value)
    return value.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')


def md_code(value):
    """VALUE as an inline code span (outside tables): a fence longer than any run of backticks it holds."""
    value = printable_block(_BREAKS.sub(' ', text(value)))
    fence = '`' * (max([len(run) for run in re.findall('`+', value)] + [0]) + 1)
    if value.startswith('`') or value.endswith('`'):
        value = ' %s ' % value
    return '%s%s%s' % (fence, value, fence)


def _read_json(path, max_bytes=MAX_FILE_BYTES):
    """The JSON of the plain file PATH (a link or anything else that is not a plain file is not read)."""
    if os.path.islink(path):
        raise ValueError('a symbolic link; only plain files are read')
    # O_NOFOLLOW: a link put there since is not read either; O_NONBLOCK: a FIFO does not hold the report
    descriptor = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0) | os.O_NONBLOCK)
    with os.fdopen(descriptor, 'rb') as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError('not a plain file; not read')
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError('larger than %d bytes, more than a file is read up to; not read' % max_bytes)
    return bench.load_result_text(data)


def _clean_summary(summary):
    """A summary.json's summary with every level a row of finite figures (a hand-edited or hostile file may differ)."""
    clean = dict(summary)
    levels = summary.get('levels')
    clean['levels'] = [bench._clean_row(row) for row in levels if isinstance(row, dict)] if isinstance(levels, list) else []
    for key in ('single_stream_tok_s', 'peak_tok_s'):
        clean[key] = bench._number(summary.get(key))
    for key in ('peak_concurrency', 'failed_requests'):
        clean[key] = bench._count(summary.get(key))
    return clean


def _level_files(directory):
    names = []
    for name in os.listdir(directory):
        if not name.endswith('.json') or name == SUMMARY_NAME or name.endswith('.pytorch.json'):
            continue
        if os.path.isfile(os.path.join(directory, name)) or os.path.islink(os.path.join(directory, name)):
            names.append(name)  # (a link is listed: reading it says it is one)
    return sorted(names)


def collect_run(run_dir, max_bytes=MAX_FILE_BYTES, deadline=None):
    """One entry per host directory of ``run_dir``, sorted by host name.

    ``deadline`` (a bounded.Deadline) is checked before each host and each
    of its level files; bounded.DeadlinePassed says where it stopped.

    Each entry: host, status, summary (bench.summarize output), verdict,
    meta (the rest of summary.json) and problems (files that could not be
    read). A host without summary.json (its run was cut short) gets status
    ``incomplete`` and a summary made from its level files.
    """
    entries = []
    for host in sorted(os.listdir(run_dir)):
        directory = os.path.join(run_dir, host)
        if host.startswith('.') or not os.path.isdir(directory) or os.path.islink(directory):
            continue
        if deadline is not None:
            deadline.check('the files of host %s were read' % text(host))
        problems = []
        summary_path = os.path.join(directory, SUMMARY_NAME)
        stored = None
        if os.path.isfile(summary_path) or os.path.islink(summary_path):
            try:
                stored = _read_json(summary_path, max_bytes)
            except (OSError, ValueError) as exc:
                problems.append(text('%s: %s' % (summary_path, exc)))
        if stored is not None and isinstance(stored.get('summary'), dict):
            summary = _clean_summary(stored['summary'])
            entry = {
                'host': text(host),
                'status': stored.get('status') or ('ok' if summary.get('ok') else 'failed'),
                'summary': summary,
                'verdict': stored.get('verdict') if isinstance(stored.get('verdict'), dict) else None,
                'meta': dict((k, v) for k, v in stored.items() if k not in ('summary', 'verdict')),
                'problems': problems,
            }
        else:
            rows = []
            for name in _level_files(directory):
                path = os.path.join(directory, name)
                if deadline is not None:
                    deadline.check('%s was read' % text(path))
                try:
                    rows.append(bench.parse_result(_read_json(path, max_bytes), source=text(path)))
                except (OSError, ValueError) as exc:
                    problems.append(text('%s: %s' % (path, exc)))
            if not rows and not problems:
                continue
            entry = {
                'host': text(host),
                'status': 'incomplete',
                'summary': bench.summarize(rows),
                'verdict': None,
                'meta': {},
                'problems': problems,
            }
        entries.append(entry)
    return entries


def _num(value, digits=1):
    if value is None or isinstance(value, bool):
        return '-'
    try:
        value = float(value)
    except (TypeError, ValueError):
        return '-'
    if digits == 0:
        return '{:,.0f}'.format(value)
    return '{:,.{d}f}'.format(value, d=digits)


def _cell(value):
    return md_text(value)


def _plain(value):
    """A value of a host result for the module's result: JSON-safe text, number or None."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return text(value)


def _triple(row, metric):
    return ' / '.join(_num(row.get('%s_%s_ms' % (stat, metric))) for stat in bench.LATENCY_STATS)


def host_figures(entry):
    summary = entry.get('summary') or {}
    verdict = entry.get('verdict') or {}
    meta = entry.get('meta') or {}
    return {
        'host': _plain(entry.get('host')),
        'model': _plain(meta.get('model')),
        'status': _plain(entry.get('status')),
        'single_stream_tok_s': summary.get('single_stream_tok_s'),
        'peak_tok_s': summary.get('peak_tok_s'),
        'peak_concurrency': summary.get('peak_concurrency'),
        'failed_requests': summary.get('failed_requests'),
        'levels': len(summary.get('levels') or []),
        'regressed': bool(verdict.get('regressed')),
        'verdict': _plain(verdict.get('message')),
        'failure': _plain(meta.get('failure')),
        'quality': quality_report.phrase(quality_report.digest(meta.get('quality'))) or None,
    }


PNG_ALT = ('Output tok/s against concurrency per host with the baseline band, TTFT and TPOT (median and p99), '
           'and each host against its baseline')


def _recorded(entry):
    """Whether the host's run was in record mode (its verdict gated nothing)."""
    return (entry.get('meta') or {}).get('mode') == 'record' or entry.get('status') == 'recorded'


TREND_ALT = 'Single-stream and peak output tok/s per host across runs, with the baseline band'


def render_markdown(entries, run_id, title='vLLM benchmark fleet report', png_name='report.png', plot_note=None,
                    trend=None, trend_png=None, record_file=None):
    """The Markdown report; ``plot_note`` (when there is no figure) says why, under the first paragraph.

    ``trend``: sentences of the history's trend per host (bench_history.trend_sentence), shown with
    ``trend_png`` (a file name beside report.md); ``record_file``: the baseline file of record mode.
    """
    lines = ['# %s' % md_text(title), '']
    lines.append('Run %s: %d host%s. Output token throughput is what `vllm bench serve` reports '
                 '(output tokens / benchmark duration); single stream is the concurrency-1 level, peak the best '
                 'level without failed requests.' % (md_code(run_id), len(entries), '' if len(entries) == 1 else 's'))
    lines.append('')
    if png_name:
        lines.extend(['![%s](%s)' % (PNG_ALT, png_name), ''])
    elif plot_note:
        lines.extend(['No figure: %s.' % md_text(plot_note), ''])
    if record_file:
        lines.extend(['Record mode: no gate. The baselines measured are in %s: review it, then copy its entries '
                      'under `benchmark_baselines` in the inventory.' % md_code(record_file), ''])
    lines.extend(['## Fleet', '',
                  '| host | model | status | single stream tok/s | peak tok/s | at concurrency | failed requests '
                  '| verdict |',
                  '|---|---|---|---:|---:|---:|---:|---|'])
    for entry in entries:
        fig = host_figures(entry)
        verdict = fig['failure'] or fig['verdict'] or '-'
        if not fig['failure'] and fig['verdict'] and _recorded(entry):
            verdict = 'record mode, not gated; against the current baseline: %s' % fig['verdict']
        lines.append('| %s | %s | %s | %s | %s | %s | %s | %s |' % (
            _cell(fig['host']), _cell(fig['model'] or '-'), _cell(fig['status']), _num(fig['single_stream_tok_s']),
            _num(fig['peak_tok_s']), _cell(fig['peak_concurrency']) if fig['peak_concurrency'] is not None else '-',
            _cell(fig['failed_requests']) if fig['failed_requests'] is not None else '-', _cell(verdict)))
    for entry in entries:
        meta = entry.get('meta') or {}
        summary = entry.get('summary') or {}
        lines.extend(['', '## %s' % md_text(entry['host']), ''])
        facts = []
        for key, label in (('model', 'model'), ('quantization', 'quantisation'), ('base_url', 'server'), ('input_len', 'input tokens'),
                           ('output_len', 'output tokens'), ('backend', 'backend'), ('vllm_version', 'vLLM'),
                           ('started', 'started')):
            if meta.get(key) not in (None, ''):
                facts.append('%s: %s' % (label, _cell(meta[key])))
        if facts:
            lines.extend(['; '.join(facts), ''])
        lines.extend(['| concurrency | prompts | completed | failed | output tok/s | total tok/s | req/s '
                      '| TTFT ms mean / median / p99 | TPOT ms mean / median / p99 | ITL ms mean / median / p99 |',
                      '|---:|---:|---:|---:|---:|---:|---:|---|---|---|'])
        for row in summary.get('levels') or []:
            served = bool(row.get('completed'))  # a level where nothing completed has no latencies, only zeros
            lines.append('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
                _cell(row.get('concurrency')) if row.get('concurrency') is not None else '-',
                _num(row.get('num_prompts'), 0), _num(row.get('completed'), 0), _num(row.get('failed'), 0),
                _num(row.get('output_tok_s')), _num(row.get('total_tok_s')), _num(row.get('request_s'), 2),
                _triple(row, 'ttft') if served else '-', _triple(row, 'tpot') if served else '-',
                _triple(row, 'itl') if served else '-'))
        verdict = entry.get('verdict') or {}
        if meta.get('failure'):
            lines.extend(['', '**Failed:** %s' % _cell(meta['failure']),
                          '', 'Not compared with the baseline: the sweep did not finish.'])
        elif verdict.get('message'):
            if _recorded(entry):
                lines.extend(['', 'Record mode, not gated; against the current baseline: %s' % _cell(verdict['message'])])
            else:
                label = ('**Regression**' if verdict.get('regressed')
                         else '**Inconclusive**' if verdict.get('inconclusive') else 'Baseline')
                lines.extend(['', '%s: %s' % (label, _cell(verdict['message']))])
        quality = quality_report.table(quality_report.digest(meta.get('quality')))
        if quality:
            lines.extend(['', '### Answer quality', '', 'Greedy answers and the mean negative log-likelihood (NLL) per '
                          'token of a fixed passage, against the reference recorded for the model and quantisation '
                          '(the quality gate, measured before this benchmark).', ''] + quality)
        for problem in entry.get('problems') or []:
            lines.extend(['', 'Unreadable: %s' % _cell(problem)])
    if trend:
        lines.extend(['', '## Trend', '', 'Each host against its own earlier runs of the same model and quantisation '
                      '(the benchmark history), first to last of the runs named:', ''])
        lines.extend('- %s' % md_text(sentence) for sentence in trend)
        if trend_png:
            lines.extend(['', '![%s](%s)' % (TREND_ALT, trend_png)])
    lines.append('')
    return '\n'.join(lines)


def render_png(entries, run_id):
    """report.png: the fleet figure (bench_plot), drawn with matplotlib on the node that renders the report."""
    return bench_plot.render_png(entries, text(run_id))
