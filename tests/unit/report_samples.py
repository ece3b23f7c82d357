# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet runs for the report's tests and for the sample pictures in docs/images.

Each host's levels are result dicts shaped like what ``vllm bench serve
--save-result`` writes (the fields the report reads), run through the same
parse / summarize / compare functions the role uses, and kept as
``bench_report.collect_run`` returns them.

    python tests/unit/report_samples.py docs/images    # writes report-3-hosts.png, report-12-hosts.png and
                                                       # trend-history.png
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(HERE)), '.cache', 'collections')
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench  # noqa: E402

BASELINES = {'kimi-k2.5': {'single_stream_tok_s': 82, 'peak_tok_s': 2276}}
LEVELS = (1, 8, 32, 64, 128, 256)


def level(concurrency, stream_tok_s=82.0, cap_tok_s=2276.0, ttft_ms=20.0, failed=0, output_len=256):
    """One level's result: streams at stream_tok_s each, together capped at cap_tok_s."""
    prompts = max(8, 2 * concurrency)
    completed = prompts - failed
    rate = min(concurrency * stream_tok_s, cap_tok_s) * (1 - 0.015 * (concurrency > 1))
    tpot = 1000.0 * concurrency / rate if completed else 0.0
    queue = max(0.0, concurrency * stream_tok_s / cap_tok_s - 1)
    ttft = ttft_ms * (1 + 0.02 * concurrency) * (1 + 2.5 * queue) if completed else 0.0
    duration = completed * output_len / rate if completed else 30.0
    return {
        'backend': 'vllm', 'model_id': 'kimi-k2.5', 'max_concurrency': concurrency, 'num_prompts': prompts,
        'completed': completed, 'failed': failed, 'duration': duration,
        'total_input_tokens': completed * 1024, 'total_output_tokens': completed * output_len,
        'output_throughput': rate if completed else 0.0,
        'request_throughput': completed / duration,
        'mean_ttft_ms': ttft * 1.1, 'median_ttft_ms': ttft, 'p99_ttft_ms': ttft * (1.6 + 0.004 * concurrency),
        'mean_tpot_ms': tpot, 'median_tpot_ms': tpot, 'p99_tpot_ms': tpot * 1.12,
        'mean_itl_ms': tpot, 'median_itl_ms': tpot, 'p99_itl_ms': tpot * 1.8,
    }


def host(name, levels=LEVELS, failure_at=None, model='kimi-k2.5', tolerance=0.10, baselines=None, **shape):
    """A host entry as collect_run gives it: the levels up to failure_at (where every request failed)."""
    rows = []
    for concurrency in levels:
        if failure_at is not None and concurrency > failure_at:
            break
        failed = max(8, 2 * concurrency) if concurrency == failure_at else 0
        rows.append(bench.parse_result(level(concurrency, failed=failed, **shape)))
    summary = bench.summarize(rows)
    verdict = bench.compare(summary, BASELINES if baselines is None else baselines, model=model, tolerance=tolerance)
    failure = None
    if failure_at is not None:
        failure = '%d of %d requests failed at concurrency %d (0 completed).' % (rows[-1]['failed'],
                                                                                 rows[-1]['num_prompts'], failure_at)
    status = 'failed' if failure else ('regressed' if verdict['regressed'] else 'ok')
    return {'host': name, 'status': status, 'summary': summary, 'verdict': verdict,
            'meta': {'model': model, 'failure': failure}, 'problems': []}


def three_hosts():
    """One host at the baseline, one under it (a slow node), one whose sweep failed at concurrency 64."""
    return [host('gpu-node-1'),
            host('gpu-node-2', stream_tok_s=70.0, cap_tok_s=1650.0, ttft_ms=26.0),
            host('gpu-node-3', failure_at=64, stream_tok_s=80.0)]


def fleet(count):
    """COUNT hosts around the baseline, every fifth a little slower, the seventh failed at concurrency 128."""
    entries = []
    for index in range(count):
        name = 'gpu-node-%d' % (index + 1)
        if index == 6:
            entries.append(host(name, failure_at=128))
        else:
            slow = 0.8 if index % 5 == 4 else 1.0
            entries.append(host(name, stream_tok_s=(81.0 + index % 3) * slow, cap_tok_s=(2290.0 - 9 * index) * slow,
                                ttft_ms=19.0 + index % 4))
    return entries


def history(nights=14):
    """Kimi-K2.5 INT4 on three hosts over NIGHTS nightly runs (history lines, oldest first).

    gpu-node-1 holds its figures; gpu-node-2 loses about 0.9 % of its peak each night (a slow regression that stays
    within the 10 % tolerance for 13 nights, so no gate fires until the last); gpu-node-3 failed one night.
    """
    series = []
    for index, name in enumerate(('gpu-node-1', 'gpu-node-2', 'gpu-node-3')):
        lines = []
        for night in range(nights):
            drift = 1 - 0.009 * night if index == 1 else 1 + 0.004 * ((night * (index + 3)) % 5 - 2)
            peak, single = 2276.0 * 1.01 * drift, 82.0 * (1.0 + 0.003 * ((night + index) % 3))
            status = 'regressed' if peak < 2276.0 * 0.9 else 'ok'
            if index == 2 and night == 9:
                status, peak, single = 'failed', None, None
            lines.append({'schema': 1, 'run_id': '202611%02dT020000Z' % (night + 10),
                          'date': '2026-11-%02dT02:00:00Z' % (night + 10), 'host': name, 'model': 'kimi-k2.5',
                          'quantization': 'int4', 'vllm_version': '0.11.1.dev%d' % (400 + 7 * night), 'mode': 'gate',
                          'status': status, 'single_stream_tok_s': single, 'peak_tok_s': peak,
                          'peak_concurrency': 128, 'baseline_single_stream_tok_s': 82.0, 'baseline_peak_tok_s': 2276.0,
                          'tolerance': 0.10})
        series.append({'host': name, 'model': 'kimi-k2.5', 'quantization': 'int4', 'lines': lines})
    return series


def main(directory):
    from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import history as bench_history
    from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import plot as bench_plot
    path = os.path.join(directory, 'trend-history.png')
    with open(path, 'wb') as handle:
        handle.write(bench_history.render_trend_png(history(), 'vLLM benchmark history up to run 20261123T020000Z'))
    print(path)
    for name, entries, run_id in (('report-3-hosts.png', three_hosts(), '20261202T153000Z'),
                                  ('report-12-hosts.png', fleet(12), '20261203T080000Z')):
        path = os.path.join(directory, name)
        with open(path, 'wb') as handle:
            handle.write(bench_plot.render_png(entries, run_id))
        print(path)


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '.')
