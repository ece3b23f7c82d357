#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: bench_report
short_description: Keep benchmark results per run and host and write the fleet report (Markdown and a PNG figure)
version_added: 0.1.0
description:
  - Keeps the results given in O(results) under C(<path>/<host>/) (the level files and C(summary.json)). A file that
    is already kept with the same content is left alone; one with other content fails the task before anything is
    written, so that a run's history is never overwritten.
  - Reads the results of one benchmark run, kept by the M(gpufleet.vllm.benchmark) role on the control node as
    C(<path>/<host>/c<concurrency>.json) (what C(vllm bench serve --save-result) wrote) and
    C(<path>/<host>/summary.json) (the role's summary and regression verdict), and writes C(<path>/report.md) (a
    fleet table and a table per host and concurrency level) and C(<path>/report.png), one figure drawn with
    matplotlib that compares the hosts, with output tokens per second against concurrency per host (a marker, line style
    and colour each) with the model's baseline as a band of its tolerance, TTFT and TPOT against concurrency (median
    and p99), and each host's peak and single-stream throughput as a percentage of its baseline, green at or above
    the floor, red below it. Hosts whose sweep failed or was cut short are named in the figure, not left out.
  - A host directory without C(summary.json) (a run cut short) is summarized from its level files and shown as
    C(incomplete). Unreadable files are listed in the report, not fatal.
  - The files are written only when their content changes (atomically), so running it again reports no change.
  - Usually run once per play on the control node (C(run_once), C(delegate_to=localhost)).
options:
  path:
    description:
      - The run directory, holding one directory per host.
    type: path
    required: true
  title:
    description:
      - First heading of the Markdown report.
    type: str
    default: vLLM benchmark fleet report
  run_id:
    description:
      - Name of the run shown in the report. Defaults to the base name of O(path).
    type: str
  png:
    description:
      - Also write the figure C(report.png) (14 x 8 inches at 100 dpi, 1400 x 800 pixels). The Markdown refers to it
        only when written.
      - It needs matplotlib where the module runs (the control node). Without it the task does not fail, so that the
        results just measured are kept; C(report.md) is written without the figure and says why, the task warns,
        and RV(plot_skipped) holds the reason.
    type: bool
    default: true
  results:
    description:
      - Host results to keep in the run directory before the report is rendered, for example the C(benchmark_record)
        facts of the hosts of a play.
    type: list
    elements: dict
    default: []
    suboptions:
      host:
        description: Host name (the directory name).
        type: str
        required: true
      files:
        description: File name to file content (the result files of the levels, the logs of a failed level).
        type: dict
        default: {}
      summary:
        description: Written as C(summary.json).
        type: dict
      run_id:
        description: The run the result belongs to; when given it must be the run of this report (O(run_id)).
        type: str
  render:
    description:
      - Write C(report.md) (and C(report.png)). V(false) only keeps O(results) (and, when asked, appends to the
        history and writes the baseline file of O(record)).
    type: bool
    default: true
  max_file_mib:
    description:
      - Largest result or C(summary.json) file read from the run directory, in MiB. A larger file is not read; it is
        listed in RV(problems) and in the report.
    type: int
    default: 64
  record:
    description:
      - Record mode. Also write C(<path>/baselines.yml), the baselines the run's hosts measured, keyed by model and
        quantisation as C(benchmark_baselines) is (the median of the hosts of each; each host's figures and build,
        the date and the sweep under C(recorded)), for an operator to review and copy into the inventory. Hosts
        whose sweep failed or whose quantisation is unknown are named in a comment, not recorded.
    type: bool
    default: false
  history_dir:
    description:
      - Append each host's result of the run to the benchmark history under this directory on the control node,
        C(<history_dir>/<host>/<model>.<quantisation>.jsonl), one JSON line per host and run (a run already there
        for the host is not appended again), then write the trend of the run's hosts into C(report.md) and draw
        C(<path>/trend.png) (single-stream and peak tok/s per host across runs, with the baseline band).
      - Not given, no history is kept.
    type: path
  history_max_lines:
    description:
      - Most lines a history file keeps; appending beyond it drops the oldest lines (the file is rewritten whole,
        atomically, under a lock).
    type: int
    default: 2000
  history_max_kib:
    description: Most KiB a history file keeps (as O(history_max_lines)); only its last as many KiB are read.
    type: int
    default: 2048
  trend_runs:
    description: The runs the trend sentence of each host spans (C(peak -4.0 % over the last 5 runs)).
    type: int
    default: 5
  timeout:
    description:
      - The most seconds the whole run may take. It is checked before each result file is kept, before each host's
        files and each level file are read, before the report is drawn and before each report file is written. When
        it has passed, the task fails, naming what was next, and RV(written) lists the files already written (a
        file being written is always finished).
    type: int
    default: 300
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
  - gpufleet.vllm.internal.module
attributes:
  check_mode:
    support: full
    details: Reads the results and reports whether the report would change; writes nothing.
  diff_mode:
    support: full
    details: The Markdown report before and after.
notes:
  - Host and file names are plain names (letters, digits, C(.), C(_), C(+), C(-)); anything else is refused.
  - Every value that comes from a host (host and model names, messages, figures of a C(summary.json)) is escaped in
    the Markdown (C(|), line breaks, backticks, C(*), C(_), brackets, C(<), C(>), C(&), control characters), so it
    cannot break a table or add markup, links or HTML; figures that are not finite numbers are shown as C(-).
  - The figure is drawn with matplotlib (Agg, no display, matplotlib's default style whatever a C(matplotlibrc)
    says), on the node the module runs on; run it on the control node (C(delegate_to=localhost)) so that the GPU
    hosts never need matplotlib. The same results give the same bytes.
  - The concurrency axis is logarithmic (base 2) with a tick at each level run; levels with failed requests are
    marked with a red cross on the axis and kept in the tables.
  - At most 32 hosts are drawn (failed, regressed and incomplete hosts first, then by name; the title says how many
    were left out) and 32 levels per host; every host is in C(report.md).
requirements:
  - Python 3.10 or newer on the host it runs on.
  - matplotlib on that host for C(report.png) (the control node's C(requirements/control.txt) pins it).
seealso:
  - module: ansible.builtin.fetch
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Render the fleet report of a run
  gpufleet.vllm.bench_report:
    path: gpufleet-reports/benchmark/20261202T153000Z
  run_once: true
  delegate_to: localhost
  register: report

- name: Show where it is
  ansible.builtin.debug:
    msg: "{{ report.markdown }} ({{ report.hosts | length }} hosts)"
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (nothing written on the control node).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
baseline_file:
  description: Path of the baseline file of record mode (O(record)), else null.
  returned: always
  type: str
  sample: /home/ops/gpufleet-reports/benchmark/20261202T153000Z/baselines.yml
baselines:
  description: What the baseline file holds (model to quantisation to figures), else null.
  returned: always
  type: dict
  sample: {kimi-k2.5: {nvfp4: {single_stream_tok_s: 61.2, peak_tok_s: 1480.3}}}
history:
  description: The benchmark history (O(history_dir)), else null.
  returned: always
  type: dict
  contains:
    appended:
      description: History files a line of this run was appended to (or would be, in check mode).
      type: list
      elements: str
    problems:
      description: Lines of the history files that were skipped (not JSON, not a history line) and why.
      type: list
      elements: str
    trend:
      description: One sentence per host of the run, its trend over the last O(trend_runs) runs.
      type: list
      elements: str
    by_host:
      description: The sentence of RV(history.trend) of each host, by host name.
      type: dict
    png:
      description: Path of C(trend.png), or null.
      type: str
  sample:
    appended: [/home/ops/gpufleet-reports/benchmark-history/gpu-node-1/kimi-k2.5.int4.jsonl]
    problems: []
    trend: ["gpu-node-1 (kimi-k2.5 int4): peak -4.0 % over the last 5 runs (2,276.0 to 2,185.0 tok/s); ..."]
    png: /home/ops/gpufleet-reports/benchmark/20261202T153000Z/trend.png
markdown:
  description: Path of the Markdown report.
  returned: always
  type: str
  sample: /home/ops/gpufleet-reports/benchmark/20261202T153000Z/report.md
png:
  description: Path of the figure, or null when O(png=false) or when it could not be drawn (RV(plot_skipped)).
  returned: always
  type: str
  sample: /home/ops/gpufleet-reports/benchmark/20261202T153000Z/report.png
run_id:
  description: The run's name as shown in the report.
  returned: always
  type: str
  sample: 20261202T153000Z
hosts:
  description: One line per host directory, in name order.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: Host name (the directory name).
      type: str
    model:
      description: Served model name benchmarked.
      type: str
    status:
      description: V(ok), V(failed), V(regressed) (as the role recorded it) or V(incomplete) (no summary).
      type: str
    single_stream_tok_s:
      description: Output tokens per second at concurrency 1.
      type: float
    peak_tok_s:
      description: Highest output tokens per second of a level without failed requests.
      type: float
    peak_concurrency:
      description: Concurrency of the peak.
      type: int
    failed_requests:
      description: Failed requests over the sweep.
      type: int
    levels:
      description: Number of concurrency levels with a result.
      type: int
    regressed:
      description: The role's verdict found a regression against the baseline.
      type: bool
    verdict:
      description: The verdict's sentence.
      type: str
    failure:
      description: Why the host's run failed, if it did.
      type: str
  sample:
    - host: gpu-node-1
      model: kimi-k2.5
      status: ok
      single_stream_tok_s: 81.6
      peak_tok_s: 2270.4
      peak_concurrency: 64
      failed_requests: 0
      levels: 3
      regressed: false
      verdict: "within 10% of the baseline of kimi-k2.5: single_stream_tok_s 81.6 tok/s (baseline 82.0), ..."
      failure: null
written:
  description: Paths written (kept results and report files) or, in check mode, that would be.
  returned: always
  type: list
  elements: str
  sample: [/home/ops/gpufleet-reports/benchmark/20261202T153000Z/gpu-node-1/c1.json]
plot_skipped:
  description: Why C(report.png) was not drawn although O(png=true) (matplotlib cannot be imported), else null.
  returned: always
  type: str
  sample: null
problems:
  description: Files that could not be read (also listed in the report).
  returned: always
  type: list
  elements: str
  sample: []
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import baseline as bench_baseline
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import history as bench_history
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import plot as bench_plot
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as bench_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import files as reportfile
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline, DeadlinePassed

# the clock of the timeout (a name of its own, so that a test can make time pass)
_clock = time.monotonic


def _current(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
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
        ),
        supports_check_mode=True,
    )
    path = module.params['path'].rstrip('/') or '/'
    if module.params['max_file_mib'] < 1:
        module.fail_json(msg='max_file_mib must be at least 1, got %d. Nothing was written.' % module.params['max_file_mib'])
    if not 1 <= module.params['timeout'] <= 604800:
        module.fail_json(msg='timeout must be from 1 to 604800 seconds, got %d. Nothing was written.' % module.params['timeout'])
    if module.params['history_max_lines'] < 2 or module.params['history_max_kib'] < 32:
        module.fail_json(msg='history_max_lines must be at least 2 and history_max_kib at least 32, got %d and %d. '
                             'Nothing was written.' % (module.params['history_max_lines'], module.params['history_max_kib']))
    if not 2 <= module.params['trend_runs'] <= 1000:
        module.fail_json(msg='trend_runs must be from 2 to 1000, got %d. Nothing was written.' % module.params['trend_runs'])
    deadline = Deadline(module.params['timeout'], clock=_clock)
    max_bytes = module.params['max_file_mib'] * 1024 * 1024
    run_id = module.params['run_id'] or os.path.basename(path)
    strays = sorted(set(item['run_id'] for item in module.params['results']
                        if item.get('run_id') not in (None, run_id)))
    if strays:
        module.fail_json(msg='The results given belong to run %s, not to run %s of %s: pass only the results of this '
                             'run.' % (', '.join(strays), run_id, path))
    try:
        planned = bench_report.plan_results(path, module.params['results'])
    except bench_report.HistoryError as exc:
        module.fail_json(msg='Cannot keep the benchmark results in %s: %s.' % (path, to_native(exc)))
    if not planned and not os.path.isdir(path):
        module.fail_json(msg='The benchmark run directory %s does not exist on this host: run the benchmark role '
                             'first, or point path at <benchmark_local_results_dir>/<run id>.' % path)

    written = []

    def late(exc):
        """The timeout passed: fail naming what was next and the files already written."""
        done = [] if module.check_mode else list(written)
        module.fail_json(msg='%s%s. %s' % (str(exc)[:1].upper(), str(exc)[1:], 'Already written: %s.' % ', '.join(done)
                                           if done else 'Nothing was written.'), changed=bool(done), written=done)

    md_path = os.path.join(path, 'report.md')
    before_md = _current(md_path)
    for target, data in planned:
        try:
            deadline.check('the result %s was kept' % target)
        except DeadlinePassed as exc:
            late(exc)
        written.append(target)
        if not module.check_mode:
            try:
                directory = os.path.dirname(target)
                if not os.path.isdir(directory):
                    os.makedirs(directory, 0o755)
                reportfile.write_atomic(module, target, data)
            except (IOError, OSError) as exc:
                module.fail_json(msg='Could not keep the benchmark result %s: %s. Check that the directory is '
                                     'writable and the disk not full.' % (target, to_native(exc)),
                                 changed=bool(written[:-1]), written=written[:-1])

    entries, markdown, plot_skipped, history, record_result = [], None, None, None, (None, None)
    png_name = 'report.png' if module.params['png'] else None
    wanted = module.params['render'] or module.params['history_dir'] or module.params['record']
    if wanted and (os.path.isdir(path) or planned):
        try:
            entries = bench_report.collect_run(path, max_bytes, deadline=deadline) if os.path.isdir(path) else []
            deadline.check('the report was drawn')
        except DeadlinePassed as exc:
            late(exc)
        except OSError as exc:
            module.fail_json(msg='Could not read the benchmark run directory %s: %s. Check its permissions.'
                                 % (path, to_native(exc)), changed=bool(written), written=written)
        if module.check_mode and planned:
            # what the run directory would hold: the kept hosts plus the planned ones
            entries = _with_planned(entries, planned, path)
        history = _history(module, entries, run_id, path, written, deadline, late) if module.params['history_dir'] else None
        record_name = None
        if module.params['record']:
            record_name = 'baselines.yml'
            table, dummy = bench_baseline.record_table(entries)
            record_result = (os.path.join(path, record_name), table)
        png_data, outputs = None, []
        if png_name and module.params['render']:
            try:
                png_data = bench_report.render_png(entries, run_id)
            except bench_plot.PlotUnavailable as exc:
                plot_skipped = to_native(exc)
                png_name = None
                module.warn('report.png was not drawn: %s. report.md was written without the figure.' % plot_skipped)
        if module.params['render']:
            markdown = bench_report.render_markdown(entries, run_id, title=module.params['title'], png_name=png_name,
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
            if _current(target) != data:
                written.append(target)
                if not module.check_mode:
                    try:
                        reportfile.write_atomic(module, target, data)
                    except (IOError, OSError) as exc:
                        module.fail_json(msg='Could not write the benchmark report %s: %s. Check that the directory '
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
    if module._diff and markdown is not None:
        result['diff'] = dict(before_header=md_path, after_header=md_path,
                              before=(before_md or b'').decode('utf-8', 'replace'), after=markdown)
    result['check_mode'] = module.check_mode
    module.exit_json(**result)


def _history(module, entries, run_id, path, written, deadline, late):
    """Append the run's results to the history, read each host's back, and draw the trend (see history_dir)."""
    history_dir = module.params['history_dir'].rstrip('/') or '/'
    max_lines, max_bytes = module.params['history_max_lines'], module.params['history_max_kib'] * 1024
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
            if not module.check_mode:
                try:
                    there = bench_history.append(target, line, max_lines, max_bytes)
                except (bench_history.HistoryFileError, IOError, OSError) as exc:
                    module.fail_json(msg='Could not append to the benchmark history %s: %s. The results of the run '
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
                                                module.params['trend_runs'])
        found['trend'].append(sentence)
        found['by_host'][line['host']] = sentence
    if series and module.params['png']:
        try:
            deadline.check('the trend was drawn')
        except DeadlinePassed as exc:
            late(exc)
        try:
            found['png_data'] = bench_history.render_trend_png(
                series, title='vLLM benchmark history up to run %s' % bench_plot.bench_text(run_id)[:40])
            found['png'] = os.path.join(path, 'trend.png')
        except bench_plot.PlotUnavailable as exc:
            module.warn('trend.png was not drawn: %s.' % to_native(exc))
    return found


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


if __name__ == '__main__':
    main()
