# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The client's figures of a benchmark level cross-checked with the server's own ``/metrics``.

``vllm bench serve`` measures on the client's clock: a client that is
starved (a busy machine: its CPU, its memory paged out, its disk) reads the
tokens late and reports a lower throughput although the server produced them
on time. vLLM counts on the server side what it generated
(``vllm:generation_tokens_total``), how long each request took
(``vllm:e2e_request_latency_seconds``) and its time per output token
(``vllm:request_time_per_output_token_seconds``; older builds:
``vllm:time_per_output_token_seconds``; else ``vllm:inter_token_latency_seconds``).
Read before and after a level, the differences give the server's rate:

* ``server_tok_s`` = generated tokens / (sum of request latencies /
  concurrency): exact at concurrency 1 (requests one after another), an
  estimate above it (the requests of a level of equal length overlap);
* ``server_tpot_ms``: the mean time per output token of those requests.

The level's ``status``: ``agree`` (the client read at least
``1 - tolerance`` of the server's rate and its TPOT is within the tolerance),
``client_starved`` (it did not: the measuring side lost time, the server did
not), or ``unavailable`` (``reason``: no metrics, other traffic, nothing
counted).

Public API:

* :func:`server_delta(before, after)` -> dict (from two :func:`vllm_metrics.summarize` results)
* :func:`check(row, before, after, tolerance=DEFAULT_TOLERANCE)` -> dict (the cross-check of one level)
* :func:`unavailable(reason)` -> dict
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math

#: time per output token, newest name first (vLLM 0.11 renamed time_per_output_token_seconds)
TPOT_HISTOGRAMS = ('vllm:request_time_per_output_token_seconds', 'vllm:time_per_output_token_seconds',
                   'vllm:inter_token_latency_seconds')
E2E_HISTOGRAM = 'vllm:e2e_request_latency_seconds'
DEFAULT_TOLERANCE = 0.10
#: requests the server may count beyond the level's own (``vllm bench serve`` sends one test prompt first)
EXTRA_REQUESTS = 2


def unavailable(reason):
    return {'status': 'unavailable', 'reason': reason}


def _num(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _hist(summary, name):
    hist = (summary.get('histograms') or {}).get(name) if isinstance(summary, dict) else None
    if not isinstance(hist, dict):
        return None, None
    return _num(hist.get('count')), _num(hist.get('sum'))


def server_delta(before, after):
    """What the server counted between two reads: requests, tokens, latency_s (sum of e2e latencies), tpot
    (count, sum, the histogram used); ValueError with a sentence when the reads cannot be compared."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        raise ValueError('a read of /metrics is missing')

    def counter(summary, key):
        value = summary.get(key)
        if isinstance(value, dict):
            value = value.get('total')
        return _num(value)

    delta = {}
    for key, name in (('requests', 'request_success'), ('tokens', 'generation_tokens_total')):
        first, second = counter(before, name), counter(after, name)
        if first is None or second is None:
            raise ValueError('the server does not count %s (vllm:%s)' % (name.replace('_', ' '),
                                                                         name.replace('_total', '') + '_total'))
        if second < first:
            raise ValueError('the server\'s %s went down (%g to %g): it restarted during the level'
                             % (name, first, second))
        delta[key] = second - first
    count0, sum0 = _hist(before, E2E_HISTOGRAM)
    count1, sum1 = _hist(after, E2E_HISTOGRAM)
    if None in (count0, sum0, count1, sum1):
        raise ValueError('the server has no %s histogram' % E2E_HISTOGRAM)
    delta['latency_s'] = sum1 - sum0
    delta['latency_count'] = count1 - count0
    delta['tpot'] = None
    for name in TPOT_HISTOGRAMS:
        count0, sum0 = _hist(before, name)
        count1, sum1 = _hist(after, name)
        if None not in (count0, sum0, count1, sum1) and count1 > count0:
            delta['tpot'] = {'histogram': name, 'count': count1 - count0, 'sum': sum1 - sum0}
            break
    return delta


def _round(value, digits=3):
    return None if value is None else round(value, digits)


def check(row, before, after, tolerance=DEFAULT_TOLERANCE):
    """The cross-check of one level: ROW (a parsed result: concurrency, completed, total_output_tokens,
    output_tok_s, mean_tpot_ms) against the server's reads BEFORE and AFTER it (summaries of /metrics, or
    None with ``unavailable`` already decided by the caller)."""
    try:
        delta = server_delta(before, after)
    except ValueError as exc:
        return unavailable('%s; the client\'s figures were not cross-checked' % str(exc).rstrip('.'))
    concurrency = row.get('concurrency') or 1
    completed = row.get('completed') or 0
    client_tok_s = _num(row.get('output_tok_s'))
    result = {'status': 'unavailable', 'reason': None, 'tolerance': tolerance, 'concurrency': concurrency,
              'server_requests': delta['requests'], 'server_tokens': delta['tokens'],
              'server_latency_s': _round(delta['latency_s']), 'client_tok_s': _round(client_tok_s, 2),
              'client_tpot_ms': _round(_num(row.get('mean_tpot_ms'))), 'server_tok_s': None, 'server_tpot_ms': None,
              'tpot_histogram': delta['tpot']['histogram'] if delta['tpot'] else None, 'ratio': None}
    if delta['requests'] < completed or delta['requests'] > completed + EXTRA_REQUESTS:
        result['reason'] = ('the server counted %d finished requests during the level, the benchmark %d: other '
                            'traffic reached it (or it restarted), so its figures are not the benchmark\'s'
                            % (delta['requests'], completed))
        return result
    if delta['tokens'] <= 0 or delta['latency_s'] <= 0:
        result['reason'] = 'the server counted no generated tokens or no request time during the level'
        return result
    if client_tok_s is None:
        result['reason'] = 'the client reported no output throughput'
        return result
    server_tok_s = delta['tokens'] / (delta['latency_s'] / concurrency)
    result['server_tok_s'] = _round(server_tok_s, 2)
    if delta['tpot']:
        result['server_tpot_ms'] = _round(1000.0 * delta['tpot']['sum'] / delta['tpot']['count'])
    ratio = client_tok_s / server_tok_s
    result['ratio'] = _round(ratio)
    reasons = []
    if ratio < 1 - tolerance:
        reasons.append('the client read %.1f tok/s, the server generated %.1f tok/s (%s) in that time'
                       % (float(client_tok_s), float(server_tok_s),
                          'its requests one after another' if concurrency == 1 else
                          'its request latencies over concurrency %d' % concurrency))
    client_tpot, server_tpot = result['client_tpot_ms'], result['server_tpot_ms']
    if client_tpot and server_tpot and client_tpot > server_tpot * (1 + tolerance):
        reasons.append('the client saw %.1f ms per output token, the server %.1f ms'
                       % (float(client_tpot), float(server_tpot)))
    if reasons:
        result['status'] = 'client_starved'
        result['reason'] = ('%s: the measuring side lost the time, not the server (a busy machine starves the '
                            'client)' % '; '.join(reasons))
    else:
        result['status'] = 'agree'
        result['reason'] = ('the server\'s own metrics agree: %.1f tok/s%s'
                            % (float(server_tok_s), ', %.1f ms per output token' % float(server_tpot) if server_tpot else ''))
    return result
