# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark's client figures cross-checked with the server's own /metrics.

The real ``vllm bench serve`` (the bench environment, as scripts/bootstrap.sh
installs it) measures the stand-in through the bench_serve module; a starved
CLIENT is made by stopping the client's process group in bursts (SIGSTOP /
SIGCONT) while the server keeps its pace: the gate must call the shortfall
inconclusive, not a regression. A really slow server (the stand-in's slow
fault) is still a regression, and says that the server's metrics agree.

vLLM's import costs about 15 s of CPU, so the real ``vllm bench serve`` runs
once for the whole file (:func:`real_run`, one process for both levels): its
first level with the client starved, its second (concurrency 2) with the
client left alone, each judged by its own test. The role's tests use a small
client of their own (no import) with short outputs.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import contextlib
import importlib.util
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import crosscheck
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import sweep as bench_sweep
from ansible_collections.gpufleet.vllm.plugins.modules import bench_serve

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
STANDIN = os.path.join(REPO, 'tests', 'sim', 'standin', 'vllm_standin.py')
MAKE_MODEL_DIR = os.path.join(REPO, 'tests', 'sim', 'model', 'make_model_dir.py')
BENCH_ENV = os.environ.get('GPUFLEET_BENCH_ENV') or os.path.expanduser('~/.cache/gpufleet-vllm/bench-env')
VLLM = os.path.join(BENCH_ENV, 'bin', 'vllm')

RATE = 40            # the stand-in's tokens per second per stream
SLOW_RATE = 16       # the slow build's
OUTPUT_LEN = 48
TTFT = 0.1
#: the role's requests: shorter (its client is the small one below, its figures are not vLLM's)
ROLE_OUTPUT_LEN = 24
# the single-stream figure of a good build: OUTPUT_LEN tokens in OUTPUT_LEN / RATE + TTFT seconds (36.9), less a little
BASELINE = {'sim-model': {'single_stream_tok_s': 36.0}}


# ---------------------------------------------------------------------------
# the cross-check and the verdict, from figures


def summary_of(tokens, requests, e2e_sum, tpot_sum=None, tpot_count=None):
    """A vllm_metrics.summarize() result with what the cross-check reads."""
    histograms = {crosscheck.E2E_HISTOGRAM: {'count': requests, 'sum': e2e_sum}}
    if tpot_sum is not None:
        histograms['vllm:request_time_per_output_token_seconds'] = {'count': tpot_count, 'sum': tpot_sum}
    return {'request_success': {'total': requests}, 'generation_tokens_total': tokens, 'histograms': histograms}


ZERO = summary_of(0, 0, 0.0, 0.0, 0)


def row(tok_s, tpot_ms=25.0, completed=4, concurrency=1):
    return {'concurrency': concurrency, 'completed': completed, 'failed': 0, 'output_tok_s': tok_s,
            'mean_tpot_ms': tpot_ms, 'notes': []}


def test_a_client_that_read_slower_than_the_server_generated_was_starved():
    # 5 requests (4 and vllm bench serve's test prompt), 240 tokens in 6.5 s of request time: 36.9 tok/s
    after = summary_of(240, 5, 6.5, 5 * 0.025, 5)
    starved = crosscheck.check(row(20.0), ZERO, after)
    assert starved['status'] == 'client_starved', starved
    assert starved['server_tok_s'] == pytest.approx(36.92, abs=0.01) and starved['ratio'] < 0.6
    assert 'the measuring side lost the time' in starved['reason']
    agree = crosscheck.check(row(35.5), ZERO, after)
    assert agree['status'] == 'agree' and "server's own metrics agree" in agree['reason']
    # the client's time per output token much longer than the server's: starved too
    assert crosscheck.check(row(35.5, tpot_ms=40.0), ZERO, after)['status'] == 'client_starved'


def test_above_concurrency_one_the_server_rate_is_its_latencies_over_the_concurrency():
    # concurrency 4: 4 requests of 48 tokens side by side, each 1.3 s (and the test prompt): the server generated
    # 5 x 48 tokens in 6.5 s of request time spread over 4 streams, 147.7 tok/s; one after another it would be 36.9
    after = summary_of(240, 5, 6.5, 5 * 0.025, 5)
    agree = crosscheck.check(row(140.0, completed=4, concurrency=4), ZERO, after)
    assert agree['status'] == 'agree', agree
    assert agree['server_tok_s'] == pytest.approx(147.69, abs=0.01) and agree['concurrency'] == 4
    assert agree['ratio'] == pytest.approx(140.0 / 147.69, abs=0.001)
    # a client that read 60 tok/s of those 147.7 was starved (it read less than half)
    starved = crosscheck.check(row(60.0, completed=4, concurrency=4), ZERO, after)
    assert starved['status'] == 'client_starved', starved
    assert 'its request latencies over concurrency 4' in starved['reason']


@pytest.mark.parametrize('before, after, words', [
    (None, ZERO, 'a read of /metrics is missing'),
    ({'histograms': {}}, ZERO, 'does not count request success'),
    (summary_of(500, 9, 9.0), summary_of(100, 2, 1.0), 'went down'),
    (ZERO, summary_of(240, 30, 6.5), 'other traffic reached it'),
    (ZERO, {'request_success': {'total': 5}, 'generation_tokens_total': 240, 'histograms': {}},
     'no vllm:e2e_request_latency_seconds histogram'),
])
def test_a_cross_check_that_is_not_possible_says_why(before, after, words):
    checked = crosscheck.check(row(20.0), before, after)
    assert checked['status'] == 'unavailable' and words in checked['reason'], checked


def verdict(level_row, baseline=None):
    return bench.compare(bench.summarize([level_row]), baseline or BASELINE, model='sim-model')


def test_the_gate_calls_a_shortfall_the_server_contradicts_inconclusive():
    after = summary_of(240, 5, 6.5, 5 * 0.025, 5)
    starved = dict(row(20.0), crosscheck=crosscheck.check(row(20.0), ZERO, after),
                   attempts=[{'output_tok_s': 19.0}])
    judged = verdict(starved)
    assert not judged['regressed'] and judged['inconclusive'], judged
    assert judged['metrics']['single_stream_tok_s']['status'] == 'inconclusive'
    assert 'inconclusive, not a regression' in judged['message']
    assert 'measured 2 times' in judged['message'] and '36.9 tok/s' in judged['message']
    # the server's own rate below the floor too: a regression, whatever the client suffered
    slow = summary_of(240, 5, 16.0, 5 * 0.0625, 5)
    both = dict(row(10.0), crosscheck=crosscheck.check(row(10.0), ZERO, slow))
    assert both['crosscheck']['status'] == 'client_starved'
    assert verdict(both)['regressed'] and 'below the floor too' in verdict(both)['message']
    # the server agrees: a regression that says so
    agreed = dict(row(14.0, tpot_ms=62.5), crosscheck=crosscheck.check(row(14.0, tpot_ms=62.5), ZERO, slow))
    judged = verdict(agreed)
    assert judged['regressed'] and not judged['inconclusive']
    assert "the server's own metrics agree: 15.0 tok/s" in judged['message']
    # no metrics: still a regression, and the verdict says it was not cross-checked
    judged = verdict(row(20.0))
    assert judged['regressed'] and 'not cross-checked' in judged['message']
    judged = verdict(dict(row(20.0), crosscheck=crosscheck.unavailable('no metrics here')))
    assert judged['regressed'] and 'the cross-check with the server was not possible: no metrics here' in judged['message']


# ---------------------------------------------------------------------------
# the real vllm bench serve against the stand-in, through the module


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture(scope='module')
def model_dir(tmp_path_factory):
    if not os.access(VLLM, os.X_OK):
        pytest.skip('no bench environment at %s (scripts/bootstrap.sh installs it): the real vllm bench serve '
                    'cannot run' % BENCH_ENV)
    if importlib.util.find_spec('tokenizers') is None:
        pytest.skip("the 'tokenizers' package is not installed: the simulated tokenizer cannot be built")
    spec = importlib.util.spec_from_file_location('gpufleet_sim_make_model_dir_cc', MAKE_MODEL_DIR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_model_dir(str(tmp_path_factory.mktemp('model') / 'sim-model'))['model_dir']


@pytest.fixture(scope='module')
def standin(tmp_path_factory, model_dir):
    """start(slow=False) -> base URL of a stand-in serving sim-model at RATE tok/s (SLOW_RATE with the slow fault);
    every stand-in started is stopped at the end of the file."""
    started = []
    tmp_path = tmp_path_factory.mktemp('standins')

    def start(slow=False):
        work = tmp_path / ('standin-%d' % len(started))
        work.mkdir()
        venv = work / 'venvs' / 'new'
        venv.mkdir(parents=True)
        faults = work / 'faults'
        faults.write_text('slow_venv=%s\nslow_tokens_per_second=%d\n' % (venv, SLOW_RATE) if slow else '')
        port = _free_port()
        env = dict(os.environ, VLLM_STANDIN_LOAD_SECONDS='0', VLLM_STANDIN_VRAM_MIB='0',
                   VLLM_STANDIN_TOKENS_PER_SECOND=str(RATE), VLLM_STANDIN_MAX_TOKENS_PER_SECOND='0',
                   VLLM_STANDIN_TTFT_SECONDS=str(TTFT), VLLM_STANDIN_FAULTS_FILE=str(faults),
                   VLLM_STANDIN_VENV=str(venv), FAKE_NVML_STATE=str(work / 'nvml-state'))
        log = open(str(work / 'standin.log'), 'wb')
        process = subprocess.Popen([sys.executable, STANDIN, 'serve', model_dir, '--served-model-name', 'sim-model',
                                    '--host', '127.0.0.1', '--port', str(port)], stdout=log,
                                   stderr=subprocess.STDOUT, env=env)
        started.append((process, log))
        url = 'http://127.0.0.1:%d' % port
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + '/v1/models', timeout=2):
                    return url
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail('the stand-in did not start: %s' % (work / 'standin.log').read_text())
                time.sleep(0.05)

    yield start
    for process, log in started:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


class StarvedClient:
    """Stops every process group the module starts (the benchmark client) in bursts - STOP seconds stopped, RUN
    seconds running - while a level runs (from the server's first request in flight until it has been idle for
    IDLE seconds: vLLM's import is left alone): the server keeps its pace, the client reads late.

    A client stopped in the middle of a stream loses nothing (the server's tokens wait in the socket); what it loses
    is the time between the server's last token and its next request, as a client paged out or starved of I/O
    on a busy machine does. Short bursts (0.3 s in 0.5 s) cost a single stream about 12 %; these cost far more."""

    STOP, RUN, IDLE = 1.0, 0.25, 3.0

    def __init__(self, monkeypatch, url, until=None):
        self.url = url
        # (a file whose appearance ends the starving: the result file of the level to starve)
        self.until = until
        self.groups = []
        self.stopped = 0
        self.done = threading.Event()
        real_popen = bench_sweep.subprocess.Popen
        groups = self.groups

        class Recorded(real_popen):  # pylint: disable=too-few-public-methods
            def __init__(self, *args, **kwargs):
                super(Recorded, self).__init__(*args, **kwargs)
                groups.append(self.pid)

        monkeypatch.setattr(bench_sweep.subprocess, 'Popen', Recorded)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _busy(self):
        try:
            with urllib.request.urlopen(self.url + '/load', timeout=2) as answer:
                return json.loads(answer.read(4096).decode()).get('server_load', 0) > 0
        except (OSError, ValueError):
            return False

    def _signal(self, sig):
        for group in list(self.groups):
            try:
                os.killpg(group, sig)
            except OSError:
                pass

    def _over(self):
        return self.done.is_set() or (self.until is not None and os.path.exists(str(self.until)))

    def _run(self):
        last_busy = None
        while not self._over():
            if self._busy():
                last_busy = time.monotonic()
            if last_busy is None or time.monotonic() - last_busy > self.IDLE:
                time.sleep(0.02)
                continue
            if self._over():
                break
            self._signal(signal.SIGSTOP)
            self.stopped += 1
            time.sleep(self.STOP)
            self._signal(signal.SIGCONT)
            time.sleep(self.RUN)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5)
        self._signal(signal.SIGCONT)


def sweep_args(tmp_path, url, model_dir):
    return dict(executable=VLLM, base_url=url, model='sim-model', tokenizer=model_dir, concurrency=[1],
                num_prompts=[4], input_len=16, output_len=OUTPUT_LEN, result_dir=str(tmp_path / 'results'),
                ready_timeout=30, level_timeout=300, sweep_timeout=540, crosscheck_retries=1, temperature=0.0,
                environment={'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1', 'VLLM_TARGET_DEVICE': 'cpu'})


def run_module(args):
    """bench_serve's result for ARGS (its JSON on stdout, read here: the run is shared by several tests)."""
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit) as exc:
            bench_serve.main()
    result = json.loads(out.getvalue())
    assert exc.value.code == 0, result
    return result


@pytest.fixture(scope='module')
def real_run(tmp_path_factory, standin, model_dir):
    """ONE run of the real vllm bench serve through the module, vLLM imported once for two levels: c1 (3 prompts)
    with the client stopped in bursts until c1's result file is written, c2 (concurrency 2, 4 prompts) with the
    client left alone. The server keeps its pace throughout. Gives (times the client was stopped, the result)."""
    tmp_path = tmp_path_factory.mktemp('real-run')
    url = standin()
    args = dict(sweep_args(tmp_path, url, model_dir), concurrency=[1, 2], num_prompts=[3, 4], crosscheck_retries=0)
    patcher = pytest.MonkeyPatch()
    try:
        with StarvedClient(patcher, url, until=tmp_path / 'results' / 'c1.json') as client:
            result = run_module(args)
    finally:
        patcher.undo()
    assert result['failure'] is None, result['failure']
    assert [level['concurrency'] for level in result['levels']] == [1, 2], result['levels']
    return client.stopped, result


@pytest.mark.benchmark
def test_a_starved_client_is_inconclusive_not_a_regression(real_run):
    stopped, result = real_run
    assert stopped > 2, 'the client was never stopped'
    level = result['levels'][0]
    checked = level['row']['crosscheck']
    # the client read far fewer tokens per second than the server generated them
    assert checked['status'] == 'client_starved', checked
    assert checked['server_tok_s'] > BASELINE['sim-model']['single_stream_tok_s'] * 0.9, checked
    assert checked['client_tok_s'] < checked['server_tok_s'] * 0.9, checked
    # (measuring a starved level again, its own result file and the earlier run listed: the role's test below)
    judged = bench.compare(bench.summarize([level['row']]), BASELINE, model='sim-model')
    assert not judged['regressed'] and judged['inconclusive'], judged['message']
    assert 'the client that measured was starved' in judged['message']


@pytest.mark.benchmark
def test_a_client_left_alone_agrees_with_the_server_at_concurrency_two(real_run):
    """The real client's figures and the server's own (vLLM's histogram names) agree when nothing starves it: the
    cross-check calls no healthy measurement starved, and its rate above concurrency 1 divides by the concurrency."""
    dummy, result = real_run
    level = result['levels'][1]
    checked = level['row']['crosscheck']
    assert checked['status'] == 'agree', checked
    assert checked['concurrency'] == 2
    # two streams at RATE tok/s each: about twice the single stream's rate, on both sides
    assert checked['server_tok_s'] == pytest.approx(2 * OUTPUT_LEN / (OUTPUT_LEN / RATE + TTFT), rel=0.2), checked
    assert checked['client_tok_s'] >= checked['server_tok_s'] * 0.9, checked
    assert checked['server_tpot_ms'] == pytest.approx(1000.0 / RATE, rel=0.2), checked
    assert checked['tpot_histogram'] == 'vllm:request_time_per_output_token_seconds'
    assert 'attempts' not in level['row'] and sorted(result['files']) == ['c1.json', 'c2.json']


# ---------------------------------------------------------------------------
# the role: a client that sleeps between requests, the host kept with a warning

#: ``vllm bench serve`` as a client that sleeps SLEEP seconds before each request (as a client starved on a busy
#: machine sends its next request late): real streaming requests to the server, a result file as vLLM writes it
SLOW_CLIENT = r'''import http.client, json, os, sys, time, urllib.parse
SLEEP = %r
argv = sys.argv[1:]
def arg(name):
    return argv[argv.index(name) + 1]
url = urllib.parse.urlsplit(arg('--base-url'))
prompts, output_len = int(arg('--num-prompts')), int(arg('--random-output-len'))


def one():
    time.sleep(SLEEP)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    body = {'model': arg('--model'), 'prompt': 'hello world', 'max_tokens': output_len, 'stream': True,
            'ignore_eos': True}
    started = time.perf_counter()
    conn.request('POST', '/v1/completions', json.dumps(body), {'Content-Type': 'application/json'})
    answer = conn.getresponse()
    first = None
    tokens = 0
    for line in answer:
        line = line.strip()
        if line.startswith(b'data: ') and line != b'data: [DONE]':
            if first is None:
                first = time.perf_counter()
            tokens += 1
    conn.close()
    end = time.perf_counter()
    return tokens, first - started, (end - first) / max(1, tokens - 1), end - started


one()  # the initial test prompt
started = time.perf_counter()
runs = [one() for dummy in range(prompts)]
duration = time.perf_counter() - started
total = sum(run[0] for run in runs)
result = {'date': '20261207-120000', 'backend': 'vllm', 'model_id': arg('--model'), 'num_prompts': prompts,
          'max_concurrency': int(arg('--max-concurrency')), 'duration': duration, 'completed': prompts, 'failed': 0,
          'total_input_tokens': 2 * prompts, 'total_output_tokens': total, 'request_throughput': prompts / duration,
          'output_throughput': total / duration, 'total_token_throughput': (total + 2 * prompts) / duration,
          'mean_ttft_ms': 1000 * sum(run[1] for run in runs) / prompts,
          'mean_tpot_ms': 1000 * sum(run[2] for run in runs) / prompts,
          'mean_e2el_ms': 1000 * sum(run[3] for run in runs) / prompts}
with open(os.path.join(arg('--result-dir'), arg('--result-filename')), 'w') as handle:
    json.dump(result, handle)
'''

ROLE_PLAY = """---
- name: Benchmark
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.vllm.benchmark
"""


def role_world(tmp_path, url, sleep):
    """A "bench environment" whose vllm is SLOW_CLIENT and whose site-packages hold the bench environment's
    prometheus_client (vLLM's dependency, which parses the server's metrics)."""
    prometheus = os.path.join(BENCH_ENV, 'lib', 'python3.11', 'site-packages', 'prometheus_client')
    if not os.path.isdir(prometheus):
        pytest.skip('no prometheus_client in %s (scripts/bootstrap.sh installs the bench environment)' % BENCH_ENV)
    venv = tmp_path / 'bench-env'
    site = venv / 'lib' / 'python3.11' / 'site-packages'
    site.mkdir(parents=True)
    (site / 'prometheus_client').symlink_to(prometheus)
    script = venv / 'bin' / 'vllm'
    script.parent.mkdir()
    script.write_text('#!%s\n' % sys.executable + SLOW_CLIENT % sleep)
    script.chmod(0o755)
    model = tmp_path / 'model'
    model.mkdir()
    (model / 'config.json').write_text(json.dumps({'torch_dtype': 'bfloat16'}))
    port = urllib.parse.urlsplit(url).port
    return dict(benchmark_venv=str(venv), benchmark_port=port, benchmark_tokenizer=str(model),
                benchmark_model='sim-model', benchmark_concurrency=[1], benchmark_prompts_min=2,
                benchmark_output_len=ROLE_OUTPUT_LEN, benchmark_input_len=2, benchmark_one_process=False,
                benchmark_baselines={'sim-model': {'single_stream_tok_s': 30.0}},
                benchmark_result_dir=str(tmp_path / 'host-results'), benchmark_local_results_dir=str(tmp_path / 'reports'),
                benchmark_history_dir='', benchmark_report=False, benchmark_run_id='r1',
                ansible_python_interpreter=sys.executable)


def play(tmp_path, variables):
    (tmp_path / 'play.yml').write_text(ROLE_PLAY)
    (tmp_path / 'vars.json').write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.cache', 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_RETRY_FILES_ENABLED='0',
               ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default', ANSIBLE_LOAD_CALLBACK_PLUGINS='0')
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'gpu-node-1,',
                           '-c', 'local', '-e', '@' + str(tmp_path / 'vars.json'), str(tmp_path / 'play.yml')],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    summary = tmp_path / 'reports' / 'r1' / 'gpu-node-1' / 'summary.json'
    return proc.returncode, ' '.join((proc.stdout + proc.stderr).split()), (
        json.loads(summary.read_text()) if summary.exists() else None)


def test_the_role_keeps_a_host_whose_client_slept_between_requests(tmp_path, standin):
    # 24 tokens at 40 tok/s and 0.1 s to the first: 0.7 s per request, the server's 34.3 tok/s; sleeping 0.6 s
    # before each request the client reads about 18 tok/s, far below the floor (27 tok/s)
    code, out, summary = play(tmp_path, role_world(tmp_path, standin(), 0.6))
    assert code == 0, out[-3000:]
    assert summary['status'] == 'inconclusive', summary
    assert 'WARNING: benchmark inconclusive, not a regression (the host is kept)' in out
    # (the callback doubles the apostrophe of "server's")
    assert 'own metrics say it generated 3' in out and 'measured 2 times' in out, out[-3000:]
    level = summary['summary']['levels'][0]
    assert level['crosscheck']['status'] == 'client_starved' and len(level['attempts']) == 1
    assert (tmp_path / 'reports' / 'r1' / 'gpu-node-1' / 'c1.retry1.json').exists()


def test_the_role_still_fails_a_slow_server_the_same_client_measures(tmp_path, standin):
    # the slow build: 24 tokens at 16 tok/s, 1.6 s per request, 15 tok/s measured by the client and the server
    code, out, summary = play(tmp_path, role_world(tmp_path, standin(slow=True), 0.0))
    assert code != 0, out[-3000:]
    assert summary['status'] == 'regressed', summary
    assert 'Benchmark regression on gpu-node-1' in out and 'own metrics agree' in out, out[-3000:]


# ---------------------------------------------------------------------------
# the sweep's side: the reads around each level, bounded, and what a failed read gives


FIXTURE_C1 = os.path.join(REPO, 'tests', 'unit', 'plugins', 'filter', 'fixtures', 'vllm-0.33.0-c1.json')


def test_the_sweep_reads_the_metrics_around_each_level_and_hands_them_to_the_cross_check(tmp_path):
    events = []

    def run_command(argv):
        events.append('level')
        target = os.path.join(argv[argv.index('--result-dir') + 1], argv[argv.index('--result-filename') + 1])
        with open(FIXTURE_C1) as source, open(target, 'w') as handle:
            handle.write(source.read())
        return 0, '', ''

    def read_metrics():
        events.append('read')
        return ('page %d' % len(events), None) if len(events) == 1 else (None, 'connection refused')

    def check(level_row, before, after):
        return {'status': 'seen', 'before': before, 'after': after, 'concurrency': level_row['concurrency']}

    settings = dict(executable='/bench/bin/vllm', base_url='http://127.0.0.1:8000', model='m', tokenizer='/m',
                    concurrency=[1], num_prompts=[4], input_len=8, output_len=8, result_dir=str(tmp_path),
                    backend='vllm', endpoint='/v1/completions', seed=0, temperature=None, ignore_eos=True,
                    trust_remote_code=False, extra_args=[], metadata={}, level_timeout=60, attempt=1,
                    read_metrics=read_metrics, crosscheck=check)
    swept = bench_sweep.run_sweep(run_command, settings)
    assert events == ['read', 'level', 'read']
    entry = swept['levels'][0]
    assert entry['row']['crosscheck'] == {'status': 'seen', 'before': ('page 1', None),
                                          'after': (None, 'connection refused'), 'concurrency': 1}
    # a level measured again writes its own result file
    assert entry['result_file'] == str(tmp_path / 'c1.retry1.json') and list(swept['files']) == ['c1.retry1.json']


def test_a_metrics_page_the_runner_saved_is_read_bounded(tmp_path):
    page = tmp_path / 'metrics-c1-before'
    assert bench_sweep.read_metrics_file(str(page))[0] is None
    page.write_text('vllm:x 1\n')
    assert bench_sweep.read_metrics_file(str(page)) == ('vllm:x 1\n', None)
    assert bench_sweep.read_metrics_file(str(page), max_bytes=4) == (None, 'the page is larger than 4 bytes')
    (tmp_path / 'metrics-c1-before.error').write_text('URLError: <urlopen error [Errno 111] Connection refused>')
    assert bench_sweep.read_metrics_file(str(page)) == (
        None, 'URLError: <urlopen error [Errno 111] Connection refused>')


def test_a_starved_level_is_measured_again_until_the_server_agrees_and_no_more(tmp_path):
    verdicts = ['client_starved', 'agree', 'client_starved']

    def run_command(argv):
        target = os.path.join(argv[argv.index('--result-dir') + 1], argv[argv.index('--result-filename') + 1])
        with open(FIXTURE_C1) as source, open(target, 'w') as handle:
            handle.write(source.read())
        return 0, '', ''

    def check(level_row, before, after):
        return {'status': verdicts.pop(0), 'server_tok_s': 80.0}

    settings = dict(executable='/bench/bin/vllm', base_url='http://127.0.0.1:8000', model='m', tokenizer='/m',
                    concurrency=[1], num_prompts=[4], input_len=8, output_len=8, result_dir=str(tmp_path),
                    backend='vllm', endpoint='/v1/completions', seed=0, temperature=None, ignore_eos=True,
                    trust_remote_code=False, extra_args=[], metadata={}, level_timeout=60,
                    read_metrics=lambda: ('', None), crosscheck=check)
    swept = bench_sweep.run_sweep(run_command, settings)
    bench_serve.measure_again(run_command, settings, swept, 2, time.monotonic() + 600)
    entry = swept['levels'][0]
    # the second run agreed: kept, the first listed, no third run
    assert entry['row']['crosscheck']['status'] == 'agree' and verdicts == ['client_starved']
    assert [attempt['result_file'] for attempt in entry['row']['attempts']] == [str(tmp_path / 'c1.json')]
    assert entry['row']['attempts'][0]['crosscheck']['status'] == 'client_starved'
    assert entry['result_file'] == str(tmp_path / 'c1.retry1.json')
    assert sorted(swept['files']) == ['c1.json', 'c1.retry1.json']
    # no time left: not measured again, and the row says so
    verdicts[:] = ['client_starved']
    (tmp_path / 'late').mkdir()
    again = bench_sweep.run_sweep(run_command, dict(settings, result_dir=str(tmp_path / 'late')))
    bench_serve.measure_again(run_command, settings, again, 2, time.monotonic() - 1)
    assert again['levels'][0]['row']['attempts'][0]['note'] == 'not measured again: sweep_timeout used up'
