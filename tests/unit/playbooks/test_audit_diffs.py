# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit shows what drifted: diffs against the pristine wheel, run by real ansible-playbook.

The first tests run playbooks/audit.yml whole, on a local connection, against
hosts made in the test: a venv with a small "vllm" wheel installed from a
wheelhouse, one of them with a debug block added to a file (as the operators
left the reference host). drift_info runs for real; the test reads the
report directory. The hostile-name tests run the audit's report plays
around fake drift_info results (as test_audit_query does), so a host can
return any path and any text.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import yaml

from helpers import load_source

query_tests = load_source("gpufleet_audit_query_for_diffs", "tests", "unit", "playbooks", "test_audit_query.py")
integrity = load_source("gpufleet_integrity_helpers_audit_diffs", "tests", "unit", "plugins", "module_utils",
                        "test_integrity.py")

AUDIT = query_tests.AUDIT
FILE = "demo/core.py"
DEBUG_BLOCK = (b"    # --- debug (nomla) ---\n"
               b"    import torch as _t\n"
               b"    _t.save(x, f\"/tmp/nomla_debug_tp{_rank}.pt\")\n"
               b"    # --- end debug ---\n")


def make_fleet(tmp_path, dirty=("gpu-a01",), hosts=("gpu-a01", "gpu-a02"), wheel_dirs=True):
    """An inventory of local hosts, each with its own serving venv installed from one wheelhouse."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    wheel = integrity.make_wheel(wheelhouse, name="vllm", version="0.33.0")
    host_vars = {}
    for host in hosts:
        root = tmp_path / host
        env = root / "envs" / "vllm-0.33.0"
        site = integrity.install_wheel(wheel, env)
        os.symlink(str(env), str(root / "current"))
        (root / "dumps").mkdir()
        if host in dirty:
            path = os.path.join(site, *FILE.split("/"))
            with open(path, "rb") as handle:
                data = handle.read()
            with open(path, "wb") as handle:
                handle.write(data.replace(b"    return x\n", b"    return x\n" + DEBUG_BLOCK, 1))
        host_vars[host] = {"fleet_current_link": str(root / "current"), "fleet_dump_paths": [str(root / "dumps")]}
    group_vars = {"fleet_package": "vllm", "fleet_model_dirs": [], "fleet_tools_venv": str(tmp_path / "no-tools")}
    if wheel_dirs:
        group_vars["fleet_wheel_dirs"] = [str(tmp_path / "mirror-without-it"), str(wheelhouse)]
    inventory = tmp_path / "hosts.yml"
    with open(str(inventory), "w") as handle:
        yaml.safe_dump({"all": {"children": {"vllm_fleet": {"hosts": host_vars, "vars": group_vars}}}}, handle)
    return str(inventory), wheel


def report_dir(tmp_path):
    dirs = sorted((tmp_path / "reports").iterdir())
    assert len(dirs) == 1
    return dirs[0]


def test_audit_writes_each_diff_and_drift_md_shows_the_added_debug_lines(tmp_path):
    inventory, wheel = make_fleet(tmp_path)
    proc = query_tests.ansible_playbook(str(tmp_path), AUDIT, inventory, {})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    report = report_dir(tmp_path)
    diff_file = report / "diffs" / "gpu-a01" / (FILE + ".diff")
    full = diff_file.read_text()
    assert full.startswith("--- wheel/%s\n+++ installed/%s\n@@ " % (FILE, FILE)), full
    for line in DEBUG_BLOCK.decode().splitlines():
        assert "+" + line + "\n" in full
    # the pristine host has no diffs, and nothing else was written under diffs/
    assert sorted(str(p.relative_to(report)) for p in report.rglob("*") if p.is_file() and "diffs" in p.parts) == [
        "diffs/gpu-a01/%s.diff" % FILE]
    md = (report / "drift.md").read_text()
    section = md.split("## What drifted: the modified vLLM files against the pristine wheel\n", 1)[1]
    assert "### gpu-a01: what changed in its vLLM files against `%s`" % os.path.basename(wheel) in section
    assert "gpu-a02" not in section
    link = "[diffs/gpu-a01/%s.diff](<diffs/gpu-a01/%s.diff>)" % (FILE, FILE)
    assert "`%s` (of another size than RECORD says), the whole diff: %s" % (FILE, link) in section
    block = section.split("```diff\n", 1)[1].split("\n```\n", 1)[0].splitlines()
    assert block[0].startswith("@@ ") and len(block) <= 12
    assert "+    _t.save(x, f\"/tmp/nomla_debug_tp{_rank}.pt\")" in block
    assert "+    # --- debug (nomla) ---" in block
    # drift.json keeps its form: the rows, no diff text
    assert sorted(json.loads((report / "drift.json").read_text())) == ["hosts", "not_audited"]


def test_without_wheel_dirs_the_report_says_how_to_get_the_diffs(tmp_path):
    inventory, dummy = make_fleet(tmp_path, wheel_dirs=False)
    proc = query_tests.ansible_playbook(str(tmp_path), AUDIT, inventory, {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_dir(tmp_path)
    assert not (report / "diffs").exists()
    md = (report / "drift.md").read_text()
    assert "### gpu-a01: what changed in its vLLM files\n\nNo diffs: fleet_wheel_dirs names no directory of wheels" in md
    assert "gpu-a02: what changed" not in md


def test_only_the_first_lines_are_shown_and_the_rest_is_pointed_to(tmp_path):
    inventory, dummy = make_fleet(tmp_path)
    proc = query_tests.ansible_playbook(str(tmp_path), AUDIT, inventory, {"audit_diff_lines": 5})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (report_dir(tmp_path) / "drift.md").read_text()
    block = md.split("```diff\n", 1)[1].split("\n```\n", 1)[0].splitlines()
    assert len(block) == 5
    assert "`%s` (of another size than RECORD says), the first 5 lines; " % FILE in md
    assert " more in the whole diff: [diffs/gpu-a01/%s.diff]" % FILE in md


HOSTILE_DIFF = ("--- wheel/x\n+++ installed/x\n@@ -1,1 +1,4 @@\n x = 1\n+y = '{{ 7 * 6 }}'\n+z = '\x1b[2J\x1b]0;pwned\x07'\n"
                "+```\n")


def fake_result(paths):
    return {"row": query_tests.row(["integrity"]), "diffs": {
        "wheel": "/srv/wheelhouse/vllm-0.33.0-py3-none-any.whl", "wheel_dirs": ["/srv/wheelhouse"], "bytes": 1,
        "not_diffed": 0, "note": None,
        "files": [{"path": p, "class": "modified", "diff": HOSTILE_DIFF, "truncated": False, "note": None}
                  for p in paths]}}


def run_report(tmp_path, fleet):
    """The audit's report plays around fake drift_info results, read from a file as a module's result is: data, not
    a template (extra vars would be trusted templates)."""
    with open(AUDIT) as handle:
        plays = yaml.safe_load(handle)
    report = [play for play in plays if play["name"] == "Fleet drift report"]
    assert len(report) == 1, "audit.yml lost the play this test runs"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(fleet))
    stand_in = {"name": "Stand-in for the per-host read", "hosts": "vllm_fleet", "gather_facts": False,
                "tasks": query_tests.report_dir_task(plays) + [{
                    "name": "The host's drift_info result", "ansible.builtin.set_fact": {
                        "gpufleet_drift": "{{ (lookup('ansible.builtin.file', %r) | from_json)[inventory_hostname] }}"
                                          % str(results),
                        # (no model directory in this fleet)
                        "gpufleet_models": []}}]}
    playbook = str(tmp_path / "audit.yml")
    with open(playbook, "w") as handle:
        yaml.safe_dump([stand_in] + report, handle, sort_keys=False)
    proc = query_tests.ansible_playbook(str(tmp_path), playbook, query_tests.write_inventory(str(tmp_path), fleet), {})
    dirs = sorted((tmp_path / "reports").iterdir()) if (tmp_path / "reports").is_dir() else []
    return proc, (dirs[0] if dirs else None)


def test_hostile_paths_and_text_stay_inside_the_report_and_show_escaped(tmp_path):
    paths = ["../../../../escaped", "/etc/passwd-owned", "vllm/a\nb.py", "vllm/\x1b[31mred.py", "vllm/ok.py",
             "vllm/ok.py.diff/x.py", "vllm/./dot.py", "vllm//empty.py"]
    fleet = {"gpu-a01": fake_result(paths)}
    proc, report = run_report(tmp_path, fleet)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    outside = [p for p in written if not p.startswith("reports/") and p not in ("audit.yml", "extra.json", "hosts.yml", "results.json")]
    assert outside == [], written
    files = sorted(str(p.relative_to(report)) for p in (report / "diffs").rglob("*") if p.is_file())
    # vllm/ok.py.diff would be a file where vllm/ok.py.diff/x.py.diff needs a directory: the first gets a hashed name
    assert "diffs/gpu-a01/vllm/ok.py.diff/x.py.diff" in files
    renamed = [f for f in files if f.startswith("diffs/gpu-a01/_renamed/")]
    assert len(renamed) == 7 and len(files) == 8, files
    headers = sorted((report / f).read_text().splitlines()[0] for f in renamed)
    assert headers == sorted(["# the diff of ../../../../escaped (its name is not a plain file name)",
                              "# the diff of /etc/passwd-owned (its name is not a plain file name)",
                              "# the diff of vllm/a\\nb.py (its name is not a plain file name)",
                              "# the diff of vllm/\\x1b[31mred.py (its name is not a plain file name)",
                              "# the diff of vllm/./dot.py (its name is not a plain file name)",
                              "# the diff of vllm//empty.py (its name is not a plain file name)",
                              "# the diff of vllm/ok.py"])
    # the text is the host's, not a template, and no terminal escape is written
    text = (report / "diffs/gpu-a01/vllm/ok.py.diff/x.py.diff").read_text()
    assert "+y = '{{ 7 * 6 }}'\n" in text and "+z = '\\x1b[2J\\x1b]0;pwned\\x07'\n" in text
    md = (report / "drift.md").read_text()
    assert "\x1b" not in md and "\x07" not in md and "42" not in md
    # a line of three backticks in the diff cannot close the block: the fence is longer
    assert "````diff\n@@ -1,1 +1,4 @@\n x = 1\n+y = '{{ 7 * 6 }}'\n+z = '\\x1b[2J\\x1b]0;pwned\\x07'\n+```\n````\n" in md
    assert "`vllm/a\\nb.py` (modified), the whole diff: [diffs/gpu-a01/_renamed/" in md


def test_a_hostile_host_name_gets_a_hashed_directory(tmp_path):
    fleet = {"gpu-a01": fake_result(["vllm/ok.py"])}
    proc, report = run_report(tmp_path, fleet)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the inventory name cannot be hostile here; the filter's own test takes one
    from ansible_collections.gpufleet.vllm.plugins.module_utils.report.drift import diff_entries, host_dir
    assert (report / "diffs" / "gpu-a01" / "vllm" / "ok.py.diff").is_file()
    for host in ("..", "../x", "a/b", "a\nb", ".hidden", "a..b"):
        entries = diff_entries([(host, fake_result(["vllm/ok.py"])["diffs"])])
        assert entries[0]["file"].startswith("diffs/_host-") and entries[0]["file"].count("/") == 3
        assert host_dir(host).startswith("diffs/_host-")
