# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_cutover: a systemctl that never answers is killed at systemctl_timeout, and the failure says what was done."""

import os
import sys
import time

import test_vllm_cutover

UNIT = test_vllm_cutover.UNIT
host = test_vllm_cutover.host  # the fixture


def hang_on(h, verb, tool="systemctl"):
    """Put a TOOL before the fake one on PATH that sleeps for ever on VERB and runs the fake otherwise."""
    bindir = h.tmp / "hang-bin"
    bindir.mkdir(exist_ok=True)
    fake = os.path.join(str(h.tmp / "bin"), tool)
    path = bindir / tool
    path.write_text("#!%s\nimport os, sys, time\nif %r in sys.argv[1:]:\n    time.sleep(1000)\n"
                    "os.execv(%r, [%r] + sys.argv[1:])\n" % (sys.executable, verb, fake, fake))
    path.chmod(0o755)
    h.env["PATH"] = str(bindir) + os.pathsep + h.env["PATH"]


def unhang(h):
    """The fake alone on PATH again (so that the fixture can stop the unit)."""
    h.env["PATH"] = h.env["PATH"].split(os.pathsep, 1)[1]


def test_a_start_that_never_answers_fails_at_the_limit_saying_stopped_and_switched(host):
    h = host()
    h.start_serving()
    hang_on(h, "start")
    started = time.monotonic()
    rc, res = h.run(h.args(systemctl_timeout=2))
    assert time.monotonic() - started < 25
    assert rc == 1
    assert res["failed_step"] == "start"
    assert res["stopped"] and res["switched"] and not res["started"] and not res["ready"]
    assert "systemctl start %s did not answer within 2 s and was killed" % UNIT in res["msg"]
    assert "Now: %s is stopped; %s points at %s." % (UNIT, h.link, h.env_b) in res["msg"]
    assert res["changed"] is True


def test_a_stop_that_never_answers_fails_at_the_limit_before_the_switch(host):
    h = host()
    h.start_serving()
    hang_on(h, "stop")
    try:
        rc, res = h.run(h.args(systemctl_timeout=1, vram=None))
    finally:
        unhang(h)
    assert rc == 1
    assert res["failed_step"] == "stop"
    assert not res["stopped"] and not res["switched"] and not res["started"]
    assert res["msg"].startswith("systemctl stop %s did not answer within 1 s and was killed." % UNIT)
    assert os.readlink(h.link) == h.env_a


def test_a_journal_that_never_answers_does_not_hold_the_failure(host):
    h = host()
    h.start_serving()
    with open(os.path.join(h.state_dir, UNIT + ".fail-start"), "w") as f:
        f.write("Job for vllm-sim.service failed.")
    hang_on(h, "--no-pager", tool="journalctl")
    started = time.monotonic()
    rc, res = h.run(h.args(systemctl_timeout=1))
    assert time.monotonic() - started < 25
    assert rc == 1 and res["failed_step"] == "start"
    assert res["journal"] == []
    assert "systemctl start %s failed (exit 1): Job for vllm-sim.service failed." % UNIT in res["msg"]


def test_systemctl_timeout_below_one_second_is_refused(host):
    h = host()
    rc, res = h.run(h.args(systemctl_timeout=0))
    assert rc == 1 and res["failed_step"] == "options" and not res["stopped"]
    assert "systemctl_timeout=0 must be 1 second or more" in res["msg"]
