# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The task file that judges each model directory (playbooks/tasks/model.yml) and the rollout's refusal, run by real
ansible-playbook (in check mode: model_info then writes no hash cache) against simulated model directories on this
machine: fleet_model_check off as YAML reads an unquoted off, a module that fails on one host, and the rollout's
pre-flight tasks as rollout.yml has them, which refuse a host the run would restart, and only such a host."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from helpers import load_source

query_tests = load_source("gpufleet_audit_query_for_model_tasks", "tests", "unit", "playbooks", "test_audit_query.py")
make_model_dir = load_source("gpufleet_sim_make_model_dir_tasks", "tests", "sim", "model", "make_model_dir.py")
MODEL_TASKS = os.path.join(query_tests.REPO, "playbooks", "tasks", "model.yml")
ROLLOUT = os.path.join(query_tests.REPO, "playbooks", "rollout.yml")
DAMAGE = os.path.join(query_tests.REPO, "tests", "sim", "model", "damage_model.py")
REFUSAL = "Refuse to restart a host whose model directory is broken or not the recorded one"
JUDGE = "Judge the model directories of a host the run will restart"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("model-tasks")
    source = make_model_dir.make_model_dir(str(root / "source"))["model_dir"]
    made = {}
    for name, faults in (("whole", []), ("broken", ["truncate-shard"]), ("linked", [])):
        path = str(root / name)
        shutil.copytree(source, path, symlinks=True)
        if faults:
            subprocess.run([sys.executable, DAMAGE, path] + faults, check=True, capture_output=True, timeout=60)
        made[name] = path
    # a link out of the directory: reported, not a reason to refuse a restart
    os.symlink("/etc/hostname", os.path.join(made["linked"], "README.md"))
    made["missing"] = str(root / "not-there")
    return made


def run(tmp_path, tasks, hosts, group_vars, check=True):
    play = {"name": "Model directories", "hosts": "vllm_fleet", "gather_facts": False, "tasks": tasks}
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    # (group_vars written as YAML text: an unquoted off must stay what YAML makes of it)
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_fleet": {"hosts": hosts}}}}) +
                         "".join("      %s\n" % line for line in ["vars:"] + ["  " + v for v in group_vars]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(query_tests.REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(query_tests.REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), "-c", "local",
            "-e", "ansible_python_interpreter=" + sys.executable, str(playbook)] + (["--check"] if check else [])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
    return proc, proc.stdout + proc.stderr


FLEET = ["fleet_model_check_workers: 0", "fleet_model_check_timeout: 60", "fleet_model_fingerprints: {}"]


def show_models():
    return {"name": "Show", "ansible.builtin.debug": {"msg": "MODELS {{ gpufleet_models | to_json }}"}}


def test_an_unquoted_off_checks_nothing(tmp_path, dirs):
    tasks = [{"name": "Model tasks", "ansible.builtin.import_tasks": MODEL_TASKS}, show_models()]
    proc, out = run(tmp_path, tasks, {"gpu-a01": {"fleet_model_dirs": [dirs["broken"]]}},
                    FLEET + ["fleet_model_check: off"])
    words = " ".join(out.split())
    assert proc.returncode == 0, out
    assert '"off": true' in words and '"checked": false' in words and "value of mode must be one of" not in words, out


def test_a_check_that_fails_on_a_host_is_noted_not_a_failed_task(tmp_path, dirs):
    tasks = [{"name": "Model tasks", "ansible.builtin.import_tasks": MODEL_TASKS}, show_models()]
    proc, out = run(tmp_path, tasks, {"gpu-a01": {"fleet_model_dirs": [dirs["missing"]]}},
                    FLEET + ["fleet_model_check: quick"])
    words = " ".join(out.split())
    assert proc.returncode == 0, out
    assert re.search(r'"error": "Cannot check the model directory: [^"]*not-there', words), out
    assert re.search(r"gpu-a01 +: ok=\d+ .* failed=0 ", out), out


def rollout_tasks():
    """The rollout pre-flight's model tasks, as rollout.yml has them (the import made absolute)."""
    with open(ROLLOUT) as handle:
        plays = yaml.safe_load(handle)
    tasks = [task for task in plays[0]["tasks"] if task.get("name") in (JUDGE, REFUSAL)]
    assert [task["name"] for task in tasks] == [JUDGE, REFUSAL], "rollout.yml lost its model tasks"
    tasks[0]["ansible.builtin.import_tasks"] = MODEL_TASKS
    return [{"name": "The plan", "ansible.builtin.set_fact": {"rollout_needs": "{{ needs }}", "rollout_skipped": ""}}] \
        + tasks


def test_the_rollout_refuses_a_host_it_would_restart_and_only_such_a_host(tmp_path, dirs):
    hosts = {
        # would be restarted, model whole: passes
        "gpu-a01": {"fleet_model_dirs": [dirs["whole"]], "needs": ["restart"]},
        # would be restarted, a shard truncated: refused, naming it
        "gpu-a02": {"fleet_model_dirs": [dirs["broken"]], "needs": ["build 0.33.1 (from 0.33.0)"]},
        # needs nothing: not read, not refused (the audit reports it)
        "gpu-a03": {"fleet_model_dirs": [dirs["broken"]], "needs": []},
        # would be restarted, a link out of the directory: reported by the audit, not a refusal
        "gpu-a04": {"fleet_model_dirs": [dirs["linked"]], "needs": ["restart"]},
        # would be restarted, the directory cannot be checked: refused with the module's reason
        "gpu-a05": {"fleet_model_dirs": [dirs["missing"]], "needs": ["restart"]},
    }
    proc, out = run(tmp_path, rollout_tasks(), hosts, FLEET + ["fleet_model_check: quick"])
    words = " ".join(out.split())
    for host, failed in (("gpu-a01", 0), ("gpu-a02", 1), ("gpu-a03", 0), ("gpu-a04", 0), ("gpu-a05", 1)):
        assert re.search(r"%s +: ok=\d+ .* failed=%d " % (host, failed), out), (host, out)
    assert ("gpu-a02 was not touched, nor was any other host: The model directory %s is broken, so vLLM would fail "
            "to load it after the stop: model-00004-of-00004.safetensors: " % dirs["broken"]) in words, words
    assert "The model directory %s could not be checked: Cannot check the model directory" % dirs["missing"] in words


def test_a_recorded_mismatch_is_refused_unless_the_run_edits_the_configs(tmp_path, dirs):
    record = "fleet_model_fingerprints: {%s: 'sha256:%s'}" % (dirs["whole"], "0" * 64)
    hosts = {"gpu-a01": {"fleet_model_dirs": [dirs["whole"]], "needs": ["restart"]},
             "gpu-a02": {"fleet_model_dirs": [dirs["whole"]], "needs": ["config (2 keys)", "restart"]}}
    proc, out = run(tmp_path, rollout_tasks(), hosts, FLEET[:2] + [record, "fleet_model_check: quick"])
    words = " ".join(out.split())
    assert re.search(r"gpu-a01 +: ok=\d+ .* failed=1 ", out) and re.search(r"gpu-a02 +: ok=\d+ .* failed=0 ", out), out
    assert "holds other bytes than fleet_model_fingerprints records: its fingerprint is sha256:" in words
