# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit's audit_query and audit_fail_on_query, run by real ansible-playbook.

The report tests take the audit playbook's own plays (the options check and
the fleet report, read from playbooks/audit.yml, not copied) and put a
stand-in for the per-host read between them: each host's drift_info result
is a fake row given by the test, on a local connection. The bad-expression
tests run playbooks/audit.yml itself, whole, and prove that no host was read.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
AUDIT = os.path.join(REPO, "playbooks", "audit.yml")
READ_TASK = "TASK [Read the host's drift (integrity, build, SM120 keys, dumps, unit, GPUs)]"


def row(drift, build="0.33.0", dumps=0, unit_state="active"):
    return {"drift": drift, "build": build, "environment": "/opt/vllm/envs/vllm-" + build, "pristine": "integrity" not in drift,
            "integrity": "pristine" if "integrity" not in drift else "not pristine: 1 file of another size than RECORD says",
            "config_keys_present": 0, "config_policy": "strip", "config_errors": [], "dumps": dumps,
            "dumps_bytes": "%d B" % (dumps * 1000), "unit": "vllm-kimi-k25.service", "unit_state": unit_state,
            "gpus": 8, "vram_used_mib": 704800, "gpu_problems": []}


FLEET = {
    "gpu-a01": {"row": row(["integrity", "dumps"], dumps=35)},
    "gpu-a02": {"row": row([])},
    "gpu-a03": {"row": row(["build", "unit"], build="0.32.1", unit_state="failed")},
}


def write_inventory(directory, hosts):
    path = os.path.join(directory, "hosts.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"all": {"children": {"vllm_fleet": {"hosts": dict((host, None) for host in hosts)}}}}, handle)
    return path


def ansible_playbook(directory, playbook, inventory, extra):
    extra_file = os.path.join(directory, "extra.json")
    with open(extra_file, "w") as handle:
        json.dump(dict(extra, audit_report_dir=os.path.join(directory, "reports")), handle)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable, "-e", "@" + extra_file,
                           playbook], env=env, capture_output=True, text=True, timeout=120, check=False)


def report_dir_task(plays):
    """The per-host read's first task, which names the report directory once (and reads the fleet lock), as a list."""
    fix = [task for play in plays if play["name"] == "Audit each host (read-only)" for task in play["tasks"]
           if task["name"] == "Fix the report directory's name once, read the fleet lock the hosts must hold (audit_lock)"]
    assert len(fix) == 1, "audit.yml lost the task that names the report directory"
    return fix


def run_report(tmp_path, fleet, **extra):
    """The audit's check and report plays around fake drift_info results: (process, report directory or None)."""
    with open(AUDIT) as handle:
        plays = yaml.safe_load(handle)
    check = [play for play in plays if play["name"] == "Check the audit's options"]
    report = [play for play in plays if play["name"] == "Fleet drift report"]
    assert len(check) == 1 and len(report) == 1, "audit.yml lost a play this test runs"
    fix = report_dir_task(plays)
    stand_in = {"name": "Stand-in for the per-host read", "hosts": "vllm_fleet", "gather_facts": False,
                "tasks": fix + [{"name": "The host's drift_info result", "ansible.builtin.set_fact": {
                    "gpufleet_drift": "{{ fake_fleet[inventory_hostname] }}",
                    # (no model directory in this fleet)
                    "gpufleet_models": []}}]}
    playbook = str(tmp_path / "audit.yml")
    with open(playbook, "w") as handle:
        yaml.safe_dump(check + [stand_in] + report, handle, sort_keys=False)
    proc = ansible_playbook(str(tmp_path), playbook, write_inventory(str(tmp_path), fleet), dict(extra, fake_fleet=fleet))
    reports = tmp_path / "reports"
    dirs = sorted(reports.iterdir()) if reports.is_dir() else []
    return proc, (dirs[0] if dirs else None)


def test_query_result_is_written_and_shown_and_the_run_passes(tmp_path):
    proc, report = run_report(tmp_path, FLEET, audit_query="hosts[?drift].{host:host,drift:drift}")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    expected = [{"host": "gpu-a01", "drift": ["integrity", "dumps"]}, {"host": "gpu-a03", "drift": ["build", "unit"]}]
    assert json.loads((report / "query.json").read_text()) == expected
    # the report it queried is drift.json, unchanged in form
    drift = json.loads((report / "drift.json").read_text())
    assert sorted(drift) == ["hosts", "not_audited"]
    assert [r["host"] for r in drift["hosts"]] == ["gpu-a01", "gpu-a02", "gpu-a03"]
    assert "audit_query: hosts[?drift].{host:host,drift:drift}" in output
    assert "written_to: %s/query.json" % report in output


def test_gate_fails_the_run_naming_the_query_and_its_result(tmp_path):
    proc, report = run_report(tmp_path, FLEET, audit_query="hosts[?contains(drift,'dumps')].host", audit_fail_on_query=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert json.loads((report / "query.json").read_text()) == ["gpu-a01"]
    assert ("audit_query matched (hosts[?contains(drift,'dumps')].host): [\"gpu-a01\"] (the whole result: %s/query.json)."
            % report) in output


def test_gate_passes_when_the_result_is_empty(tmp_path):
    proc, report = run_report(tmp_path, FLEET, audit_query="hosts[?unit_state=='activating'].host", audit_fail_on_query=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((report / "query.json").read_text()) == []
    assert "audit_query matched (" not in proc.stdout


def test_gate_on_a_count_of_zero_passes(tmp_path):
    # length(...) gives 0 when nothing matches: empty for the gate, as [] is
    proc, report = run_report(tmp_path, FLEET, audit_query="length(hosts[?dumps > `100`])", audit_fail_on_query="true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((report / "query.json").read_text()) == 0


def test_without_audit_query_no_query_file(tmp_path):
    proc, report = run_report(tmp_path, FLEET)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (report / "drift.json").is_file() and not (report / "query.json").exists()


def test_fail_on_query_without_a_query_is_refused_before_reading(tmp_path):
    proc, report = run_report(tmp_path, FLEET, audit_fail_on_query=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "audit_fail_on_query=true needs audit_query" in output
    assert "Stand-in for the per-host read" not in output and report is None


def test_bad_expression_is_refused_before_any_host_is_read(tmp_path):
    # the real playbook, whole: its read of the hosts would show as a task of its own
    inventory = write_inventory(str(tmp_path), ["gpu-a01", "gpu-a02"])
    proc = ansible_playbook(str(tmp_path), AUDIT, inventory, {"audit_query": "hosts[?drift"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert ("audit_query refused, nothing was read from the hosts: not a valid JMESPath expression "
            "(Incomplete expression, at character 13): hosts[?drift") in output
    assert READ_TASK not in output
    assert not (tmp_path / "reports").exists()


def test_unknown_function_is_refused_before_any_host_is_read(tmp_path):
    inventory = write_inventory(str(tmp_path), ["gpu-a01"])
    proc = ansible_playbook(str(tmp_path), AUDIT, inventory, {"audit_query": "hosts[?lenght(drift) > `0`].host"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "unknown function lenght(); the functions are abs," in output
    assert READ_TASK not in output
