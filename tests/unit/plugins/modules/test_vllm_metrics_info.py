# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.vllm_metrics_info against the vLLM stand-in server and against hostile answers.

The module runs as Ansible runs it (its file executed by Python with the
arguments as JSON).  prometheus_client comes from a venv-like directory made
from the wheelhouse's wheel, named in tools_venvs, while the interpreter's
own import of it is blocked: the loading from the tools venv is what runs.
"""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import hostlib, vllm_metrics
from helpers import has_socket, run_module_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "vllm_metrics_info.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")
WHEELHOUSE = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(
    os.path.expanduser("~"), ".cache", "gpufleet-vllm", "wheelhouse")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def tools_venv(tmp_path_factory):
    """A venv layout whose site-packages holds prometheus_client from the wheelhouse's wheel."""
    wheels = sorted(f for f in os.listdir(WHEELHOUSE) if f.startswith("prometheus_client-") and f.endswith(".whl")) \
        if os.path.isdir(WHEELHOUSE) else []
    if not wheels:
        pytest.skip("no prometheus_client wheel in %s (set GPUFLEET_WHEELHOUSE)" % WHEELHOUSE)
    venv = tmp_path_factory.mktemp("tools")
    site = venv / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    site.mkdir(parents=True)
    with zipfile.ZipFile(os.path.join(WHEELHOUSE, wheels[-1])) as archive:
        archive.extractall(str(site))
    return str(venv)


@pytest.fixture(scope="module")
def blocked(tmp_path_factory):
    """A directory put first on PYTHONPATH whose prometheus_client cannot be imported."""
    path = tmp_path_factory.mktemp("blocked")
    (path / "prometheus_client").mkdir()
    (path / "prometheus_client" / "__init__.py").write_text("raise ImportError('blocked for the test')\n")
    return str(path)


@pytest.fixture(scope="module")
def parser(tools_venv):
    """prometheus_client's text parser, loaded as the module loads it."""
    return vllm_metrics.load_parser(hostlib.site_dirs_of([tools_venv]))[0]


def run_module(args, tmp_path, blocked_dir, check_mode=False, when_connected=None):
    """Run the module file like Ansible does, with prometheus_client blocked in the interpreter. WHEN_CONNECTED: a
    function called 1 s after the module opened its first connection (however long it took to start)."""
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    args_file = tmp_path / ("args-%d.json" % time.monotonic_ns())
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([blocked_dir, COLLECTIONS]))
    return run_module_file(MODULE, str(args_file), env, when=when_connected, ready=has_socket, after=1.0)


class Standin:
    """One stand-in server on a free loopback port: 20 tokens/s per stream."""

    def __init__(self, tmp_path, args=()):
        self.port = free_port()
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
        environ = dict(os.environ)
        environ.update({"FAKE_NVML_STATE": str(tmp_path / "nvml" / "state"), "VLLM_STANDIN_LOAD_SECONDS": "0.1",
                        "VLLM_STANDIN_TTFT_SECONDS": "0.01", "VLLM_STANDIN_RELEASE_SECONDS": "0",
                        "VLLM_STANDIN_VRAM_MIB": "0", "VLLM_STANDIN_TOKENS_PER_SECOND": "20"})
        environ.pop("CUDA_VISIBLE_DEVICES", None)
        self.log = open(tmp_path / ("standin-%d.log" % self.port), "w")
        self.proc = subprocess.Popen([sys.executable, STANDIN, "serve", str(model), "--host", "127.0.0.1", "--port",
                                      str(self.port), "--served-model-name", "sim-model"] + list(args),
                                     env=environ, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = "http://127.0.0.1:%d/metrics" % self.port
        self.threads = []
        deadline = time.monotonic() + 30
        while self._get("/health") is None:
            assert self.proc.poll() is None and time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.05)

    def _get(self, path):
        import http.client  # pylint: disable=import-outside-toplevel
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            return body if resp.status == 200 else None
        except OSError:
            return None
        finally:
            conn.close()

    def load(self):
        return json.loads(self._get("/load"))["server_load"]

    def stream(self, tokens):
        """Start one streaming completion of TOKENS tokens in a thread (read to the end)."""
        import http.client  # pylint: disable=import-outside-toplevel

        def run():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                conn.request("POST", "/v1/completions", body=json.dumps({
                    "model": "sim-model", "prompt": "hello world", "max_tokens": tokens, "stream": True}),
                    headers={"Content-Type": "application/json"})
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                pass  # (a test that stops the server cuts the stream)
            finally:
                conn.close()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def close(self):
        for thread in self.threads:
            thread.join(60)
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def standin(tmp_path):
    servers = []

    def start(args=()):
        servers.append(Standin(tmp_path, args))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def wait_load(server, count, timeout=20):
    deadline = time.monotonic() + timeout
    while server.load() != count:
        assert time.monotonic() < deadline, "the stand-in never had %d requests in flight" % count
        time.sleep(0.05)


# ---------------------------------------------------------------------------
# against the stand-in


def test_idle_server_in_check_mode(standin, tools_venv, blocked, tmp_path):
    server = standin()
    rc, result = run_module({"url": server.url, "tools_venvs": [tools_venv]}, tmp_path, blocked, check_mode=True)
    assert rc == 0, result
    assert (result["running"], result["waiting"], result["idle"], result["changed"]) == (0, 0, True, False)
    assert result["check_mode"] is True and result["polls"] == 1
    assert result["models"] == ["sim-model"]
    assert result["library"].startswith(tools_venv)
    assert set(result["request_success"]["by_finished_reason"]) == {"stop", "length", "abort", "error", "repetition"}
    assert "vllm:time_to_first_token_seconds" in result["histograms"]
    assert "vllm:inter_token_latency_seconds" in result["histograms"]
    assert "vllm:request_queue_time_seconds" in result["histograms"]
    assert "is idle: 0 request(s) running and 0 waiting" in result["msg"]


def test_busy_then_idle_after_the_streams_finish(standin, tools_venv, blocked, tmp_path):
    server = standin(["--max-num-seqs", "2"])
    for dummy in range(3):
        server.stream(30)  # 1.5 s each at 20 tokens/s; the third waits for a slot
    wait_load(server, 3)
    rc, busy = run_module({"url": server.url, "tools_venvs": [tools_venv]}, tmp_path, blocked)
    assert rc == 0, busy
    assert (busy["running"], busy["waiting"], busy["idle"]) == (2, 1, False)
    assert busy["by_engine"] == [{"model_name": "sim-model", "engine": "0", "running": 2, "waiting": 1}]
    rc, idle = run_module({"url": server.url, "tools_venvs": [tools_venv], "wait_idle": True, "timeout": 60,
                           "interval": 0.2}, tmp_path, blocked)
    assert rc == 0, idle
    assert (idle["running"], idle["waiting"], idle["idle"], idle["timed_out"]) == (0, 0, True, False)
    assert idle["polls"] >= 2 and idle["waited"] > 0.5
    assert idle["request_success"]["by_finished_reason"]["length"] == 3
    assert idle["request_success"]["total"] == 3
    assert idle["generation_tokens_total"] == 90
    assert idle["histograms"]["vllm:e2e_request_latency_seconds"]["count"] == 3
    assert idle["histograms"]["vllm:request_queue_time_seconds"]["sum"] > 0.5  # the third one queued


def test_drain_timeout_fails_or_continues(standin, tools_venv, blocked, tmp_path):
    server = standin()
    server.stream(400)  # 20 s: it outlasts both runs below, however long they take to start
    wait_load(server, 1)
    rc, failed = run_module({"url": server.url, "tools_venvs": [tools_venv], "wait_idle": True, "timeout": 1,
                             "interval": 0.2}, tmp_path, blocked)
    assert rc == 1
    assert failed["error_kind"] == "drain_timeout"
    assert "still had work in flight after" in failed["msg"] and "1 request(s) running and 0 waiting" in failed["msg"]
    assert failed["polls"] >= 2 and 1 <= failed["waited"] < 3
    rc, went_on = run_module({"url": server.url, "tools_venvs": [tools_venv], "wait_idle": True, "timeout": 1,
                              "interval": 0.2, "on_timeout": "continue"}, tmp_path, blocked)
    assert rc == 0, went_on
    assert (went_on["idle"], went_on["timed_out"], went_on["running"]) == (False, True, 1)
    assert "going on anyway (on_timeout=continue)" in json.dumps(went_on["warnings"])  # plain or structured


def test_server_gone_while_waiting_fails_at_once(standin, tools_venv, blocked, tmp_path):
    server = standin()
    server.stream(400)  # 20 s
    wait_load(server, 1)
    started = time.monotonic()
    # killed 1 s after the module's first read began: it has answered some reads by then
    rc, result = run_module({"url": server.url, "tools_venvs": [tools_venv], "wait_idle": True, "timeout": 60,
                             "interval": 0.2}, tmp_path, blocked, when_connected=server.proc.kill)
    assert rc == 1 and result["error_kind"] in ("refused", "reset"), result
    assert time.monotonic() - started < 15  # not the drain timeout
    assert result["polls"] >= 2 and "It had answered %d read(s) before" % result["polls"] in result["msg"]


def test_model_filter_on_the_standin(standin, tools_venv, blocked, tmp_path):
    server = standin()
    rc, result = run_module({"url": server.url, "tools_venvs": [tools_venv], "model_name": "other"},
                            tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == "no_model"
    assert "'sim-model'" in result["msg"]


# ---------------------------------------------------------------------------
# hostile and broken answers


class Answer(BaseHTTPRequestHandler):
    status = 200
    body = b""

    def do_GET(self):  # noqa: N802
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@pytest.fixture
def answering():
    servers = []

    def start(body, status=200):
        server = HTTPServer(("127.0.0.1", 0), Answer)
        server.body = body if isinstance(body, bytes) else body.encode("utf-8")
        server.status = status
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return "http://127.0.0.1:%d/metrics" % server.server_address[1]
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# Two models, two engines each, written as prometheus_client writes them. A regex reading
# 'name{...model_name="a"...} value' lines would count the HELP text's example, stop the label value
# at its escaped quote or its comma and brace, and miss labels in another order.
TWO_MODELS = r'''# HELP vllm:num_requests_running Number of requests; e.g. vllm:num_requests_running{model_name="a"} 99
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="a"} 2.0
vllm:num_requests_running{engine="1",model_name="a"} 3.0
vllm:num_requests_running{model_name="b \"x\", {y}",engine="0"} 7.0
vllm:num_requests_running{engine="1",model_name="b \"x\", {y}"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="a"} 0.0
vllm:num_requests_waiting{engine="1",model_name="a"} 1.0
vllm:num_requests_waiting{engine="0",model_name="b \"x\", {y}"} 4.0
vllm:num_requests_waiting{engine="1",model_name="b \"x\", {y}"} 0.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="a"} 5.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="a"} 6.0
vllm:request_success_total{engine="1",finished_reason="abort",model_name="a"} 1.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="b \"x\", {y}"} 100.0
'''


def test_two_models_summed_over_engines(answering, tools_venv, blocked, tmp_path):
    url = answering(TWO_MODELS)
    rc, a = run_module({"url": url, "tools_venvs": [tools_venv], "model_name": "a"}, tmp_path, blocked)
    assert rc == 0, a
    assert (a["running"], a["waiting"], a["idle"]) == (5, 1, False)
    assert a["request_success"] == {"total": 12, "by_finished_reason": {"abort": 1, "stop": 11}}
    assert a["models"] == ["a", 'b "x", {y}']
    rc, b = run_module({"url": url, "tools_venvs": [tools_venv], "model_name": 'b "x", {y}'}, tmp_path, blocked)
    assert rc == 0, b
    assert (b["running"], b["waiting"]) == (7, 4)
    rc, every = run_module({"url": url, "tools_venvs": [tools_venv]}, tmp_path, blocked)
    assert (every["running"], every["waiting"]) == (12, 5)


def test_a_family_in_two_parts_counts_whole(answering, tools_venv, blocked, tmp_path):
    body = TWO_MODELS + 'vllm:num_requests_running{engine="2",model_name="a"} 10.0\n'
    rc, result = run_module({"url": answering(body), "tools_venvs": [tools_venv], "model_name": "a"},
                            tmp_path, blocked)
    assert rc == 0, result
    assert result["running"] == 15 and len(result["by_engine"]) == 3


def test_a_gauge_that_is_no_count_proves_nothing(answering, tools_venv, blocked, tmp_path):
    body = TWO_MODELS.replace('vllm:num_requests_waiting{engine="0",model_name="a"} 0.0',
                              'vllm:num_requests_waiting{engine="0",model_name="a"} NaN')
    rc, result = run_module({"url": answering(body), "tools_venvs": [tools_venv]}, tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == "invalid", result


GAUGES_WITHOUT_SAMPLES = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
"""
RUNNING_AS_A_COUNTER = """# TYPE vllm:num_requests_running counter
vllm:num_requests_running_total{engine="0",model_name="a"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="a"} 0.0
"""
ONE_GAUGE_WITHOUT_A_SAMPLE = """# TYPE vllm:num_requests_running gauge
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="a"} 0.0
"""


@pytest.mark.parametrize("body, model_name, reason", [
    (GAUGES_WITHOUT_SAMPLES, None, "vllm:num_requests_running is declared but has no sample; "
                                   "vllm:num_requests_waiting is declared but has no sample"),
    (GAUGES_WITHOUT_SAMPLES, "a", "vllm:num_requests_running is declared but has no sample for model_name 'a'"),
    (RUNNING_AS_A_COUNTER, None, "vllm:num_requests_running is served as a counter, not a gauge"),
    (RUNNING_AS_A_COUNTER, "a", "vllm:num_requests_running is served as a counter, not a gauge"),
    (ONE_GAUGE_WITHOUT_A_SAMPLE, None, "vllm:num_requests_running is declared but has no sample"),
])
def test_gauges_without_a_sample_of_each_prove_nothing(parser, body, model_name, reason):
    result = vllm_metrics.summarize(vllm_metrics.parse(body, parser, "u"), "u", model_name=model_name)
    assert result["idle"] is False and result["state"] == "unknown", result
    assert result["unknown_reason"].startswith(reason), result["unknown_reason"]
    assert result["running"] is None


def test_a_sample_of_each_gauge_at_zero_is_idle_and_one_above_is_busy(parser):
    body = ONE_GAUGE_WITHOUT_A_SAMPLE + 'vllm:num_requests_running{engine="0",model_name="a"} 0.0\n'
    result = vllm_metrics.summarize(vllm_metrics.parse(body, parser, "u"), "u")
    assert (result["idle"], result["state"], result["unknown_reason"]) == (True, "idle", None)
    busy = RUNNING_AS_A_COUNTER.replace('waiting{engine="0",model_name="a"} 0.0', 'waiting{engine="0",model_name="a"} 2')
    result = vllm_metrics.summarize(vllm_metrics.parse(busy, parser, "u"), "u")
    assert (result["idle"], result["state"], result["waiting"]) == (False, "busy", 2)


def test_the_drain_gate_does_not_pass_gauges_without_samples(answering, tools_venv, blocked, tmp_path):
    url = answering(GAUGES_WITHOUT_SAMPLES)
    rc, failed = run_module({"url": url, "tools_venvs": [tools_venv], "wait_idle": True, "timeout": 1,
                             "interval": 0.2}, tmp_path, blocked)
    assert rc == 1 and failed["error_kind"] == "drain_timeout", failed
    assert "was not proven idle after" in failed["msg"] and "declared but has no sample" in failed["msg"]
    assert failed["polls"] >= 2 and failed["state"] == "unknown"
    rc, once = run_module({"url": url, "tools_venvs": [tools_venv]}, tmp_path, blocked)
    assert rc == 0 and once["idle"] is False and once["state"] == "unknown", once
    assert "is unknown: nothing proves it idle" in once["msg"]


@pytest.mark.parametrize("body, kind", [
    ("<html><body>It works!</body></html>\n", "not_prometheus"),
    ('{"object": "error", "message": "Not Found"}\n', "not_prometheus"),
    ("", "no_gauges"),
    ("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.0\n", "no_gauges"),
    (b"\xff\xfe garbage", "not_prometheus"),
])
def test_not_vllm_metrics(answering, tools_venv, blocked, tmp_path, body, kind):
    url = answering(body)
    rc, result = run_module({"url": url, "tools_venvs": [tools_venv]}, tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == kind, result
    assert url in result["msg"] and "Nothing was changed" in result["msg"]


def test_huge_body_is_not_read(answering, tools_venv, blocked, tmp_path):
    url = answering(b"vllm:num_requests_running 0\n" * 100000)
    rc, result = run_module({"url": url, "tools_venvs": [tools_venv], "max_body_bytes": 65536}, tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == "too_large"
    assert "65536" in result["msg"]


def test_too_many_samples(answering, tools_venv, blocked, tmp_path):
    body = "".join("vllm:x%d 1\n" % i for i in range(300)) + TWO_MODELS
    rc, result = run_module({"url": answering(body), "tools_venvs": [tools_venv], "max_families": 100},
                            tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == "too_many"


def test_http_500(answering, tools_venv, blocked, tmp_path):
    url = answering("Internal Server Error", status=500)
    rc, result = run_module({"url": url, "tools_venvs": [tools_venv]}, tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == "http"
    assert "HTTP 500" in result["msg"] and url in result["msg"]


def test_connection_refused(tools_venv, blocked, tmp_path):
    url = "http://127.0.0.1:%d/metrics" % free_port()
    rc, result = run_module({"url": url, "tools_venvs": [tools_venv], "wait_idle": True, "timeout": 5},
                            tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == "refused"
    assert "connection refused" in result["msg"] and url in result["msg"]


def test_prometheus_client_missing_says_what_to_install(blocked, tmp_path):
    rc, result = run_module({"url": "http://127.0.0.1:1/metrics"}, tmp_path, blocked)
    assert rc == 1 and result["error_kind"] == "library"
    assert "prometheus_client" in result["msg"] and "host_tools_packages" in result["msg"]


@pytest.mark.parametrize("args, words", [
    ({"url": "http://vllm:s3cret@127.0.0.1:8000/metrics"}, "user name or password"),
    ({"url": "ftp://127.0.0.1/metrics"}, "not an http:// or https://"),
    ({"url": "http://127.0.0.1:8000/metrics?x=1"}, "query"),
    ({"timeout": 3601}, "timeout must be 0 to 3600"),
    ({"interval": 0}, "interval must be"),
    ({"max_body_bytes": 10}, "max_body_bytes must be"),
])
def test_invalid_options(blocked, tmp_path, args, words):
    rc, result = run_module(args, tmp_path, blocked)
    assert rc == 1 and words in result["msg"], result
    assert "s3cret" not in json.dumps(result)


# ---------------------------------------------------------------------------
# module_utils


def test_stand_in_page_parses_as_vllm_writes_it(standin, parser):
    server = standin()
    families = dict((f.name, f) for f in parser(vllm_metrics.fetch(server.url)))
    assert families["vllm:request_success"].type == "counter"
    assert families["vllm:e2e_request_latency_seconds"].type == "histogram"
    assert families["vllm:num_requests_running"].samples[0].labels == {"engine": "0", "model_name": "sim-model"}


def test_stand_in_families_are_vllms(standin, parser):
    """Every vllm: family the stand-in serves is one vLLM 0.33.0 defines (vllm/v1/metrics/loggers.py in the
    wheel), with vLLM's label names, and prometheus_client reads each with its type."""
    wheels = sorted(f for f in os.listdir(WHEELHOUSE) if f.startswith("vllm-") and f.endswith(".whl"))
    if not wheels:
        pytest.skip("no vllm wheel in %s" % WHEELHOUSE)
    with zipfile.ZipFile(os.path.join(WHEELHOUSE, wheels[-1])) as archive:
        source = archive.read("vllm/v1/metrics/loggers.py").decode("utf-8")
    defined = set(re.findall(r'name="(vllm:[a-z0-9_:]+)"', source))
    server = standin()
    families = list(parser(vllm_metrics.fetch(server.url)))
    extra_labels = {"vllm:request_success": {"finished_reason"}, "vllm:num_requests_waiting_by_reason": {"reason"}}
    served = set()
    for family in families:
        assert family.type != "unknown", family.name
        name = family.name[:-len("_created")] if family.name.endswith("_created") else family.name
        if name == "vllm:standin_info":
            continue
        assert name in defined, "%s is no metric of vLLM 0.33.0" % name
        served.add(name)
        for sample in family.samples:
            labels = set(sample.labels) - {"le"}
            assert labels == {"model_name", "engine"} | extra_labels.get(name, set()), (sample.name, labels)
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:request_success",
            "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
            "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
            "vllm:request_queue_time_seconds", "vllm:prompt_tokens", "vllm:generation_tokens"} <= served


def test_wait_idle_is_bounded_by_its_timeout():
    now = [0.0]
    reads = []

    def read():
        reads.append(now[0])
        return {"idle": False, "running": 1, "waiting": 0}

    def sleep(seconds):
        now[0] += seconds

    result = vllm_metrics.wait_idle(read, 10, 3, clock=lambda: now[0], sleep=sleep)
    assert reads == [0.0, 3.0, 6.0, 9.0, 10.0]
    assert (result["timed_out"], result["polls"], result["waited"]) == (True, 5, 10.0)


def test_hostlib_loads_a_package_from_a_site_dir_only(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "gpufleet_probe_pkg").mkdir(parents=True)
    (site / "gpufleet_probe_pkg" / "__init__.py").write_text("from .sub import VALUE\n")
    (site / "gpufleet_probe_pkg" / "sub.py").write_text("VALUE = 42\n")
    (site / "gpufleet_probe_hook.pth").write_text("import os; os.environ['GPUFLEET_PTH_RAN'] = '1'\n")
    monkeypatch.delenv("GPUFLEET_PTH_RAN", raising=False)
    try:
        module, where = hostlib.load("gpufleet_probe_pkg", [str(site)])
        assert module.VALUE == 42 and where == str(site / "gpufleet_probe_pkg")
        assert str(site) not in sys.path and "GPUFLEET_PTH_RAN" not in os.environ
        with pytest.raises(hostlib.LibraryMissing):
            hostlib.load("gpufleet_probe_absent", [str(site)])
    finally:
        for name in [n for n in sys.modules if n.startswith("gpufleet_probe_pkg")]:
            del sys.modules[name]


def test_host_tools_pins_the_wheelhouse_version():
    """The tools venv gets the prometheus-client the fleet's mirror holds (vLLM's own dependency pin)."""
    with open(os.path.join(REPO, "roles", "host_tools", "defaults", "main.yml"), encoding="utf-8") as handle:
        pins = [line.strip()[2:] for line in handle if line.strip().startswith("- prometheus-client==")]
    with open(os.path.join(REPO, "requirements", "wheelhouse-bench.txt"), encoding="utf-8") as handle:
        mirror = [line.strip() for line in handle if line.startswith("prometheus-client==")]
    assert pins and pins == mirror, (pins, mirror)
