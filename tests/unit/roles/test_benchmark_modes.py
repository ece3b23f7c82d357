# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark role through ansible-playbook on localhost: gate and record mode, the history and its trend.

The server is the stand-in, `vllm bench serve` a script that copies recorded results of vLLM 0.33.0 (concurrency 1
and 64), the model directory an NVFP4 export (hf_quant_config.json), so the quantisation is read on the "host".
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
FIXTURES = os.path.join(REPO, 'tests', 'unit', 'plugins', 'filter', 'fixtures')
STANDIN = os.path.join(REPO, 'tests', 'sim', 'standin', 'vllm_standin.py')
RECORDED = {1: 'vllm-0.33.0-c1.json', 64: 'vllm-0.33.0-c64.json'}

PLAY = """---
- name: Benchmark
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.vllm.benchmark
"""


@pytest.fixture(scope='module')
def world(tmp_path_factory):
    """The stand-in on a free port, a fake vllm, an NVFP4 model directory."""
    work = tmp_path_factory.mktemp('benchworld')
    model = work / 'kimi-k2.5-nvfp4'
    model.mkdir()
    (model / 'hf_quant_config.json').write_text(json.dumps({'quantization': {'quant_algo': 'NVFP4'}}))
    (model / 'config.json').write_text(json.dumps({'torch_dtype': 'bfloat16'}))
    script = work / 'bin' / 'vllm'
    script.parent.mkdir()
    script.write_text('#!%s\n' % sys.executable + '''import os, shutil, sys
argv = sys.argv[1:]
level = int(argv[argv.index('--max-concurrency') + 1])
target = os.path.join(argv[argv.index('--result-dir') + 1], argv[argv.index('--result-filename') + 1])
shutil.copy(os.path.join(%r, %r[level]), target)
''' % (FIXTURES, RECORDED))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    env = dict(os.environ, VLLM_STANDIN_LOAD_SECONDS='0', VLLM_STANDIN_VRAM_MIB='0',
               VLLM_STANDIN_REQUIRE_MODEL_DIR='0', FAKE_NVML_STATE=str(work / 'nvml-state'))
    with open(str(work / 'standin.log'), 'wb') as log:
        process = subprocess.Popen([sys.executable, STANDIN, 'serve', str(work / 'served'), '--served-model-name',
                                    'kimi-k2.5', '--host', '127.0.0.1', '--port', str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        for dummy in range(200):
            try:
                with urllib.request.urlopen('http://127.0.0.1:%d/v1/models' % port, timeout=1):
                    break
            except OSError:
                if process.poll() is not None:
                    pytest.fail('the stand-in exited: %s' % (work / 'standin.log').read_text())
                time.sleep(0.05)
        yield {'work': work, 'port': port, 'vllm': str(script), 'model': str(model)}
    finally:
        process.terminate()
        process.wait(10)


def play(world, run_id, **extra):
    work = world['work']
    variables = dict(benchmark_vllm_executable=world['vllm'], benchmark_port=world['port'],
                     benchmark_tokenizer=world['model'], benchmark_concurrency=[1, 64],
                     benchmark_result_dir=str(work / 'host-results'), benchmark_local_results_dir=str(work / 'reports'),
                     benchmark_history_dir=str(work / 'history'), benchmark_run_id=run_id,
                     ansible_python_interpreter=sys.executable)
    variables.update(extra)
    (work / 'play.yml').write_text(PLAY)
    (work / 'vars.json').write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.cache', 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_RETRY_FILES_ENABLED='0',
               ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default', ANSIBLE_LOAD_CALLBACK_PLUGINS='0')
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'gpu-node-1,',
                           '-c', 'local', '-e', '@' + str(work / 'vars.json'), str(work / 'play.yml')],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    # (the words of a message, whatever the callback's line breaks)
    return proc.returncode, ' '.join((proc.stdout + proc.stderr).split())


def test_gate_record_and_gate_again_with_the_recorded_baseline(world):
    work = world['work']
    # 1. gate mode, the default table: NVFP4 has no baseline, so nothing is gated, and the run says how to record one
    code, out = play(world, 'night1')
    assert code == 0, out[-3000:]
    assert 'gpu-node-1 (kimi-k2.5 nvfp4, run night1)' in out
    assert 'no baseline for kimi-k2.5 nvfp4: record one with benchmark_mode=record' in out
    summary = json.loads((work / 'reports' / 'night1' / 'gpu-node-1' / 'summary.json').read_text())
    assert summary['quantization'] == 'nvfp4'
    assert summary['quantization_source'] == 'hf_quant_config.json quantization.quant_algo'
    assert summary['status'] == 'ok' and summary['mode'] == 'gate'

    # 2. record mode: no gate even against a baseline far above, the file named in the output
    code, out = play(world, 'record1', benchmark_mode='record',
                     benchmark_baselines={'kimi-k2.5': {'nvfp4': {'single_stream_tok_s': 500, 'peak_tok_s': 10000}}})
    assert code == 0, out[-3000:]
    baseline_file = work / 'reports' / 'record1' / 'baselines.yml'
    assert 'Record mode (no gate): gpu-node-1 (kimi-k2.5 nvfp4, run record1)' in out
    assert 'Baselines written to %s: review them' % baseline_file in out
    recorded = yaml.safe_load(baseline_file.read_text())['benchmark_baselines']
    figures = recorded['kimi-k2.5']['nvfp4']
    assert figures['single_stream_tok_s'] > 0 and figures['peak_tok_s'] > figures['single_stream_tok_s']
    assert figures['recorded']['hosts'][0]['host'] == 'gpu-node-1'
    assert figures['recorded']['sweep']['concurrency'] == [1, 64]
    assert json.loads((work / 'reports' / 'record1' / 'gpu-node-1' / 'summary.json').read_text())['status'] == 'recorded'
    report = (work / 'reports' / 'record1' / 'report.md').read_text()
    assert '| recorded | 81.6 | 2,263.1 | 64 | 0 | record mode, not gated; against the current baseline: regression' in report
    assert '**Regression**' not in report

    # 3. gate mode with the recorded baseline pasted in: compared, within, and the trend of the three runs shown
    code, out = play(world, 'night2', benchmark_baselines=recorded)
    assert code == 0, out[-3000:]
    assert 'within 10% of the baseline of kimi-k2.5 nvfp4' in out
    assert 'Trend: gpu-node-1 (kimi-k2.5 nvfp4): peak \u00b10.0 % over the last 3 runs' in out
    history = (work / 'history' / 'gpu-node-1' / 'kimi-k2.5.nvfp4.jsonl').read_text().splitlines()
    assert [json.loads(line)['run_id'] for line in history] == ['night1', 'record1', 'night2']
    assert [json.loads(line)['mode'] for line in history] == ['gate', 'record', 'gate']
    report = (work / 'reports' / 'night2' / 'report.md').read_text()
    assert '## Trend' in report and (work / 'reports' / 'night2' / 'trend.png').stat().st_size > 10000

    # 4. the same run id again: kept results, nothing appended to the history
    code, out = play(world, 'night2', benchmark_baselines=recorded)
    assert code == 0 and 'kept results' in out
    assert len((work / 'history' / 'gpu-node-1' / 'kimi-k2.5.nvfp4.jsonl').read_text().splitlines()) == 3

    # 5. a regression in gate mode still fails the host (the gate is keyed, not gone)
    code, out = play(world, 'night3',
                     benchmark_baselines={'kimi-k2.5': {'nvfp4': {'single_stream_tok_s': 500, 'peak_tok_s': 10000}}})
    assert code != 0 and 'Benchmark regression on gpu-node-1: regression against the baseline of kimi-k2.5 nvfp4' in out
