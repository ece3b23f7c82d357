# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A concurrency sweep of the real ``vllm bench serve``: every level in one process, or one run per level.

Used by the ``gpufleet.vllm.bench_serve`` module. Each level runs
``timeout --kill-after=30 LIMIT <vllm> bench serve ... --max-concurrency C
--save-result --result-dir DIR --result-filename c<C>.json`` (an argv list,
never a shell), then the result file is read and parsed
(:mod:`bench`). The sweep stops at the first level that fails: a non-zero
exit status (``vllm bench serve`` itself fails, or the time limit), no
result file, or any failed request in it (``vllm bench serve`` exits 0 even
when every request failed).

With ``settings['python']`` (the interpreter of the bench environment, from the
``#!`` line of the ``vllm`` console script: :func:`interpreter_of`), every
level runs in one process of it (:func:`run_in_one_process`): :data:`RUNNER`
runs vLLM's CLI ``main``, what the console script runs, with ``sys.argv`` set
to each level's ``vllm bench serve`` command, so that vLLM is imported once;
each level has its own time limit (SIGALRM, the process exits at it), the
process a bound of its own under coreutils' ``timeout``. Where vLLM's CLI
cannot be imported, or ``VLLM_USE_RUST_BENCH`` makes ``vllm bench serve`` a
process of its own, each level runs its own command (runner_note says why).

Public API:

* ``level_argv(settings, concurrency, num_prompts) -> list``
* ``run_sweep(run_command, settings, clock=time.monotonic) -> dict``
* ``run_in_one_process(run_command, settings, clock=time.monotonic) -> dict``
* ``interpreter_of(executable) -> path or None``
* ``run_capped(argv, environ_update=None, limit=None, tail_bytes=TAIL_BYTES) -> (rc, stdout, stderr)``
* ``backstop(argv) -> seconds`` (the Python-side limit of a level's command)
* ``argv_problems(settings) -> list`` (values that must not reach the command line)
* ``RESULT_NAME`` (``'c%d.json'``), ``LOG_NAME`` (``'c%d.log'``)

Bounds: the output of a command is written to temporary files and only its
last ``TAIL_BYTES`` of stdout and of stderr are read back; a result file
larger than ``result_max_bytes`` (settings, default ``RESULT_MAX_BYTES``) is
not read; the whole sweep stops at ``sweep_timeout`` seconds (settings; a
level gets at most what is left); a command that outlives coreutils'
``timeout`` by ``BACKSTOP_GRACE`` seconds is killed with its process group.

``settings`` keys: executable, base_url, model, tokenizer, concurrency
(list), num_prompts (list, same length), input_len, output_len,
result_dir, backend, endpoint, seed, temperature (None: not passed),
ignore_eos, trust_remote_code, extra_args, metadata (dict), level_timeout,
timeout_executable (default ``timeout``), environment (dict).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench

RESULT_NAME = 'c%d.json'
LOG_NAME = 'c%d.log'
#: a level measured again (settings['attempt'] = N > 0): its own result file, never the first one's
RETRY_RESULT_NAME = 'c%d.retry%d.json'
RETRY_LOG_NAME = 'c%d.retry%d.log'
#: the largest /metrics page kept for the cross-check of a level
METRICS_MAX_BYTES = 8 * 1024 * 1024
TAIL_LINES = 60
# exit status of coreutils' timeout when the limit passed (124), or when it had to kill (137)
TIMEOUT_STATUSES = (124, 137)
KILL_AFTER = 30
BACKSTOP_GRACE = 15
TAIL_BYTES = 64 * 1024
RESULT_MAX_BYTES = 64 * 1024 * 1024
CONTROL = re.compile(r'[\x00-\x1f\x7f]')
ENV_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*\Z')
URL = re.compile(r'^https?://[^/?#@\s]+(/[^\s]*)?\Z')


def result_name(settings, concurrency):
    """The result file name of CONCURRENCY: c<N>.json, or c<N>.retry<attempt>.json for a level measured again."""
    attempt = settings.get('attempt') or 0
    return RETRY_RESULT_NAME % (concurrency, attempt) if attempt else RESULT_NAME % concurrency


def log_name(settings, concurrency):
    attempt = settings.get('attempt') or 0
    return RETRY_LOG_NAME % (concurrency, attempt) if attempt else LOG_NAME % concurrency


def _shown(value):
    """A value for a message: control characters and odd bytes escaped, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + '...'


def argv_problems(settings):
    """Sentences about values that must not reach the command line of vllm bench serve (empty when all are fine)."""
    problems = []

    def check(name, value, option_like=False):
        if not isinstance(value, str):
            return
        if CONTROL.search(value):
            problems.append('%s %s holds a control character (a newline, tab, NUL...)' % (name, _shown(value)))
        elif not option_like and value.startswith('-'):
            problems.append('%s %s starts with "-" and would be read as an option' % (name, _shown(value)))

    for name in ('executable', 'model', 'tokenizer', 'result_dir', 'backend', 'endpoint', 'base_url'):
        check(name, settings.get(name))
    url = settings.get('base_url')
    if isinstance(url, str) and not CONTROL.search(url) and not URL.match(url):
        problems.append('base_url %s is not an http:// or https:// URL with a host (and no user or spaces)' % _shown(url))
    endpoint = settings.get('endpoint')
    if isinstance(endpoint, str) and not endpoint.startswith('/'):
        problems.append('endpoint %s must start with "/"' % _shown(endpoint))
    for index, arg in enumerate(settings.get('extra_args') or []):
        check('extra_args[%d]' % index, str(arg), option_like=True)
    for key, value in (settings.get('metadata') or {}).items():
        key = str(key)
        if not key or '=' in key or key.strip() != key:
            problems.append('metadata key %s must be a word without "=" or surrounding spaces' % _shown(key))
        check('metadata key', key)
        check('metadata[%s]' % key, str(value), option_like=True)
    for key, value in (settings.get('environment') or {}).items():
        if not ENV_NAME.match(str(key)):
            problems.append('environment variable name %s is not a name (letters, digits, _)' % _shown(str(key)))
        if '\x00' in str(value):
            problems.append('environment variable %s holds a NUL character' % _shown(str(key)))
    api_key = settings.get('api_key')
    if isinstance(api_key, str) and CONTROL.search(api_key):
        problems.append('api_key holds a control character (value not shown)')
    return problems


def backstop(argv):
    """Seconds after which the Python side kills a level's command: its timeout limit, the kill delay and a grace."""
    try:
        return int(argv[2]) + KILL_AFTER + BACKSTOP_GRACE
    except (IndexError, ValueError):
        return None


def _tail_of(handle, tail_bytes):
    handle.flush()
    size = handle.seek(0, os.SEEK_END)
    start = max(0, size - tail_bytes)
    handle.seek(start)
    text = handle.read(tail_bytes).decode('utf-8', 'replace')
    if start:
        text = '[first %d bytes of output not kept]\n%s' % (start, text)
    return text


def run_capped(argv, environ_update=None, limit=None, tail_bytes=TAIL_BYTES):
    """Run ARGV (no shell) in its own session; -> (rc, stdout tail, stderr tail).

    Output goes to temporary files, of which only the last TAIL_BYTES are
    read. Past LIMIT seconds the whole process group is killed and rc is
    137. A command that cannot start gives rc 127 and the reason in stderr.
    """
    env = dict(os.environ)
    env.update(environ_update or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                       close_fds=True, start_new_session=True)
        except (OSError, ValueError) as exc:
            return 127, '', 'cannot run %s: %s' % (argv[0], getattr(exc, 'strerror', None) or exc)
        killed = False
        try:
            rc = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            killed = True
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            process.wait()
            rc = 137
        stdout, stderr = _tail_of(out, tail_bytes), _tail_of(err, tail_bytes)
    if killed:
        stderr += '\n[killed with its process group after %s s]' % limit
    elif rc < 0:
        rc = 128 - rc
    return rc, stdout, stderr


def level_argv(settings, concurrency, num_prompts, limit=None):
    if limit is None:
        limit = settings['level_timeout']
    argv = [
        settings.get('timeout_executable') or 'timeout', '--kill-after=%d' % KILL_AFTER, str(int(limit)),
        settings['executable'], 'bench', 'serve',
        '--backend', settings['backend'], '--base-url', settings['base_url'], '--endpoint', settings['endpoint'],
        '--model', settings['model'], '--tokenizer', settings['tokenizer'],
        '--dataset-name', 'random',
        '--random-input-len', str(settings['input_len']), '--random-output-len', str(settings['output_len']),
        '--num-prompts', str(num_prompts), '--max-concurrency', str(concurrency), '--seed', str(settings['seed']),
        '--percentile-metrics', 'ttft,tpot,itl,e2el', '--metric-percentiles', '50,99',
        '--save-result', '--result-dir', settings['result_dir'], '--result-filename', result_name(settings, concurrency),
        '--disable-tqdm',
    ]
    if settings.get('temperature') is not None:
        argv += ['--temperature', str(settings['temperature'])]
    if settings.get('ignore_eos'):
        argv.append('--ignore-eos')
    if settings.get('trust_remote_code'):
        argv.append('--trust-remote-code')
    argv += [str(arg) for arg in settings.get('extra_args') or []]
    metadata = settings.get('metadata') or {}
    if metadata:
        argv.append('--metadata')
        argv += ['%s=%s' % (key, metadata[key]) for key in sorted(metadata)]
    return argv


def _tail(text, lines=TAIL_LINES):
    kept = [line for line in (text or '').splitlines() if line.strip()]
    return '\n'.join(kept[-lines:])


def _log(argv, rc, stdout, stderr, note=''):
    """The log of a failed level: its command, the exit status (and NOTE), the tails of its output."""
    return ('%s\nexit status %s%s\n--- stdout ---\n%s\n--- stderr ---\n%s\n'
            % (' '.join(argv), rc, ' (%s)' % note if note else '', _tail(stdout), _tail(stderr)))


def _last_words(stdout, stderr):
    for text in (stderr, stdout):
        kept = [line.strip() for line in (text or '').splitlines() if line.strip()]
        if kept:
            return ' / '.join(kept[-3:])
    return 'no output'


def _judge(settings, entry, rc, stdout, stderr, limit, files, max_bytes):
    """The problem of one level that ran (a sentence), or None; reads its result file into FILES and ENTRY's row."""
    concurrency = entry['concurrency']
    path = entry['result_file']
    if rc != 0:
        over = (', over the limit of %s s' % limit) if rc in TIMEOUT_STATUSES else ''
        return ('vllm bench serve failed at concurrency %d (exit status %s%s): %s.'
                % (concurrency, rc, over, _last_words(stdout, stderr).rstrip('.')))
    try:
        with open(path, 'rb') as handle:
            raw = handle.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise ValueError('the file is larger than %d bytes (result_max_mib), which is more than a result '
                             'is read up to; it stays on the host' % max_bytes)
        text = raw.decode('utf-8', 'replace')
        files[result_name(settings, concurrency)] = text
        entry['row'] = bench.parse_result(text, concurrency=concurrency, source=path)
    except (IOError, OSError) as exc:
        return ('vllm bench serve at concurrency %d exited 0 but left no readable result in %s (%s): %s.'
                % (concurrency, path, exc.strerror or exc, _last_words(stdout, stderr).rstrip('.')))
    except ValueError as exc:
        reason = str(exc).rstrip('.')
        return 'The result of concurrency %d (%s) cannot be read: %s.' % (concurrency, path, reason)
    row = entry['row']
    if not row['ok']:
        failed = row['failed'] if row['failed'] is not None else 'Some'
        return ('%s of %s requests failed at concurrency %d (%s completed): the server at %s stopped '
                'answering or refused requests; look at its journal.'
                % (failed, row['num_prompts'], concurrency, row['completed'], settings['base_url']))
    return None


def _level(settings, level, argv, rc, seconds, stdout, stderr, limit, files, max_bytes, note=None, metrics=None):
    """One level that ran: (its entry, its problem or None); the result file read into FILES, the log of a failed
    level (its command ARGV, the exit status, NOTE, the tails of STDOUT and STDERR) written there too. With
    ``settings['crosscheck']`` (a function of the row and the server's /metrics before and after the level,
    METRICS: two (text, error) pairs), a level that completed gets ``row['crosscheck']``."""
    concurrency, num_prompts = level
    entry = {'concurrency': concurrency, 'num_prompts': num_prompts, 'argv': argv, 'rc': rc,
             'seconds': round(seconds, 3), 'result_file': os.path.join(settings['result_dir'], result_name(settings, concurrency)),
             'row': None, 'ok': False}
    # (the runner's note of what ended the level comes last: the failure's last words end with it)
    problem = _judge(settings, entry, rc, stdout, '%s\n%s' % (stderr, note) if note else stderr, limit, files,
                     max_bytes)
    if problem:
        files[log_name(settings, concurrency)] = _log(argv, rc, stdout, stderr, note=note)
    else:
        entry['ok'] = True
        crosscheck = settings.get('crosscheck')
        if crosscheck is not None:
            # (the server's /metrics read before and after the level: (text, error) each)
            entry['row']['crosscheck'] = crosscheck(entry['row'], *(metrics or ((None, 'not read'), (None, 'not read'))))
    return entry, problem


def _out_of_time(settings, concurrency, levels):
    done = [level['concurrency'] for level in levels]
    return ('The sweep used up its time limit (sweep_timeout %s s) before concurrency %d; %s. '
            'Raise sweep_timeout or run fewer levels.'
            % (settings.get('sweep_timeout'), concurrency,
               'levels %s completed and were kept' % ', '.join(str(c) for c in done) if done else 'no level ran'))


def _finish(levels, files, failure, failed_concurrency, total, runner):
    return {'levels': levels, 'files': files, 'failure': failure, 'failed_concurrency': failed_concurrency,
            'bench_seconds': round(total, 3), 'runner': runner}


def run_sweep(run_command, settings, clock=time.monotonic):
    """Run the levels in order; stop at the first failure. ``run_command(argv) -> (rc, stdout, stderr)``.

    With ``settings['python']`` (the interpreter of the bench environment) every level runs in one process
    (:func:`run_in_one_process`: vLLM imported once); where that is not possible, each level runs its own
    ``vllm bench serve``.

    Returns levels (per level: concurrency, num_prompts, argv, rc, seconds,
    result_file, row (parsed, or None), ok), files (``c<level>.json``: the
    text of each result file; ``c<level>.log``: command, exit status and the
    last lines of stdout and stderr of the failed level), failure (a
    sentence, or None), failed_concurrency, bench_seconds, runner
    (``one process`` or ``one process per level``) and, when one process
    was asked for but not possible, runner_note (why).
    """
    sweep_started = clock()
    runner_note = None
    if settings.get('python'):
        swept = run_in_one_process(run_command, settings, clock=clock)
        if swept.get('runner') == 'one process':
            return swept
        # (the time the attempt took counts: sweep_timeout is the whole sweep's)
        runner_note = swept.get('runner_note')
    levels = []
    files = {}
    failure = None
    failed_concurrency = None
    total = 0.0
    sweep_timeout = settings.get('sweep_timeout')
    deadline = sweep_started + sweep_timeout if sweep_timeout else None
    max_bytes = settings.get('result_max_bytes') or RESULT_MAX_BYTES
    for concurrency, num_prompts in zip(settings['concurrency'], settings['num_prompts']):
        limit = settings['level_timeout']
        if deadline is not None:
            left = int(deadline - clock())
            if left < 1:
                failure = _out_of_time(settings, concurrency, levels)
                failed_concurrency = concurrency
                break
            limit = min(limit, left)
        argv = level_argv(settings, concurrency, num_prompts, limit=limit)
        read_metrics = settings.get('read_metrics')
        before = read_metrics() if read_metrics else None
        started = clock()
        rc, stdout, stderr = run_command(argv)
        seconds = clock() - started
        after = read_metrics() if read_metrics else None
        total += seconds
        entry, failure = _level(settings, (concurrency, num_prompts), argv, rc, seconds, stdout, stderr, limit, files,
                                max_bytes, metrics=(before, after) if read_metrics else None)
        levels.append(entry)
        if failure:
            failed_concurrency = concurrency
            break
    swept = _finish(levels, files, failure, failed_concurrency, total, 'one process per level')
    if runner_note:
        swept['runner_note'] = runner_note
    return swept


# ---------------------------------------------------------------- every level in one process

#: The program the bench environment's Python runs for a sweep in one process (a file in a private temporary
#: directory, so that nothing in the working directory is imported): ``vllm bench serve`` as its console script
#: runs it, vLLM's CLI ``main`` with ``sys.argv`` set to the command, once per level, vLLM imported once.
#: argv: the plan file (JSON: the executable, the sweep's deadline in seconds since the epoch, 0 for none, and per
#: level the concurrency, the seconds it may take and the arguments after ``vllm bench serve``) and the status
#: file it appends one JSON line to as each level starts and ends. A level gets its own limit, at most what is left
#: of the sweep's; at the limit the process notes the level over it and exits at once, wherever vLLM was
#: (its event loop would swallow an exception raised in one of its callbacks).
RUNNER = r"""
import json, os, signal, sys, time, traceback
plan_path, status_path = sys.argv[1], sys.argv[2]
current = {}


def note(**event):
    with open(status_path, 'a') as handle:
        handle.write(json.dumps(event) + '\n')


def leave(rc):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(rc)


with open(plan_path) as handle:
    plan = json.load(handle)
try:
    from vllm.entrypoints.cli.main import main as cli_main
except Exception as exc:
    note(event='unavailable', error="vLLM's CLI cannot be imported here (%s: %s)" % (type(exc).__name__, exc))
    leave(3)
try:
    from vllm import envs
    rust = bool(getattr(envs, 'VLLM_USE_RUST_BENCH', False))
except Exception:
    rust = False
if rust:
    note(event='unavailable', error='VLLM_USE_RUST_BENCH is set: vllm bench serve runs the Rust client, a process of its own')
    leave(3)


def count(value):
    # (as bench._count: a whole number of 0 or more, from a number or a numeric string)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value.strip() if isinstance(value, str) else value)
        return int(number) if number >= 0 and number == int(number) else None
    except (ValueError, OverflowError):
        return None


def completed_every_request(path, max_bytes):
    # (as the module judges a level, bench.parse_result: vllm bench serve exits 0 even when every request failed)
    try:
        with open(path, 'rb') as handle:
            raw = handle.read(max_bytes + 1)
        data = json.loads(raw.decode('utf-8', 'replace')) if len(raw) <= max_bytes else None
        if not isinstance(data, dict):
            return False
        prompts, completed = count(data.get('num_prompts')), count(data.get('completed'))
        failed = count(data.get('failed'))
        if failed is None:
            if isinstance(data.get('errors'), list):
                failed = sum(1 for error in data['errors'] if error)
            elif prompts is not None and completed is not None:
                failed = max(0, prompts - completed)
        if completed is None and prompts is not None and failed is not None:
            completed = max(0, prompts - failed)
        return bool(completed) and failed == 0
    except Exception:
        return False


def fetch_metrics(url, path, max_bytes):
    # (the server's /metrics for the cross-check of a level: no proxy, at most max_bytes, at most 15 s in all;
    # a fault is written beside it, and never stops the sweep)
    import threading
    import urllib.request

    def read():
        try:
            headers = {'Accept': 'text/plain;version=0.0.4'}
            if os.environ.get('OPENAI_API_KEY'):
                headers['Authorization'] = 'Bearer ' + os.environ['OPENAI_API_KEY']
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as answer:
                body = answer.read(max_bytes + 1)
            with open(path, 'wb') as handle:
                handle.write(body)
        except Exception as exc:
            with open(path + '.error', 'w') as handle:
                handle.write('%s: %s' % (type(exc).__name__, exc))

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(15)
    if worker.is_alive():
        with open(path + '.error', 'w') as handle:
            handle.write('no answer within 15 s')


def expired(signum, frame):
    note(event='end', concurrency=current['concurrency'], rc=124, seconds=time.monotonic() - current['started'],
         error='over the limit of %d s' % current['limit'])
    leave(124)


signal.signal(signal.SIGALRM, expired)
for level in plan['levels']:
    limit = level['limit']
    if plan['deadline']:
        left = int(plan['deadline'] - time.time())
        if left < 1:
            note(event='out_of_time', concurrency=level['concurrency'])
            leave(0)
        limit = min(limit, left)
    if plan.get('metrics_url'):
        fetch_metrics(plan['metrics_url'], level['metrics_before'], plan['metrics_max_bytes'])
    current.update(concurrency=level['concurrency'], started=time.monotonic(), limit=limit)
    note(event='start', concurrency=level['concurrency'], limit=limit)
    signal.alarm(limit)
    try:
        sys.argv = [plan['executable'], 'bench', 'serve'] + level['args']
        cli_main()
        rc, error = 0, None
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        error = None if rc == 0 else 'vllm bench serve exited with %r' % (exc.code,)
    except BaseException as exc:
        traceback.print_exc()
        rc, error = 1, '%s: %s' % (type(exc).__name__, exc)
    signal.alarm(0)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # (a level with failed requests stops the sweep as one process per level stops it: the next level never runs)
    stop = rc == 0 and not completed_every_request(level['result_file'], plan['result_max_bytes'])
    note(event='end', concurrency=level['concurrency'], rc=rc, seconds=time.monotonic() - current['started'],
         error=error, stopped=stop)
    if plan.get('metrics_url') and rc == 0:
        fetch_metrics(plan['metrics_url'], level['metrics_after'], plan['metrics_max_bytes'])
    if rc != 0 or stop:
        leave(rc)
# (no wait at exit for what a level left running, a thread or a pool: every level is done and noted)
leave(0)
"""
#: The exit status of RUNNER when one process is not possible (the sweep then runs one process per level)
RUNNER_UNAVAILABLE = 3
#: Seconds the one process may take beyond its levels' limits (vLLM's import, about 15 s on a CPU core)
IMPORT_ALLOWANCE = 120
STATUS_MAX_BYTES = 1024 * 1024
#: Seconds a level's two reads of /metrics may take at most (RUNNER gives each 15 s)
METRICS_ALLOWANCE = 30
SHEBANG_MAX_BYTES = 512
_PYTHON = re.compile(r'^python[0-9.]*\Z')


#: The second line of a console script that uv (relocatable) or pip (long paths) write for ``#!/bin/sh``: the
#: Python beside the script, or the one it names
_TRAMPOLINE_BESIDE = re.compile(r"""^'\'\'exec' "\$\(dirname -- "\$\(realpath -- "\$0"\)"\)"/'(python[0-9.]*)' "\$0" "\$@"\Z""")
_TRAMPOLINE_NAMED = re.compile(r"""^'\'\'exec' (?:(["'])(/[^"']+)\1|(/\S+)) "\$0" "\$@"\Z""")


def interpreter_of(executable):
    """The Python of the console script EXECUTABLE, or None (a binary, a wrapper or anything else runs as it is).

    ``#!/path/python``; or ``#!/bin/sh`` with the exec line uv writes for a relocatable environment (the ``python``
    beside the script, its links resolved as the script does) or pip for a long path (the Python it names). The
    Python must be an executable file named ``python...``."""
    try:
        with open(executable, 'rb') as handle:
            head = handle.read(SHEBANG_MAX_BYTES)
    except (IOError, OSError):
        return None
    lines = head.decode('utf-8', 'replace').split('\n')
    if not lines[0].startswith('#!'):
        return None
    words = lines[0][2:].split()
    python = None
    if len(words) == 1 and words[0].startswith('/') and _PYTHON.match(os.path.basename(words[0])):
        python = words[0]
    elif words == ['/bin/sh'] and len(lines) > 1:
        beside = _TRAMPOLINE_BESIDE.match(lines[1])
        named = _TRAMPOLINE_NAMED.match(lines[1])
        if beside:
            python = os.path.join(os.path.dirname(os.path.realpath(executable)), beside.group(1))
        elif named and _PYTHON.match(os.path.basename(named.group(2) or named.group(3))):
            python = named.group(2) or named.group(3)
    if python and os.path.isfile(python) and os.access(python, os.X_OK):
        return python
    return None


def read_metrics_file(path, max_bytes=METRICS_MAX_BYTES):
    """(text, None) of a /metrics page RUNNER saved, or (None, why not): its fault, missing, over MAX_BYTES."""
    try:
        with open(path + '.error', 'rb') as handle:
            return None, handle.read(500).decode('utf-8', 'replace')
    except (IOError, OSError):
        pass
    try:
        with open(path, 'rb') as handle:
            raw = handle.read(max_bytes + 1)
    except (IOError, OSError) as exc:
        return None, 'not read (%s)' % (exc.strerror or exc)
    if len(raw) > max_bytes:
        return None, 'the page is larger than %d bytes' % max_bytes
    return raw.decode('utf-8', 'replace'), None


def _read_status(path):
    """The events RUNNER wrote (a list of dicts), at most STATUS_MAX_BYTES read; lines that are not JSON skipped."""
    try:
        with open(path, 'rb') as handle:
            raw = handle.read(STATUS_MAX_BYTES)
    except (IOError, OSError):
        return []
    events = []
    for line in raw.decode('utf-8', 'replace').splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def run_in_one_process(run_command, settings, clock=time.monotonic):
    """Every level in one process of ``settings['python']`` running RUNNER; the same result as run_sweep's.

    Each level gets ``level_timeout`` seconds, at most what is left of ``sweep_timeout`` (counted from the start,
    vLLM's import included); coreutils' ``timeout`` bounds the process as a whole. When one process is not
    possible (vLLM's CLI cannot be imported by that interpreter, or ``VLLM_USE_RUST_BENCH`` makes ``vllm bench
    serve`` a process of its own), no level ran: the result has runner ``not possible`` and runner_note (why), and
    the caller runs one process per level. Each level's ``argv`` is the ``vllm bench serve`` command that runs
    the same level on its own, with the limit the level had.
    """
    sweep_timeout = settings.get('sweep_timeout') or 0
    plan = []
    for concurrency, num_prompts in zip(settings['concurrency'], settings['num_prompts']):
        argv = level_argv(settings, concurrency, num_prompts)
        # (level_argv: timeout, --kill-after, LIMIT, vllm, bench, serve, then the arguments of vllm bench serve)
        plan.append({'concurrency': concurrency, 'num_prompts': num_prompts, 'args': argv[6:]})
    budget = settings['level_timeout'] * len(plan) + IMPORT_ALLOWANCE
    if settings.get('crosscheck'):
        budget += METRICS_ALLOWANCE * len(plan)
    if sweep_timeout:
        budget = min(budget, sweep_timeout + BACKSTOP_GRACE)
    work = tempfile.mkdtemp(prefix='gpufleet-bench-')
    try:
        runner_path = os.path.join(work, 'sweep.py')
        plan_path = os.path.join(work, 'plan.json')
        status_path = os.path.join(work, 'status.jsonl')
        with open(runner_path, 'w') as handle:
            handle.write(RUNNER)
        with open(plan_path, 'w') as handle:
            json.dump({'executable': settings['executable'],
                       'deadline': time.time() + sweep_timeout if sweep_timeout else 0,
                       'result_max_bytes': settings.get('result_max_bytes') or RESULT_MAX_BYTES,
                       'metrics_url': settings.get('metrics_url') if settings.get('crosscheck') else None,
                       'metrics_max_bytes': METRICS_MAX_BYTES,
                       'levels': [{'concurrency': level['concurrency'], 'limit': int(settings['level_timeout']),
                                   'args': level['args'],
                                   'result_file': os.path.join(settings['result_dir'],
                                                               result_name(settings, level['concurrency'])),
                                   'metrics_before': os.path.join(work, 'metrics-c%d-before' % level['concurrency']),
                                   'metrics_after': os.path.join(work, 'metrics-c%d-after' % level['concurrency'])}
                                  for level in plan]}, handle)
        argv = [settings.get('timeout_executable') or 'timeout', '--kill-after=%d' % KILL_AFTER, str(int(budget)),
                settings['python'], runner_path, plan_path, status_path]
        started = clock()
        rc, stdout, stderr = run_command(argv)
        total = clock() - started
        events = _read_status(status_path)
        metrics = dict((level['concurrency'], tuple(
            read_metrics_file(os.path.join(work, 'metrics-c%d-%s' % (level['concurrency'], when)))
            for when in ('before', 'after'))) for level in plan)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    unavailable = [e for e in events if e.get('event') == 'unavailable']
    if rc == RUNNER_UNAVAILABLE and unavailable:
        return {'runner': 'not possible', 'runner_note': str(unavailable[0].get('error') or '')[:500]}
    shown_argv = argv[:4] + ['<the one-process sweep of gpufleet.vllm>'] + argv[5:]
    starts = dict((e.get('concurrency'), e) for e in events if e.get('event') == 'start')
    ends = dict((e.get('concurrency'), e) for e in events if e.get('event') == 'end')
    out_of_time = [e.get('concurrency') for e in events if e.get('event') == 'out_of_time']
    levels = []
    files = {}
    failure = None
    failed_concurrency = None
    max_bytes = settings.get('result_max_bytes') or RESULT_MAX_BYTES
    for level in plan:
        concurrency = level['concurrency']
        if concurrency in out_of_time:
            failure, failed_concurrency = _out_of_time(settings, concurrency, levels), concurrency
            break
        if concurrency not in starts and levels and ends.get(levels[-1]['concurrency'], {}).get('stopped'):
            failure = ('The sweep stopped after concurrency %d: its result did not show every request completed '
                       '(read in the one process); levels %s completed and were kept.'
                       % (levels[-1]['concurrency'], ', '.join(str(level['concurrency']) for level in levels)))
            failed_concurrency = concurrency
            break
        if concurrency not in starts:
            # (the process ended before this level started: it could not start, or was killed)
            over = ', over the limit of %s s' % budget if rc in TIMEOUT_STATUSES else ''
            failure = ('vllm bench serve failed before concurrency %d (exit status %s%s): %s.'
                       % (concurrency, rc, over, _last_words(stdout, stderr).rstrip('.')))
            failed_concurrency = concurrency
            files[log_name(settings, concurrency)] = _log(shown_argv, rc, stdout, stderr)
            break
        limit = starts[concurrency].get('limit')
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            limit = settings['level_timeout']
        end = ends.get(concurrency)
        # (started, never ended: the process was killed in this level, by coreutils' timeout or the backstop)
        level_rc = end.get('rc') if end else (rc or 137)
        if not isinstance(level_rc, int) or isinstance(level_rc, bool):
            level_rc = 1
        error = end.get('error') if end else 'killed with the sweep (exit status %s)' % rc
        seconds = end.get('seconds') if end else None
        entry, failure = _level(settings, (concurrency, level['num_prompts']),
                                level_argv(settings, concurrency, level['num_prompts'], limit=limit), level_rc,
                                float(seconds) if isinstance(seconds, (int, float)) else 0.0, stdout, stderr, limit,
                                files, max_bytes, note=str(error)[:500] if error else None,
                                metrics=metrics.get(concurrency))
        levels.append(entry)
        if failure:
            failed_concurrency = concurrency
            break
    return _finish(levels, files, failure, failed_concurrency, total, 'one process')
