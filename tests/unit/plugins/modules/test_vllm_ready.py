# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.vllm_ready against the vLLM stand-in server.

The module runs as Ansible runs it on a host (its file executed by Python
with the arguments as JSON); the server is tests/sim/standin/vllm_standin.py
as a subprocess on a free loopback port, with a short load time, or in
never-ready mode.  systemctl/journalctl are replaced by small scripts on
PATH where the unit watch is tested.  The pure functions of
module_utils/vllm_api.py are tested at the end with a fake clock.
"""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import vllm_api

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "vllm_ready.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_module(args, tmp_path, check_mode=False, path_prefix=None):
    """Run the module file like Ansible does; return (exit code, result dict, raw stdout)."""
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    args_file = tmp_path / ("args-%d.json" % time.monotonic_ns())
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    if path_prefix:
        env["PATH"] = str(path_prefix) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stdout


class Standin:
    """One stand-in server subprocess on a free loopback port."""

    def __init__(self, tmp_path, load_seconds="1.0", env=None, served=("sim-model",)):
        self.port = free_port()
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        environ = dict(os.environ)
        environ.update({
            "FAKE_NVML_STATE": str(tmp_path / "nvml" / "state"),
            "VLLM_STANDIN_LOAD_SECONDS": load_seconds,
            "VLLM_STANDIN_TTFT_SECONDS": "0.01",
            "VLLM_STANDIN_RELEASE_SECONDS": "0",
            "VLLM_STANDIN_VRAM_MIB": "0",
            "VLLM_STANDIN_VERSION": "0.99.1",
        })
        environ.pop("CUDA_VISIBLE_DEVICES", None)
        environ.update(env or {})
        command = [sys.executable, STANDIN, "serve", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                   "--served-model-name"] + list(served)
        self.log_path = tmp_path / ("standin-%d.log" % self.port)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(command, env=environ, stdout=self.log, stderr=subprocess.STDOUT)

    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@pytest.fixture
def standin(tmp_path):
    started = []

    def start(**kwargs):
        server = Standin(tmp_path, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def fake_systemd(tmp_path, active="active", sub="running", result="success", restarts=0, journal=(),
                 started_monotonic=0.0):
    """systemctl/journalctl scripts answering like systemd for one unit; returns their directory."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    show = "\n".join(["LoadState=loaded", "ActiveState=%s" % active, "SubState=%s" % sub, "Result=%s" % result,
                      "NRestarts=%d" % restarts, "MainPID=4242", "InvocationID=0123abcd",
                      "ExecMainStartTimestampMonotonic=%d" % int(started_monotonic * 1e6)])
    scripts = {
        "systemctl": "#!%s\nimport sys\nif sys.argv[1] == 'show':\n    print(%r)\n" % (sys.executable, show),
        "journalctl": "#!%s\nimport sys\nopen(%r, 'w').write(' '.join(sys.argv[1:]))\nprint(%r)\n" % (
            sys.executable, str(tmp_path / "journalctl-args"), "\n".join(journal)),
    }
    for name, text in scripts.items():
        path = bindir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bindir


# ---------------------------------------------------------------- the module


def test_waits_through_the_load_and_passes_every_stage(standin, tmp_path):
    server = standin(load_seconds="1.5")
    before = time.time()
    rc, res, dummy = run_module({"port": server.port, "served_model_name": "sim-model", "timeout": 60,
                                 "interval": 0.2}, tmp_path)
    assert rc == 0, res
    # when the wait ended, on the host's clock (the service role's downtime: from the stop's stop_began)
    assert before + 1.5 <= res["ended_at"] <= time.time()
    assert res["ready"] is True and res["changed"] is False and not res.get("failed")
    assert res["url"] == server.url()
    assert res["failed_stage"] is None and res["stopped_reason"] is None
    health = res["stages"]["health"]
    assert health["passed"] is True
    # the port refused connections while the model loaded, and the module kept polling
    assert health["attempts"] >= 2
    assert health["last_error"] == "connection refused"
    assert res["stages"]["models"] == {"passed": True, "elapsed": res["stages"]["models"]["elapsed"],
                                       "attempts": 1, "last_error": None}
    assert res["stages"]["completion"]["passed"] is True
    assert health["elapsed"] <= res["stages"]["models"]["elapsed"] <= res["stages"]["completion"]["elapsed"]
    assert res["elapsed"] >= res["stages"]["completion"]["elapsed"]
    assert res["version"] == "0.99.1"
    assert res["models"] == ["sim-model"] and res["model"] == "sim-model"
    assert res["completion"]["completion_tokens"] == 1
    assert res["completion"]["finish_reason"] == "length"
    assert res["msg"].startswith("vLLM at %s is ready (version 0.99.1)" % server.url())
    assert "unit_state" not in res and "journal" not in res


def test_base_url_and_first_model_without_a_name(standin, tmp_path):
    server = standin(load_seconds="0", served=("first-name", "second-name"))
    rc, res, dummy = run_module({"base_url": server.url() + "/", "timeout": 30, "interval": 0.1}, tmp_path)
    assert rc == 0, res
    assert res["url"] == server.url()
    assert res["models"] == ["first-name", "second-name"]
    assert res["model"] == "first-name"
    assert res["completion"]["completion_tokens"] == 1


def test_completion_can_be_left_out(standin, tmp_path):
    server = standin(load_seconds="0")
    rc, res, dummy = run_module({"port": server.port, "served_model_name": "sim-model", "completion": False,
                                 "timeout": 30, "interval": 0.1}, tmp_path)
    assert rc == 0, res
    assert sorted(res["stages"]) == ["health", "models"]
    assert res["completion"] is None


def test_never_ready_fails_naming_the_health_stage(standin, tmp_path):
    server = standin(env={"VLLM_STANDIN_NEVER_READY": "1"})
    rc, res, dummy = run_module({"port": server.port, "served_model_name": "sim-model", "timeout": 2,
                                 "interval": 0.25}, tmp_path)
    assert rc == 1
    assert res["failed"] is True and res["ready"] is False
    assert res["failed_stage"] == "health"
    assert res["stages"]["health"]["passed"] is False
    assert res["stages"]["health"]["attempts"] >= 2
    assert res["stages"]["health"]["last_error"] == "connection refused"
    assert res["stages"]["models"]["attempts"] == 0 and res["stages"]["completion"]["attempts"] == 0
    msg = res["msg"]
    assert "did not get ready within 2 s" in msg
    assert "the check that never passed: GET /health answers 200" in msg
    assert "last error: connection refused" in msg
    assert "service_load_timeout" in msg


def test_a_wrong_served_name_fails_at_the_models_stage(standin, tmp_path):
    server = standin(load_seconds="0")
    rc, res, dummy = run_module({"port": server.port, "served_model_name": "kimi-k2.5", "timeout": 1,
                                 "interval": 0.2}, tmp_path)
    assert rc == 1
    assert res["failed_stage"] == "models"
    assert res["stages"]["health"]["passed"] is True
    assert res["models"] == ["sim-model"]
    assert "'kimi-k2.5' is not listed (listed: 'sim-model')" in res["stages"]["models"]["last_error"]
    assert "GET /v1/models lists 'kimi-k2.5'" in res["msg"]
    assert "--served-model-name" in res["msg"]


def test_check_mode_probes_once_and_does_not_fail(tmp_path):
    port = free_port()  # nothing listens there
    rc, res, dummy = run_module({"port": port, "served_model_name": "sim-model", "timeout": 600}, tmp_path,
                                check_mode=True)
    assert rc == 0, res
    assert not res.get("failed")
    assert res["ready"] is False and res["failed_stage"] == "health"
    assert res["stages"]["health"]["attempts"] == 1
    assert "checked once, without waiting" in res["msg"] and "Check mode" in res["msg"]


def test_check_mode_reports_a_running_server_ready(standin, tmp_path):
    server = standin(load_seconds="0")
    run_module({"port": server.port, "timeout": 30, "interval": 0.1}, tmp_path)  # wait until it listens
    rc, res, dummy = run_module({"port": server.port, "served_model_name": "sim-model"}, tmp_path,
                                check_mode=True)
    assert rc == 0 and res["ready"] is True
    assert all(stage["attempts"] == 1 for stage in res["stages"].values())


def test_timeout_message_ends_with_the_units_journal(standin, tmp_path):
    server = standin(env={"VLLM_STANDIN_NEVER_READY": "1"})
    lines = ["2025-01-01T10:00:00+0000 host vllm[42]: Loading model weights...",
             "2025-01-01T10:00:05+0000 host vllm[42]: Still loading model weights (5 s)..."]
    bindir = fake_systemd(tmp_path, journal=lines)
    rc, res, dummy = run_module({"port": server.port, "served_model_name": "sim-model", "timeout": 1,
                                 "interval": 0.2, "unit": "vllm-sim.service", "journal_lines": 7}, tmp_path,
                                path_prefix=bindir)
    assert rc == 1
    assert res["journal"] == lines
    assert res["msg"].endswith("Last 2 lines of the journal of vllm-sim.service:\n" + "\n".join(lines))
    assert res["unit_state"]["ActiveState"] == "active" and res["unit_state"]["MainPID"] == 4242
    assert res["stopped_reason"] is None
    assert (tmp_path / "journalctl-args").read_text().split() == [
        "--unit=vllm-sim.service", "--lines=7", "--no-pager", "--output=short-iso", "--quiet"]


def test_ready_after_start_counts_from_the_units_process_start(standin, tmp_path):
    server = standin(load_seconds="0")
    # systemd says the unit's process started 5 s ago (CLOCK_MONOTONIC, as time.monotonic())
    bindir = fake_systemd(tmp_path, started_monotonic=time.monotonic() - 5.0)
    rc, res, dummy = run_module({"port": server.port, "served_model_name": "sim-model", "timeout": 30,
                                 "interval": 0.1, "unit": "vllm-sim.service"}, tmp_path, path_prefix=bindir)
    assert rc == 0, res
    assert res["ready_after_start"] >= 5.0
    assert res["ready_after_start"] > res["elapsed"]
    assert "journal" not in res


def test_a_failed_unit_stops_the_wait_at_once(tmp_path):
    port = free_port()
    bindir = fake_systemd(tmp_path, active="failed", sub="failed", result="exit-code", restarts=3,
                          journal=["host vllm[7]: CUDA out of memory"])
    rc, res, dummy = run_module({"port": port, "timeout": 600, "interval": 0.2, "unit": "vllm-sim.service"},
                                tmp_path, path_prefix=bindir)
    assert rc == 1
    assert res["stages"]["health"]["attempts"] == 1
    assert res["stopped_reason"] == "the unit vllm-sim.service failed (result: exit-code, restarts: 3)"
    assert "did not get ready: the unit vllm-sim.service failed" in res["msg"]
    assert res["msg"].endswith("host vllm[7]: CUDA out of memory")


class _AuthHandler(BaseHTTPRequestHandler):
    """vLLM with --api-key: /health is open, /v1/* needs the bearer token."""

    key = "sk-test-8d1f"

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        if self.path == "/health":
            self._reply(200, {})
        elif self.path == "/version":
            self._reply(200, {"version": "0.33.0"})
        elif self.headers.get("Authorization") != "Bearer " + self.key:
            self._reply(401, {"error": "Unauthorized"})
        else:
            self._reply(200, {"object": "list", "data": [{"id": "guarded", "object": "model"}]})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Authorization") != "Bearer " + self.key:
            self._reply(401, {"error": "Unauthorized"})
        else:
            self._reply(200, {"choices": [{"text": " pong", "finish_reason": "length"}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


@pytest.fixture
def auth_server():
    server = HTTPServer(("127.0.0.1", 0), _AuthHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_api_key_is_sent_and_never_printed(auth_server, tmp_path):
    rc, res, raw = run_module({"host": "127.0.0.1", "port": auth_server, "served_model_name": "guarded",
                               "api_key": _AuthHandler.key, "timeout": 10, "interval": 0.1}, tmp_path)
    assert rc == 0, res
    assert res["completion"]["text"] == " pong"
    assert _AuthHandler.key not in raw

    rc, res, raw = run_module({"port": auth_server, "served_model_name": "guarded", "timeout": 0}, tmp_path)
    assert rc == 1
    assert res["failed_stage"] == "models"
    assert res["stages"]["models"]["last_error"] == "HTTP 401: Unauthorized"


def test_bad_arguments_fail_with_a_sentence(tmp_path):
    rc, res, dummy = run_module({"base_url": "127.0.0.1:8000"}, tmp_path)
    assert rc == 1 and "is not an http:// or https:// URL" in res["msg"]
    rc, res, dummy = run_module({"base_url": "http://127.0.0.1:8000", "port": 8000}, tmp_path)
    assert rc == 1 and "mutually exclusive" in res["msg"]
    rc, res, dummy = run_module({"port": 8000, "interval": 0}, tmp_path)
    assert rc == 1 and "interval=0.0 must be more than 0 seconds" in res["msg"]


# ------------------------------------------------------- module_utils, pure


class FakeClock(object):
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedClient(object):
    """Answers of a server that loads for ``load_polls`` health polls, each taking ``cost`` seconds."""

    base_url = "http://127.0.0.1:8000"
    timeout = 30.0

    def __init__(self, clock, load_polls=0, names=("m",), cost=0.5):
        self.clock = clock
        self.load_polls = load_polls
        self.names = list(names)
        self.cost = cost
        self.timeouts = []

    def health(self, timeout=None):
        self.timeouts.append(timeout)
        self.clock.now += self.cost
        if self.load_polls > 0:
            self.load_polls -= 1
            raise vllm_api.VllmApiError("connection refused", kind="refused")
        return 200

    def version(self, timeout=None):
        return "0.33.0"

    def models(self, timeout=None):
        return list(self.names)

    def complete(self, model, prompt="ping", max_tokens=1, timeout=None):
        assert (prompt, max_tokens) == ("ping", 1)
        return {"text": " x", "finish_reason": "length", "completion_tokens": 1, "usage": {}}


def test_wait_ready_polls_every_interval_until_health_answers():
    clock = FakeClock()
    client = ScriptedClient(clock, load_polls=3)
    res = vllm_api.wait_ready(client, "m", timeout=60, interval=5, clock=clock.clock, sleep=clock.sleep)
    assert res["ready"] is True
    assert clock.sleeps == [5, 5, 5]
    assert res["stages"]["health"]["attempts"] == 4
    assert res["stages"]["health"]["elapsed"] == 17.0  # 4 polls of 0.5 s plus 3 sleeps of 5 s
    assert res["elapsed"] == 17.0
    assert "GET /health answers 200 after 17.0 s" in res["msg"]


def test_wait_ready_never_sleeps_past_the_deadline():
    clock = FakeClock()
    client = ScriptedClient(clock, load_polls=10 ** 6, cost=0.0)
    res = vllm_api.wait_ready(client, "m", timeout=12, interval=5, clock=clock.clock, sleep=clock.sleep)
    assert res["ready"] is False and res["failed_stage"] == "health"
    assert clock.sleeps == [5, 5, 2]
    assert res["stages"]["health"]["attempts"] == 4
    assert res["elapsed"] == 12.0
    # the request timeout is capped by the time left, and never below 1 s
    assert client.timeouts == [12.0, 7.0, 2.0, 1.0]


def test_wait_ready_stops_when_the_watch_gives_a_reason():
    clock = FakeClock()
    client = ScriptedClient(clock, load_polls=10 ** 6)
    answers = iter([None, None, "the unit x failed"])
    res = vllm_api.wait_ready(client, "m", timeout=600, interval=1, watch=lambda: next(answers),
                              clock=clock.clock, sleep=clock.sleep)
    assert res["ready"] is False
    assert res["stopped_reason"] == "the unit x failed"
    assert res["stages"]["health"]["attempts"] == 3


@pytest.mark.parametrize("kwargs, url", [
    ({}, "http://127.0.0.1:8000"),
    ({"host": "10.0.0.5", "port": 8001}, "http://10.0.0.5:8001"),
    ({"host": "::1"}, "http://[::1]:8000"),
    ({"base_url": "https://vllm.example.org/"}, "https://vllm.example.org"),
])
def test_make_base_url(kwargs, url):
    assert vllm_api.make_base_url(**kwargs) == url


def test_make_base_url_refuses_nonsense():
    with pytest.raises(ValueError):
        vllm_api.make_base_url(base_url="ftp://x")
    with pytest.raises(ValueError):
        vllm_api.make_base_url(port=70000)


def test_only_loopback_bypasses_proxies():
    assert vllm_api.is_loopback("http://127.0.0.1:8000")
    assert vllm_api.is_loopback("http://localhost:8000")
    assert vllm_api.is_loopback("http://[::1]:8000")
    assert not vllm_api.is_loopback("http://10.1.2.3:8000")
    assert not vllm_api.is_loopback("http://vllm.example.org")
