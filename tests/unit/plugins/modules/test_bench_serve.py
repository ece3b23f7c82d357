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
from ansible_collections.gpufleet.vllm.plugins.module_utils import bench_sweep
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
                ready_timeout=0)
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
