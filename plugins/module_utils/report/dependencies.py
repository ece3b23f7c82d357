# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dependency diff of a host's environment, for the rollout's summary and the audit's drift report.

One implementation of the diff: lockfile.dependency_diff compares two
package sets ({name: {version, source}}) and lockfile.diff_lines says it in
short lines (``lark 1.2.2 -> 1.3.1``, ``+ gguf 0.19.0``, ``- foo 1.0``,
``gguf: git+...@abc -> index``). This module makes those sets from what the
hosts and the lock give (env_fingerprint_info's distributions, a lock's pins),
and, for the audit, picks the reference a host is compared with (the fleet
lock when one is given, else the package set most hosts hold) and writes
the Markdown section. Pure functions; every text of a host is escaped or in
a code span in the Markdown.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.drift import code, md_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import canonical_name
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.rollout import (
    cell, dependency_block, one_line,
)

#: The most lines of one host's dependency diff in a Markdown report (the JSON has the whole diff).
DEPENDENCY_LINES = 20
#: The most a caller may ask for.
LINES_MAX = 1000
#: A not-pristine distribution's reason is cut to this many characters in the Markdown.
REASON_MAX = 200


def installed(environment):
    """{name: {version, source}} of an env_fingerprint_info result (its ``distributions``), of that list, or of such a
    dict given as it is."""
    if isinstance(environment, dict) and "distributions" in environment:
        environment = environment.get("distributions")
    if isinstance(environment, dict):
        return environment
    found = {}
    for dist in environment or ():
        if isinstance(dist, dict) and dist.get("name"):
            found[dist["name"]] = {"version": dist.get("version") or "", "source": dist.get("source") or "index"}
    return found


def pinned(pins):
    """{name: {version, source}} of a lock's pins (lock_info's ``pins``): every package from the index."""
    return dict((name, {"version": version, "source": "index"}) for name, version in (pins or {}).items())


def diff(before, after, limit=DEPENDENCY_LINES):
    """lockfile.dependency_diff(BEFORE, AFTER) plus ``lines``, at most LIMIT of them (the last says how many more)."""
    found = lockfile.dependency_diff(before, after)
    found["lines"] = lockfile.diff_lines(found, limit)
    return found


def bounded_limit(limit):
    """LIMIT as a number of lines between 1 and LINES_MAX; ValueError when it is not a number."""
    return max(1, min(int(limit), LINES_MAX))


# --- the audit ---------------------------------------------------------------------------------------------------


def fingerprint_counts(rows):
    """({fingerprint: hosts holding it}, the fingerprint most hosts hold or None when two or more tie) of the rows
    that have a fingerprint."""
    counts = {}
    for row in rows:
        if isinstance(row, dict) and row.get("fingerprint"):
            counts[row["fingerprint"]] = counts.get(row["fingerprint"], 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    majority = ranked[0][0] if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]) else None
    return counts, majority


def _packages(result):
    """The ``packages`` of a drift_info result (a dict), or None."""
    try:
        packages = result.get("packages")
    except AttributeError:
        return None
    return packages if isinstance(packages, dict) else None


def _distributions(result):
    """{name: {version, source}} of the distributions a drift_info result read ({} when it read none)."""
    return installed((_packages(result) or {}).get("distributions") or [])


def reference(rows, results, lock=None, lock_name=""):
    """What each host is compared with: {kind, against, whose, packages} or None.

    With LOCK (lock_info's dict, with pins): the lock. Else the package set
    the fleet's majority holds (RESULTS: host -> its drift_info result): the
    names and versions of the first host that holds it, each package's
    source the one most of those hosts have. None when no set is held by
    more hosts than any other, or no host's packages were read.
    """
    if isinstance(lock, dict) and lock.get("pins"):
        return {"kind": "lock", "whose": "the lock's",
                "against": "%s (fingerprint %s, %s packages)" % (
                    lock_name or "the fleet lock", one_line(lock.get("short") or "?"), one_line(lock.get("count"))),
                "packages": pinned(lock["pins"])}
    counts, majority = fingerprint_counts(rows)
    if majority is None:
        return None
    holders = [row["host"] for row in rows if isinstance(row, dict) and row.get("fingerprint") == majority]
    sets = [_distributions(results.get(host)) for host in holders]
    sets = [found for found in sets if found]
    if not sets:
        return None
    # each holder's sources by canonical name (one spelling per name: the set is the same on every holder)
    sources = [dict((canonical_name(str(name)), str(entry.get("source") or "index") if isinstance(entry, dict) else "index")
                    for name, entry in found.items()) for found in sets]
    packages = {}
    for name, value in sets[0].items():
        votes = {}
        key = canonical_name(str(name))
        for found in sources:
            if key in found:
                votes[found[key]] = votes.get(found[key], 0) + 1
        first = str(value.get("source") or "index")
        best = max(votes.values()) if votes else 0
        source = first if votes.get(first, 0) == best else sorted(s for s, n in votes.items() if n == best)[0]
        packages[name] = {"version": value.get("version") or "", "source": source}
    read = sum(counts.values())
    return {"kind": "majority", "whose": "the majority's",
            "against": "the fleet's majority (fingerprint %s, held by %d of %d hosts)"
                       % (one_line(majority), counts[majority], read),
            "packages": packages}


def not_pristine(row, result):
    """([{name, version, reason}] of the row's not-pristine distributions (other than the served package and the
    accepted ones: the row's ``packages_not_pristine``), how many more there are)."""
    names = [n for n in row.get("packages_not_pristine") or [] if isinstance(n, str)]
    more = 0
    if names and names[-1].startswith("and ") and names[-1].endswith(" more"):
        try:
            more = int(names[-1].split()[1])
        except (IndexError, ValueError):
            more = 0
        names = names[:-1]
    details = {}
    for dist in (_packages(result) or {}).get("not_pristine") or []:
        if isinstance(dist, dict) and dist.get("name"):
            details.setdefault(canonical_name(str(dist["name"])), dist)
    found = []
    for name in names:
        dist = details.get(canonical_name(name), {})
        found.append({"name": name, "version": str(dist.get("version") or ""), "reason": str(dist.get("reason") or "")})
    return found, more


def host_dependencies(row, result, ref, limit=DEPENDENCY_LINES):
    """One host's ``dependencies`` for the audit's row: how its packages differ from REF (reference()), with the
    lines to show and its not-pristine distributions; None when nothing differs and every one is pristine."""
    dirty, more = not_pristine(row, result)
    packages = _packages(result)
    found = None
    if ref is not None and packages is not None and row.get("fingerprint"):
        # host -> reference: what converging this host would change (the rollout summary's words)
        found = diff(_distributions(result), ref["packages"], limit)
        if not found["lines"]:
            found = None
    if found is None and not dirty and not more:
        return None
    out = {"against": None, "reference": None, "whose": None, "counts": "", "changed": [], "added": [], "removed": [],
           "source_changed": [], "unchanged": None, "lines": []}
    if found is not None:
        out.update((key, found[key]) for key in ("counts", "changed", "added", "removed", "source_changed", "unchanged",
                                                 "lines"))
        out.update(against=ref["against"], reference=ref["kind"], whose=ref["whose"])
    out["not_pristine"] = dirty
    out["not_pristine_more"] = more
    return out


def audit_dependencies(rows, results, lock=None, lock_name="", limit=DEPENDENCY_LINES):
    """The audit's rows, each with ``dependencies`` (host_dependencies(); None for a host that matches)."""
    ref = reference(rows, results, lock, lock_name)
    out = []
    for row in rows:
        if isinstance(row, dict):
            row = dict(row)
            row["dependencies"] = host_dependencies(row, results.get(row.get("host")), ref, limit)
        out.append(row)
    return out


def _not_pristine_line(dist):
    reason = one_line(dist.get("reason") or "")
    if len(reason) > REASON_MAX:
        reason = reason[:REASON_MAX - 3] + "..."
    name = "%s %s" % (dist.get("name"), dist.get("version")) if dist.get("version") else dist.get("name")
    return "not pristine: %s%s" % (code(name), ", " + md_text(reason) if reason else "")


def audit_markdown(rows):
    """drift.md's section on each host's dependencies: the reference, then per host that differs its diff (the
    rollout's lines, host -> reference) and its not-pristine distributions. When no lock was given and no package
    set is held by most hosts, it says so instead of naming an odd one out. An empty string when nothing differs."""
    rows = [row for row in rows or [] if isinstance(row, dict)]
    shown = [row for row in rows if isinstance(row.get("dependencies"), dict)]
    against = [row["dependencies"] for row in shown if row["dependencies"].get("against")]
    counts, majority = fingerprint_counts(rows)
    locked = any(row.get("lock") for row in rows)
    tie = not locked and majority is None and len(counts) > 1
    if not shown and not tie:
        return ""
    out = ["## Dependencies: how each host's packages differ"]
    if against:
        whose = against[0].get("whose") or "the reference's"
        out.extend(["", "Against %s. A line says what bringing the host to it changes, in the rollout summary's words: "
                    "the host's version -> %s; `+` a package the host lacks, `-` one only the host has; "
                    "`name: source -> source` the same package from another source (the index, a git build)."
                    % (md_text(against[0]["against"]), whose)])
    if tie:
        held = ", ".join("%s on %d host%s" % (fingerprint, number, "" if number == 1 else "s")
                         for fingerprint, number in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
        out.extend(["", "No dependency diff against the fleet: no package set is held by more hosts than any other (%s), "
                    "so no host is shown as the odd one out. Compare every host with a fleet lock instead: "
                    "`-e audit_lock=<the fleet.lock of a rollout's report>`." % md_text(held)])
    for row in shown:
        deps = row["dependencies"]
        notes = [one_line(deps["counts"])] if deps.get("against") and deps.get("counts") else []
        dirty = list(deps.get("not_pristine") or [])
        more = deps.get("not_pristine_more") if isinstance(deps.get("not_pristine_more"), int) else 0
        if dirty or more:
            notes.append("%d not pristine" % (len(dirty) + more))
        lines = [code(line) for line in deps.get("lines") or []]
        lines += [_not_pristine_line(dist) for dist in dirty]
        if more:
            lines.append("and %d more not pristine" % more)
        out.extend(dependency_block(cell(row.get("host")), cell("; ".join(notes)), lines))
    return "\n".join(out).strip("\n") + "\n"
