# SPDX-License-Identifier: GPL-3.0-or-later
"""A real HAProxy for the unit tests (imported as ``haproxyworld``).

:func:`start` writes a config in a temporary directory (runtime API socket
there, frontend on a free loopback port) whose backend ``vllm`` holds one
server per given back end: small ``http.server`` threads on loopback that
answer ``/health`` with 200 (or 503: a server HAProxy's check sees DOWN) and
hold ``/slow`` open until the test lets it go (a request in flight).
Everything is bounded, and :meth:`World.stop` (a finalizer) kills HAProxy.
"""

import os
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

HAPROXY = os.environ.get("GPUFLEET_HAPROXY", "/usr/sbin/haproxy")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Backend(object):
    """One HTTP server thread: /health answers self.health; /slow waits for self.release (at most 30 s)."""

    def __init__(self, health=200):
        self.health = health
        self.release = threading.Event()
        self.slow_started = threading.Event()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path == "/slow":
                    backend.slow_started.set()
                    backend.release.wait(30)
                    code = 200
                else:
                    code = backend.health if self.path == "/health" else 200
                body = b"ok\n"
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class World(object):
    def __init__(self, tmp_path, backends, level="admin", inter_ms=200):
        if not os.path.exists(HAPROXY):
            pytest.skip("no HAProxy at %s (scripts/bootstrap.sh installs the haproxy package)" % HAPROXY)
        self.dir = str(tmp_path)
        self.socket = os.path.join(self.dir, "admin.sock")
        self.port = free_port()
        self.backends = backends
        lines = [
            "global",
            "    stats socket %s mode 600 level %s" % (self.socket, level),
            "    pidfile %s" % os.path.join(self.dir, "haproxy.pid"),
            "defaults",
            "    mode http",
            "    timeout connect 2s",
            "    timeout client 30s",
            "    timeout server 30s",
            "frontend fe",
            "    bind 127.0.0.1:%d" % self.port,
            "    default_backend vllm",
            "backend vllm",
            "    balance leastconn",
            "    option httpchk GET /health",
            "    default-server check inter %dms fall 2 rise 2" % inter_ms,
        ]
        for name, backend in backends.items():
            lines.append("    server %s 127.0.0.1:%d" % (name, backend.port))
        lines += ["backend other", "    server spare 127.0.0.1:9"]
        self.config = os.path.join(self.dir, "haproxy.cfg")
        with open(self.config, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", self.config], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        # (the socket file appears at its bind, before HAProxy listens on it: a connect in between is refused, so
        # the start waits for an answer, not for the file; generous, as a busy machine is slow to start it)
        deadline = time.monotonic() + 60
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.poll() is not None else ""
                self.stop()
                raise AssertionError("HAProxy did not start: %s" % err)
            time.sleep(0.02)

    def _answers(self):
        """Whether the runtime API socket accepts a connection and answers."""
        if not os.path.exists(self.socket):
            return False
        try:
            return "Name: HAProxy" in self.raw("show info")
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stderr.close()
        for backend in self.backends.values():
            backend.stop()

    def raw(self, line):
        """One API command, without the module's code (the test's own view)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(self.socket)
            sock.sendall(line.encode() + b"\n")
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return data.decode()
                data += chunk

    def admin_bits(self, server):
        for line in self.raw("show servers state vllm").splitlines():
            words = line.split()
            if len(words) > 6 and words[3] == server:
                return int(words[6])
        raise AssertionError("no server %s" % server)

    def status(self, server):
        lines = self.raw("show stat").splitlines()
        header = lines[0][2:].split(",")
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == "vllm" and row.get("svname") == server:
                return row["status"]
        raise AssertionError("no server %s" % server)

    def wait_status(self, server, status, limit=60):
        deadline = time.monotonic() + limit
        while self.status(server) != status:
            assert time.monotonic() < deadline, "%s stayed %s" % (server, self.status(server))
            time.sleep(0.05)

    def slow_request(self, backend):
        """A request in flight through HAProxy to backend (a leastconn pick is forced by the server's weight)."""
        result = {}

        def go():
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as conn:
                conn.sendall(b"GET /slow HTTP/1.0\r\nHost: x\r\n\r\n")
                result["answer"] = conn.recv(1024)

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        assert backend.slow_started.wait(10), "the slow request did not reach the back end"
        return thread, result
