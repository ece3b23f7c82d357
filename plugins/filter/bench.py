# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for the results of ``vllm bench serve`` (documented in bench_*.yml next to this file).

The logic lives in plugins/module_utils/bench/result.py, shared with the
gpufleet.vllm.bench_report module; these wrappers turn its ValueErrors into
AnsibleFilterError with the same sentence.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench


def bench_parse(data, concurrency=None, source=None):
    """One result (dict or JSON text) of vllm bench serve -> a normalized row."""
    if not isinstance(data, dict):
        data = to_text(data, errors='surrogate_or_strict')
    try:
        return bench.parse_result(data, concurrency=concurrency, source=source)
    except ValueError as exc:
        where = ' (%s)' % source if source else ''
        raise AnsibleFilterError('bench_parse: cannot read the benchmark result%s: %s' % (where, exc))


def bench_summary(rows, single_stream_concurrency=1):
    """Rows (or raw result dicts) of one sweep -> single-stream and peak figures."""
    if rows is not None and not isinstance(rows, (list, tuple, dict)):
        raise AnsibleFilterError('bench_summary: expected a list of results, got %s' % type(rows).__name__)
    try:
        return bench.summarize(list(rows) if isinstance(rows, tuple) else rows,
                               single_stream_concurrency=single_stream_concurrency)
    except ValueError as exc:
        raise AnsibleFilterError('bench_summary: %s' % exc)


def bench_compare(summary, baselines, model=None, tolerance=0.10, quantization=None):
    """A sweep summary against the baseline of its model (and quantisation) -> regression verdict."""
    try:
        return bench.compare(summary, baselines, model=model, tolerance=tolerance, quantization=quantization)
    except ValueError as exc:
        raise AnsibleFilterError('bench_compare: %s' % exc)


def bench_prompts(concurrency, minimum=8, per_concurrency=2, per_level=None):
    """Prompts of one sweep level: per_level[concurrency] if given, else max(minimum, concurrency * per_concurrency)."""
    try:
        level = int(concurrency)
        minimum, per_concurrency = int(minimum), int(per_concurrency)
    except (TypeError, ValueError, OverflowError):
        raise AnsibleFilterError('bench_prompts: concurrency %r, minimum %r and per_concurrency %r must be whole numbers'
                                 % (concurrency, minimum, per_concurrency))
    if per_level is not None and not isinstance(per_level, dict):
        raise AnsibleFilterError('bench_prompts: per_level must be a dict of concurrency to prompts, got %s'
                                 % type(per_level).__name__)
    for key, value in (per_level or {}).items():
        try:
            matches = int(key) == level
        except (TypeError, ValueError, OverflowError):
            raise AnsibleFilterError('bench_prompts: per_level key %r is not a concurrency level' % (key,))
        if matches:
            try:
                return int(value)
            except (TypeError, ValueError, OverflowError):
                raise AnsibleFilterError('bench_prompts: per_level[%s] = %r is not a number of prompts' % (key, value))
    return max(minimum, level * per_concurrency)


class FilterModule(object):
    """gpufleet.vllm benchmark filters."""

    def filters(self):
        return {
            'bench_parse': bench_parse,
            'bench_summary': bench_summary,
            'bench_compare': bench_compare,
            'bench_prompts': bench_prompts,
        }
