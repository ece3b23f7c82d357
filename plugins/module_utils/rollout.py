# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's decisions (playbooks/rollout.yml), from the notes the playbook keeps per host.

What a host needs and whether it is skipped (its plan, from drift_info's result), which hosts go through the
batches, how far a failed cutover got and whether a failed host serves again, and the summary's rows and batches
(what module_utils/report/rollout.py writes). Pure functions; a host's notes are a dict or a hostvars entry.
The filters of plugins/filter/rollout.py call them; a wrong input raises ValueError.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpufleet.vllm.plugins.module_utils.report import dependencies as dependency_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.drift import diff_entries
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.rollout import as_int, one_line, one_line_list

BENCHMARK_WHEN = ("changed", "always", "never")
#: The most lines of one host's dependency diff in the summary (the JSON has the whole diff).
DEPENDENCY_LINES = 20


def as_bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def note(mapping, key, default=None):
    """MAPPING[KEY] for a dict or a hostvars entry; DEFAULT when missing or undefined."""
    try:
        value = mapping[key]
    except (KeyError, TypeError, IndexError):
        return default
    except Exception:  # an undefined variable in a lazy hostvars entry  # pylint: disable=broad-exception-caught
        return default
    return default if value is None and default is not None else value


def _plan_row(plan):
    """The row of a gpufleet.vllm.drift_info result; ValueError when PLAN is not one."""
    if not isinstance(plan, dict) or not isinstance(plan.get("row"), dict):
        raise ValueError("expects a gpufleet.vllm.drift_info result with a 'row', got %s"
                         % (type(plan).__name__ if not isinstance(plan, dict) else one_line(plan.get("msg", "no row"))))
    return plan["row"]


def host_plan(plan, target_version=None, unit_changed=False, unit_active=True, ready=None, force_restart=False,
              force_build=False, benchmark="changed"):
    """One host's plan, from its gpufleet.vllm.drift_info result and the unit's check: {needs, skipped, line}
    (host_needs, skip, and the pre-flight's line of them with the build it serves)."""
    row = _plan_row(plan)
    needs = host_needs(plan, target_version, unit_changed, unit_active, ready, force_restart, force_build, benchmark)
    skipped = skip(plan)
    return {"needs": needs, "skipped": skipped, "line": plan_line(needs, skipped, row.get("build") or "?")}


def host_needs(plan, target_version=None, unit_changed=False, unit_active=True, ready=None, force_restart=False,
               force_build=False, benchmark="changed"):
    """What a host needs, from one gpufleet.vllm.drift_info result (the audit's code) and the unit's check.

    One entry per reason, in the order of the rollout's steps; an empty list means converged.
    """
    row = _plan_row(plan)
    if benchmark not in BENCHMARK_WHEN:
        raise ValueError("rollout_benchmark must be one of %s, got %s" % (", ".join(BENCHMARK_WHEN), one_line(benchmark)))
    needs = []
    if as_bool(force_restart):
        needs.append("restart (forced)")
    build, pristine = row.get("build") or "", bool(row.get("pristine"))
    # with a fleet lock: the other packages must be the lock's, each pristine
    lock = str(row.get("lock") or "")
    others = list(row.get("packages_not_pristine") or [])
    packages_off = lock.startswith(("differs", "not read")) or bool(others)
    if target_version and (build != target_version or not pristine or packages_off or as_bool(force_build)):
        why = ("files modified" if build == target_version and not pristine else
               "packages %s" % one_line(lock) if build == target_version and lock.startswith(("differs", "not read")) else
               "%s not pristine" % one_line_list(others) if build == target_version and others else
               "forced" if build == target_version else
               "from %s" % one_line(build) if build else "no build found")
        needs.append("build %s (%s)" % (one_line(target_version), why))
    keys = as_int(row.get("config_keys_present"))
    if row.get("config_errors"):
        needs.append("config (%s)" % one_line_list(row["config_errors"]))
    elif keys and row.get("config_policy") == "strip":
        needs.append("config (%d key%s)" % (keys, "" if keys == 1 else "s"))
    switch_from = [one_line(line).split(" (", 1)[0] for line in row.get("other_units") or []
                   if not str(line).startswith("other units not read")]
    if switch_from:
        needs.append("model switch (stop %s)" % ", ".join(switch_from))
    if as_bool(unit_changed):
        needs.append("unit file")
    if not as_bool(unit_active):
        needs.append("start (unit not running)")
    if isinstance(ready, dict) and not ready.get("ready"):
        msg = one_line(ready.get("msg") or "no answer")
        needs.append("readiness (%s)" % (msg if len(msg) <= 80 else msg[:77] + "..."))
    dumps = as_int(row.get("dumps"))
    if dumps:
        needs.append("dumps (%d)" % dumps)
    if benchmark == "always":
        needs.append("benchmark (always)")
    return needs


def skip(plan):
    """Why a host must not be touched at all, from its gpufleet.vllm.drift_info result (the plan): its GPUs are not
    healthy, or their health could not be read. Empty when it may be rolled (or health was not checked)."""
    row = _plan_row(plan)
    health = plan.get("health")
    if health is None or isinstance(health, dict) and health.get("healthy") is True:
        return ""
    if not isinstance(health, dict):
        return "GPU health could not be read (the plan's health is %s)" % one_line(type(health).__name__)
    problems = row.get("health_problems") or []
    problems = [one_line(line) for line in (problems if isinstance(problems, (list, tuple)) else [problems])]
    verdict = one_line(row.get("gpu_health") or health.get("summary") or "GPU health unknown")
    if not health.get("nvml_available"):
        return "GPU health could not be read (%s)" % verdict
    return "GPUs not healthy: %s%s" % (verdict, ": " + "; ".join(problems) if problems else "")


def plan_line(needs, skipped="", serving=""):
    """The pre-flight's line of one host's plan: what it needs, SKIPPED and why, or converged and what it serves."""
    needs = [one_line(need) for need in needs or []]
    if skipped:
        return "plan: SKIPPED, not rolled: %s%s" % (one_line(skipped), " (it needs: %s)" % ", ".join(needs) if needs else "")
    if needs:
        return "plan: %s" % ", ".join(needs)
    return "plan: nothing (converged, serving %s)" % (one_line(serving) or "?")


def pending(targets, hostvars):
    """The TARGETS (in their order) whose plan says they need something and that are not skipped."""
    return [host for host in targets or [] if host in hostvars and note(hostvars[host], "rollout_needs", [])
            and not note(hostvars[host], "rollout_skipped", "")]


def failed_hosts(hosts, hostvars):
    """The HOSTS whose rollout failed in this run."""
    return [host for host in hosts or [] if host in hostvars and as_bool(note(hostvars[host], "rollout_failed", False))]


def cutover_state(service_result):
    """How far a host got before a failure: was the server stopped, was the link moved, which unit failed and, for a
    model switch, which other models' units ran before it (``switch_back``: what the rollback starts again).

    SERVICE_RESULT is the service role's result when the failure was caught: a cutover's (module
    vllm_cutover) says so with cutover=true, and with state=failed how far it got (a result without
    "stopped" is a cutover that did not answer: assume the server was stopped).
    """
    result = service_result if isinstance(service_result, dict) else {}
    if not as_bool(result.get("cutover")):
        return {"stopped": False, "link_moved": False, "unit": "", "switch_back": []}
    stopped = as_bool(result.get("stopped", True)) if result.get("state") == "failed" else True
    # a model switch: the unit did not run, the other models' units that ran before it (the cutover's stop_units)
    # start again; when the unit itself ran, it is what served and what starts again
    others = result.get("others") if isinstance(result.get("others"), list) else []
    switch_back = [str(o.get("unit")) for o in others
                   if isinstance(o, dict) and o.get("unit") and as_bool(o.get("was_active"))] if (
        stopped and not as_bool(result.get("was_active"))) else []
    return {"stopped": stopped, "link_moved": as_bool(result.get("switched")), "unit": str(result.get("unit") or ""),
            "switch_back": switch_back}


def fate(facts):
    """(the forward cutover's result, rolled back, the rollback's failure) from a host's notes."""
    service = note(facts, "service_result", {}) or {}
    if not as_bool(note(facts, "rollout_failed", False)):
        return (service if as_bool(service.get("cutover")) else {}), False, ""
    forward = note(facts, "rollout_cutover", {}) or {}
    forward = forward if as_bool(forward.get("cutover")) else {}
    if not (note(facts, "rollout_reached", {}) or {}).get("stopped"):
        return forward, False, ""
    # (reinstalled in place: nothing to roll back to, no rollback ran; the failure says so)
    if as_bool(note(facts, "rollout_in_place_began", False)):
        return forward, False, ""
    if service == (note(facts, "rollout_cutover", {}) or {}):
        return forward, False, "the rollback did not reach its cutover"
    if as_bool(service.get("cutover")) and service.get("state") == "started":
        return forward, True, ""
    return forward, False, one_line(service.get("msg") or "no message")


def host_status(facts):
    """The summary's status of one host from its notes (FACTS: a dict or a hostvars entry)."""
    if note(facts, "rollout_skipped", ""):
        return "SKIPPED"
    forward, rolled_back, dummy = fate(facts)
    if rolled_back:
        return "FAILED, rolled back"
    if as_bool(note(facts, "rollout_failed", False)):
        return "FAILED"
    if not note(facts, "rollout_needs", []):
        return "unchanged"
    if not note(facts, "rollout_batch", []):
        return "untouched"
    return "updated" if forward else "unchanged"


def serves_again(facts):
    """Whether a failed host serves again after its rescue: never stopped (its old build still runs), or the rollback's
    cutover started the previous build (ready, VRAM loaded). Only such a host goes back in rotation."""
    if not (note(facts, "rollout_reached", {}) or {}).get("stopped"):
        return True
    dummy, rolled_back, dummy2 = fate(facts)
    return rolled_back


def _balancer_cells(facts):
    """The load balancer's part of a row: whether the host left the rotation, its drain time, the requests in flight
    at its stop (0 unless forced) and how long it was out of rotation."""
    result = note(facts, "balancer_result", {}) or {}
    if not isinstance(result, dict) or not result.get("type"):
        return {"balancer": None, "drain_s": None, "inflight_at_stop": None, "out_of_rotation_s": None,
                "back_in_rotation": None, "was_out": None}
    inflight = result.get("inflight_at_stop")
    try:
        inflight = int(inflight) if inflight is not None else None
    except (TypeError, ValueError):
        inflight = None
    return {
        "balancer": str(result.get("type")),
        "drain_s": _num_or_none(result.get("drain_seconds")) if result.get("taken_out") else None,
        "inflight_at_stop": inflight,
        "out_of_rotation_s": _num_or_none(result.get("out_of_rotation_seconds")),
        "back_in_rotation": bool(result.get("put_back")) if result.get("taken_out") else None,
        # the operator had it in maintenance before: restarted without a drain, left there
        "was_out": True if result.get("was_out") else None,
    }


def _num_or_none(value):
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _builds(facts, status, before, integrity, plan_row, rollback_failure):
    """(build after, build tried, pristine after) of a row: the build a host serves after the run.

    A host stopped that failed serves its build before again (rolled back) or
    nothing (the rollback failed too): the build it tried is the one its
    integrity check read, else the run's target. A host that failed before
    its stop, or was skipped (never touched), still serves its build before.
    """
    if status == "FAILED, rolled back" or rollback_failure:
        tried = _text(integrity.get("version")) or _text(note(facts, "reinstall_target_version", ""))
        after = before if status == "FAILED, rolled back" else ""
        return after, ("" if tried == before else tried), None
    reached = note(facts, "rollout_reached", None)
    if status == "SKIPPED" or status == "FAILED" and isinstance(reached, dict) and not reached.get("stopped"):
        return before, "", plan_row.get("pristine") if plan_row else None
    after = integrity.get("version") or (before if status == "unchanged" else "")
    pristine = integrity.get("pristine") if integrity else (
        plan_row.get("pristine") if status == "unchanged" and plan_row else None)
    return after, "", pristine


def _text(value):
    return value if isinstance(value, str) else ""


def summary_row(host, facts):
    """One row of the summary (summary.json) for HOST from its notes."""
    status = host_status(facts)
    plan_row = note(note(facts, "rollout_plan", {}) or {}, "row", {}) or {}
    # what the plan read (drift_info) is the state before; a batch's integrity check is the state after
    integrity = note(facts, "rollout_integrity", {}) or {}
    cutover, dummy, rollback_failure = fate(facts)
    service = note(facts, "service_result", {}) or {}
    done = status not in ("untouched",) and bool(note(facts, "rollout_batch", []))
    dumps = note(facts, "debug_artifacts_result", {}) or {} if done else {}
    config = note(facts, "sm120_config_result", {}) or {} if done else {}
    bench = note(facts, "benchmark_result", {}) or {}
    rolled_back = status == "FAILED, rolled back"
    failure = note(facts, "rollout_failure", "") or ""
    if rollback_failure:
        failure = "%s; the rollback failed as well: %s" % (failure, rollback_failure)
    before = plan_row.get("build") or ""
    after, tried, pristine = _builds(facts, status, before, integrity, plan_row, rollback_failure)
    # the plan's diffs of the modified files, as the pre-flight wrote them (diffs/<host>/...)
    plan_diffs = note(note(facts, "rollout_plan", {}) or {}, "diffs", {}) or {}
    diffs = diff_entries([(host, dict(plan_diffs))]) if isinstance(plan_diffs, dict) else []
    row = {
        "host": host,
        "status": status,
        "needed": list(note(facts, "rollout_needs", []) or []),
        "build_before": before,
        "pristine_before": plan_row.get("pristine") if plan_row else None,
        "build_after": after,
        "build_tried": tried,
        "pristine_tried": integrity.get("pristine") if tried and integrity else None,
        "serving_env": (service.get("link_after") if rolled_back else cutover.get("link_after")) or plan_row.get("environment") or "",
        # a model switch: the other models' units the cutover stopped (a rolled-back host serves them again)
        "switched_from": [] if rolled_back else [
            str(o.get("unit")) for o in cutover.get("others") or [] if isinstance(o, dict) and o.get("was_active")
            and o.get("stopped")],
        "downtime_s": _num_or_none(cutover.get("downtime_seconds")),
        "load_s": _num_or_none(cutover.get("load_seconds")),
        "artifacts_removed": dumps.get("count") if done and dumps else None,
        "artifacts_bytes": dumps.get("bytes_freed_human", "") if done and dumps else "",
        "config_keys_removed": config.get("removed_count") if done and config else None,
        # the SM120 decision in a few words (which build, which row of fleet_sm120_fp8_kv_cache_builds) and in full
        "config_policy": config.get("summary") or "" if done and config else "",
        "config_reason": config.get("reason") or "" if done and config else "",
        "pristine": pristine,
        "single_stream_tok_s": _num_or_none(bench.get("single_stream_tok_s")),
        "peak_tok_s": _num_or_none(bench.get("peak_tok_s")),
        "benchmark": bench.get("status") or None,
        "failure": failure,
        "skipped": _text(note(facts, "rollout_skipped", "")),
        "diffs_before": [{"path": entry["path"], "file": entry["file"]} for entry in diffs],
    }
    row.update(_lock_cells(facts, status))
    row.update(_balancer_cells(facts))
    return row


def _lock_cells(facts, status):
    """The fleet lock's part of a row: the lock (short fingerprint, count), whether the serving environment is
    exactly it after the batch (env_fingerprint_info's proof), and the dependency diff from the plan's environment."""
    lock = note(facts, "reinstall_lock_info", {}) or {}
    if not isinstance(lock, dict) or not lock.get("pins"):
        return {"lock": "", "lock_packages": None, "environment_after": None, "dependencies": None}
    # (the serving environment against the lock: the proof's environment_check, package_integrity_info's run after the start)
    proof = note(note(facts, "rollout_integrity", {}) or {}, "environment_check", {}) or {}
    after = None
    # (only a host that ended on the new build: a host rolled back after its proof serves its old environment)
    if status == "updated" and isinstance(proof, dict) and proof.get("fingerprint") and not proof.get("skipped"):
        identical = proof.get("matches") is True and not proof.get("not_pristine_total")
        after = "same as the lock" if identical else "DIFFERS from the lock"
    elif status == "unchanged" and (note(note(facts, "rollout_plan", {}) or {}, "row", {}) or {}).get("lock") == "same":
        after = "same as the lock"
    dependencies = None
    plan_packages = note(note(facts, "rollout_plan", {}) or {}, "packages", None)
    if status == "updated" and isinstance(plan_packages, dict):
        diff = dependency_report.diff(dependency_report.installed(plan_packages.get("distributions") or []),
                                      dependency_report.pinned(lock["pins"]), DEPENDENCY_LINES)
        dependencies = dict((k, diff[k]) for k in ("counts", "changed", "added", "removed", "source_changed", "lines"))
    return {"lock": str(lock.get("short") or ""), "lock_packages": lock.get("count"),
            "environment_after": after, "dependencies": dependencies}


def summary_rows(targets, hostvars):
    """The summary's rows, one per target host, in the targets' order."""
    return [summary_row(host, hostvars[host] if host in hostvars else {}) for host in targets or []]


def ran_batches(targets, hostvars):
    """The batches in the order they ran (the first is the canary), from each host's note of its batch."""
    batches = []
    for host in targets or []:
        batch = list(note(hostvars[host], "rollout_batch", []) or []) if host in hostvars else []
        if batch and batch not in batches:
            batches.append(batch)
    return batches
