# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit's dependency diff per host: against the lock, else against the fleet's majority; none in a tie; the
list capped; a host's names and text shown as text in drift.md (filters audit_fingerprints and
audit_dependency_markdown)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.audit import (
    audit_dependency_markdown,
    audit_fingerprints,
    audit_line,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import set_fingerprint, short_fingerprint

NEW = {"gguf": "0.19.0", "lark": "1.3.1", "nvidia-ml-py": "13.615.71", "vllm": "0.33.0"}
OLD = {"lark": "1.2.2", "nvidia-ml-py": "13.615.71", "vllm": "0.33.0", "debugpy": "1.8.0"}


def host(name, versions, sources=None, lock="", not_pristine=()):
    """(the audit's row, the drift_info result) of a host whose environment holds VERSIONS."""
    sources = sources or {}
    fingerprint = set_fingerprint(versions.items())
    dists = [{"name": n, "version": v, "source": sources.get(n, "index"), "pristine": n not in not_pristine}
             for n, v in sorted(versions.items())]
    dirty = [{"name": n, "version": versions.get(n, "?"), "reason": "1 modified (first: %s/core.py)" % n}
             for n in not_pristine]
    row = {"host": name, "drift": ["packages"] if dirty else [], "fingerprint": short_fingerprint(fingerprint),
           "packages": len(versions), "lock": lock, "packages_not_pristine": list(not_pristine)}
    result = {"row": row, "packages": {"fingerprint": fingerprint, "count": len(versions), "distributions": dists,
                                       "not_pristine": dirty, "not_pristine_total": len(dirty)}}
    return row, result


def audit(*hosts, **kwargs):
    rows = [row for row, dummy in hosts]
    hostvars = dict((row["host"], {"gpufleet_drift": result}) for row, result in hosts)
    return audit_fingerprints(rows, hostvars, **kwargs)


def by_host(rows):
    return dict((row["host"], row) for row in rows)


def test_against_the_majority_the_odd_host_gets_its_diff_and_the_others_none():
    rows = by_host(audit(host("gpu-a01", NEW), host("gpu-a02", NEW), host("gpu-a03", OLD)))
    assert rows["gpu-a01"]["dependencies"] is None and rows["gpu-a02"]["dependencies"] is None
    deps = rows["gpu-a03"]["dependencies"]
    majority = short_fingerprint(set_fingerprint(NEW.items()))
    assert deps["reference"] == "majority"
    assert deps["against"] == "the fleet's majority (fingerprint %s, held by 2 of 3 hosts)" % majority
    # the host's version -> the reference's: the host lags behind, lacks gguf and has debugpy the others lack
    assert deps["lines"] == ["lark 1.2.2 -> 1.3.1", "+ gguf 0.19.0", "- debugpy 1.8.0"]
    assert deps["counts"] == "1 changed, 1 added, 1 removed (2 unchanged)"
    assert "packages" in rows["gpu-a03"]["drift"]
    # the table keeps the count, the line of the play output too; the list is the Markdown's
    assert rows["gpu-a03"]["packages_cell"].endswith("; 1 changed, 1 added, 1 removed")
    assert "1 changed, 1 added, 1 removed against the majority (listed in drift.md)" in audit_line(rows["gpu-a03"])
    assert "changed" not in rows["gpu-a01"]["packages_cell"]
    md = audit_dependency_markdown(list(rows.values()))
    assert md.startswith("## Dependencies: how each host's packages differ\n\nAgainst the fleet's majority (fingerprint "
                         "%s, held by 2 of 3 hosts). A line says what bringing the host to it changes, in the rollout "
                         "summary's words: the host's version -> the majority's;" % majority)
    assert ("**gpu-a03** (1 changed, 1 added, 1 removed (2 unchanged)):\n\n- `lark 1.2.2 -> 1.3.1`\n- `+ gguf 0.19.0`\n"
            "- `- debugpy 1.8.0`\n") in md
    assert "gpu-a01" not in md and "gpu-a02" not in md


def test_against_the_lock_the_lock_decides_even_when_the_lagging_hosts_are_the_majority():
    lock = {"pins": NEW, "short": "914c782977c8", "count": 4}
    rows = by_host(audit(host("canary", NEW, lock="same"), host("b", OLD, lock="differs: 1 other version, 1 missing, "
                                                                "1 not in the lock"),
                         host("c", OLD, lock="differs: 1 other version, 1 missing, 1 not in the lock"),
                         lock=lock, lock_file="/srv/reports/rollout-20261205T140000Z/fleet.lock"))
    assert rows["canary"]["dependencies"] is None
    for name in ("b", "c"):
        deps = rows[name]["dependencies"]
        assert deps["reference"] == "lock" and deps["against"] == "fleet.lock (fingerprint 914c782977c8, 4 packages)"
        assert deps["lines"] == ["lark 1.2.2 -> 1.3.1", "+ gguf 0.19.0", "- debugpy 1.8.0"]
        # the lock note already counts what differs: the cell does not say it twice
        assert rows[name]["packages_cell"].count("1 other version") == 1 and "1 changed" not in rows[name]["packages_cell"]
    md = audit_dependency_markdown(list(rows.values()))
    assert ("Against fleet.lock (fingerprint 914c782977c8, 4 packages). A line says what bringing the host to it "
            "changes, in the rollout summary's words: the host's version -> the lock's;") in md
    assert "**b** (1 changed, 1 added, 1 removed (2 unchanged)):" in md and "**c** (" in md and "canary" not in md


def test_a_host_that_holds_the_locks_versions_from_a_git_build_shows_the_source():
    lock = {"pins": NEW, "short": "914c782977c8", "count": 4}
    git = "git+https://deploy:hunter2@git.example.org/gguf@0123abcd"
    rows = by_host(audit(host("a", NEW, lock="same"), host("b", NEW, sources={"gguf": git}, lock="same"), lock=lock,
                         lock_file="fleet.lock"))
    assert rows["a"]["dependencies"] is None
    deps = rows["b"]["dependencies"]
    assert deps["lines"] == ["gguf: git+https://***@git.example.org/gguf@0123abcd -> index"]
    assert deps["counts"] == "1 source changed (3 unchanged)"
    # "= lock" says the versions; the cell adds what the lock note cannot say
    assert rows["b"]["packages_cell"].endswith("= lock; same as all 2 hosts read; 1 source changed")
    assert "hunter2" not in audit_dependency_markdown(list(rows.values()))


def test_the_majoritys_source_of_a_package_is_the_one_most_of_its_hosts_have():
    git = "git+https://git.example.org/gguf@0123abcd"
    rows = by_host(audit(host("a", NEW, sources={"gguf": git}), host("b", NEW), host("c", NEW), host("d", OLD)))
    # a holds the majority's versions; its gguf is a git build where b and c have the index's wheel
    assert rows["a"]["dependencies"]["lines"] == ["gguf: %s -> index" % git]
    assert rows["b"]["dependencies"] is None and rows["c"]["dependencies"] is None
    assert "gguf: git" not in " ".join(rows["d"]["dependencies"]["lines"])


def test_a_tie_has_no_majority_and_names_no_host_as_the_odd_one():
    rows = audit(host("a", NEW), host("b", OLD))
    assert [row["dependencies"] for row in rows] == [None, None]
    md = audit_dependency_markdown(rows)
    held = sorted([short_fingerprint(set_fingerprint(NEW.items())), short_fingerprint(set_fingerprint(OLD.items()))])
    assert md == ("## Dependencies: how each host's packages differ\n\nNo dependency diff against the fleet: no package "
                  "set is held by more hosts than any other (%s on 1 host, %s on 1 host), so no host is shown as the odd "
                  "one out. Compare every host with a fleet lock instead: `-e audit_lock=<the fleet.lock of a rollout's "
                  "report>`.\n" % tuple(held))
    assert "**a**" not in md and "**b**" not in md
    assert not any("changed" in row["packages_cell"] for row in rows)
    # with a lock, there is no tie to speak of: the lock decides
    locked = audit(host("a", NEW, lock="same"), host("b", OLD, lock="differs: 1 other version"),
                   lock={"pins": NEW, "short": "914c782977c8", "count": 4}, lock_file="fleet.lock")
    assert "No dependency diff" not in audit_dependency_markdown(locked) and locked[1]["dependencies"]["lines"]


def test_a_fleet_that_agrees_has_no_section():
    rows = audit(host("a", NEW), host("b", NEW), host("c", NEW))
    assert [row["dependencies"] for row in rows] == [None] * 3
    assert audit_dependency_markdown(rows) == ""
    assert audit_dependency_markdown(audit(host("only", OLD))) == ""


def test_the_list_is_capped_and_the_json_keeps_the_whole_diff():
    many = dict(NEW, **dict(("extra-%02d" % n, "1.%d" % n) for n in range(30)))
    rows = by_host(audit(host("a", NEW), host("b", NEW), host("c", many), limit=5))
    deps = rows["c"]["dependencies"]
    assert len(deps["removed"]) == 30
    assert deps["lines"] == ["- extra-00 1.0", "- extra-01 1.1", "- extra-02 1.2", "- extra-03 1.3", "... and 26 more"]
    md = audit_dependency_markdown(list(rows.values()))
    block = md.split("**c** (30 removed (4 unchanged)):\n\n", 1)[1].splitlines()
    assert block == ["- `- extra-00 1.0`", "- `- extra-01 1.1`", "- `- extra-02 1.2`", "- `- extra-03 1.3`",
                     "- `... and 26 more`"]
    with pytest.raises(AnsibleFilterError, match="limit must be a number"):
        audit(host("a", NEW), limit="many")
    assert len(audit(host("a", NEW), host("b", NEW), host("c", many), limit=0)[2]["dependencies"]["lines"]) == 1


def test_not_pristine_distributions_are_listed_with_why():
    rows = by_host(audit(host("a", NEW), host("b", NEW), host("c", NEW, not_pristine=("lark",))))
    deps = rows["c"]["dependencies"]
    assert deps["lines"] == [] and deps["not_pristine"] == [
        {"name": "lark", "version": "1.3.1", "reason": "1 modified (first: lark/core.py)"}]
    md = audit_dependency_markdown(list(rows.values()))
    assert "**c** (1 not pristine):\n\n- not pristine: `lark 1.3.1`, 1 modified (first: lark/core.py)\n" in md
    # "and N more" of the row (drift_info's max_list) is counted, not shown as a package
    row = dict(rows["c"], packages_not_pristine=["lark", "and 7 more"])
    deps = audit_fingerprints([row], {"c": {"gpufleet_drift": {"packages": {"not_pristine": []}}}})[0]["dependencies"]
    assert [d["name"] for d in deps["not_pristine"]] == ["lark"] and deps["not_pristine_more"] == 7
    assert "- and 7 more not pristine" in audit_dependency_markdown([dict(row, dependencies=deps)])


HOSTILE = ["evil|pipe", "<img src=x onerror=alert(1)>", "[x](http://e.example)", "tick`s", "esc\x1b[31mred", "new\nline",
           "{{ 7 * 6 }}", "**bold**", "# heading"]


def test_hostile_names_and_text_show_as_text():
    bad = dict(NEW, **dict((name, "6.6.6") for name in HOSTILE))
    hostile_host = "gpu|<b>x</b>\n# h"
    rows = audit(host("a", NEW), host("b", NEW),
                 host(hostile_host, bad, sources={"lark": "git+https://e/x@`)<i>"}, not_pristine=("vllm-extra <b>",)))
    rows[2]["dependencies"]["not_pristine"][0]["reason"] = "1 modified (first: <script>x</script>\n## owned [l](http://e))"
    md = audit_dependency_markdown(rows)
    assert "\x1b" not in md and "42" not in md
    body = md.split("\n\n", 2)[2]
    unescaped = re.compile(r"(?<!\\)[<>|*\[]|^#")
    for line in body.splitlines():
        if line.startswith("**"):
            # the host's line: its name and the counts are escaped text between the bold marks
            match = re.match(r"\*\*(.*)\*\* \((.*)\):\Z", line)
            assert match and not unescaped.search(match.group(1)) and not unescaped.search(match.group(2)), line
        elif line:
            # a list item: the package's line in a code span, the reason of a not-pristine one escaped
            assert line.startswith("- "), line
            outside = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line[2:])
            assert not unescaped.search(outside), line
    assert md.count("\n**") == 1
    assert "``- tick`s 6.6.6``" in md and "`- <img src=x onerror=alert(1)> 6.6.6`" in md
