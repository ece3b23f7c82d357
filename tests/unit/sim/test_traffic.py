# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/sim/traffic.py: counts every request, and every failure by its reason.

Against the vLLM stand-in (a subprocess on a free loopback port with a
temporary fake NVML state) and against small in-test servers that answer
500, bad data, short streams or nothing at all.
"""

from __future__ import absolute_import, division, print_function

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")
TRAFFIC = os.path.join(REPO, "tests", "sim", "traffic.py")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


traffic = _load("gpufleet_sim_traffic", TRAFFIC)

SUMMARY = re.compile(r"^traffic: (\d+) requests, (\d+) failed.*, p50 [0-9.]+ s, p99 [0-9.]+ s "
                     r"\(time to first token p50 [0-9.]+ s\)$")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


@pytest.fixture
def standin(tmp_path):
    """Start a stand-in serving 'sim' (100 tokens/s per stream); returns (url, process)."""
    started = []

    def start(**env):
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
        port = free_port()
        environ = dict(os.environ, FAKE_NVML_STATE=str(tmp_path / "nvml" / "state"), VLLM_STANDIN_LOAD_SECONDS="0.1",
                       VLLM_STANDIN_TTFT_SECONDS="0.02", VLLM_STANDIN_RELEASE_SECONDS="0.1",
                       VLLM_STANDIN_TOKENS_PER_SECOND="100", VLLM_STANDIN_FAULTS_FILE=str(tmp_path / "no-faults"))
        environ.update(env)
        log = open(str(tmp_path / ("standin-%d.log" % port)), "w")
        proc = subprocess.Popen([sys.executable, STANDIN, "serve", str(model), "--host", "127.0.0.1", "--port",
                                 str(port), "--served-model-name", "sim"], env=environ, stdout=log,
                                stderr=subprocess.STDOUT)
        started.append((proc, log))
        url = "http://127.0.0.1:%d" % port

        def ready():
            assert proc.poll() is None, "the stand-in exited with %s" % proc.returncode
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(ready, 20, "the stand-in to listen")
        return url, proc

    yield start
    for proc, log in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


class FakeHandler(BaseHTTPRequestHandler):
    """Answers by the request's model name: ok, 500, notjson, short, nousage, hang."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode, tokens = body["model"], body["max_tokens"]
        if mode == "500":
            data = b'{"error": "boom"}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if mode == "hang":
            time.sleep(3)
            return
        lines = ['{"choices": [{"index": 0, "text": " w"}]}'] * tokens
        usage = tokens
        if mode == "short":
            lines = lines[:-1]
            usage = tokens - 1
        if mode == "notjson":
            lines[1] = "{not json"
        if mode == "nousage":
            usage = tokens + 5
        lines.append(json.dumps({"choices": [], "usage": {"completion_tokens": usage}}))
        lines.append("[DONE]")
        data = "".join("data: %s\n\n" % line for line in lines).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def run_cli(args, timeout=60):
    return subprocess.run([sys.executable, TRAFFIC] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, check=False, universal_newlines=True)


# ---------------------------------------------------------------------------


def test_all_ok_against_a_running_standin_and_the_json_shape(standin, tmp_path):
    url, dummy = standin()
    out = tmp_path / "result.json"
    result = run_cli(["--url", url, "--model", "sim", "--rate", "10", "--max-tokens", "8", "--duration", "2",
                      "--out", str(out)])
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert 10 <= data["sent"] <= 21  # 10/s for 2 s (fewer when the machine stalls: no burst after)
    assert (data["ok"], data["failed"]) == (data["sent"], 0)
    assert data["by_reason"] == {"connect": 0, "status": 0, "truncated": 0, "timeout": 0, "bad_data": 0}
    assert data["not_sent"] == {"concurrency_cap": 0}
    assert data["failures"] == []
    assert data["stopped_by"] == "duration"
    assert (data["url"], data["rate"], data["max_tokens"]) == (url, 10.0, 8)
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", data["started"]) and data["ended"] >= data["started"]
    # 8 tokens at 100/s after a 0.02 s first token: about 0.1 s each
    # (at least the stand-in's pace; the upper bound only says the figures are seconds, a busy machine stalls)
    assert 0.05 < data["latency_s"]["p50"] <= data["latency_s"]["p99"] <= data["latency_s"]["max"] < 60
    # (each request's first token comes before its end: the same order holds for the median and the maximum,
    # whatever the machine does; a p99 against a p50 would need a quiet machine)
    assert 0 < data["ttft_s"]["p50"] <= data["ttft_s"]["p99"] <= data["latency_s"]["max"]
    assert data["ttft_s"]["p50"] <= data["latency_s"]["p50"]
    assert len(data["requests"]) == data["sent"]
    assert all(r["status"] == 200 and r["tokens"] == 8 and r["reason"] is None for r in data["requests"])
    times = [r["t"] for r in data["requests"]]
    assert times == sorted(times) and times[-1] < 2.1
    line = result.stdout.strip()
    match = SUMMARY.match(line)
    assert match, line
    assert match.groups() == (str(data["sent"]), "0")
    assert not [f for f in os.listdir(str(tmp_path)) if f.startswith(".traffic.")]  # no temporary file left


def test_standin_stopped_mid_run_counts_truncated_and_connect_failures(standin):
    url, proc = standin()
    # 50 tokens at 100/s: each stream runs 0.5 s, so some are cut when the server stops
    run = traffic.Traffic(url, "sim", rate=10, max_tokens=50, duration=3, timeout=10, drain_seconds=10)
    holder = {}
    thread = threading.Thread(target=lambda: holder.update(result=run.run()))
    thread.start()
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    thread.join(30)
    result = holder["result"]
    assert result["ok"] >= 3
    assert result["by_reason"]["truncated"] >= 1
    assert result["by_reason"]["connect"] >= 5  # refused for the rest of the run
    assert result["ok"] + result["failed"] == result["sent"]
    assert result["failed"] == sum(result["by_reason"].values())
    truncated = [f for f in result["failures"] if f["reason"] == "truncated"]
    assert re.search(r"after \d+ of 50 tokens", truncated[0]["detail"])
    assert all(f["t"] >= 0.5 for f in result["failures"])
    line = traffic.summary_line(result)
    assert "%d failed (" % result["failed"] in line and "truncated %d" % result["by_reason"]["truncated"] in line


def test_stop_file_stops_it_and_the_pid_file_lives_while_it_runs(standin, tmp_path):
    url, dummy = standin()
    out, stop, pid_file = tmp_path / "r.json", tmp_path / "stop", tmp_path / "traffic.pid"
    proc = subprocess.Popen([sys.executable, TRAFFIC, "--url", url, "--model", "sim", "--rate", "5", "--max-tokens",
                             "4", "--duration", "120", "--stop-file", str(stop), "--pid-file", str(pid_file),
                             "--out", str(out)], stdout=subprocess.PIPE, universal_newlines=True)
    try:
        wait_for(pid_file.exists, 10, "the pid file")
        assert pid_file.read_text().strip() == str(proc.pid)
        time.sleep(1.0)
        assert not out.exists()
        stop.write_text("")
        started = time.monotonic()
        assert proc.wait(15) == 0
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    data = json.loads(out.read_text())
    assert data["stopped_by"] == "stop-file"
    assert data["sent"] >= 3 and data["failed"] == 0
    assert not pid_file.exists()
    assert SUMMARY.match(proc.stdout.read().strip())


def test_sigterm_stops_it_and_waits_for_requests_in_flight(standin, tmp_path):
    url, dummy = standin()
    out = tmp_path / "r.json"
    # 100 tokens at 100/s: each request runs a second, longer than the time to stop
    proc = subprocess.Popen([sys.executable, TRAFFIC, "--url", url, "--model", "sim", "--rate", "5", "--max-tokens",
                             "100", "--duration", "120", "--out", str(out)], stdout=subprocess.PIPE)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    data = json.loads(out.read_text())
    assert data["stopped_by"] == "signal %d" % signal.SIGTERM
    assert data["sent"] >= 5 and data["ok"] == data["sent"]  # the last ones finished, none cut


def test_refuses_a_target_that_is_not_loopback(tmp_path):
    out = tmp_path / "r.json"
    for url in ("http://10.1.2.3:8000", "http://example.invalid:80", "https://127.0.0.1:8000",
                "http://user:pw@127.0.0.1:8000", "ftp://127.0.0.1/"):
        result = run_cli(["--url", url, "--model", "m", "--out", str(out)], timeout=30)
        assert result.returncode == 2, url
        assert result.stderr.startswith("traffic: "), result.stderr
        assert not out.exists()
    result = run_cli(["--url", "http://127.0.0.1:1", "--model", " ", "--out", str(out)], timeout=30)
    assert result.returncode == 2 and "--model must be" in result.stderr
    assert "only loopback addresses" in run_cli(["--url", "http://10.1.2.3:8000", "--model", "m",
                                                 "--out", str(out)]).stderr
    for url in ("http://127.0.0.1:8000", "http://127.9.8.7:1", "http://localhost:80", "http://[::1]:8000/base/"):
        traffic.check_target(url)
    assert traffic.check_target("http://10.1.2.3:8000", allow=["10.1.2.3"]) == ("10.1.2.3", 8000, "")
    with pytest.raises(traffic.UsageError):
        traffic.check_target("http://10.1.2.30:8000", allow=["10.1.2.3"])  # exactly, not a prefix


@pytest.mark.parametrize("option,value", [("--rate", "0"), ("--rate", "fast"), ("--max-tokens", "-1"),
                                          ("--concurrency", "1.5"), ("--duration", "nan"), ("--timeout", "0")])
def test_refuses_bad_numbers(tmp_path, option, value):
    result = run_cli(["--url", "http://127.0.0.1:1", "--model", "m", "--out", str(tmp_path / "r.json"),
                      option, value], timeout=30)
    assert result.returncode == 2
    assert option in result.stderr


def test_server_answering_500_counts_status_failures(fake_server):
    result = traffic.Traffic(fake_server, "500", rate=20, max_tokens=4, duration=0.5).run()
    assert result["sent"] >= 5
    assert (result["ok"], result["failed"]) == (0, result["sent"])
    assert result["by_reason"]["status"] == result["sent"]
    assert result["failures"][0]["detail"].startswith("HTTP 500")
    assert all(r["status"] == 500 for r in result["requests"])
    assert result["latency_s"] == {"p50": None, "p99": None, "max": None}
    assert "p50 -, p99 -" in traffic.summary_line(result)


@pytest.mark.parametrize("mode,reason,detail", [
    ("ok", None, ""),
    ("short", "truncated", "[DONE] after 3 of 4 tokens"),
    ("notjson", "bad_data", "not JSON"),
    ("nousage", "bad_data", "usage.completion_tokens is 9"),
])
def test_stream_checks(fake_server, mode, reason, detail):
    host, port, path = traffic.check_target(fake_server)
    record = traffic.one_request(host, port, path, mode, "hi", 4, 5)
    assert record["reason"] == reason
    assert detail in record["detail"]
    assert record["status"] == 200


def test_refused_connection_is_a_connect_failure():
    record = traffic.one_request("127.0.0.1", free_port(), "", "m", "hi", 4, 5)
    assert record["reason"] == "connect" and record["status"] is None


def test_silent_server_is_a_timeout_and_the_cap_counts_skipped_starts(fake_server):
    # each request hangs 3 s; 0.5 s socket timeout; one in flight at a time at 10 starts/s
    result = traffic.Traffic(fake_server, "hang", rate=10, max_tokens=4, concurrency=1, duration=1.2,
                             timeout=0.5, drain_seconds=5).run()
    assert result["by_reason"]["timeout"] == result["sent"] >= 2
    assert result["not_sent"]["concurrency_cap"] >= 5
    assert result["sent"] + result["not_sent"]["concurrency_cap"] >= 11
    assert "not sent (concurrency cap 1 reached)" in traffic.summary_line(result)


def test_requests_still_running_after_the_drain_wait_are_counted(fake_server):
    result = traffic.Traffic(fake_server, "hang", rate=5, max_tokens=4, duration=0.3, timeout=30,
                             drain_seconds=0.5).run()
    assert result["sent"] >= 1
    assert result["by_reason"]["timeout"] == result["sent"]
    assert "still running" in result["failures"][0]["detail"]


def test_percentiles_are_nearest_rank():
    values = list(range(100, 0, -1))
    assert (traffic.percentile(values, 0.5), traffic.percentile(values, 0.99)) == (50, 99)
    assert traffic.percentile([0.3], 0.99) == 0.3
    assert traffic.percentile([], 0.5) is None
