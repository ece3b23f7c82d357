# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit shows each host's model fingerprint and names each model fault on its host: drift.md (a column and a
section), drift.json, the lines it prints and model-fingerprints.yml, which pins what most hosts hold.

Run by real ansible-playbook: the audit's own plays (the options check, the task of tasks/model.yml that notes each
model directory, the report) around fake drift_info rows, with each host's model_info results made by
module_utils/modeldir on real simulated model directories (tests/sim/model), damaged by tests/sim/model/damage_model.py
as the rollout scenario damages its hosts'. The task that runs model_info on the hosts is the rollout scenario's."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpufleet.vllm.plugins.module_utils import modeldir
from helpers import load_source

query_tests = load_source("gpufleet_audit_query_for_models", "tests", "unit", "playbooks", "test_audit_query.py")
make_model_dir = load_source("gpufleet_sim_make_model_dir_audit", "tests", "sim", "model", "make_model_dir.py")
MODEL_TASKS = os.path.join(query_tests.REPO, "playbooks", "tasks", "model.yml")
DAMAGE = os.path.join(query_tests.REPO, "tests", "sim", "model", "damage_model.py")
NOTE_TASK = "Note each model directory's verdict and fingerprint against fleet_model_fingerprints"
MODEL = "/shared/kimi-k2.5-nvfp4"
FAULTS = {"gpu-a01": [], "gpu-a02": ["tokenizer-revision"], "gpu-a03": ["truncate-shard", "lfs-pointer", "missing-shard"],
          "gpu-a04": []}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Each host's model_info result for MODEL: a copy of the simulated model directory, damaged by FAULTS."""
    root = tmp_path_factory.mktemp("models")
    source = make_model_dir.make_model_dir(str(root / "source"))["model_dir"]
    out = {}
    for host, faults in FAULTS.items():
        copy = str(root / host)
        shutil.copytree(source, copy, symlinks=True)
        if faults:
            subprocess.run([sys.executable, DAMAGE, copy] + faults, check=True, capture_output=True, timeout=60)
        result = modeldir.check_model_dir(copy, mode="quick")
        # (as the host reports it: the loop's item is the inventory's path, the same on every host)
        result.update(item=MODEL, path=MODEL, changed=False, failed=False)
        out[host] = {"results": [json.loads(json.dumps(result))], "changed": False, "msg": "All items completed"}
    return out


def run_audit(tmp_path, fleet, models, group_vars, host_vars=None, **extra):
    with open(query_tests.AUDIT) as handle:
        plays = yaml.safe_load(handle)
    with open(MODEL_TASKS) as handle:
        note = [task for task in yaml.safe_load(handle) if task["name"] == NOTE_TASK]
    check = [play for play in plays if play["name"] == "Check the audit's options"]
    report = [play for play in plays if play["name"] == "Fleet drift report"]
    assert len(check) == 1 and len(report) == 1 and len(note) == 1, "audit.yml or tasks/model.yml lost what this test runs"
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"fleet": fleet, "models": models}))
    stand_in = {"name": "Stand-in for the per-host read", "hosts": "vllm_fleet", "gather_facts": False,
                "tasks": query_tests.report_dir_task(plays) + [{
                    "name": "The host's drift_info and model_info results", "ansible.builtin.set_fact": {
                        "gpufleet_drift": "{{ (lookup('ansible.builtin.file', %r) | from_json).fleet[inventory_hostname] }}"
                                          % str(facts),
                        "gpufleet_model": "{{ (lookup('ansible.builtin.file', %r) | from_json).models[inventory_hostname] }}"
                                          % str(facts)}}] + note}
    playbook = str(tmp_path / "audit.yml")
    with open(playbook, "w") as handle:
        yaml.safe_dump(check + [stand_in] + report, handle, sort_keys=False)
    inventory = tmp_path / "hosts.yml"
    with open(str(inventory), "w") as handle:
        yaml.safe_dump({"all": {"children": {"vllm_fleet": {"hosts": dict((host, (host_vars or {}).get(host)) for host in fleet),
                                                            "vars": dict({"fleet_model_dirs": [MODEL]}, **group_vars)}}}},
                       handle)
    proc = query_tests.ansible_playbook(str(tmp_path), playbook, str(inventory), dict(extra, audit_quality=False))
    reports = tmp_path / "reports"
    dirs = sorted(reports.iterdir()) if reports.is_dir() else []
    return proc, (dirs[0] if dirs else None)


def fleet_of(hosts):
    return dict((host, {"row": query_tests.row([])}) for host in hosts)


def test_each_fault_is_named_on_its_host_and_the_whole_hosts_pin_the_fingerprint(tmp_path, results):
    proc, report = run_audit(tmp_path, fleet_of(FAULTS), results, {"fleet_model_fingerprints": {}})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    rows = dict((row["host"], row) for row in json.loads((report / "drift.json").read_text())["hosts"])
    good = results["gpu-a01"]["results"][0]["fingerprint"]
    # gpu-a01 and gpu-a04 are whole and alike: the reference
    for host in ("gpu-a01", "gpu-a04"):
        assert rows[host]["drift"] == [] and rows[host]["model"][0]["fingerprint"] == good
        assert rows[host]["model"][0]["fleet"] == "same as 2 of 4 hosts"
    tokenizer = rows["gpu-a02"]["model"][0]
    assert tokenizer["ok"] is True and tokenizer["finding"] == "differs" and rows["gpu-a02"]["drift"] == ["model"]
    assert tokenizer["differs"] == ["tokenizer.json (other content)", "tokenizer_config.json (other content)"]
    broken = rows["gpu-a03"]["model"][0]
    assert broken["finding"] == "broken" and rows["gpu-a03"]["drift"] == ["model"]
    assert {("model-00004-of-00004.safetensors", "truncated"), ("model-00001-of-00004.safetensors", "lfs_pointer"),
            ("model-00002-of-00004.safetensors", "missing")} <= set((p["file"], p["kind"]) for p in broken["problems"])
    md = (report / "drift.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| gpu-a0")]
    assert md.splitlines()[2].split(" | ")[5] == "model", md.splitlines()[2]
    assert table[2].startswith("| gpu-a03 | model |") and "| BROKEN (3 problems) |" in table[2], table[2]
    assert "## Model directories" in md and "**gpu-a03**:" in md
    assert "- model-00001-of-00004.safetensors: Git LFS pointer" in md
    words = " ".join(output.split())
    assert "gpu-a03: DRIFT: model, vllm 0.33.0, pristine, model %s: BROKEN: " % MODEL in words
    assert "gpu-a02: DRIFT: model, vllm 0.33.0, pristine, model %s: sha256:" % MODEL in words
    assert "DIFFERS from the fleet (2 of 4 hosts hold sha256:" in words
    # the broken directory lacks a shard the reference has
    assert "model-00002-of-00004.safetensors (missing here)" in broken["differs"]
    text = (report / "model-fingerprints.yml").read_text()
    assert yaml.safe_load(text) == {"fleet_model_fingerprints": {MODEL: good}}
    assert "# %s: held by 2 of the 4 hosts that checked it." % MODEL in text


def test_two_hosts_that_disagree_are_both_flagged_and_nothing_is_pinned(tmp_path, results):
    hosts = dict((host, results[host]) for host in ("gpu-a01", "gpu-a02"))
    proc, report = run_audit(tmp_path, fleet_of(hosts), hosts, {"fleet_model_fingerprints": {}})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = dict((row["host"], row) for row in json.loads((report / "drift.json").read_text())["hosts"])
    for host in hosts:
        assert rows[host]["drift"] == ["model"] and rows[host]["model"][0]["fleet"].startswith(
            "DIFFERS: no fingerprint is held by more hosts than any other")
    text = (report / "model-fingerprints.yml").read_text()
    assert yaml.safe_load(text) == {"fleet_model_fingerprints": {}} and "so none is written for it" in text


def test_the_pasted_record_decides_and_fail_on_drift_fails_the_run(tmp_path, results):
    good = results["gpu-a01"]["results"][0]["fingerprint"]
    hosts = dict((host, results[host]) for host in ("gpu-a01", "gpu-a02"))
    proc, report = run_audit(tmp_path, fleet_of(hosts), hosts, {"fleet_model_fingerprints": {MODEL: good}},
                             audit_fail_on_drift=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "msg: Drift on gpu-a02 (see " in output, output
    rows = dict((row["host"], row) for row in json.loads((report / "drift.json").read_text())["hosts"])
    assert rows["gpu-a01"]["model"][0]["fleet"] == "= recorded"
    assert "tokenizer.json (other content)" in rows["gpu-a02"]["model"][0]["differs"]
    assert "reference `%s` (recorded in fleet_model_fingerprints)" % good in (report / "drift.md").read_text()


def test_a_bad_record_on_one_host_is_refused_before_any_host_is_read(tmp_path, results):
    good = results["gpu-a01"]["results"][0]["fingerprint"]
    fleet = fleet_of(["gpu-a01", "gpu-a02"])
    proc, report = run_audit(tmp_path, fleet, dict((host, results[host]) for host in fleet),
                             {"fleet_model_fingerprints": {MODEL: good}},
                             host_vars={"gpu-a02": {"fleet_model_fingerprints": {"/shared/other": good}}})
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and report is None, output
    assert "fleet_model_fingerprints names /shared/other, which is not one of fleet_model_dirs" in " ".join(output.split())


def test_a_bad_record_is_refused_before_any_host_is_read(tmp_path, results):
    proc, report = run_audit(tmp_path, fleet_of(["gpu-a01"]), {"gpu-a01": results["gpu-a01"]},
                             {"fleet_model_fingerprints": {MODEL: "md5:0123"}})
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "fleet_model_fingerprints: the fingerprint of %s must be sha256:" % MODEL in output
    assert report is None
