# SPDX-License-Identifier: GPL-3.0-or-later
"""The balancer role with balancer_type hook and the HTTP-API example (docs/examples/balancer_hook), run by real
Ansible on localhost against a fake balancer API (an http.server thread on loopback that records every call) and the
vLLM stand-in (its /metrics) as the host.

The pre-flight refuses a host the API does not know and a task file that is not there; take_out sets the server to
drain at the API and waits until the stand-in's stream in flight has ended; a drain that times out puts the server
back to ready and fails with the role's sentence; put_back returns once the API shows the server ready and healthy;
check mode sends no PUT. The API wants a bearer token, and the token never reaches the output.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import REPO

STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")
EXAMPLE = os.path.join(REPO, "docs", "examples", "balancer_hook")
WHEELHOUSE = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(
    os.path.expanduser("~"), ".cache", "gpufleet-vllm", "wheelhouse")
TOKEN = "s3cret-t0ken-for-the-test"
TOKENS_PER_SECOND = 20


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeBalancer:
    """A balancer with a small JSON API: GET /backends/B/servers, PUT /backends/B/servers/S {"state": ...}.

    A server set to ready turns healthy only HEALTH_DELAY seconds later (its health check). POST /_mark/NAME
    (the plays' own marks) records NAME among the calls; after /_mark/stream-N, the next PUT to drain starts a
    streaming completion of N tokens on the stand-in before it answers (a request that came in just before the
    server left the rotation; its end time kept in streams under the mark's name), whatever time Ansible took."""

    HEALTH_DELAY = 1.0

    def __init__(self, standin_port):
        self.calls = []
        self.streams = {}
        self.armed = None
        self.lock = threading.Lock()
        self.servers = {"vllm": {"localhost": {"state": "ready", "healthy_at": 0.0},
                                 "other": {"state": "ready", "healthy_at": 0.0}}}
        self.standin_port = standin_port
        balancer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # (quiet)
                pass

            def _answer(self, status, body=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = [p for p in self.path.split("/") if p]
                if parts[:1] == ["api"]:
                    parts = parts[1:]
                with balancer.lock:
                    balancer.calls.append({"method": method, "path": self.path, "time": time.time(),
                                           "auth": self.headers.get("Authorization"),
                                           "body": json.loads(body) if body else None})
                if parts[:1] == ["_mark"]:
                    if parts[1].startswith("stream-"):
                        balancer.armed = parts[1]
                    return self._answer(200, {})
                if self.headers.get("Authorization") != "Bearer " + TOKEN:
                    return self._answer(401, {"error": "unauthorized"})
                if len(parts) < 3 or parts[0] != "backends" or parts[2] != "servers" \
                        or parts[1] not in balancer.servers:
                    return self._answer(404, {"error": "no such backend"})
                servers = balancer.servers[parts[1]]
                if method == "GET" and len(parts) == 3:
                    now = time.time()
                    return self._answer(200, [{"name": name, "state": s["state"], "healthy": now >= s["healthy_at"]}
                                              for name, s in sorted(servers.items())])
                if method == "PUT" and len(parts) == 4:
                    if parts[3] not in servers:
                        return self._answer(404, {"error": "no such server"})
                    state = json.loads(body or b"{}").get("state")
                    if state not in ("drain", "ready"):
                        return self._answer(400, {"error": "state must be drain or ready"})
                    server = servers[parts[3]]
                    if state == "drain" and balancer.armed:
                        balancer.stream(balancer.armed, int(balancer.armed.split("-")[1]))
                        balancer.armed = None
                    if state == "ready" and server["state"] != "ready":
                        server["healthy_at"] = time.time() + balancer.HEALTH_DELAY
                    server["state"] = state
                    return self._answer(200, {"name": parts[3], "state": state})
                return self._answer(405, {"error": "not allowed"})

            def do_GET(self):  # noqa: N802
                self._route("GET")

            def do_PUT(self):  # noqa: N802
                self._route("PUT")

            def do_POST(self):  # noqa: N802
                self._route("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = "http://127.0.0.1:%d/api" % self.httpd.server_address[1]
        self.mark = "http://127.0.0.1:%d/_mark" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stream(self, name, tokens):
        """One streaming completion on the stand-in, read to its end in a thread."""
        import http.client  # pylint: disable=import-outside-toplevel
        record = self.streams[name] = {"started": time.time(), "ended": None}
        answering = threading.Event()

        def run():
            conn = http.client.HTTPConnection("127.0.0.1", self.standin_port, timeout=60)
            try:
                conn.request("POST", "/v1/completions", body=json.dumps({
                    "model": "sim-model", "prompt": "hello world", "max_tokens": tokens, "stream": True}),
                    headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                answering.set()
                response.read()
            except (OSError, http.client.HTTPException):
                pass
            finally:
                answering.set()
                conn.close()
                record["ended"] = time.time()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        # the drain is answered once the stand-in streams (the request runs there), however loaded the machine is
        answering.wait(10)
        record["thread"] = thread
        # (in flight at the stand-in before the play goes on)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", self.standin_port, timeout=5)
            try:
                conn.request("GET", "/load")
                if json.loads(conn.getresponse().read())["server_load"] > 0:
                    return
            finally:
                conn.close()
            time.sleep(0.02)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def world(tmp_path):
    wheels = sorted(f for f in os.listdir(WHEELHOUSE) if f.startswith("prometheus_client-") and f.endswith(".whl")) \
        if os.path.isdir(WHEELHOUSE) else []
    if not wheels:
        pytest.skip("no prometheus_client wheel in %s (set GPUFLEET_WHEELHOUSE)" % WHEELHOUSE)
    # the tools venv the metrics are read with (fleet_tools_venv): prometheus_client from the wheelhouse
    tools = tmp_path / "tools"
    site = tools / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    site.mkdir(parents=True)
    with zipfile.ZipFile(os.path.join(WHEELHOUSE, wheels[-1])) as archive:
        archive.extractall(str(site))
    # the host: the vLLM stand-in, 20 tokens/s per stream
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    port = free_port()
    environ = dict(os.environ, FAKE_NVML_STATE=str(tmp_path / "nvml" / "state"), VLLM_STANDIN_LOAD_SECONDS="0.1",
                   VLLM_STANDIN_TTFT_SECONDS="0.01", VLLM_STANDIN_RELEASE_SECONDS="0", VLLM_STANDIN_VRAM_MIB="0",
                   VLLM_STANDIN_TOKENS_PER_SECOND=str(TOKENS_PER_SECOND))
    environ.pop("CUDA_VISIBLE_DEVICES", None)
    log = open(str(tmp_path / "standin.log"), "w")
    standin = subprocess.Popen([sys.executable, STANDIN, "serve", str(model), "--host", "127.0.0.1", "--port",
                                str(port), "--served-model-name", "sim-model"],
                               env=environ, stdout=log, stderr=subprocess.STDOUT)
    balancer = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert standin.poll() is None and time.monotonic() < deadline, "the stand-in did not start"
                time.sleep(0.05)
        balancer = FakeBalancer(port)
        yield {"tmp": tmp_path, "tools": str(tools), "metrics": "http://127.0.0.1:%d/metrics" % port,
               "balancer": balancer}
    finally:
        if balancer is not None:
            balancer.close()
        standin.kill()
        standin.wait(timeout=30)
        log.close()


SETTINGS = """\
    fleet_tools_venv: {tools}
    balancer_type: hook
    balancer_take_out_tasks: {example}/take_out.yml
    balancer_put_back_tasks: {example}/put_back.yml
    balancer_query_tasks: {example}/query.yml
    balancer_hook_api_url: {url}
    balancer_hook_api_token: {token}
    balancer_hook_poll_interval: 0.2
    balancer_metrics_url: {metrics}
    balancer_drain_interval: 0.2
    balancer_drain_timeout: 30
    balancer_up_timeout: 10
"""

# (run with --check: the role and the example read ansible_check_mode, which only --check sets)
CHECK_PLAYS = """
- name: Check mode
  hosts: localhost
  gather_facts: false
  vars: &settings
{settings}  tasks:
    - name: Mark
      ansible.builtin.uri: {{url: "{mark}/check-mode", method: POST}}
      check_mode: false
    - name: Check, take out, put back
      block:
        - name: Check the balancer
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
        - name: Take the host out
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: take_out}}
        - name: Put the host back
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: put_back}}
        - name: Keep the result
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'check_mode_result': balancer_result}}) }}}}"
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'check_mode': ansible_failed_result.msg}}) }}}}"
    - name: Mark
      ansible.builtin.uri: {{url: "{mark}/check-mode-end", method: POST}}
      check_mode: false
"""

PLAYS = """
- name: The pre-flight, a host the balancer does not know
  hosts: localhost
  gather_facts: false
  vars: &settings
{settings}
  tasks:
    - name: Check
      block:
        - name: Check the balancer
          ansible.builtin.include_role:
            name: gpufleet.vllm.balancer
            tasks_from: check
          vars:
            balancer_server: ghost
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'unknown': ansible_failed_result.msg}}) }}}}"

- name: The pre-flight, a put-back task file that is not there
  hosts: localhost
  gather_facts: false
  vars: *settings
  tasks:
    - name: Check
      block:
        - name: Check the balancer
          ansible.builtin.include_role:
            name: gpufleet.vllm.balancer
            tasks_from: check
          vars:
            balancer_put_back_tasks: {example}/gone.yml
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'missing': ansible_failed_result.msg}}) }}}}"

- name: The pre-flight, a token the balancer API refuses
  hosts: localhost
  gather_facts: false
  vars: *settings
  tasks:
    - name: Check
      block:
        - name: Check the balancer
          ansible.builtin.include_role:
            name: gpufleet.vllm.balancer
            tasks_from: check
          vars:
            balancer_hook_api_token: not-the-token
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'refused': ansible_failed_result.msg}}) }}}}"

- name: Take out with a stream in flight, then put back
  hosts: localhost
  gather_facts: false
  vars: *settings
  tasks:
    - name: Check, take out, put back
      block:
        - name: Check the balancer
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
        - name: Start a stream on the host with the drain
          ansible.builtin.uri: {{url: "{mark}/stream-60", method: POST}}
        - name: Take the host out
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: take_out}}
        - name: Keep the result
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'taken_out': balancer_result}}) }}}}"
        - name: Mark
          ansible.builtin.uri: {{url: "{mark}/put-back", method: POST}}
        - name: Put the host back
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: put_back}}
        - name: Keep the result
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'put_back': balancer_result}}) }}}}"
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'rollout': ansible_failed_result.msg}}) }}}}"

- name: A drain that times out (balancer_drain_on_timeout fail)
  hosts: localhost
  gather_facts: false
  vars: *settings
  tasks:
    - name: Check and take out
      block:
        - name: Check the balancer
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
        - name: Start a long stream on the host with the drain (20 s, far longer than the 1 s drain however loaded the machine)
          ansible.builtin.uri: {{url: "{mark}/stream-400", method: POST}}
        - name: Take the host out
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: take_out}}
          vars:
            balancer_drain_timeout: 1
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'timeout': ansible_failed_result.msg,
                                               'timeout_task': ansible_failed_task.name,
                                               'timeout_result': balancer_result}}) }}}}"
"""

WRITE = """
- name: Write the errors
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Errors
      ansible.builtin.copy:
        content: "{{{{ errors | default({{}}) | to_json }}}}"
        dest: {out}
        mode: "0600"
      check_mode: false
"""


def run_plays(plays, tmp, name, check=False):
    """ansible-playbook on localhost with this checkout's collection: (the errors fact, the output)."""
    out = os.path.join(tmp, name + ".json")
    playbook = os.path.join(tmp, name + ".yml")
    with open(playbook, "w") as handle:
        handle.write("---\n" + plays + WRITE.format(out=json.dumps(out)))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable, "-vvv"] + (["--check"] if check else []) + [playbook],
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    with open(out, encoding="utf-8") as handle:
        return json.load(handle), output


def puts(calls):
    return [(c["path"].rsplit("/", 1)[1], c["body"]["state"]) for c in calls if c["method"] == "PUT"]


def test_the_hook_example_takes_out_drains_and_puts_back(world):
    balancer = world["balancer"]
    settings = SETTINGS.format(tools=json.dumps(world["tools"]), example=EXAMPLE, url=balancer.url, token=TOKEN,
                               metrics=json.dumps(world["metrics"]))
    checked, check_output = run_plays(CHECK_PLAYS.format(settings=settings, mark=balancer.mark), str(world["tmp"]),
                                      "check", check=True)
    errors, output = run_plays(PLAYS.format(settings=settings, mark=balancer.mark, example=EXAMPLE),
                               str(world["tmp"]), "plays")
    calls = balancer.calls
    marks = [c["path"].split("/")[-1] for c in calls if "/_mark/" in c["path"]]
    assert marks == ["check-mode", "check-mode-end", "stream-60", "put-back", "stream-400"]

    def between(first, second):
        paths = [c["path"] for c in calls]
        start = paths.index([p for p in paths if p.endswith("/_mark/" + first)][0])
        end = paths.index([p for p in paths if p.endswith("/_mark/" + second)][0]) if second else len(calls)
        return calls[start + 1:end]

    # the pre-flight: a host the API does not know, and a task file that is not there
    # (the role's sentence names the server, what the backend has, and that nothing was touched)
    assert errors["unknown"].startswith("The balancer's backend vllm has no server named ghost (")
    assert "it has: localhost, other). Nothing was touched. Set balancer_server for th" in errors["unknown"]
    assert errors["missing"].startswith(
        "balancer_type hook needs balancer_take_out_tasks and balancer_put_back_tasks (and, optional, "
        "balancer_query_tasks) as absolute paths of task files on the control node;")
    assert "put-back '%s/gone.yml'" % EXAMPLE in errors["missing"]
    assert errors["refused"] == (
        "The balancer API at %s (asked from localhost) did not list the servers of backend vllm: it refused the "
        "request (HTTP 401): check balancer_hook_api_token. This step took no host out of rotation and stopped none."
        % balancer.url)

    # check mode: the API is read, nothing is sent to it
    assert "check_mode" not in checked, checked.get("check_mode")
    assert checked["check_mode_result"]["taken_out"] is False
    in_check = between("check-mode", "check-mode-end")
    assert in_check and all(c["method"] == "GET" for c in in_check)

    # take_out: drain at the API, then the role waited for the stream in flight
    assert "rollout" not in errors, errors.get("rollout")
    taken = errors["taken_out"]
    stream = balancer.streams["stream-60"]
    assert stream["ended"] is not None
    assert puts(between("stream-60", "put-back")) == [("localhost", "drain")]
    drain_put = [c for c in between("stream-60", "put-back") if c["method"] == "PUT"][0]
    remaining = stream["ended"] - drain_put["time"]
    assert remaining > 1.0, "the stream had ended before the drain began: the test proves nothing"
    assert taken["taken_out"] is True and taken["drained"] is True and taken["forced"] is False
    # (out of rotation from just before the take-out's request, not from when the hook's own checks returned)
    armed = [c for c in calls if c["path"].endswith("/_mark/stream-60")][0]
    assert armed["time"] < taken["out_at"] <= drain_put["time"]
    # (the client notes the stream's end a moment after the server's count drops)
    assert taken["drain_seconds"] >= remaining - 0.2
    assert taken["out_at"] + taken["drain_seconds"] >= stream["ended"] - 0.2
    assert taken["inflight_at_stop"] == 0

    # put_back: ready at the API, and it returned only once the API showed the server healthy
    back = errors["put_back"]
    after = between("put-back", "stream-400")
    assert puts(after) == [("localhost", "ready")]
    ready_put = [c for c in after if c["method"] == "PUT"][0]
    last_read = [c for c in after if c["method"] == "GET"][-1]
    assert last_read["time"] >= ready_put["time"] + FakeBalancer.HEALTH_DELAY - 0.05
    assert back["put_back"] is True
    assert back["out_of_rotation_seconds"] >= taken["drain_seconds"] + FakeBalancer.HEALTH_DELAY - 0.3

    # the drain that timed out: back to ready at the API, the role's sentence, not stopped
    assert errors["timeout_task"] == "Fail when the host did not drain in time"
    assert errors["timeout"].startswith(
        "localhost did not drain within 1 s (balancer_drain_timeout): 1 request(s) running and 0 waiting in vLLM,")
    assert "It was put back in rotation and not stopped." in errors["timeout"]
    assert puts(between("stream-400", None)) == [("localhost", "drain"), ("localhost", "ready")]
    assert balancer.servers["vllm"]["localhost"]["state"] == "ready"
    assert "inflight_at_stop" not in errors["timeout_result"] and errors["timeout_result"]["put_back"] is True

    # every API call carried the token, and the token is in no output
    assert [c["auth"] for c in calls if "/_mark/" not in c["path"] and c["auth"] != "Bearer " + TOKEN] == [
        "Bearer not-the-token"]
    assert TOKEN not in output and TOKEN not in check_output
    # the drain that timed out did not wait for the stream: the host was put back while it still streamed (an
    # order, not a time: the stream runs 400 tokens at 20 tokens/s, however loaded the machine)
    back_put = [c for c in between("stream-400", None) if c["method"] == "PUT"][-1]
    ended = balancer.streams["stream-400"]["ended"]
    assert ended is None or back_put["time"] < ended, "the timed-out drain waited until the stream ended"


FAILING_TAKE_OUT = """\
---
- name: The balancer takes the server out
  ansible.builtin.copy: {{content: "out", dest: {state}, mode: "0600"}}
- name: The hook's own wait fails after the request
  ansible.builtin.fail: {{msg: "the balancer did not confirm in time"}}
"""

PUT_BACK = """\
---
- name: The balancer puts the server back
  ansible.builtin.copy: {{content: "ready", dest: {state}, mode: "0600"}}
"""

# (the rescue's condition is rollback_host.yml's)
FAILED_TAKE_OUT_PLAYS = """
- name: A take-out that fails after its request reached the balancer
  hosts: localhost
  gather_facts: false
  vars:
    balancer_type: hook
    balancer_take_out_tasks: {take_out}
    balancer_put_back_tasks: {put_back}
  tasks:
    - name: Check, take out
      block:
        - name: Check the balancer
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
        - name: Take the host out
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: take_out}}
      rescue:
        - name: Keep the result at the failure
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'at_failure': balancer_result}}) }}}}"
        - name: Put the host back in rotation (as the rollback does)
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: put_back}}
          when:
            - balancer_result.taken_out | default(false) | bool
            - not balancer_result.put_back | default(false) | bool
        - name: Keep the result
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'after_rescue': balancer_result}}) }}}}"
"""


def test_a_take_out_that_fails_after_its_request_is_put_back(tmp_path):
    """A take-out whose request reached the balancer and then failed (a hook's own wait, or HAProxy's answer lost
    after the set) counts as taken out: the rescue puts the host back, not leaves it out of rotation unnoticed."""
    state = tmp_path / "state"
    state.write_text("ready")
    take_out = tmp_path / "take_out.yml"
    take_out.write_text(FAILING_TAKE_OUT.format(state=json.dumps(str(state))))
    put_back = tmp_path / "put_back.yml"
    put_back.write_text(PUT_BACK.format(state=json.dumps(str(state))))
    errors, _output = run_plays(FAILED_TAKE_OUT_PLAYS.format(take_out=take_out, put_back=put_back), str(tmp_path),
                                "failed_take_out")
    assert errors["at_failure"]["taken_out"] is True
    assert isinstance(errors["at_failure"]["out_at"], float)
    assert errors["after_rescue"]["put_back"] is True
    assert state.read_text() == "ready"


TWINS_PLAY = """\
---
- name: The pre-flight of three hosts, two with one server name
  hosts: all
  gather_facts: false
  vars:
    balancer_type: hook
    balancer_take_out_tasks: {hook}
    balancer_put_back_tasks: {hook}
  tasks:
    - name: Check the balancer
      block:
        - name: Check the balancer
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
        - name: Passed
          ansible.builtin.copy: {{content: "passed", dest: "{out}/{{{{ inventory_hostname }}}}", mode: "0600"}}
      rescue:
        - name: Keep the error
          ansible.builtin.copy:
            content: "{{{{ ansible_failed_result.msg }}}}"
            dest: "{out}/{{{{ inventory_hostname }}}}"
            mode: "0600"
"""


def test_two_hosts_with_one_server_name_are_refused_before_anything(tmp_path):
    """Two hosts with the same server name in one backend: the drain of one would take the other's server out (the
    host stopped still in rotation). The pre-flight refuses both, and only them."""
    hook = tmp_path / "hook.yml"
    hook.write_text(PUT_BACK.format(state=json.dumps(str(tmp_path / "state"))))
    (tmp_path / "inventory").write_text("h1 balancer_server=s1\nh2 balancer_server=s1\nh3\n")
    playbook = tmp_path / "twins.yml"
    playbook.write_text(TWINS_PLAY.format(hook=hook, out=tmp_path))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "inventory"), "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(playbook)], env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert (tmp_path / "h1").read_text() == (
        "h1 and h2 have the same server name s1 in backend vllm: draining one would take the other's server out of "
        "rotation. Nothing was touched. Give each host its own balancer_server, then run again.")
    assert (tmp_path / "h2").read_text().startswith("h2 and h1 have the same server name s1 in backend vllm")
    assert (tmp_path / "h3").read_text() == "passed"
    assert not (tmp_path / "state").exists()


PORT_PLAYS = """
- name: Take out a host whose server listens on another port than 8000 (service_port)
  hosts: localhost
  gather_facts: false
  vars:
{settings}
    service_port: {port}
  tasks:
    - name: Check and take out
      block:
        - name: Check the balancer
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
        - name: Take the host out
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: take_out}}
        - name: Keep the result
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'taken_out': balancer_result}}) }}}}"
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'failed': ansible_failed_result.msg}}) }}}}"
"""


def test_the_drain_reads_the_metrics_of_the_service_port(world):
    """Without balancer_metrics_url the drain reads the page of the port the server listens on (service_port), not
    a fixed 8000 (another server's, or nothing)."""
    balancer = world["balancer"]
    settings = "\n".join(line for line in SETTINGS.format(
        tools=json.dumps(world["tools"]), example=EXAMPLE, url=balancer.url, token=TOKEN,
        metrics='""').splitlines() if "balancer_metrics_url" not in line)
    port = int(world["metrics"].rsplit(":", 1)[1].split("/")[0])
    errors, _output = run_plays(PORT_PLAYS.format(settings=settings, port=port), str(world["tmp"]), "port")
    assert "failed" not in errors, errors.get("failed")
    assert errors["taken_out"]["drained"] is True and errors["taken_out"]["inflight_at_stop"] == 0


NONE_PLAYS = """\
- name: The role's entry points without a balancer
  hosts: localhost
  gather_facts: false
  vars:
    balancer_type: none
  tasks:
    - name: Check the balancer
      ansible.builtin.include_role: {name: gpufleet.vllm.balancer, tasks_from: check}
    - name: Take the host out
      ansible.builtin.include_role: {name: gpufleet.vllm.balancer, tasks_from: take_out}
    - name: Keep the result
      ansible.builtin.set_fact:
        errors: "{{ {'result': balancer_result} }}"
"""


def test_without_a_balancer_the_pre_flight_says_so_and_the_take_out_only_notes_it(tmp_path):
    # (a regression: the pre-flight read balancer_known, which only a balancer sets, and failed on every host)
    errors, output = run_plays(NONE_PLAYS, str(tmp_path), "none")
    assert errors["result"] == {"type": "none", "taken_out": False}
    assert "No load balancer configured (balancer_type none)" in output


MAINT_PLAYS = """
- name: Take out a host the operator had set to maintenance at the balancer
  hosts: localhost
  gather_facts: false
  vars:
    balancer_type: hook
    balancer_take_out_tasks: {hook}
    balancer_put_back_tasks: {hook}
    balancer_servers:
      - {{name: localhost, serving: false, admin: maint}}
      - {{name: other, serving: true, admin: ready}}
  tasks:
    - name: Check the balancer
      ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
    - name: Take the host out
      ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: take_out}}
    - name: Keep the result
      ansible.builtin.set_fact:
        errors: "{{{{ {{'result': balancer_result}} }}}}"
"""


def test_a_host_in_maintenance_is_neither_taken_out_nor_drained_and_is_noted_as_out_already(tmp_path):
    """A server the operator had set to maintenance serves nothing: the take-out neither calls the balancer nor
    drains it, and notes it as out of rotation already (was_out), so that it is left as the operator left it."""
    state = tmp_path / "state"
    hook = tmp_path / "hook.yml"
    hook.write_text(PUT_BACK.format(state=json.dumps(str(state))))
    errors, output = run_plays(MAINT_PLAYS.format(hook=hook), str(tmp_path), "maint")
    assert errors["result"] == {"type": "hook", "taken_out": False, "was_out": True}
    assert not state.exists(), "the balancer's hook was called for a host in maintenance"
    assert "was already in maintenance at the balancer (vllm/localhost)" in output


FAILING_QUERY = """\
---
- name: The balancer's API does not answer
  ansible.builtin.fail: {msg: "the balancer's API did not answer"}
"""

FAILED_QUERY_PLAYS = """
- name: A take-out whose read of the backend fails
  hosts: localhost
  gather_facts: false
  vars:
    balancer_type: hook
    balancer_take_out_tasks: {hook}
    balancer_put_back_tasks: {hook}
  tasks:
    - name: Check and take out
      block:
        - name: Check the balancer (no query tasks yet)
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
        - name: Take the host out, the query failing
          ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: take_out}}
          vars:
            balancer_query_tasks: {query}
      rescue:
        - name: Keep what the rescue reads
          ansible.builtin.set_fact:
            errors: "{{{{ {{'result': balancer_result, 'leaving': balancer_leaving, 'msg': ansible_failed_result.msg}} }}}}"
"""


def test_a_take_out_whose_backend_read_fails_is_noted_as_leaving_not_taken_out(tmp_path):
    """The take-out notes the host as leaving, and its result's type, before it reads the backend: a read that
    fails leaves the rescue and the summary a host of this balancer type that was not taken out (not the pre-flight's
    empty notes), and the other hosts of the batch count it as leaving."""
    state = tmp_path / "state"
    hook = tmp_path / "hook.yml"
    hook.write_text(PUT_BACK.format(state=json.dumps(str(state))))
    query = tmp_path / "query.yml"
    query.write_text(FAILING_QUERY)
    errors, _output = run_plays(FAILED_QUERY_PLAYS.format(hook=hook, query=query), str(tmp_path), "failed_query")
    assert errors["msg"] == "the balancer's API did not answer"
    assert errors["result"] == {"type": "hook", "taken_out": False}
    assert errors["leaving"] is True
    assert not state.exists()


OUT_PLAYS = """
- name: A host proven but never seen up by the balancer goes out at once (the rollout's step after a failed put-back)
  hosts: localhost
  gather_facts: false
  vars:
    balancer_type: hook
    balancer_take_out_tasks: {take_out}
    balancer_put_back_tasks: {put_back}
  tasks:
    - name: Check the balancer
      ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: check}}
    - name: Take the host out at once
      ansible.builtin.include_role: {{name: gpufleet.vllm.balancer, tasks_from: out}}
    - name: Keep the result
      ansible.builtin.set_fact:
        errors: "{{{{ {{'result': balancer_result}} }}}}"
"""


def test_the_out_entry_point_runs_the_hooks_take_out_tasks(tmp_path):
    """tasks_from: out with a hook balancer runs balancer_take_out_tasks (hook/out.yml), not the role's own
    take_out entry point, and notes the host as not back in rotation."""
    state = tmp_path / "state"
    state.write_text("ready")
    take_out = tmp_path / "take_out.yml"
    take_out.write_text(PUT_BACK.replace("ready", "out").format(state=json.dumps(str(state))))
    put_back = tmp_path / "put_back.yml"
    put_back.write_text(PUT_BACK.format(state=json.dumps(str(state))))
    errors, _output = run_plays(OUT_PLAYS.format(take_out=take_out, put_back=put_back), str(tmp_path), "out")
    assert state.read_text() == "out"
    assert errors["result"]["put_back"] is False and errors["result"]["out_of_rotation_seconds"] is None
