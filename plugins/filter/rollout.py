# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils import dependency_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.drift import DRIFT_CLASSES as DRIFT_ORDER
from ansible_collections.gpufleet.vllm.plugins.module_utils.drift_report import diff_entries, md_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.rollout_report import (
    as_int, cell, host_line, one_line, one_line_list, short_counts,
)


def rollout_line(row):
    """One line of the rollout summary for one host (see rollout_line.yml)."""
    if not isinstance(row, dict):
        raise AnsibleFilterError("rollout_line expects a summary row (a dict), got %s" % type(row).__name__)
    return host_line(row)


def audit_line(row):
    """One line of the audit's drift table for one host (see audit_line.yml)."""
    if not isinstance(row, dict):
        raise AnsibleFilterError("audit_line expects a drift row (a dict), got %s" % type(row).__name__)
    if "drift" not in row and "reason" in row:
        return "%s: not audited: %s" % (one_line(row.get("host", "?")), one_line(row["reason"]))
    drift = row.get("drift") or []
    parts = ["DRIFT: " + one_line_list(drift) if drift else "no drift"]
    if row.get("build"):
        parts.append("vllm %s" % one_line(row["build"]))
    parts.append(one_line(row.get("integrity") or "integrity unknown"))
    if as_int(row.get("config_keys_present")):
        parts.append("%s SM120 KV-cache keys present%s" % (one_line(row["config_keys_present"]), " (%s)" % one_line(
            row["config_reason"]) if row.get("config_reason") else ""))
    if as_int(row.get("dumps")):
        parts.append("%s debug dumps (%s)" % (one_line(row["dumps"]), one_line(row.get("dumps_bytes", "?"))))
    if row.get("fingerprint"):
        packages = "packages %s (%s)" % (one_line(row["fingerprint"]), one_line(row.get("packages")))
        notes = [one_line(row[key]) for key in ("lock_note", "fleet") if row.get(key)]
        deps = row.get("dependencies")
        if isinstance(deps, dict) and deps.get("against") and short_counts(deps):
            notes.append("%s against %s (listed in drift.md)" % (
                one_line(short_counts(deps)), "the lock" if deps.get("reference") == "lock" else "the majority"))
        if row.get("packages_not_pristine"):
            notes.append("not pristine: %s" % one_line_list(row["packages_not_pristine"]))
        parts.append(packages + (": " + "; ".join(notes) if notes else ""))
    parts.append("%s %s" % (one_line(row.get("unit", "unit")), one_line(row.get("unit_state", "unknown"))))
    if row.get("other_units"):
        parts.append("other vLLM units: %s" % one_line_list(row["other_units"]))
    # every problem, whole: the line is what an operator acts on
    if row.get("health_problems"):
        parts.append("GPU health: %s" % one_line(row.get("gpu_health") or "not healthy"))
    for problems in (row.get("config_errors"), row.get("gpu_problems"), row.get("health_problems")):
        if problems:
            parts.extend(one_line(problem) for problem in (problems if isinstance(problems, (list, tuple)) else [problems]))
    return "%s: %s" % (one_line(row.get("host", "?")), ", ".join(parts))


def markdown_text(value):
    """VALUE as Markdown text on one line that shows exactly VALUE (a process name, a path from a host): no heading,
    HTML, link or emphasis of its own."""
    return md_text(value)


def audit_fingerprints(rows, hostvars=None, lock=None, lock_file="", limit=dependency_report.DEPENDENCY_LINES,
                       var="gpufleet_drift"):
    """The audit's rows with the fleet's view of their fingerprints (see audit_fingerprints.yml): ``fleet`` says
    whether a host holds what most of the fleet holds, ``lock_note`` what its lock cell means; a host that differs
    from the fleet's majority, or from the lock, gets the drift class ``packages``. With HOSTVARS (each host's
    drift_info result in VAR): ``dependencies``, how each host's packages differ from LOCK (lock_info's dict; its
    file's name LOCK_FILE), else from the fleet's majority (dependency_report.audit_dependencies)."""
    if not isinstance(rows, (list, tuple)):
        raise AnsibleFilterError("audit_fingerprints expects the audit's rows (a list), got %s" % type(rows).__name__)
    counts, majority = dependency_report.fingerprint_counts(rows)
    read = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    out = []
    for row in rows:
        row = dict(row) if isinstance(row, dict) else row
        if isinstance(row, dict) and row.get("fingerprint"):
            fingerprint = row["fingerprint"]
            if len(counts) == 1:
                row["fleet"] = "same as all %d hosts read" % read if read > 1 else ""
            elif fingerprint == majority:
                row["fleet"] = "same as %d of %d hosts" % (counts[fingerprint], read)
            else:
                row["fleet"] = ("DIFFERS from the fleet (%d of %d hosts hold %s)" % (counts[majority], read, majority)
                                if majority else "DIFFERS: no fingerprint is held by most hosts (%s)"
                                % ", ".join("%s on %d" % item for item in ranked))
            lock_cell = str(row.get("lock") or "")
            row["lock_note"] = ("= lock" if lock_cell == "same" else ("lock %s" % lock_cell) if lock_cell else "")
            drift = list(row.get("drift") or [])
            # with a lock, the lock decides (the hosts that lag behind a canary are the majority); without one, the fleet
            differs = lock_cell.startswith("differs") if lock_cell else row["fleet"].startswith("DIFFERS")
            if differs and "packages" not in drift:
                drift.append("packages")
                row["drift"] = [c for c in DRIFT_ORDER if c in drift] + [c for c in drift if c not in DRIFT_ORDER]
        out.append(row)
    if hostvars is not None:
        try:
            limit = dependency_report.bounded_limit(limit)
        except (TypeError, ValueError):
            raise AnsibleFilterError("audit_fingerprints: limit must be a number, got %r" % (limit,))
        results = {}
        for row in out:
            if isinstance(row, dict) and row.get("host") is not None:
                result = _get(_get(hostvars, row["host"]) or {}, var)
                results[row["host"]] = result if isinstance(result, dict) else None
        lock_name = one_line(str(lock_file or "").rstrip("/").rsplit("/", 1)[-1]) if lock_file else ""
        out = dependency_report.audit_dependencies(out, results, lock if isinstance(lock, dict) else None, lock_name,
                                                   limit)
    for row in out:
        if isinstance(row, dict):
            row["packages_cell"] = packages_audit_cell(row)
    return out


def audit_dependency_markdown(rows):
    """drift.md's section on each host's dependency diff (see audit_dependency_markdown.yml)."""
    if not isinstance(rows, (list, tuple)):
        raise AnsibleFilterError("audit_dependency_markdown expects the audit's rows (a list), got %s" % type(rows).__name__)
    return dependency_report.audit_markdown(rows)


def packages_audit_cell(row):
    """The audit table's packages cell, escaped for Markdown (a host's package names are the host's text): the
    fingerprint, the count, what the lock and the fleet say and, against the fleet's majority (or a source that is
    not the lock's), how many packages differ (the list is in drift.md)."""
    if not row.get("fingerprint"):
        return "-"
    notes = [row.get("lock_note") or "", row.get("fleet") or ""]
    deps = row.get("dependencies")
    if isinstance(deps, dict) and deps.get("against") and (deps.get("reference") == "majority" or row.get("lock") == "same"):
        notes.append(short_counts(deps))
    if row.get("packages_not_pristine"):
        notes.append("not pristine: %s" % one_line_list(row["packages_not_pristine"]))
    text = "%s (%s)" % (one_line(row["fingerprint"]), one_line(row.get("packages")))
    return cell(text + "".join("; " + note for note in notes if note))


# --- the rollout's decisions (playbooks/rollout.yml) ------------------------------------------------------------------

BENCHMARK_WHEN = ("changed", "always", "never")
#: The most lines of one host's dependency diff in the summary (the JSON has the whole diff).
DEPENDENCY_LINES = 20


def _bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _get(mapping, key, default=None):
    """MAPPING[KEY] for a dict or a hostvars entry; DEFAULT when missing or undefined."""
    try:
        value = mapping[key]
    except (KeyError, TypeError, IndexError):
        return default
    except Exception:  # an undefined variable in a lazy hostvars entry  # pylint: disable=broad-exception-caught
        return default
    return default if value is None and default is not None else value


def rollout_needs(plan, target_version=None, unit_changed=False, unit_active=True, ready=None, force_restart=False,
                  force_build=False, benchmark="changed"):
    """What a host needs, from one gpufleet.vllm.drift_info result (the audit's code) and the unit's check.

    One entry per reason, in the order of the rollout's steps; an empty list means converged.
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("row"), dict):
        raise AnsibleFilterError("rollout_needs expects a gpufleet.vllm.drift_info result with a 'row', got %s"
                                 % (type(plan).__name__ if not isinstance(plan, dict) else one_line(plan.get("msg", "no row"))))
    if benchmark not in BENCHMARK_WHEN:
        raise AnsibleFilterError("rollout_benchmark must be one of %s, got %s" % (", ".join(BENCHMARK_WHEN), one_line(benchmark)))
    row = plan["row"]
    needs = []
    if _bool(force_restart):
        needs.append("restart (forced)")
    build, pristine = row.get("build") or "", bool(row.get("pristine"))
    # with a fleet lock: the other packages must be the lock's, each pristine
    lock = str(row.get("lock") or "")
    others = list(row.get("packages_not_pristine") or [])
    packages_off = lock.startswith(("differs", "not read")) or bool(others)
    if target_version and (build != target_version or not pristine or packages_off or _bool(force_build)):
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
    if _bool(unit_changed):
        needs.append("unit file")
    if not _bool(unit_active):
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


def rollout_skip(plan):
    """Why a host must not be touched at all, from its gpufleet.vllm.drift_info result (the plan): its GPUs are not
    healthy, or their health could not be read. Empty when it may be rolled (or health was not checked)."""
    if not isinstance(plan, dict) or not isinstance(plan.get("row"), dict):
        raise AnsibleFilterError("rollout_skip expects a gpufleet.vllm.drift_info result with a 'row', got %s"
                                 % (type(plan).__name__ if not isinstance(plan, dict) else one_line(plan.get("msg", "no row"))))
    row = plan["row"]
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


def rollout_plan_line(needs, skipped="", serving=""):
    """The pre-flight's line of one host's plan: what it needs, SKIPPED and why, or converged and what it serves."""
    needs = [one_line(need) for need in needs or []]
    if skipped:
        return "plan: SKIPPED, not rolled: %s%s" % (one_line(skipped), " (it needs: %s)" % ", ".join(needs) if needs else "")
    if needs:
        return "plan: %s" % ", ".join(needs)
    return "plan: nothing (converged, serving %s)" % (one_line(serving) or "?")


def rollout_pending(targets, hostvars):
    """The TARGETS (in their order) whose plan says they need something and that are not skipped."""
    return [host for host in targets or [] if host in hostvars and _get(hostvars[host], "rollout_needs", [])
            and not _get(hostvars[host], "rollout_skipped", "")]


def rollout_failed_hosts(hosts, hostvars):
    """The HOSTS whose rollout failed in this run."""
    return [host for host in hosts or [] if host in hostvars and _bool(_get(hostvars[host], "rollout_failed", False))]


def rollout_cutover_state(service_result):
    """How far a host got before a failure: was the server stopped, was the link moved, which unit failed and, for a
    model switch, which other models' units ran before it (``switch_back``: what the rollback starts again).

    SERVICE_RESULT is the service role's result when the failure was caught: a cutover's (module
    vllm_cutover) says so with cutover=true, and with state=failed how far it got (a result without
    "stopped" is a cutover that did not answer: assume the server was stopped).
    """
    result = service_result if isinstance(service_result, dict) else {}
    if not _bool(result.get("cutover")):
        return {"stopped": False, "link_moved": False, "unit": "", "switch_back": []}
    stopped = _bool(result.get("stopped", True)) if result.get("state") == "failed" else True
    # a model switch: the unit did not run, the other models' units that ran before it (the cutover's stop_units)
    # start again; when the unit itself ran, it is what served and what starts again
    others = result.get("others") if isinstance(result.get("others"), list) else []
    switch_back = [str(o.get("unit")) for o in others
                   if isinstance(o, dict) and o.get("unit") and _bool(o.get("was_active"))] if (
        stopped and not _bool(result.get("was_active"))) else []
    return {"stopped": stopped, "link_moved": _bool(result.get("switched")), "unit": str(result.get("unit") or ""),
            "switch_back": switch_back}


def _fate(facts):
    """(the forward cutover's result, rolled back, the rollback's failure) from a host's notes."""
    service = _get(facts, "service_result", {}) or {}
    if not _bool(_get(facts, "rollout_failed", False)):
        return (service if _bool(service.get("cutover")) else {}), False, ""
    forward = _get(facts, "rollout_cutover", {}) or {}
    forward = forward if _bool(forward.get("cutover")) else {}
    if not (_get(facts, "rollout_reached", {}) or {}).get("stopped"):
        return forward, False, ""
    if service == (_get(facts, "rollout_cutover", {}) or {}):
        return forward, False, "the rollback did not reach its cutover"
    if _bool(service.get("cutover")) and service.get("state") == "started":
        return forward, True, ""
    return forward, False, one_line(service.get("msg") or "no message")


def rollout_status(facts):
    """The summary's status of one host from its notes (FACTS: a dict or a hostvars entry)."""
    if _get(facts, "rollout_skipped", ""):
        return "SKIPPED"
    forward, rolled_back, dummy = _fate(facts)
    if rolled_back:
        return "FAILED, rolled back"
    if _bool(_get(facts, "rollout_failed", False)):
        return "FAILED"
    if not _get(facts, "rollout_needs", []):
        return "unchanged"
    if not _get(facts, "rollout_batch", []):
        return "untouched"
    return "updated" if forward else "unchanged"


def rollout_serves_again(facts):
    """Whether a failed host serves again after its rescue: never stopped (its old build still runs), or the rollback's
    cutover started the previous build (ready, VRAM loaded). Only such a host goes back in rotation."""
    if not (_get(facts, "rollout_reached", {}) or {}).get("stopped"):
        return True
    dummy, rolled_back, dummy2 = _fate(facts)
    return rolled_back


def _balancer_cells(facts):
    """The load balancer's part of a row: whether the host left the rotation, its drain time, the requests in flight
    at its stop (0 unless forced) and how long it was out of rotation."""
    result = _get(facts, "balancer_result", {}) or {}
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
        tried = _text(integrity.get("version")) or _text(_get(facts, "reinstall_target_version", ""))
        after = before if status == "FAILED, rolled back" else ""
        return after, ("" if tried == before else tried), None
    reached = _get(facts, "rollout_reached", None)
    if status == "SKIPPED" or status == "FAILED" and isinstance(reached, dict) and not reached.get("stopped"):
        return before, "", plan_row.get("pristine") if plan_row else None
    after = integrity.get("version") or (before if status == "unchanged" else "")
    pristine = integrity.get("pristine") if integrity else (
        plan_row.get("pristine") if status == "unchanged" and plan_row else None)
    return after, "", pristine


def _text(value):
    return value if isinstance(value, str) else ""


def rollout_row(host, facts):
    """One row of the summary (summary.json) for HOST from its notes."""
    status = rollout_status(facts)
    plan_row = _get(_get(facts, "rollout_plan", {}) or {}, "row", {}) or {}
    # what the plan read (drift_info) is the state before; a batch's integrity check is the state after
    integrity = _get(facts, "rollout_integrity", {}) or {}
    cutover, dummy, rollback_failure = _fate(facts)
    service = _get(facts, "service_result", {}) or {}
    done = status not in ("untouched",) and bool(_get(facts, "rollout_batch", []))
    dumps = _get(facts, "debug_artifacts_result", {}) or {} if done else {}
    config = _get(facts, "sm120_config_result", {}) or {} if done else {}
    bench = _get(facts, "benchmark_result", {}) or {}
    rolled_back = status == "FAILED, rolled back"
    failure = _get(facts, "rollout_failure", "") or ""
    if rollback_failure:
        failure = "%s; the rollback failed as well: %s" % (failure, rollback_failure)
    before = plan_row.get("build") or ""
    after, tried, pristine = _builds(facts, status, before, integrity, plan_row, rollback_failure)
    # the plan's diffs of the modified files, as the pre-flight wrote them (diffs/<host>/...)
    plan_diffs = _get(_get(facts, "rollout_plan", {}) or {}, "diffs", {}) or {}
    diffs = diff_entries([(host, dict(plan_diffs))]) if isinstance(plan_diffs, dict) else []
    row = {
        "host": host,
        "status": status,
        "needed": list(_get(facts, "rollout_needs", []) or []),
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
        "skipped": _text(_get(facts, "rollout_skipped", "")),
        "diffs_before": [{"path": entry["path"], "file": entry["file"]} for entry in diffs],
    }
    row.update(_lock_cells(facts, status))
    row.update(_balancer_cells(facts))
    return row


def _lock_cells(facts, status):
    """The fleet lock's part of a row: the lock (short fingerprint, count), whether the serving environment is
    exactly it after the batch (env_fingerprint's proof), and the dependency diff from the plan's environment."""
    lock = _get(facts, "reinstall_lock_info", {}) or {}
    if not isinstance(lock, dict) or not lock.get("pins"):
        return {"lock": "", "lock_packages": None, "environment_after": None, "dependencies": None}
    # (the serving environment against the lock: the proof's environment_check, package_integrity's run after the start)
    proof = _get(_get(facts, "rollout_integrity", {}) or {}, "environment_check", {}) or {}
    after = None
    # (only a host that ended on the new build: a host rolled back after its proof serves its old environment)
    if status == "updated" and isinstance(proof, dict) and proof.get("fingerprint") and not proof.get("skipped"):
        identical = proof.get("matches") is True and not proof.get("not_pristine_total")
        after = "same as the lock" if identical else "DIFFERS from the lock"
    elif status == "unchanged" and (_get(_get(facts, "rollout_plan", {}) or {}, "row", {}) or {}).get("lock") == "same":
        after = "same as the lock"
    dependencies = None
    plan_packages = _get(_get(facts, "rollout_plan", {}) or {}, "packages", None)
    if status == "updated" and isinstance(plan_packages, dict):
        diff = dependency_report.diff(dependency_report.installed(plan_packages.get("distributions") or []),
                                      dependency_report.pinned(lock["pins"]), DEPENDENCY_LINES)
        dependencies = dict((k, diff[k]) for k in ("counts", "changed", "added", "removed", "source_changed", "lines"))
    return {"lock": str(lock.get("short") or ""), "lock_packages": lock.get("count"),
            "environment_after": after, "dependencies": dependencies}


def rollout_rows(targets, hostvars):
    """The summary's rows, one per target host, in the targets' order."""
    return [rollout_row(host, hostvars[host] if host in hostvars else {}) for host in targets or []]


def rollout_batches(targets, hostvars):
    """The batches in the order they ran (the first is the canary), from each host's note of its batch."""
    batches = []
    for host in targets or []:
        batch = list(_get(hostvars[host], "rollout_batch", []) or []) if host in hostvars else []
        if batch and batch not in batches:
            batches.append(batch)
    return batches


class FilterModule(object):
    def filters(self):
        return {
            "rollout_line": rollout_line,
            "audit_line": audit_line,
            "markdown_text": markdown_text,
            "audit_fingerprints": audit_fingerprints,
            "audit_dependency_markdown": audit_dependency_markdown,
            "rollout_needs": rollout_needs,
            "rollout_pending": rollout_pending,
            "rollout_skip": rollout_skip,
            "rollout_plan_line": rollout_plan_line,
            "rollout_failed_hosts": rollout_failed_hosts,
            "rollout_cutover_state": rollout_cutover_state,
            "rollout_serves_again": rollout_serves_again,
            "rollout_rows": rollout_rows,
            "rollout_batches": rollout_batches,
        }
