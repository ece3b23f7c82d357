# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError


def _num(value, fmt):
    if value is None or value == "":
        return None
    try:
        return fmt % float(value)
    except (TypeError, ValueError):
        return str(value)


def rollout_line(row):
    """One line of the rollout summary for one host (see rollout_line.yml)."""
    if not isinstance(row, dict):
        raise AnsibleFilterError("rollout_line expects a summary row (a dict), got %s" % type(row).__name__)
    host = row.get("host", "?")
    status = row.get("status", "?")
    parts = []
    before, after = row.get("build_before") or "", row.get("build_after") or ""
    if before or after:
        parts.append("vllm %s" % before if before == after or not after else "vllm %s -> %s" % (before or "?", after))
    if row.get("pristine_before") is False:
        parts.append("was NOT pristine")
    downtime = _num(row.get("downtime_s"), "%.1f")
    if downtime is not None:
        parts.append("downtime %s s" % downtime)
    if row.get("artifacts_removed") is not None:
        parts.append("%s dumps removed%s" % (
            row["artifacts_removed"], " (%s)" % row["artifacts_bytes"] if row.get("artifacts_bytes") else ""))
    if row.get("config_keys_removed") is not None:
        parts.append("%s config keys removed" % row["config_keys_removed"])
    if row.get("pristine") is not None:
        parts.append("pristine" if row["pristine"] else "NOT pristine")
    single, peak = _num(row.get("single_stream_tok_s"), "%.1f"), _num(row.get("peak_tok_s"), "%.0f")
    if single is not None or peak is not None:
        parts.append("%s tok/s single stream, %s tok/s peak" % (single or "-", peak or "-"))
    if row.get("benchmark") not in (None, "", "ok"):
        # regressed (kept with benchmark_on_regression=warn) or failed: the figures alone do not say so
        parts.append("benchmark %s" % row["benchmark"])
    line = "%s: %s" % (host, status)
    if parts:
        line += ", " + ", ".join(parts)
    if status == "untouched" and row.get("needed"):
        line += " (needs: %s)" % ", ".join(row["needed"])
    if row.get("failure"):
        line += " -- " + row["failure"]
    return line


def audit_line(row):
    """One line of the audit's drift table for one host (see audit_line.yml)."""
    if not isinstance(row, dict):
        raise AnsibleFilterError("audit_line expects a drift row (a dict), got %s" % type(row).__name__)
    if "drift" not in row and "reason" in row:
        return "%s: not audited: %s" % (row.get("host", "?"), row["reason"])
    drift = row.get("drift") or []
    parts = ["DRIFT: " + ", ".join(drift) if drift else "no drift"]
    if row.get("build"):
        parts.append("vllm %s" % row["build"])
    parts.append(row.get("integrity") or "integrity unknown")
    if int(row.get("config_keys_present") or 0):
        parts.append("%s SM120 KV-cache keys present" % row["config_keys_present"])
    if int(row.get("dumps") or 0):
        parts.append("%s debug dumps (%s)" % (row["dumps"], row.get("dumps_bytes", "?")))
    parts.append("%s %s" % (row.get("unit", "unit"), row.get("unit_state", "unknown")))
    # every problem, whole: the line is what an operator acts on
    parts.extend((row.get("config_errors") or []) + (row.get("gpu_problems") or []))
    return "%s: %s" % (row.get("host", "?"), ", ".join(parts))


class FilterModule(object):
    def filters(self):
        return {"rollout_line": rollout_line, "audit_line": audit_line}
