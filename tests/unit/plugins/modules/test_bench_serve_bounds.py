# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.bench_serve: deadlines, output and result caps, and values refused before the command line."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import sweep as bench_sweep
from ansible_collections.gpufleet.vllm.plugins.modules import bench_serve

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), 'filter', 'fixtures')


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open('/proc/%d/stat' % pid) as handle:  # a zombie is dead
        return handle.read().split(')')[-1].split()[0] != 'Z'


def wait_dead(pid, seconds=3.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end and alive(pid):
        time.sleep(0.05)
    return not alive(pid)


def script(path, body):
    path.write_text('#!%s\nimport os, subprocess, sys, time, signal\n%s' % (sys.executable, body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


# --------------------------------------------------------------------------- run_capped


def test_run_capped_kills_the_whole_process_group_at_its_limit(tmp_path):
    pidfile = tmp_path / 'grandchild'
    child = script(tmp_path / 'stubborn', '''signal.signal(signal.SIGTERM, signal.SIG_IGN)
p = subprocess.Popen(['sleep', '300'])
open(%r, 'w').write(str(p.pid))
print('started', flush=True)
time.sleep(300)
''' % str(pidfile))
    started = time.monotonic()
    rc, stdout, stderr = bench_sweep.run_capped([child], limit=1)
    assert time.monotonic() - started < 4
    assert rc == 137
    assert 'started' in stdout and 'killed with its process group after 1 s' in stderr
    assert wait_dead(int(pidfile.read_text()))


def test_run_capped_keeps_only_the_tail_of_a_flood_of_output(tmp_path):
    child = script(tmp_path / 'flood', '''sys.stdout.write('x' * (8 * 1024 * 1024))
sys.stdout.write('\\nLAST LINE\\n')
sys.stderr.write('e' * 300000 + 'END')
''')
    rc, stdout, stderr = bench_sweep.run_capped([child], limit=20, tail_bytes=4096)
    assert rc == 0
    assert len(stdout) < 4096 + 100 and stdout.endswith('LAST LINE\n')
    assert stdout.startswith('[first %d bytes of output not kept]' % (8 * 1024 * 1024 + 11 - 4096))
    assert len(stderr) < 4096 + 100 and stderr.endswith('END')


def test_run_capped_reports_a_command_that_cannot_start(tmp_path):
    rc, stdout, stderr = bench_sweep.run_capped([str(tmp_path / 'missing')], limit=5)
    assert rc == 127 and stdout == ''
    assert stderr.startswith('cannot run %s: ' % (tmp_path / 'missing'))


# --------------------------------------------------------------------------- run_sweep


def sweep_settings(tmp_path, **extra):
    base = dict(executable='/opt/vllm/bin/vllm', base_url='http://127.0.0.1:8000', model='m', tokenizer='/t',
                concurrency=[1, 64], num_prompts=[4, 128], input_len=8, output_len=8, result_dir=str(tmp_path),
                backend='vllm', endpoint='/v1/completions', seed=0, temperature=None, ignore_eos=True,
                trust_remote_code=False, extra_args=[], metadata={}, level_timeout=1800)
    base.update(extra)
    return base


def copying_vllm(calls, source='vllm-0.33.0-c1.json'):
    def run(argv):
        calls.append(argv)
        target = os.path.join(argv[argv.index('--result-dir') + 1], argv[argv.index('--result-filename') + 1])
        with open(os.path.join(FIXTURES, source), 'rb') as src, open(target, 'wb') as dst:
            dst.write(src.read())
        return 0, 'done\n', ''
    return run


def test_sweep_timeout_shortens_a_level_and_stops_the_sweep(tmp_path):
    ticks = iter(range(0, 1000, 10))
    calls = []
    sweep = bench_sweep.run_sweep(copying_vllm(calls), sweep_settings(tmp_path, sweep_timeout=25),
                                  clock=lambda: float(next(ticks)))
    # deadline 0 + 25; level 1 starts at 10 with 15 s left, ends at 30: level 64 never starts
    assert len(calls) == 1 and calls[0][2] == '15'
    assert sweep['failed_concurrency'] == 64
    assert sweep['failure'] == ('The sweep used up its time limit (sweep_timeout 25 s) before concurrency 64; '
                                'levels 1 completed and were kept. Raise sweep_timeout or run fewer levels.')
    assert [level['ok'] for level in sweep['levels']] == [True]


def test_a_result_file_over_the_cap_is_not_read(tmp_path):
    calls = []
    sweep = bench_sweep.run_sweep(copying_vllm(calls), sweep_settings(tmp_path, result_max_bytes=100))
    assert sweep['failed_concurrency'] == 1
    assert sweep['failure'] == ('The result of concurrency 1 (%s) cannot be read: the file is larger than 100 bytes '
                                '(result_max_mib), which is more than a result is read up to; it stays on the host.'
                                % (tmp_path / 'c1.json'))
    assert 'c1.json' not in sweep['files']
    assert (tmp_path / 'c1.json').exists()


# --------------------------------------------------------------------------- the module


class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = {'/v1/models': {'object': 'list', 'data': [{'id': 'kimi-k2.5', 'object': 'model'}]},
                '/version': {'version': '0.33.0'}, '/health': {}}.get(self.path.split('?')[0])
        data = json.dumps(body or {}).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), Models)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d' % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def run(capsys):
    def _run(args):
        with patch_module_args(dict(args, _ansible_check_mode=False)):
            with pytest.raises(SystemExit) as exc:
                bench_serve.main()
        return exc.value.code, json.loads(capsys.readouterr().out)
    return _run


def module_args(tmp_path, url, executable, **extra):
    args = dict(executable=executable, base_url=url, model='kimi-k2.5', tokenizer=str(tmp_path), concurrency=[1, 8],
                num_prompts=[4, 16], input_len=8, output_len=8, result_dir=str(tmp_path / 'results'), ready_timeout=0)
    args.update(extra)
    return args


def test_module_sweep_timeout_kills_a_hung_vllm_and_its_children(tmp_path, server, run):
    pidfile = tmp_path / 'grandchild'
    hung = script(tmp_path / 'vllm', '''p = subprocess.Popen(['sleep', '300'])
open(%r, 'w').write(str(p.pid))
print('benchmarking...', flush=True)
time.sleep(300)
''' % str(pidfile))
    started = time.monotonic()
    code, result = run(module_args(tmp_path, server, hung, sweep_timeout=2))
    assert time.monotonic() - started < 10
    assert code == 0 and result['failed_concurrency'] == 1, result
    limit = result['levels'][0]['argv'][2]  # what was left of the 2 s after the readiness check
    assert result['levels'][0]['argv'][1] == '--kill-after=30' and limit in ('1', '2')
    assert result['failure'] == ('vllm bench serve failed at concurrency 1 (exit status 124, over the limit of %s s): '
                                 'benchmarking.' % limit)
    assert [level['concurrency'] for level in result['levels']] == [1]
    assert 'benchmarking...' in result['files']['c1.log']
    assert wait_dead(int(pidfile.read_text()))


@pytest.mark.parametrize('extra,words', [
    ({'model': 'kimi\n--trust-remote-code'}, "model 'kimi\\n--trust-remote-code' holds a control character"),
    ({'model': '--help'}, "model '--help' starts with \"-\" and would be read as an option"),
    ({'base_url': 'file:///etc/passwd'}, "base_url 'file:///etc/passwd' is not an http:// or https:// URL"),
    ({'base_url': 'http://user@evil:80'}, 'is not an http:// or https:// URL'),
    ({'endpoint': 'v1/completions'}, "endpoint 'v1/completions' must start with \"/\""),
    ({'extra_args': ['--request-rate', '1\x00']}, "extra_args[1] '1\\x00' holds a control character"),
    ({'metadata': {'a=b': 'c'}}, "metadata key 'a=b' must be a word without \"=\""),
    ({'metadata': {'run': 'x\ry'}}, "metadata[run] 'x\\ry' holds a control character"),
    ({'environment': {'BAD NAME': '1'}}, "environment variable name 'BAD NAME' is not a name"),
    ({'environment': {'OK': 'a\x00b'}}, "environment variable 'OK' holds a NUL character"),
    ({'tokenizer': '/models/\x1b[31mred'}, 'tokenizer'),
    ({'api_key': 'abc\ndef'}, 'api_key holds a control character (value not shown)'),
    ({'sweep_timeout': 0}, 'sweep_timeout must be at least 1, got 0. Nothing was run.'),
    # checked by the same code as vllm_ready's, before the readiness request (a traceback before)
    ({'api_key': 'abc def'}, 'api_key holds a space, a control character or a non-ASCII character'),
    ({'base_url': 'http://127.0.0.1:8000/?x=1'}, 'has a query or fragment'),
])
def test_module_refuses_values_that_would_reach_the_command_line(tmp_path, server, run, extra, words):
    marker = tmp_path / 'ran'
    vllm = script(tmp_path / 'vllm', 'open(%r, "w").write("ran")\n' % str(marker))
    code, result = run(module_args(tmp_path, server, vllm, **extra))
    assert code == 1, result
    assert words in result['msg'] and result['msg'].endswith('Nothing was run.')
    assert not marker.exists() and not (tmp_path / 'results').exists()
    if 'api_key' in extra:
        assert 'def' not in result['msg']
