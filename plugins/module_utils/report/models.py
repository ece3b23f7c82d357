# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each host's model directories as the audit and the rollout judge them: whole or broken, and the same bytes as the
fleet or not.

Pure functions. Their input is what gpufleet.vllm.model_info returned on a host, one result per model directory (the
loop of playbooks/tasks/drift.yml), and the fleet's recorded fingerprints (``fleet_model_fingerprints``: model
directory -> fingerprint). The fleet's reference of a directory is the recorded fingerprint, else the one more hosts
whose directory is whole hold than any other (none on a tie). Every value from a host is checked again and shown as text.

* :func:`host_models` -- one host's results, small and checked: per directory its verdict, fingerprint, problems and
  each needed file's sha256 (what the fleet's comparison needs), and how it compares with the recorded fingerprint.
* :func:`refusals` -- the sentences that stop a rollout before the host's stop: a broken directory (which file, what is
  wrong), one that could not be checked, one whose fingerprint is not the recorded one.
* :func:`fleet_view` -- every host's directories against the fleet's reference, with the files that differ from a host
  that holds the reference.
* :func:`markdown` -- ``## Model directories`` of the audit's drift.md.
* :func:`record` -- the fingerprints the fleet's majority holds, for a ``fleet_model_fingerprints`` file to paste into
  group_vars.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import posixpath
import re

from ansible_collections.gpufleet.vllm.plugins.module_utils.report.dependencies import fingerprint_counts
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import markdown_inline, one_line

_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}\Z")
_SHA = re.compile(r"[0-9a-f]{64}\Z")
MAX_PROBLEMS = 20       # problems kept per directory (the module returns up to 200)
MAX_FILES = 5000        # needed files kept per directory for the comparison
MAX_DIFFERS = 20        # files that differ, listed per directory
MAX_TEXT = 300
MAX_DIRS = 64
#: Problems that make vLLM fail to load the directory, or load other bytes than its files say: a host with one of them
#: is not restarted. The others (a link out of the directory, a shard the index does not name, a FIFO, too many
#: entries) are reported, and are drift, but do not stop a restart.
FATAL_KINDS = frozenset(("missing", "truncated", "lfs_pointer", "bad_header", "bad_offsets", "bad_index", "bad_json",
                         "index_mismatch", "hash_mismatch", "unreadable"))
_MORE = re.compile(r"(\d{1,9}) more problems not listed\Z")
OFF = "not checked (fleet_model_check is off)"


def short(fingerprint):
    """``sha256:3f2a91c0d4e5``: the first 12 hex digits, enough to tell fingerprints apart in a table."""
    return fingerprint[:19] if isinstance(fingerprint, str) and _FINGERPRINT.match(fingerprint) else "-"


def _text(value, limit=MAX_TEXT):
    text = one_line(value if isinstance(value, str) else json.dumps(value, default=str))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def normal_dir(path):
    """PATH as the fleet's directories are compared: no trailing or doubled slash, no . or .. part."""
    return posixpath.normpath(path) if path.startswith("/") else path


def _fingerprint(value):
    return value if isinstance(value, str) and _FINGERPRINT.match(value) else None


def recorded_map(recorded):
    """fleet_model_fingerprints checked: {directory: fingerprint}. Raises ValueError naming what is wrong."""
    if recorded in (None, "", {}):
        return {}
    if not isinstance(recorded, dict):
        raise ValueError("fleet_model_fingerprints must be a mapping of model directory to fingerprint, got %s"
                         % type(recorded).__name__)
    out = {}
    for key, value in recorded.items():
        if not isinstance(key, str) or not key.startswith("/"):
            raise ValueError("fleet_model_fingerprints: %s is not an absolute model directory" % _text(key, 80))
        if _fingerprint(value) is None:
            raise ValueError("fleet_model_fingerprints: the fingerprint of %s must be sha256: and 64 hex digits "
                             "(what gpufleet.vllm.model_info returns), got %s" % (_text(key, 80), _text(value, 80)))
        out[normal_dir(key)] = value
    return out


def _problems(value):
    """(the first MAX_PROBLEMS problems, how many there are in all, whether one of them is fatal): the module's own
    marker of the problems it did not list counts them."""
    out, total, fatal = [], 0, False
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("kind") == "more":
            found = _MORE.match(str(item.get("detail", "")))
            total += int(found.group(1)) if found else 1
            # (what was not listed may be anything)
            fatal = True
            continue
        total += 1
        kind = _text(item.get("kind", "?"), 40)
        fatal = fatal or kind in FATAL_KINDS
        if len(out) < MAX_PROBLEMS:
            out.append({"file": _text(item.get("file", "?"), 200), "kind": kind, "detail": _text(item.get("detail", ""))})
    return out, total, fatal


def _files(value):
    out = {}
    for item in value if isinstance(value, list) else []:
        if len(out) >= MAX_FILES:
            break
        if isinstance(item, dict) and item.get("needed") and isinstance(item.get("path"), str):
            sha = item.get("sha256")
            out[_text(item["path"], 400)] = sha if isinstance(sha, str) and _SHA.match(sha) else None
    return out


def _one(result, recorded):
    """One loop result of model_info -> the checked entry."""
    path = result.get("item") if isinstance(result.get("item"), str) else result.get("path")
    path = _text(normal_dir(path) if isinstance(path, str) else "?", 400)
    entry = {"dir": path, "checked": False, "off": False, "ok": None, "fatal": False, "fingerprint": None,
             "mode": None, "problems": [], "problems_total": 0, "error": "", "files": {},
             "recorded": recorded.get(path), "vs_recorded": ""}
    if result.get("skipped"):
        entry.update(off=True, error=OFF)
        return entry
    if not isinstance(result.get("ok"), bool):
        entry["error"] = _text(result.get("msg") or "the check gave no verdict", 600)
        return entry
    problems, total, fatal = _problems(result.get("problems"))
    entry.update(checked=True, ok=result["ok"] and not total, fatal=fatal,
                 fingerprint=_fingerprint(result.get("fingerprint")), mode=_text(result.get("mode") or "?", 10),
                 problems=problems, problems_total=total, files=_files(result.get("files")))
    if entry["recorded"]:
        entry["vs_recorded"] = "same" if entry["fingerprint"] == entry["recorded"] else "differs"
    return entry


def host_models(results, recorded=None, dirs=None):
    """One host's model_info results (the registered loop's ``results``, or one result) -> its checked entries.
    With DIRS (fleet_model_dirs), a RECORDED directory that is not one of them is refused (ValueError): a record
    that never meets its directory would pass unseen."""
    recorded = recorded_map(recorded)
    if dirs is not None:
        known = set(normal_dir(d) for d in dirs if isinstance(d, str)) if isinstance(dirs, (list, tuple)) else set()
        unknown = sorted(d for d in recorded if d not in known)
        if unknown:
            raise ValueError("fleet_model_fingerprints names %s, which %s not one of fleet_model_dirs (%s): a "
                             "fingerprint is recorded for a directory the audit and the rollout check" % (
                                 ", ".join(_text(d, 200) for d in unknown), "is" if len(unknown) == 1 else "are",
                                 ", ".join(sorted(_text(d, 200) for d in known)) or "none"))
    if isinstance(results, dict):
        results = results.get("results", [results]) if "results" in results else [results]
    out = []
    for result in results if isinstance(results, list) else []:
        if isinstance(result, dict):
            out.append(_one(result, recorded))
        if len(out) >= MAX_DIRS:
            break
    return out


def _majority(checked):
    """Of the CHECKED entries of one directory, those whose directory is whole: ({fingerprint: hosts}, the one more
    hosts hold than any other or None on a tie (as the audit's package fingerprints), [(fingerprint, hosts)] most
    first)."""
    counts, majority = fingerprint_counts([entry for entry in checked if entry["ok"]])
    return counts, majority, sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _problem_words(problem):
    return "%s: %s (%s)" % (problem["file"], problem["detail"], problem["kind"])


def refusals(entries, config_pending=False):
    """What stops a restart of the host: one sentence per directory that is broken (a fatal problem), could not be
    checked, or is not the recorded one. CONFIG_PENDING: the run edits the host's model configs (the SM120 policy)
    before its restart, so a fingerprint that differs from the record is not refused (the edit may bring it there)."""
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("off"):
            continue
        where = "The model directory %s" % entry.get("dir", "?")
        if not entry.get("checked"):
            out.append("%s could not be checked: %s" % (where, entry.get("error") or "no verdict"))
        elif entry.get("fatal"):
            problems = entry.get("problems") or []
            more = entry.get("problems_total", len(problems)) - len(problems[:5])
            out.append("%s is broken, so vLLM would fail to load it after the stop: %s%s. Fetch the named files "
                       "again (git lfs pull, or the download again)" % (
                           where, "; ".join(_problem_words(p) for p in problems[:5]),
                           " (and %d more)" % more if more > 0 else ""))
        elif entry.get("vs_recorded") == "differs" and not config_pending:
            out.append("%s holds other bytes than fleet_model_fingerprints records: its fingerprint is %s, the "
                       "recorded one %s (the audit lists the files that differ when a host holds the recorded one). "
                       "Bring the directory to the recorded model, or record the new one in fleet_model_fingerprints "
                       "when the whole fleet moves to it" % (where, entry.get("fingerprint") or "none",
                                                             entry.get("recorded")))
    return out


def _differs(files, reference):
    changed = sorted(p for p in files if p in reference and files[p] != reference[p])
    missing = sorted(p for p in reference if p not in files)
    extra = sorted(p for p in files if p not in reference)
    lines = ["%s (other content)" % p for p in changed] + ["%s (missing here)" % p for p in missing] \
        + ["%s (not in the reference)" % p for p in extra]
    if len(lines) > MAX_DIFFERS:
        lines = lines[:MAX_DIFFERS] + ["and %d more" % (len(lines) - MAX_DIFFERS)]
    return lines


def fleet_view(models):
    """MODELS: {host: host_models(...)}. -> {host: [entry + reference, reference_from, fleet, differs, finding,
    summary]}: the fleet's reference per directory is the recorded fingerprint, else the fingerprint more hosts whose
    directory is whole hold than any other."""
    by_dir = {}
    for host, entries in models.items():
        for entry in entries or []:
            by_dir.setdefault(entry["dir"], []).append((host, entry))
    references = {}
    for path, held in by_dir.items():
        checked = [e for dummy, e in held if e["checked"]]
        counts, majority, ranked = _majority(checked)
        recorded = next((e["recorded"] for dummy, e in held if e.get("recorded")), None)
        reference = recorded or majority
        files = next((e["files"] for dummy, e in held if reference and e["fingerprint"] == reference and e["ok"]), None)
        references[path] = {"reference": reference, "from": "recorded" if recorded else ("majority" if majority else ""),
                            "count": counts.get(reference, 0), "checked": len(checked), "files": files,
                            "ranked": ranked}
    out = {}
    for host, entries in models.items():
        rows = []
        for entry in entries or []:
            ref = references[entry["dir"]]
            row = dict(entry)
            row.update(reference=ref["reference"], reference_from=ref["from"], differs=[], finding="", fleet="")
            if not entry["checked"]:
                row["finding"] = "" if entry.get("off") else "not checked"
                row["summary"] = entry["error"]
            else:
                if ref["files"] is not None and entry["fingerprint"] != ref["reference"]:
                    row["differs"] = _differs(entry["files"], ref["files"])
                if ref["reference"] and entry["fingerprint"] == ref["reference"]:
                    row["fleet"] = ("= recorded" if ref["from"] == "recorded" else
                                    "same as all %d hosts" % ref["checked"] if ref["count"] == ref["checked"] > 1 else
                                    "the only host" if ref["checked"] == 1 else
                                    "same as %d of %d hosts" % (ref["count"], ref["checked"]))
                elif ref["reference"]:
                    row["fleet"] = ("DIFFERS from the recorded %s" % short(ref["reference"]) if ref["from"] == "recorded"
                                    else "DIFFERS from the fleet (%d of %d hosts hold %s)" % (
                                        ref["count"], ref["checked"], short(ref["reference"])))
                elif not ref["ranked"] and ref["checked"] > 1:
                    row["fleet"] = "no host's directory is whole"
                elif len(ref["ranked"]) > 1 or (entry["ok"] is False and ref["checked"] > 1):
                    row["fleet"] = "DIFFERS: no fingerprint is held by more hosts than any other (%s)" % ", ".join(
                        "%s on %d" % (short(fp), count) for fp, count in ref["ranked"][:5])
                if entry["ok"] is False:
                    row["finding"] = "broken" if entry.get("fatal") else "problems"
                elif row["fleet"].startswith("DIFFERS"):
                    row["finding"] = "differs"
                row["summary"] = _summary(row)
            rows.append(row)
        out[host] = rows
    return out


def _summary(row):
    if row["finding"] in ("broken", "problems"):
        problems = row["problems"]
        more = row["problems_total"] - len(problems[:3])
        return "%s: %s%s" % ("BROKEN" if row["finding"] == "broken" else "PROBLEMS",
                             "; ".join(_problem_words(p) for p in problems[:3]), " (and %d more)" % more if more > 0 else "")
    text = short(row["fingerprint"])
    if row["fleet"]:
        text += " (%s)" % row["fleet"]
    if row["differs"]:
        text += ": %s" % ", ".join(row["differs"][:5])
    return text


def cell(rows):
    """The drift table's cell of one host: each directory's short fingerprint or its verdict."""
    parts = []
    for row in rows or []:
        if row.get("finding") in ("broken", "problems"):
            parts.append("%s (%d problem%s)" % ("BROKEN" if row["finding"] == "broken" else "PROBLEMS",
                                                row["problems_total"], "" if row["problems_total"] == 1 else "s"))
        elif row.get("finding") == "not checked":
            parts.append("not checked")
        elif row.get("finding") == "differs":
            parts.append("%s DIFFERS" % short(row["fingerprint"]))
        elif row.get("checked"):
            parts.append(short(row["fingerprint"]))
    return ", ".join(parts) or "-"


def public(rows):
    """A host's rows as drift.json keeps them: without the per-file sha256s (the differing files are listed)."""
    return [dict((k, v) for k, v in row.items() if k != "files") for row in rows or []]


def markdown(view, hosts):
    """``## Model directories``: per directory its reference, then each host's fingerprint, verdict, problems and the
    files that differ. VIEW: fleet_view's result; HOSTS: the hosts in report order. '' when nothing was checked."""
    by_dir = {}
    for host in hosts:
        for row in view.get(host, []):
            by_dir.setdefault(row["dir"], []).append((host, row))
    if not any(row["checked"] or row["finding"] for held in by_dir.values() for dummy, row in held):
        return ""
    lines = ["## Model directories", ""]
    for path in sorted(by_dir):
        held = by_dir[path]
        first = held[0][1]
        if first["reference"]:
            whence = ("recorded in fleet_model_fingerprints" if first["reference_from"] == "recorded"
                      else "held by more hosts whose directory is whole than any other")
            lines.append("%s: reference `%s` (%s)." % (markdown_inline(one_line(path), True), first["reference"], whence))
        else:
            lines.append("%s: no reference (no fingerprint recorded, none held by more hosts than any other)." % (
                markdown_inline(one_line(path), True)))
        lines.extend(["", "| host | fingerprint | verdict | against the reference |", "|---|---|---|---|"])
        for host, row in held:
            verdict = (("whole" if row["ok"] else "BROKEN" if row.get("fatal") else "PROBLEMS") if row["checked"]
                       else (row["finding"] or "not checked"))
            lines.append("| %s | %s | %s | %s |" % tuple(markdown_inline(one_line(v)).replace("|", "\\|") for v in (
                host, short(row["fingerprint"]), verdict + (" (%s)" % row["mode"] if row["mode"] else ""),
                row["fleet"] or "-")))
        for host, row in held:
            items = ["%s" % _problem_words(p) for p in row["problems"]]
            if row["problems_total"] > len(row["problems"]):
                items.append("and %d more problems" % (row["problems_total"] - len(row["problems"])))
            if not row["checked"] and row["finding"]:
                items.append(row["error"])
            if row["differs"]:
                items.append("files that differ from a host that holds the reference: %s" % ", ".join(row["differs"]))
            if items:
                lines.extend(["", "**%s**:" % markdown_inline(one_line(host))])
                lines.extend("- %s" % markdown_inline(one_line(item)) for item in items)
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def record(view, hosts):
    """{directory: (fingerprint, hosts holding it, hosts that checked it)} of the fingerprint more hosts whose
    directory is whole hold than any other (what fleet_model_fingerprints pins), and the directories without one."""
    chosen, without = {}, []
    by_dir = {}
    for host in hosts:
        for row in view.get(host, []):
            by_dir.setdefault(row["dir"], []).append(row)
    for path, rows in sorted(by_dir.items()):
        checked = [r for r in rows if r["checked"]]
        counts, majority, dummy = _majority(checked)
        if majority:
            chosen[path] = (majority, counts[majority], len(checked))
        elif checked:
            without.append(path)
    return chosen, without
