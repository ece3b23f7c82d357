# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles decide check mode from a module's result, not from ansible_check_mode.

ansible_check_mode reflects --check only: under a play's, a block's or an
include's ``check_mode: true`` it stays false (ansible-core 2.19), while every
module of that play runs in check mode. One ansible-playbook run (local
connection, the fake systemd of tests/unit/fakesystemd.py first on PATH)
runs host_tools, service and benchmark under a play-level check_mode and
host_tools under include_role's ``apply: {check_mode: true}``, and keeps what
each role published.
"""

import json
import os
import socket

import pytest

import fakesystemd
from helpers import run_plays

PLAYS = """
- name: A play in check mode (ansible_check_mode stays false)
  hosts: localhost
  gather_facts: false
  check_mode: true
  environment:
    PATH: "{bindir}:{{{{ ansible_env.PATH | default(lookup('env', 'PATH')) }}}}"
    FAKE_SYSTEMD_DIR: "{state}"
  vars:
    service_model: /models/kimi-k2.5
    service_unit_dir: "{out}/units"
    service_vram_check: false
    service_port: {port}
    fleet_unit_name: vllm-check-mode
    benchmark_port: {port}
    benchmark_vllm_executable: /bin/false
    benchmark_tokenizer: /models/kimi-k2.5
    benchmark_local_results_dir: "{out}/bench"
    benchmark_result_dir: "{out}/bench-host"
  tasks:
    - name: Host tools on a host without the venv
      ansible.builtin.include_role:
        name: gpufleet.vllm.host_tools
      vars:
        fleet_tools_venv: "{out}/no-tools"
    - name: Keep what host_tools published
      ansible.builtin.set_fact:
        seen: "{{{{ {{'play_missing': {{'ready': host_tools_ready, 'ansible_check_mode': ansible_check_mode}}}} }}}}"
    - name: Host tools on a host with the venv
      ansible.builtin.include_role:
        name: gpufleet.vllm.host_tools
      vars:
        fleet_tools_venv: "{out}/tools"
    - name: Keep what host_tools published
      ansible.builtin.set_fact:
        seen: "{{{{ seen | combine({{'play_present': {{'ready': host_tools_ready, 'pip': host_tools_pip}}}}) }}}}"
    - name: The service role for a unit that does not exist yet
      block:
        - name: Start the server (check mode)
          ansible.builtin.include_role:
            name: gpufleet.vllm.service
        - name: Keep what the service role recorded
          ansible.builtin.set_fact:
            seen: "{{{{ seen | combine({{'service': service_result}}) }}}}"
      rescue:
        - name: Keep the failure
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'service': ansible_failed_task.name ~ ': '
                      ~ ansible_failed_result.msg | default('?')}}) }}}}"
    - name: The benchmark role against a server that is not there
      block:
        - name: Benchmark (check mode)
          ansible.builtin.include_role:
            name: gpufleet.vllm.benchmark
        - name: Keep what the benchmark role published
          ansible.builtin.set_fact:
            seen: "{{{{ seen | combine({{'benchmark': {{'record': benchmark_record,
                      'result': benchmark_result | default('undefined')}}}}) }}}}"
      rescue:
        - name: Keep the failure
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'benchmark': ansible_failed_task.name ~ ': '
                      ~ ansible_failed_result.msg | default('?')}}) }}}}"

- name: An include in check mode (apply), in a play that is not
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Host tools on a host without the venv, the include in check mode
      ansible.builtin.include_role:
        name: gpufleet.vllm.host_tools
        apply:
          check_mode: true
      vars:
        fleet_tools_venv: "{out}/no-tools"
    - name: Write what was seen
      ansible.builtin.copy:
        content: "{{{{ seen | combine({{'apply_missing': {{'ready': host_tools_ready}}}}) | to_json }}}}"
        dest: "{out}/seen.json"
        mode: "0600"
"""


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    out = tmp_path_factory.mktemp("check_mode")
    state = str(out / "systemd")
    bindir = str(out / "bin")
    fakesystemd.install(bindir, state)
    os.makedirs(str(out / "units"))
    os.makedirs(str(out / "tools" / "bin"))
    with open(str(out / "tools" / "bin" / "python"), "w", encoding="utf-8") as handle:
        handle.write("#!/bin/sh\n")
    errors = run_plays(PLAYS.format(bindir=bindir, state=state, out=str(out), port=_free_port()), str(out))
    with open(str(out / "seen.json"), encoding="utf-8") as handle:
        seen = json.load(handle)
    calls_file = os.path.join(state, "calls")
    calls = []
    if os.path.exists(calls_file):
        with open(calls_file, encoding="utf-8") as handle:
            calls = handle.read().splitlines()
    return {"errors": errors, "seen": seen, "calls": calls, "out": out}


def test_ansible_check_mode_is_false_under_a_play_level_check_mode(outcome):
    # the premise of the convention (ansible-core 2.19): the variable does not see a play's check_mode
    assert outcome["seen"]["play_missing"]["ansible_check_mode"] is False


def test_host_tools_are_not_ready_without_a_venv_under_a_play_level_check_mode(outcome):
    assert outcome["seen"]["play_missing"]["ready"] is False
    assert not (outcome["out"] / "no-tools").exists()


def test_host_tools_are_not_ready_without_a_venv_under_an_include_in_check_mode(outcome):
    assert outcome["seen"]["apply_missing"]["ready"] is False


def test_host_tools_with_a_venv_are_ready_and_install_nothing_in_check_mode(outcome):
    seen = outcome["seen"]["play_present"]
    assert seen["ready"] is True
    assert seen["pip"].get("skipped") is True and seen["pip"].get("changed") is False


def test_service_in_check_mode_does_not_start_a_unit_that_does_not_exist(outcome):
    assert "service" not in outcome["errors"]
    result = outcome["seen"]["service"]
    assert result["check_mode"] is True
    assert result["started"] is False and result["ready"] is False
    assert not [call for call in outcome["calls"] if not call.startswith("show ")]
    assert not os.listdir(str(outcome["out"] / "units"))


def test_benchmark_in_check_mode_measures_and_records_nothing(outcome):
    assert "benchmark" not in outcome["errors"]
    seen = outcome["seen"]["benchmark"]
    assert seen["record"] is None and seen["result"] == "undefined"
    assert not (outcome["out"] / "bench").exists() and not (outcome["out"] / "bench-host").exists()
