# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vLLM client against a server that answers raw bytes of odd shape: a JSON number where an object is expected,
a huge header line, a body that is not UTF-8, a Content-Length that is no number. Each is a VllmApiError (a kind and
a short sentence), never a traceback."""

import socket
import threading

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import vllm_api


class Raw(object):
    """A loopback server that answers every request with ANSWER (bytes) and closes."""

    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, dummy = self.sock.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def raw():
    made = []

    def start(answer):
        server = Raw(answer)
        made.append(server)
        return vllm_api.VllmClient(server.url, timeout=5)
    yield start
    for server in made:
        server.close()


def reply(body, status=b"200 OK", headers=b"Content-Type: application/json\r\n", length=None):
    length = str(len(body)).encode() if length is None else length
    return b"HTTP/1.1 " + status + b"\r\n" + headers + b"Content-Length: " + length + b"\r\nConnection: close\r\n\r\n" + body


@pytest.mark.parametrize("call, body, kind, words", [
    ("models", b"42", "invalid", "/v1/models did not give a model list: 42"),
    ("version", b"42", "invalid", "/version did not give a version: 42"),
    ("version", b"[\"0.33.0\"]", "invalid", "/version did not give a version"),
    ("models", b"\xff\xfe{\"data\": []}", "invalid", "/v1/models did not answer JSON"),
    ("models", b"{\"data\": [{\"id\": 7}, 3, {\"id\": \"m\"}]}", None, None),
    ("complete", b"1e999", "invalid", "/v1/completions gave no choices"),
    ("complete", b"{\"choices\": [{\"text\": 5}], \"usage\": 3}", None, None),
    ("models", b"9" * 5000, "invalid", "/v1/models did not answer JSON"),
])
def test_json_of_the_wrong_shape_or_not_utf8_is_an_invalid_answer(raw, call, body, kind, words):
    client = raw(reply(body))
    try:
        got = client.complete("m") if call == "complete" else getattr(client, call)()
    except vllm_api.VllmApiError as exc:
        assert kind is not None and exc.kind == kind and words in str(exc), str(exc)
    else:
        assert kind is None, got
        assert got in (["m"], {"text": None, "finish_reason": None, "completion_tokens": None, "usage": {}})


@pytest.mark.parametrize("answer, kind", [
    # a header line past http.client's 64 KiB limit; a status line that is not HTTP; a Content-Length that is no
    # plain number (a superscript two is a digit to str.isdigit, not to int: like http.client, the body is then
    # read to its end, within the cap); an error body that is not UTF-8
    (b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * 200000 + b"\r\n\r\n{}", "reset"),
    (b"\xff\xfe garbage\r\n\r\n", "reset"),
    (reply(b"{}", length="\u00b2".encode("latin-1")), None),
    (reply(b"{}", length=b"1" * 30), "too_large"),
    (reply(b"\xff\xfe\x00 not utf-8", status=b"500 Internal Server Error"), "http"),
    (reply(b"{\"error\": 5, \"detail\": [1, {\"x\": 2}]}", status=b"400 Bad Request"), "http"),
])
def test_replies_of_odd_shape_are_a_clean_error(raw, answer, kind):
    client = raw(answer)
    try:
        status = client.health()
    except vllm_api.VllmApiError as exc:
        assert exc.kind == kind, (exc.kind, str(exc))
        assert len(str(exc)) < 600 and str(exc).encode("utf-8")
    else:
        assert kind is None and status == 200
