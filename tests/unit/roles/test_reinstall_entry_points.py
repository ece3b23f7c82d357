# SPDX-License-Identifier: GPL-3.0-or-later
"""The reinstall role's resolve and cleanup entry points, run by real Ansible on localhost.

resolve: one resolution per request for a serial play (a fake uv on the
control node counts its calls), every host of every batch given the same
version. cleanup: a play with ``check_mode: true`` (not --check, so
ansible_check_mode is false) removes nothing; a real run removes only what
it listed, never the current or previous environment.
"""

import json
import os
import stat
import subprocess
import sys

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from helpers import REPO, run_plays

FAKE_UV = """#!/bin/sh
echo call >> "{calls}"
cat > /dev/null
echo "vllm==0.33.$(wc -l < "{calls}" | tr -d ' ')"
"""

RESOLVE = """---
- name: Resolve, serial
  hosts: all
  gather_facts: false
  serial: 2
  vars:
    reinstall_resolve_uv: {uv}
    reinstall_resolve_no_index: true
    reinstall_resolve_find_links: [{out_dir}]
    reinstall_locked: {locked}
    reinstall_resolve_python_version: "3.11"
    reinstall_resolve_python_platform: x86_64-manylinux_2_36
  tasks:
    - name: Resolve
      ansible.builtin.include_role:
        name: gpufleet.vllm.reinstall
        tasks_from: resolve

- name: Write what each host got
  hosts: h1
  gather_facts: false
  tasks:
    - name: Versions
      ansible.builtin.copy:
        content: "{{{{ dict(groups['all'] | zip(groups['all'] | map('extract', hostvars, 'reinstall_target_version'))) | to_json }}}}"
        dest: {out}
        mode: "0600"
"""


def run_play(tmp_path, hosts, text):
    """ansible-playbook TEXT on the local HOSTS, with this checkout's collection: (the process, its output)."""
    inventory = tmp_path / "hosts"
    inventory.write_text("".join("%s ansible_connection=local\n" % host for host in hosts))
    playbook = tmp_path / "play.yml"
    playbook.write_text(text)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                           "-e", "ansible_python_interpreter=" + sys.executable, str(playbook)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, proc.stdout + proc.stderr


def run_serial(tmp_path, fake_uv, locked):
    """RESOLVE in five batches of two hosts with FAKE_UV as the control node's uv; (uv's calls, each host's version)."""
    calls = tmp_path / "calls"
    uv = tmp_path / "uv"
    uv.write_text(fake_uv.format(calls=calls))
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR)
    text = RESOLVE.format(uv=json.dumps(str(uv)), out=json.dumps(str(tmp_path / "versions.json")),
                          out_dir=json.dumps(str(tmp_path)), locked="true" if locked else "false")
    if locked:
        text = text.replace("reinstall_locked: true", "reinstall_locked: true\n    reinstall_resolve: false")
    proc, out = run_play(tmp_path, ["h%d" % n for n in range(1, 6)], text)
    assert proc.returncode == 0, out[-8000:]
    return calls.read_text(), json.loads((tmp_path / "versions.json").read_text())


def test_a_serial_play_resolves_once_and_every_batch_gets_that_version(tmp_path):
    calls, versions = run_serial(tmp_path, FAKE_UV, locked=False)
    # three batches, one call of uv: the later batches took the first one's version
    assert calls == "call\n"
    assert versions == dict(("h%d" % n, "0.33.1") for n in range(1, 6))


# uv for the lock: its version, then a compile that writes one pinned, hashed vllm per call to --output-file
FAKE_UV_LOCK = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "uv 0.13.9"; exit 0; fi
echo call >> "{calls}"
cat > /dev/null
n=$(wc -l < "{calls}" | tr -d ' ')
while [ $# -gt 0 ]; do
  if [ "$1" = "--output-file" ]; then
    printf 'vllm==0.33.%s \\\\\\n    --hash=sha256:%064d\\n' "$n" "$n" > "$2"
  fi
  shift
done
"""


def test_a_serial_play_locks_once_and_every_batch_gets_that_lock(tmp_path):
    calls, versions = run_serial(tmp_path, FAKE_UV_LOCK, locked=True)
    # three batches, one lock: a newer build on the index in between (the next call would say 0.33.2) changes nothing
    assert calls == "call\n"
    assert versions == dict(("h%d" % n, "0.33.1") for n in range(1, 6))


CLEANUP = """
- name: Cleanup, {name}
  hosts: localhost
  gather_facts: false
  check_mode: {check}
  vars:
    fleet_envs_dir: {envs}
    fleet_current_link: {current}
    fleet_previous_link: {previous}
    reinstall_keep: 0
  tasks:
    - name: Clean up
      ansible.builtin.include_role:
        name: gpufleet.vllm.reinstall
        tasks_from: cleanup
    - name: Keep what it chose
      ansible.builtin.set_fact:
        errors: "{{{{ errors | default({{}}) | combine({{'{name}': reinstall_cleanup_remove}}) }}}}"
"""


@pytest.fixture
def envs(tmp_path):
    envs = tmp_path / "envs"
    names = ["vllm-0.31.0-20261001T000000Z", "vllm-0.32.1-20261101T090000Z", "vllm-0.33.0-20261204T101500Z"]
    for name in names:
        (envs / name).mkdir(parents=True)
    os.symlink(str(envs / names[2]), str(tmp_path / "current"))
    os.symlink(str(envs / names[0]), str(tmp_path / "previous"))
    return tmp_path, envs, names


def _cleanup(tmp, envs, name, check):
    return CLEANUP.format(name=name, check=json.dumps(check), envs=json.dumps(str(envs)),
                          current=json.dumps(str(tmp / "current")), previous=json.dumps(str(tmp / "previous")))


def test_cleanup_in_a_check_mode_play_removes_nothing_then_a_real_one_removes_what_it_listed(envs):
    tmp, envs_dir, names = envs
    out = tmp / "out"
    out.mkdir()
    found = run_plays(_cleanup(tmp, envs_dir, "check", True), str(out))
    assert found == {"check": [str(envs_dir / names[1])]}
    assert sorted(os.listdir(str(envs_dir))) == sorted(names)
    found = run_plays(_cleanup(tmp, envs_dir, "real", False), str(out))
    assert found == {"real": [str(envs_dir / names[1])]}
    assert sorted(os.listdir(str(envs_dir))) == [names[0], names[2]]


def _cleanup_remove_of(result):
    """reinstall_cleanup_remove as cleanup.yml's set_fact makes it from the module's RESULT."""
    with open(os.path.join(REPO, "roles", "reinstall", "tasks", "cleanup.yml")) as handle:
        tasks = yaml.safe_load(handle)
    expr = [task["ansible.builtin.set_fact"] for task in tasks if "ansible.builtin.set_fact" in task][0]
    templar = Templar(loader=DataLoader(), variables={"reinstall_envs": result})
    return templar.template(trust_as_template(expr["reinstall_cleanup_remove"]))


def test_cleanup_remove_is_what_was_removed_not_what_was_listed():
    # one removed, one already gone, one left alone (changed after the listing)
    result = {"check_mode": False, "current_env": "/e/cur", "to_remove": ["/e/a", "/e/b", "/e/c"],
              "removed": ["/e/a"], "gone": ["/e/b"], "left": ["/e/c (another directory took its name after it was read)"]}
    assert _cleanup_remove_of(result) == ["/e/a"]
    # check mode: what would be removed
    assert _cleanup_remove_of(dict(result, check_mode=True, removed=[], gone=[], left=[])) == ["/e/a", "/e/b", "/e/c"]


def run_on_h1(tmp_path, text):
    """ansible-playbook TEXT on one local host h1: (the process, its output)."""
    return run_play(tmp_path, ["h1"], text)


GIVEN = """---
- name: Resolve a version taken as given
  hosts: all
  gather_facts: false
  vars:
    reinstall_resolve: false
    reinstall_locked: false
    reinstall_version: {version}
  tasks:
    - name: Resolve
      ansible.builtin.include_role:
        name: gpufleet.vllm.reinstall
        tasks_from: resolve
    - name: Write the version
      ansible.builtin.copy:
        content: "{{{{ reinstall_target_version }}}}"
        dest: {out}
        mode: "0600"
"""


@pytest.mark.parametrize("version,refused", [("0.33.0", False), ("latest", True), (">=0.33", True)])
def test_resolve_refuses_a_version_taken_as_given_that_is_not_exact(tmp_path, version, refused):
    # (the pre-flight's one check of the target: resolve.yml's last step, before any host is touched)
    proc, out = run_on_h1(tmp_path, GIVEN.format(version=json.dumps(version), out=json.dumps(str(tmp_path / "version"))))
    if refused:
        assert proc.returncode == 2, out[-3000:]
        assert "Refused on h1, nothing was stopped or changed: reinstall_version %s is not an exact version" % (
            json.dumps(version)) in out
        assert not (tmp_path / "version").exists()
    else:
        assert proc.returncode == 0, out[-3000:]
        assert (tmp_path / "version").read_text() == version


STAGE_GIVEN = """---
- name: Stage a target the caller gives
  hosts: all
  gather_facts: false
  vars:
    reinstall_target_version: "0.33.*"
    fleet_envs_dir: {envs}
  tasks:
    - name: Stage
      ansible.builtin.include_role:
        name: gpufleet.vllm.reinstall
        tasks_from: stage
"""


def test_stage_refuses_a_target_from_its_caller_that_is_not_exact(tmp_path):
    # (stage may be given a target without resolve.yml: the same refusal, before anything is read or written)
    proc, out = run_on_h1(tmp_path, STAGE_GIVEN.format(envs=json.dumps(str(tmp_path / "envs"))))
    assert proc.returncode == 2, out[-3000:]
    assert 'Refused on h1, nothing was changed: reinstall_version "0.33.*" is not an exact version' in out
    assert not (tmp_path / "envs").exists()
