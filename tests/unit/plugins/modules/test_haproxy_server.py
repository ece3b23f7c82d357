# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.haproxy_server against a real HAProxy (haproxyworld) with loopback back ends."""

import json
import os
import socket
import threading
import time

import pytest

from ansible.module_utils import _internal
from haproxyworld import Backend, World
from helpers import module_runner

from ansible_collections.gpufleet.vllm.plugins.modules import haproxy_server

DRAIN_BIT = 0x08
MAINT_BIT = 0x01


def _world(request, tmp_path, level="admin"):
    backends = {"rollout-1": Backend(), "rollout-2": Backend(), "rollout-3": Backend(health=503)}
    try:
        world = World(tmp_path, backends, level=level)
    except BaseException:
        for backend in backends.values():
            backend.stop()
        raise
    request.addfinalizer(world.stop)
    world.wait_status("rollout-1", "UP")
    world.wait_status("rollout-2", "UP")
    world.wait_status("rollout-3", "DOWN")
    return world


@pytest.fixture
def world(request, tmp_path):
    return _world(request, tmp_path)


@pytest.fixture
def run(capsys):
    return module_runner(haproxy_server.main, capsys)


def args(world, **more):
    return dict({"socket": world.socket, "backend": "vllm", "interval": 0.1}, **more)


def test_query_lists_the_backends_servers(world, run):
    rc, out = run(args(world))
    assert rc == 0, out
    assert not out["changed"]
    names = [s["name"] for s in out["servers"]]
    assert names == ["rollout-1", "rollout-2", "rollout-3"]
    one, _two, three = out["servers"]
    assert one["admin"] == "ready" and one["status"] == "UP" and one["serving"] and one["check"] == "L7OK"
    assert one["address"] == "127.0.0.1" and one["port"] == world.backends["rollout-1"].port
    assert three["status"] == "DOWN" and not three["serving"] and three["check"] == "L7STS"
    assert out["serving"] == 2
    assert out["server"] == {} and "2 of 3 server(s) serving" in out["msg"]


def test_query_one_server(world, run):
    rc, out = run(args(world, server="rollout-2"))
    assert rc == 0 and out["server"]["name"] == "rollout-2" and out["server"]["serving"]
    assert "vllm/rollout-2: admin ready, status UP" in out["msg"]


def test_drain_sets_the_admin_state_then_is_unchanged(world, run):
    rc, out = run(args(world, server="rollout-1", state="drain"), diff=True)
    assert rc == 0, out
    assert out["changed"]
    assert world.admin_bits("rollout-1") & DRAIN_BIT
    assert out["previous"]["admin"] == "ready" and out["server"]["admin"] == "drain"
    assert out["server"]["status"] == "DRAIN" and not out["server"]["serving"]
    assert out["serving"] == 1
    assert out["diff"]["before"] == {"admin": "ready"} and out["diff"]["after"] == {"admin": "drain"}
    rc, out = run(args(world, server="rollout-1", state="drain"))
    assert rc == 0 and not out["changed"] and "drain already" in out["msg"]


def test_maint_then_ready_waits_for_the_health_check(world, run):
    rc, out = run(args(world, server="rollout-2", state="maint"))
    assert rc == 0 and out["changed"]
    assert world.admin_bits("rollout-2") & MAINT_BIT
    assert world.status("rollout-2") == "MAINT" and out["server"]["status"] == "MAINT"
    rc, out = run(args(world, server="rollout-2", state="ready", wait=True, timeout=10))
    assert rc == 0, out
    assert out["changed"] and not out["timed_out"]
    # out of maint HAProxy checks the server again: it goes up only after `rise` good checks
    assert out["server"]["status"] == "UP" and out["server"]["serving"]
    assert world.status("rollout-2") == "UP"
    assert out["waited"] > 0
    assert "status UP after" in out["msg"]


def test_ready_wait_times_out_on_a_server_whose_check_fails(world, run):
    t0 = time.monotonic()
    rc, out = run(args(world, server="rollout-3", state="ready", wait=True, timeout=1))
    assert rc == 1 and out["error_kind"] == "wait_timeout"
    assert time.monotonic() - t0 < 5
    assert out["timed_out"] and out["server"]["status"].startswith("DOWN")
    assert "waiting for status UP" in out["msg"] and "timeout 1 s" in out["msg"]


def test_ready_wait_timeout_continue_warns(world, run, monkeypatch):
    # as on a managed host: a test that imported controller code (a filter) before would send the warning to the
    # controller's display instead of the result
    monkeypatch.setattr(_internal, "is_controller", False)
    world.raw("set server vllm/rollout-3 state maint")
    rc, out = run(args(world, server="rollout-3", state="ready", wait=True, timeout=1, on_timeout="continue"))
    assert rc == 0 and out["timed_out"] and out["changed"], out
    assert "Going on anyway (on_timeout=continue)" in json.dumps(out["warnings"])  # plain or structured


def test_drain_waits_until_the_request_in_flight_ended(world, run):
    world.raw("set server vllm/rollout-2 state maint")
    backend = world.backends["rollout-1"]
    thread, result = world.slow_request(backend)
    rc, out = run(args(world, server="rollout-1"))
    assert out["server"]["sessions"] == 1
    timer = threading.Timer(1.0, backend.release.set)
    timer.start()
    try:
        rc, out = run(args(world, server="rollout-1", state="drain", wait=True, timeout=10))
    finally:
        timer.cancel()
        backend.release.set()
    thread.join(10)
    assert rc == 0, out
    assert out["previous"]["sessions"] == 1 and out["server"]["sessions"] == 0
    assert 0.5 <= out["waited"] < 10
    assert result["answer"].startswith(b"HTTP/1.0 200")   # drained, not cut


def test_drain_wait_timeout_fails_with_the_sessions_left(world, run):
    world.raw("set server vllm/rollout-2 state maint")
    backend = world.backends["rollout-1"]
    thread, _result = world.slow_request(backend)
    try:
        rc, out = run(args(world, server="rollout-1", state="drain", wait=True, timeout=1))
        assert rc == 1 and out["error_kind"] == "wait_timeout", out
        assert out["server"]["sessions"] == 1 and "1 session(s)" in out["msg"]
        assert world.admin_bits("rollout-1") & DRAIN_BIT   # the drain itself was done
        rc, out = run(args(world, server="rollout-1", state="drain", wait=True, timeout=0, on_timeout="continue"))
        assert rc == 0 and out["timed_out"] and not out["changed"]
    finally:
        backend.release.set()
        thread.join(10)


def test_check_mode_sends_nothing(world, run):
    rc, out = run(args(world, server="rollout-1", state="maint", wait=True), check=True, diff=True)
    assert rc == 0 and out["changed"] and out["check_mode"]
    assert out["server"]["admin"] == "maint" and out["previous"]["admin"] == "ready"
    assert out["diff"]["after"] == {"admin": "maint"}
    assert "check mode, nothing sent" in out["msg"] and out["waited"] == 0
    assert world.admin_bits("rollout-1") == 0 and world.status("rollout-1") == "UP"


def test_check_mode_without_change(world, run):
    rc, out = run(args(world, server="rollout-1", state="ready"), check=True)
    assert rc == 0 and not out["changed"]


# ---- failures an operator reads


def test_socket_missing(tmp_path, run):
    rc, out = run({"socket": str(tmp_path / "none.sock"), "backend": "vllm"})
    assert rc == 1 and out["error_kind"] == "missing"
    assert out["msg"] == ("no HAProxy runtime API socket at %s: is HAProxy running, and does its config have "
                          "`stats socket %s level admin`?" % (tmp_path / "none.sock", tmp_path / "none.sock"))


def test_not_a_socket(tmp_path, run):
    path = tmp_path / "file"
    path.write_text("x")
    rc, out = run({"socket": str(path), "backend": "vllm"})
    assert rc == 1 and out["error_kind"] == "not_socket" and "is not a socket" in out["msg"]


def test_connection_refused(tmp_path, run):
    path = str(tmp_path / "stale.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()   # the file stays, nothing listens: a HAProxy that died
    rc, out = run({"socket": path, "backend": "vllm"})
    assert rc == 1 and out["error_kind"] == "refused" and "is HAProxy running?" in out["msg"]


def test_permission_denied(tmp_path, run, monkeypatch):
    path = str(tmp_path / "admin.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    try:
        if os.geteuid() == 0:
            # root opens any socket: the connect of a user who may not is made to fail as it does for them
            def denied(self, address):
                raise PermissionError(13, "Permission denied")
            monkeypatch.setattr(socket.socket, "connect", denied)
        else:
            os.chmod(path, 0)
        rc, out = run({"socket": path, "backend": "vllm"})
    finally:
        listener.close()
    assert rc == 1 and out["error_kind"] == "permission"
    assert "permission denied opening the HAProxy runtime API socket" in out["msg"]


def test_socket_without_level_admin(request, tmp_path, run):
    world = _world(request, tmp_path, level="user")
    rc, out = run(args(world))
    assert rc == 0   # reading needs no admin level
    rc, out = run(args(world, server="rollout-1", state="drain"))
    assert rc == 1 and out["error_kind"] == "not_admin"
    assert "Permission denied" in out["msg"] and "`level admin`" in out["msg"]
    assert world.admin_bits("rollout-1") == 0


def test_unknown_backend_names_the_backends(world, run):
    rc, out = run(args(world, backend="vllm2"))
    assert rc == 1 and out["error_kind"] == "unknown_backend"
    assert out["msg"].endswith("has no backend vllm2; its backends: vllm, other")


def test_unknown_server_names_the_servers(world, run):
    rc, out = run(args(world, server="rollout-9", state="drain"))
    assert rc == 1 and out["error_kind"] == "unknown_server"
    assert out["msg"].endswith("has no server rollout-9; its servers: rollout-1, rollout-2, rollout-3")


@pytest.mark.parametrize("field,value", [
    ("server", "a b"), ("server", "a;b"), ("server", "a\nset server vllm/rollout-1 state maint"),
    ("backend", "vllm;show info"), ("server", ""), ("server", "x" * 65),
    # ($ of a regular expression matches before a final line break: the whole name is checked)
    ("server", "rollout-1\n"), ("backend", "vllm\n"),
])
def test_names_are_checked_before_anything_is_sent(world, run, field, value):
    rc, out = run(args(world, **{field: value, "state": "maint"} if field == "server"
                       else {field: value, "server": "rollout-1", "state": "maint"}))
    assert rc == 1 and out["error_kind"] == "options" and "is not a HAProxy name" in out["msg"]
    assert world.admin_bits("rollout-1") == 0


def test_options_are_bounded(tmp_path, run):
    rc, out = run({"socket": "relative.sock", "backend": "vllm", "state": "drain", "timeout": 4000,
                   "interval": 0, "request_timeout": 0})
    assert rc == 1 and out["error_kind"] == "options"
    for part in ("absolute path", "needs a server", "timeout must be", "interval must be", "request_timeout must be"):
        assert part in out["msg"]


def test_a_failure_after_the_set_says_the_state_changed(world, run, monkeypatch):
    # HAProxy took the drain, then the read after it failed: the result must not say nothing changed
    real = haproxy_server.backend_servers
    reads = []

    def flaky(*a, **kw):
        reads.append(1)
        if len(reads) > 1:
            raise haproxy_server.HaproxyError("HAProxy at %s did not answer `show stat` within 5.0 s" % a[0],
                                              "timeout")
        return real(*a, **kw)
    monkeypatch.setattr(haproxy_server, "backend_servers", flaky)
    rc, out = run(args(world, server="rollout-1", state="drain"))
    assert rc == 1 and out["error_kind"] == "timeout"
    assert world.admin_bits("rollout-1") & DRAIN_BIT
    assert out["changed"] is True
    assert out["msg"].endswith("; vllm/rollout-1 was set to drain before that")
    # a failure before anything was sent changes nothing
    reads[:] = [1]
    rc, out = run(args(world, server="rollout-2", state="drain"))
    assert rc == 1 and out["changed"] is False and "was set to" not in out["msg"]


# ---- drain=true: drain, the wait for the sessions, then maint, in one task (the balancer role's take-out)

def test_drain_then_maint_lets_the_request_in_flight_end_first(world, run):
    world.raw("set server vllm/rollout-2 state maint")
    backend = world.backends["rollout-1"]
    thread, result = world.slow_request(backend)
    timer = threading.Timer(1.0, backend.release.set)
    timer.start()
    try:
        rc, out = run(args(world, server="rollout-1", state="maint", drain=True, wait=True, timeout=10), diff=True)
    finally:
        timer.cancel()
        backend.release.set()
    thread.join(10)
    assert rc == 0, out
    assert out["drained"]["set"] is True and out["drained"]["sessions"] == 0 and not out["drained"]["timed_out"]
    assert 0.5 <= out["waited"] < 10 and out["waited"] == out["drained"]["waited"]
    assert out["server"]["admin"] == "maint" and out["previous"]["admin"] == "ready" and out["changed"]
    assert out["diff"]["before"] == {"admin": "ready"} and out["diff"]["after"] == {"admin": "maint"}
    assert world.admin_bits("rollout-1") & MAINT_BIT
    assert result["answer"].startswith(b"HTTP/1.0 200")   # drained, not cut by the maint
    assert "vllm/rollout-1: drained, 0 session(s) after " in out["msg"] and ", then maint (was ready)" in out["msg"]


def test_drain_then_maint_at_the_timeout_goes_on_or_stays_in_drain(world, run, monkeypatch):
    monkeypatch.setattr(_internal, "is_controller", False)
    world.raw("set server vllm/rollout-2 state maint")
    backend = world.backends["rollout-1"]
    thread, _result = world.slow_request(backend)
    try:
        # on_timeout=fail: the server stays in drain (its request may still end), the task fails saying so
        rc, out = run(args(world, server="rollout-1", state="maint", drain=True, wait=True, timeout=1))
        assert rc == 1 and out["error_kind"] == "wait_timeout", out
        assert "it stays in drain, not set to maint" in out["msg"] and "1 session(s)" in out["msg"]
        assert out["server"]["admin"] == "drain" and out["previous"]["admin"] == "ready" and out["servers"], out
        bits = world.admin_bits("rollout-1")
        assert bits & DRAIN_BIT and not bits & MAINT_BIT
        # on_timeout=continue: maint all the same, with a warning (a server in drain already is not drained again)
        rc, out = run(args(world, server="rollout-1", state="maint", drain=True, wait=True, timeout=1,
                           on_timeout="continue"))
        assert rc == 0 and out["timed_out"] and out["drained"]["sessions"] == 1 and out["drained"]["set"] is False
        assert "set to maint all the same (on_timeout=continue)" in json.dumps(out["warnings"]), out
        assert world.admin_bits("rollout-1") & MAINT_BIT
    finally:
        backend.release.set()
        thread.join(10)


def test_drain_then_maint_in_check_mode_and_when_in_maint_already(world, run):
    rc, out = run(args(world, server="rollout-1", state="maint", drain=True, wait=True), check=True)
    assert rc == 0 and out["changed"] and out["waited"] == 0 and out["drained"]["set"] is False
    assert "would be drained, then set to maint (check mode, nothing sent)" in out["msg"]
    assert world.admin_bits("rollout-1") == 0
    world.raw("set server vllm/rollout-1 state maint")
    rc, out = run(args(world, server="rollout-1", state="maint", drain=True, wait=True, timeout=1))
    assert rc == 0 and not out["changed"]
    assert out["drained"] == {"set": False, "sessions": None, "waited": 0.0, "timed_out": False}


def test_drain_goes_with_maint_only(world, run):
    rc, out = run(args(world, server="rollout-1", state="drain", drain=True))
    assert rc == 1 and "drain=true goes with state=maint" in out["msg"] and world.admin_bits("rollout-1") == 0
