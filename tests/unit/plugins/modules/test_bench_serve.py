# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.bench_serve: the sweep logic with a recorded vllm bench serve, and the module end to end.

The fake ``vllm`` writes the result files that the real vLLM 0.33.0 wrote
against the stand-in (tests/unit/plugins/filter/fixtures); the server the
module checks is the stand-in itself (tests/sim/standin/vllm_standin.py).
The real ``vllm bench serve`` runs in the molecule scenario ``benchmark``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.request

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import sweep as bench_sweep
from ansible_collections.gpufleet.vllm.plugins.modules import bench_serve

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), 'filter', 'fixtures')
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
STANDIN = os.path.join(REPO, 'tests', 'sim', 'standin', 'vllm_standin.py')

# what the fake vllm writes for each --max-concurrency
RECORDED = {1: 'vllm-0.33.0-c1.json', 64: 'vllm-0.33.0-c64.json', 8: 'vllm-0.33.0-c8-server-killed.json',
            2: 'vllm-0.33.0-c2-detailed.json'}


def settings(tmp_path, **extra):
    base = dict(executable='/opt/vllm/current/bin/vllm', base_url='http://127.0.0.1:8000', model='kimi-k2.5',
                tokenizer='/shared/kimi-k2.5-nvfp4', concurrency=[1, 64], num_prompts=[4, 128], input_len=128,
                output_len=256, result_dir=str(tmp_path), backend='vllm', endpoint='/v1/completions', seed=0,
                temperature=0.0, ignore_eos=True, trust_remote_code=False, extra_args=[],
                metadata={'run_id': 'r1', 'host': 'h1'}, level_timeout=1800)
    base.update(extra)
    return base


class FakeVllm:
    """run_command stand-in: writes the recorded result of the level into --result-dir."""

    def __init__(self, rc=None, skip_file=(), garbage=()):
        self.calls = []
        self.rc = rc or {}
        self.skip_file = skip_file
        self.garbage = garbage

    def __call__(self, argv):
        self.calls.append(argv)
        level = int(argv[argv.index('--max-concurrency') + 1])
        target = os.path.join(argv[argv.index('--result-dir') + 1], argv[argv.index('--result-filename') + 1])
        if self.rc.get(level):
            return self.rc[level], 'Namespace(...)\n', 'Traceback (most recent call last):\nOSError: boom\n'
        if level in self.garbage:
            with open(target, 'w') as handle:
                handle.write('{"truncated": ')
        elif level not in self.skip_file:
            shutil.copy(os.path.join(FIXTURES, RECORDED[level]), target)
        return 0, '============ Serving Benchmark Result ============\n', ''


def clock():
    clock.now += 10.0
    return clock.now


clock.now = 0.0


def test_level_argv_is_vllm_bench_serve_under_timeout(tmp_path):
    argv = bench_sweep.level_argv(settings(tmp_path, trust_remote_code=True, extra_args=['--request-rate', 10]),
                                  64, 128)
    assert argv[:6] == ['timeout', '--kill-after=30', '1800', '/opt/vllm/current/bin/vllm', 'bench', 'serve']
    assert all(isinstance(arg, str) for arg in argv)
    pairs = dict(zip(argv, argv[1:]))
    assert pairs['--max-concurrency'] == '64' and pairs['--num-prompts'] == '128'
    assert pairs['--tokenizer'] == '/shared/kimi-k2.5-nvfp4' and pairs['--model'] == 'kimi-k2.5'
    assert pairs['--dataset-name'] == 'random' and pairs['--random-output-len'] == '256'
    assert pairs['--result-dir'] == str(tmp_path) and pairs['--result-filename'] == 'c64.json'
    assert pairs['--temperature'] == '0.0' and pairs['--request-rate'] == '10'
    assert '--save-result' in argv and '--ignore-eos' in argv and '--trust-remote-code' in argv
    assert argv[-3:] == ['--metadata', 'host=h1', 'run_id=r1']
    plain = bench_sweep.level_argv(settings(tmp_path, temperature=None, ignore_eos=False, metadata={}), 1, 4)
    assert '--temperature' not in plain and '--ignore-eos' not in plain and '--metadata' not in plain


def test_sweep_runs_every_level_in_order(tmp_path):
    fake = FakeVllm()
    sweep = bench_sweep.run_sweep(fake, settings(tmp_path), clock=clock)
    assert [call[call.index('--max-concurrency') + 1] for call in fake.calls] == ['1', '64']
    assert sweep['failure'] is None and sweep['failed_concurrency'] is None
    assert [level['ok'] for level in sweep['levels']] == [True, True]
    assert sweep['levels'][1]['row']['output_tok_s'] == pytest.approx(2263.0864882173037)
    assert sweep['bench_seconds'] == pytest.approx(20.0)
    assert sorted(sweep['files']) == ['c1.json', 'c64.json']
    with open(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json')) as handle:
        assert sweep['files']['c1.json'] == handle.read()


def test_sweep_stops_at_the_level_with_failed_requests(tmp_path):
    fake = FakeVllm()
    sweep = bench_sweep.run_sweep(fake, settings(tmp_path, concurrency=[1, 8, 64], num_prompts=[4, 24, 128]))
    assert len(fake.calls) == 2  # 64 never ran
    assert sweep['failed_concurrency'] == 8
    assert sweep['failure'].startswith('16 of 24 requests failed at concurrency 8 (8 completed): the server at '
                                       'http://127.0.0.1:8000 stopped answering')
    assert sweep['failure'].endswith('look at its journal.')
    assert [level['ok'] for level in sweep['levels']] == [True, False]
    assert sorted(sweep['files']) == ['c1.json', 'c8.json', 'c8.log']
    assert 'exit status 0' in sweep['files']['c8.log'] and '--max-concurrency 8' in sweep['files']['c8.log']


def test_sweep_reports_a_failing_command_with_its_last_words(tmp_path):
    sweep = bench_sweep.run_sweep(FakeVllm(rc={64: 1}), settings(tmp_path))
    assert sweep['failure'] == ('vllm bench serve failed at concurrency 64 (exit status 1): '
                                'Traceback (most recent call last): / OSError: boom.')
    assert 'c64.json' not in sweep['files'] and 'OSError: boom' in sweep['files']['c64.log']
    timed_out = bench_sweep.run_sweep(FakeVllm(rc={1: 124}), settings(tmp_path, level_timeout=60))
    assert 'exit status 124, over the limit of 60 s' in timed_out['failure']
    assert len(timed_out['levels']) == 1


def test_sweep_reports_a_missing_or_broken_result(tmp_path):
    missing = bench_sweep.run_sweep(FakeVllm(skip_file=(1,)), settings(tmp_path))
    assert missing['failure'].startswith('vllm bench serve at concurrency 1 exited 0 but left no readable result')
    broken = bench_sweep.run_sweep(FakeVllm(garbage=(1,)), settings(tmp_path / 'x', result_dir=str(tmp_path)))
    assert 'cannot be read' in broken['failure'] and broken['failed_concurrency'] == 1


# --------------------------------------------------------------------------- the module, in-process


@pytest.fixture(scope='module')
def standin_server(tmp_path_factory):
    """The stand-in serving kimi-k2.5 on a free port (a child process)."""
    work = tmp_path_factory.mktemp('standin')
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    env = dict(os.environ, VLLM_STANDIN_LOAD_SECONDS='0', VLLM_STANDIN_VRAM_MIB='0',
               VLLM_STANDIN_REQUIRE_MODEL_DIR='0', FAKE_NVML_STATE=str(work / 'nvml-state'))
    with open(str(work / 'standin.log'), 'wb') as log:
        process = subprocess.Popen([sys.executable, STANDIN, 'serve', str(work / 'model'), '--served-model-name',
                                    'kimi-k2.5', '--host', '127.0.0.1', '--port', str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, env=env)
    url = 'http://127.0.0.1:%d' % port
    try:
        for dummy in range(200):
            try:
                with urllib.request.urlopen(url + '/v1/models', timeout=1):
                    break
            except OSError:
                if process.poll() is not None:
                    pytest.fail('the stand-in exited: %s' % (work / 'standin.log').read_text())
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def fake_vllm(tmp_path):
    """An executable `vllm` that copies the recorded result of its level, as the real one writes it."""
    script = tmp_path / 'bin' / 'vllm'
    script.parent.mkdir()
    script.write_text('#!%s\n' % sys.executable + '''import os, shutil, sys
recorded = %r
argv = sys.argv[1:]
level = int(argv[argv.index('--max-concurrency') + 1])
target = os.path.join(argv[argv.index('--result-dir') + 1], argv[argv.index('--result-filename') + 1])
with open(os.path.join(os.path.dirname(target), 'env-%%d' %% level), 'w') as handle:
    handle.write(os.environ.get('VLLM_TARGET_DEVICE', '') + ' ' + os.environ.get('OPENAI_API_KEY', ''))
shutil.copy(os.path.join(%r, recorded[level]), target)
print('============ Serving Benchmark Result ============')
''' % (dict(RECORDED), FIXTURES))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.fixture
def run(capsys):
    def _run(args, check=False):
        with patch_module_args(dict(args, _ansible_check_mode=check)):
            with pytest.raises(SystemExit) as exc:
                bench_serve.main()
        return exc.value.code, json.loads(capsys.readouterr().out)
    return _run


def module_args(tmp_path, url, executable, **extra):
    args = dict(executable=executable, base_url=url, model='kimi-k2.5', tokenizer=str(tmp_path),
                concurrency=[1, 8, 64], num_prompts=[4, 24, 128], input_len=128, output_len=256,
                result_dir=str(tmp_path / 'results' / 'run1'), environment={'VLLM_TARGET_DEVICE': 'cpu'},
                ready_timeout=0, one_process=False)
    args.update(extra)
    return args


def test_module_runs_the_sweep_and_returns_the_files(tmp_path, standin_server, fake_vllm, run):
    code, result = run(module_args(tmp_path, standin_server, fake_vllm, concurrency=[1, 64], num_prompts=[4, 128],
                                   api_key='s3cret'))
    assert code == 0, result
    assert result['changed'] is True and result['failure'] is None
    assert result['server']['ready'] is True and result['server']['models'] == ['kimi-k2.5']
    assert result['server']['version'] == '0.33.0'
    assert sorted(result['files']) == ['c1.json', 'c64.json']
    assert json.loads(result['files']['c64.json'])['max_concurrency'] == 64
    assert [level['row']['concurrency'] for level in result['levels']] == [1, 64]
    results = tmp_path / 'results' / 'run1'
    assert (results / 'env-1').read_text() == 'cpu s3cret'  # environment and the API key reach vllm
    assert 's3cret' not in json.dumps(result['levels'])
    assert result['runner'] == 'one process per level' and 'runner_note' not in result


def test_module_stops_at_the_failed_level_without_failing(tmp_path, standin_server, fake_vllm, run):
    code, result = run(module_args(tmp_path, standin_server, fake_vllm))
    assert code == 0 and result.get('failed') is not True
    assert result['failed_concurrency'] == 8 and 'requests failed at concurrency 8' in result['failure']
    assert sorted(result['files']) == ['c1.json', 'c8.json', 'c8.log']
    assert not (tmp_path / 'results' / 'run1' / 'c64.json').exists()


def test_module_refuses_to_overwrite_kept_results(tmp_path, standin_server, fake_vllm, run):
    (tmp_path / 'results' / 'run1').mkdir(parents=True)
    (tmp_path / 'results' / 'run1' / 'c8.json').write_text('{}')
    code, result = run(module_args(tmp_path, standin_server, fake_vllm))
    assert code == 1 and 'already holds c8.json of an earlier run' in result['msg']


def test_module_measures_nothing_when_the_model_is_not_served(tmp_path, standin_server, fake_vllm, run):
    code, result = run(module_args(tmp_path, standin_server, fake_vllm, model='minimax-m2.5'))
    assert code == 0 and result['changed'] is False and result['levels'] == []
    assert result['server']['ready'] is False
    assert result['failure'].startswith('The server at %s is not ready to be benchmarked' % standin_server)
    assert 'minimax-m2.5' in result['failure']
    assert not (tmp_path / 'results').exists()


def test_module_check_mode_runs_nothing(tmp_path, standin_server, fake_vllm, run):
    code, result = run(module_args(tmp_path, standin_server, fake_vllm), check=True)
    assert code == 0 and result['changed'] is True
    assert [level['rc'] for level in result['levels']] == [None, None, None]
    assert result['levels'][2]['argv'][result['levels'][2]['argv'].index('--max-concurrency') + 1] == '64'
    assert not (tmp_path / 'results').exists()


@pytest.mark.parametrize('extra,words', [
    ({'num_prompts': [4]}, 'num_prompts has 1 items but concurrency has 3 levels'),
    ({'concurrency': []}, 'concurrency is empty'),
    ({'concurrency': [1, 1, 8]}, 'the levels distinct'),
    ({'input_len': 0}, 'must be positive'),
])
def test_module_refuses_bad_sweeps(tmp_path, standin_server, fake_vllm, run, extra, words):
    code, result = run(module_args(tmp_path, standin_server, fake_vllm, **extra))
    assert code == 1 and words in result['msg']


def test_module_reads_the_quantisation_of_the_model_dir_also_in_check_mode(tmp_path, standin_server, fake_vllm, run):
    model = tmp_path / 'kimi-k2.5-nvfp4'
    model.mkdir()
    (model / 'hf_quant_config.json').write_text(json.dumps({'quantization': {'quant_algo': 'NVFP4'}}))
    code, result = run(module_args(tmp_path, standin_server, fake_vllm, model_dir=str(model)), check=True)
    assert code == 0 and result['quantization'] == {
        'name': 'nvfp4', 'source': 'hf_quant_config.json quantization.quant_algo', 'detail': 'NVFP4'}
    # given explicitly, it wins over the directory
    code, result = run(module_args(tmp_path, standin_server, fake_vllm, model_dir=str(model), quantization='INT4'),
                       check=True)
    assert code == 0 and result['quantization'] == {'name': 'int4', 'source': 'given', 'detail': 'INT4'}


def test_module_refuses_a_quantisation_that_is_not_a_plain_name(tmp_path, standin_server, fake_vllm, run):
    code, result = run(module_args(tmp_path, standin_server, fake_vllm, quantization='nv fp4'))
    assert code == 1 and result['msg'].startswith("Refusing to run vllm bench serve: quantisation 'nv fp4' is not a "
                                                  "plain name")
    assert not (tmp_path / 'results').exists()


# --------------------------------------------------------------------------- every level in one process

FAKE_SERVE = """import json, os, shutil, sys, time
RECORDED = %r
FIXTURES = %r


def add_cli_args(parser):
    for name in ('--backend', '--base-url', '--endpoint', '--model', '--tokenizer', '--dataset-name',
                 '--random-input-len', '--random-output-len', '--num-prompts', '--max-concurrency', '--seed',
                 '--percentile-metrics', '--metric-percentiles', '--result-dir', '--result-filename', '--temperature'):
        parser.add_argument(name)
    parser.add_argument('--metadata', nargs='*')
    for flag in ('--save-result', '--disable-tqdm', '--ignore-eos', '--trust-remote-code'):
        parser.add_argument(flag, action='store_true')


def main(args):
    level = int(args.max_concurrency)
    target = os.path.join(args.result_dir, args.result_filename)
    with open(os.path.join(args.result_dir, 'pid-%%d' %% level), 'w') as handle:
        handle.write('%%d %%s' %% (os.getpid(), os.environ.get('VLLM_TARGET_DEVICE', '')))
    behaviour = os.environ.get('FAKE_BENCH_%%d' %% level, '')
    if behaviour == 'hang':
        # (stuck in an event loop whose callbacks keep it busy, as aiohttp's: an exception raised in a callback
        # would be logged by asyncio and swallowed)
        import asyncio

        async def never():
            loop = asyncio.get_running_loop()

            def tick():
                time.sleep(0.01)
                loop.call_soon(tick)
            loop.call_soon(tick)
            await asyncio.get_running_loop().create_future()
        asyncio.run(never())
    if behaviour == 'slow':
        # (a level that holds off the runner's alarm, and ends past what is left of the sweep)
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(3.5)
    if behaviour == 'raise':
        raise RuntimeError('the tokenizer could not be read at concurrency %%d' %% level)
    if behaviour == 'exit':
        sys.exit(2)
    if behaviour == 'exit3':
        sys.exit(3)
    if behaviour == 'thread':
        # (a level that leaves a thread running, as a pool a benchmark forgot to shut down)
        import threading
        threading.Thread(target=time.sleep, args=(600,)).start()
    shutil.copy(os.path.join(FIXTURES, RECORDED[level]), target)
    print('============ Serving Benchmark Result ============')
""" % (dict(RECORDED), FIXTURES)


FAKE_CLI = """import argparse, sys
from vllm.benchmarks.serve import add_cli_args, main as bench_main


def main():
    # (what vLLM's CLI does for `vllm bench serve ARGS`: its parser, then the benchmark's main)
    assert sys.argv[1:3] == ['bench', 'serve'], sys.argv
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    bench_main(parser.parse_args(sys.argv[3:]))
"""


@pytest.fixture
def vllm_package(tmp_path):
    """A vllm package whose CLI runs a vllm.benchmarks.serve that does what the real one does to the result
    directory."""
    root = tmp_path / 'pkg'
    for name, text in (('vllm/__init__.py', ''), ('vllm/benchmarks/__init__.py', ''),
                       ('vllm/benchmarks/serve.py', FAKE_SERVE), ('vllm/entrypoints/__init__.py', ''),
                       ('vllm/entrypoints/cli/__init__.py', ''), ('vllm/entrypoints/cli/main.py', FAKE_CLI),
                       ('vllm/envs.py', "import os\nVLLM_USE_RUST_BENCH = os.environ.get('VLLM_USE_RUST_BENCH') == '1'\n")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return str(root)


def one_process_args(tmp_path, url, executable, package, **environment):
    return module_args(tmp_path, url, executable, concurrency=[1, 64], num_prompts=[4, 128], one_process=True,
                       environment=dict({'VLLM_TARGET_DEVICE': 'cpu', 'PYTHONPATH': package}, **environment))


def pids(tmp_path):
    results = tmp_path / 'results' / 'run1'
    return dict((int(p.name[4:]), p.read_text().split()[0]) for p in results.glob('pid-*'))


def test_every_level_runs_in_one_process_through_vllms_own_entry(tmp_path, standin_server, fake_vllm, vllm_package,
                                                                 run):
    code, result = run(one_process_args(tmp_path, standin_server, fake_vllm, vllm_package))
    assert code == 0 and result['failure'] is None, result
    assert result['runner'] == 'one process'
    assert [level['row']['concurrency'] for level in result['levels']] == [1, 64]
    assert sorted(result['files']) == ['c1.json', 'c64.json']
    # one process (vLLM imported once), with the environment given
    ran = pids(tmp_path)
    assert sorted(ran) == [1, 64] and ran[1] == ran[64]
    assert (tmp_path / 'results' / 'run1' / 'pid-1').read_text().endswith(' cpu')
    # each level's command is the vllm bench serve that runs it on its own
    assert result['levels'][1]['argv'][3:6] == [fake_vllm, 'bench', 'serve']
    assert result['levels'][1]['argv'][result['levels'][1]['argv'].index('--max-concurrency') + 1] == '64'
    assert all(level['rc'] == 0 and level['seconds'] >= 0 for level in result['levels'])


def test_one_process_false_runs_one_vllm_bench_serve_per_level(tmp_path, standin_server, fake_vllm, vllm_package,
                                                               run):
    args = one_process_args(tmp_path, standin_server, fake_vllm, vllm_package)
    code, result = run(dict(args, one_process=False))
    assert code == 0 and result['failure'] is None and result['runner'] == 'one process per level'
    assert not pids(tmp_path)  # the script ran, not the package's main


@pytest.mark.parametrize('behaviour, words', [
    ('raise', 'vllm bench serve failed at concurrency 64 (exit status 1): '),
    ('exit', 'vllm bench serve failed at concurrency 64 (exit status 2): '),
    # (a level that exits 3 is a failed level, never taken for "one process is not possible": no second sweep)
    ('exit3', 'vllm bench serve failed at concurrency 64 (exit status 3): '),
])
def test_a_failing_level_stops_the_sweep_and_keeps_the_levels_before(tmp_path, standin_server, fake_vllm,
                                                                     vllm_package, run, behaviour, words):
    code, result = run(one_process_args(tmp_path, standin_server, fake_vllm, vllm_package, FAKE_BENCH_64=behaviour))
    assert code == 0 and result['runner'] == 'one process'
    assert result['failed_concurrency'] == 64 and result['failure'].startswith(words), result['failure']
    assert [level['ok'] for level in result['levels']] == [True, False]
    assert sorted(result['files']) == ['c1.json', 'c64.log']
    if behaviour == 'raise':
        assert 'RuntimeError: the tokenizer could not be read at concurrency 64' in result['failure']
        assert 'RuntimeError' in result['files']['c64.log']
    else:
        assert result['failure'].endswith('vllm bench serve exited with %d.' % (2 if behaviour == 'exit' else 3))
    assert 'runner_note' not in result and len(pids(tmp_path)) == 2  # levels 1 and 64 ran once, in one process


def test_a_thread_a_level_leaves_running_does_not_hold_the_sweep(tmp_path, standin_server, fake_vllm, vllm_package,
                                                                 run):
    started = time.monotonic()
    # (5 s a level: a process that waited for the thread at exit would be killed by coreutils' timeout at 25 s)
    code, result = run(dict(one_process_args(tmp_path, standin_server, fake_vllm, vllm_package, FAKE_BENCH_64='thread'),
                            level_timeout=5))
    assert code == 0 and result['failure'] is None and result['runner'] == 'one process'
    assert time.monotonic() - started < 20


def test_a_level_with_failed_requests_stops_the_one_process_before_the_next_level(tmp_path, standin_server,
                                                                                  fake_vllm, vllm_package, run):
    # (vllm bench serve exits 0 when requests failed, the server killed mid-level: the next level must not load it)
    args = dict(one_process_args(tmp_path, standin_server, fake_vllm, vllm_package), concurrency=[1, 8, 64],
                num_prompts=[4, 24, 128])
    code, result = run(args)
    assert code == 0 and result['runner'] == 'one process'
    assert result['failed_concurrency'] == 8 and 'requests failed at concurrency 8' in result['failure']
    assert sorted(pids(tmp_path)) == [1, 8]  # level 64 never ran
    assert not (tmp_path / 'results' / 'run1' / 'c64.json').exists()
    assert sorted(result['files']) == ['c1.json', 'c8.json', 'c8.log']


def test_a_stop_the_module_does_not_share_is_reported_not_run_on(tmp_path):
    # (the process stopped after a level whose result it could not read as complete, which the module reads as
    # complete: the levels after it did not run, and the sweep says so)
    def stopped_after_the_first(argv):
        plan = json.load(open(argv[5]))
        shutil.copy(os.path.join(FIXTURES, RECORDED[1]), plan['levels'][0]['result_file'])
        with open(argv[6], 'a') as handle:
            handle.write(json.dumps({'event': 'start', 'concurrency': 1, 'limit': 1800}) + '\n')
            handle.write(json.dumps({'event': 'end', 'concurrency': 1, 'rc': 0, 'seconds': 3.5, 'error': None,
                                     'stopped': True}) + '\n')
        return 0, '', ''
    sweep = bench_sweep.run_sweep(stopped_after_the_first, settings(tmp_path, python=sys.executable,
                                                                    sweep_timeout=100))
    assert sweep['runner'] == 'one process' and [level['ok'] for level in sweep['levels']] == [True]
    assert sweep['failed_concurrency'] == 64
    assert sweep['failure'] == ('The sweep stopped after concurrency 1: its result did not show every request '
                                'completed (read in the one process); levels 1 completed and were kept.')


def test_a_level_over_its_limit_is_stopped_in_the_process(tmp_path, standin_server, fake_vllm, vllm_package, run):
    started = time.monotonic()
    code, result = run(dict(one_process_args(tmp_path, standin_server, fake_vllm, vllm_package, FAKE_BENCH_64='hang'),
                            level_timeout=2))
    # (at its limit, not at the process's bound, which is more than a minute beyond)
    assert time.monotonic() - started < 30
    assert result['failed_concurrency'] == 64 and result['levels'][1]['rc'] == 124
    assert result['failure'].startswith('vllm bench serve failed at concurrency 64 (exit status 124, over the limit '
                                        'of 2 s): '), result['failure']
    assert result['failure'].endswith('over the limit of 2 s.')
    assert result['levels'][0]['ok'] is True
    # the level's command, as it would run on its own, with the limit it had
    assert result['levels'][1]['argv'][:3] == ['/usr/bin/timeout', '--kill-after=30', '2'] or \
        result['levels'][1]['argv'][1:3] == ['--kill-after=30', '2']


def test_without_vllms_cli_or_with_the_rust_client_each_level_runs_its_own_command(tmp_path, standin_server,
                                                                                   fake_vllm, vllm_package, run):
    os.unlink(os.path.join(vllm_package, 'vllm', 'entrypoints', 'cli', 'main.py'))
    code, result = run(one_process_args(tmp_path, standin_server, fake_vllm, vllm_package))
    assert code == 0 and result['failure'] is None and result['runner'] == 'one process per level'
    assert result['runner_note'].startswith("vLLM's CLI cannot be imported here (ModuleNotFoundError")
    assert not pids(tmp_path)
    with open(os.path.join(vllm_package, 'vllm', 'entrypoints', 'cli', 'main.py'), 'w') as handle:
        handle.write(FAKE_CLI)
    args = one_process_args(tmp_path, standin_server, fake_vllm, vllm_package, VLLM_USE_RUST_BENCH='1')
    code, result = run(dict(args, result_dir=str(tmp_path / 'results' / 'run2')))
    assert code == 0 and result['failure'] is None and result['runner'] == 'one process per level'
    assert result['runner_note'] == ('VLLM_USE_RUST_BENCH is set: vllm bench serve runs the Rust client, a process '
                                     'of its own')


def test_the_sweep_limit_stops_before_a_level_with_the_ones_done_kept(tmp_path, standin_server, fake_vllm,
                                                                      vllm_package, run):
    code, result = run(dict(one_process_args(tmp_path, standin_server, fake_vllm, vllm_package, FAKE_BENCH_1='slow'),
                            sweep_timeout=4))
    assert result['failed_concurrency'] == 64 and [level['ok'] for level in result['levels']] == [True], result
    assert result['failure'].startswith('The sweep used up its time limit (sweep_timeout 4 s) before concurrency 64; '
                                        'levels 1 completed and were kept.'), result['failure']


def test_a_process_killed_before_a_level_says_so(tmp_path, monkeypatch):
    # (the runner never wrote a start: coreutils' timeout or the backstop killed it while vLLM was imported)
    def killed(argv):
        return 137, '', 'Killed\n'
    sweep = bench_sweep.run_sweep(killed, settings(tmp_path, python=sys.executable, sweep_timeout=100))
    assert sweep['runner'] == 'one process' and sweep['levels'] == [] and sweep['failed_concurrency'] == 1
    assert sweep['failure'] == 'vllm bench serve failed before concurrency 1 (exit status 137, over the limit of 115 s): Killed.'
    assert 'c1.log' in sweep['files'] and '<the one-process sweep of gpufleet.vllm>' in sweep['files']['c1.log']


def test_the_interpreter_is_the_console_scripts_own_python(tmp_path):
    script = tmp_path / 'vllm'
    script.write_text('#!%s\nimport sys\n' % sys.executable)
    assert bench_sweep.interpreter_of(str(script)) == sys.executable
    for head in ('#!/bin/sh\nexec python "$0"\n', '#!/usr/bin/env python3\n', '#!relative/python\n',
                 '\x7fELF', '#!/nonexistent/bin/python3\n', '#!%s -I\n' % sys.executable):
        script.write_text(head)
        assert bench_sweep.interpreter_of(str(script)) is None, head
    assert bench_sweep.interpreter_of(str(tmp_path / 'missing')) is None
    # uv's relocatable console script: the python beside it (links resolved as the script resolves them)
    env = tmp_path / 'env' / 'bin'
    env.mkdir(parents=True)
    (env / 'python').symlink_to(sys.executable)
    uv_script = env / 'vllm'
    uv_script.write_text('#!/bin/sh\n\'\'\'exec\' "$(dirname -- "$(realpath -- "$0")")"/\'python\' "$0" "$@"\n\' \'\'\'\n'
                         'import sys\n')
    assert bench_sweep.interpreter_of(str(uv_script)) == str(env / 'python')
    (tmp_path / 'vllm-link').symlink_to(uv_script)
    assert bench_sweep.interpreter_of(str(tmp_path / 'vllm-link')) == str(env / 'python')
    # pip's, for a long path: the python it names
    script.write_text('#!/bin/sh\n\'\'\'exec\' "%s" "$0" "$@"\n\' \'\'\'\n' % sys.executable)
    assert bench_sweep.interpreter_of(str(script)) == sys.executable
    script.write_text('#!/bin/sh\n\'\'\'exec\' "/bin/rm" "$0" "$@"\n\' \'\'\'\n')
    assert bench_sweep.interpreter_of(str(script)) is None
    # (pip quotes the path only when it holds a space)
    script.write_text('#!/bin/sh\n\'\'\'exec\' %s "$0" "$@"\n\' \'\'\'\n' % sys.executable)
    assert bench_sweep.interpreter_of(str(script)) == sys.executable
