# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit's drift.md lists each host's dependency diff, run by real ansible-playbook.

As in test_audit_query and test_audit_diffs, the audit's own plays (the
options check, the fleet lock's read when audit_lock is given, the fleet
report; read from playbooks/audit.yml, not copied) run around a stand-in for
the per-host read: each host's drift_info result is given by the test, read
from a file as a module's result is (data, not a template).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import re

import yaml

from helpers import load_source

from ansible_collections.gpufleet.vllm.plugins.filter.audit import markdown_text
from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import set_fingerprint, short_fingerprint

query_tests = load_source("gpufleet_audit_query_for_dependencies", "tests", "unit", "playbooks", "test_audit_query.py")

AUDIT = query_tests.AUDIT
NEW = {"gguf": "0.19.0", "lark": "1.3.1", "nvidia-ml-py": "13.615.71", "vllm": "0.33.0"}
OLD = {"lark": "1.2.2", "nvidia-ml-py": "13.615.71", "vllm": "0.33.0", "debugpy": "1.8.0"}
HEADING = "## Dependencies: how each host's packages differ"


def result(versions, lock="", sources=None):
    """A drift_info result of a host whose serving environment holds VERSIONS (its lock cell: LOCK)."""
    fingerprint = set_fingerprint(versions.items())
    row = dict(query_tests.row([]), fingerprint=short_fingerprint(fingerprint), packages=len(versions),
               packages_not_pristine=[], lock=lock)
    if lock.startswith("differs"):
        row["drift"] = ["packages"]
    dists = [{"name": n, "version": v, "source": (sources or {}).get(n, "index"), "pristine": True}
             for n, v in sorted(versions.items())]
    return {"row": row, "packages": {"fingerprint": fingerprint, "count": len(versions), "distributions": dists,
                                     "not_pristine": [], "not_pristine_total": 0}}


def write_lock(tmp_path, pins):
    body = "".join("%s==%s \\\n    --hash=sha256:%s\n" % (name, version, "%064x" % n)
                   for n, (name, version) in enumerate(sorted(pins.items())))
    meta = {"python_version": "3.12", "python_platform": "x86_64-manylinux_2_35", "package": "vllm",
            "sources": "index http://127.0.0.1:8765/simple/", "excluded": [], "resolved_at": "2026-12-05T14:00:00Z",
            "resolver": "uv 0.9.0"}
    path = tmp_path / "fleet.lock"
    path.write_text(lockfile.render_lock(meta, body))
    return str(path)


def run_report(tmp_path, fleet, **extra):
    """The audit's check, its lock read and its report around FLEET's drift_info results: (process, report dir)."""
    with open(AUDIT) as handle:
        loaded = yaml.safe_load(handle)
    plays = dict((play["name"], play) for play in loaded)
    check, report = plays["Check the audit's options"], plays["Fleet drift report"]
    # (the lock is read, and the report directory named, by the per-host read's first task)
    lock_read = query_tests.report_dir_task(loaded)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(fleet))
    stand_in = {"name": "Stand-in for the per-host read", "hosts": "vllm_fleet", "gather_facts": False,
                "tasks": lock_read + [{"name": "The host's drift_info result", "ansible.builtin.set_fact": {
                    "gpufleet_drift": "{{ (lookup('ansible.builtin.file', %r) | from_json)[inventory_hostname] }}"
                                      % str(results),
                    # (no model directory in this fleet)
                    "gpufleet_models": []}}]}
    playbook = str(tmp_path / "audit.yml")
    with open(playbook, "w") as handle:
        yaml.safe_dump([check, stand_in, report], handle, sort_keys=False)
    inventory = tmp_path / "hosts.yml"
    with open(str(inventory), "w") as handle:
        yaml.safe_dump({"all": {"children": {"vllm_fleet": {"hosts": dict((host, None) for host in fleet),
                                                            "vars": {"fleet_package": "vllm"}}}}}, handle)
    proc = query_tests.ansible_playbook(str(tmp_path), playbook, str(inventory), extra)
    dirs = sorted((tmp_path / "reports").iterdir()) if (tmp_path / "reports").is_dir() else []
    return proc, (dirs[0] if dirs else None)


def section(md):
    assert HEADING in md, md
    return md.split(HEADING, 1)[1].split("\n## ", 1)[0]


def table_row(md, host):
    return [line for line in md.splitlines() if line.startswith("| %s |" % host)][0]


def test_the_host_that_differs_from_the_fleets_majority_gets_its_list(tmp_path):
    fleet = {"gpu-a01": result(NEW), "gpu-a02": result(NEW), "gpu-a03": result(OLD)}
    proc, report = run_report(tmp_path, fleet)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    md = (report / "drift.md").read_text()
    majority = short_fingerprint(set_fingerprint(NEW.items()))
    text = section(md)
    assert text.startswith("\n\nAgainst the fleet's majority (fingerprint %s, held by 2 of 3 hosts). A line says what "
                           "bringing the host to it changes, in the rollout summary's words: the host's version -> the "
                           "majority's;" % majority), text
    assert ("**gpu-a03** (1 changed, 1 added, 1 removed (2 unchanged)):\n\n- `lark 1.2.2 -> 1.3.1`\n- `+ gguf 0.19.0`\n"
            "- `- debugpy 1.8.0`\n") in text
    assert "gpu-a01" not in text and "gpu-a02" not in text
    # the table keeps the count; the play's line says it too
    assert "DIFFERS from the fleet (2 of 3 hosts hold %s); 1 changed, 1 added, 1 removed |" % majority in table_row(md, "gpu-a03")
    assert "changed" not in table_row(md, "gpu-a01")
    assert "1 changed, 1 added, 1 removed against the majority (listed in drift.md)" in " ".join(output.split())
    # drift.json carries the whole diff, and null for a host that matches
    rows = dict((r["host"], r) for r in json.loads((report / "drift.json").read_text())["hosts"])
    assert rows["gpu-a01"]["dependencies"] is None
    deps = rows["gpu-a03"]["dependencies"]
    assert deps["changed"] == [{"name": "lark", "old": "1.2.2", "new": "1.3.1"}]
    assert deps["removed"] == [{"name": "debugpy", "version": "1.8.0"}]
    assert deps["added"] == [{"name": "gguf", "version": "0.19.0"}]
    assert deps["reference"] == "majority" and "packages" in rows["gpu-a03"]["drift"]


def test_with_audit_lock_each_host_is_compared_with_the_lock(tmp_path):
    lock = write_lock(tmp_path, NEW)
    differs = "differs: 1 other version, 1 missing, 1 not in the lock"
    fleet = {"canary": result(NEW, lock="same"), "gpu-a02": result(OLD, lock=differs), "gpu-a03": result(OLD, lock=differs)}
    proc, report = run_report(tmp_path, fleet, audit_lock=lock)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (report / "drift.md").read_text()
    text = section(md)
    short = short_fingerprint(set_fingerprint(NEW.items()))
    assert text.startswith("\n\nAgainst fleet.lock (fingerprint %s, 4 packages). A line says what bringing the host "
                           "to it changes, in the rollout summary's words: the host's version -> the lock's;" % short), text
    for host in ("gpu-a02", "gpu-a03"):
        assert ("**%s** (1 changed, 1 added, 1 removed (2 unchanged)):\n\n- `lark 1.2.2 -> 1.3.1`\n- `+ gguf 0.19.0`\n"
                "- `- debugpy 1.8.0`\n" % host) in text
    # the canary holds the lock: no section, though the other hosts are the majority
    assert "canary" not in text
    rows = dict((r["host"], r) for r in json.loads((report / "drift.json").read_text())["hosts"])
    assert rows["canary"]["dependencies"] is None and rows["gpu-a02"]["dependencies"]["reference"] == "lock"


def test_a_tie_says_there_is_no_majority_and_lists_no_host(tmp_path):
    fleet = {"gpu-a01": result(NEW), "gpu-a02": result(OLD)}
    proc, report = run_report(tmp_path, fleet)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = section((report / "drift.md").read_text())
    assert "No dependency diff against the fleet: no package set is held by more hosts than any other (" in text
    assert "`-e audit_lock=<the fleet.lock of a rollout's report>`" in text
    assert "**gpu-a0" not in text
    rows = json.loads((report / "drift.json").read_text())["hosts"]
    assert [r["dependencies"] for r in rows] == [None, None]


def test_a_fleet_that_agrees_has_no_section(tmp_path):
    proc, report = run_report(tmp_path, {"gpu-a01": result(NEW), "gpu-a02": result(NEW)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert HEADING not in (report / "drift.md").read_text()


HOSTILE = ["evil|pipe", "<img src=x onerror=alert(1)>", "[x](http://e.example)", "tick`s", "esc\x1b[31mred",
           "new\nline", "{{ 7 * 6 }}", "**bold**", "# heading", "</td><script>x</script>"]


def test_the_list_is_capped_and_hostile_names_show_as_text(tmp_path):
    bad = dict(NEW, **dict((name, "6.6.6") for name in HOSTILE))
    bad.update(("extra-%02d" % n, "1.%d" % n) for n in range(20))
    fleet = {"gpu-a01": result(NEW), "gpu-a02": result(NEW), "gpu-a03": result(bad, sources={"lark": "git+https://e/x@`<i>"})}
    proc, report = run_report(tmp_path, fleet, audit_dependency_lines=6)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (report / "drift.md").read_text()
    assert "\x1b" not in md and "42" not in md
    text = section(md)
    block = text.split("**gpu-a03** (30 removed, 1 source changed (3 unchanged)):\n\n", 1)[1].strip("\n").splitlines()
    assert len(block) == 6 and block[-1] == "- `... and 26 more`", block
    for line in block:
        # each line a code span, whatever backticks the name holds
        assert re.match(r"- (`+) ?[^`].*[^`] ?\1\Z", line), line
    assert "- `- </td><script>x</script> 6.6.6`" in block and "- `- <img src=x onerror=alert(1)> 6.6.6`" in block
    # the table's row is one row of the table (11 columns, GPU health among them)
    assert table_row(md, "gpu-a03").count(" | ") == 11
    deps = [r for r in json.loads((report / "drift.json").read_text())["hosts"] if r["host"] == "gpu-a03"][0]["dependencies"]
    assert len(deps["removed"]) == 30 and len(deps["lines"]) == 6


def test_a_bad_number_of_lines_is_refused_before_any_host_is_read(tmp_path):
    proc, report = run_report(tmp_path, {"gpu-a01": result(NEW)}, audit_dependency_lines="all")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "audit_dependency_lines is the number of lines of each host's dependency diff shown in drift.md" in output
    assert 'got "all". Nothing was read from the hosts.' in output
    assert "Stand-in for the per-host read" not in output and report is None


def test_the_report_says_why_the_sm120_keys_are_drift_or_allowed_once_per_reason(tmp_path):
    kept = 'keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[2] ">=0.19.0"'
    removed = 'keys removed: SM120, vLLM 0.17.1, fleet_sm120_fp8_kv_cache_builds[0] "<0.18.0"'
    fleet = {"gpu-a01": result(NEW), "gpu-a02": result(NEW), "gpu-a03": result(NEW)}
    fleet["gpu-a01"]["row"].update(config_keys_present=2, config_policy="keep", config_reason=kept)
    fleet["gpu-a02"]["row"].update(config_keys_present=2, config_policy="strip", config_reason=removed,
                                   drift=["config"])
    fleet["gpu-a03"]["row"].update(config_keys_present=0, config_policy="keep", config_reason=kept)
    proc, report = run_report(tmp_path, fleet)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    md = (report / "drift.md").read_text()
    # (the reason is the host's text, shown as it is: Markdown's [ ] < > escaped)
    assert "\nSM120 KV-cache keys, gpu-a01, gpu-a03: %s.\n" % markdown_text(kept) in md, md
    assert "\nSM120 KV-cache keys, gpu-a02: %s.\n" % markdown_text(removed) in md, md
    # the play's line of a host with keys present says why
    assert "2 SM120 KV-cache keys present (%s)" % removed in " ".join(output.split()).replace('\\"', '"')
