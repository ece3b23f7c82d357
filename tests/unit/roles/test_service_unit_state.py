# SPDX-License-Identifier: GPL-3.0-or-later
"""The service role reads its unit through gpufleet.vllm.managed_units (its keep_state), run by real Ansible.

One ansible-playbook run (local connection) with the fake systemd of
tests/unit/fakesystemd.py first on PATH: tasks/unit.yml in check mode for a
running and a stopped unit (service_unit_active, and the restart the role
would do), and tasks/stop_server.yml for a unit systemd does not know (no
stop, was_active false). The facts the rest of the role and the playbooks
read keep their meaning.
"""

import json
import os
import subprocess
import sys

import pytest

import fakesystemd
from helpers import run_plays

UNIT = "vllm-kimi-k25"

PLAY = """
- name: Read units through the role
  hosts: localhost
  gather_facts: false
  environment:
    PATH: "{bindir}:{{{{ ansible_env.PATH | default(lookup('env', 'PATH')) }}}}"
    FAKE_SYSTEMD_DIR: "{state}"
  vars:
    service_model: /models/kimi-k2.5
    service_unit_dir: "{out}/units"
    service_vram_check: false
  tasks:
    - name: Role defaults and vars (a static import whose tasks are all skipped)
      ansible.builtin.import_role:
        name: gpufleet.vllm.service
      when: false
    - name: Render the running unit (check mode)
      ansible.builtin.include_role:
        name: gpufleet.vllm.service
        tasks_from: unit.yml
      vars:
        fleet_unit_name: {unit}
      args:
        apply:
          check_mode: true
    - name: Keep what the role noted
      ansible.builtin.set_fact:
        seen: "{{{{ {{'running': {{'changed': service_unit_changed, 'active': service_unit_active,
                  'exists': __service_before.keep_state.exists, 'main_pid': __service_before.keep_state.main_pid}}}} }}}}"
    - name: Render a stopped unit (check mode)
      ansible.builtin.include_role:
        name: gpufleet.vllm.service
        tasks_from: unit.yml
      vars:
        fleet_unit_name: {unit}-stopped
      args:
        apply:
          check_mode: true
    - name: Keep what the role noted
      ansible.builtin.set_fact:
        seen: "{{{{ seen | combine({{'stopped': {{'active': service_unit_active, 'loaded': __service_before.keep_state.loaded}}}}) }}}}"
    - name: Stop a unit systemd does not know
      ansible.builtin.include_role:
        name: gpufleet.vllm.service
        tasks_from: stop_server.yml
      vars:
        fleet_unit_name: vllm-unknown
    - name: Keep what the stop recorded
      ansible.builtin.set_fact:
        seen: "{{{{ seen | combine({{'unknown': service_result}}) }}}}"
    # the rollout: its plan renders a new unit in check mode (the facts say it does not exist), the batch
    # renders it for real and cuts over; the enable step then reads the unit itself
    - name: Plan a new unit (check mode)
      ansible.builtin.include_role:
        name: gpufleet.vllm.service
        tasks_from: unit.yml
      vars:
        fleet_unit_name: vllm-new
      args:
        apply:
          check_mode: true
    - name: The unit now exists (rendered and started by the batch)
      ansible.builtin.copy:
        content: '{{{{ {{"argv": ["/bin/true"]}} | to_json }}}}'
        dest: "{state}/vllm-new.service.json"
        mode: "0600"
    - name: Make it the unit that starts at boot
      ansible.builtin.include_role:
        name: gpufleet.vllm.service
        tasks_from: enable
      vars:
        fleet_unit_name: vllm-new
    - name: Write what was seen
      ansible.builtin.copy:
        content: "{{{{ seen | to_json }}}}"
        dest: "{out}/seen.json"
        mode: "0600"
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    out = tmp_path_factory.mktemp("unit_state")
    state = str(out / "systemd")
    bindir = str(out / "bin")
    env = fakesystemd.install(bindir, state)
    os.makedirs(str(out / "units"))
    for unit in (UNIT, UNIT + "-stopped"):
        fakesystemd.write_unit(state, unit + ".service", [sys.executable, "-c", "import time; time.sleep(600)"])
    run_env = dict(os.environ, **env)
    subprocess.run(["systemctl", "start", "--", UNIT + ".service"], env=run_env, check=True, timeout=30)
    try:
        errors = run_plays(PLAY.format(bindir=bindir, state=state, out=str(out), unit=UNIT), str(out))
        with open(str(out / "seen.json"), encoding="utf-8") as handle:
            result = json.load(handle)
        with open(os.path.join(state, "calls"), encoding="utf-8") as handle:
            result["calls"] = handle.read().splitlines()
    finally:
        subprocess.run(["systemctl", "stop", "--", UNIT + ".service"], env=run_env, check=False, timeout=30)
    assert errors == {}
    return result


def test_a_running_unit_is_active_and_would_be_restarted(seen):
    assert seen["running"]["active"] is True and seen["running"]["exists"] is True
    assert seen["running"]["changed"] is True  # check mode: the unit file would be written
    assert seen["running"]["main_pid"] > 0


def test_a_stopped_unit_is_not_active(seen):
    assert seen["stopped"] == {"active": False, "loaded": True}


def test_a_unit_systemd_does_not_know_is_not_stopped(seen):
    result = seen["unknown"]
    assert result["unit"] == "vllm-unknown.service"
    assert result["was_active"] is False and result["stopped"] is False
    # managed_units read the units with systemctl show, even in check mode; nothing was stopped or started
    assert [c for c in seen["calls"] if not c.startswith("show ") and "vllm-new" not in c] == ["start %s.service" % UNIT]
    assert "show vllm-unknown.service" in seen["calls"]


def test_the_enable_step_enables_a_unit_the_plan_saw_missing(seen):
    # (the plan's check-mode read said the unit did not exist; enabling must not rely on it)
    assert "enable vllm-new.service" in seen["calls"]


STOP_PLAY = """
- name: Stop a unit through the role, its model not given, the VRAM checks off
  hosts: localhost
  gather_facts: false
  environment:
    PATH: "{bindir}:{{{{ ansible_env.PATH | default(lookup('env', 'PATH')) }}}}"
    FAKE_SYSTEMD_DIR: "{state}"
  vars:
    service_unit_dir: "{out}/units"
    service_vram_check: false
    fleet_unit_name: {unit}
  tasks:
    - name: Stop the running unit
      ansible.builtin.include_role:
        name: gpufleet.vllm.service
        tasks_from: stop
    - name: Keep what the stop recorded
      ansible.builtin.set_fact:
        seen: "{{{{ {{'first': service_result}} }}}}"
    - name: Stop it again
      ansible.builtin.include_role:
        name: gpufleet.vllm.service
        tasks_from: stop
    - name: Write what was seen
      ansible.builtin.copy:
        content: "{{{{ seen | combine({{'again': service_result}}) | to_json }}}}"
        dest: "{out}/stopped.json"
        mode: "0600"
"""


def test_the_stop_needs_no_model_and_runs_with_the_inventorys_interpreter(tmp_path):
    """The stop is vllm_cutover start=false with the host's own interpreter (VRAM checks off): read through
    hostvars, not through the task's own ansible_python_interpreter (a recursive template); service_model is not
    needed to stop. A second stop changes nothing."""
    state = str(tmp_path / "systemd")
    bindir = str(tmp_path / "bin")
    env = fakesystemd.install(bindir, state)
    os.makedirs(str(tmp_path / "units"))
    fakesystemd.write_unit(state, UNIT + ".service", [sys.executable, "-c", "import time; time.sleep(600)"])
    run_env = dict(os.environ, **env)
    subprocess.run(["systemctl", "start", "--", UNIT + ".service"], env=run_env, check=True, timeout=30)
    try:
        errors = run_plays(STOP_PLAY.format(bindir=bindir, state=state, out=str(tmp_path), unit=UNIT), str(tmp_path),
                           interpreter_in_inventory=True)
    finally:
        subprocess.run(["systemctl", "stop", "--", UNIT + ".service"], env=run_env, check=False, timeout=30)
    assert errors == {}
    with open(str(tmp_path / "stopped.json"), encoding="utf-8") as handle:
        seen = json.load(handle)
    first, again = seen["first"], seen["again"]
    assert first["state"] == "stopped" and first["was_active"] is True and first["stopped"] is True
    assert first["changed"] is True and first["stop_began"] > 0 and first["stopped_at"].endswith("Z")
    assert again["changed"] is False and again["was_active"] is False and again["stopped"] is False
