# SPDX-License-Identifier: GPL-3.0-or-later
"""The reinstall role's stage entry point, run by real Ansible on localhost in a check-mode play: one
vllm_envs call reads, checks and decides (none, reuse, build), one set_fact keeps what the switch, the rollout
and the service's cutover read. The decision's cases themselves: tests/unit/plugins/modules/test_vllm_envs.py.
"""

import json
import os
import sys

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


def test_stage_reads_and_decides_in_two_tasks_and_builds_in_one():
    with open(os.path.join(REPO, "roles", "reinstall", "tasks", "stage.yml")) as handle:
        dispatch = yaml.safe_load(handle)
    # (in place: its own file; staged: one block)
    assert dispatch[0]["ansible.builtin.include_tasks"] == "_in_place.yml"
    assert dispatch[0]["when"] == "reinstall_mode == 'in_place'"
    assert dispatch[1]["when"] == "reinstall_mode == 'staged'" and len(dispatch) == 2
    tasks = dispatch[1]["block"]
    # (the values' checks, the one module call that decides and the one set_fact; then, for a build, the one module
    # run that builds, proves or removes: vllm_stage; uv was found by the pre-flight or the role's main)
    assert [next(k for k in task if k.startswith("ansible.builtin.") or k.startswith("gpufleet."))
            for task in tasks] == ["ansible.builtin.import_tasks", "gpufleet.vllm.vllm_envs",
                                   "ansible.builtin.set_fact", "gpufleet.vllm.vllm_stage"]
    assert tasks[1]["gpufleet.vllm.vllm_envs"]["decide"] is True
    assert tasks[3]["when"] == "reinstall_stage_action == 'build'"


BUILD = """
- name: Stage a build, {name}
  hosts: localhost
  gather_facts: false
  vars:
    fleet_envs_dir: {envs}
    fleet_current_link: {current}
    fleet_previous_link: {previous}
    reinstall_resolve: false
    reinstall_locked: false
    reinstall_version: "0.33.0"
    reinstall_force: true
    reinstall_uv: {uv}
    reinstall_uv_cache_dir: {cache}
    reinstall_python: {python}
    reinstall_no_index: true
    reinstall_find_links: [{house}]
    reinstall_extra_packages: {extra}
    reinstall_min_free_mib: 0
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
        - name: Keep what it built
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}': {{
                      'action': reinstall_stage_action, 'staged': reinstall_staged_env,
                      'msg': reinstall_build.msg, 'pristine': reinstall_build.check.pristine}}}}) }}}}"
      rescue:
        - name: Keep the failure
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}': ansible_failed_task.name ~ ': '
                      ~ ansible_failed_result.msg | default('?')}}) }}}}"
"""


def test_a_build_runs_with_the_roles_values_and_a_failure_leaves_nothing(hosts):
    """The role's values reach vllm_stage: a forced build with the real uv from a wheelhouse (offline), then one
    that asks for a package the wheelhouse does not have."""
    tmp, envs = hosts
    lock_tests = load_source("gpufleet_uv_lock_tests_role_stage", "tests", "unit", "plugins", "lookup", "test_uv_lock.py")
    if not lock_tests.have_uv():
        pytest.skip("uv is not installed on this control node")
    house = tmp / "wheelhouse"
    house.mkdir()
    lock_tests.make_wheel(house, "vllm", "0.33.0")

    def build(name, extra):
        return run_plays(BUILD.format(
            name=name, envs=json.dumps(str(envs)), current=json.dumps(str(tmp / "current")),
            previous=json.dumps(str(tmp / "previous")), cache=json.dumps(str(tmp / "cache")),
            uv=json.dumps(lock_tests.uvcli.find_uv("")), python=json.dumps(sys.executable),
            house=json.dumps(str(house)), extra=json.dumps(extra)), str(tmp / "out"))[name]

    built = build("built", [])
    assert built["action"] == "build" and built["pristine"] is True, built
    assert built["msg"] == "staged vllm 0.33.0 in %s (resolved on the host), proved pristine" % built["staged"]
    assert os.path.isfile(os.path.join(built["staged"], "bin", "python"))
    failed = build("failed", ["gpufleet-no-such-package"])
    assert failed.startswith("Build the new environment in one run and prove it pristine, vllm 0.33.0: Staging vllm "
                             "0.33.0 on localhost failed at 'install': "), failed
    assert "gpufleet-no-such-package" in failed
    assert failed.endswith("was removed; the service and %s were not touched." % (envs / CURRENT)), failed
    assert sorted(os.listdir(str(envs))) == sorted([CURRENT, EARLIER, os.path.basename(built["staged"])])


IN_PLACE = """
- name: In place, {name}
  hosts: localhost
  gather_facts: false
  check_mode: true
  vars:
    fleet_envs_dir: {envs}
    fleet_current_link: {current}
    fleet_previous_link: {previous}
    reinstall_mode: in_place
    reinstall_resolve: false
    reinstall_locked: false
    reinstall_version: "0.33.0"
    reinstall_uv_cache_dir: {cache}
    reinstall_min_free_mib: 0
  tasks:
    - name: Resolve and decide
      block:
        - name: Resolve
          ansible.builtin.include_role:
            name: gpufleet.vllm.reinstall
            tasks_from: resolve
        - name: Stage
          ansible.builtin.include_role:
            name: gpufleet.vllm.reinstall
            tasks_from: stage
      rescue:
        - name: Go on (what comes after the decision is not under test)
          ansible.builtin.debug:
            msg: "{{{{ ansible_failed_result.msg | default('') }}}}"
      always:
        - name: Keep what it decided
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}': reinstall_stage_action | default('unset')}}) }}}}"
"""


def test_in_place_an_install_that_did_not_finish_is_done_again_though_vllm_is_pristine(hosts):
    # a run killed during the in-place install leaves install.yml's mark next to the environment: the next run
    # installs again, although vLLM's own RECORD (all a run without a lock checks) says the target is there
    tmp, envs = hosts

    def decide(name):
        return run_plays(IN_PLACE.format(
            name=name, envs=json.dumps(str(envs)), current=json.dumps(str(tmp / "current")),
            previous=json.dumps(str(tmp / "previous")), cache=json.dumps(str(tmp / "cache"))), str(tmp / "out"))[name]

    assert decide("whole") == "none"
    (envs / (CURRENT + ".gpufleet-installing")).write_text("in-place install began\n")
    assert decide("interrupted") == "in_place"


def test_the_in_place_install_is_marked_while_it_runs_and_unmarked_once_proved():
    with open(os.path.join(REPO, "roles", "reinstall", "tasks", "install.yml")) as handle:
        tasks = [task for task in yaml.safe_load(handle) if "block" in task][0]["block"]
    mark = "{{ reinstall_current_env }}.gpufleet-installing"
    assert tasks[0]["ansible.builtin.copy"]["dest"] == mark
    # (after every install and every proof of it)
    assert tasks[-1]["ansible.builtin.file"] == {"path": mark, "state": "absent"}
    installs = [i for i, task in enumerate(tasks) if "ansible.builtin.command" in task]
    assert installs and 0 < min(installs) and max(installs) < len(tasks) - 1
