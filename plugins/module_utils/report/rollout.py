# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's summary as Markdown (summary.md) and JSON (summary.json), from its rows.

Pure functions: the gpufleet.vllm.rollout_summary module writes what they return.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.vllm.plugins.module_utils.report import quality as quality_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.drift import code
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import markdown_inline, printable_block, valid_text

COLUMNS = ("host", "status", "build before", "vLLM files before", "build after", "downtime (s)", "dumps removed",
           "config keys removed", "vLLM files after", "1-stream tok/s", "peak tok/s", "benchmark")
ALIGN = ("---", "---", "---", "---", "---", "---:", "---", "---:", "---", "---:", "---:", "---")
#: With a fleet lock the table has one more column, after "vLLM files after" (PACKAGES_AT).
PACKAGES_AT = 9
#: With a load balancer, three more after "downtime (s)" (inserted after the packages column).
BALANCER_AT = 6
BALANCER_COLUMNS = ("drain (s)", "in flight at stop", "out of rotation (s)")
BALANCER_ALIGN = ("---:", "---:", "---:")
#: With the quality gate's figures (a row's ``quality``, report.quality's digest), one more column at the end.
QUALITY_COLUMN = "answer quality"
DASH = "-"


# control characters (C0 with newline and tab, DEL, C1, Unicode line and paragraph separators)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match):
    char = match.group()
    return _NAMED.get(char) or ("\\x%02x" % ord(char) if ord(char) < 0x100 else "\\u%04x" % ord(char))


def one_line(value):
    """VALUE on one line: control characters (newlines, terminal escapes) as visible escapes, odd bytes escaped, and
    the invisible and bidirectional characters escaped as safetext.printable_block() does (U+202E, U+200B)."""
    return printable_block(_CONTROL.sub(_escape, valid_text(value)))


def one_line_list(values):
    if isinstance(values, (list, tuple)):
        return ", ".join(one_line(value) for value in values)
    return one_line(values)


def as_int(value):
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
        return one_line(value)


def cell(value):
    """VALUE as one Markdown table cell that shows exactly VALUE: one line (control characters as visible escapes),
    Markdown markup (HTML, links, emphasis) and pipes escaped; a host's failure text cannot add a link or HTML."""
    if value is None or value == "":
        return DASH
    return markdown_inline(one_line(value)).replace("|", "\\|")


def _fmt(value, fmt):
    if value is None or value == "":
        return DASH
    try:
        return fmt % float(value)
    except (TypeError, ValueError, OverflowError):
        return cell(value)


def _files(flag, upper=False):
    if flag is None:
        return DASH
    if flag:
        return "pristine"
    return "MODIFIED" if upper else "modified"


def short_counts(dependencies):
    """'2 changed, 1 added' of a row's dependency diff (its counts without the unchanged ones); '' for none."""
    if not isinstance(dependencies, dict):
        return ""
    counts = str(dependencies.get("counts") or "")
    counts = re.sub(r"\s*\([0-9]+ unchanged\)\Z", "", counts)
    return "" if counts.startswith("no change") else counts


def packages_cell(row):
    """The packages cell: whether the environment is the fleet lock after the batch, and what changed."""
    parts = []
    after = row.get("environment_after")
    if after:
        parts.append("= lock" if after == "same as the lock" else "DIFFERS from the lock")
    counts = short_counts(row.get("dependencies"))
    if counts:
        parts.append(counts)
    return cell("; ".join(parts)) if parts else DASH


def dependency_block(host, counts, lines):
    """The Markdown of one host's dependency diff, in the rollout's summary and the audit's report: a blank line,
    ``**HOST** (COUNTS):``, a blank line and LINES as a list. HOST and COUNTS are escaped already (cell()), each
    of LINES is Markdown already (a code span)."""
    return ["", "**%s** (%s):" % (host, counts), ""] + ["- %s" % line for line in lines]


def balanced(rows):
    """Whether any host of ROWS left a load balancer's rotation (the table then has the balancer's columns)."""
    return any(row.get("balancer") not in (None, "", "none") and row.get("drain_s") is not None for row in rows)


def balancer_line(rows):
    """One sentence on the load balancer for the summary: which, and how the restarted hosts left it; '' when no
    host restarted."""
    kinds = sorted(set(str(row.get("balancer")) for row in rows if row.get("balancer")))
    if not kinds:
        return ""
    if kinds == ["none"]:
        return ("No load balancer (balancer_type none): the restarted hosts were stopped while clients could still "
                "send them requests.")
    out = [row for row in rows if row.get("drain_s") is not None]
    cut = [row for row in out if as_int(row.get("inflight_at_stop")) > 0]
    # (a host whose take-out failed midway has no drain time, and may still be out)
    left_out = [row for row in rows if row.get("back_in_rotation") is False]
    text = "Load balancer (%s): %d host(s) taken out of rotation and drained before the stop" % (
        one_line_list([kind for kind in kinds if kind != "none"]), len(out))
    text += "; requests in flight at the stop: %s" % (
        "none" if not cut else ", ".join("%s %s" % (cell(row.get("host")), as_int(row.get("inflight_at_stop"))) for row in cut))
    if left_out:
        text += "; NOT back in rotation: %s" % ", ".join(cell(row.get("host")) for row in left_out)
    return text + "."


def build_after_cell(row):
    """The build a host serves after the run; a host rolled back names the build it tried."""
    after, tried = cell(row.get("build_after")), row.get("build_tried")
    return "%s (tried %s)" % (after, cell(tried)) if tried else after


def quality_of(row):
    """The quality gate's digest of a row (report.quality.digest, checked again); None when the gate did not run."""
    return quality_report.digest(row.get("quality"))


def gated(rows):
    """Whether the quality gate ran on any host of ROWS (the table then has its column)."""
    return any(quality_of(row) for row in rows)


def row_cells(row, locked=False, with_balancer=False, with_quality=False):
    dumps = DASH
    if row.get("artifacts_removed") is not None:
        dumps = "%s (%s)" % (cell(row["artifacts_removed"]), cell(row.get("artifacts_bytes") or "0 B"))
    cells = [cell(row.get("host")), cell(row.get("status")), cell(row.get("build_before")), _files(row.get("pristine_before")),
             build_after_cell(row), _fmt(row.get("downtime_s"), "%.1f"), dumps,
             cell(row.get("config_keys_removed")), _files(row.get("pristine"), upper=True),
             _fmt(row.get("single_stream_tok_s"), "%.1f"), _fmt(row.get("peak_tok_s"), "%.0f"), cell(row.get("benchmark"))]
    if locked:
        cells.insert(PACKAGES_AT, packages_cell(row))
    if with_balancer:
        cells[BALANCER_AT:BALANCER_AT] = [_fmt(row.get("drain_s"), "%.1f"), cell(row.get("inflight_at_stop")),
                                          _fmt(row.get("out_of_rotation_s"), "%.1f")]
    if with_quality:
        cells.append(quality_report.cell(quality_report.cell_text(quality_of(row))) or DASH)
    return cells


def batches_line(batches):
    """The batches in one line, for the Markdown and the play output."""
    return " -> ".join(", ".join(cell(host) for host in batch) for batch in batches or [])


def markdown(rows, batches, benchmark_report=None, lock_file=False):
    """summary.md: the table, the batches, the fleet lock and each host's dependency diff, each failure in full, the
    link to the benchmark's report (and to fleet.lock when LOCK_FILE), and each host's answer quality against the
    reference (when the quality gate ran)."""
    locked = [row for row in rows if row.get("lock")]
    columns, align = list(COLUMNS), list(ALIGN)
    if locked:
        columns.insert(PACKAGES_AT, "packages")
        align.insert(PACKAGES_AT, "---")
    with_balancer = balanced(rows)
    if with_balancer:
        columns[BALANCER_AT:BALANCER_AT] = BALANCER_COLUMNS
        align[BALANCER_AT:BALANCER_AT] = BALANCER_ALIGN
    with_quality = gated(rows)
    if with_quality:
        columns.append(QUALITY_COLUMN)
        align.append("---")
    out = ["# Rollout summary", "", "| %s |" % " | ".join(columns), "|%s|" % "|".join(align)]
    out.extend("| %s |" % " | ".join(row_cells(row, bool(locked), with_balancer, with_quality)) for row in rows)
    out.extend(["", "Batches, in the order they ran: %s." % (batches_line(batches) or "none (no host needed anything)")])
    out.extend(kv_cache_lines(rows))
    if balancer_line(rows):
        out.extend(["", balancer_line(rows)])
    if locked:
        first = locked[0]
        same = [row for row in locked if row.get("environment_after") == "same as the lock"]
        out.extend(["", "Fleet lock: %s, %s packages, fingerprint %s%s. %d of %d hosts hold exactly it, each package "
                    "pristine by its RECORD%s." % (
                        "[fleet.lock](fleet.lock)" if lock_file else "the run's lock", cell(first.get("lock_packages")),
                        cell(first.get("lock")),
                        "" if all(row.get("lock") == first.get("lock") for row in locked) else " (hosts name others!)",
                        len(same), len(rows),
                        "" if len(same) == len(rows) else
                        "; not: %s" % ", ".join(cell(row.get("host")) for row in rows if row not in same))])
    changed = [row for row in rows if short_counts(row.get("dependencies"))]
    if changed:
        out.extend(["", "## Dependencies: what each updated host's environment changed"])
        for row in changed:
            out.extend(dependency_block(cell(row.get("host")), cell(row["dependencies"].get("counts")),
                                        [code(line) for line in row["dependencies"].get("lines") or []]))
    for row in rows:
        if row.get("skipped"):
            out.extend(["", "**%s**: skipped, not rolled: %s" % (cell(row.get("host")), cell(row["skipped"]))])
    for row in rows:
        if row.get("failure"):
            out.extend(["", "**%s**: %s" % (cell(row.get("host")), cell(row["failure"]))])
    for row in rows:
        diffs = [d for d in row.get("diffs_before") or [] if isinstance(d, dict) and _plain_link(d.get("file"))]
        if diffs:
            # the path is the host's: its text is escaped so it shows as written, no HTML, link or image of its own
            links = ", ".join("[%s](<%s>)" % (markdown_inline(one_line(d.get("path"))), d["file"]) for d in diffs)
            out.extend(["", "**%s**: what drifted before the rollout, its modified vLLM files against the pristine wheel: "
                        "%s." % (cell(row.get("host")), links)])
    if benchmark_report:
        out.extend(["", "Benchmark of the restarted hosts (`vllm bench serve`, baselines, plot): [%s](%s)"
                    % (benchmark_report, benchmark_report)])
    # (last: its heading would otherwise hold the failures' paragraphs)
    out.extend(quality_report.section([(row.get("host"), quality_of(row)) for row in rows]))
    return "\n".join(out) + "\n"


def kv_cache_lines(rows):
    """The SM120 KV-cache decision of the hosts that ran it, one paragraph per distinct reason (with its hosts)."""
    reasons = []
    for row in rows:
        reason = row.get("config_reason")
        if not reason or not isinstance(reason, str):
            continue
        for entry in reasons:
            if entry[0] == reason:
                entry[1].append(cell(row.get("host")))
                break
        else:
            reasons.append((reason, [cell(row.get("host"))]))
    out = []
    for reason, hosts in reasons:
        out.extend(["", "SM120 KV-cache keys, %s: %s" % (", ".join(hosts), cell(reason))])
    return out


def _plain_link(target):
    """Whether TARGET is a diff file name the drift report made (diffs/..., plain characters): safe as a link."""
    if not isinstance(target, str) or not target.startswith("diffs/") or ".." in target.split("/"):
        return False
    return re.match(r"[A-Za-z0-9._+@=,~/-]+\Z", target) is not None


def failed_hosts(rows):
    return [row.get("host") for row in rows if str(row.get("status", "")).startswith("FAILED")]


def skipped_hosts(rows):
    """The hosts the run left untouched because they must not be rolled (GPUs not healthy)."""
    return [row.get("host") for row in rows if row.get("status") == "SKIPPED"]


def host_failures(rows, summary):
    """host -> the sentence its own failure of the run says, for each host that failed or was skipped (the
    playbook fails each of them with it; SUMMARY is the path of summary.md).

    The sentence says what became of the host and where to read why, not the failure or the skip's reason again:
    the run printed each where it happened (the failed task, the host's plan), and summary.md has it in full."""
    found = {}
    for row in rows:
        host = one_line(row.get("host", "?"))
        status = str(row.get("status", ""))
        if status.startswith("FAILED"):
            fate = " and was rolled back" if status == "FAILED, rolled back" else ""
            found[row.get("host")] = "%s failed%s: why is printed above, where it failed, and in %s." % (
                host, fate, summary)
        elif status == "SKIPPED":
            found[row.get("host")] = "%s was skipped, not rolled: why is printed in its plan above, and in %s." % (
                host, summary)
    return found


def summary_json(rows, batches, benchmark_report=None):
    return json.dumps({"hosts": rows, "batches": batches, "benchmark_report": benchmark_report}, indent=4, sort_keys=True) + "\n"


def host_line(row, with_why=True):
    """One line of the rollout summary for one host (the filter gpufleet.vllm.rollout_line); WITH_WHY false leaves
    out a failure's words and a skip's reason (the run printed each where it happened: the failed task, the plan)."""
    host = one_line(row.get("host", "?"))
    status = row.get("status", "?")
    parts = []
    before, after = one_line(row.get("build_before") or ""), one_line(row.get("build_after") or "")
    if before or after:
        parts.append("vllm %s" % before if before == after or not after else "vllm %s -> %s" % (before or "?", after))
    if row.get("build_tried"):
        parts.append("tried %s%s" % (one_line(row["build_tried"]),
                                     " (NOT pristine)" if row.get("pristine_tried") is False else ""))
    if row.get("pristine_before") is False:
        parts.append("was NOT pristine")
    if row.get("switched_from"):
        parts.append("model switch from %s" % one_line_list(row["switched_from"]))
    downtime = _num(row.get("downtime_s"), "%.1f")
    if downtime is not None:
        parts.append("downtime %s s" % downtime)
    if row.get("drain_s") is not None:
        parts.append("drained %s s, %s in flight at the stop" % (_num(row["drain_s"], "%.1f"), as_int(row.get("inflight_at_stop"))))
    if row.get("was_out"):
        parts.append("out of rotation before the rollout (left in maintenance)")
    if row.get("out_of_rotation_s") is not None:
        parts.append("out of rotation %s s" % _num(row["out_of_rotation_s"], "%.1f"))
    elif row.get("back_in_rotation") is False:
        parts.append("NOT back in rotation")
    if row.get("artifacts_removed") is not None:
        parts.append("%s dumps removed%s" % (
            one_line(row["artifacts_removed"]), " (%s)" % one_line(row["artifacts_bytes"]) if row.get("artifacts_bytes") else ""))
    if row.get("config_keys_removed") is not None:
        parts.append("%s config keys removed%s" % (one_line(row["config_keys_removed"]), " (%s)" % one_line(
            row["config_policy"]) if row.get("config_policy") else ""))
    if row.get("pristine") is not None:
        parts.append("pristine" if row["pristine"] else "NOT pristine")
    counts = short_counts(row.get("dependencies"))
    if counts:
        parts.append("packages: %s" % one_line(counts))
    if row.get("environment_after"):
        parts.append("%s %s" % ("= lock" if row["environment_after"] == "same as the lock" else "DIFFERS from the lock",
                                one_line(row.get("lock") or "")))
    single, peak = _num(row.get("single_stream_tok_s"), "%.1f"), _num(row.get("peak_tok_s"), "%.0f")
    if single is not None or peak is not None:
        parts.append("%s tok/s single stream, %s tok/s peak" % (single or "-", peak or "-"))
    if row.get("benchmark") not in (None, "", "ok"):
        # regressed (kept with benchmark_on_regression=warn) or failed: the figures alone do not say so
        parts.append("benchmark %s" % one_line(row["benchmark"]))
    quality = quality_report.phrase(quality_of(row))
    if quality:
        parts.append(quality)
    line = "%s: %s" % (host, one_line(status))
    if parts:
        line += ", " + ", ".join(parts)
    if status == "untouched" and row.get("needed"):
        line += " (needs: %s)" % one_line_list(row["needed"])
    if with_why and row.get("skipped"):
        line += " -- not rolled: " + one_line(row["skipped"])
    if with_why and row.get("failure"):
        line += " -- " + one_line(row["failure"])
    return line
