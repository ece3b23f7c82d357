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
  - Usually run once per play (C(run_once)).
  - It is an action plugin and runs on the control node, in the Python that runs Ansible, whatever host the task is
    for. No module is sent to a host and no connection is opened, so the task needs no C(delegate_to).
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
      - It needs matplotlib in the Python that runs Ansible on the control node. Without it the task does not fail, so that the
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
        description:
          - Written as C(summary.json).
          - Its optional C(quality) is the host's quality gate result (C(quality_result), what
            M(gpufleet.vllm.vllm_quality_info) returns); it is kept as a small, checked digest of its figures and the
            reference's, and C(report.md) shows it as the host's C(Answer quality) table (verdict, answers matched,
            the passage's NLL against the reference's, the relative difference and its tolerance, the build against
            the reference's). V(null), or a skipped result, is left out.
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
  - gpufleet.vllm.attributes.controller_writer
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
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
    says) in the control node's Python, so the GPU hosts never need matplotlib. The same results give the same
    bytes.
  - The concurrency axis is logarithmic (base 2) with a tick at each level run; levels with failed requests are
    marked with a red cross on the axis and kept in the tables.
  - At most 32 hosts are drawn (failed, regressed and incomplete hosts first, then by name; the title says how many
    were left out) and 32 levels per host; every host is in C(report.md).
requirements:
  - matplotlib in the control node's Python for C(report.png) (C(requirements/runtime.txt) pins it).
seealso:
  - module: ansible.builtin.fetch
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Render the fleet report of a run
  gpufleet.vllm.bench_report:
    path: gpufleet-reports/benchmark/20261202T153000Z
  run_once: true
  register: report

- name: Show where it is
  ansible.builtin.debug:
    msg: "{{ report.markdown }} ({{ report.hosts | length }} hosts)"
"""

RETURN = r"""
check_mode:
  description:
    - Whether the task ran in check mode (nothing written on the control node).
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
    quality:
      description:
        - The quality gate's figures next to the reference's in a few words (V(null) when the gate did not run
          before the benchmark).
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
      quality: "quality passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %)"
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
