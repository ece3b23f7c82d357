# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/haproxy.py: the runtime API exchange, bounded, against scripted sockets and a real HAProxy."""

import socket
import threading
import time

import pytest

from haproxyworld import Backend, World

from ansible_collections.gpufleet.vllm.plugins.module_utils import haproxy


class Scripted(object):
    """A UNIX socket that answers each connection with answer(line) (bytes, or None: say nothing, hold on)."""

    def __init__(self, path, answer):
        self.path = str(path)
        self.answer = answer
        self.lines = []
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.sock.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _addr = self.sock.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(5)
                line = conn.recv(4096).decode()
                self.lines.append(line)
                data = self.answer(line)
                if data is None:
                    self.stop.wait(10)
                    continue
                try:
                    conn.sendall(data)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def scripted(tmp_path):
    made = []

    def make(answer):
        server = Scripted(tmp_path / ("s%d.sock" % len(made)), answer)
        made.append(server)
        return server
    yield make
    for server in made:
        server.close()


def test_command_sends_one_line_and_reads_to_the_end(scripted):
    server = scripted(lambda line: b"a" * 200000)
    assert haproxy.command(server.path, "show info") == "a" * 200000
    assert server.lines == ["show info\n"]


def test_answer_size_is_capped(scripted):
    server = scripted(lambda line: b"x" * 70000)
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.command(server.path, "show stat", max_bytes=65536)
    assert err.value.kind == "too_large" and "larger than 65536 bytes" in str(err.value)


def test_a_silent_haproxy_times_out_in_time(scripted):
    server = scripted(lambda line: None)
    t0 = time.monotonic()
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.command(server.path, "show stat", timeout=0.5)
    assert err.value.kind == "timeout" and "did not answer `show stat` within 0.5 s" in str(err.value)
    assert time.monotonic() - t0 < 3


def test_a_trickling_answer_is_bounded_in_all(scripted, tmp_path):
    # one byte every 0.1 s: each read is quick, the whole exchange is not
    path = str(tmp_path / "trickle.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    done = threading.Event()

    def trickle():
        conn, _addr = listener.accept()
        with conn:
            while not done.wait(0.1):
                try:
                    conn.sendall(b"x")
                except OSError:
                    return
    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(haproxy.HaproxyError) as err:
            haproxy.command(path, "show stat", timeout=0.5)
    finally:
        done.set()
        thread.join(5)
        listener.close()
    assert err.value.kind == "timeout" and time.monotonic() - t0 < 2


@pytest.mark.parametrize("answer,kind", [
    (b"Permission denied\n\n", "not_admin"),
    (b"Unknown command, but maybe one of the following ones is a better match:\n  help\n", "unknown_command"),
])
def test_refusals_of_the_api(scripted, answer, kind):
    server = scripted(lambda line: answer)
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.command(server.path, "set server vllm/a state drain")
    assert err.value.kind == kind
    if kind == "not_admin":
        assert str(err.value).endswith("refused `set server` (Permission denied): its `stats socket` line needs "
                                       "`level admin`")


def test_show_stat_that_is_not_csv(scripted):
    server = scripted(lambda line: b"hello\n")
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.backend_servers(server.path, "vllm")
    assert err.value.kind == "answer"


def test_a_check_in_progress_reads_as_its_last_result(scripted):
    # HAProxy's show stat puts "* " before the last check's result while the next check runs
    stat = ("# pxname,svname,scur,status,check_status,check_desc,addr\n"
            "vllm,a,0,UP,* L7OK,Layer7 check passed,127.0.0.1:8000\n"
            "vllm,b,0,DOWN,L7STS,Wrong status,127.0.0.1:8001\n"
            "vllm,BACKEND,0,UP,,,\n\n")
    state = ("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_port\n"
             "3 vllm 1 a 127.0.0.1 2 0 8000\n3 vllm 2 b 127.0.0.1 0 0 8001\n\n")
    server = scripted(lambda line: (stat if line.startswith("show stat") else state).encode())
    found = {s["name"]: s["check"] for s in haproxy.backend_servers(server.path, "vllm")}
    assert found == {"a": "L7OK", "b": "L7STS"}


STATE_HEADER = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_port\n"


def test_two_backends_with_the_same_server_names_are_kept_apart(scripted):
    # "other" has servers named as vllm's, one in maint and down; `show servers state` may answer every backend
    stat = ("# pxname,svname,scur,status,check_status,check_desc,addr\n"
            "other,a,7,DOWN,L7STS,Wrong status,10.0.0.9:9000\n"
            "vllm,a,0,UP,L7OK,Layer7 check passed,127.0.0.1:8000\n"
            "vllm,b,0,UP,L7OK,Layer7 check passed,127.0.0.1:8001\n"
            "other,b,3,UP,L7OK,Layer7 check passed,10.0.0.9:9001\n"
            "other,c,0,UP,L7OK,Layer7 check passed,10.0.0.9:9002\n"
            "vllm,BACKEND,0,UP,,,\nother,BACKEND,0,UP,,,\n")
    state = (STATE_HEADER + "3 vllm 1 a 127.0.0.1 2 0 8000\n4 other 1 a 10.0.0.9 0 1 9000\n"
             "3 vllm 2 b 127.0.0.1 2 0 8001\n4 other 2 b 10.0.0.9 2 8 9001\n\n")
    server = scripted(lambda line: (stat if line.startswith("show stat") else state).encode())
    found = haproxy.backend_servers(server.path, "vllm")
    assert [(s["name"], s["admin"], s["status"], s["sessions"], s["port"]) for s in found] == [
        ("a", "ready", "UP", 0, 8000), ("b", "ready", "UP", 0, 8001)]


@pytest.mark.parametrize("stat, words", [
    # a header without svname; a row too short to hold it; a field past csv's field size limit; a NUL byte
    ("# pxname,scur,status\nvllm,0,UP\n", "a header without svname"),
    ("# pxname,svname,scur,status\nvllm,a,0,UP\nvllm\nvllm,BACKEND,0,UP\n", "line 3 of 1 fields, too few"),
    ("# pxname,svname,scur,status\nvllm,a,0,\"%s\"\nvllm,BACKEND,0,UP\n" % ("U" * 200000),
     "CSV that cannot be read: field larger than field limit"),
    ("# pxname,svname,scur,status\nvllm,a,0,\"UP\x00\"\nvllm,BACKEND,0,UP\n", None),
])
def test_a_show_stat_of_odd_shape_is_an_answer_error(scripted, stat, words):
    state = STATE_HEADER + "3 vllm 1 a 127.0.0.1 2 0 8000\n"
    server = scripted(lambda line: (stat if line.startswith("show stat") else state).encode())
    try:
        found = haproxy.backend_servers(server.path, "vllm")
    except haproxy.HaproxyError as exc:
        assert exc.kind == "answer" and (words is None or words in str(exc)), str(exc)
    else:
        # (a NUL byte is no CSV fault for Python 3.11's csv: then it is the status as HAProxy wrote it)
        assert words is None and [s["name"] for s in found] == ["a"]


@pytest.mark.parametrize("bits", ["x", "1" * 5000, "-1", "0x08"])
def test_an_admin_state_that_is_no_number_is_an_answer_error(scripted, bits):
    # (read as 0 it would say "ready" of a server HAProxy may hold in drain or maint)
    stat = "# pxname,svname,scur,status\nvllm,a,0,UP\nvllm,BACKEND,0,UP\n"
    state = STATE_HEADER + "3 vllm 1 a 127.0.0.1 2 %s 8000\n" % bits
    server = scripted(lambda line: (stat if line.startswith("show stat") else state).encode())
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.backend_servers(server.path, "vllm")
    assert err.value.kind == "answer" and "srv_admin_state" in str(err.value), str(err.value)


@pytest.mark.parametrize("rows, words", [
    # b missing from the answer (cut short after a); b's row ending before srv_admin_state
    ("3 vllm 1 a 127.0.0.1 2 0 8000\n", "without a row for server b"),
    ("3 vllm 1 a 127.0.0.1 2 0 8000\n3 vllm 2 b 127.0.0.1\n", "a row that ends before srv_admin_state for server b"),
])
def test_a_server_without_its_admin_state_is_an_answer_error(scripted, rows, words):
    # (read as 0 it would say "ready" of a server HAProxy may hold in drain or maint)
    stat = "# pxname,svname,scur,status\nvllm,a,0,UP\nvllm,b,0,UP\nvllm,BACKEND,0,UP\n"
    server = scripted(lambda line: (stat if line.startswith("show stat") else STATE_HEADER + rows).encode())
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.backend_servers(server.path, "vllm")
    assert err.value.kind == "answer" and words in str(err.value), str(err.value)


@pytest.mark.parametrize("line", ["show stat\nshutdown frontend fe", "show stat;shutdown frontend fe",
                                  "show stat\rx"])
def test_command_refuses_a_second_command(scripted, line):
    server = scripted(lambda text: b"")
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.command(server.path, line)
    assert err.value.kind == "invalid" and server.lines == []


@pytest.mark.parametrize("name,ok", [
    ("rollout-1", True), ("10.0.0.5:8000", True), ("a_b.c", True), ("x" * 64, True), ("x" * 65, False),
    ("", False), ("a b", False), ("a;b", False), ("a\nb", False), ("a/b", False), ("é", False), (None, False),
    ("s1\n", False), ("vllm\n", False), ("s1\r", False),
    (3, False),
])
def test_name_problem(name, ok):
    assert (haproxy.name_problem(name, "server") is None) == ok


def test_set_admin_checks_names_before_sending(scripted):
    server = scripted(lambda line: b"")
    with pytest.raises(haproxy.HaproxyError) as err:
        haproxy.set_admin(server.path, "vllm", "a state maint", "drain")
    assert err.value.kind == "invalid" and server.lines == []
    with pytest.raises(haproxy.HaproxyError):
        haproxy.set_admin(server.path, "vllm", "a", "down")
    assert server.lines == []


@pytest.mark.parametrize("bits,admin", [(0, "ready"), (0x08, "drain"), (0x10, "drain"), (0x01, "maint"),
                                        (0x02, "maint"), (0x04, "maint"), (0x20, "maint"), (0x40, "maint"),
                                        (0x09, "maint")])
def test_admin_of(bits, admin):
    assert haproxy.admin_of(bits) == admin


def test_wait_for_is_bounded_by_reads_when_the_clock_stands_still():
    calls = []

    def read():
        calls.append(1)
        return [], {"sessions": 1}
    servers, server, waited, timed_out = haproxy.wait_for(read, haproxy.no_sessions, 5, 1.0, clock=lambda: 0.0,
                                                          sleep=lambda s: None)
    assert timed_out and len(calls) <= 5 / 1.0 + 3


def test_settled_up_needs_exactly_up():
    base = {"admin": "ready"}
    assert haproxy.settled_up(dict(base, status="UP"))
    assert haproxy.settled_up(dict(base, status="no check"))
    assert not haproxy.settled_up(dict(base, status="UP 1/2"))
    assert not haproxy.settled_up(dict(base, status="DOWN 1/2"))
    assert not haproxy.settled_up({"admin": "drain", "status": "UP"})


def test_a_server_back_from_maint_is_up_1_of_2_until_a_check_passed(request, tmp_path):
    """Out of maint HAProxy puts a server back up at once, unchecked (health = rise: `UP 1/2`, one failed check
    takes it down); only a passed check makes it `UP`. The wait for ready ends on `UP`, not before."""
    backends = {"a": Backend()}
    world = World(tmp_path, backends, inter_ms=1000)
    request.addfinalizer(world.stop)
    world.wait_status("a", "UP")
    world.raw("set server vllm/a state maint")
    world.raw("set server vllm/a state ready")
    seen = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        server = haproxy.find(haproxy.backend_servers(world.socket, "vllm"), "vllm", "a", world.socket)
        seen.append(server["status"])
        if haproxy.settled_up(server):
            break
        assert server["serving"]   # in rotation already: UP 1/2 serves
        time.sleep(0.05)
    assert seen[0] == "UP 1/2" and seen[-1] == "UP", seen
