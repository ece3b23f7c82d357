# SPDX-License-Identifier: GPL-3.0-or-later
"""The suite's own hygiene: a test that leaves a process running fails the session (tests/unit/leakcheck.py), with
pytest-xdist workers too; the fake systemd's units end with the test that started them (tests/unit/fakesystemd.py)."""

import os
import signal
import subprocess
import sys
import time

import pytest

import fakesystemd
import leakcheck

HERE = os.path.dirname(os.path.abspath(__file__))

INNER_CONFTEST = """
import sys
sys.path.insert(0, %r)
from leakcheck import no_process_outlives_the_suite  # noqa: F401
"""

# each test starts a process in a session of its own (out of reach of a process-group kill) and leaves it running
INNER_TESTS = """
import os, subprocess, sys


def _leak(name):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", name], start_new_session=True)
    with open(os.path.join(%r, name), "w") as handle:
        handle.write(str(child.pid))


def test_one():
    _leak("one")


def test_two():
    _leak("two")


def test_clean():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_process_a_test_leaves_running_fails_the_session_named_and_is_killed(tmp_path, workers):
    suite = tmp_path / "suite"
    suite.mkdir()
    pids = tmp_path / "pids"
    pids.mkdir()
    (suite / "conftest.py").write_text(INNER_CONFTEST % HERE)
    (suite / "test_leaks.py").write_text(INNER_TESTS % str(pids))
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
                               "--rootdir", str(suite), str(suite)], cwd=str(suite), capture_output=True, text=True,
                              timeout=300, check=False, env=dict(os.environ, GPUFLEET_UNIT_TEST_GRACE="1"))
        out = proc.stdout + proc.stderr
        started = dict((name, int((pids / name).read_text())) for name in os.listdir(str(pids)))
        assert sorted(started) == ["one", "two"], out
        assert proc.returncode == 1, out
        assert "were still running when the session ended (killed now" in out
        for name, pid in started.items():
            # named, with its command line, and gone
            assert "%d: %s -c import time; time.sleep(600) %s" % (pid, sys.executable, name) in out
            assert not _alive(pid)
        assert "3 passed" in out and "error" in out
    finally:
        for name in os.listdir(str(pids)):
            try:
                os.kill(int((pids / name).read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def test_the_mark_reaches_every_descendant_and_only_this_runs():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert child.pid in leakcheck.carrying()
        assert child.pid not in leakcheck.carrying("another-run")
        assert leakcheck.describe(child.pid).startswith("%d: %s -c import time" % (child.pid, sys.executable))
    finally:
        leakcheck.kill([child.pid])
        child.wait(timeout=30)
    assert child.pid not in leakcheck.carrying()


def _server(tmp_path, trap_term=False):
    """A fake systemd with one unit running a server (that ignores SIGTERM with TRAP_TERM); (env, state, server pid)."""
    state = str(tmp_path / "systemd")
    env = dict(os.environ, **fakesystemd.install(str(tmp_path / "bin"), state))
    code = "import signal, time\n%stime.sleep(600)\n" % (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if trap_term else "")
    fakesystemd.write_unit(state, "srv.service", [sys.executable, "-c", code, "fake-server"])
    subprocess.run(["systemctl", "start", "srv.service"], env=env, check=True, timeout=60)
    supervisor = int(open(os.path.join(state, "srv.service.pid")).read())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        servers = [pid for pid in leakcheck.carrying() if b"fake-server" in open("/proc/%d/cmdline" % pid, "rb").read()]
        if servers:
            return env, state, supervisor, servers[0]
        time.sleep(0.05)
    raise AssertionError("the fake server did not start")


def test_stop_all_ends_the_supervisor_and_its_server(tmp_path):
    env, state, supervisor, server = _server(tmp_path)
    assert fakesystemd.stop_all(state) == ["srv.service"]
    assert not _alive(supervisor) and not _alive(server)
    assert fakesystemd.stop_all(state) == []  # (nothing runs: nothing to do, nothing else is touched)


def test_a_stop_past_its_time_kills_the_server_with_its_supervisor(tmp_path):
    # the supervisor forwards SIGTERM; a server that ignores it is killed with the supervisor's whole group
    env, state, supervisor, server = _server(tmp_path, trap_term=True)
    os.environ["FAKE_SYSTEMD_DIR"], saved = state, os.environ.get("FAKE_SYSTEMD_DIR")
    try:
        assert fakesystemd.stop("srv.service", timeout=0.5) == 0
    finally:
        if saved is None:
            del os.environ["FAKE_SYSTEMD_DIR"]
        else:
            os.environ["FAKE_SYSTEMD_DIR"] = saved
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (_alive(supervisor) or _alive(server)):
        time.sleep(0.05)
    assert not _alive(supervisor) and not _alive(server)


def test_a_stop_before_the_supervisor_forwards_signals_still_ends_the_server(tmp_path):
    # the window between the server's start and the supervisor's signal forwarding made wide (10 s): a stop in
    # it ends the supervisor by SIGTERM's default action; the server in its group must go with it
    state = str(tmp_path / "systemd")
    env = dict(os.environ, FAKESYSTEMD_FORWARD_DELAY="10", **fakesystemd.install(str(tmp_path / "bin"), state))
    fakesystemd.write_unit(state, "early.service", [sys.executable, "-c", "import time; time.sleep(600)", "early-srv"])
    subprocess.run(["systemctl", "start", "early.service"], env=env, check=True, timeout=60)
    deadline = time.monotonic() + 60
    servers = []
    while not servers and time.monotonic() < deadline:
        servers = [pid for pid in leakcheck.carrying() if b"early-srv" in leakcheck._read("/proc/%d/cmdline" % pid, 4096)]
        time.sleep(0.05)
    assert servers, "the fake server did not start"
    subprocess.run(["systemctl", "stop", "early.service"], env=env, check=True, timeout=120)
    assert not _alive(servers[0]), "the server outlived the stop of its unit"
