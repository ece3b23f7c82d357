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
* ``RESULT_NAME`` (``'c%d.json'``), ``LOG_NAME`` (``'c%d.log'``)

``settings`` keys: executable, base_url, model, tokenizer, concurrency
(list), num_prompts (list, same length), input_len, output_len,
result_dir, backend, endpoint, seed, temperature (None: not passed),
ignore_eos, trust_remote_code, extra_args, metadata (dict), level_timeout,
timeout_executable (default ``timeout``), environment (dict).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils import bench

RESULT_NAME = 'c%d.json'
LOG_NAME = 'c%d.log'
TAIL_LINES = 60
# exit status of coreutils' timeout when the limit passed (124), or when it had to kill (137)
TIMEOUT_STATUSES = (124, 137)


def level_argv(settings, concurrency, num_prompts):
    argv = [
        settings.get('timeout_executable') or 'timeout', '--kill-after=30', str(int(settings['level_timeout'])),
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
    for concurrency, num_prompts in zip(settings['concurrency'], settings['num_prompts']):
        argv = level_argv(settings, concurrency, num_prompts)
        path = os.path.join(settings['result_dir'], RESULT_NAME % concurrency)
        started = clock()
        rc, stdout, stderr = run_command(argv)
        seconds = clock() - started
        total += seconds
        entry = {'concurrency': concurrency, 'num_prompts': num_prompts, 'argv': argv, 'rc': rc,
                 'seconds': round(seconds, 3), 'result_file': path, 'row': None, 'ok': False}
        problem = None
        if rc != 0:
            limit = (', over the limit of %s s' % settings['level_timeout']) if rc in TIMEOUT_STATUSES else ''
            problem = ('vllm bench serve failed at concurrency %d (exit status %s%s): %s.'
                       % (concurrency, rc, limit, _last_words(stdout, stderr).rstrip('.')))
        else:
            try:
                with open(path, 'rb') as handle:
                    raw = handle.read()
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
