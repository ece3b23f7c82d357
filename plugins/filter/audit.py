# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit playbook's filters (playbooks/audit.yml): a host's line, the fleet's view of each host's environment,
the dependency section of drift.md, and a host's text shown as Markdown. Each is documented in the .yml of its name."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils.report import dependencies as dependency_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import models as model_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.drift import DRIFT_CLASSES as DRIFT_ORDER
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.drift import md_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.rollout import note
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.rollout import (
    as_int, cell, one_line, one_line_list, short_counts,
)


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
    for model in row.get("model") or []:
        if isinstance(model, dict) and (model.get("checked") or model.get("finding")):
            parts.append("model %s: %s" % (one_line(model.get("dir", "?")), one_line(model.get("summary", ""))))
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


def markdown_text(value, cell=False):
    """VALUE as Markdown text on one line that shows exactly VALUE (a process name, a path from a host): no heading,
    HTML, link or emphasis of its own, no character that reorders or hides text; CELL: a | cannot end a table cell."""
    text = md_text(value)
    return text.replace("|", "\\|") if cell else text


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
                result = note(note(hostvars, row["host"]) or {}, var)
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


def model_entries(results, recorded=None, dirs=None):
    """One host's gpufleet.vllm.model_info results, checked, against FLEET_MODEL_FINGERPRINTS (see model_entries.yml)."""
    try:
        return model_report.host_models(results, recorded, dirs)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def model_refusals(entries, config_pending=False):
    """What stops a restart of the host: its broken, unchecked or unrecorded model directories (see model_refusals.yml)."""
    if not isinstance(entries, (list, tuple)):
        raise AnsibleFilterError("model_refusals expects model_entries' list, got %s" % type(entries).__name__)
    return model_report.refusals(list(entries), bool(config_pending))


def audit_models(rows, hostvars, var="gpufleet_models"):
    """The audit's rows with each host's model directories against the fleet's reference (see audit_models.yml): the
    row's ``model`` list and, for a directory that is broken, unchecked or not the reference, the drift class
    ``model``."""
    if not isinstance(rows, (list, tuple)):
        raise AnsibleFilterError("audit_models expects the audit's rows (a list), got %s" % type(rows).__name__)
    models = {}
    for row in rows:
        if isinstance(row, dict) and row.get("host") is not None:
            entries = note(note(hostvars, row["host"]) or {}, var)
            # (a host that was read but whose model directories were not noted: the task that checks them failed)
            models[row["host"]] = [e for e in entries if isinstance(e, dict) and "dir" in e and "checked" in e] \
                if isinstance(entries, list) else [dict(model_report.host_models([{"item": "?", "msg": (
                    "the model directories were not checked: the task that checks them failed on this host (its "
                    "output says why)")}])[0])]
    view = model_report.fleet_view(models)
    out = []
    for row in rows:
        if isinstance(row, dict) and row.get("host") in view:
            row = dict(row)
            row["model"] = model_report.public(view[row["host"]])
            row["model_cell"] = model_report.cell(row["model"])
            if any(entry["finding"] for entry in row["model"]) and "model" not in (row.get("drift") or []):
                row["drift"] = list(row.get("drift") or []) + ["model"]
        out.append(row)
    return out


def audit_models_markdown(rows):
    """drift.md's ``## Model directories`` (see audit_models_markdown.yml)."""
    if not isinstance(rows, (list, tuple)):
        raise AnsibleFilterError("audit_models_markdown expects audit_models' rows (a list), got %s" % type(rows).__name__)
    rows = [row for row in rows if isinstance(row, dict) and isinstance(row.get("model"), list)]
    return model_report.markdown(dict((row["host"], row["model"]) for row in rows), [row["host"] for row in rows])


def audit_models_record(rows, recorded_at=""):
    """The fingerprints most hosts hold, as a fleet_model_fingerprints file (see audit_models_record.yml)."""
    if not isinstance(rows, (list, tuple)):
        raise AnsibleFilterError("audit_models_record expects audit_models' rows (a list), got %s" % type(rows).__name__)
    rows = [row for row in rows if isinstance(row, dict) and isinstance(row.get("model"), list)]
    hosts = [row["host"] for row in rows]
    chosen, without = model_report.record(dict((row["host"], row["model"]) for row in rows), hosts)
    lines = ["# The model fingerprint more audited hosts whose model directory is whole hold than any other (gpufleet.vllm.audit,",
             "# %s; hosts: %s)." % (one_line(recorded_at or "now"), one_line(", ".join(hosts) or "none"))]
    lines.extend("# %s: held by %d of the %d hosts that checked it." % (one_line(path), held, checked)
                 for path, (dummy, held, checked) in sorted(chosen.items()))
    lines.extend("# %s: no fingerprint is held by more hosts than any other, so none is written for it." % one_line(path)
                 for path in without)
    lines.append("# Review them, then copy fleet_model_fingerprints into your inventory (group_vars): the audit flags a")
    lines.append("# host that holds other bytes, and the rollout refuses to restart it.")
    fingerprints = dict((path, value[0]) for path, value in chosen.items())
    pinned = "".join("\n  %s: %s" % (json.dumps(path), fp) for path, fp in sorted(fingerprints.items()))
    body = "fleet_model_fingerprints:" + (pinned or " {}")
    return {"fingerprints": fingerprints, "without": without, "content": "\n".join(lines) + "\n---\n" + body + "\n"}


class FilterModule(object):
    def filters(self):
        return {
            "model_entries": model_entries,
            "model_refusals": model_refusals,
            "audit_models": audit_models,
            "audit_models_markdown": audit_models_markdown,
            "audit_models_record": audit_models_record,
            "audit_line": audit_line,
            "markdown_text": markdown_text,
            "audit_fingerprints": audit_fingerprints,
            "audit_dependency_markdown": audit_dependency_markdown,
        }
