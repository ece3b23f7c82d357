# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The test world's load balancer (scripts/balancer.sh, tests/sim/haproxy/haproxy.cfg), on loopback.

A stand-in ``podman`` on PATH gives each "container" a loopback address
(127.0.0.2 to .4) where a small HTTP server answers on port 8000 as vLLM
would; the real HAProxy runs the shipped config from a directory of the test.
"""

from __future__ import absolute_import, division, print_function

import os
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from haproxyworld import HAPROXY, free_port
from helpers import REPO

from ansible_collections.gpufleet.vllm.plugins.module_utils import haproxy

SCRIPT = os.path.join(REPO, "scripts", "balancer.sh")
ADDRS = {"sim-a": "127.0.0.2", "sim-b": "127.0.0.3", "sim-c": "127.0.0.4"}


# seconds a server (by address) takes to answer /health: a host on a busy machine
HEALTH_DELAYS = {}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/health":
            time.sleep(HEALTH_DELAYS.get(self.server.server_address[0], 0))
        body = ("%s\n" % self.server.server_address[0]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def vllms():
    servers = []
    try:
        for addr in ADDRS.values():
            try:
                server = ThreadingHTTPServer((addr, 8000), Handler)
            except OSError as exc:
                pytest.skip("port 8000 on %s is taken (%s)" % (addr, exc))
            servers.append(server)
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        yield
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def env(tmp_path):
    if not os.path.exists(HAPROXY):
        pytest.skip("no HAProxy at %s (scripts/bootstrap.sh installs the haproxy package)" % HAPROXY)
    stub = tmp_path / "bin"
    stub.mkdir()
    cases = "".join("    %s) echo '%s ' ;;\n" % (name, addr) for name, addr in ADDRS.items())
    (stub / "podman").write_text('#!/bin/bash\n# podman inspect -f FORMAT NAME\ncase "${@: -1}" in\n%s'
                                 '    *) exit 125 ;;\nesac\n' % cases)
    (stub / "podman").chmod(0o755)
    lb_dir = tmp_path / "lb"
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_LB_")}
    return dict(base, PATH="%s:%s" % (stub, os.environ["PATH"]), GPUFLEET_CACHE=str(tmp_path / "cache"),
                GPUFLEET_LB_DIR=str(lb_dir), GPUFLEET_LB_PORT=str(free_port()), GPUFLEET_INDEX_ADDR="127.0.0.1")


def script(env, *args, timeout=60):
    return subprocess.run([SCRIPT] + list(args), env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def pid_of(env):
    with open(os.path.join(env["GPUFLEET_LB_DIR"], "haproxy.pid")) as handle:
        return int(handle.read().split()[0])


def test_up_status_down(env, vllms):
    up = script(env, "up", "sim-a", "sim-b", "sim-c")
    try:
        assert up.returncode == 0, up.stderr
        sock = os.path.join(env["GPUFLEET_LB_DIR"], "admin.sock")
        assert "runtime API socket %s" % sock in up.stderr
        pid = pid_of(env)
        deadline = time.monotonic() + 10
        while True:
            servers = haproxy.backend_servers(sock, "vllm")
            if all(s["status"] == "UP" for s in servers) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(s["name"], s["address"], s["port"], s["status"]) for s in servers] == [
            ("sim-a", "127.0.0.2", 8000, "UP"), ("sim-b", "127.0.0.3", 8000, "UP"), ("sim-c", "127.0.0.4", 8000, "UP")]
        # the frontend on loopback only, balancing over the three
        url = "http://127.0.0.1:%s/" % env["GPUFLEET_LB_PORT"]
        seen = set()
        for _attempt in range(6):
            with urllib.request.urlopen(url, timeout=5) as reply:
                seen.add(reply.read().decode().strip())
        assert seen == set(ADDRS.values())
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.5", int(env["GPUFLEET_LB_PORT"])), timeout=2).close()
        status = script(env, "status")
        assert status.returncode == 0, status.stderr
        assert "sim-b" in status.stdout and "127.0.0.3:8000" in status.stdout and "3 of 3 serving" in status.stdout
        # up again: restarted with the names given
        again = script(env, "up", "sim-a", "sim-b", "sim-c")
        assert again.returncode == 0 and "restarting" in again.stderr
        assert not os.path.exists("/proc/%d" % pid) or pid != pid_of(env)
        pid = pid_of(env)
    finally:
        down = script(env, "down")
    assert down.returncode == 0 and "stopped" in down.stderr, down.stderr
    assert not os.path.exists("/proc/%d" % pid)
    assert not os.path.exists(os.path.join(env["GPUFLEET_LB_DIR"], "admin.sock"))
    assert "not running" in script(env, "down").stderr


@pytest.mark.parametrize("args,words", [
    (["up", "sim-a", "sim-b"], "usage: balancer.sh up NAME1 NAME2 NAME3"),
    (["up", "sim-a", "sim-b", "sim-x"], "no address for sim-x on podman's network"),
    (["up", "sim-a", "sim-b", "a;b"], "is not a HAProxy server name"),
    (["status"], "the balancer is not running"),
    (["sideways"], "usage: balancer.sh up NAME1 NAME2 NAME3 | down | status"),
])
def test_refusals(env, args, words):
    proc = script(env, *args)
    started = os.path.exists(os.path.join(env["GPUFLEET_LB_DIR"], "haproxy.pid"))
    if started:
        script(env, "down")
    assert proc.returncode != 0 and words in proc.stderr, proc.stderr
    assert not started


def test_bad_port(env):
    proc = script(dict(env, GPUFLEET_LB_PORT="80x"), "status")
    assert proc.returncode != 0 and "is not a TCP port" in proc.stderr


def test_up_refuses_a_port_another_program_listens_on(env):
    # (another clone's HAProxy, say: HAProxy's SO_REUSEPORT would let a second one start on the same port, and the
    # kernel would split the clients between a stale balancer and this one)
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        proc = script(dict(env, GPUFLEET_LB_PORT=str(taken.getsockname()[1])), "up", "sim-a", "sim-b", "sim-c")
    finally:
        taken.close()
    started = os.path.exists(os.path.join(env["GPUFLEET_LB_DIR"], "haproxy.pid"))
    if started:
        script(env, "down")
    assert proc.returncode != 0 and "is taken by another program" in proc.stderr, proc.stderr
    assert not started


def test_down_leaves_another_clones_balancer_and_its_files_alone(env, tmp_path):
    # (the pid file and the socket are in the shared cache: a HAProxy started from another clone, with its own
    # config, is named there; down from this clone must not remove the socket that balancer's drains use)
    lb_dir = env["GPUFLEET_LB_DIR"]
    os.makedirs(lb_dir)
    other = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", "/usr/sbin/haproxy", "-f",
                              "/elsewhere/tests/sim/haproxy/haproxy.cfg"])
    try:
        with open(os.path.join(lb_dir, "haproxy.pid"), "w") as handle:
            handle.write("%d\n" % other.pid)
        open(os.path.join(lb_dir, "admin.sock"), "w").close()
        proc = script(env, "down")
        assert proc.returncode == 0 and "runs another clone's config: left alone" in proc.stderr, proc.stderr
        assert os.path.exists(os.path.join(lb_dir, "haproxy.pid")) and os.path.exists(os.path.join(lb_dir, "admin.sock"))
        assert other.poll() is None
    finally:
        other.kill()
        other.wait(timeout=10)


def test_a_host_that_answers_its_health_check_late_stays_in_rotation(env, vllms):
    """A busy machine delays a host's /health by seconds: HAProxy must not mark it down for that (its peers would
    be down while another host is drained for its restart, and HAProxy would answer 503 for want of a server)."""
    HEALTH_DELAYS["127.0.0.3"] = 3.0
    up = script(env, "up", "sim-a", "sim-b", "sim-c")
    try:
        assert up.returncode == 0, up.stderr
        sock = os.path.join(env["GPUFLEET_LB_DIR"], "admin.sock")
        seen = []
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            late = [s for s in haproxy.backend_servers(sock, "vllm") if s["name"] == "sim-b"][0]
            seen.append(late["status"])
            assert late["serving"], "sim-b, answering /health in 3 s, was taken out of rotation: %s" % seen
            time.sleep(0.5)
    finally:
        HEALTH_DELAYS.clear()
        script(env, "down")
