# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

# control characters (C0 with newline and tab, DEL, C1, Unicode line and paragraph separators)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match):
    char = match.group()
    return _NAMED.get(char) or ("\\x%02x" % ord(char) if ord(char) < 0x100 else "\\u%04x" % ord(char))


def _text(value):
    """VALUE on one line: control characters (newlines, terminal escapes) as visible escapes, odd bytes escaped."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    elif not isinstance(value, str):
        value = str(value)
    value = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(_escape, value)


def _texts(values):
    if isinstance(values, (list, tuple)):
        return ", ".join(_text(value) for value in values)
    return _text(values)


def _int(value):
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def _num(value, fmt):
    if value is None or value == "":
        return None
    try:
        return fmt % float(value)
    except (TypeError, ValueError, OverflowError):
        return _text(value)


def rollout_line(row):
    """One line of the rollout summary for one host (see rollout_line.yml)."""
    if not isinstance(row, dict):
        raise AnsibleFilterError("rollout_line expects a summary row (a dict), got %s" % type(row).__name__)
    host = _text(row.get("host", "?"))
    status = row.get("status", "?")
    parts = []
    before, after = _text(row.get("build_before") or ""), _text(row.get("build_after") or "")
    if before or after:
        parts.append("vllm %s" % before if before == after or not after else "vllm %s -> %s" % (before or "?", after))
    if row.get("pristine_before") is False:
        parts.append("was NOT pristine")
    downtime = _num(row.get("downtime_s"), "%.1f")
    if downtime is not None:
        parts.append("downtime %s s" % downtime)
    if row.get("artifacts_removed") is not None:
        parts.append("%s dumps removed%s" % (
            _text(row["artifacts_removed"]), " (%s)" % _text(row["artifacts_bytes"]) if row.get("artifacts_bytes") else ""))
    if row.get("config_keys_removed") is not None:
        parts.append("%s config keys removed" % _text(row["config_keys_removed"]))
    if row.get("pristine") is not None:
        parts.append("pristine" if row["pristine"] else "NOT pristine")
    single, peak = _num(row.get("single_stream_tok_s"), "%.1f"), _num(row.get("peak_tok_s"), "%.0f")
    if single is not None or peak is not None:
        parts.append("%s tok/s single stream, %s tok/s peak" % (single or "-", peak or "-"))
    if row.get("benchmark") not in (None, "", "ok"):
        # regressed (kept with benchmark_on_regression=warn) or failed: the figures alone do not say so
        parts.append("benchmark %s" % _text(row["benchmark"]))
    line = "%s: %s" % (host, _text(status))
    if parts:
        line += ", " + ", ".join(parts)
    if status == "untouched" and row.get("needed"):
        line += " (needs: %s)" % _texts(row["needed"])
    if row.get("failure"):
        line += " -- " + _text(row["failure"])
    return line


def audit_line(row):
    """One line of the audit's drift table for one host (see audit_line.yml)."""
    if not isinstance(row, dict):
        raise AnsibleFilterError("audit_line expects a drift row (a dict), got %s" % type(row).__name__)
    if "drift" not in row and "reason" in row:
        return "%s: not audited: %s" % (_text(row.get("host", "?")), _text(row["reason"]))
    drift = row.get("drift") or []
    parts = ["DRIFT: " + _texts(drift) if drift else "no drift"]
    if row.get("build"):
        parts.append("vllm %s" % _text(row["build"]))
    parts.append(_text(row.get("integrity") or "integrity unknown"))
    if _int(row.get("config_keys_present")):
        parts.append("%s SM120 KV-cache keys present" % _text(row["config_keys_present"]))
    if _int(row.get("dumps")):
        parts.append("%s debug dumps (%s)" % (_text(row["dumps"]), _text(row.get("dumps_bytes", "?"))))
    parts.append("%s %s" % (_text(row.get("unit", "unit")), _text(row.get("unit_state", "unknown"))))
    # every problem, whole: the line is what an operator acts on
    for problems in (row.get("config_errors"), row.get("gpu_problems")):
        if problems:
            parts.extend(_text(problem) for problem in (problems if isinstance(problems, (list, tuple)) else [problems]))
    return "%s: %s" % (_text(row.get("host", "?")), ", ".join(parts))


class FilterModule(object):
    def filters(self):
        return {"rollout_line": rollout_line, "audit_line": audit_line}
