# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A concurrency sweep of the real ``vllm bench serve``, one run per level.

Used by the ``gpufleet.vllm.bench_serve`` module. Each level runs
``timeout --kill-after=30 LIMIT <vllm> bench serve ... --max-concurrency C
--save-result --result-dir DIR --result-filename c<C>.json`` (an argv list,
never a shell), then the result file is read and parsed
(:mod:`bench`). The sweep stops at the first level that fails: a non-zero
exit status (``vllm bench serve`` itself fails, or the time limit), no
result file, or any failed request in it (``vllm bench serve`` exits 0 even
when every request failed).

Public API:

* ``level_argv(settings, concurrency, num_prompts) -> list``
* ``run_sweep(run_command, settings, clock=time.monotonic) -> dict``
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

import os
import re
import signal
import subprocess
import tempfile
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils import bench

RESULT_NAME = 'c%d.json'
LOG_NAME = 'c%d.log'
TAIL_LINES = 60
# exit status of coreutils' timeout when the limit passed (124), or when it had to kill (137)
TIMEOUT_STATUSES = (124, 137)
KILL_AFTER = 30
BACKSTOP_GRACE = 15
TAIL_BYTES = 64 * 1024
RESULT_MAX_BYTES = 64 * 1024 * 1024
CONTROL = re.compile(r'[\x00-\x1f\x7f]')
ENV_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
URL = re.compile(r'^https?://[^/?#@\s]+(/[^\s]*)?$')


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
        '--save-result', '--result-dir', settings['result_dir'], '--result-filename', RESULT_NAME % concurrency,
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


def _last_words(stdout, stderr):
    for text in (stderr, stdout):
        kept = [line.strip() for line in (text or '').splitlines() if line.strip()]
        if kept:
            return ' / '.join(kept[-3:])
    return 'no output'


def run_sweep(run_command, settings, clock=time.monotonic):
    """Run the levels in order; stop at the first failure. ``run_command(argv) -> (rc, stdout, stderr)``.

    Returns levels (per level: concurrency, num_prompts, argv, rc, seconds,
    result_file, row (parsed, or None), ok), files (``c<level>.json``: the
    text of each result file; ``c<level>.log``: command, exit status and the
    last lines of stdout and stderr of the failed level), failure (a
    sentence, or None), failed_concurrency and bench_seconds.
    """
    levels = []
    files = {}
    failure = None
    failed_concurrency = None
    total = 0.0
    sweep_timeout = settings.get('sweep_timeout')
    deadline = clock() + sweep_timeout if sweep_timeout else None
    max_bytes = settings.get('result_max_bytes') or RESULT_MAX_BYTES
    for concurrency, num_prompts in zip(settings['concurrency'], settings['num_prompts']):
        limit = settings['level_timeout']
        if deadline is not None:
            left = int(deadline - clock())
            if left < 1:
                done = [level['concurrency'] for level in levels]
                failure = ('The sweep used up its time limit (sweep_timeout %s s) before concurrency %d; %s. '
                           'Raise sweep_timeout or run fewer levels.'
                           % (sweep_timeout, concurrency,
                              'levels %s completed and were kept' % ', '.join(str(c) for c in done) if done
                              else 'no level ran'))
                failed_concurrency = concurrency
                break
            limit = min(limit, left)
        argv = level_argv(settings, concurrency, num_prompts, limit=limit)
        path = os.path.join(settings['result_dir'], RESULT_NAME % concurrency)
        started = clock()
        rc, stdout, stderr = run_command(argv)
        seconds = clock() - started
        total += seconds
        entry = {'concurrency': concurrency, 'num_prompts': num_prompts, 'argv': argv, 'rc': rc,
                 'seconds': round(seconds, 3), 'result_file': path, 'row': None, 'ok': False}
        problem = None
        if rc != 0:
            over = (', over the limit of %s s' % limit) if rc in TIMEOUT_STATUSES else ''
            problem = ('vllm bench serve failed at concurrency %d (exit status %s%s): %s.'
                       % (concurrency, rc, over, _last_words(stdout, stderr).rstrip('.')))
        else:
            try:
                with open(path, 'rb') as handle:
                    raw = handle.read(max_bytes + 1)
                if len(raw) > max_bytes:
                    raise ValueError('the file is larger than %d bytes (result_max_mib), which is more than a result '
                                     'is read up to; it stays on the host' % max_bytes)
                text = raw.decode('utf-8', 'replace')
                files[RESULT_NAME % concurrency] = text
                entry['row'] = bench.parse_result(text, concurrency=concurrency, source=path)
            except (IOError, OSError) as exc:
                problem = ('vllm bench serve at concurrency %d exited 0 but left no readable result in %s (%s): %s.'
                           % (concurrency, path, exc.strerror or exc, _last_words(stdout, stderr).rstrip('.')))
            except ValueError as exc:
                reason = str(exc).rstrip('.')
                problem = 'The result of concurrency %d (%s) cannot be read: %s.' % (concurrency, path, reason)
            else:
                row = entry['row']
                if not row['ok']:
                    failed = row['failed'] if row['failed'] is not None else 'Some'
                    problem = ('%s of %s requests failed at concurrency %d (%s completed): the server at %s stopped '
                               'answering or refused requests; look at its journal.'
                               % (failed, row['num_prompts'], concurrency, row['completed'], settings['base_url']))
        if problem:
            files[LOG_NAME % concurrency] = ('%s\nexit status %s\n--- stdout ---\n%s\n--- stderr ---\n%s\n'
                                             % (' '.join(argv), rc, _tail(stdout), _tail(stderr)))
            failure = problem
            failed_concurrency = concurrency
        else:
            entry['ok'] = True
        levels.append(entry)
        if failure:
            break
    return {'levels': levels, 'files': files, 'failure': failure, 'failed_concurrency': failed_concurrency,
            'bench_seconds': round(total, 3)}
