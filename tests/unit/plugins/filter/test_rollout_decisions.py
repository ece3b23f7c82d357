# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's decisions (filters gpufleet.vllm.rollout_*), as tables of cases."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.rollout import (
    rollout_batches, rollout_cutover_state, rollout_failed_hosts, rollout_host_plan, rollout_line, rollout_pending,
    rollout_rows,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.rollout import row_cells
from ansible_collections.gpufleet.vllm.plugins.filter.fleet import kv_cache_policy

CLEAN = {"build": "0.33.0", "pristine": True, "config_keys_present": 0, "config_policy": "strip", "config_errors": [],
         "dumps": 0, "environment": "/opt/vllm/envs/vllm-0.33.0-20261201T101500Z"}


def rollout_needs(result, *args, **kwargs):
    """What the plan of gpufleet.vllm.rollout_host_plan says the host needs."""
    return rollout_host_plan(result, *args, **kwargs)["needs"]


def plan(**row):
    return {"row": dict(CLEAN, **row), "drift": []}


NEEDS = [
    # (case, plan row changes, rollout_needs keyword arguments, expected needs)
    ("converged", {}, {}, []),
    ("other build", {"build": "0.32.0"}, {}, ["build 0.33.0 (from 0.32.0)"]),
    ("modified files", {"pristine": False}, {}, ["build 0.33.0 (files modified)"]),
    ("no build", {"build": "", "pristine": False}, {}, ["build 0.33.0 (no build found)"]),
    ("forced build", {}, {"force_build": True}, ["build 0.33.0 (forced)"]),
    ("keys to strip", {"config_keys_present": 2}, {}, ["config (2 keys)"]),
    ("one key", {"config_keys_present": 1}, {}, ["config (1 key)"]),
    ("keys kept by policy", {"config_keys_present": 2, "config_policy": "keep"}, {}, []),
    ("config error", {"config_errors": ["/m/config.json is missing"]}, {}, ["config (/m/config.json is missing)"]),
    ("unit file", {}, {"unit_changed": True}, ["unit file"]),
    ("unit stopped", {}, {"unit_active": False}, ["start (unit not running)"]),
    ("not ready", {}, {"ready": {"ready": False, "msg": "connection refused"}}, ["readiness (connection refused)"]),
    ("ready", {}, {"ready": {"ready": True}}, []),
    ("dumps", {"dumps": 35}, {}, ["dumps (35)"]),
    ("forced restart", {}, {"force_restart": "true"}, ["restart (forced)"]),
    ("benchmark always", {}, {"benchmark": "always"}, ["benchmark (always)"]),
    ("dirty host, in step order", {"build": "0.32.0", "pristine": False, "config_keys_present": 2, "dumps": 35},
     {"unit_changed": True}, ["build 0.33.0 (from 0.32.0)", "config (2 keys)", "unit file", "dumps (35)"]),
]


@pytest.mark.parametrize("case, row, kwargs, expected", NEEDS, ids=[case[0] for case in NEEDS])
def test_rollout_needs(case, row, kwargs, expected):
    assert rollout_needs(plan(**row), target_version="0.33.0", **kwargs) == expected


def test_a_long_readiness_message_is_cut_and_kept_on_one_line():
    needs = rollout_needs(plan(), "0.33.0", ready={"ready": False, "msg": "refused\n" + "x" * 200})
    assert needs[0].startswith("readiness (refused\\n") and needs[0].endswith("...)") and len(needs[0]) < 100


@pytest.mark.parametrize("bad", [None, "text", {"msg": "Unsupported parameters"}])
def test_needs_of_something_that_is_not_a_drift_result_fail_clearly(bad):
    with pytest.raises(AnsibleFilterError, match="drift_info result"):
        rollout_needs(bad, "0.33.0")


def test_an_unknown_benchmark_setting_is_refused():
    with pytest.raises(AnsibleFilterError, match="rollout_benchmark must be one of changed, always, never"):
        rollout_needs(plan(), "0.33.0", benchmark="sometimes")


FORWARD = {"cutover": True, "state": "started", "downtime_seconds": "21.8", "load_seconds": 20.1, "switched": True,
           "link_after": "/opt/vllm/envs/vllm-0.33.0-20261204T101500Z"}
HOSTVARS = {
    "gpu-a01": {"rollout_needs": ["dumps (35)"], "rollout_batch": ["gpu-a01"],
                "rollout_plan": plan(build="0.32.0", pristine=False), "service_result": FORWARD,
                "rollout_integrity": {"version": "0.33.0", "pristine": True},
                "debug_artifacts_result": {"count": 35, "bytes_freed_human": "65.3 MB"},
                "sm120_config_result": {"removed_count": 2, "changed": True},
                "benchmark_result": {"single_stream_tok_s": 81.7, "peak_tok_s": 2252.0, "status": "ok"}},
    # its readiness gate failed after the switch; the cutover backwards put /root/ml-env back
    "gpu-a02": {"rollout_needs": ["dumps (35)"], "rollout_batch": ["gpu-a02"], "rollout_failed": True,
                "rollout_failure": "Stop, switch...: not ready within 60 s", "rollout_plan": plan(),
                "rollout_cutover": {"cutover": True, "state": "failed", "stopped": True, "switched": True},
                "rollout_reached": {"stopped": True, "link_moved": True},
                "service_result": {"cutover": True, "state": "started", "link_after": "/root/ml-env", "switched": True},
                "debug_artifacts_result": {"count": 0, "bytes_freed_human": "0 B"}},
    "gpu-a03": {"rollout_needs": ["dumps (35)"], "rollout_batch": [], "rollout_plan": plan(dumps=35),
                "debug_artifacts_result": {"count": 35}, "sm120_config_result": {"removed_count": 2}},
    "gpu-a04": {"rollout_needs": [], "rollout_batch": [], "rollout_plan": plan()},
    # failed after its cutover; the rollback's cutover failed too
    "gpu-a05": {"rollout_needs": ["x"], "rollout_batch": ["gpu-a05"], "rollout_failed": True,
                "rollout_failure": "Benchmark: regression", "rollout_plan": plan(), "rollout_cutover": FORWARD,
                "rollout_reached": {"stopped": True, "link_moved": True},
                "service_result": {"cutover": True, "state": "failed", "msg": "unit failed"}},
    # failed in the stage, before any stop: nothing to roll back
    "gpu-a06": {"rollout_needs": ["x"], "rollout_batch": ["gpu-a06"], "rollout_failed": True,
                "rollout_failure": "stage: no room", "rollout_plan": plan(), "rollout_cutover": {},
                "rollout_reached": {"stopped": False, "link_moved": False}, "service_result": {}},
    # a restart without a cutover (the unit was only started): unchanged, no downtime
    "gpu-a07": {"rollout_needs": ["dumps (3)"], "rollout_batch": ["gpu-a07"], "rollout_plan": plan(),
                "service_result": {"cutover": False, "state": "started"}, "rollout_integrity": {"version": "0.33.0", "pristine": True}},
}


def test_rows_say_each_host_s_fate():
    rows = {row["host"]: row for row in rollout_rows(list(HOSTVARS), HOSTVARS)}
    assert [rows[h]["status"] for h in HOSTVARS] == [
        "updated", "FAILED, rolled back", "untouched", "unchanged", "FAILED", "FAILED", "unchanged"]
    one = rows["gpu-a01"]
    assert (one["build_before"], one["pristine_before"], one["build_after"], one["pristine"]) == ("0.32.0", False, "0.33.0", True)
    assert (one["downtime_s"], one["load_s"], one["artifacts_removed"], one["config_keys_removed"]) == (21.8, 20.1, 35, 2)
    assert one["serving_env"].endswith("20261204T101500Z") and one["benchmark"] == "ok"
    assert rows["gpu-a02"]["serving_env"] == "/root/ml-env"
    assert rows["gpu-a02"]["build_tried"] == ""  # (it never got to its integrity check)
    # an untouched host's dumps and keys are the plan's, not done
    assert rows["gpu-a03"]["artifacts_removed"] is None and rows["gpu-a03"]["config_keys_removed"] is None
    # a converged host: the plan's reading is the state after too
    assert rows["gpu-a04"]["build_after"] == "0.33.0" and rows["gpu-a04"]["pristine"] is True
    assert rows["gpu-a05"]["failure"] == "Benchmark: regression; the rollback failed as well: unit failed"
    assert rows["gpu-a05"]["downtime_s"] == 21.8  # the forward cutover's, not the rollback's
    assert rows["gpu-a06"]["failure"] == "stage: no room" and rows["gpu-a06"]["downtime_s"] is None
    assert rows["gpu-a07"]["downtime_s"] is None


def test_pending_and_failed_hosts_keep_the_targets_order_and_ignore_others():
    targets = ["gpu-a04", "gpu-a03", "gpu-a01", "not-in-hostvars"]
    assert rollout_pending(targets, HOSTVARS) == ["gpu-a03", "gpu-a01"]
    assert rollout_failed_hosts(list(HOSTVARS), HOSTVARS) == ["gpu-a02", "gpu-a05", "gpu-a06"]


def test_batches_in_the_order_they_ran():
    hostvars = {"a": {"rollout_batch": ["a"]}, "b": {"rollout_batch": ["b", "c"]}, "c": {"rollout_batch": ["b", "c"]},
                "d": {"rollout_batch": []}}
    assert rollout_batches(["a", "b", "c", "d"], hostvars) == [["a"], ["b", "c"]]


CUTOVER = [
    # (case, the service role's result when the failure was caught, expected)
    ("failed before any cutover", {}, {"stopped": False, "link_moved": False}),
    ("a start without cutover", {"cutover": False, "state": "started"}, {"stopped": False, "link_moved": False}),
    ("cutover failed after the switch", {"cutover": True, "state": "failed", "stopped": True, "switched": True},
     {"stopped": True, "link_moved": True}),
    ("cutover failed before the stop", {"cutover": True, "state": "failed", "stopped": False, "switched": False},
     {"stopped": False, "link_moved": False}),
    ("cutover did not answer", {"cutover": True, "state": "failed"}, {"stopped": True, "link_moved": False}),
    ("a later step failed after a cutover", {"cutover": True, "state": "started", "switched": True},
     {"stopped": True, "link_moved": True}),
    ("a later step failed after a restart without switch", {"cutover": True, "state": "started", "switched": False},
     {"stopped": True, "link_moved": False}),
    ("not a dict", None, {"stopped": False, "link_moved": False}),
]


@pytest.mark.parametrize("case, result, expected", CUTOVER, ids=[case[0] for case in CUTOVER])
def test_how_far_a_failed_host_got(case, result, expected):
    got = rollout_cutover_state(result)
    assert dict((key, got[key]) for key in expected) == expected
    assert got["switch_back"] == []


SWITCH = {"cutover": True, "state": "failed", "unit": "vllm-minimax-m25.service", "stopped": True, "switched": True,
          "was_active": False,
          "others": [{"unit": "vllm-kimi-k25.service", "was_active": True, "stopped": True},
                     {"unit": "vllm-old.service", "was_active": False, "stopped": True},
                     {"unit": "vllm-other.service", "was_active": True, "stopped": False}, "junk", {"unit": None}]}


def test_a_failed_model_switch_goes_back_to_the_units_that_ran_before_it():
    assert rollout_cutover_state(SWITCH) == {
        "stopped": True, "link_moved": True, "unit": "vllm-minimax-m25.service",
        # (one the cutover failed to stop ran and may still run: the rollback stops and starts it through its gates)
        "switch_back": ["vllm-kimi-k25.service", "vllm-other.service"]}
    # the unit itself served (a build update; another unit on its GPUs was only in the way): it is what comes back
    assert rollout_cutover_state(dict(SWITCH, was_active=True))["switch_back"] == []
    # (a cutover that did not answer: what ran is not known, the unit comes back)
    assert rollout_cutover_state(dict(SWITCH, was_active=None, others=[]))["switch_back"] == []
    # a switch that failed before anything was stopped has nothing to go back to
    assert rollout_cutover_state(dict(SWITCH, stopped=False))["switch_back"] == []
    assert rollout_cutover_state(dict(SWITCH, others="x"))["switch_back"] == []


def test_kv_cache_policy_is_the_roles_decision():
    assert [kv_cache_policy(False), kv_cache_policy(True), kv_cache_policy("yes", "true"), kv_cache_policy(False, True)] == [
        "keep", "auto", "strip", "keep"]


# --- with a fleet lock ------------------------------------------------------------------------------------------

LOCKED_NEEDS = [
    ("the lock's set, all pristine", {"lock": "same"}, []),
    ("vLLM pristine, a dependency at another version",
     {"lock": "differs: 1 other version"}, ["build 0.33.0 (packages differs: 1 other version)"]),
    ("vLLM pristine, a dependency edited", {"lock": "same", "packages_not_pristine": ["lark"]},
     ["build 0.33.0 (lark not pristine)"]),
    ("the packages could not be read", {"lock": "not read: timeout"}, ["build 0.33.0 (packages not read: timeout)"]),
    ("vLLM modified wins the reason", {"pristine": False, "lock": "differs: 1 missing"}, ["build 0.33.0 (files modified)"]),
    ("another build", {"build": "0.32.0", "lock": "differs: 2 other version"}, ["build 0.33.0 (from 0.32.0)"]),
]


@pytest.mark.parametrize("case, row, expected", LOCKED_NEEDS, ids=[case[0] for case in LOCKED_NEEDS])
def test_rollout_needs_with_a_lock(case, row, expected):
    assert rollout_needs(plan(**row), target_version="0.33.0") == expected


LOCK_INFO = {"short": "3f9a0c2b71de", "count": 4, "fingerprint": "sha256:3f9a0c2b71de" + "0" * 52,
             "pins": {"vllm": "0.33.1.dev7+gcb9a7e83f501", "lark": "1.3.1", "gguf": "0.19.0", "nvidia-ml-py": "13.615.71"}}
BEFORE = {"distributions": [{"name": "vllm", "version": "0.33.0", "source": "index"},
                            {"name": "lark", "version": "1.2.2", "source": "index"},
                            {"name": "nvidia-ml-py", "version": "13.615.71", "source": "index"}]}


def locked_host(proof, status_facts):
    # (the proof after the start: package_integrity_info with the lock's packages, its environment_check)
    facts = dict(HOSTVARS["gpu-a01"], reinstall_lock_info=LOCK_INFO)
    facts["rollout_integrity"] = dict(facts.get("rollout_integrity") or {}, environment_check=proof)
    facts["rollout_plan"] = dict(plan(build="0.33.0", pristine=False), packages=BEFORE)
    facts.update(status_facts)
    return facts


def test_rows_carry_the_lock_the_proof_and_the_dependency_diff():
    hostvars = {
        "a": locked_host({"fingerprint": LOCK_INFO["fingerprint"], "matches": True, "not_pristine_total": 0}, {}),
        "b": locked_host({"fingerprint": "sha256:" + "1" * 64, "matches": False, "not_pristine_total": 0}, {}),
        "c": dict(HOSTVARS["gpu-a04"], reinstall_lock_info=LOCK_INFO,
                  rollout_plan=dict(plan(lock="same"), packages=BEFORE)),
        "d": dict(HOSTVARS["gpu-a04"]),
    }
    rows = dict((row["host"], row) for row in rollout_rows(list(hostvars), hostvars))
    assert rows["a"]["lock"] == "3f9a0c2b71de" and rows["a"]["lock_packages"] == 4
    assert rows["a"]["environment_after"] == "same as the lock"
    assert rows["a"]["dependencies"]["counts"] == "2 changed, 1 added (1 unchanged)"
    assert rows["a"]["dependencies"]["lines"] == ["lark 1.2.2 -> 1.3.1", "vllm 0.33.0 -> 0.33.1.dev7+gcb9a7e83f501",
                                                  "+ gguf 0.19.0"]
    assert rows["b"]["environment_after"] == "DIFFERS from the lock"
    # a converged host's plan said it holds the lock; nothing changed on it
    assert rows["c"]["environment_after"] == "same as the lock" and rows["c"]["dependencies"] is None
    assert (rows["d"]["lock"], rows["d"]["environment_after"], rows["d"]["dependencies"]) == ("", None, None)


# --- the audit's fingerprint column -------------------------------------------------------------------------------

def fp_row(host, fingerprint, lock="", drift=()):
    return {"host": host, "fingerprint": fingerprint, "packages": 137, "lock": lock, "drift": list(drift)}


def test_the_host_that_differs_from_the_fleet_is_flagged_and_drifts():
    from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_fingerprints
    rows = audit_fingerprints([fp_row("a", "aaa"), fp_row("b", "aaa", drift=["dumps"]), fp_row("c", "ccc", drift=["integrity"]),
                               {"host": "d", "drift": ["integrity"], "fingerprint": ""}])
    assert [r.get("fleet") for r in rows] == ["same as 2 of 3 hosts", "same as 2 of 3 hosts",
                                              "DIFFERS from the fleet (2 of 3 hosts hold aaa)", None]
    assert [r["drift"] for r in rows] == [[], ["dumps"], ["integrity", "packages"], ["integrity"]]


def test_a_fleet_without_a_majority_flags_every_host_and_the_lock_decides_too():
    from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_fingerprints
    rows = audit_fingerprints([fp_row("a", "aaa"), fp_row("b", "bbb")])
    assert rows[0]["fleet"].startswith("DIFFERS: no fingerprint is held by most hosts")
    assert all("packages" in r["drift"] for r in rows)
    # with a lock, the lock decides: the canary on the lock is no drift though the other hosts lag behind it
    rows = audit_fingerprints([fp_row("canary", "new", lock="same"), fp_row("b", "old", lock="differs: 1 other version"),
                               fp_row("c", "old", lock="differs: 1 other version")])
    assert [r["lock_note"] for r in rows] == ["= lock", "lock differs: 1 other version", "lock differs: 1 other version"]
    assert rows[0]["fleet"] == "DIFFERS from the fleet (2 of 3 hosts hold old)"
    assert [r["drift"] for r in rows] == [[], ["packages"], ["packages"]]
    same = audit_fingerprints([fp_row("a", "aaa", lock="same"), fp_row("b", "aaa", lock="same")])
    assert [r["fleet"] for r in same] == ["same as all 2 hosts read"] * 2 and [r["drift"] for r in same] == [[], []]
    assert audit_fingerprints([fp_row("a", "aaa")])[0]["fleet"] == ""
    with pytest.raises(AnsibleFilterError, match="expects the audit's rows"):
        audit_fingerprints("rows")


def test_the_audit_packages_cell_shows_a_hosts_names_as_text():
    from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_fingerprints
    row = dict(fp_row("a", "aaa"), packages_not_pristine=["evil | <img src=x>", "[x](http://e)"])
    cell = audit_fingerprints([row])[0]["packages_cell"]
    import re
    # every character Markdown reads as markup is escaped: no cell break, no HTML, no link
    assert not re.search(r"(?<!\\)[|<>]|(?<!\\)\]\(", cell), cell
    assert cell.startswith("aaa (137); not pristine: evil")
    assert audit_fingerprints([{"host": "b", "fingerprint": ""}])[0]["packages_cell"] == "-"


def test_a_host_rolled_back_after_its_proof_is_not_said_to_hold_the_lock():
    facts = locked_host({"fingerprint": LOCK_INFO["fingerprint"], "matches": True, "not_pristine_total": 0},
                        dict((k, HOSTVARS["gpu-a02"][k]) for k in ("rollout_failed", "rollout_failure", "rollout_cutover",
                                                                   "rollout_reached", "service_result")))
    row = rollout_rows(["x"], {"x": facts})[0]
    assert row["status"] == "FAILED, rolled back"
    assert row["environment_after"] is None and row["dependencies"] is None


def test_the_package_cells_leave_out_vllm_and_the_accepted_ones():
    from ansible_collections.gpufleet.vllm.plugins.module_utils.drift import packages_cells
    packages = {"fingerprint": "sha256:" + "a" * 64, "count": 137, "matches": False, "missing": [],
                "extra": [{"name": "debugpy", "version": "1.8"}], "different": [{"name": "lark"}],
                "not_pristine": [{"name": "vllm"}, {"name": "pynvvideocodec"}, {"name": "lark"}],
                "not_pristine_total": 4}
    cells = packages_cells(packages, "vllm", accepted=["PyNvVideoCodec"])
    assert cells == {"fingerprint": "a" * 12, "packages": 137, "packages_not_pristine": ["lark", "and 1 more"],
                     "lock": "differs: 1 other version, 1 not in the lock"}
    assert packages_cells(None, "vllm", "timeout")["lock"] == "not read: timeout"


def test_a_host_rolled_back_serves_its_build_before_and_names_the_build_it_tried():
    # the benchmark gate failed the new build after its integrity check; the rollback started the old one
    facts = dict(HOSTVARS["gpu-a02"], rollout_plan=plan(build="0.32.0"), rollout_failure="Benchmark regression",
                 rollout_integrity={"version": "0.33.0", "pristine": False},
                 benchmark_result={"single_stream_tok_s": 20.2, "peak_tok_s": 20.0, "status": "regressed"})
    row = rollout_rows(["gpu-a02"], {"gpu-a02": facts})[0]
    assert row["status"] == "FAILED, rolled back"
    assert (row["build_before"], row["build_after"], row["build_tried"]) == ("0.32.0", "0.32.0", "0.33.0")
    # "pristine" is the build it serves; the build it tried has its own
    assert (row["pristine"], row["pristine_tried"]) == (None, False)
    assert rollout_line(row).startswith("gpu-a02: FAILED, rolled back, vllm 0.32.0, tried 0.33.0 (NOT pristine), ")
    cells = row_cells(row)
    assert cells[4] == "0.32.0 (tried 0.33.0)" and cells[8] == "-"


def test_a_host_that_failed_before_its_integrity_check_names_the_run_s_target_as_tried():
    # VRAM not freed after the stop: no integrity check ran; the run's target is what it tried
    facts = dict(HOSTVARS["gpu-a02"], rollout_plan=plan(build="0.32.0"), reinstall_target_version="0.33.0")
    row = rollout_rows(["gpu-a02"], {"gpu-a02": facts})[0]
    assert (row["build_after"], row["build_tried"], row["pristine_tried"]) == ("0.32.0", "0.33.0", None)
    assert rollout_line(row).startswith("gpu-a02: FAILED, rolled back, vllm 0.32.0, tried 0.33.0, ")


def test_a_host_whose_rollback_failed_serves_nothing_and_one_failed_before_its_stop_its_old_build():
    failed = rollout_rows(["gpu-a05"], {"gpu-a05": dict(
        HOSTVARS["gpu-a05"], rollout_plan=plan(build="0.32.0"), rollout_integrity={"version": "0.33.0"})})[0]
    assert (failed["status"], failed["build_after"], failed["build_tried"]) == ("FAILED", "", "0.33.0")
    assert failed["pristine"] is None
    # failed in its stage: never stopped, still serving its build before as it was
    early = rollout_rows(["gpu-a06"], HOSTVARS)[0]
    assert (early["status"], early["build_after"], early["build_tried"], early["pristine"]) == (
        "FAILED", "0.33.0", "", True)
    # proven, then not put back at the balancer (no rollback): it serves the build it was updated to
    proven = rollout_rows(["x"], {"x": dict(HOSTVARS["gpu-a01"], rollout_failed=True, rollout_cutover=FORWARD)})[0]
    assert (proven["status"], proven["build_after"], proven["build_tried"]) == ("FAILED", "0.33.0", "")


def test_a_model_switch_is_named_in_the_row_and_its_line_unless_rolled_back():
    others = [{"unit": "vllm-kimi-k25.service", "was_active": True, "stopped": True},
              {"unit": "vllm-spare.service", "was_active": False, "stopped": True}]
    updated = dict(HOSTVARS["gpu-a01"], service_result=dict(HOSTVARS["gpu-a01"]["service_result"], others=others))
    rolled = dict(HOSTVARS["gpu-a02"], rollout_cutover=dict(HOSTVARS["gpu-a02"]["rollout_cutover"], others=others))
    rows = rollout_rows(["a", "b"], {"a": updated, "b": rolled})
    assert rows[0]["switched_from"] == ["vllm-kimi-k25.service"]
    assert "model switch from vllm-kimi-k25.service, downtime" in rollout_line(rows[0])
    assert rows[1]["status"] == "FAILED, rolled back" and rows[1]["switched_from"] == []


@pytest.mark.parametrize("case,service_result,integrity,after", [
    # the first stop's own result (vllm_cutover start=false: not a cutover), the install failed after it
    ("install failed after the stop", {"cutover": False, "state": "stopped", "stopped": True, "stop_began": 1.0}, {}, ""),
    # the in-place cutover failed at its readiness gate: it tried the new build, nothing went back
    ("start failed", {"cutover": True, "state": "failed", "failed_step": "ready", "stopped": True, "switched": False},
     {}, ""),
    # proven, then the benchmark gate failed: it serves the new build, out of rotation
    ("benchmark failed", FORWARD, {"version": "0.33.0", "pristine": True}, "0.33.0"),
])
def test_a_host_reinstalled_in_place_that_failed_is_not_rolled_back_and_does_not_serve_again(
        case, service_result, integrity, after):
    from ansible_collections.gpufleet.vllm.plugins.filter.rollout import rollout_serves_again
    facts = dict(HOSTVARS["gpu-a01"], rollout_failed=True, rollout_in_place_began=True, service_result=service_result,
                 rollout_cutover=service_result, rollout_integrity=integrity, rollout_plan=plan(build="0.32.0"),
                 rollout_reached={"stopped": True, "link_moved": False, "unit": "", "switch_back": []},
                 rollout_failure="it failed. Reinstalled in place: there is nothing to roll back to.")
    row = rollout_rows(["x"], {"x": facts})[0]
    assert row["status"] == "FAILED", case
    assert row["build_after"] == after, case
    assert "the rollback failed as well" not in row["failure"], case
    assert rollout_serves_again(facts) is False, case
