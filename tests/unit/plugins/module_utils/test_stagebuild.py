# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/stagebuild.py with a runner of the test's own (no uv runs): where uv is found, and each step's
failure, each leaving no new environment behind and saying so. (tests/unit/plugins/modules/test_vllm_stage.py runs
the real uv.)"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import sys

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, stagebuild
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError

PY = "%d.%d" % sys.version_info[:2]
H1 = "a" * 64


def _uv(directory):
    os.makedirs(str(directory), exist_ok=True)
    path = directory / "uv"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def params(tmp_path, **extra):
    p = dict(env=str(tmp_path / "envs" / "vllm-0.33.0-20261207T101500Z"), package="vllm", version="0.33.0",
             lock=None, extra_packages=[], python=sys.executable, uv=_uv(tmp_path / "tools"), cache_dir="",
             cache_clean=True, index_url="", extra_index_urls=[], find_links=[], no_index=True, prerelease="",
             torch_backend="", no_deps=False, environment={}, min_free_mib=0, room_purpose="", verify=False,
             accept_not_pristine=[], current_env="", host_name="h1", timeout=60, check_timeout=60, max_list=10)
    p.update(extra)
    return p


def a_lock(python=PY):
    return lockfile.render_lock({
        "python_version": python, "python_platform": "x86_64-manylinux_2_28", "package": "vllm", "sources": "x",
        "excluded": [], "resolved_at": "2026-12-07T10:00:00Z", "resolver": "uv test"},
        "vllm==0.33.0 --hash=sha256:%s\n" % H1)


class Runner(object):
    """Answers each command by its step: ANSWERS {step: (rc, out, err) or a callable(argv, env)}; records the calls."""

    def __init__(self, **answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, timeout, env):
        step = ("probe" if argv[1:2] == ["-I"] else "cache" if argv[1:2] == ["cache"] else
                "venv" if argv[1:2] == ["venv"] else "install")
        self.calls.append((step, list(argv), dict(env)))
        answer = self.answers.get(step, (0, "", ""))
        return answer(argv, env) if callable(answer) else answer


PROBE_OK = (0, json.dumps({"python": PY, "machine": "x86_64", "libc": "glibc 2.36"}) + "\n", "")


def failed(p, run, **kwargs):
    with pytest.raises(stagebuild.StageFailed) as err:
        stagebuild.build(p, run=run, **kwargs)
    return err.value


# --- where uv is found -----------------------------------------------------------------------------------------

def test_uv_given_by_name_is_run_by_its_path_on_the_path_uv_runs_with(tmp_path, monkeypatch):
    # uv on the module's own PATH is another one: the name is resolved in the PATH of the environment uv runs with
    # (the operator's reinstall_uv_environment), and every command runs that executable by its absolute path
    elsewhere = _uv(tmp_path / "elsewhere")
    wanted = _uv(tmp_path / "wanted")
    monkeypatch.setenv("PATH", os.path.dirname(elsewhere))
    run = Runner()
    res = stagebuild.build(params(tmp_path, uv="uv", environment={"PATH": os.path.dirname(wanted)}), run=run)
    assert [argv[0] for step, argv, _env in run.calls] == [wanted] * 4
    assert [argv[0] for argv in res["commands"]] == [wanted] * 4


def test_uv_given_by_name_is_found_on_the_modules_path(tmp_path, monkeypatch):
    found = _uv(tmp_path / "bin")
    monkeypatch.setenv("PATH", "/nonexistent:" + os.path.dirname(found))
    run = Runner()
    stagebuild.build(params(tmp_path, uv="uv"), run=run)
    assert set(argv[0] for _s, argv, _e in run.calls) == {found}


def test_uv_given_by_name_is_never_taken_from_the_working_directory(tmp_path, monkeypatch):
    # an executable named uv where the module runs, not on PATH: not the uv to run
    _uv(tmp_path / "cwd")
    monkeypatch.chdir(str(tmp_path / "cwd"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    run = Runner()
    err = failed(params(tmp_path, uv="uv"), run)
    assert "uv was not found at uv, or is not an executable file" in err.msg and run.calls == []
    assert not os.path.exists(params(tmp_path)["env"])


def test_uv_by_path_that_is_not_executable_is_refused_before_anything_runs(tmp_path):
    plain = tmp_path / "uv-plain"
    plain.write_text("")
    run = Runner()
    err = failed(params(tmp_path, uv=str(plain)), run)
    assert err.msg.startswith("Staging vllm 0.33.0 on h1 was refused: uv was not found at %s" % plain)
    assert run.calls == [] and err.result["created"] is False


def test_the_given_environment_reaches_uv_with_no_colour(tmp_path):
    run = Runner()
    stagebuild.build(params(tmp_path, environment={"UV_INDEX_STRATEGY": "first-index"}), run=run)
    assert all(env["UV_INDEX_STRATEGY"] == "first-index" and env["NO_COLOR"] == "1" for _s, _a, env in run.calls)


# --- the steps, and what each failure leaves -------------------------------------------------------------------

def test_a_build_without_verification_leaves_the_environment_without_the_mark(tmp_path):
    run = Runner(cache=(0, "Removed 12 files\n", ""))
    res = stagebuild.build(params(tmp_path), run=run)
    env = params(tmp_path)["env"]
    assert os.path.isdir(env) and not os.path.exists(os.path.join(env, stagebuild.MARKER))
    assert res["created"] is True and res["cache_removed"] is True and res["removed"] is False
    assert [s["step"] for s in res["steps"]] == ["cache", "cache", "venv", "install"]


def test_a_cache_that_removed_nothing_says_so(tmp_path):
    res = stagebuild.build(params(tmp_path, cache_clean=True), run=Runner(cache=(0, "No cache entries found\n", "")))
    assert res["cache_removed"] is False


def test_the_directory_of_the_environments_is_made_when_missing_and_a_file_there_is_refused(tmp_path):
    p = params(tmp_path)
    assert not os.path.exists(os.path.dirname(p["env"]))
    stagebuild.build(p, run=Runner())
    assert os.path.isdir(os.path.dirname(p["env"]))
    other = params(tmp_path / "x")
    (tmp_path / "x" / "envs").write_text("a file")
    err = failed(other, Runner())
    assert "%s, where the new environment goes, is not a directory" % (tmp_path / "x" / "envs") in err.msg


def test_an_unexpected_error_in_a_step_removes_the_new_environment_and_names_it(tmp_path):
    def boom(argv, env):
        raise RuntimeError("the runner broke")
    err = failed(params(tmp_path), Runner(install=boom))
    assert "failed at 'install': stopped on an unexpected RuntimeError: the runner broke" in err.msg
    assert "The incomplete environment %s was removed" % params(tmp_path)["env"] in err.msg
    assert not os.path.exists(params(tmp_path)["env"])


def test_an_environment_that_went_away_during_the_failure_is_said_to_be_gone(tmp_path):
    p = params(tmp_path)

    def vanish(argv, env):
        os.rename(p["env"], p["env"] + ".moved")
        return 1, "", "error: no space left on device"
    err = failed(p, Runner(install=vanish))
    assert "no space left on device. No part of the new environment %s was left" % p["env"] in err.msg
    assert os.path.isdir(p["env"] + ".moved")  # (not removed: it is not the path of this run any more)


@pytest.mark.parametrize("answer, words", [
    ((1, "", "error: the interpreter crashed"), "could not say its Python version and platform: error: the "
                                                "interpreter crashed"),
    ((0, "not json\n", ""), "did not say its Python version and platform"),
    ((0, "", ""), "did not say its Python version and platform"),
    ((0, "[1, 2]\n", ""), "did not say its Python version and platform"),
])
def test_a_probe_that_does_not_answer_fails_before_the_install(tmp_path, answer, words):
    run = Runner(probe=answer)
    err = failed(params(tmp_path, lock=a_lock()), run)
    assert "failed at 'check the new interpreter against the lock': " in err.msg and words in err.msg
    assert [step for step, _a, _e in run.calls] == ["cache", "cache", "venv", "probe"]
    assert not os.path.exists(params(tmp_path)["env"])


def test_a_lock_that_cannot_be_written_into_the_environment_fails_the_lock_step(tmp_path):
    p = params(tmp_path, lock=a_lock())

    def venv(argv, env):
        with open(os.path.join(p["env"], stagebuild.LOCK_NAME), "w") as handle:
            handle.write("someone's")
        return 0, "", ""
    run = Runner(venv=venv, probe=PROBE_OK)
    err = failed(p, run)
    assert "failed at 'put the lock into the new environment': %s could not be written: File exists" % (
        os.path.join(p["env"], stagebuild.LOCK_NAME)) in err.msg
    assert "install" not in [step for step, _a, _e in run.calls] and not os.path.exists(p["env"])


def test_a_lock_longer_than_a_lock_is_refused_before_anything(tmp_path):
    run = Runner()
    err = failed(params(tmp_path, lock="#" * (stagebuild.LOCK_MAX + 1)), run)
    assert "lock is %d characters, more than the %d" % (stagebuild.LOCK_MAX + 1, stagebuild.LOCK_MAX) in err.msg
    assert run.calls == []


@pytest.mark.parametrize("change, words", [
    ({"min_free_mib": -1}, "min_free_mib must be 0 or more, got -1"),
    ({"lock": "x", "extra_packages": ["gguf==0.19.0"]}, "extra_packages cannot be given with a lock"),
    ({"lock": "x", "no_deps": True}, "no_deps cannot be given with a lock"),
    ({"check_timeout": 0}, "check_timeout must be 1 or more, got 0"),
    ({"max_list": 0}, "max_list must be 1 or more, got 0"),
    ({"uv": ""}, "uv must be the uv executable"),
])
def test_options_that_cannot_be_used_are_named(tmp_path, change, words):
    problems = stagebuild.check_options(params(tmp_path, **change))
    assert any(words in problem for problem in problems), problems
    assert stagebuild.check_options(params(tmp_path, min_free_mib=0, max_list=1, check_timeout=1, timeout=1)) == []


# --- the checks after the install --------------------------------------------------------------------------------

def _check(pristine=True, version="0.33.0"):
    return {"pristine": pristine, "version": version, "msg": "vllm %s: 1 file modified" % version}


def test_a_record_check_that_cannot_run_fails_and_removes(tmp_path, monkeypatch):
    def broken(**_kwargs):
        raise IntegrityError("No vllm in the environment. Nothing was changed (the check only reads).")
    monkeypatch.setattr(stagebuild, "check_installed", broken)
    err = failed(params(tmp_path, verify=True), Runner())
    assert "failed at 'verify the new environment against RECORD': No vllm in the environment.." not in err.msg
    assert "failed at 'verify the new environment against RECORD': No vllm in the environment. The incomplete" \
        in err.msg
    assert "the check only reads" not in err.msg and not os.path.exists(params(tmp_path)["env"])


@pytest.mark.parametrize("check, words", [
    (_check(version="0.32.0"), "vllm is version 0.32.0, not the expected 0.33.0"),
    (_check(version=""), "vllm is version (none), not the expected 0.33.0"),
    (_check(pristine=False), "vllm 0.33.0: 1 file modified"),
])
def test_a_record_check_of_another_version_or_not_pristine_fails(tmp_path, monkeypatch, check, words):
    monkeypatch.setattr(stagebuild, "check_installed", lambda **_kwargs: check)
    err = failed(params(tmp_path, verify=True), Runner())
    assert "failed at 'verify the new environment against RECORD': " + words in err.msg
    assert not os.path.exists(params(tmp_path)["env"])


def test_the_same_version_in_another_spelling_passes_the_record_check(tmp_path, monkeypatch):
    monkeypatch.setattr(stagebuild, "check_installed", lambda **_kwargs: _check(version="V0.33.0"))
    res = stagebuild.build(params(tmp_path, verify=True, version="0.33.0"), run=Runner())
    assert res["msg"].endswith("proved pristine")


@pytest.mark.parametrize("found, words", [
    ({"matches": False, "unaccepted": []}, "MISMATCH"),
    ({"matches": True, "unaccepted": ["lark"]}, "NOT PRISTINE lark"),
])
def test_a_fingerprint_that_is_not_the_lock_fails_and_removes(tmp_path, monkeypatch, found, words):
    monkeypatch.setattr(stagebuild, "check_environment", lambda **_kwargs: found)
    monkeypatch.setattr(stagebuild, "mismatch_message", lambda _found: "MISMATCH")
    monkeypatch.setattr(stagebuild, "not_pristine_message", lambda _found, names: "NOT PRISTINE " + " ".join(names))
    err = failed(params(tmp_path, lock=a_lock()), Runner(probe=PROBE_OK))
    assert "failed at 'prove the new environment is exactly the lock': " + words in err.msg
    assert not os.path.exists(params(tmp_path)["env"])


def test_a_fingerprint_that_cannot_run_fails_and_removes(tmp_path, monkeypatch):
    def broken(**_kwargs):
        raise IntegrityError("The walk stopped after 60 s. Nothing was changed (the check only reads).")
    monkeypatch.setattr(stagebuild, "check_environment", broken)
    err = failed(params(tmp_path, lock=a_lock()), Runner(probe=PROBE_OK))
    assert "failed at 'prove the new environment is exactly the lock': The walk stopped after 60 s." in err.msg
    assert "the check only reads" not in err.msg and not os.path.exists(params(tmp_path)["env"])


def test_a_fingerprint_that_is_the_lock_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(stagebuild, "check_environment", lambda **_kwargs: {"matches": True, "unaccepted": []})
    res = stagebuild.build(params(tmp_path, lock=a_lock()), run=Runner(probe=PROBE_OK))
    assert res["msg"] == "staged vllm 0.33.0 in %s (exactly the lock, 1 packages), proved pristine" % (
        params(tmp_path)["env"])
    assert [s["step"] for s in res["steps"]] == ["cache", "cache", "venv", "probe", "lock", "install", "fingerprint"]


def test_an_unexpected_error_in_a_check_names_that_check(tmp_path, monkeypatch):
    def boom(**_kwargs):
        raise KeyError("pins")
    monkeypatch.setattr(stagebuild, "check_environment", boom)
    err = failed(params(tmp_path, lock=a_lock()), Runner(probe=PROBE_OK))
    assert "failed at 'prove the new environment is exactly the lock': stopped on an unexpected KeyError" in err.msg


# --- a run killed while it claims the path: nothing there reads as a finished environment ------------------------

KILLED_AT = """
import json, os, signal, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.vllm.plugins.module_utils import stagebuild
p = json.loads(sys.argv[2])
name = os.path.basename(p["env"])
real = getattr(os, sys.argv[3])


def then_killed(path, *args, **kwargs):
    real(path, *args, **kwargs)
    if name in os.path.basename(str(path)):
        os.kill(os.getpid(), signal.SIGKILL)


setattr(os, sys.argv[3], then_killed)
stagebuild.build(p, run=lambda argv, timeout, env: (0, "", ""))
"""


@pytest.mark.parametrize("call", ["mkdir", "chmod"])
def test_a_run_killed_while_it_claims_the_path_leaves_nothing_that_reads_as_staged(tmp_path, call):
    # SIGKILL right after the directory is made (before its mark is written), or right after the mark
    from ansible_collections.gpufleet.vllm.plugins.module_utils import venvs  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    p = params(tmp_path)
    os.makedirs(os.path.dirname(p["env"]))
    collections = [path for path in sys.path if os.path.isdir(os.path.join(path, "ansible_collections"))][0]
    done = subprocess.run([sys.executable, "-c", KILLED_AT, collections, json.dumps(p), call], timeout=120,
                          check=False, capture_output=True)
    assert done.returncode == -9, done.stderr
    found = venvs.read_envs(os.path.dirname(p["env"]), "vllm", 2, target_version="0.33.0")
    assert found["staged"] == [] and found["reuse"] == ""
    # (either nothing under the environment's name, or a marked directory: unfinished)
    assert not os.path.exists(p["env"]) or [e["path"] for e in found["unfinished"]] == [p["env"]]
