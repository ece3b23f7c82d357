# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_ready: a journalctl or systemctl that never answers is killed at journal_timeout; the gate still ends."""

import sys
import time

from test_vllm_ready import fake_systemd, free_port, run_module


def test_a_hanging_journalctl_is_killed_at_journal_timeout(tmp_path):
    port = free_port()
    bindir = fake_systemd(tmp_path, active="failed", sub="failed", result="exit-code", restarts=1)
    journalctl = bindir / "journalctl"
    journalctl.write_text("#!%s\nimport time\nprint('partial line', flush=True)\ntime.sleep(1000)\n" % sys.executable)
    started = time.monotonic()
    rc, res, dummy = run_module({"port": port, "timeout": 600, "interval": 0.2, "unit": "vllm-sim.service",
                                 "journal_timeout": 1}, tmp_path, path_prefix=bindir)
    assert time.monotonic() - started < 15
    assert rc == 1
    assert res["stopped_reason"] == "the unit vllm-sim.service failed (result: exit-code, restarts: 1)"
    assert res["journal"] == []
    assert "did not get ready: the unit vllm-sim.service failed" in res["msg"]


def test_a_hanging_systemctl_does_not_hold_the_gate_past_its_timeout(tmp_path):
    """systemctl show (the unit watch and the final state) is killed at journal_timeout, every poll."""
    port = free_port()
    bindir = fake_systemd(tmp_path)
    systemctl = bindir / "systemctl"
    systemctl.write_text("#!%s\nimport time\ntime.sleep(1000)\n" % sys.executable)
    started = time.monotonic()
    rc, res, dummy = run_module({"port": port, "timeout": 2, "interval": 0.5, "unit": "vllm-sim.service",
                                 "journal_timeout": 1}, tmp_path, path_prefix=bindir)
    elapsed = time.monotonic() - started
    assert elapsed < 2 + 1 + 1 + 3, "the gate took %.1f s with timeout 2 and journal_timeout 1" % elapsed
    assert rc == 1
    assert res["unit_state"] == {}
    assert res["failed_stage"] == "health"


def test_journal_timeout_must_be_positive(tmp_path):
    rc, res, dummy = run_module({"port": free_port(), "journal_timeout": 0}, tmp_path)
    assert rc == 1 and res["msg"] == "journal_timeout=0 must be more than 0 seconds."
