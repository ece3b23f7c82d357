# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark results kept per run and host, and the fleet report: the action gpufleet.vllm.bench_report."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import time

from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import baseline as bench_baseline
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import history as bench_history
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import plot as bench_plot
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as bench_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import files as reportfile
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline, DeadlinePassed
from ansible_collections.gpufleet.vllm.plugins.module_utils.writers.common import ControllerFiles, WriterFailed

# the clock of the timeout (a name of its own, so that a test can make time pass)
_clock = time.monotonic


ARGUMENT_SPEC = dict(
    path=dict(type='path', required=True),
    title=dict(type='str', default='vLLM benchmark fleet report'),
    run_id=dict(type='str'),
    png=dict(type='bool', default=True),
    results=dict(type='list', elements='dict', default=[], options=dict(
        host=dict(type='str', required=True),
        files=dict(type='dict', default={}),
        summary=dict(type='dict'),
        run_id=dict(type='str'),
    )),
    render=dict(type='bool', default=True),
    max_file_mib=dict(type='int', default=64),
    timeout=dict(type='int', default=300),
    record=dict(type='bool', default=False),
    history_dir=dict(type='path'),
    history_max_lines=dict(type='int', default=2000),
    history_max_kib=dict(type='int', default=2048),
    trend_runs=dict(type='int', default=5),
)


def run(params, mode):
    """Keep the results, then write the report (nothing in check mode, MODE a common.Mode); the task's result."""
    path = params['path'].rstrip('/') or '/'
    if params['max_file_mib'] < 1:
        raise WriterFailed('max_file_mib must be at least 1, got %d. Nothing was written.' % params['max_file_mib'])
    if not 1 <= params['timeout'] <= 604800:
        raise WriterFailed('timeout must be from 1 to 604800 seconds, got %d. Nothing was written.' % params['timeout'])
    if params['history_max_lines'] < 2 or params['history_max_kib'] < 32:
        raise WriterFailed('history_max_lines must be at least 2 and history_max_kib at least 32, got %d and %d. '
                           'Nothing was written.' % (params['history_max_lines'], params['history_max_kib']))
    if not 2 <= params['trend_runs'] <= 1000:
        raise WriterFailed('trend_runs must be from 2 to 1000, got %d. Nothing was written.' % params['trend_runs'])
    deadline = Deadline(params['timeout'], clock=_clock)
    max_bytes = params['max_file_mib'] * 1024 * 1024
    run_id = params['run_id'] or os.path.basename(path)
    strays = sorted(set(item['run_id'] for item in params['results']
                        if item.get('run_id') not in (None, run_id)))
    if strays:
        raise WriterFailed('The results given belong to run %s, not to run %s of %s: pass only the results of this '
                           'run.' % (', '.join(strays), run_id, path))
    try:
        planned = bench_report.plan_results(path, params['results'])
    except bench_report.HistoryError as exc:
        raise WriterFailed('Cannot keep the benchmark results in %s: %s.' % (path, to_native(exc)))
    if not planned and not os.path.isdir(path):
        raise WriterFailed('The benchmark run directory %s does not exist on the control node: run the benchmark role '
                           'first, or point path at <benchmark_local_results_dir>/<run id>.' % path)

    written = []

    def late(exc):
        """The timeout passed: fail naming what was next and the files already written."""
        done = [] if mode.check_mode else list(written)
        raise WriterFailed('%s%s. %s' % (str(exc)[:1].upper(), str(exc)[1:], 'Already written: %s.' % ', '.join(done)
                                         if done else 'Nothing was written.'), changed=bool(done), written=done)

    md_path = os.path.join(path, 'report.md')
    before_md = bench_report.read_current(md_path)
    for target, data in planned:
        try:
            deadline.check('the result %s was kept' % target)
        except DeadlinePassed as exc:
            late(exc)
        written.append(target)
        if not mode.check_mode:
            try:
                directory = os.path.dirname(target)
                if not os.path.isdir(directory):
                    os.makedirs(directory, 0o755)
                reportfile.write_atomic(ControllerFiles, target, data)
            except (IOError, OSError) as exc:
                raise WriterFailed('Could not keep the benchmark result %s: %s. Check that the directory is '
                                   'writable and the disk not full.' % (target, to_native(exc)),
                                   changed=bool(written[:-1]), written=written[:-1])

    entries, markdown, plot_skipped, history, record_result = [], None, None, None, (None, None)
    png_name = 'report.png' if params['png'] else None
    wanted = params['render'] or params['history_dir'] or params['record']
    if wanted and (os.path.isdir(path) or planned):
        try:
            entries = bench_report.collect_run(path, max_bytes, deadline=deadline) if os.path.isdir(path) else []
            deadline.check('the report was drawn')
        except DeadlinePassed as exc:
            late(exc)
        except OSError as exc:
            raise WriterFailed('Could not read the benchmark run directory %s: %s. Check its permissions.'
                               % (path, to_native(exc)), changed=bool(written), written=written)
        if mode.check_mode and planned:
            # what the run directory would hold: the kept hosts plus the planned ones
            entries = _with_planned(entries, planned, path)
        history = _history(params, mode, entries, run_id, path, written, deadline, late) if params['history_dir'] else None
        record_name = None
        if params['record']:
            record_name = 'baselines.yml'
            table, left_out = bench_baseline.record_table(entries)
            record_result = (os.path.join(path, record_name), table)
            for reason in left_out:
                mode.warn('Not recorded as a baseline: %s.' % reason)
        png_data, outputs = None, []
        if png_name and params['render']:
            try:
                png_data = bench_report.render_png(entries, run_id)
            except bench_plot.PlotUnavailable as exc:
                plot_skipped = to_native(exc)
                png_name = None
                mode.warn('report.png was not drawn: %s. report.md was written without the figure.' % plot_skipped)
            except Exception as exc:  # pylint: disable=broad-except
                # (a figure is an extra: whatever breaks the drawing, the report is written without it)
                plot_skipped = _plot_error(exc)
                png_name = None
                mode.warn('report.png was not drawn: %s. report.md was written without the figure.' % plot_skipped)
        if params['render']:
            markdown = bench_report.render_markdown(entries, run_id, title=params['title'], png_name=png_name,
                                                    plot_note=plot_skipped, trend=history['trend'] if history else None,
                                                    trend_png='trend.png' if history and history['png_data'] else None,
                                                    record_file=os.path.join(path, record_name) if record_name else None)
            outputs.append((md_path, to_bytes(markdown)))
        if png_name and markdown is not None:
            outputs.append((os.path.join(path, png_name), png_data))
        if history and history['png_data']:
            outputs.append((history['png'], history['png_data']))
        if record_name:
            outputs.append((record_result[0], to_bytes(bench_baseline.render_record(entries, run_id, None))))
        for target, data in outputs:
            try:
                deadline.check('the report %s was written' % target)
            except DeadlinePassed as exc:
                late(exc)
            if bench_report.read_current(target) != data:
                written.append(target)
                if not mode.check_mode:
                    try:
                        reportfile.write_atomic(ControllerFiles, target, data)
                    except (IOError, OSError) as exc:
                        raise WriterFailed('Could not write the benchmark report %s: %s. Check that the directory '
                                           'is writable and the disk not full.' % (target, to_native(exc)),
                                           changed=bool(written[:-1]), written=written[:-1])

    problems = []
    for entry in entries:
        problems.extend(entry.get('problems') or [])
    if history:
        problems.extend(history['problems'])
    result = dict(
        baseline_file=record_result[0],
        baselines=record_result[1],
        history=dict((key, history[key]) for key in ('appended', 'problems', 'trend', 'by_host', 'png')) if history else None,
        changed=bool(written),
        written=written,
        markdown=md_path if markdown is not None else None,
        png=os.path.join(path, png_name) if markdown is not None and png_name else None,
        run_id=run_id,
        hosts=[bench_report.host_figures(entry) for entry in entries],
        problems=problems,
        plot_skipped=plot_skipped,
    )
    if mode.diff and markdown is not None:
        result['diff'] = dict(before_header=md_path, after_header=md_path,
                              before=(before_md or b'').decode('utf-8', 'replace'), after=markdown)
    result['check_mode'] = mode.check_mode
    return result


def _history(params, mode, entries, run_id, path, written, deadline, late):
    """Append the run's results to the history, read each host's back, and draw the trend (see history_dir)."""
    history_dir = params['history_dir'].rstrip('/') or '/'
    max_lines, max_bytes = params['history_max_lines'], params['history_max_kib'] * 1024
    found = {'appended': [], 'problems': [], 'trend': [], 'by_host': {}, 'png': None, 'png_data': None}
    series = []
    for entry in entries:
        line = bench_history.history_line(entry, run_id)
        if line is None:
            continue
        target = bench_history.history_path(history_dir, line)
        try:
            deadline.check('the history %s was appended to' % target)
        except DeadlinePassed as exc:
            late(exc)
        lines, problems = bench_history.read(target, max_lines, max_bytes)
        found['problems'].extend(problems)
        there = any(kept['run_id'] == line['run_id'] and kept['host'] == line['host'] for kept in lines)
        if not there:
            if not mode.check_mode:
                try:
                    there = bench_history.append(target, line, max_lines, max_bytes)
                except (bench_history.HistoryFileError, IOError, OSError) as exc:
                    raise WriterFailed('Could not append to the benchmark history %s: %s. The results of the run '
                                       'are kept in %s; fix the history directory (history_dir) and run again.'
                                       % (target, to_native(exc), path), changed=bool(written), written=written)
                lines, dummy = bench_history.read(target, max_lines, max_bytes)
            else:
                lines = (lines + [line])[-max_lines:]
            found['appended'].append(target)
            written.append(target)
        series.append({'host': line['host'], 'model': line['model'], 'quantization': line['quantization'],
                       'lines': lines})
        sentence = bench_history.trend_sentence(line['host'], line['model'], line['quantization'], lines,
                                                params['trend_runs'])
        found['trend'].append(sentence)
        found['by_host'][line['host']] = sentence
    if series and params['png']:
        try:
            deadline.check('the trend was drawn')
        except DeadlinePassed as exc:
            late(exc)
        try:
            found['png_data'] = bench_history.render_trend_png(
                series, title='vLLM benchmark history up to run %s' % bench_plot.bench_text(run_id)[:40])
            found['png'] = os.path.join(path, 'trend.png')
        except bench_plot.PlotUnavailable as exc:
            mode.warn('trend.png was not drawn: %s.' % to_native(exc))
        except Exception as exc:  # pylint: disable=broad-except
            found['png_data'], found['png'] = None, None
            mode.warn('trend.png was not drawn: %s. report.md was written without the figure.' % _plot_error(exc))
    return found


def _plot_error(exc):
    """An error of the drawing as one line: its kind and message (a bug or a figure matplotlib refuses)."""
    return bench_plot.bench_text('%s while drawing: %s' % (type(exc).__name__, to_native(exc)))[:300]


def _with_planned(entries, planned, path):
    """Check mode: summarize the planned hosts as if they were written."""
    hosts = {}
    for target, data in planned:
        host = os.path.basename(os.path.dirname(target))
        hosts.setdefault(host, {})[os.path.basename(target)] = data
    merged = [entry for entry in entries if entry['host'] not in hosts]
    for host, files in hosts.items():
        summary = files.get(bench_report.SUMMARY_NAME)
        if summary is not None:
            stored = json.loads(summary.decode('utf-8'))
            kept = stored.get('summary') if isinstance(stored.get('summary'), dict) else {}
            merged.append({'host': host, 'status': stored.get('status') or 'ok', 'summary': bench_report._clean_summary(kept),
                           'verdict': stored.get('verdict') if isinstance(stored.get('verdict'), dict) else None,
                           'problems': [],
                           'meta': dict((k, v) for k, v in stored.items() if k not in ('summary', 'verdict'))})
        else:
            rows, problems = [], []
            for name, data in sorted(files.items()):
                if name.endswith('.json'):
                    source = os.path.join(path, host, name)
                    try:
                        rows.append(bench.parse_result(data.decode('utf-8', 'replace'), source=source))
                    except ValueError as exc:
                        problems.append('%s: %s' % (source, exc))
            merged.append({'host': host, 'status': 'incomplete', 'summary': bench.summarize(rows), 'verdict': None,
                           'meta': {}, 'problems': problems})
    return sorted(merged, key=lambda entry: entry['host'])
