# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.drift_info: one overall timeout over every part; the parts it leaves no time for are a clean row."""

import json
import os
import re
import sys
import time

import pytest

from helpers import module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded, drift
from ansible_collections.gpufleet.vllm.plugins.modules import drift_info

UNIT = "vllm-kimi-k25.service"


@pytest.fixture
def run(capsys):
    return module_runner(drift_info.main, capsys)


def model_dir(tmp_path, name):
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"quantization_config": {"kv_cache_scheme": {"num_bits": 8}}}))
    return str(path)


def test_time_up_while_planning_configs_leaves_a_clean_row_naming_what_was_not_done(tmp_path, run, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(drift_info, "Deadline", lambda seconds: bounded.Deadline(seconds, clock=lambda: now[0]))
    real_plan = drift.plan_file

    def slow_plan(*args, **kwargs):
        now[0] += 100  # each config file takes 100 s on this host
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(drift, "plan_file", slow_plan)
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "embed_debug_tp0.pt").write_bytes(b"x")
    first, second = model_dir(tmp_path, "m1"), model_dir(tmp_path, "m2")
    rc, res = run({"venv": str(tmp_path / "no-venv"), "model_dirs": [first, second], "artifact_paths": [str(dumps)],
                   "unit": UNIT, "timeout": 150, "config_policy": "strip"})
    json.dumps(res).encode("utf-8")
    assert rc == 0 and "failed" not in res
    row = res["row"]
    limit = "the time limit of 150 s (timeout) passed before"
    assert row["config_keys_present"] == 1
    assert row["config_errors"] == ["%s not planned: %s its configs were read" % (second, limit)]
    assert row["dumps"] == 0 and row["dumps_bytes"] == "not counted: %s the dump scan" % limit
    assert row["unit_state"] == "unknown (not read: %s systemctl show %s)" % (limit, UNIT)
    assert row["gpus"] is None and "NVML not read: %s the GPUs were read" % limit in row["gpu_problems"][0]
    assert row["drift"] == ["integrity", "config", "dumps", "unit", "gpus"]
    assert [item.split(":")[0] for item in res["not_done"]] == ["config", "dumps", "unit", "gpus"]
    assert os.path.exists(str(dumps / "embed_debug_tp0.pt"))


def test_time_up_before_the_integrity_check_says_not_checked(tmp_path, monkeypatch):
    now = [0.0]
    deadline = bounded.Deadline(10, clock=lambda: now[0])
    now[0] = 11
    venv = tmp_path / "venv"
    venv.mkdir()
    res = drift.gather(None, None, venv=str(venv), deadline=deadline,
                       dumps={"paths": [str(tmp_path)], "patterns": ["x_tp*.pt"]})
    assert res["row"]["integrity"] == "not checked: the time limit of 10 s (timeout) passed before the integrity check"
    assert res["not_done"][0].startswith("integrity: not checked")
    assert res["row"]["drift"][:1] == ["integrity"]


def test_a_hanging_systemctl_is_killed_within_the_timeout(tmp_path, run, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "systemctl"
    fake.write_text("#!%s\nimport time\ntime.sleep(1000)\n" % sys.executable)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ["PATH"])
    started = time.monotonic()
    rc, res = run({"venv": str(tmp_path / "no-venv"), "artifact_paths": [str(tmp_path)], "unit": UNIT, "timeout": 2})
    assert time.monotonic() - started < 6
    assert rc == 0
    assert re.match(r"^systemctl show %s did not answer within [0-9.]+ s and was killed$" % re.escape(UNIT),
                    res["unit"]["error"]), res["unit"]
    assert res["row"]["unit_state"] == "unknown (%s)" % res["unit"]["error"]
    assert "unit" in res["row"]["drift"]


def test_timeout_out_of_range_is_refused(tmp_path, run):
    rc, res = run({"venv": str(tmp_path), "timeout": 0})
    assert rc == 1 and "timeout must be from 1 to 604800 seconds (got 0)." in res["msg"]
