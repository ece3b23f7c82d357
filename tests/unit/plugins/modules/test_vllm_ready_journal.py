# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_ready: a journalctl that never answers is killed at journal_timeout; the failure comes without journal lines."""

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


def test_journal_timeout_must_be_positive(tmp_path):
    rc, res, dummy = run_module({"port": free_port(), "journal_timeout": 0}, tmp_path)
    assert rc == 1 and res["msg"] == "journal_timeout=0 must be more than 0 seconds."
