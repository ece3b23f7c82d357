# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of the vLLM stand-in server and the simulated model directory.

The stand-in runs as a subprocess on a free loopback port with a temporary
fake NVML state file. Tests that need optional packages skip with the
reason: ``tokenizers``/``transformers`` (the simulated tokenizer), ``aiohttp``
plus the vLLM wheel (vLLM's own benchmark request code), ``vllm`` (the real
``vllm bench serve``, marker ``benchmark``).
"""

from __future__ import absolute_import, division, print_function

import asyncio
import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")
MAKE_MODEL_DIR = os.path.join(REPO, "tests", "sim", "model", "make_model_dir.py")
STATE_PY = os.path.join(REPO, "tests", "sim", "fakenvml", "state.py")
WHEELHOUSE = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(
    os.path.expanduser("~"), ".cache", "gpufleet-vllm", "wheelhouse")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


standin = _load("gpufleet_sim_vllm_standin", STANDIN)
make_model_dir = _load("gpufleet_sim_make_model_dir", MAKE_MODEL_DIR)


def _has(module):
    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------------------
# helpers


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_refuses(port):
    """True when a TCP connect to the port is refused (nothing listening)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def read_procs(state_path):
    """{gpu index: {pid: mib}} from the fake NVML state, read by state.py itself."""
    state = _load("gpufleet_sim_fakenvml_state", STATE_PY)
    result = {}
    for key, value in state.read_state(state_path).items():
        if key.startswith("gpu.") and key.endswith(".procs"):
            index = int(key.split(".")[1])
            result[index] = dict((pid, mib) for pid, mib in state._parse_procs(value))  # pylint: disable=protected-access
    return result


def wait_for(predicate, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


class Standin:
    """One stand-in subprocess."""

    def __init__(self, tmp_path, model_dir, env=None, args=None, served=("sim-model",), tp=1):
        self.port = free_port()
        self.state = str(tmp_path / "nvml" / "state")
        self.log_path = str(tmp_path / ("standin-%d.log" % self.port))
        environ = dict(os.environ)
        environ.update({"FAKE_NVML_STATE": self.state, "VLLM_STANDIN_LOAD_SECONDS": "0.2",
                        "VLLM_STANDIN_TTFT_SECONDS": "0.02", "VLLM_STANDIN_RELEASE_SECONDS": "0.2"})
        environ.pop("CUDA_VISIBLE_DEVICES", None)
        environ.update(env or {})
        command = [sys.executable, STANDIN, "serve", str(model_dir), "--host", "127.0.0.1",
                   "--port", str(self.port), "--tensor-parallel-size", str(tp)]
        if served:
            command += ["--served-model-name"] + list(served)
        command += list(args or [])
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(command, env=environ, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def output(self):
        with open(self.log_path) as handle:
            return handle.read()

    def health(self):
        try:
            return self.get("/health")[0]
        except OSError:
            return None

    def wait_ready(self, timeout=30):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("stand-in exited with %s:\n%s" % (self.proc.returncode, self.output()))
            return self.health() == 200
        wait_for(ready, timeout, "the stand-in to answer /health 200")
        return self

    def connection(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path):
        conn = self.connection()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def post(self, path, body):
        conn = self.connection()
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, json.loads(data.decode("utf-8")) if data else None
        finally:
            conn.close()

    def stream(self, path, body):
        """POST and read the SSE stream: [(arrival time, message text)]."""
        conn = self.connection()
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200, resp.read()
            assert resp.getheader("content-type").startswith("text/event-stream")
            events, buf = [], b""
            while True:
                data = resp.read1(65536)
                if not data:
                    break
                now = time.monotonic()
                buf += data
                while b"\n\n" in buf:
                    message, buf = buf.split(b"\n\n", 1)
                    events.append((now, message.decode("utf-8")))
            assert buf == b""
            return events
        finally:
            conn.close()

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def spawn(tmp_path):
    started = []

    def start(model_dir, **kwargs):
        server = Standin(tmp_path, model_dir, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A simulated model directory with the real small tokenizer (needs ``tokenizers``)."""
    if not _has("tokenizers"):
        pytest.skip("the 'tokenizers' package is not installed: the simulated tokenizer cannot be built")
    path = tmp_path_factory.mktemp("model") / "kimi-k2.5-nvfp4"
    summary = make_model_dir.make_model_dir(str(path))
    return summary["model_dir"]


@pytest.fixture(scope="module")
def bare_model_dir(tmp_path_factory):
    """A model directory with only a config.json (the stand-in's fallback word list)."""
    path = tmp_path_factory.mktemp("bare") / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    return str(path)


@pytest.fixture(scope="module")
def served_model_dir(request):
    """The model directory the shared server serves: with the real tokenizer when it can be built."""
    if _has("tokenizers"):
        return request.getfixturevalue("model_dir")
    return request.getfixturevalue("bare_model_dir")


@pytest.fixture(scope="module")
def server(tmp_path_factory, served_model_dir):
    """A running stand-in shared by the request tests: 200 tok/s per stream, cap 300 tok/s."""
    tmp_path = tmp_path_factory.mktemp("standin")
    instance = Standin(tmp_path, served_model_dir, tp=2, served=("sim-model", "alias"),
                       env={"VLLM_STANDIN_TOKENS_PER_SECOND": "200", "VLLM_STANDIN_MAX_TOKENS_PER_SECOND": "300",
                            "VLLM_STANDIN_VRAM_MIB": "1234"},
                       args=["--max-model-len", "4096", "--trust-remote-code", "--kv-cache-dtype", "fp8"])
    instance.model_dir = served_model_dir
    try:
        yield instance.wait_ready()
    finally:
        instance.close()


@pytest.fixture(scope="module")
def hf_tokenizer(model_dir):
    if not _has("transformers"):
        pytest.skip("the 'transformers' package is not installed")
    from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
    return AutoTokenizer.from_pretrained(model_dir)


def completion_chunks(events):
    """Split completion SSE messages into (token chunks, usage chunks, done flags)."""
    tokens, usage, done = [], [], []
    for when, message in events:
        assert message.startswith("data: "), message
        payload = message[len("data: "):]
        if payload == "[DONE]":
            done.append(when)
            continue
        data = json.loads(payload)
        if data.get("choices"):
            tokens.append((when, data))
        elif data.get("usage"):
            usage.append(data)
    return tokens, usage, done


# ---------------------------------------------------------------------------
# lifecycle


def test_port_closed_while_loading_then_ready(spawn, bare_model_dir):
    server = spawn(bare_model_dir, tp=4, env={"VLLM_STANDIN_LOAD_SECONDS": "3", "VLLM_STANDIN_VRAM_MIB": "2000"})
    # Loading: half of the VRAM is claimed on the 4 GPUs, the port refuses connections.
    procs = wait_for(lambda: read_procs(server.state), 10, "the VRAM claim at load start")
    assert procs == dict((i, {server.pid: 1000}) for i in range(4))
    assert port_refuses(server.port)
    assert "Application startup complete." not in server.output()

    server.wait_ready()
    assert read_procs(server.state) == dict((i, {server.pid: 2000}) for i in range(4))
    output = server.output()
    assert "Starting vLLM server on http://127.0.0.1:%d" % server.port in output
    assert "Application startup complete." in output


def test_vram_claim_is_the_gpu_memory_utilization_of_the_total_like_vllm(spawn, bare_model_dir):
    # No VLLM_STANDIN_VRAM_MIB: vLLM's default 0.9 of each used GPU's 97,887 MiB (what the derived
    # "loaded" gate of the service role expects), --gpu-memory-utilization when given.
    env = {"VLLM_STANDIN_VRAM_MIB": ""}
    default = spawn(bare_model_dir, tp=2, env=env).wait_ready()
    assert read_procs(default.state) == {0: {default.pid: 88098}, 1: {default.pid: 88098}}
    default.close()
    half = spawn(bare_model_dir, tp=1, env=env, args=["--gpu-memory-utilization", "0.5"]).wait_ready()
    assert read_procs(half.state)[0][half.pid] == 48943  # (the killed first one left its entry)


def test_sigterm_closes_port_and_frees_vram_gradually(spawn, bare_model_dir):
    server = spawn(bare_model_dir, tp=2, env={"VLLM_STANDIN_VRAM_MIB": "8000", "VLLM_STANDIN_RELEASE_SECONDS": "1.5"})
    server.wait_ready()
    assert read_procs(server.state) == {0: {server.pid: 8000}, 1: {server.pid: 8000}}

    server.terminate()
    seen = set()

    def exited():
        procs = read_procs(server.state)
        seen.add(procs.get(0, {}).get(server.pid, 0))
        return server.proc.poll() is not None

    wait_for(exited, 20, "the stand-in to exit after SIGTERM", interval=0.02)
    assert server.proc.returncode == 0
    assert port_refuses(server.port)
    assert read_procs(server.state) == {}
    assert 4000 in seen  # half released before all of it
    assert "GPU memory released." in server.output()


def test_never_ready_keeps_port_closed_until_stopped(spawn, bare_model_dir):
    server = spawn(bare_model_dir, env={"VLLM_STANDIN_NEVER_READY": "1", "VLLM_STANDIN_LOAD_SECONDS": "0",
                                        "VLLM_STANDIN_VRAM_MIB": "600"})
    wait_for(lambda: read_procs(server.state), 10, "the VRAM claim at load start")
    # Past the (zero) load time: still loading, still refusing.
    wait_for(lambda: "will never finish" in server.output(), 10, "the never-ready log line")
    assert server.proc.poll() is None
    assert port_refuses(server.port)
    assert read_procs(server.state) == {0: {server.pid: 300}}

    server.terminate()
    assert server.proc.wait(15) == 0
    assert read_procs(server.state) == {}
    assert "Application startup complete." not in server.output()


def test_fail_after_requests_crashes_on_the_next_request(spawn, bare_model_dir):
    server = spawn(bare_model_dir, env={"VLLM_STANDIN_FAIL_AFTER_REQUESTS": "2",
                                        "VLLM_STANDIN_TOKENS_PER_SECOND": "1000"})
    server.wait_ready()
    for dummy in range(2):
        status, body = server.post("/v1/completions", {"model": "sim-model", "prompt": "hello", "max_tokens": 3})
        assert status == 200 and body["usage"]["completion_tokens"] == 3
    with pytest.raises((OSError, http.client.HTTPException)):
        server.post("/v1/completions", {"model": "sim-model", "prompt": "hello", "max_tokens": 3})
    assert server.proc.wait(15) == 1
    assert "EngineCore encountered a fatal error" in server.output()
    assert port_refuses(server.port)


def test_exit_after_seconds_crashes_with_configured_code(spawn, bare_model_dir):
    server = spawn(bare_model_dir, env={"VLLM_STANDIN_EXIT_AFTER_SECONDS": "0.5",
                                        "VLLM_STANDIN_CRASH_EXIT_CODE": "3"})
    server.wait_ready()
    assert server.proc.wait(15) == 3
    assert "VLLM_STANDIN_EXIT_AFTER_SECONDS" in server.output()
    # A crash does not clean up: the entry stays, with a dead PID the fake NVML library ignores.
    # (unset VLLM_STANDIN_VRAM_MIB: like vLLM, 0.9 x the GPU's 97,887 MiB)
    assert read_procs(server.state) == {0: {server.pid: 88098}}


def test_missing_model_dir_fails_with_a_clear_message(tmp_path):
    missing = str(tmp_path / "no-such-model")
    env = dict(os.environ, FAKE_NVML_STATE=str(tmp_path / "state"))
    result = subprocess.run([sys.executable, STANDIN, "serve", missing, "--port", str(free_port())],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30, check=False)
    assert result.returncode == 1
    assert "The model directory does not exist on this host" in result.stdout.decode()
    assert not os.path.exists(str(tmp_path / "state"))


def test_port_in_use_fails_fast(tmp_path, bare_model_dir):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        env = dict(os.environ, FAKE_NVML_STATE=str(tmp_path / "state"))
        result = subprocess.run([sys.executable, STANDIN, "serve", bare_model_dir, "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=30, check=False)
    assert result.returncode == 1
    assert "Another process already uses port %d" % port in result.stdout.decode()


def test_bad_environment_value_is_reported(tmp_path, bare_model_dir):
    env = dict(os.environ, FAKE_NVML_STATE=str(tmp_path / "state"), VLLM_STANDIN_TOKENS_PER_SECOND="fast")
    result = subprocess.run([sys.executable, STANDIN, "serve", bare_model_dir], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=30, check=False)
    assert result.returncode == 2
    assert "VLLM_STANDIN_TOKENS_PER_SECOND='fast' is not a decimal number" in result.stdout.decode()


def test_version_and_unknown_subcommand():
    result = subprocess.run([sys.executable, STANDIN, "--version"], stdout=subprocess.PIPE, timeout=30, check=True)
    assert result.stdout.decode().strip() == "0.33.0"
    result = subprocess.run([sys.executable, STANDIN, "bench", "serve"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30, check=False)
    assert result.returncode == 2
    assert "only 'vllm serve MODEL [options]'" in result.stderr.decode()


def test_install_writes_an_executable_vllm(tmp_path):
    target = standin.install(str(tmp_path / "venv"), python=sys.executable)
    assert target == str(tmp_path / "venv" / "bin" / "vllm")
    assert os.stat(target).st_mode & 0o777 == 0o755
    with open(target) as handle:
        assert handle.readline() == "#!%s\n" % sys.executable
    result = subprocess.run([target, "--version"], stdout=subprocess.PIPE, timeout=30, check=True,
                            env=dict(os.environ, VLLM_STANDIN_VERSION="0.34.0rc1"))
    assert result.stdout.decode().strip() == "0.34.0rc1"


def test_command_line_parsing_keeps_vllm_arguments():
    parser = standin.build_parser()
    args, unknown = parser.parse_known_intermixed_args(
        ["serve", "--port", "8100", "/models/kimi", "--served-model-name", "kimi-k2.5", "kimi",
         "--tensor-parallel-size", "8", "--max-model-len", "128k", "--enable-expert-parallel",
         "--kv-cache-dtype", "fp8"])
    settings = standin.Settings(args, unknown)
    assert settings.model == "/models/kimi"
    assert settings.served_names == ["kimi-k2.5", "kimi"]
    assert (settings.port, settings.tp, settings.gpus) == (8100, 8, 8)
    assert settings.max_model_len_arg == 128000
    assert unknown == ["--enable-expert-parallel", "--kv-cache-dtype", "fp8"]
    assert settings.gpu_indices() == list(range(8))


# ---------------------------------------------------------------------------
# requests (one shared server)


def test_models_lists_served_names(server):
    status, body = server.get("/v1/models")
    assert status == 200
    data = json.loads(body)
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["sim-model", "alias"]
    for card in data["data"]:
        assert card["root"] == server.model_dir
        assert card["owned_by"] == "vllm"
        assert card["max_model_len"] == 4096
        assert card["object"] == "model"


def test_vram_claimed_on_the_tensor_parallel_gpus(server):
    assert read_procs(server.state) == {0: {server.pid: 1234}, 1: {server.pid: 1234}}


def test_ignored_arguments_are_logged(server):
    assert "Ignoring vLLM arguments the stand-in does not model: --trust-remote-code --kv-cache-dtype fp8" \
        in server.output()


def test_version_endpoint(server):
    status, body = server.get("/version")
    assert status == 200 and json.loads(body) == {"version": "0.33.0"}


def test_completion_returns_exactly_max_tokens(server, hf_tokenizer):
    prompt = "hello world , the model serves a fleet of hosts ."
    status, body = server.post("/v1/completions", {"model": "sim-model", "prompt": prompt, "max_tokens": 7})
    assert status == 200
    assert body["object"] == "text_completion"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    expected_prompt = len(hf_tokenizer.encode(prompt, add_special_tokens=False))
    assert body["usage"] == {"prompt_tokens": expected_prompt, "completion_tokens": 7,
                             "total_tokens": expected_prompt + 7}
    assert len(hf_tokenizer.encode(choice["text"], add_special_tokens=False)) == 7


def test_completion_without_max_tokens_stops_naturally(server):
    status, body = server.post("/v1/completions", {"prompt": "hello", "min_tokens": 20})
    assert status == 200
    assert body["model"] == "sim-model"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 20  # min_tokens beats the natural 16


def test_streaming_completion_with_usage(server, hf_tokenizer):
    events = server.stream("/v1/completions", {
        "model": "alias", "prompt": "river stone cloud", "max_tokens": 12, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True}, "logprobs": None, "repetition_penalty": 1.0})
    tokens, usage, done = completion_chunks(events)
    assert len(tokens) == 12
    assert [d["choices"][0]["finish_reason"] for dummy, d in tokens] == [None] * 11 + ["length"]
    assert all(d["model"] == "alias" for dummy, d in tokens)
    text = "".join(d["choices"][0]["text"] for dummy, d in tokens)
    assert len(hf_tokenizer.encode(text, add_special_tokens=False)) == 12
    assert usage == [usage[0]] and usage[0]["choices"] == []
    assert usage[0]["usage"] == {"prompt_tokens": 3, "completion_tokens": 12, "total_tokens": 15}
    assert events[-1][1] == "data: [DONE]" and len(done) == 1


def test_streaming_without_include_usage_sends_no_usage_chunk(server):
    events = server.stream("/v1/completions", {"prompt": "hello", "max_tokens": 4, "stream": True})
    tokens, usage, done = completion_chunks(events)
    assert (len(tokens), len(usage), len(done)) == (4, 0, 1)


def test_continuous_usage_stats(server):
    events = server.stream("/v1/completions", {
        "prompt": "hello", "max_tokens": 3, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    tokens, _usage, _done = completion_chunks(events)
    assert [d["usage"]["completion_tokens"] for dummy, d in tokens] == [1, 2, 3]


def test_single_stream_rate_follows_configuration(server):
    """40 tokens at 200 tok/s: the pacing gives ~200 tok/s between first and last token."""
    events = server.stream("/v1/completions", {"prompt": "hello", "max_tokens": 40, "stream": True})
    tokens, _usage, _done = completion_chunks(events)
    assert len(tokens) == 40
    rate = 39 / (tokens[-1][0] - tokens[0][0])
    assert 120 < rate < 260, "measured %.1f tok/s, configured 200" % rate


def test_aggregate_cap_is_shared_between_streams(server):
    """3 streams at 200 tok/s each would make 600 tok/s; the cap of 300 gives each ~100."""
    rates = [None] * 3

    def run(index):
        events = server.stream("/v1/completions", {"prompt": "hello", "max_tokens": 30, "stream": True})
        tokens, _usage, _done = completion_chunks(events)
        # the middle of the stream, when all three run together
        middle = tokens[8:22]
        rates[index] = (len(middle) - 1) / (middle[-1][0] - middle[0][0])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(r is not None for r in rates), rates
    for rate in rates:
        assert 60 < rate < 160, "measured %s tok/s per stream, expected ~100 (cap 300 / 3)" % rates


def test_metrics_count_tokens(server):
    def sample(text, name):
        for line in text.splitlines():
            if line.startswith(name + "{"):
                assert 'model_name="sim-model"' in line
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("%s not in /metrics" % name)

    before = server.get("/metrics")[1].decode()
    assert server.post("/v1/completions", {"prompt": "hello world", "max_tokens": 5})[0] == 200
    status, raw = server.get("/metrics")
    after = raw.decode()
    assert status == 200
    # (prometheus_client, which writes vLLM's page, names a counter's family with _total in the text format)
    assert "# TYPE vllm:generation_tokens_total counter" in after
    assert sample(after, "vllm:generation_tokens_total") - sample(before, "vllm:generation_tokens_total") == 5
    assert sample(after, "vllm:prompt_tokens_total") - sample(before, "vllm:prompt_tokens_total") == 2
    assert sample(after, "vllm:num_requests_running") == 0
    assert sample(after, "vllm:num_requests_waiting") == 0
    assert 0 <= sample(after, "vllm:kv_cache_usage_perc") <= 1


def test_chat_completion(server, hf_tokenizer):
    messages = [{"role": "user", "content": "hello world"}]
    status, body = server.post("/v1/chat/completions", {"model": "sim-model", "messages": messages,
                                                        "max_completion_tokens": 6})
    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert len(hf_tokenizer.encode(body["choices"][0]["message"]["content"], add_special_tokens=False)) == 6
    assert body["usage"]["completion_tokens"] == 6

    events = server.stream("/v1/chat/completions", {"messages": messages, "max_tokens": 5, "stream": True,
                                                    "stream_options": {"include_usage": True}})
    payloads = [json.loads(m[len("data: "):]) for dummy, m in events if m != "data: [DONE]"]
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [p["choices"][0]["delta"]["content"] for p in payloads[1:] if p["choices"]]
    assert len(contents) == 5 and all(contents)
    assert payloads[-1]["usage"]["completion_tokens"] == 5
    assert events[-1][1] == "data: [DONE]"


def test_tokenize_and_detokenize_match_the_hf_tokenizer(server, hf_tokenizer):
    text = "hello , world ! 42 unknownword the"
    status, body = server.post("/tokenize", {"model": "sim-model", "prompt": text, "add_special_tokens": False})
    assert status == 200
    assert body["tokens"] == hf_tokenizer.encode(text, add_special_tokens=False)
    assert body["count"] == len(body["tokens"]) and body["max_model_len"] == 4096
    ids = list(range(4, 60))
    status, body = server.post("/detokenize", {"model": "sim-model", "tokens": ids})
    assert status == 200 and body["prompt"] == hf_tokenizer.decode(ids)


def test_errors_look_like_vllm(server):
    status, body = server.post("/v1/completions", {"model": "other", "prompt": "hello", "max_tokens": 2})
    assert status == 404
    assert body["error"]["type"] == "NotFoundError"
    assert "The model `other` does not exist." == body["error"]["message"]
    # vLLM answers to the served names only, not to the model path
    status, body = server.post("/v1/completions", {"model": server.model_dir, "prompt": "hello", "max_tokens": 2})
    assert status == 404
    status, body = server.post("/v1/completions", {"prompt": "hello", "max_tokens": 5000})
    assert status == 400 and "maximum context length is 4096 tokens" in body["error"]["message"]
    status, body = server.post("/v1/completions", {"prompt": "hello", "max_tokens": 2, "min_tokens": 3})
    assert status == 400 and body["error"]["param"] == "min_tokens"
    assert server.get("/no/such/path")[0] == 404


# ---------------------------------------------------------------------------
# the simulated model directory


def test_model_dir_tokenizer_is_reproducible_and_round_trips(tmp_path, hf_tokenizer, model_dir):
    again = make_model_dir.make_model_dir(str(tmp_path / "again"))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(model_dir, name), "rb") as first:
            with open(os.path.join(again["model_dir"], name), "rb") as second:
                assert first.read() == second.read(), name
    assert hf_tokenizer.num_special_tokens_to_add() == 0
    assert 300 <= hf_tokenizer.vocab_size <= 1000
    # What `vllm bench serve --dataset-name random` does: decode sampled ids, encode again.
    allowed = [i for i in range(hf_tokenizer.vocab_size) if i not in hf_tokenizer.all_special_ids]
    ids = [allowed[(5 + i * 37) % len(allowed)] for i in range(300)]
    assert hf_tokenizer.encode(hf_tokenizer.decode(ids), add_special_tokens=False) == ids
    # The stand-in's stdlib tokenizer agrees with the real one.
    local = standin.SimTokenizer(model_dir)
    assert local.encode(hf_tokenizer.decode(ids)) == ids
    assert local.word(0)[0] == hf_tokenizer.convert_tokens_to_ids(local.word(0)[1].strip())


def test_model_dir_has_fixture_configs(model_dir):
    with open(os.path.join(model_dir, "config.json")) as handle:
        config = json.load(handle)
    assert "architectures" in config
    with open(os.path.join(model_dir, "tokenizer_config.json")) as handle:
        tok_config = json.load(handle)
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "auto_map" not in tok_config  # loads offline, no remote code


def test_model_dir_hf_cache_layout_keeps_blobs(tmp_path):
    if not _has("tokenizers"):
        pytest.skip("the 'tokenizers' package is not installed")
    fixtures_py = os.path.join(REPO, "tests", "sim", "model", "fixtures.py")
    if not os.path.exists(fixtures_py):
        pytest.skip("tests/sim/model/fixtures.py is not there: no hub cache layout to build")
    summary = make_model_dir.make_model_dir(str(tmp_path / "hub"), layout="hf-cache")
    snapshot = summary["model_dir"]
    # every file of the snapshot is a link into blobs/, as the hub writes it (the tokenizer and the shards too)
    assert sorted(os.listdir(snapshot)) == sorted(os.path.basename(f) for f in summary["files"])
    assert all(os.path.islink(os.path.join(snapshot, name)) for name in os.listdir(snapshot))
    blobs = os.path.join(os.path.dirname(os.path.dirname(snapshot)), "blobs")
    assert len(os.listdir(blobs)) == len(os.listdir(snapshot))  # no blob left over (the fixtures' TikToken one)
    with open(os.path.join(snapshot, "tokenizer_config.json"), "rb") as handle:
        assert b"PreTrainedTokenizerFast" in handle.read()


def test_model_dir_without_fixtures_writes_minimal_config(tmp_path):
    if not _has("tokenizers"):
        pytest.skip("the 'tokenizers' package is not installed")
    summary = make_model_dir.make_model_dir(str(tmp_path / "m"), use_fixtures=False, max_position_embeddings=8192)
    with open(os.path.join(summary["model_dir"], "config.json")) as handle:
        config = json.load(handle)
    assert config["max_position_embeddings"] == 8192
    assert config["vocab_size"] == summary["tokenizer"]["vocab_size"]


# ---------------------------------------------------------------------------
# vLLM's own benchmark client code


def _wheel_path():
    if not os.path.isdir(WHEELHOUSE):
        return None
    wheels = sorted(f for f in os.listdir(WHEELHOUSE) if f.startswith("vllm-") and f.endswith(".whl"))
    return os.path.join(WHEELHOUSE, wheels[-1]) if wheels else None


@pytest.fixture(scope="module")
def vllm_request_funcs(tmp_path_factory):
    """vllm/benchmarks/lib/endpoint_request_func.py from the vLLM wheel (needs aiohttp, regex, tqdm)."""
    missing = [m for m in ("aiohttp", "regex", "tqdm") if not _has(m)]
    if missing:
        pytest.skip("vLLM's benchmark request code needs %s (not installed)" % ", ".join(missing))
    wheel = _wheel_path()
    if wheel is None:
        pytest.skip("no vllm wheel in %s (set GPUFLEET_WHEELHOUSE)" % WHEELHOUSE)
    target = tmp_path_factory.mktemp("wheel")
    member = "vllm/benchmarks/lib/endpoint_request_func.py"
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(member, str(target))
    return _load("vllm_endpoint_request_func", str(target / member))


def test_vllm_bench_request_functions_measure_the_standin(server, vllm_request_funcs, hf_tokenizer):
    """Run vLLM's own client code (backends vllm/openai and openai-chat) against the stand-in."""
    import aiohttp  # pylint: disable=import-outside-toplevel,import-error

    funcs = vllm_request_funcs
    base = "http://127.0.0.1:%d" % server.port
    prompt = hf_tokenizer.decode(list(range(10, 42)))

    async def run():
        async with aiohttp.ClientSession(timeout=funcs.AIOHTTP_TIMEOUT) as session:
            results = {}
            for backend, endpoint in (("vllm", "/v1/completions"), ("openai-chat", "/v1/chat/completions")):
                request = funcs.RequestFuncInput(prompt=prompt, api_url=base + endpoint, prompt_len=32,
                                                 output_len=16, model="sim-model", ignore_eos=True)
                results[backend] = await funcs.ASYNC_REQUEST_FUNCS[backend](request, session)
            return results

    results = asyncio.run(run())
    for backend, output in results.items():
        assert output.success, (backend, output.error)
        assert output.output_tokens == 16, backend
        assert output.prompt_len == 32, backend
        assert len(output.itl) == 15, backend
        assert output.ttft > 0 and output.latency >= output.ttft, backend
        assert len(hf_tokenizer.encode(output.generated_text, add_special_tokens=False)) == 16, backend


@pytest.mark.benchmark
def test_real_vllm_bench_serve(server, model_dir, tmp_path):
    """The real ``vllm bench serve`` against the stand-in (needs vLLM with its dependencies)."""
    try:
        import vllm  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import,import-error
    except ImportError as exc:
        pytest.skip("vllm is not importable (%s): install vLLM with its dependencies to run "
                    "'vllm bench serve' against the stand-in" % exc)
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm",
               "--base-url", "http://127.0.0.1:%d" % server.port, "--model", model_dir,
               "--served-model-name", "sim-model", "--tokenizer", model_dir, "--dataset-name", "random",
               "--random-input-len", "32", "--random-output-len", "16", "--num-prompts", "8",
               "--max-concurrency", "4", "--temperature", "0", "--disable-tqdm", "--save-result",
               "--result-dir", str(tmp_path), "--result-filename", "result.json"]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, check=False,
                            env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    output = result.stdout.decode(errors="replace")
    assert result.returncode == 0, output[-4000:]
    with open(str(tmp_path / "result.json")) as handle:
        data = json.load(handle)
    assert (data["completed"], data["failed"]) == (8, 0), output[-4000:]
    assert data["total_output_tokens"] == 8 * 16
    assert data["total_input_tokens"] == 8 * 32
    # 4 streams at 200 tok/s would be 800 tok/s: the cap of 300 tok/s holds
    assert data["output_throughput"] < 330


def test_version_and_never_ready_follow_the_venv(tmp_path, monkeypatch):
    """VLLM_STANDIN_VENV: /version reports the vllm installed there (links
    followed); VLLM_STANDIN_NEVER_READY_VENV makes only matching builds hang."""
    site = tmp_path / "envs" / "new" / "lib" / "python3.11" / "site-packages"
    (site / "vllm-0.34.0rc1.dev5+gabc.dist-info").mkdir(parents=True)
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "envs" / "new")
    args, unknown = standin.build_parser().parse_known_intermixed_args(
        ["serve", str(tmp_path), "--served-model-name", "m"])
    monkeypatch.delenv("VLLM_STANDIN_VERSION", raising=False)
    monkeypatch.delenv("VLLM_STANDIN_NEVER_READY", raising=False)
    monkeypatch.setenv("VLLM_STANDIN_VENV", str(link))
    monkeypatch.setenv("VLLM_STANDIN_NEVER_READY_VENV", str(tmp_path / "envs" / "*"))
    cfg = standin.Settings(args, unknown)
    assert cfg.version == "0.34.0rc1.dev5+gabc"
    assert cfg.never_ready
    monkeypatch.setenv("VLLM_STANDIN_NEVER_READY_VENV", str(tmp_path / "old" / "*"))
    assert not standin.Settings(args, unknown).never_ready


def test_faults_file_injects_never_ready_per_venv(tmp_path, monkeypatch):
    site = tmp_path / "envs" / "new" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    faults = tmp_path / "faults"
    faults.write_text("# injected by a test\nnever_ready_venv=%s\n" % (tmp_path / "envs" / "*"))
    args, unknown = standin.build_parser().parse_known_intermixed_args(
        ["serve", str(tmp_path), "--served-model-name", "m"])
    for name in ("VLLM_STANDIN_NEVER_READY", "VLLM_STANDIN_NEVER_READY_VENV"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VLLM_STANDIN_FAULTS_FILE", str(faults))
    monkeypatch.setenv("VLLM_STANDIN_VENV", str(tmp_path / "envs" / "new"))
    assert standin.Settings(args, unknown).never_ready
    monkeypatch.setenv("VLLM_STANDIN_VENV", str(tmp_path / "old"))
    assert not standin.Settings(args, unknown).never_ready
    faults.unlink()
    monkeypatch.setenv("VLLM_STANDIN_VENV", str(tmp_path / "envs" / "new"))
    assert not standin.Settings(args, unknown).never_ready


# ---------------------------------------------------------------------------
# faults for rollback tests: one build fails, the previous one still works


def make_venvs(tmp_path):
    """Two fake vLLM environments envs/new and envs/old (vllm/__init__.py each) and a link current -> new."""
    for name in ("new", "old"):
        package = tmp_path / "envs" / name / "lib" / "python3.11" / "site-packages" / "vllm"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text('__version__ = "0.33.0"\n')
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "envs" / "new")
    return link


def write_faults(tmp_path, text):
    path = tmp_path / "faults"
    path.write_text("# written by a test\n" + text)
    return str(path)


def test_faults_file_venv_faults_hit_only_the_matching_build(tmp_path, monkeypatch):
    link = make_venvs(tmp_path)
    new_glob = str(tmp_path / "envs" / "new*")
    monkeypatch.setenv("VLLM_STANDIN_FAULTS_FILE", write_faults(tmp_path, "".join(
        "%s=%s\n" % (key, new_glob) for key in ("crash_at_start_venv", "no_vram_venv", "tamper_venv", "slow_venv"))
        + "slow_tokens_per_second=7.5\nrelease_seconds=4\n"))
    monkeypatch.setenv("VLLM_STANDIN_TOKENS_PER_SECOND", "82")
    monkeypatch.setenv("VLLM_STANDIN_RELEASE_SECONDS", "1")
    args, unknown = standin.build_parser().parse_known_intermixed_args(
        ["serve", str(tmp_path), "--served-model-name", "m"])
    monkeypatch.setenv("VLLM_STANDIN_VENV", str(link))  # resolved through the link
    cfg = standin.Settings(args, unknown)
    assert (cfg.crash_at_start, cfg.no_vram, cfg.tamper, cfg.tokens_per_second) == (True, True, True, 7.5)
    assert cfg.release_seconds == 4.0
    monkeypatch.setenv("VLLM_STANDIN_VENV", str(tmp_path / "envs" / "old"))
    cfg = standin.Settings(args, unknown)
    assert (cfg.crash_at_start, cfg.no_vram, cfg.tamper, cfg.tokens_per_second) == (False, False, False, 82.0)
    assert cfg.release_seconds == 4.0  # every build
    monkeypatch.delenv("VLLM_STANDIN_VENV")
    cfg = standin.Settings(args, unknown)
    assert (cfg.crash_at_start, cfg.no_vram, cfg.tamper, cfg.tokens_per_second) == (False, False, False, 82.0)


@pytest.mark.parametrize("text,message", [
    ("vram_held_venv=/x/*\n", "no vram_held_seconds"),
    ("vram_held_venv=/x/*\nvram_held_seconds=-2\n", "vram_held_seconds='-2': it must be at least"),
    ("block_link_venv=/x/*\n", "block_link='' is not an absolute path"),
    ("block_link_venv=/x/*\nblock_link=opt/vllm/previous\n", "block_link='opt/vllm/previous' is not"),
    ("block_link_venv=/x/*\nblock_link=/opt/vllm/../etc\n", "block_link='/opt/vllm/../etc' is not"),
    ("block_link_venv=/x/*\nblock_link=/opt/vllm/prev ious\n", "block_link='/opt/vllm/prev ious' is not"),
    ("block_link_venv=/x/*\nblock_link=/opt/vllm/previous/\n", "block_link='/opt/vllm/previous/' is not"),
    ("slow_venv=/x/*\n", "no slow_tokens_per_second"),
    ("slow_venv=/x/*\nslow_tokens_per_second=fast\n", "slow_tokens_per_second='fast': not a decimal number"),
    ("release_seconds=-1\n", "release_seconds='-1': it must be at least"),
    ("release_seconds=nan\n", "release_seconds='nan': it must be at least"),
])
def test_faults_file_bad_values_are_reported(tmp_path, monkeypatch, text, message):
    monkeypatch.setenv("VLLM_STANDIN_FAULTS_FILE", write_faults(tmp_path, text))
    args, unknown = standin.build_parser().parse_known_intermixed_args(["serve", str(tmp_path)])
    with pytest.raises(standin.ConfigError, match=message):
        standin.Settings(args, unknown)


def test_crash_at_start_exits_before_binding_and_the_old_build_starts(spawn, bare_model_dir, tmp_path):
    link = make_venvs(tmp_path)
    faults = write_faults(tmp_path, "crash_at_start_venv=%s\n" % (tmp_path / "envs" / "new"))
    server = spawn(bare_model_dir, env={"VLLM_STANDIN_VENV": str(link), "VLLM_STANDIN_FAULTS_FILE": faults,
                                        "VLLM_STANDIN_LOAD_SECONDS": "5"})
    assert server.proc.wait(15) == 1
    assert "simulated crash at start" in server.output()
    assert "crash_at_start_venv" in server.output()
    assert read_procs(server.state) == {}  # it never claimed VRAM
    assert not os.path.exists(server.state)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", server.port))  # and never held its port

    old = spawn(bare_model_dir, env={"VLLM_STANDIN_VENV": str(tmp_path / "envs" / "old"),
                                     "VLLM_STANDIN_FAULTS_FILE": faults})
    old.wait_ready()
    assert "simulated crash" not in old.output()


def test_no_vram_serves_without_claiming_vram(spawn, bare_model_dir, tmp_path):
    link = make_venvs(tmp_path)
    faults = write_faults(tmp_path, "no_vram_venv=%s/envs/new\n" % tmp_path)
    server = spawn(bare_model_dir, tp=2, env={"VLLM_STANDIN_VENV": str(link), "VLLM_STANDIN_FAULTS_FILE": faults,
                                              "VLLM_STANDIN_VRAM_MIB": "5000"})
    server.wait_ready()
    status, body = server.post("/v1/completions", {"model": "sim-model", "prompt": "hello", "max_tokens": 2})
    assert status == 200 and body["usage"]["completion_tokens"] == 2
    assert read_procs(server.state) == {}
    assert "no_vram_venv" in server.output()

    old = spawn(bare_model_dir, tp=2, env={"VLLM_STANDIN_VENV": str(tmp_path / "envs" / "old"),
                                           "VLLM_STANDIN_FAULTS_FILE": faults, "VLLM_STANDIN_VRAM_MIB": "5000"})
    old.wait_ready()
    assert read_procs(old.state) == {0: {old.pid: 5000}, 1: {old.pid: 5000}}


def test_tamper_appends_one_line_to_the_matching_build_once_ready(spawn, bare_model_dir, tmp_path):
    link = make_venvs(tmp_path)
    faults = write_faults(tmp_path, "tamper_venv=%s/envs/new\n" % tmp_path)
    site = "lib/python3.11/site-packages/vllm/__init__.py"
    new_init, old_init = tmp_path / "envs" / "new" / site, tmp_path / "envs" / "old" / site
    server = spawn(bare_model_dir, env={"VLLM_STANDIN_VENV": str(link), "VLLM_STANDIN_FAULTS_FILE": faults,
                                        "VLLM_STANDIN_LOAD_SECONDS": "1"})
    time.sleep(0.5)
    assert new_init.read_text() == '__version__ = "0.33.0"\n'  # not while loading
    server.wait_ready()
    expected = '__version__ = "0.33.0"\n# debug: tampered by the stand-in fault\n'
    wait_for(lambda: new_init.read_text() == expected, 10, "the tampered line")
    server.terminate()
    assert server.proc.wait(15) == 0
    # a restart of the same build does not append it again; the old build is untouched
    again = spawn(bare_model_dir, env={"VLLM_STANDIN_VENV": str(link), "VLLM_STANDIN_FAULTS_FILE": faults})
    again.wait_ready()
    wait_for(lambda: "Uvicorn running" in again.output(), 10, "the ready log line")
    time.sleep(0.2)
    assert new_init.read_text() == expected
    old = spawn(bare_model_dir, env={"VLLM_STANDIN_VENV": str(tmp_path / "envs" / "old"),
                                     "VLLM_STANDIN_FAULTS_FILE": faults})
    old.wait_ready()
    assert old_init.read_text() == '__version__ = "0.33.0"\n'


def test_slow_build_streams_at_the_slow_rate(spawn, bare_model_dir, tmp_path):
    link = make_venvs(tmp_path)
    faults = write_faults(tmp_path, "slow_venv=%s/envs/new\nslow_tokens_per_second=20\n" % tmp_path)
    env = {"VLLM_STANDIN_FAULTS_FILE": faults, "VLLM_STANDIN_TOKENS_PER_SECOND": "500"}
    slow = spawn(bare_model_dir, env=dict(env, VLLM_STANDIN_VENV=str(link))).wait_ready()
    fast = spawn(bare_model_dir, env=dict(env, VLLM_STANDIN_VENV=str(tmp_path / "envs" / "old"))).wait_ready()
    body = {"model": "sim-model", "prompt": "hello", "max_tokens": 11, "stream": True, "ignore_eos": True}
    spans = {}
    for name, server in (("slow", slow), ("fast", fast)):
        tokens, dummy, done = completion_chunks(server.stream("/v1/completions", body))
        assert len(tokens) == 11 and len(done) == 1
        spans[name] = tokens[-1][0] - tokens[0][0]  # 10 intervals between 11 tokens
    assert 0.45 <= spans["slow"] < 1.5  # 10 / 20 tok/s = 0.5 s
    assert spans["fast"] < 0.2  # 10 / 500 tok/s = 0.02 s


def read_held(state_path):
    """{gpu index: (held_mib, held_until)} from the fake NVML state."""
    state = _load("gpufleet_sim_fakenvml_state", STATE_PY)
    data = state.read_state(state_path)
    return dict((int(key.split(".")[1]), (int(value), int(data.get("gpu.%s.held_until" % key.split(".")[1], 0))))
                for key, value in data.items() if key.startswith("gpu.") and key.endswith(".held_mib"))


def test_vram_held_fault_written_while_serving_keeps_the_memory_after_the_exit(spawn, bare_model_dir, tmp_path):
    link = make_venvs(tmp_path)
    faults = tmp_path / "faults"
    env = {"VLLM_STANDIN_FAULTS_FILE": str(faults), "VLLM_STANDIN_VRAM_MIB": "4000"}
    old = spawn(bare_model_dir, tp=2, env=dict(env, VLLM_STANDIN_VENV=str(tmp_path / "envs" / "old"))).wait_ready()
    new = spawn(bare_model_dir, tp=2, env=dict(env, VLLM_STANDIN_VENV=str(link))).wait_ready()
    # written after both started: the stop reads it again
    write_faults(tmp_path, "vram_held_venv=%s/envs/new\nvram_held_seconds=30\n" % tmp_path)
    new.terminate()
    assert new.proc.wait(15) == 0
    exited = time.time()
    held = read_held(new.state)
    assert sorted(held) == [0, 1] and held[0][0] == held[1][0] == 4000
    assert exited + 28 <= held[0][1] <= exited + 32
    assert read_procs(new.state) == {0: {old.pid: 4000}, 1: {old.pid: 4000}}  # no process of its own listed
    assert "the driver keeps 4000 MiB per GPU for 30.0 s" in new.output()
    # the other build is not hit
    faults.write_text("vram_held_venv=%s/envs/new\nvram_held_seconds=30\n" % tmp_path)
    os.unlink(new.state)
    old.terminate()
    assert old.proc.wait(15) == 0
    assert read_held(old.state) == {} and read_procs(old.state) == {}


def test_block_link_fault_puts_a_directory_where_the_link_was(spawn, bare_model_dir, tmp_path):
    link = make_venvs(tmp_path)
    previous = tmp_path / "previous"
    previous.symlink_to(tmp_path / "envs" / "old")
    faults = tmp_path / "faults"
    env = {"VLLM_STANDIN_FAULTS_FILE": str(faults)}
    old = spawn(bare_model_dir, env=dict(env, VLLM_STANDIN_VENV=str(tmp_path / "envs" / "old"))).wait_ready()
    new = spawn(bare_model_dir, env=dict(env, VLLM_STANDIN_VENV=str(link))).wait_ready()
    write_faults(tmp_path, "block_link_venv=%s/envs/new\nblock_link=%s\n" % (tmp_path, previous))
    old.terminate()
    assert old.proc.wait(15) == 0
    assert previous.is_symlink()  # the other build is not hit
    new.terminate()
    assert new.proc.wait(15) == 0
    assert previous.is_dir() and not previous.is_symlink()
    aside = tmp_path / "previous.standin-blocked"
    assert os.readlink(str(aside)) == str(tmp_path / "envs" / "old")
    assert "is now a real directory" in new.output()


def test_a_bad_stop_fault_written_while_serving_is_logged_and_applies_nothing(spawn, bare_model_dir, tmp_path):
    link = make_venvs(tmp_path)
    faults = tmp_path / "faults"
    server = spawn(bare_model_dir, env={"VLLM_STANDIN_FAULTS_FILE": str(faults), "VLLM_STANDIN_VENV": str(link),
                                        "VLLM_STANDIN_VRAM_MIB": "4000"}).wait_ready()
    write_faults(tmp_path, "vram_held_venv=%s/envs/new\n" % tmp_path)
    server.terminate()
    assert server.proc.wait(15) == 0
    assert "no vram_held_seconds" in server.output()
    assert read_held(server.state) == {} and read_procs(server.state) == {}


def test_release_seconds_fault_delays_the_vram_release(spawn, bare_model_dir, tmp_path):
    faults = write_faults(tmp_path, "release_seconds=2\n")
    server = spawn(bare_model_dir, env={"VLLM_STANDIN_FAULTS_FILE": faults, "VLLM_STANDIN_VRAM_MIB": "4000"})
    server.wait_ready()
    server.terminate()
    stopped = time.monotonic()
    time.sleep(0.5)
    assert read_procs(server.state) == {0: {server.pid: 4000}}  # the environment's 0.2 s would have freed it
    wait_for(lambda: read_procs(server.state) == {0: {server.pid: 2000}}, 5, "half of the VRAM released")
    assert server.proc.wait(15) == 0
    assert time.monotonic() - stopped >= 1.9
    assert read_procs(server.state) == {}
