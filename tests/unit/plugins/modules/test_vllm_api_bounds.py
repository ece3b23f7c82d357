# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bounds of the vLLM HTTP client (module_utils/vllm_api.py) against hostile servers.

Every server here is a real http.server on 127.0.0.1 in a thread of the
test: one that trickles a byte every 0.2 s, one that sends an endless body,
one that redirects to a second server on another port which records the
headers it gets.  Each server stops by itself after a few seconds, so a
client without the bounds makes the test fail instead of hanging it.
"""

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import vllm_api

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
SERVER_LIFETIME = 6.0  # a server gives up after this long, so an unbounded client shows as slow, not hung
TOKEN = "s3cret-token"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        self.server.seen.append((self.path, dict(self.headers.items())))
        self.server.behaviour(self)

    do_POST = do_GET  # noqa: N815


class Server(object):
    """A threaded HTTP server on 127.0.0.1 whose every GET/POST calls behaviour(handler)."""

    def __init__(self, behaviour):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.behaviour = behaviour
        self.httpd.seen = []
        self.httpd.sent = 0
        self.httpd.done = threading.Event()
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.httpd.server_address[1]

    @property
    def seen(self):
        return self.httpd.seen

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(behaviour):
        server = Server(behaviour)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.close()


def trickle_headers(handler):
    """A status line and headers, one byte every 0.2 s, for at most SERVER_LIFETIME seconds."""
    data = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Slow-%d: %s\r\n" % (i, b"y" * 40) for i in range(99)) + b"\r\n"
    ends = time.monotonic() + SERVER_LIFETIME
    try:
        for byte in data:
            if time.monotonic() > ends:
                break
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.2)
    except OSError:
        pass
    handler.close_connection = True


def trickle_body(handler):
    """Quick headers, then a JSON body one byte every 0.2 s, for at most SERVER_LIFETIME seconds."""
    body = b'{"data": [{"id": "m"}]}' + b" " * 1000
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.flush()
    ends = time.monotonic() + SERVER_LIFETIME
    try:
        for byte in body:
            if time.monotonic() > ends:
                break
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.2)
    except OSError:
        pass
    handler.close_connection = True


@pytest.mark.parametrize("behaviour", [trickle_headers, trickle_body], ids=["headers", "body"])
def test_a_trickling_server_is_cut_off_at_the_request_deadline(serve, behaviour):
    server = serve(behaviour)
    client = vllm_api.VllmClient(server.url, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(vllm_api.VllmApiError) as exc:
        client.models()
    elapsed = time.monotonic() - started
    assert elapsed < 1.0 + 2.0, "the request took %.1f s, its timeout is 1 s" % elapsed
    assert exc.value.kind == "timeout"
    assert "no complete answer within 1.0 s" in str(exc.value)


def test_one_check_keeps_to_the_timeout_against_a_trickling_server(serve):
    """Check mode (once) against a trickling server: the timeout bounds it, not request_timeout per stage."""
    server = serve(trickle_headers)
    client = vllm_api.VllmClient(server.url, timeout=20.0)
    started = time.monotonic()
    result = vllm_api.wait_ready(client, served_model_name="m", timeout=2, once=True)
    elapsed = time.monotonic() - started
    assert result["ready"] is False and result["failed_stage"] == "health"
    assert elapsed < 2 + 2.0, "one check took %.1f s, its timeout is 2 s" % elapsed


def test_a_tls_handshake_that_trickles_is_cut_off_at_the_request_deadline():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def trickle_tls():
        conn, dummy = listener.accept()
        with conn:
            conn.recv(65536)  # the ClientHello
            ends = time.monotonic() + SERVER_LIFETIME
            try:
                conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KiB, then one byte at a time
                while time.monotonic() < ends:
                    conn.sendall(b"\x00")
                    time.sleep(0.2)
            except OSError:
                pass
    thread = threading.Thread(target=trickle_tls, daemon=True)
    thread.start()
    try:
        client = vllm_api.VllmClient("https://127.0.0.1:%d" % port, timeout=1.0, validate_certs=False)
        started = time.monotonic()
        with pytest.raises(vllm_api.VllmApiError) as exc:
            client.health()
        elapsed = time.monotonic() - started
        assert elapsed < 1.0 + 2.0, "the TLS handshake took %.1f s, the request's timeout is 1 s" % elapsed
        assert exc.value.kind == "timeout"
    finally:
        listener.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make a test certificate")
def test_https_answers_are_read_as_before(serve, tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"), "-days", "1",
                    "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=30)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    server = serve(answer_models)
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    url = server.url.replace("http:", "https:")
    assert vllm_api.VllmClient(url, timeout=3.0, validate_certs=False).models() == ["m"]
    with pytest.raises(vllm_api.VllmApiError) as exc:
        vllm_api.VllmClient(url, timeout=3.0).models()
    assert str(exc.value).startswith("TLS error") and "CERTIFICATE_VERIFY_FAILED" in str(exc.value)


def endless_body(handler):
    """A 200 answer without a length whose body never ends (until 64 MiB or SERVER_LIFETIME); counts what it sent."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    chunk = b'{"data": [' + b" " * 65526
    ends = time.monotonic() + SERVER_LIFETIME
    try:
        while handler.server.sent < 64 * 1024 * 1024 and time.monotonic() < ends:
            handler.wfile.write(chunk)
            handler.server.sent += len(chunk)
    except OSError:
        pass
    handler.close_connection = True
    handler.server.done.set()


def test_an_endless_body_is_read_up_to_the_cap_only(serve):
    server = serve(endless_body)
    client = vllm_api.VllmClient(server.url, timeout=5.0)  # the default cap, 4 MiB
    with pytest.raises(vllm_api.VllmApiError) as exc:
        client.models()
    assert exc.value.kind == "too_large"
    assert "larger than the cap of 4194304 bytes (max_response_bytes)" in str(exc.value)
    # the client hung up: the server stopped long before 64 MiB (what is in flight are socket buffers)
    assert server.httpd.done.wait(5)
    assert server.httpd.sent < 32 * 1024 * 1024


def test_an_announced_huge_body_is_not_read_at_all(serve):
    def huge(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(3 * 1024 ** 3))
        handler.end_headers()
        handler.wfile.write(b'{"data": []' + b" " * 1024)
        handler.close_connection = True
    server = serve(huge)
    with pytest.raises(vllm_api.VllmApiError) as exc:
        vllm_api.VllmClient(server.url, timeout=2.0).models()
    assert "announces 3221225472 bytes, more than the cap of 4194304 bytes" in str(exc.value)


def test_a_huge_error_body_is_capped_too(serve):
    def error(handler):
        handler.send_response(503)
        handler.end_headers()
        chunk = b"x" * 65536
        ends = time.monotonic() + SERVER_LIFETIME
        try:
            while handler.server.sent < 64 * 1024 * 1024 and time.monotonic() < ends:
                handler.wfile.write(chunk)
                handler.server.sent += len(chunk)
        except OSError:
            pass
        handler.close_connection = True
        handler.server.done.set()
    server = serve(error)
    started = time.monotonic()
    with pytest.raises(vllm_api.VllmApiError) as exc:
        vllm_api.VllmClient(server.url, timeout=5.0).health()
    assert time.monotonic() - started < 3
    assert str(exc.value).startswith("HTTP 503: xxx") and len(str(exc.value)) < 400
    assert server.httpd.done.wait(5)
    assert server.httpd.sent < 32 * 1024 * 1024


def redirect_to(target):
    def behaviour(handler):
        handler._send(302, b"", headers=[("Location", target + handler.path)])
    return behaviour


def answer_models(handler):
    handler._send(200, json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())


def test_a_redirect_to_another_origin_is_refused_and_gets_no_token(serve):
    other = serve(answer_models)
    first = serve(redirect_to(other.url))
    client = vllm_api.VllmClient(first.url, api_key=TOKEN, timeout=3.0)
    with pytest.raises(vllm_api.VllmApiError) as exc:
        client.models()
    assert exc.value.kind == "redirect" and exc.value.status == 302
    assert "redirects to another origin, '%s/v1/models'" % other.url in str(exc.value)
    assert "not followed" in str(exc.value)
    assert TOKEN not in str(exc.value)
    assert first.seen[0][1]["Authorization"] == "Bearer " + TOKEN
    # the other server got no request at all, so no Authorization header either
    assert other.seen == []


def test_a_redirect_to_localhost_is_another_origin_too(serve):
    other = serve(answer_models)
    first = serve(redirect_to(other.url.replace("127.0.0.1", "localhost")))
    with pytest.raises(vllm_api.VllmApiError):
        vllm_api.VllmClient(first.url, api_key=TOKEN, timeout=3.0).models()
    assert other.seen == []


def test_a_redirect_within_the_server_is_followed_with_the_token(serve):
    def behaviour(handler):
        if handler.path == "/v1/models":
            handler._send(307, b"moved", headers=[("Location", "/v2/models")])
        elif handler.headers.get("Authorization") == "Bearer " + TOKEN:
            answer_models(handler)
        else:
            handler._send(401, b'{"error": "no key"}')
    server = serve(behaviour)
    client = vllm_api.VllmClient(server.url, api_key=TOKEN, timeout=3.0)
    assert client.models() == ["m"]
    assert [path for path, headers in server.seen] == ["/v1/models", "/v2/models"]


def test_a_redirect_loop_ends(serve):
    server = serve(lambda handler: handler._send(302, b"", headers=[("Location", handler.path + "x")]))
    started = time.monotonic()
    with pytest.raises(vllm_api.VllmApiError) as exc:
        vllm_api.VllmClient(server.url, timeout=3.0).health()
    assert time.monotonic() - started < 3
    assert exc.value.kind == "http" and "redirect" in str(exc.value).lower()
    assert len(server.seen) <= vllm_api.MAX_REDIRECTS + 1


# --------------------------------------------------------------------------- values that must not reach the wire


@pytest.mark.parametrize("kwargs, words", [
    ({"base_url": "http://127.0.0.1:8000/\r\nX-Injected: 1"}, "control character"),
    ({"base_url": "http://127.0.0.1:8000/a b"}, "space"),
    ({"base_url": "http://user:pw@127.0.0.1:8000"}, "user name or password"),
    ({"base_url": "http://127.0.0.1:8000/?x=1"}, "query or fragment"),
    ({"base_url": "http://127.0.0.1:99999"}, "no valid TCP port"),
    ({"base_url": "http://127.0.0.1:port"}, "no valid TCP port"),
    ({"base_url": "http://ex%0aample.org"}, "not an IP address or a host name"),
    ({"host": "evil.example.org/x?"}, "not an IP address or a host name"),
    ({"host": "a\r\nb"}, "not an IP address or a host name"),
    ({"host": "[not-an-ip]"}, "not an IP address or a host name"),
])
def test_make_base_url_refuses_what_could_inject(kwargs, words):
    with pytest.raises(ValueError) as exc:
        vllm_api.make_base_url(**kwargs)
    assert words in str(exc.value)
    assert "\r" not in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("kwargs, url", [
    ({"host": "vllm-01.example.org"}, "http://vllm-01.example.org:8000"),
    ({"host": "vllm_01.example.org."}, "http://vllm_01.example.org.:8000"),
    ({"host": "[::1]", "port": 1}, "http://[::1]:1"),
    ({"base_url": "http://[fe80::1]:8000/prefix/"}, "http://[fe80::1]:8000/prefix"),
    ({"base_url": "https://localhost"}, "https://localhost"),
])
def test_make_base_url_keeps_real_addresses(kwargs, url):
    assert vllm_api.make_base_url(**kwargs) == url


@pytest.mark.parametrize("key", ["Zq9\r\nX-Injected: 1", "Zq9 Zq9", "Zq9\u00f6", "Zq9\x00"])
def test_an_api_key_that_could_inject_headers_is_refused_without_showing_it(key):
    with pytest.raises(ValueError) as exc:
        vllm_api.VllmClient("http://127.0.0.1:8000", api_key=key)
    assert "api_key holds" in str(exc.value)
    assert "Zq9" not in str(exc.value)


# --------------------------------------------------------------------------- the modules, run as Ansible runs them


def run_module(name, args, tmp_path):
    args_file = tmp_path / ("args-%d.json" % time.monotonic_ns())
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", name + ".py"), str(args_file)],
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS), capture_output=True, text=True, timeout=60,
                          check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_vllm_ready_ends_within_its_timeout_against_a_trickling_server(serve, tmp_path):
    server = serve(trickle_headers)
    started = time.monotonic()
    rc, result = run_module("vllm_ready", {"base_url": server.url, "timeout": 2, "interval": 0.5,
                                           "request_timeout": 1.0}, tmp_path)
    elapsed = time.monotonic() - started
    assert elapsed < 2 + 1 + 1.5, "the module ran %.1f s with timeout=2" % elapsed
    assert rc == 1 and result["failed"] and result["failed_stage"] == "health"
    assert result["stages"]["health"]["last_error"].startswith("no complete answer within")


@pytest.mark.parametrize("module", ["vllm_ready", "vllm_cutover"])
def test_modules_refuse_a_header_injecting_api_key_cleanly(module, tmp_path):
    args = {"api_key": "abc\r\nX-Injected: 1", "port": 1}
    if module == "vllm_cutover":
        args["unit"] = "vllm-x.service"
    rc, result = run_module(module, args, tmp_path)
    assert rc == 1 and result["failed"]
    assert "api_key holds a space, a control character or a non-ASCII character" in result["msg"]
    assert "X-Injected" not in json.dumps(result)
    if module == "vllm_cutover":
        assert result["stopped"] is False and result["failed_step"] == "options"


def test_vllm_ready_reports_a_cross_origin_redirect(serve, tmp_path):
    other = serve(answer_models)
    first = serve(redirect_to(other.url))
    rc, result = run_module("vllm_ready", {"base_url": first.url, "api_key": TOKEN, "timeout": 0}, tmp_path)
    assert rc == 1 and result["failed_stage"] == "health"
    assert "redirects to another origin" in result["stages"]["health"]["last_error"]
    assert other.seen == []


def test_vllm_ready_survives_hostile_json_answers(serve, tmp_path):
    def behaviour(handler):
        if handler.path == "/v1/models":
            handler._send(200, b"[" * 200000 + b"]" * 200000)
        elif handler.path == "/version":
            handler._send(200, b'{"version": "\\ud800 bad \\u0000"}')
        else:
            handler._send(200, b"{}")
    server = serve(behaviour)
    rc, result = run_module("vllm_ready", {"base_url": server.url, "timeout": 0}, tmp_path)
    assert rc == 1 and result["failed_stage"] == "models"
    assert result["stages"]["models"]["last_error"] == "/v1/models answered JSON nested too deeply to read"
    assert result["version"] == "\\ud800 bad \x00"


@pytest.mark.parametrize("module", ["vllm_ready", "vllm_cutover"])
@pytest.mark.parametrize("option, value, words", [
    ("request_timeout", "nan", "request_timeout=nan is not a number of seconds"),
    ("request_timeout", "inf", "request_timeout=inf is not a number of seconds"),
    ("interval", 1e300, "interval=1e+300 is more than a week (604800 s)"),
    ("timeout", 10 ** 400, "is more than a week (604800 s)"),
])
def test_times_that_no_wait_can_use_are_refused_cleanly(module, option, value, words, tmp_path):
    args = dict({"port": 1, "timeout": 1}, **{option: value})
    if module == "vllm_cutover":
        args["unit"] = "vllm-x.service"
    rc, result = run_module(module, args, tmp_path)
    assert rc == 1 and result["failed"]
    assert words in result["msg"]
    if module == "vllm_cutover":
        assert result["stopped"] is False and result["failed_step"] == "options"
