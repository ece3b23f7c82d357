# SPDX-License-Identifier: GPL-3.0-or-later
"""The reinstall role's stage entry point, run by real Ansible on localhost in a check-mode play: one
vllm_envs call reads, checks and decides (none, reuse, build), one set_fact keeps what the switch, the rollout
and the service's cutover read. The decision's cases themselves: tests/unit/plugins/modules/test_vllm_envs.py.
"""

import json
import os

import pytest
import yaml

from helpers import REPO, load_source, run_plays

fake = load_source("gpufleet_fingerprint_helpers_stage", "tests", "unit", "plugins", "module_utils", "test_fingerprint.py")

CURRENT = "vllm-0.33.0-20261204T101500Z"
EARLIER = "vllm-0.33.0-20261203T080000Z"

STAGE = """
- name: Stage, {name}
  hosts: localhost
  gather_facts: false
  check_mode: true
  vars:
    fleet_envs_dir: {envs}
    fleet_current_link: {current}
    fleet_previous_link: {previous}
    reinstall_resolve: false
    reinstall_locked: false
    reinstall_version: "0.33.0"
    reinstall_uv_cache_dir: {cache}
    reinstall_min_free_mib: 0
    reinstall_force: {force}
  tasks:
    - name: Resolve and stage
      block:
        - name: Resolve
          ansible.builtin.include_role:
            name: gpufleet.vllm.reinstall
            tasks_from: resolve
        - name: Stage
          ansible.builtin.include_role:
            name: gpufleet.vllm.reinstall
            tasks_from: stage
        - name: Keep what it decided
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}': {{
                      'action': reinstall_stage_action, 'staged': reinstall_staged_env,
                      'current': reinstall_current_env, 'check_mode': reinstall_envs.check_mode,
                      'current_pristine': reinstall_current_check.pristine,
                      'current_fingerprint_skipped': reinstall_current_fingerprint.skipped | default(false),
                      'reuse_pristine': reinstall_reuse_check.pristine | default('skipped'),
                      'reuse_fingerprint_skipped': reinstall_reuse_fingerprint.skipped | default(false)}}}}) }}}}"
      rescue:
        - name: Keep the failure
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}': ansible_failed_task.name ~ ': '
                      ~ ansible_failed_result.msg | default('?')}}) }}}}"
"""


@pytest.fixture
def hosts(tmp_path):
    envs = tmp_path / "envs"
    for name in (CURRENT, EARLIER):
        fake.add_dist(envs / name, "vllm", "0.33.0", files={"vllm/__init__.py": b"X = 1\n", "vllm/core.py": b"x = 1\n"})
    os.symlink(str(envs / CURRENT), str(tmp_path / "current"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path, envs


def _stage(tmp, envs, name, force=False):
    return STAGE.format(name=name, envs=json.dumps(str(envs)), current=json.dumps(str(tmp / "current")),
                        previous=json.dumps(str(tmp / "previous")), cache=json.dumps(str(tmp / "cache")),
                        force=json.dumps(force))


def test_stage_decides_in_one_call(hosts):
    tmp, envs = hosts
    found = run_plays(_stage(tmp, envs, "pristine", False), str(tmp / "out"))
    assert found["pristine"] == {"action": "none", "staged": str(envs / CURRENT), "current": str(envs / CURRENT),
                                 "check_mode": True, "current_pristine": True, "current_fingerprint_skipped": True,
                                 "reuse_pristine": "skipped", "reuse_fingerprint_skipped": True}, found
    fake.edit(os.path.join(fake.site_of(envs / CURRENT), "vllm", "core.py"), b"x = 1", b"x = 2")
    found = run_plays(_stage(tmp, envs, "modified", False), str(tmp / "out"))
    assert found["modified"]["action"] == "reuse" and found["modified"]["staged"] == str(envs / EARLIER), found
    assert found["modified"]["current_pristine"] is False and found["modified"]["reuse_pristine"] is True
    found = run_plays(_stage(tmp, envs, "forced", True), str(tmp / "out"))
    assert found["forced"]["action"] == "build", found
    assert os.path.dirname(found["forced"]["staged"]) == str(envs)
    assert os.path.basename(found["forced"]["staged"]).startswith("vllm-0.33.0-2")
    # (check mode: nothing was created)
    assert sorted(os.listdir(str(envs))) == sorted([CURRENT, EARLIER])


def test_stage_reads_and_decides_in_two_tasks():
    with open(os.path.join(REPO, "roles", "reinstall", "tasks", "stage.yml")) as handle:
        tasks = yaml.safe_load(handle)
    before_build = []
    for task in tasks:
        if task.get("name") == "Build the new environment":
            break
        before_build.append(task)
    # (the values' checks, then the one module call and the one set_fact)
    assert [next(k for k in task if k.startswith("ansible.builtin.") or k.startswith("gpufleet."))
            for task in before_build] == ["ansible.builtin.import_tasks", "gpufleet.vllm.vllm_envs",
                                          "ansible.builtin.set_fact"]
    assert before_build[1]["gpufleet.vllm.vllm_envs"]["decide"] is True
