# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark history on the control node: one JSON line per result, per host and model+quantisation, and its trend.

Layout::

    <history_dir>/<host>/<model>.<quantisation>.jsonl

Each line is one host's result of one run (:func:`history_line`): run id,
date, host, model, quantisation, build, mode, status, single-stream and
peak tok/s, the baseline and tolerance it was judged against.

Public API:

* ``history_line(entry, run_id) -> dict``: the line of a
  ``bench_report.collect_run`` entry (None when it is not kept: a run cut
  short)
* ``history_path(history_dir, line) -> str``
* ``append(path, line, max_lines, max_bytes) -> bool``: the line appended
  (False when that run of that host is already there), under an exclusive
  lock; a file that would grow past either bound keeps its newest lines,
  three quarters of the bound (rewritten whole, atomically)
* ``read(path, max_lines, max_bytes) -> (lines, problems)``: the valid
  lines, in order; a line that is not JSON, not an object, or whose fields
  do not fit ``FIELDS`` (a run id that is a number, a build that is a
  list) is skipped and named in problems (``path:N: why``); at most the
  last ``max_bytes`` of the file are read
* ``checked_line(data) -> (line, why)``: the one check of a line's fields
  and their types, for writing and reading alike

Links: the history directory given may be a link; below it, a host's
directory and its files are opened relative to their parent's descriptor
without following a link (``O_NOFOLLOW``): a link there is refused
(``HistoryFileError`` when appending, a problem when reading), so the
history is never written or read outside the history directory.
* ``trend(lines, runs) -> dict``: the change of each figure over the last
  ``runs`` runs (first to last), and ``trend_sentence(...)``
* ``render_trend_png(series, title) -> bytes``: the trend figure
  (matplotlib on the control node, like the report's figure)

Bounds: a line is at most ``MAX_LINE_BYTES``; the lock is waited for at most
``LOCK_SECONDS``; a figure that is not a finite number is None; a line with a
figure above ``MAX_FIGURE`` (10,000,000 tok/s) is skipped and named.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import binascii
import errno
import fcntl
import io
import json
import os
import re
import stat
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import plot as bench_plot
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown

SCHEMA = 1
MAX_LINE_BYTES = 16 * 1024
LOCK_SECONDS = 30.0
MAX_SERIES = 16
MAX_POINTS = 60
SAFE_PART = re.compile(r'[^A-Za-z0-9_.+-]+')
REQUIRED = ('schema', 'run_id', 'host', 'model', 'status')
FIGURES = ('single_stream_tok_s', 'peak_tok_s')


class HistoryFileError(ValueError):
    """The history file cannot be read or written (the message says which and why)."""


def _text(value, limit=200):
    return bench_plot.bench_text(value)[:limit] if value is not None else None


def history_line(entry, run_id):
    """The history line of one host's result (an entry of bench_report.collect_run), or None for a run cut short."""
    if not isinstance(entry, dict) or entry.get('status') == 'incomplete':
        return None
    meta = entry.get('meta') or {}
    summary = entry.get('summary') or {}
    verdict = entry.get('verdict') if isinstance(entry.get('verdict'), dict) else {}
    metrics = verdict.get('metrics') if isinstance(verdict.get('metrics'), dict) else {}
    baseline = {}
    for name in FIGURES:
        metric = metrics.get(name) if isinstance(metrics.get(name), dict) else {}
        baseline[name] = bench._number(metric.get('baseline'))
    tolerance = bench._number(verdict.get('tolerance'))
    return {
        'schema': SCHEMA,
        'run_id': _text(meta.get('run_id') or run_id),
        'date': _text(meta.get('started')) or None,
        'host': _text(entry.get('host')),
        'model': _text(meta.get('model')) or 'unknown',
        'quantization': _text(meta.get('quantization')) or None,
        'vllm_version': _text(meta.get('vllm_version')) or None,
        'mode': _text(meta.get('mode')) or 'gate',
        'status': _text(entry.get('status')) or 'unknown',
        'single_stream_tok_s': bench._number(summary.get('single_stream_tok_s')),
        'peak_tok_s': bench._number(summary.get('peak_tok_s')),
        'peak_concurrency': bench._count(summary.get('peak_concurrency')),
        'baseline_single_stream_tok_s': baseline['single_stream_tok_s'],
        'baseline_peak_tok_s': baseline['peak_tok_s'],
        'tolerance': tolerance if tolerance is not None and 0 <= tolerance < 1 else None,
    }


def _part(value):
    return SAFE_PART.sub('_', value or 'unknown').strip('._')[:64] or 'unknown'


def history_path(history_dir, line):
    """<history_dir>/<host>/<model>.<quantisation>.jsonl, each part a plain name."""
    return os.path.join(history_dir, _part(line['host']),
                        '%s.%s.jsonl' % (_part(line['model']), _part(line.get('quantization') or 'unknown')))


# Every field of a history line and what it holds: the one definition that appending and reading check. A text is a
# JSON string (cut to 200 characters, escaped as bench_text() does); a figure a finite number >= 0; a count an
# integer >= 0; the tolerance a fraction from 0 to 1 (1 excluded). Required fields are non-empty text (the schema
# the number SCHEMA); the others may be missing or null. Fields not named here are dropped when a line is read.
TEXT, FIGURE, COUNT, FRACTION = 'text', 'figure', 'count', 'fraction'
FIELDS = (
    ('run_id', TEXT), ('date', TEXT), ('host', TEXT), ('model', TEXT), ('quantization', TEXT),
    ('vllm_version', TEXT), ('mode', TEXT), ('status', TEXT),
    ('single_stream_tok_s', FIGURE), ('peak_tok_s', FIGURE), ('peak_concurrency', COUNT),
    ('baseline_single_stream_tok_s', FIGURE), ('baseline_peak_tok_s', FIGURE), ('tolerance', FRACTION),
)
#: the largest figure a line may hold (tok/s): a hundred times any fleet's; a larger one is a damaged or forged line,
#: and would break the trend's arithmetic and its figure (an axis limit beyond a float)
MAX_FIGURE = 1e7
_KIND_WORDS = {TEXT: 'text', FIGURE: 'a number from 0 to 10,000,000 (tok/s)', COUNT: 'a whole number of at least 0',
               FRACTION: 'a number from 0 to 1'}


def _json_type(value):
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, (int, float)):
        return 'the number %r' % (value,)
    if isinstance(value, str):
        return 'the text %s' % shown(value, 40)
    return {'list': 'a list', 'dict': 'an object'}.get(type(value).__name__, type(value).__name__)


def _field(kind, value):
    """(VALUE as a history line holds it, None) when it fits KIND, else (None, why not)."""
    if kind == TEXT:
        if isinstance(value, str):
            return _text(value) or None, None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = bench._number(value)
        if kind == FIGURE and number is not None and 0 <= number <= MAX_FIGURE:
            return number, None
        if kind == COUNT and isinstance(value, int) and value >= 0:
            return value, None
        if kind == FRACTION and number is not None and 0 <= number < 1:
            return number, None
    return None, 'is %s, not %s' % (_json_type(value), _KIND_WORDS[kind])


def checked_line(data):
    """(the history line DATA holds, None), or (None, why DATA is not a history line).

    The line returned has every field of FIELDS (None where DATA has none) and the schema, its texts escaped and
    cut as history_line() writes them; DATA's other keys are left out.
    """
    if not isinstance(data, dict):
        return None, 'not a JSON object'
    missing = [name for name in REQUIRED if data.get(name) is None or data.get(name) == '']
    if missing:
        return None, 'without %s' % ', '.join(missing)
    schema = data['schema']
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA:
        shown = schema if isinstance(schema, int) and not isinstance(schema, bool) else _json_type(schema)
        return None, 'schema %s, not %d' % (shown, SCHEMA)
    line = {'schema': SCHEMA}
    for name, kind in FIELDS:
        value = data.get(name)
        line[name], why = _field(kind, value) if value is not None else (None, None)
        if why:
            return None, '%s %s' % (name, why)
        if name in REQUIRED and not line[name]:
            return None, '%s holds no printable text' % name
    return line, None


def valid_line(data):
    """None when DATA is a history line (checked_line), else why not."""
    return checked_line(data)[1]


def _encode(line):
    problem = valid_line(line)
    if problem:
        raise HistoryFileError('refusing to append a history line %s' % problem)
    data = (json.dumps(line, sort_keys=True, allow_nan=False, ensure_ascii=True) + '\n').encode('ascii')
    if len(data) > MAX_LINE_BYTES:
        raise HistoryFileError('a history line is %d bytes, more than %d' % (len(data), MAX_LINE_BYTES))
    return data


_DIRECTORY = getattr(os, 'O_DIRECTORY', 0)
_NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
# what opening a symbolic link with O_NOFOLLOW answers (Linux: ELOOP; the BSDs: EMLINK, or EFTYPE for a file)
_LINK_ERRNOS = (errno.ELOOP, errno.EMLINK, getattr(errno, 'EFTYPE', errno.ELOOP))


def _link_refused(path, kind):
    """The error for a symbolic link where the history needs a plain KIND ('directory' or 'file')."""
    return HistoryFileError('%s is a symbolic link: the benchmark history is written to and read from a plain %s '
                            'under the history directory only, never through a link (replace the link with a %s, or '
                            'point history_dir at the directory it leads to)' % (path, kind, kind))


def _host_dir(path, create):
    """An open descriptor of the host's directory of PATH (<history_dir>/<host>/<file>) and the file's name.

    The history directory itself is the operator's (a link to it is followed); the host's directory under it is
    opened without following a link (O_NOFOLLOW, relative to the history directory's descriptor), so neither a link
    put there nor one swapped in later sends the history elsewhere. CREATE: make what is missing; else a missing
    directory gives (None, name). Raises HistoryFileError for a link or a file where the directory should be.
    """
    directory, name = os.path.split(path)
    root, host = os.path.split(directory)
    root = root or '.'
    if not host or host in ('.', '..') or not name:
        raise HistoryFileError('%s is not <history_dir>/<host>/<file>' % path)
    if create and not os.path.isdir(root):
        os.makedirs(root, 0o755)
    try:
        root_fd = os.open(root, os.O_RDONLY | _DIRECTORY)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not create:
            return None, name
        raise
    try:
        for attempt in (1, 2):
            try:
                return os.open(host, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=root_fd), name
            except OSError as exc:
                if exc.errno == errno.ENOENT and create and attempt == 1:
                    try:
                        os.mkdir(host, 0o755, dir_fd=root_fd)
                    except OSError as made:
                        if made.errno != errno.EEXIST:
                            raise
                    continue
                if exc.errno == errno.ENOENT:
                    return None, name
                try:
                    if stat.S_ISLNK(os.stat(host, dir_fd=root_fd, follow_symlinks=False).st_mode):
                        raise _link_refused(directory, 'directory')
                except OSError:
                    pass
                if exc.errno in _LINK_ERRNOS + (errno.ENOTDIR,):
                    raise HistoryFileError('%s is not a directory: the history of a host is kept in a directory of its '
                                           'name under the history directory' % directory)
                raise
        raise HistoryFileError('%s could not be made (it disappeared again)' % directory)
    finally:
        os.close(root_fd)


def _lock(handle, seconds=LOCK_SECONDS, clock=time.monotonic, sleep=time.sleep, name=None):
    end = clock() + seconds
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except (IOError, OSError) as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
        if clock() >= end:
            raise HistoryFileError('another run holds the lock of %s for more than %.0f s'
                                   % (name or handle.name, seconds))
        sleep(0.1)


def _tail(handle, max_bytes):
    """The whole lines among the last MAX_BYTES of an open file, and whether the start was cut."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    start = max(0, size - max_bytes)
    handle.seek(start)
    data = handle.read(max_bytes)
    cut = False
    if start > 0:
        newline = data.find(b'\n')
        data = data[newline + 1:] if newline >= 0 else b''
        cut = True
    return data.split(b'\n'), cut, start


def append(path, line, max_lines=2000, max_bytes=2 * 1024 * 1024):
    """Append LINE to the history file PATH (see the module's docstring); True when it was appended."""
    if max_lines < 2 or max_bytes < 2 * MAX_LINE_BYTES:
        raise HistoryFileError('the history bounds must allow 2 lines and %d bytes at least' % (2 * MAX_LINE_BYTES))
    data = _encode(line)
    dir_fd, name = _host_dir(path, create=True)
    try:
        for dummy in range(5):
            try:
                # (O_NONBLOCK: a FIFO put there does not hold the run; it is refused below)
                descriptor = os.open(name, os.O_RDWR | os.O_CREAT | os.O_APPEND | _NOFOLLOW | os.O_NONBLOCK, 0o644,
                                     dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in _LINK_ERRNOS:
                    raise _link_refused(path, 'file')
                raise
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                os.close(descriptor)
                raise HistoryFileError('%s is not a plain file: the history is written only to a plain file' % path)
            with os.fdopen(descriptor, 'r+b') as handle:
                _lock(handle, name=path)
                try:
                    same = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(handle.fileno()).st_ino
                except OSError:
                    same = False
                if not same:
                    # another run trimmed the file (a new one was renamed over it) while this one waited: open it again
                    continue
                return _append_locked(handle, dir_fd, name, line, data, max_lines, max_bytes)
    finally:
        os.close(dir_fd)
    raise HistoryFileError('%s was replaced five times while this run waited for its lock' % path)


def _append_locked(handle, dir_fd, name, line, data, max_lines, max_bytes):
    raw, dummy, dummy2 = _tail(handle, max_bytes)
    lines = [item for item in raw if item.strip()]
    for item in lines:
        try:
            kept = json.loads(item.decode('utf-8'))
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(kept, dict) and kept.get('run_id') == line['run_id'] and kept.get('host') == line['host']:
            return False
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    if size + len(data) <= max_bytes and len(lines) + 1 <= max_lines:
        # one write of one line with O_APPEND: a reader sees the line whole or not at all
        os.write(handle.fileno(), data)
        os.fsync(handle.fileno())
        return True
    # trimmed to three quarters of either bound, so that the next appends are plain appends again
    keep, total = [], len(data)
    line_budget, byte_budget = max(1, max_lines * 3 // 4), max(len(data), max_bytes * 3 // 4)
    for item in reversed(lines):
        if len(keep) + 1 >= line_budget or total + len(item) + 1 > byte_budget:
            break
        keep.append(item)
        total += len(item) + 1
    body = b''.join(item + b'\n' for item in reversed(keep)) + data
    temp = '.gpufleet-tmp-%s' % binascii.hexlify(os.urandom(8)).decode('ascii')
    try:
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=dir_fd)
        try:
            os.fchmod(out, 0o644)
            view = memoryview(body)
            while view:
                view = view[os.write(out, view):]
            os.fsync(out)
        finally:
            os.close(out)
        # (still under the old file's lock: a run waiting for it sees the new inode and opens it again)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
    return True


def read(path, max_lines=2000, max_bytes=2 * 1024 * 1024):
    """The valid lines of PATH, oldest first (at most the last MAX_LINES), and the problems of the others."""
    problems = []
    try:
        dir_fd, name = _host_dir(path, create=False)
        if dir_fd is None:
            return [], []
        try:
            descriptor = os.open(name, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return [], []
            if exc.errno in _LINK_ERRNOS:
                raise _link_refused(path, 'file')
            raise
        finally:
            os.close(dir_fd)
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            return [], ['%s: not a plain file, not read' % path]
        with os.fdopen(descriptor, 'rb') as handle:
            raw, cut, start = _tail(handle, max_bytes)
    except HistoryFileError as exc:
        return [], [str(exc)]
    except (IOError, OSError) as exc:
        return [], ['%s: %s' % (path, getattr(exc, 'strerror', None) or exc)]
    if cut:
        problems.append('%s: only the last %d bytes were read (from byte %d)' % (path, max_bytes, start))
    lines = []
    # a line is named by its number in the file, or (the start cut) by its number counted from the first byte read
    where = '%s:%%d' % path if not cut else '%s: line %%d after byte %d' % (path, start)
    for number, item in enumerate(raw, 1):
        if not item.strip():
            continue
        if len(item) > MAX_LINE_BYTES:
            problems.append('%s: %d bytes, more than a history line is (%d), skipped'
                            % (where % number, len(item), MAX_LINE_BYTES))
            continue
        try:
            data = json.loads(item.decode('utf-8'))
        except (ValueError, UnicodeDecodeError, RecursionError):
            problems.append('%s: not JSON, skipped' % (where % number))
            continue
        line, why = checked_line(data)
        if why:
            problems.append('%s: %s, skipped' % (where % number, why))
            continue
        lines.append(line)
    return lines[-max_lines:], problems


# --------------------------------------------------------------------------- trend


def _usable(line, name):
    return line.get('status') not in ('failed', 'incomplete') and line.get(name) is not None


def trend(lines, runs=5):
    """Per figure, over the last RUNS runs that measured it: first, last, change (fraction), runs, from/to run id."""
    result = {}
    for name in FIGURES:
        points = [line for line in lines if _usable(line, name)][-runs:]
        if len(points) < 2 or not points[0][name]:
            result[name] = {'runs': len(points), 'change': None,
                            'first': points[0][name] if points else None, 'last': points[-1][name] if points else None}
            continue
        first, last = points[0][name], points[-1][name]
        result[name] = {'runs': len(points), 'first': first, 'last': last, 'change': (last - first) / first,
                        'from': points[0].get('run_id'), 'to': points[-1].get('run_id')}
    return result


#: a change beyond this many percent is shown as "more than" it (a first run near 0 tok/s makes any change huge)
MAX_PERCENT = 10000


def _percent(change):
    value = change * 100
    if abs(value) < 0.05:
        return '\u00b10.0 %'
    if not abs(value) <= MAX_PERCENT:
        return '%s%s %%' % ('more than +' if value > 0 else 'less than -', '{:,}'.format(MAX_PERCENT))
    return '%+.1f %%' % value


def trend_sentence(host, model, quantization, lines, runs=5):
    """One line for report.md: 'gpu-node-1 (kimi-k2.5 int4): peak -4.0 % over the last 5 runs (2,276.0 to 2,185.0 tok/s), ...'."""
    found = trend(lines, runs)
    parts = []
    for name, label in (('peak_tok_s', 'peak'), ('single_stream_tok_s', 'single stream')):
        item = found[name]
        if item['change'] is None:
            parts.append('%s: %s' % (label, 'first run in the history' if item['runs'] == 1 else 'no run measured it'))
        else:
            parts.append("%s %s over the last %d runs (%s to %s tok/s)" % (
                label, _percent(item['change']), item['runs'], '{:,.1f}'.format(item['first']),
                '{:,.1f}'.format(item['last'])))
    return '%s (%s %s): %s' % (host, model, quantization or 'quantisation unknown', '; '.join(parts))


def _below(line, name):
    """Whether the figure NAME of LINE is under the floor of the baseline it was judged against (gate mode only)."""
    if line.get('mode') == 'record':
        return False
    expected, tol = line.get('baseline_%s' % name), line.get('tolerance')
    return bool(expected and tol is not None and line[name] < expected * (1 - tol))


def _tick(line):
    date = bench_plot.bench_text(line.get('date') or line.get('run_id') or '')
    match = re.match(r'^(\d{4})-?(\d{2})-?(\d{2})[T ]?(\d{2})?:?(\d{2})?', date)
    when = '%s-%s %s:%s' % (match.group(2), match.group(3), match.group(4) or '00', match.group(5) or '00') \
        if match else date[:11]
    build = bench_plot.bench_text(line.get('vllm_version')) or '?'
    build = build if len(build) <= 14 else build[:13] + '\u2026'
    return '%s\n%s' % (when, build)


def render_trend_png(series, title='vLLM benchmark history'):
    """The trend figure: per model+quantisation a row, single stream and peak tok/s per host across runs.

    SERIES: a list of {model, quantization, host, lines} (lines oldest
    first, as :func:`read` gives them). The x axis is the runs of that model
    and quantisation in date order (ticks: date and build); the band is the
    latest baseline with its tolerance.
    """
    mpl = bench_plot._matplotlib()
    groups = {}
    for item in series[:MAX_SERIES]:
        groups.setdefault((item['model'], item.get('quantization') or 'unknown'), []).append(item)
    keys = sorted(groups)[:4]
    rows = max(1, len(keys))
    with mpl['style'].context('default'):
        figure = mpl['Figure'](figsize=(14, 3.6 * rows + 1.2), dpi=bench_plot.DPI, layout='constrained')
        mpl['Canvas'](figure)
        axes = figure.subplots(rows, 2, squeeze=False)
        if not keys:
            for axis in axes[0]:
                axis.set_axis_off()
            axes[0][0].text(0.5, 0.5, 'No history yet.', ha='center', va='center', fontsize=14,
                            transform=axes[0][0].transAxes)
        for row, key in enumerate(keys):
            items = sorted(groups[key], key=lambda item: bench_plot._natural(item['host']))
            runs = {}
            for item in items:
                for line in item['lines'][-MAX_POINTS:]:
                    runs.setdefault(line['run_id'], line)
            order = sorted(runs, key=lambda run: (runs[run].get('date') or '', run))[-MAX_POINTS:]
            position = dict((run, index) for index, run in enumerate(order))
            # the band: the baseline the latest gated run of a host was judged against
            latest = [[line for line in item['lines'] if line.get('mode') != 'record'][-1:] for item in items]
            latest = [line for lines in latest for line in lines]
            for column, (name, label) in enumerate((('single_stream_tok_s', 'single stream'), ('peak_tok_s', 'peak'))):
                axis = axes[row][column]
                values = []
                base = [line for line in latest if line.get('baseline_%s' % name) and line.get('tolerance') is not None]
                if base:
                    expected, tol = base[-1]['baseline_%s' % name], base[-1]['tolerance']
                    axis.axhspan(expected * (1 - tol), expected * (1 + tol), color=bench_plot.BAND, alpha=0.13,
                                 linewidth=0, gid='baseline-band:%s' % name)
                    axis.axhline(expected, color=bench_plot.BAND, linestyle=(0, (6, 3)), linewidth=1.2,
                                 label='baseline %s tok/s \u00b1%.0f%%' % (bench_plot._thousands(expected), tol * 100))
                    values.extend([expected * (1 - tol), expected * (1 + tol)])
                failed_runs = []
                for index, item in enumerate(items):
                    points = [(position[line['run_id']], line[name], _below(line, name))
                              for line in item['lines'] if line['run_id'] in position and _usable(line, name)]
                    failed_runs.extend(position[line['run_id']] for line in item['lines']
                                       if line['run_id'] in position and line.get('status') == 'failed')
                    if not points:
                        continue
                    found = trend(item['lines'], runs=5)[name]
                    words = '' if found['change'] is None else ' (%s over %d runs)' % (_percent(found['change']),
                                                                                       found['runs'])
                    axis.plot([x for x, dummy, dummy2 in points], [y for dummy, y, dummy2 in points], linewidth=1.6,
                              markersize=5, gid='%s:%s' % (name, item['host']),
                              label=bench_plot._drawn(bench_plot._short(item['host']) + words),
                              **bench_plot._style(index))
                    low = [(x, y) for x, y, below in points if below]
                    if low:
                        axis.scatter([x for x, dummy in low], [y for dummy, y in low], marker='o', s=110,
                                     facecolors='none', edgecolors=bench_plot.FAIL, linewidths=1.8, zorder=5,
                                     gid='regressed:%s:%s' % (name, item['host']))
                    values.extend(y for dummy, y, dummy2 in points)
                low_y = min(values) * 0.93 if values else 0.0
                high_y = max(values) * 1.04 if values else 1.0
                axis.set_ylim(low_y, high_y)
                if failed_runs:
                    axis.scatter(sorted(set(failed_runs)), [low_y] * len(set(failed_runs)), marker='X', s=90,
                                 color=bench_plot.FAIL, zorder=6, clip_on=False, gid='failed:%s' % name,
                                 label='a host\'s run failed')
                axis.plot([], [], marker='o', markersize=9, markerfacecolor='none', markeredgecolor=bench_plot.FAIL,
                          linestyle='none', label='below the floor (regressed)')
                axis.yaxis.set_major_formatter(mpl['FuncFormatter'](bench_plot._thousands))
                step = max(1, (len(order) + 11) // 12)
                axis.set_xticks(range(0, len(order), step))
                axis.set_xticklabels([bench_plot._drawn(_tick(runs[run])) for run in order[::step]], fontsize=7.5)
                axis.set_xlim(-0.5, max(len(order) - 0.5, 0.5))
                axis.set_ylabel('output tok/s (axis not from 0)')
                heading = '%s %s: %s' % (bench_plot._short(key[0], 40), bench_plot._short(key[1], 24), label)
                axis.set_title(bench_plot._drawn(heading), fontsize=11, loc='left', fontweight='bold')
                axis.grid(True, color='#dddddd', linewidth=0.8)
                axis.set_axisbelow(True)
                axis.legend(loc='lower left', fontsize=8, framealpha=0.9)
        figure.suptitle(bench_plot._drawn(bench_plot.bench_text(title)), fontsize=14, fontweight='bold')
        figure.canvas.draw()
        width, height = figure.canvas.get_width_height()
        picture = mpl['Image'].frombuffer('RGBA', (width, height), bytes(figure.canvas.buffer_rgba()), 'raw', 'RGBA',
                                          0, 1)
    picture = picture.convert('RGB').quantize(colors=256, method=mpl['Image'].Quantize.FASTOCTREE,
                                              dither=mpl['Image'].Dither.NONE)
    out = io.BytesIO()
    picture.save(out, format='png', optimize=True)
    return out.getvalue()
