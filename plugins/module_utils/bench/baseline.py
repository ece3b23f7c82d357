# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Baselines per model and quantisation: what a model directory is quantised as, and the record mode's file.

Public API:

* ``normalize_quantization(value) -> str``: a quantisation name as the
  baselines key it (lower case, ``[a-z0-9][a-z0-9._+-]*``, at most 32
  characters); ValueError otherwise
* ``detect_quantization(model_dir, max_bytes=MAX_CONFIG_BYTES) -> dict``:
  name (or None), source (the file and key it came from), detail (why it
  is None, or the raw value)
* ``record_table(entries) -> (table, skipped)``: the baselines of a run's
  hosts (``bench_report.collect_run`` entries), keyed as
  ``benchmark_baselines`` is
* ``render_record(entries, run_id, written) -> str``: the baseline file
  (YAML) of record mode

Detection reads, in this order (the first that names a quantisation wins):
``hf_quant_config.json`` ``quantization.quant_algo`` (ModelOpt: NVFP4,
FP8, ...), ``config.json`` ``quantization_config`` (also under
``text_config``): ``quant_algo``, then ``quant_method`` (compressed-tensors
is named by its weights: ``int4`` for 4-bit integers, ``fp8`` for 8-bit
floats, ``nvfp4`` for its nvfp4 format), and a model without a
quantisation config by its ``torch_dtype`` (``bf16``). Each file is read up
to ``max_bytes`` and only when it is a regular file (a link into a Hugging
Face cache's blobs is followed); a larger, unreadable or malformed file is
named in ``detail``, never an exception.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import stat
import statistics

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench

MAX_CONFIG_BYTES = 16 * 1024 * 1024
QUANT_NAME = re.compile(r'^[a-z0-9][a-z0-9._+-]{0,31}\Z')
DTYPES = {'bfloat16': 'bf16', 'float16': 'fp16', 'half': 'fp16', 'float32': 'fp32', 'float': 'fp32'}
# names YAML would read as something other than text when written bare
_YAML_WORDS = frozenset(('null', 'true', 'false', 'yes', 'no', 'on', 'off', 'y', 'n', '~'))
_PLAIN_KEY = re.compile(r'^[A-Za-z][A-Za-z0-9_.-]*\Z')


def normalize_quantization(value):
    """VALUE (NVFP4, int4, W4A16_AWQ, ...) as the name baselines are keyed by; ValueError when it cannot be one."""
    if not isinstance(value, str):
        raise ValueError('a quantisation must be text such as int4, nvfp4 or fp8, got %r' % (value,))
    name = value.strip().lower()
    if not QUANT_NAME.fullmatch(name):
        raise ValueError('quantisation %r is not a plain name (letters, digits, ., _, +, -; at most 32 characters; '
                         'for example int4, nvfp4, fp8)' % (value[:60],))
    return name


def _read_json(path, max_bytes):
    """(data, problem): the JSON object of PATH, or None and why not; (None, None) when PATH is absent."""
    try:
        info = os.stat(path)
    except OSError as exc:
        if not os.path.lexists(path):
            return None, None
        return None, '%s: %s' % (os.path.basename(path), exc.strerror or exc)
    if not stat.S_ISREG(info.st_mode):
        return None, '%s is not a regular file' % os.path.basename(path)
    if info.st_size > max_bytes:
        return None, '%s is %d bytes, more than the %d read' % (os.path.basename(path), info.st_size, max_bytes)
    try:
        with open(path, 'rb') as handle:
            raw = handle.read(max_bytes + 1)
    except (IOError, OSError) as exc:
        return None, '%s: %s' % (os.path.basename(path), getattr(exc, 'strerror', None) or exc)
    if len(raw) > max_bytes:
        return None, '%s grew past the %d bytes read' % (os.path.basename(path), max_bytes)
    try:
        data = json.loads(raw.decode('utf-8'))
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None, '%s is not valid JSON' % os.path.basename(path)
    if not isinstance(data, dict):
        return None, '%s does not hold a JSON object' % os.path.basename(path)
    return data, None


def _compressed_tensors(config):
    """int4 / fp8 / nvfp4 ... of a compressed-tensors quantization_config, or None."""
    fmt = config.get('format')
    if isinstance(fmt, str) and 'nvfp4' in fmt.lower():
        return 'nvfp4'
    groups = config.get('config_groups')
    for group in (groups.values() if isinstance(groups, dict) else []):
        weights = group.get('weights') if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            continue
        bits = bench._count(weights.get('num_bits'))
        kind = weights.get('type')
        if bits and kind in ('int', 'float'):
            return '%s%d' % ('int' if kind == 'int' else 'fp', bits)
    return fmt if isinstance(fmt, str) and fmt else None


def _from_config(config):
    """(raw name, key) from a quantization_config dict, or (None, None)."""
    algo = config.get('quant_algo')
    if isinstance(algo, str) and algo:
        return algo, 'quant_algo'
    method = config.get('quant_method')
    if not isinstance(method, str) or not method:
        return None, None
    if method.lower() == 'compressed-tensors':
        name = _compressed_tensors(config)
        if name:
            return name, 'quant_method compressed-tensors, its weights'
    if method.lower() in ('gptq', 'awq'):
        bits = bench._count(config.get('bits'))
        if bits:
            return 'int%d' % bits, 'quant_method %s, bits' % method.lower()
    return method, 'quant_method'


def detect_quantization(model_dir, max_bytes=MAX_CONFIG_BYTES):
    """What the checkpoint in MODEL_DIR is quantised as (see the module's docstring)."""
    problems = []
    if not isinstance(model_dir, str) or not os.path.isdir(model_dir):
        return {'name': None, 'source': None, 'detail': 'the model directory %s does not exist on the host' % (model_dir,)}
    found = []
    hf_quant, problem = _read_json(os.path.join(model_dir, 'hf_quant_config.json'), max_bytes)
    if problem:
        problems.append(problem)
    section = hf_quant.get('quantization') if isinstance(hf_quant, dict) else None
    if isinstance(section, dict) and isinstance(section.get('quant_algo'), str) and section['quant_algo']:
        found.append((section['quant_algo'], 'hf_quant_config.json quantization.quant_algo'))
    config, problem = _read_json(os.path.join(model_dir, 'config.json'), max_bytes)
    if problem:
        problems.append(problem)
    if not found and isinstance(config, dict):
        for prefix, holder in (('', config), ('text_config.', config.get('text_config'))):
            if not isinstance(holder, dict):
                continue
            for key in ('quantization_config', 'compression_config'):
                if isinstance(holder.get(key), dict):
                    raw, how = _from_config(holder[key])
                    if raw:
                        found.append((raw, 'config.json %s%s %s' % (prefix, key, how)))
                        break
            if found:
                break
        if not found:
            for prefix, holder in (('', config), ('text_config.', config.get('text_config'))):
                dtype = holder.get('torch_dtype') or holder.get('dtype') if isinstance(holder, dict) else None
                if isinstance(dtype, str) and dtype.replace('torch.', '') in DTYPES:
                    found.append((DTYPES[dtype.replace('torch.', '')],
                                  'config.json %storch_dtype (no quantization_config)' % prefix))
                    break
    for raw, source in found:
        try:
            return {'name': normalize_quantization(raw), 'source': source, 'detail': raw}
        except ValueError as exc:
            problems.append('%s: %s' % (source, exc))
    if not problems:
        problems.append('neither hf_quant_config.json nor config.json names a quantisation or a dtype')
    return {'name': None, 'source': None, 'detail': '; '.join(problems)}


# --------------------------------------------------------------------------- the record file


def _figure(value):
    number = bench._number(value)
    return None if number is None else round(number, 1)


def summary_figure(entry, name):
    return bench._number(((entry or {}).get('summary') or {}).get(name))


def _shown_figure(value):
    return 'n/a' if value is None else '{:,.1f}'.format(value)


def _trusted(summary):
    """(SUMMARY with each figure its cross-check calls client_starved set to None, [(figure, why)]): a figure a
    starved client read is lower than what the server did, and a baseline from it would pass a real regression."""
    checks = summary.get('crosscheck') if isinstance(summary.get('crosscheck'), dict) else {}
    kept, starved = dict(summary), []
    for name in bench.COMPARED_METRICS:
        check = checks.get(name) if isinstance(checks.get(name), dict) else {}
        if check.get('status') != 'client_starved' or bench._number(summary.get(name)) is None:
            continue
        kept[name] = None
        server = _shown_figure(bench._number(check.get('server_tok_s')))
        why = ('left out: the client that measured it was starved (the server\'s own metrics: %s tok/s); benchmark '
               'again with less beside the client' % server)
        starved.append((name, why))
    return kept, starved


def record_table(entries):
    """{model: {quantisation: baseline}} from the hosts of a run that measured without failure.

    Each baseline: single_stream_tok_s and peak_tok_s (the median over the
    hosts of that model and quantisation), and ``recorded``: run, date,
    the hosts with their own figures and builds, and the sweep. A figure
    whose level's cross-check (the summary's ``crosscheck``) says
    ``client_starved`` is left out (null in that host's row, not in the
    median), and a host with no trusted figure left is left out whole.
    Returns (table, skipped): skipped names each host and figure left out
    and why.
    """
    groups, skipped = {}, []
    for entry in entries or []:
        meta = entry.get('meta') or {}
        summary = entry.get('summary') or {}
        host = bench_text(entry.get('host'))
        if entry.get('status') in ('failed', 'incomplete') or meta.get('failure'):
            skipped.append('%s: its sweep %s' % (host, 'failed' if entry.get('status') != 'incomplete' else
                                                 'was cut short'))
            continue
        model, quant = meta.get('model'), meta.get('quantization')
        if not isinstance(model, str) or not model:
            skipped.append('%s: no model name in its summary.json' % host)
            continue
        if not isinstance(quant, str) or not QUANT_NAME.match(quant):
            skipped.append('%s: the quantisation of %s is unknown (set benchmark_quantization)' % (host, model))
            continue
        summary, starved = _trusted(summary)
        for name, why in starved:
            skipped.append('%s: its %s figure, %s tok/s: %s' % (
                host, bench.METRIC_LABELS[name], _shown_figure(summary_figure(entry, name)), why))
        if all(bench._number(summary.get(name)) is None for name in bench.COMPARED_METRICS):
            skipped.append('%s: no figure of its sweep can be trusted as a baseline%s' % (
                host, ' (every one was measured by a starved client)' if starved else ''))
            continue
        groups.setdefault(model, {}).setdefault(quant, []).append((host, meta, summary))
    table = {}
    for model in sorted(groups):
        for quant in sorted(groups[model]):
            hosts = groups[model][quant]
            figures, fewer = {}, []
            for name in bench.COMPARED_METRICS:
                values = [bench._number(summary.get(name)) for dummy, dummy2, summary in hosts]
                values = [value for value in values if value is not None]
                figures[name] = round(statistics.median(values), 1) if values else None
                if len(values) < len(hosts):
                    fewer.append('%s of %d' % (bench.METRIC_LABELS[name], len(values)))
            first = hosts[0][1]
            table.setdefault(model, {})[quant] = {
                'single_stream_tok_s': figures['single_stream_tok_s'],
                'peak_tok_s': figures['peak_tok_s'],
                'recorded': {
                    'run_id': bench_text(first.get('run_id')),
                    'date': bench_text(first.get('started')),
                    'figures': 'median of %d host%s%s' % (
                        len(hosts), '' if len(hosts) == 1 else 's',
                        ' (%s: the others left out)' % ', '.join(fewer) if fewer else ''),
                    'hosts': [{'host': host, 'vllm_version': bench_text(meta.get('vllm_version')) or None,
                               'single_stream_tok_s': _figure(summary.get('single_stream_tok_s')),
                               'peak_tok_s': _figure(summary.get('peak_tok_s')),
                               'peak_concurrency': bench._count(summary.get('peak_concurrency'))}
                              for host, meta, summary in hosts],
                    'sweep': {'concurrency': [level for level in (bench._count(value) for value in
                                                                  (first.get('concurrency') or []))
                                              if level is not None][:64],
                              'input_len': bench._count(first.get('input_len')),
                              'output_len': bench._count(first.get('output_len'))},
                },
            }
    return table, skipped


def bench_text(value):
    """A value from a host as one line of printable text (None as '')."""
    if value is None:
        return ''
    if not isinstance(value, str):
        value = str(value)
    return ''.join(ch if ch.isprintable() else ' ' for ch in value).strip()[:200]


def _scalar(value):
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return repr(value)
    # JSON's escapes are YAML's double-quoted escapes: any text stays one valid scalar
    return json.dumps(str(value))


def _key(value):
    value = str(value)
    return value if _PLAIN_KEY.match(value) and value.lower() not in _YAML_WORDS else json.dumps(value)


def _yaml(value, indent):
    """Block YAML lines of VALUE (dicts, lists of dicts, lists of scalars inline, scalars)."""
    pad = ' ' * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and item:
                lines.append('%s%s:' % (pad, _key(key)))
                lines.extend(_yaml(item, indent + 2))
            elif isinstance(item, list) and item and all(isinstance(one, dict) for one in item):
                lines.append('%s%s:' % (pad, _key(key)))
                for one in item:
                    inner = _yaml(one, indent + 4)
                    lines.append('%s  - %s' % (pad, inner[0].lstrip()))
                    lines.extend(inner[1:])
            elif isinstance(item, list):
                lines.append('%s%s: [%s]' % (pad, _key(key), ', '.join(_scalar(one) for one in item)))
            elif isinstance(item, dict):
                lines.append('%s%s: {}' % (pad, _key(key)))
            else:
                lines.append('%s%s: %s' % (pad, _key(key), _scalar(item)))
    return lines


def render_record(entries, run_id, written):
    """The baseline file of record mode: YAML, keyed as benchmark_baselines, with comments for the reviewer."""
    table, skipped = record_table(entries)
    lines = [
        '---',
        '# Baselines recorded by gpufleet.vllm.benchmark (benchmark_mode: record), run %s.' % bench_text(run_id),
        '# Review the figures (a healthy host, the sweep you gate with), then copy the entries under',
        '# benchmark_baselines in your inventory (group_vars), keyed by model and quantisation as here.',
        '# Pasting the whole file as a vars file replaces benchmark_baselines entirely: merge by hand.',
        '# Figures: output tokens per second as vllm bench serve reports them; single stream is the',
        '# concurrency-1 level, peak the best level without failed requests.',
    ]
    if written:
        lines.append('# Written %s.' % bench_text(written))
    for reason in skipped:
        lines.append('# Not recorded: %s.' % reason)
    if not table:
        lines.append('# No host of this run measured a baseline.')
        lines.append('benchmark_baselines: {}')
    else:
        lines.append('benchmark_baselines:')
        lines.extend(_yaml(table, 2))
    return '\n'.join(lines) + '\n'
