# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Results of ``vllm bench serve``: parse, summarize, compare with baselines.

Pure functions on plain data (standard library only), shared by the filter
plugins ``gpufleet.vllm.bench_parse`` / ``bench_summary`` / ``bench_compare``
and the ``gpufleet.vllm.bench_report`` module.

The result JSON of ``vllm bench serve --save-result`` changes between vLLM
versions (``failed`` appeared late, ``request_goodput:`` carried a colon,
the oldest scripts wrote ``request_inthroughput`` and ``input_throughput``
and no ``total_token_throughput``, latency percentiles follow
``--metric-percentiles``). :func:`parse_result` reads every known spelling,
derives what it can from the counts (tokens / duration) and never raises on
a missing or malformed field: the field is ``None`` and a note says why.

Public API:

* ``parse_result(data, concurrency=None, source=None) -> row``
* ``summarize(rows, single_stream_concurrency=1) -> summary``
* ``compare(summary, baselines, model=None, tolerance=0.10, quantization=None) -> verdict``
* ``resolve_baseline(baselines, model, quantization=None) -> dict`` (flat or keyed by quantisation)
* ``load_result_text(text) -> dict`` (JSON, or the last object of an
  ``--append-result`` file)
* ``ROW_METRICS``: the latency fields of a row

Bounds: a result text longer than ``MAX_RESULT_CHARS`` (64 MiB), JSON nested
deeper than Python's recursion limit and numbers beyond a float are refused
or ignored (a clean :class:`BenchResultError` or a ``None`` figure); nested
``metrics`` objects are followed ``MAX_NESTING`` levels deep at most.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math

LATENCY_METRICS = ('ttft', 'tpot', 'itl', 'e2el')
LATENCY_STATS = ('mean', 'median', 'p99')
ROW_METRICS = tuple('%s_%s_ms' % (stat, metric) for metric in LATENCY_METRICS for stat in LATENCY_STATS)
COMPARED_METRICS = ('single_stream_tok_s', 'peak_tok_s')
# what a person reads for each compared metric (the keys stay in the data)
METRIC_LABELS = {'single_stream_tok_s': 'single stream', 'peak_tok_s': 'peak'}
SCHEMA = 1
MAX_RESULT_CHARS = 64 * 1024 * 1024
MAX_NESTING = 8


class BenchResultError(ValueError):
    """The input is not a benchmark result at all (not merely an old one)."""


def _number(value):
    """A finite float from a JSON value (numbers, numeric strings), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            result = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except (ValueError, OverflowError):
            return None
    else:
        return None
    if math.isnan(result) or math.isinf(result):
        return None
    return result


def _count(value):
    number = _number(value)
    if number is None or number < 0 or number != int(number):
        return None
    return int(number)


def _finite(value):
    """VALUE when it is a finite number (sums and ratios of huge figures may not be), else None."""
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return value


def _loads(text):
    """json.loads, with nesting too deep for the decoder as a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError('nested too deeply')


def _keys(data):
    return ', '.join(sorted(str(key) for key in data)[:12])


def _first(data, keys):
    """(value, key) of the first key present with a usable number."""
    for key in keys:
        if key in data:
            number = _number(data[key])
            if number is not None:
                return number, key
    return None, None


def load_result_text(text):
    """Decode the text of a result file.

    ``--save-result`` writes one JSON object; ``--append-result`` writes one
    per line. The last complete object wins (the latest run).
    """
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    if not isinstance(text, str):
        raise BenchResultError('expected the text of a result file, got %s' % type(text).__name__)
    if len(text) > MAX_RESULT_CHARS:
        raise BenchResultError('the result is %d characters long, more than the %d a result is read up to'
                               % (len(text), MAX_RESULT_CHARS))
    stripped = text.strip()
    if not stripped:
        raise BenchResultError('the result file is empty (did vllm bench serve stop before saving?)')
    try:
        data = _loads(stripped)
    except ValueError:
        data = None
        for line in reversed(stripped.splitlines()):
            line = line.strip()
            if not line:
                continue
            try:
                data = _loads(line)
                break
            except ValueError:
                continue
        if data is None:
            raise BenchResultError('the result file is not JSON, or nested too deeply, or with a number too long '
                                   '(first bytes: %r)' % stripped[:60])
    return _one_object(data)


def _one_object(data):
    if isinstance(data, (list, tuple)):
        objects = [item for item in data if isinstance(item, dict)]
        if not objects:
            raise BenchResultError('the result file holds a list without any result object')
        data = objects[-1]
    if not isinstance(data, dict):
        raise BenchResultError('the result file holds a %s, not a result object' % type(data).__name__)
    return data


def _nested_metric(data, metric, stat):
    """Newer layouts may group latencies: {"ttft": {"mean": ..}} or {"ttft_ms": {..}}, in ms or s.

    Follows "metrics" objects MAX_NESTING levels deep at most.
    """
    for dummy in range(MAX_NESTING):
        for container_key, scale in (('%s_ms' % metric, 1.0), (metric, 1.0), ('%s_s' % metric, 1000.0)):
            container = data.get(container_key)
            if isinstance(container, dict):
                value = _number(container.get(stat))
                if value is None and stat == 'median':
                    value = _number(container.get('p50'))
                if value is not None:
                    return _finite(value * scale)
        metrics = data.get('metrics')
        if not isinstance(metrics, dict) or metrics is data:
            return None
        data = metrics
    return None


def _percentile(values, pct):
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _from_samples(data, metric, stat):
    """Latency stats from the per-request lists of --save-detailed (seconds)."""
    samples = None
    if metric == 'ttft' and isinstance(data.get('ttfts'), list):
        samples = [_number(v) for v in data['ttfts']]
    elif metric == 'e2el' and isinstance(data.get('latencies'), list):
        samples = [_number(v) for v in data['latencies']]
    elif metric == 'itl' and isinstance(data.get('itls'), list):
        samples = []
        for request in data['itls']:
            if isinstance(request, list):
                samples.extend(_number(v) for v in request)
    if not samples:
        return None
    values = [v for v in samples if v is not None and v > 0]
    if not values:
        return None
    if stat == 'mean':
        result = sum(values) / len(values)
    elif stat == 'median':
        result = _percentile(values, 50)
    else:
        result = _percentile(values, 99)
    return _finite(result * 1000.0)


def _latency(data, metric, stat, notes):
    keys = ['%s_%s_ms' % (stat, metric)]
    if stat == 'median':
        keys.append('p50_%s_ms' % metric)
    value, dummy = _first(data, keys)
    if value is None:
        value = _nested_metric(data, metric, stat)
    if value is None:
        value = _from_samples(data, metric, stat)
        if value is not None:
            notes.append('%s_%s_ms computed from the per-request samples' % (stat, metric))
    return value


def parse_result(data, concurrency=None, source=None):
    """Normalize one result of ``vllm bench serve`` (a dict or its JSON text).

    ``concurrency`` is the level the caller asked for; the file's own
    ``max_concurrency`` wins when present. Returns a flat dict (a "row"):
    concurrency, num_prompts, completed, failed, duration_s, output_tok_s,
    total_tok_s, input_tok_s, request_s, peak_output_tok_s,
    total_input_tokens, total_output_tokens, the latency fields of
    ``ROW_METRICS`` (ms; None when absent), model_id, backend, date, source
    and ``notes`` (what was missing or derived).
    """
    if isinstance(data, (list, tuple)):
        data = _one_object(data)
    elif not isinstance(data, dict):
        data = load_result_text(data)
    notes = []
    row = {'source': source}

    level = _count(data.get('max_concurrency'))
    if level is None:
        level = _count(concurrency)
        if concurrency is not None and level is None:
            notes.append('concurrency %r is not a whole number' % (concurrency,))
    elif concurrency is not None and _count(concurrency) not in (None, level):
        notes.append('the file says max_concurrency %d, the sweep asked for %s' % (level, concurrency))
    row['concurrency'] = level

    row['num_prompts'] = _count(data.get('num_prompts'))
    row['completed'] = _count(data.get('completed'))
    failed = _count(data.get('failed'))
    if failed is None:
        errors = data.get('errors')
        if isinstance(errors, list):
            failed = sum(1 for error in errors if error)
            notes.append('failed counted from the errors list (no "failed" field)')
        elif row['num_prompts'] is not None and row['completed'] is not None:
            failed = max(0, row['num_prompts'] - row['completed'])
            notes.append('failed = num_prompts - completed (no "failed" field)')
        else:
            notes.append('the number of failed requests is unknown')
    row['failed'] = failed
    if row['completed'] is None and row['num_prompts'] is not None and failed is not None:
        row['completed'] = max(0, row['num_prompts'] - failed)
        notes.append('completed = num_prompts - failed (no "completed" field)')

    duration, dummy = _first(data, ('duration', 'benchmark_duration', 'duration_s'))
    row['duration_s'] = duration
    row['total_input_tokens'] = _count(data.get('total_input_tokens'))
    row['total_output_tokens'] = _count(data.get('total_output_tokens'))
    usable_duration = duration if duration is not None and duration > 0 else None

    output, dummy = _first(data, ('output_throughput', 'output_token_throughput', 'output_tokens_per_second'))
    if output is None and usable_duration and row['total_output_tokens'] is not None:
        output = _finite(row['total_output_tokens'] / usable_duration)
        notes.append('output_tok_s = total_output_tokens / duration')
    row['output_tok_s'] = output

    input_rate, dummy = _first(data, ('input_throughput', 'input_token_throughput'))
    if input_rate is None and usable_duration and row['total_input_tokens'] is not None:
        input_rate = _finite(row['total_input_tokens'] / usable_duration)
    row['input_tok_s'] = input_rate

    total, dummy = _first(data, ('total_token_throughput', 'total_throughput', 'total_tokens_per_second'))
    if total is None and output is not None and input_rate is not None:
        total = _finite(output + input_rate)
        notes.append('total_tok_s = input + output throughput (no "total_token_throughput" field)')
    row['total_tok_s'] = total

    requests, key = _first(data, ('request_throughput', 'request_inthroughput', 'requests_per_second'))
    if requests is None and usable_duration and row['completed'] is not None:
        requests = _finite(row['completed'] / usable_duration)
        notes.append('request_s = completed / duration')
    row['request_s'] = requests

    peak, dummy = _first(data, ('max_output_tokens_per_s', 'peak_output_throughput'))
    row['peak_output_tok_s'] = peak

    for metric in LATENCY_METRICS:
        for stat in LATENCY_STATS:
            row['%s_%s_ms' % (stat, metric)] = _latency(data, metric, stat, notes)

    for key in ('model_id', 'backend', 'date', 'label', 'tokenizer_id'):
        value = data.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        elif isinstance(value, int) and not isinstance(value, bool):
            value = _count(value) if _number(value) is not None else None
        row[key] = value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    if row['backend'] is None and isinstance(data.get('endpoint_type'), str):
        row['backend'] = data['endpoint_type']

    if row['completed'] is None and output is None:
        raise BenchResultError('this is not a vllm bench serve result: it has neither "completed" nor any '
                               'throughput field (keys: %s)' % _keys(data))
    row['ok'] = bool(row['completed']) and failed == 0
    row['notes'] = notes
    return row


def _clean_row(row):
    """A copy of a row given back by a caller, with every figure a finite number or None (types may be wrong)."""
    clean = dict(row)
    for key in ('concurrency', 'num_prompts', 'completed', 'failed', 'total_input_tokens', 'total_output_tokens'):
        clean[key] = _count(row.get(key))
    for key in ('duration_s', 'output_tok_s', 'input_tok_s', 'total_tok_s', 'request_s', 'peak_output_tok_s') + ROW_METRICS:
        clean[key] = _number(row.get(key))
    if not isinstance(clean.get('notes'), list):
        clean['notes'] = []
    return clean


def _level_ok(row):
    return bool(row.get('completed')) and row.get('failed') == 0 and row.get('output_tok_s') is not None


def summarize(rows, single_stream_concurrency=1):
    """Summarize the levels of one sweep on one host.

    ``rows`` are :func:`parse_result` rows or raw result dicts. Returns:
    levels (sorted by concurrency), concurrencies, single_stream_tok_s (the
    output token throughput at ``single_stream_concurrency``: what
    ``--max-concurrency 1`` prints), single_stream_tpot_ms and
    single_stream_decode_tok_s (1000 / mean TPOT: the decode rate of one
    stream without the time to first token), peak_tok_s and
    peak_concurrency (highest output token throughput of a level without
    failures), peak_total_tok_s, completed_requests, failed_requests,
    failed_levels and ok (at least one level, no failed request).
    """
    if rows is None:
        rows = []
    if isinstance(rows, dict):
        rows = [rows]
    levels = []
    for row in rows:
        if isinstance(row, dict) and 'output_tok_s' in row and 'notes' in row:
            levels.append(_clean_row(row))
        else:
            levels.append(parse_result(row))
    levels.sort(key=lambda r: (r.get('concurrency') is None, r.get('concurrency') or 0))

    single = None
    for row in levels:
        if row.get('concurrency') == single_stream_concurrency and _level_ok(row):
            single = row
    good = [row for row in levels if _level_ok(row)]
    peak = max(good, key=lambda r: r['output_tok_s']) if good else None
    peak_total = [row['total_tok_s'] for row in good if row.get('total_tok_s') is not None]
    failed_levels = [row.get('concurrency') for row in levels if not _level_ok(row)]
    failed_requests = sum(row.get('failed') or 0 for row in levels)
    unknown = [row.get('concurrency') for row in levels if row.get('failed') is None]

    tpot = single.get('mean_tpot_ms') if single else None
    crosscheck = {}
    for name, row in (('single_stream_tok_s', single), ('peak_tok_s', peak)):
        if row is not None and isinstance(row.get('crosscheck'), dict):
            crosscheck[name] = dict(row['crosscheck'])
            if isinstance(row.get('attempts'), list):
                crosscheck[name]['attempts'] = len(row['attempts'])
    return {
        'schema': SCHEMA,
        'levels': levels,
        'concurrencies': [row.get('concurrency') for row in levels],
        'single_stream_concurrency': single_stream_concurrency,
        'single_stream_tok_s': single['output_tok_s'] if single else None,
        'single_stream_tpot_ms': tpot,
        'single_stream_decode_tok_s': (1000.0 / tpot) if tpot else None,
        'peak_tok_s': peak['output_tok_s'] if peak else None,
        'peak_concurrency': peak.get('concurrency') if peak else None,
        'peak_total_tok_s': max(peak_total) if peak_total else None,
        'completed_requests': sum(row.get('completed') or 0 for row in levels),
        'failed_requests': failed_requests,
        'failed_levels': failed_levels,
        'unknown_failures_levels': unknown,
        'ok': bool(levels) and not failed_levels,
        # (per compared figure, the cross-check of its level with the server's own metrics, when there was one)
        'crosscheck': crosscheck,
    }


def find_baseline(baselines, model):
    """The entry of ``model`` in a dict per served model name (exact, then case-insensitive).

    ``baselines`` may also be one baseline (a dict with metric keys), used for any model.
    The entry is returned as written: a baseline (flat form), a dict per
    quantisation (keyed form), or anything else (see :func:`resolve_baseline`).
    """
    if not isinstance(baselines, dict) or not baselines:
        return None, None
    if any(key in baselines for key in COMPARED_METRICS):
        return baselines, model
    if model is None:
        return None, None
    if not isinstance(model, (str, int, float)):
        raise ValueError('the model name must be text, got %s' % type(model).__name__)
    if model in baselines:
        return baselines[model], model
    lowered = str(model).lower()
    for key, value in baselines.items():
        if str(key).lower() == lowered:
            return value, key
    return None, None


def _is_baseline(value):
    return isinstance(value, dict) and any(key in value for key in COMPARED_METRICS)


def baseline_form(entry):
    """How a model's entry is written: ``flat`` (metric keys: any quantisation), ``keyed`` (per quantisation), None.

    Raises ValueError for an entry that is neither: a mix of metric keys and
    quantisation levels, or a quantisation level that is not a baseline
    (a dict with single_stream_tok_s and/or peak_tok_s) or null.
    """
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ValueError('must be a dict with single_stream_tok_s and/or peak_tok_s, got %r' % (entry,))
    if _is_baseline(entry):
        levels = sorted(str(key) for key, value in entry.items() if _is_baseline(value))
        if levels:
            raise ValueError('mixes the flat form (single_stream_tok_s/peak_tok_s) with quantisation levels (%s): '
                             'write it per quantisation only' % ', '.join(levels))
        return 'flat'
    for key, value in entry.items():
        if value is not None and not _is_baseline(value):
            raise ValueError('quantisation %s must be a dict with single_stream_tok_s and/or peak_tok_s, or null '
                             '(unknown until measured), got %r' % (key, value))
    return 'keyed'


def resolve_baseline(baselines, model, quantization=None):
    """The baseline of ``model`` and ``quantization`` in ``baselines``.

    Two forms per model, both accepted:

    * keyed by quantisation, ``{model: {int4: {...}, nvfp4: null}}``: the
      level of ``quantization`` (exact, then case-insensitive); a level that
      is missing or null, or an unknown quantisation, is no baseline;
    * flat, ``{model: {single_stream_tok_s: .., peak_tok_s: ..}}`` (the
      form before baselines were keyed): the model's baseline whatever its
      quantisation, said so in ``label``.

    Returns a dict: baseline (a dict or None), model (the key found), label
    (how a person names it: ``kimi-k2.5 int4``), form (flat, keyed, single
    or None), levels (the quantisations a keyed entry lists) and missing (a
    sentence when no baseline applies, else None).
    """
    entry, key = find_baseline(baselines, model)
    quant = None if quantization in (None, '') else str(quantization)
    found = {'baseline': None, 'model': key, 'label': key, 'form': None, 'levels': [], 'missing': None}
    if entry is baselines and _is_baseline(baselines):
        found.update(baseline=entry, form='single')
        return found
    if key is None:
        found['missing'] = 'no baseline for model %s%s: nothing compared' % (model, ' ' + quant if quant else '')
        return found
    try:
        form = baseline_form(entry)
    except ValueError as exc:
        raise ValueError('the baseline of %s %s' % (key, exc))
    found['form'] = form
    if form is None:
        found['missing'] = 'no baseline for model %s: nothing compared' % key
    elif form == 'flat':
        found['baseline'] = entry
        if quant:
            found['label'] = '%s (flat baseline, any quantisation; measured here: %s)' % (key, quant)
    else:
        found['levels'] = sorted(str(level) for level in entry)
        level_key = None
        if quant is not None:
            level_key = quant if quant in entry else next(
                (level for level in entry if str(level).lower() == quant.lower()), None)
        if quant is None:
            found['missing'] = ('no baseline for %s: its quantisation is unknown and its baselines are kept per '
                                'quantisation (%s); set benchmark_quantization' % (key, ', '.join(found['levels'])))
        elif level_key is None or entry[level_key] is None:
            found['label'] = '%s %s' % (key, quant)
            found['missing'] = ('no baseline for %s %s: record one with benchmark_mode=record and add it under '
                                'benchmark_baselines[%s][%s]' % (key, quant, key, quant))
        else:
            found['baseline'] = entry[level_key]
            found['label'] = '%s %s' % (key, level_key)
    return found


def _fmt(value):
    if value is None:
        return 'n/a'
    return '{:,.1f}'.format(value)


def _crosschecked(crosscheck, floor):
    """(why, starved) for a figure below its FLOOR: what the cross-check of its level with the server's own
    metrics says (a sentence), and whether it shows the client starved while the server kept up."""
    if not isinstance(crosscheck, dict) or not crosscheck.get('status'):
        return 'not cross-checked with the server\'s metrics (none were read)', False
    status, reason = crosscheck.get('status'), str(crosscheck.get('reason') or 'no reason given')
    server = _number(crosscheck.get('server_tok_s'))
    retried = crosscheck.get('attempts') if isinstance(crosscheck.get('attempts'), int) else 0
    again = ' (measured %d times)' % (retried + 1) if retried else ''
    if status == 'client_starved' and server is not None and server >= floor:
        return ('the server\'s own metrics say it generated %s tok/s, above the floor%s: %s'
                % (_fmt(server), again, reason)), True
    if status == 'client_starved':
        return ('the server\'s own figure, %s tok/s, is below the floor too (the client was also starved: %s)'
                % (_fmt(server), reason)), False
    if status == 'agree':
        return reason, False
    return 'the cross-check with the server was not possible: %s' % reason, False


def compare(summary, baselines, model=None, tolerance=0.10, quantization=None):
    """Regression verdict of a :func:`summarize` result against a baseline.

    ``quantization`` picks the level of a model whose baselines are keyed by
    quantisation (:func:`resolve_baseline`).

    A metric regresses when measured < baseline * (1 - tolerance). A metric
    the sweep did not measure (no concurrency-1 level, every level failed)
    is ``not_measured``, which is no regression by itself: failed requests
    are judged by the summary's ``ok``.

    A metric below its floor is cross-checked with the server's own metrics
    of its level (the summary's ``crosscheck``, from bench_serve): when they
    show the client starved while the server generated at or above the
    floor, it is ``inconclusive`` (no regression: the measuring side lost
    the time); otherwise it regresses, and the sentence says why (the
    server's metrics agree, show it slow too, or could not be read).

    Returns model, baseline_model,
    baseline, tolerance, checked (a baseline with at least one metric was
    found), regressed, regressions (sentences), inconclusive (only
    inconclusive shortfalls, no regression), inconclusive_reasons, metrics
    (per metric: measured, baseline, floor, ratio, status ok|regressed|
    inconclusive|above|not_measured|no_baseline, crosscheck: the sentence
    for a shortfall), quantization, baseline_label, baseline_form and
    message.
    """
    tol = _number(tolerance)
    if tol is None or tol < 0 or tol >= 1:
        raise ValueError('tolerance must be a fraction from 0 to below 1 (0.10 = 10%%), got %r' % (tolerance,))
    if not isinstance(summary, dict):
        raise ValueError('expected the summary of a sweep (a dict), got %s' % type(summary).__name__)
    found = resolve_baseline(baselines, model, quantization)
    baseline, baseline_model, label = found['baseline'], found['model'], found['label']
    metrics = {}
    regressions = []
    inconclusive = []
    checked = False
    crosschecks = summary.get('crosscheck') if isinstance(summary.get('crosscheck'), dict) else {}
    for name in COMPARED_METRICS:
        measured = _number(summary.get(name))
        expected = _number(baseline.get(name)) if baseline else None
        entry = {'measured': measured, 'baseline': expected, 'floor': None, 'ratio': None}
        if expected is None or expected <= 0:
            entry['status'] = 'no_baseline'
        else:
            checked = True
            entry['floor'] = expected * (1 - tol)
            if measured is None:
                entry['status'] = 'not_measured'
            else:
                entry['ratio'] = measured / expected
                if measured < entry['floor']:
                    shortfall = ('%s: %s tok/s is %.1f%% below the baseline %s tok/s (tolerance %.0f%%)'
                                 % (METRIC_LABELS[name], _fmt(measured), (1 - entry['ratio']) * 100, _fmt(expected),
                                    tol * 100))
                    why, starved = _crosschecked(crosschecks.get(name), entry['floor'])
                    entry['crosscheck'] = why
                    if starved:
                        entry['status'] = 'inconclusive'
                        inconclusive.append('%s, but %s' % (shortfall, why))
                    else:
                        entry['status'] = 'regressed'
                        regressions.append('%s; %s' % (shortfall, why))
                elif measured > expected * (1 + tol):
                    entry['status'] = 'above'
                else:
                    entry['status'] = 'ok'
        metrics[name] = entry
    if not checked:
        message = found['missing'] or 'no baseline for %s: nothing compared' % (label or model,)
    elif regressions:
        message = 'regression against the baseline of %s: %s' % (label, '; '.join(regressions))
        if inconclusive:
            message += ' (inconclusive besides: %s)' % '; '.join(inconclusive)
    elif inconclusive:
        message = ('inconclusive, not a regression: the client that measured was starved. Against the baseline of '
                   '%s: %s. Benchmark this host again when less runs beside the client (gpufleet.vllm.benchmark)'
                   % (label, '; '.join(inconclusive)))
    else:
        parts = ['%s %s tok/s (baseline %s)' % (METRIC_LABELS[name], _fmt(entry['measured']), _fmt(entry['baseline']))
                 for name, entry in metrics.items() if entry['status'] in ('ok', 'above')]
        message = 'within %.0f%% of the baseline of %s: %s' % (tol * 100, label, ', '.join(parts))
        above = [name for name, entry in metrics.items() if entry['status'] == 'above']
        if above:
            message += (' (above the baseline by more than the tolerance: %s; consider raising the baseline)'
                        % ', '.join(METRIC_LABELS[name] for name in above))
    return {
        'model': model,
        'baseline_model': baseline_model,
        'baseline_label': label,
        'baseline_form': found['form'],
        'quantization': None if quantization in (None, '') else str(quantization),
        'baseline': baseline,
        'tolerance': tol,
        'checked': checked,
        'regressed': bool(regressions),
        'regressions': regressions,
        # (a shortfall the server's own metrics contradict: the client was starved; no regression by itself)
        'inconclusive': bool(inconclusive) and not regressions,
        'inconclusive_reasons': inconclusive,
        'metrics': metrics,
        'message': message,
    }
