# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit measures each serving host's answers against the reference (role gpufleet.vllm.quality) and shows the
figures next to the reference's: in drift.md (a column and a table per host), drift.json and the lines it prints; a
failed gate is the drift class "quality", which fails the run only with audit_fail_on_drift.

Run by real ansible-playbook: the audit's own plays (the options check, its quality task, the report), read from
playbooks/audit.yml, around fake drift_info results (as test_audit_query does); the quality task runs the real role
and module against small vLLM servers in threads of the test (fakevllm_quality), one of them damaged.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

import pytest
import yaml

from ansible_collections.gpufleet.vllm.plugins.module_utils import quality
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import VllmClient
from fakevllm_quality import FakeVllm
from helpers import load_source

query_tests = load_source("gpufleet_audit_query_for_quality", "tests", "unit", "playbooks", "test_audit_query.py")
QUALITY_TASK = "Measure the answers' quality against the reference"


@pytest.fixture
def servers():
    good, damaged, other = FakeVllm(), FakeVllm(), FakeVllm()
    damaged.nll_scale, damaged.answer_salt = 3.0, "damaged"
    other.model = "other"
    for fake in (good, damaged, other):
        fake.start()
    try:
        yield good, damaged, other
    finally:
        for fake in (good, damaged, other):
            fake.stop()


def reference(fake):
    """The reference of FAKE's model, recorded from it as mode=record does (module_utils/quality.py's own code)."""
    figures = quality.measure(VllmClient(fake.url, timeout=10), served_model_name=fake.model, timeout=60)
    return quality.make_entry(figures, fake.model, "", None, quality.DEFAULT_PASSAGE, 32, 16, 0,
                              "2026-12-01T10:00:00Z")


def port(fake):
    return int(fake.url.rsplit(":", 1)[1].rstrip("/"))


def run_audit(tmp_path, fleet, hostvars, group_vars, **extra):
    """The audit's check play, a stand-in for the per-host read that then runs the audit's own quality task, and the
    report play: (process, report directory or None)."""
    with open(query_tests.AUDIT) as handle:
        plays = yaml.safe_load(handle)
    check = [play for play in plays if play["name"] == "Check the audit's options"]
    report = [play for play in plays if play["name"] == "Fleet drift report"]
    measure = [task for play in plays if play["name"] == "Audit each host (read-only)" for task in play["tasks"]
               if task["name"] == QUALITY_TASK]
    assert len(check) == 1 and len(report) == 1 and len(measure) == 1, "audit.yml lost a play or task this test runs"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(fleet))
    stand_in = {"name": "Stand-in for the per-host read", "hosts": "vllm_fleet", "gather_facts": False,
                "tasks": query_tests.report_dir_task(plays) + [{
                    "name": "The host's drift_info result", "ansible.builtin.set_fact": {
                        "gpufleet_drift": "{{ (lookup('ansible.builtin.file', %r) | from_json)[inventory_hostname] }}"
                                          % str(results),
                        # (no model directory in this fleet)
                        "gpufleet_models": []}}] + measure}
    playbook = str(tmp_path / "audit.yml")
    with open(playbook, "w") as handle:
        yaml.safe_dump(check + [stand_in] + report, handle, sort_keys=False)
    inventory = tmp_path / "hosts.yml"
    with open(str(inventory), "w") as handle:
        yaml.safe_dump({"all": {"children": {"vllm_fleet": {"hosts": hostvars, "vars": group_vars}}}}, handle)
    proc = query_tests.ansible_playbook(str(tmp_path), playbook, str(inventory), extra)
    reports = tmp_path / "reports"
    dirs = sorted(reports.iterdir()) if reports.is_dir() else []
    return proc, (dirs[0] if dirs else None)


HOSTILE_BUILD = "0.33.0\u202e\n# heading | <b>x</b>"


def fleet_of(servers, reference_build=None):
    good, damaged, other = servers
    fleet = {"gpu-a01": {"row": query_tests.row([])}, "gpu-a02": {"row": query_tests.row([])},
             "gpu-a03": {"row": query_tests.row(["unit"], unit_state="failed")},
             "gpu-a04": {"row": query_tests.row([])}}
    hostvars = {"gpu-a01": {"service_port": port(good), "service_served_model_name": good.model},
                "gpu-a02": {"service_port": port(damaged), "service_served_model_name": damaged.model},
                # its unit is not active: not measured (its server would not answer)
                "gpu-a03": {"service_port": port(good), "service_served_model_name": good.model},
                "gpu-a04": {"service_port": port(other), "service_served_model_name": other.model}}
    entry = reference(good)
    if reference_build is not None:
        entry["build"] = reference_build
    return fleet, hostvars, {"quality_references": {good.model: {"": entry}}}


def test_the_report_shows_each_hosts_figures_next_to_the_reference(tmp_path, servers):
    # (the reference's build as a hostile text: it reaches the tables)
    fleet, hostvars, group_vars = fleet_of(servers, reference_build=HOSTILE_BUILD)
    requests_before = len(servers[0].requests)
    proc, report = run_audit(tmp_path, fleet, hostvars, group_vars)
    output = proc.stdout + proc.stderr
    # a failed gate never fails the audit by itself
    assert proc.returncode == 0, output
    md = (report / "drift.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| gpu-a0")]
    assert md.splitlines()[2].endswith("| VRAM used, all GPUs (MiB) | answer quality |"), md
    nll = group_vars["quality_references"]["tiny"][""]["passage"]["nll"]
    assert table[0].startswith("| gpu-a01 | none |") and table[0].endswith(
        "| passed: 8/8 answers, NLL %.4f (ref %.4f, +0.0 %%) |" % (nll, nll)), table[0]
    assert table[1].startswith("| gpu-a02 | quality |") and "| FAILED: 0/8 answers, NLL " in table[1], table[1]
    assert table[2].startswith("| gpu-a03 | unit |") and table[2].endswith("| - |")
    assert table[3].endswith("| not gated (no reference): NLL %s |" % table[3].rsplit("NLL ", 1)[1].split(" ")[0])
    # each row keeps its twelve cells
    assert [len(line.replace("\\|", "").split("|")) for line in table] == [15] * 4, table
    section = md.split("## Answer quality\n", 1)[1]
    assert "**gpu-a02**: quality FAILED: 0/8 answers" in section
    assert "| verdict | **FAILED** |  |  |" in section
    assert "| relative difference | +200.0 % |  | within ±5.0 % |" in section
    assert "- the greedy answers match the reference for 0 of 8 prompts" in section
    assert "**gpu-a04**: quality not gated (no reference)" in section and "gpu-a03" not in section
    assert ("| build | 0.33.0 | 0.33.0\\u202e\\n# heading \\| \\<b\\>x\\</b\\>, recorded 2026-12-01T10:00:00Z |  |"
            in section)
    assert "\u202e" not in md and "\n# heading" not in md and "<b>" not in md
    rows = dict((row["host"], row) for row in json.loads((report / "drift.json").read_text())["hosts"])
    assert rows["gpu-a02"]["drift"] == ["quality"] and rows["gpu-a02"]["quality"]["verdict"] == "failed"
    assert rows["gpu-a01"]["drift"] == [] and rows["gpu-a01"]["quality"]["verdict"] == "passed"
    assert rows["gpu-a03"]["quality"] is None and rows["gpu-a04"]["quality"]["verdict"] == "not_gated"
    # the lines printed at the end: the drift class and the figures (the callback wraps them: read as words)
    words = " ".join(output.split())
    assert ("gpu-a02: DRIFT: quality, vllm 0.33.0, pristine, vllm-kimi-k25.service active, quality FAILED: 0/8 "
            "answers, NLL " in words)
    assert ("gpu-a01: no drift, vllm 0.33.0, pristine, vllm-kimi-k25.service active, quality passed: 8/8 answers"
            in words)
    assert "gpu-a03: DRIFT: unit, vllm 0.33.0, pristine, vllm-kimi-k25.service failed'" in words
    # the host whose unit is not active was not asked anything (the good server answered gpu-a01 only)
    assert len(servers[0].requests) - requests_before == len(servers[2].requests)


def test_fail_on_drift_fails_the_run_on_a_failed_gate(tmp_path, servers):
    fleet, hostvars, group_vars = fleet_of(servers)
    proc, report = run_audit(tmp_path, fleet, hostvars, group_vars, audit_fail_on_drift=True)
    output = proc.stdout + proc.stderr
    # (gpu-a03's unit is not active: a drift of its own)
    assert proc.returncode != 0 and "msg: Drift on gpu-a02, gpu-a03 (see " in output, output
    assert report is not None and (report / "drift.md").is_file()


def test_audit_quality_false_asks_no_server_and_the_report_is_as_before(tmp_path, servers):
    fleet, hostvars, group_vars = fleet_of(servers)
    before = [len(fake.requests) for fake in servers]
    proc, report = run_audit(tmp_path, fleet, hostvars, group_vars, audit_quality=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [len(fake.requests) for fake in servers] == before
    md = (report / "drift.md").read_text()
    assert "answer quality" not in md and "## Answer quality" not in md
    assert [len(line.split("|")) for line in md.splitlines() if line.startswith("| gpu-a0")] == [14] * 4


def test_a_bad_audit_quality_is_refused_before_any_host_is_read(tmp_path, servers):
    fleet, hostvars, group_vars = fleet_of(servers)
    proc, report = run_audit(tmp_path, fleet, hostvars, group_vars, audit_quality="sometimes")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and 'audit_quality is whether each serving host' in output
    assert 'got "sometimes"' in output and report is None


def test_a_refused_reference_is_a_measure_that_failed_shown_with_its_reason(tmp_path, servers):
    fleet, hostvars, group_vars = fleet_of(servers)
    group_vars["quality_references"]["tiny"][""]["model"] = "another"
    proc, report = run_audit(tmp_path, {"gpu-a01": fleet["gpu-a01"]}, {"gpu-a01": hostvars["gpu-a01"]}, group_vars)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (report / "drift.md").read_text()
    row = [line for line in md.splitlines() if line.startswith("| gpu-a01")][0]
    assert row.startswith("| gpu-a01 | quality |") and row.endswith("| not measured (reference refused) |")
    assert "Not measured: The quality reference of tiny at http" in md and "recorded for the model 'another'" in md


def test_settings_the_role_refuses_are_a_measure_that_failed_not_a_failed_audit(tmp_path, servers):
    fleet, hostvars, group_vars = fleet_of(servers)
    hostvars["gpu-a01"]["quality_min_match"] = "most of them"
    proc, report = run_audit(tmp_path, {"gpu-a01": fleet["gpu-a01"]}, {"gpu-a01": hostvars["gpu-a01"]}, group_vars)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (report / "drift.md").read_text()
    row = [line for line in md.splitlines() if line.startswith("| gpu-a01")][0]
    assert row.startswith("| gpu-a01 | quality |") and row.endswith("| not measured (its task failed) |"), row
    assert "Not measured: The quality of gpu-a01 was not measured: Validation of arguments failed: argument " \
        "'quality_min_match' is of type str" in md, md
    assert "(failed task: " in md
