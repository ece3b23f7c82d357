# SPDX-License-Identifier: GPL-3.0-or-later
"""No process the unit suite starts outlives it.

Each pytest process of the suite (the only one, or each pytest-xdist
worker) sets :data:`MARK` in its environment to a value of its own when
tests/unit/conftest.py imports this module; every process a test starts,
however far down and whatever session or process group it makes, inherits
it (a process that clears its environment is the exception). At the end of
that pytest process's session (:func:`no_process_outlives_the_suite`, a
session fixture, torn down after every other fixture) the processes that
still carry the value are listed, killed, and the session errors, naming
them: a test that leaves a server running fails the suite instead of leaving
it to run for hours.
"""

import binascii
import os
import signal
import time

import pytest

#: the environment variable each pytest process of the suite sets to a value of its own
MARK = "GPUFLEET_UNIT_TEST_RUN"
#: how long processes that are on their way out (a stop just sent) may take to go before they count as left
GRACE_SECONDS = float(os.environ.get("GPUFLEET_UNIT_TEST_GRACE") or 10)
#: the most entries of /proc read, and the most bytes of one process's environment
MAX_PROCS = 100000
MAX_ENVIRON = 1024 * 1024

os.environ[MARK] = binascii.hexlify(os.urandom(12)).decode("ascii")


def _read(path, limit):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def carrying(value=None, exclude=()):
    """The ids of the live processes whose environment holds MARK=VALUE (default: this process's value), but this
    process and EXCLUDE. Zombies hold no environment and are not listed."""
    needle = ("\0%s=%s\0" % (MARK, value or os.environ[MARK])).encode("ascii")
    skip = set(exclude) | {os.getpid()}
    found = []
    for count, name in enumerate(os.listdir("/proc")):
        if count >= MAX_PROCS:
            break
        if not name.isdigit() or int(name) in skip:
            continue
        if needle in b"\0" + _read("/proc/%s/environ" % name, MAX_ENVIRON):
            found.append(int(name))
    return sorted(found)


def started_by(pid):
    """The test that started PID, as pytest named it in the PYTEST_CURRENT_TEST the process inherited, or ''."""
    for entry in _read("/proc/%d/environ" % pid, MAX_ENVIRON).split(b"\0"):
        if entry.startswith(b"PYTEST_CURRENT_TEST="):
            return entry.split(b"=", 1)[1].decode("utf-8", "replace")[:300]
    return ""


def describe(pid):
    """'PID: command line' (cut to 200 characters), or 'PID: (gone)', and the test that started it."""
    words = _read("/proc/%d/cmdline" % pid, 4096).split(b"\0")
    line = " ".join(word.decode("utf-8", "replace") for word in words if word)
    test = started_by(pid)
    return "%d: %s%s" % (pid, line[:200] or "(gone)", " (started by %s)" % test if test else "")


def kill(pids, timeout=GRACE_SECONDS):
    """SIGKILL PIDS and wait (at most TIMEOUT seconds) until none of them carries the mark any more."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and set(pids) & set(carrying()):
        time.sleep(0.05)


def left_running(grace=GRACE_SECONDS):
    """The processes that carry this pytest process's mark after GRACE seconds at most (those on their way out
    are given the time to go)."""
    deadline = time.monotonic() + grace
    pids = carrying()
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = carrying()
    return pids


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_suite():
    """Fail the session (an error at the teardown of its last test) when a process it started still runs."""
    yield
    pids = left_running()
    if not pids:
        return
    names = [describe(pid) for pid in pids]
    kill(pids)
    pytest.fail("%d process(es) the tests started were still running when the session ended (killed now; the "
                "test that started each must end it in its teardown): %s" % (len(names), "; ".join(names)),
                pytrace=False)
