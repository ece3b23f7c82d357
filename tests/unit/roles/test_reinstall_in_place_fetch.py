# SPDX-License-Identifier: GPL-3.0-or-later
"""The reinstall role's in_place mode with a lock, run by real Ansible on localhost with the real uv against the
test world's real index (tests/sim/index_server.py on loopback).

Every wheel the install takes is fetched and checked against the lock's sha256 BEFORE the stop: a wheel the
mirror changed (same name, other bytes) is refused there, with the tired operator's sentence, the environment
untouched and no scratch left behind. With the mirror's wheel restored, the install after the stop runs offline:
the uv wrapper stops the index the moment the install itself starts, and the install still succeeds, exactly the
lock, from the wheels checked before.
"""

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time

import pytest

import fakesystemd
from helpers import REPO, load_source, run_plays
from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, uvcli

PY = "%d.%d" % sys.version_info[:2]
SERVER = os.path.join(REPO, "tests", "sim", "index_server.py")

# The uv the role runs: logs each call, and stops the index when the install itself (not its dry run) starts.
WRAPPER = """#!/bin/sh
echo "$*" >> {calls}
case " $* " in
  *" pip sync "*)
    case " $* " in
      *" --dry-run "*) ;;
      *) kill {pid}; n=0; while kill -0 {pid} 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done ;;
    esac ;;
esac
exec {uv} "$@"
"""

PLAYS = """
- name: In place with a lock, uv told to keep no cache
  hosts: localhost
  gather_facts: false
  vars: &settings
    fleet_package: vllm
    fleet_adopt_venv: {venv}
    fleet_envs_dir: {envs}
    fleet_current_link: {current}
    fleet_previous_link: {previous}
    fleet_unit_dir: {units}
    reinstall_mode: in_place
    reinstall_lock: {lock}
    reinstall_uv: {wrapper}
    reinstall_uv_cache_dir: {cache}
    reinstall_index_url: {url}
    reinstall_extra_index_urls: []
    reinstall_min_free_mib: 0
  tasks:
    - name: Run the role
      block:
        - name: Reinstall in place
          ansible.builtin.include_role:
            name: gpufleet.vllm.reinstall
          vars:
            reinstall_uv_environment: {{UV_NO_CACHE: "1"}}
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors:
              no_cache: "{{{{ ansible_failed_result.msg | default('') }}}}"

- name: In place with a lock, the mirror's lark tampered
  hosts: localhost
  gather_facts: false
  vars: *settings
  tasks:
    - name: Run the role
      block:
        - name: Reinstall in place
          ansible.builtin.include_role:
            name: gpufleet.vllm.reinstall
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | combine(__tampered) }}}}"
          vars:
            __tampered:
              tampered: "{{{{ ansible_failed_result.msg | default('') }}}}"
              tampered_task: "{{{{ ansible_failed_task.name | default('') }}}}"

    - name: Note what the environment holds after the refusal
      ansible.builtin.command:
        argv: [{uv}, pip, list, --format, freeze, --python, {python}]
      register: after_refusal
      changed_when: false

    - name: Keep it
      ansible.builtin.set_fact:
        errors: "{{{{ errors | default({{}}) | combine({{'after_refusal': after_refusal.stdout_lines}}) }}}}"

    - name: Put the mirror's own lark back
      ansible.builtin.copy:
        src: {good}
        dest: {lark}
        mode: "0644"

- name: In place with a lock, the mirror as the lock was made from
  hosts: localhost
  gather_facts: false
  vars: *settings
  tasks:
    - name: Run the role
      block:
        - name: Reinstall in place
          ansible.builtin.include_role:
            name: gpufleet.vllm.reinstall
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'good': ansible_failed_result.msg | default('')}}) }}}}"
"""


def load_wheel_maker():
    return load_source("uv_lock_tests", "tests", "unit", "plugins", "lookup", "test_uv_lock.py").make_wheel


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sha256(path):
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.sha256(handle.read()).hexdigest()


@pytest.fixture
def world(tmp_path):
    try:
        uv = uvcli.find_uv("")
    except uvcli.UvError:
        pytest.skip("uv is not installed on this control node")
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    maker = load_wheel_maker()
    maker(wheelhouse, "vllm", "0.33.0", ["lark==1.3.1"])
    maker(wheelhouse, "lark", "1.2.2")
    good = maker(wheelhouse, "lark", "1.3.1")
    kept = tmp_path / "lark-1.3.1-py3-none-any.whl"
    shutil.copy(good, str(kept))
    body = "".join("%s==%s \\\n    --hash=%s\n" % (name, version, sha256(str(wheelhouse / wheel)))
                   for name, version, wheel in (("lark", "1.3.1", "lark-1.3.1-py3-none-any.whl"),
                                                ("vllm", "0.33.0", "vllm-0.33.0-py3-none-any.whl")))
    port = free_port()
    lock = tmp_path / "fleet.lock"
    # (made from the index the role is given: a kept lock from other sources is refused)
    lock.write_text(lockfile.render_lock({
        "python_version": PY, "python_platform": "x86_64-manylinux_2_28", "package": "vllm",
        "sources": "index http://127.0.0.1:%d/simple/" % port, "excluded": [], "resolved_at": "2026-12-05T17:00:00Z",
        "resolver": "uv test"}, body))
    # the host's environment: vLLM 0.33.0 with yesterday's lark
    venv = tmp_path / "venv"
    for argv in (["venv", "-q", "--python", sys.executable, "--no-python-downloads", str(venv)],
                 ["pip", "install", "-q", "--no-cache", "--no-index", "--find-links", str(wheelhouse), "--no-deps",
                  "--python", str(venv / "bin" / "python"), "vllm==0.33.0", "lark==1.2.2"]):
        done = subprocess.run([uv] + argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    # the mirror's lark 1.3.1 replaced by other bytes under the same name
    os.remove(good)
    maker(wheelhouse, "lark", "1.3.1", payload="import os  # not what was locked\n")
    tampered = sha256(str(wheelhouse / "lark-1.3.1-py3-none-any.whl"))
    ready = tmp_path / "ready"
    server = subprocess.Popen([sys.executable, SERVER, "--host", "127.0.0.1", "--port", str(port), "--root",
                               str(wheelhouse), "--ready-file", str(ready)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), "the index did not start"
        calls = tmp_path / "calls"
        wrapper = tmp_path / "uv"
        wrapper.write_text(WRAPPER.format(calls=calls, pid=server.pid, uv=uv))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        yield {"tmp": tmp_path, "venv": venv, "envs": tmp_path / "envs", "current": tmp_path / "current",
               "previous": tmp_path / "previous", "units": tmp_path / "units", "cache": tmp_path / "uv-cache", "python": venv / "bin" / "python",
               "lark": wheelhouse / "lark-1.3.1-py3-none-any.whl", "lock": lock, "wheelhouse": wheelhouse, "good": kept, "uv": uv,
               "wrapper": wrapper, "calls": calls, "server": server, "scratch": scratch, "tampered": tampered,
               "locked": sha256(str(kept)), "url": "http://127.0.0.1:%d/simple/" % port}
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=30)


def test_a_tampered_wheel_is_refused_before_the_stop_and_the_install_after_it_downloads_nothing(world, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(world["scratch"]))
    # a systemd that knows no unit: the install reads the unit's state (it refuses while it runs), never more
    systemd = world["tmp"] / "systemd"
    for key, value in fakesystemd.install(str(world["tmp"] / "bin"), str(systemd)).items():
        monkeypatch.setenv(key, value)
    plays = PLAYS.format(**dict((key, json.dumps(str(value))) for key, value in world.items()))
    errors = run_plays(plays, str(world["tmp"]))

    # uv told to keep no cache: refused before anything is fetched (the wheels wait in the cache for the install)
    assert errors["no_cache"] == (
        "reinstall_uv_environment sets UV_NO_CACHE, and the in-place install of a lock fetches and checks its wheels "
        "into uv's cache before the stop, then installs them from there, offline. Remove UV_NO_CACHE "
        "(reinstall_uv_cache_dir chooses where the cache is). Nothing was stopped or changed on localhost.")
    # the tampered mirror: refused at the fetch, before the stop, in the operator's words
    assert errors["tampered_task"] == "Fail when a wheel is not the lock's or cannot be fetched (before the stop)"
    assert errors["tampered"] == (
        "Refused before the stop on localhost: the index serves a wheel of lark 1.3.1 whose sha256 (%s) differs "
        "from the lock's (%s): a tampered or overwritten mirror. Nothing was stopped and %s was not changed. "
        "Compare that wheel on the mirror with the one the lock was made from, or make a new lock from a mirror "
        "you trust." % (world["tampered"], world["locked"], world["venv"]))
    assert sorted(errors["after_refusal"]) == ["lark==1.2.2", "vllm==0.33.0"]
    # what it fetched: vLLM (reinstalled) and lark (another version), with the lock's hashes, into a scratch
    # target that is gone again
    calls = world["calls"].read_text().splitlines()
    fetches = [c for c in calls if " --target " in c]
    assert len(fetches) == 2 and all("--require-hashes" in c and "--no-deps" in c for c in fetches)
    assert os.listdir(str(world["scratch"])) == []

    # the mirror as the lock was made from: installed; the index was stopped when the install started
    assert "good" not in errors, errors.get("good")
    assert world["server"].poll() is not None
    syncs = [c for c in calls if c.startswith("pip sync") and "--dry-run" not in c]
    assert len(syncs) == 1 and " --offline " in " %s " % syncs[0] and "--require-hashes" in syncs[0]
    assert calls.index(syncs[0]) > calls.index(fetches[1])
    listed = subprocess.run([world["uv"], "pip", "list", "--format", "freeze", "--python",
                             str(world["venv"] / "bin" / "python")], capture_output=True, text=True, timeout=60,
                            check=True).stdout.split()
    assert sorted(listed) == ["lark==1.3.1", "vllm==0.33.0"]
    # the role stopped and started nothing: that is the service role's
    verbs = [line.split()[0] for line in (systemd / "calls").read_text().splitlines()] if (systemd / "calls").exists() else []
    assert not set(verbs) & {"stop", "start", "restart", "kill"}, verbs


def test_offline_uv_takes_a_cached_wheel_only_with_the_locks_hash(world):
    """What the offline install after the stop relies on: a wheel in uv's cache keeps the hash it was fetched with,
    and --require-hashes holds for it; a lock that wants other bytes is refused, offline, the environment as it was."""
    uv, python, cache = world["uv"], str(world["python"]), str(world["cache"])
    shutil.copy(str(world["good"]), str(world["lark"]))
    wanted = world["tmp"] / "lark.txt"
    wanted.write_text("lark==1.3.1 \\\n    --hash=%s\n" % world["locked"])
    other = world["tmp"] / "other.txt"
    other.write_text("lark==1.3.1 \\\n    --hash=sha256:%s\n" % ("0" * 64))

    def run(*argv):
        return subprocess.run([uv] + list(argv), capture_output=True, text=True, timeout=120, check=False)

    fetched = run("pip", "install", "--cache-dir", cache, "--python", python, "--target", str(world["scratch"] / "t"),
                  "--no-deps", "--require-hashes", "--link-mode", "symlink", "--index-url", world["url"],
                  "-r", str(wanted))
    assert fetched.returncode == 0, fetched.stderr
    world["server"].kill()
    world["server"].wait(timeout=30)
    refused = run("pip", "install", "--offline", "--cache-dir", cache, "--python", python, "--no-deps",
                  "--require-hashes", "--index-url", world["url"], "-r", str(other))
    assert refused.returncode != 0 and "Hash mismatch for `lark==1.3.1`" in refused.stderr, refused.stderr
    listed = run("pip", "list", "--format", "freeze", "--python", python).stdout.split()
    assert sorted(listed) == ["lark==1.2.2", "vllm==0.33.0"]
    # the wheels checked before are there, offline, with the index gone
    taken = run("pip", "install", "--offline", "--cache-dir", cache, "--python", python, "--no-deps",
                "--require-hashes", "--link-mode", "copy", "--index-url", world["url"], "-r", str(wanted))
    assert taken.returncode == 0, taken.stderr
    assert sorted(run("pip", "list", "--format", "freeze", "--python", python).stdout.split()) == [
        "lark==1.3.1", "vllm==0.33.0"]
