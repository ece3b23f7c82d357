# SPDX-License-Identifier: GPL-3.0-or-later
"""A host whose GPUs are not healthy is skipped: never in a batch, listed with the reason, failing the run's end."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_line
from ansible_collections.gpufleet.vllm.plugins.filter.rollout import (
    rollout_host_plan, rollout_line, rollout_pending, rollout_rows,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.rollout import plan_line as rollout_plan_line


def rollout_skip(result):
    """Why the plan of gpufleet.vllm.rollout_host_plan skips the host."""
    return rollout_host_plan(result)["skipped"]


LINE = "GPU 3 (bus 5D): PCIe link at Gen5 x8, the card can do Gen5 x16: a degraded link starves all-reduce over PCIe"
ROW = {"build": "0.33.0", "pristine": True, "config_keys_present": 0, "config_policy": "strip", "config_errors": [],
       "dumps": 0, "environment": "/opt/vllm/envs/vllm-0.33.0"}


def plan(health, **row):
    return {"row": dict(ROW, **row), "drift": [], "health": health}


HEALTHY = {"healthy": True, "nvml_available": True, "summary": "all 8 GPUs healthy"}
SICK = {"healthy": False, "nvml_available": True, "summary": "1 of 8 GPUs unhealthy (GPU 3)"}
UNKNOWN = {"healthy": False, "nvml_available": False, "summary": "GPU health unknown: NVML did not answer within 60 s"}

SKIP = [
    ("not checked", plan(None), ""),
    ("healthy", plan(HEALTHY, gpu_health="all 8 GPUs healthy"), ""),
    ("unhealthy", plan(SICK, gpu_health=SICK["summary"], health_problems=[LINE]),
     "GPUs not healthy: 1 of 8 GPUs unhealthy (GPU 3): " + LINE),
    ("two problems", plan(SICK, gpu_health=SICK["summary"], health_problems=["a", "b"]),
     "GPUs not healthy: 1 of 8 GPUs unhealthy (GPU 3): a; b"),
    ("unknown", plan(UNKNOWN, gpu_health=UNKNOWN["summary"], health_problems=[UNKNOWN["summary"]]),
     "GPU health could not be read (GPU health unknown: NVML did not answer within 60 s)"),
    ("hostile text on one line", plan(SICK, gpu_health="x\n\x1b[31m", health_problems=["a\nb"]),
     "GPUs not healthy: x\\n\\x1b[31m: a\\nb"),
]


@pytest.mark.parametrize("case, result, expected", SKIP, ids=[c[0] for c in SKIP])
def test_rollout_skip(case, result, expected):
    assert rollout_skip(result) == expected


@pytest.mark.parametrize("bad", [None, "text", {"msg": "drift_info failed"}])
def test_skip_of_something_that_is_not_a_drift_result_fails_clearly(bad):
    with pytest.raises(AnsibleFilterError, match="rollout_host_plan: expects a gpufleet.vllm.drift_info result"):
        rollout_skip(bad)


def test_the_plan_line_says_skipped_and_what_the_host_would_have_needed():
    assert rollout_plan_line(["build 0.34.0 (from 0.33.0)"], "GPUs not healthy: x") == (
        "plan: SKIPPED, not rolled: GPUs not healthy: x (it needs: build 0.34.0 (from 0.33.0))")
    assert rollout_plan_line([], "GPUs not healthy: x") == "plan: SKIPPED, not rolled: GPUs not healthy: x"
    assert rollout_plan_line(["dumps (3)"], "") == "plan: dumps (3)"
    assert rollout_plan_line([], "", "0.33.0") == "plan: nothing (converged, serving 0.33.0)"


def test_the_host_plan_says_needs_skipped_and_its_line_in_one():
    sick = rollout_host_plan(plan(SICK), target_version="0.34.0")
    assert sick["needs"] == ["build 0.34.0 (from 0.33.0)"] and sick["skipped"].startswith("GPUs not healthy: ")
    assert sick["line"] == rollout_plan_line(sick["needs"], sick["skipped"])
    assert rollout_host_plan(plan(HEALTHY), target_version="0.33.0") == {
        "needs": [], "skipped": "", "line": "plan: nothing (converged, serving 0.33.0)"}
    assert rollout_host_plan({"row": dict(ROW, build=""), "health": None})["line"] == "plan: nothing (converged, serving ?)"


def facts(skipped="", needs=("build 0.34.0 (from 0.33.0)",), batch=()):
    return {"rollout_plan": plan(SICK if skipped else HEALTHY), "rollout_needs": list(needs), "rollout_skipped": skipped,
            "rollout_batch": list(batch), "rollout_failed": False, "rollout_reached": {}, "rollout_integrity": {}}


def test_a_skipped_host_is_never_pending_and_its_row_says_why():
    hostvars = {"a": facts(batch=["a"]), "b": facts("GPUs not healthy: " + LINE), "c": facts()}
    assert rollout_pending(["a", "b", "c"], hostvars) == ["a", "c"]
    rows = rollout_rows(["a", "b", "c"], {"a": facts(), "b": hostvars["b"], "c": facts()})
    assert [row["status"] for row in rows] == ["untouched", "SKIPPED", "untouched"]
    assert rows[1]["skipped"] == "GPUs not healthy: " + LINE and rows[0]["skipped"] == ""
    assert rows[1]["build_after"] == "0.33.0" and rows[1]["failure"] == ""
    assert rollout_report.skipped_hosts(rows) == ["b"] and rollout_report.failed_hosts(rows) == []
    line = rollout_line(rows[1])
    assert line.startswith("b: SKIPPED, vllm 0.33.0") and line.endswith("-- not rolled: GPUs not healthy: " + LINE)
    md = rollout_report.markdown(rows, [])
    assert "| b | SKIPPED |" in md
    assert "**b**: skipped, not rolled: GPUs not healthy: GPU 3 (bus 5D): " in md


def test_the_audit_line_names_the_health_verdict_and_every_problem():
    line = audit_line({"host": "h", "drift": ["health"], "build": "0.33.0", "integrity": "pristine",
                       "unit": "u", "unit_state": "active", "gpu_health": "1 of 8 GPUs unhealthy (GPU 3)",
                       "health_problems": [LINE]})
    assert line.startswith("h: DRIFT: health, vllm 0.33.0, pristine")
    assert "GPU health: 1 of 8 GPUs unhealthy (GPU 3)" in line and line.endswith(LINE)


@pytest.mark.parametrize("health, problems, expected", [
    ({"healthy": "false", "nvml_available": True, "summary": "s"}, ["a"], "GPUs not healthy: s: a"),
    ({"healthy": 1, "nvml_available": True, "summary": "s"}, ["a"], "GPUs not healthy: s: a"),
    ({"healthy": False, "nvml_available": True, "summary": "s"}, "one line", "GPUs not healthy: s: one line"),
    ("broken", [], "GPU health could not be read (the plan's health is str)"),
])
def test_only_a_health_that_says_true_lets_a_host_be_rolled(health, problems, expected):
    result = {"row": dict(ROW, gpu_health="s", health_problems=problems), "health": health}
    assert rollout_skip(result) == expected


def test_markdown_text_shows_a_hostile_process_name_as_text():
    from ansible_collections.gpufleet.vllm.plugins.filter.audit import markdown_text
    shown = markdown_text("GPU 5: pid 9 <img src=x onerror=alert(1)> [x](http://e) \x1b[31m\nline")
    # (escaped: Markdown shows the characters, makes no tag or link of them)
    assert "\x1b" not in shown and "\n" not in shown
    assert "\\<img src=x onerror=alert(1)\\>" in shown and "\\[x\\](http://e)" in shown and "\\x1b" in shown


def test_another_models_unit_that_runs_is_a_model_switch_the_plan_names():
    plan = {"row": dict(ROW, other_units=["vllm-kimi-k25.service (active, enabled)"]), "drift": ["unit"]}
    assert rollout_host_plan(plan, unit_active=False)["needs"] == [
        "model switch (stop vllm-kimi-k25.service)", "start (unit not running)"]
    unread = {"row": dict(ROW, other_units=["other units not read: systemctl show x failed"]), "drift": ["unit"]}
    assert rollout_host_plan(unread)["needs"] == []
    line = audit_line({"host": "h", "drift": ["unit"], "unit": "vllm-minimax-m25.service", "unit_state": "active",
                       "other_units": ["vllm-kimi-k25.service (inactive, enabled)"]})
    assert "vllm-minimax-m25.service active, other vLLM units: vllm-kimi-k25.service (inactive, enabled)" in line
