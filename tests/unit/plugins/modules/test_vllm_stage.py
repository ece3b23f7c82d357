# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.vllm_stage, run in-process with the real uv against a wheelhouse of small synthetic wheels
(offline): a locked and an unlocked build proved pristine, then every fault the role's staging must survive (a
tampered wheel, a lock for another Python, a package the index does not have, uv killed at its time limit, a file
changed after the install, a removal that fails) and hostile input, each leaving nothing behind."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, stagebuild, uvcli, venvs
from ansible_collections.gpufleet.vllm.plugins.modules import vllm_envs, vllm_stage

PY = "%d.%d" % sys.version_info[:2]
lock_tests = load_source("gpufleet_uv_lock_tests_stage", "tests", "unit", "plugins", "lookup", "test_uv_lock.py")
make_wheel, sha256 = lock_tests.make_wheel, lock_tests.sha256
STAMP = "vllm-0.33.0-20261207T101500Z"


def find_uv():
    try:
        return uvcli.find_uv("")
    except uvcli.UvError:
        pytest.skip("uv is not installed on this control node")


@pytest.fixture
def run(capsys):
    return module_runner(vllm_stage.main, capsys)


def make_lock(house, pins, python=PY, package="vllm"):
    body = "".join("%s==%s \\\n    --hash=%s\n" % (name, version, sha256(os.path.join(str(house), wheel)))
                   for name, version, wheel in pins)
    return lockfile.render_lock({
        "python_version": python, "python_platform": "x86_64-manylinux_2_28", "package": package,
        "sources": "find-links %s" % house, "excluded": [], "resolved_at": "2026-12-07T10:00:00Z",
        "resolver": "uv test"}, body)


@pytest.fixture
def world(tmp_path):
    uv = find_uv()
    house = tmp_path / "wheelhouse"
    house.mkdir()
    make_wheel(house, "vllm", "0.33.0", ["lark==1.3.1"])
    make_wheel(house, "lark", "1.3.1")
    make_wheel(house, "gguf", "0.19.0")
    pins = [("lark", "1.3.1", "lark-1.3.1-py3-none-any.whl"), ("vllm", "0.33.0", "vllm-0.33.0-py3-none-any.whl")]
    current = tmp_path / "envs" / "vllm-0.32.1-20261101T090000Z"
    (current / "bin").mkdir(parents=True)
    (current / "bin" / "keep").write_text("the serving environment\n")
    args = {"env": str(tmp_path / "envs" / STAMP), "version": "0.33.0", "uv": uv, "python": sys.executable,
            "cache_dir": str(tmp_path / "uv-cache"), "no_index": True, "find_links": [str(house)],
            "current_env": str(current), "host_name": "h1", "timeout": 120}
    return {"tmp": tmp_path, "uv": uv, "house": house, "args": args, "lock": make_lock(house, pins), "pins": pins,
            "env": tmp_path / "envs" / STAMP, "current": current}


def installed(env):
    site = [os.path.join(root, name) for root, dirs, _files in os.walk(str(env / "lib"))
            for name in dirs if name.endswith(".dist-info")]
    return sorted(os.path.basename(path)[:-len(".dist-info")] for path in site)


def untouched(world):
    assert sorted(os.listdir(str(world["tmp"] / "envs"))) == [world["current"].name]
    assert (world["current"] / "bin" / "keep").read_text() == "the serving environment\n"


def test_a_locked_build_is_exactly_the_lock_proved_pristine_with_its_lock_beside_it(run, world):
    code, res = run(dict(world["args"], lock=world["lock"]))
    assert code == 0, res["msg"]
    env = world["env"]
    assert res["changed"] is True and res["created"] is True and res["removed"] is False
    assert installed(env) == ["lark-1.3.1", "vllm-0.33.0"]
    assert (env / "gpufleet.lock").read_text() == world["lock"]
    assert not (env / stagebuild.MARKER).exists()  # (the staging's mark, gone once it was proved)
    assert stat.S_IMODE(os.stat(str(env / "gpufleet.lock")).st_mode) == 0o644
    assert [s["step"] for s in res["steps"]] == ["cache", "cache", "venv", "probe", "lock", "install", "record",
                                                 "fingerprint"]
    assert res["steps"][3]["found"]["python"] == PY
    assert res["check"]["pristine"] is True and res["check"]["version"] == "0.33.0"
    assert res["fingerprint"]["matches"] is True and res["fingerprint"]["unaccepted"] == []
    assert res["lock"]["count"] == 2 and res["lock"]["package"] == "vllm==0.33.0"
    assert res["msg"] == "staged vllm 0.33.0 in %s (exactly the lock, 2 packages), proved pristine" % env
    sync = res["commands"][-1]
    assert sync[1:3] == ["pip", "sync"] and "--require-hashes" in sync and sync[-1] == str(env / "gpufleet.lock")
    assert sync[sync.index("--link-mode") + 1] == "copy"
    # copies: no file of the new environment shares its inode with uv's cache
    init = [os.path.join(root, "__init__.py") for root, _d, files in os.walk(str(env / "lib"))
            if root.endswith("/vllm") and "__init__.py" in files]
    assert len(init) == 1 and os.stat(init[0]).st_nlink == 1
    untouched_current = (world["current"] / "bin" / "keep").read_text()
    assert untouched_current == "the serving environment\n"


def test_without_a_lock_the_target_and_the_extra_packages_are_installed(run, world):
    code, res = run(dict(world["args"], extra_packages=["gguf==0.19.0"]))
    assert code == 0, res["msg"]
    assert installed(world["env"]) == ["gguf-0.19.0", "lark-1.3.1", "vllm-0.33.0"]
    assert [s["step"] for s in res["steps"]] == ["cache", "cache", "venv", "install", "record"]
    assert res["fingerprint"] is None and res["lock"] is None
    assert res["commands"][-1][-2:] == ["vllm==0.33.0", "gguf==0.19.0"]
    assert not (world["env"] / "gpufleet.lock").exists()


def test_every_command_carries_the_token_of_the_mark_and_a_kept_mark_of_the_same_name_goes(run, world, tmp_path):
    # a mark an earlier cleanup kept beside a killed staging of the same name would make this one unfinished
    tomb = world["env"].parent / (venvs.TOMBSTONE % world["env"].name)
    tomb.write_text(venvs.staging_mark("4" * 32, pid=2 ** 22 - 1))
    seen = tmp_path / "seen"
    uv = fake_uv(world, 'if [ "$1" != cache ]; then head -c 200 /proc/$$/environ | tr "\\0" "\\n" | head -n 1 >> "%s"; '
                        'head -n 1 "%s/%s" >> "%s"; fi' % (seen, world["env"], stagebuild.MARKER, seen))
    code, res = run(dict(world["args"], uv=uv, environment={venvs.VARIABLE: "mine"}))
    assert code == 0, res["msg"]
    lines = seen.read_text().splitlines()
    assert len(lines) == 4 and lines[0] == lines[2] and lines[1] == lines[3]
    assert lines[0] == "%s=%s" % (venvs.VARIABLE, lines[1].split()[0]) and len(lines[1].split()[0]) == 32
    assert not tomb.exists()
    found = venvs.read_envs(str(world["env"].parent), "vllm", 2, target_version="0.33.0")
    assert found["reuse"] == str(world["env"]) and found["unfinished"] == []


def test_check_mode_runs_nothing_and_says_what_it_would_run(run, world):
    code, res = run(dict(world["args"], lock=world["lock"]), check=True)
    assert code == 0 and res["changed"] is True and res["check_mode"] is True
    assert res["steps"] == [] and res["created"] is False
    assert res["msg"].startswith("would stage vllm 0.33.0 in ")
    assert [argv[1] for argv in res["commands"]] == ["cache", "cache", "venv", "-I", "pip"]
    assert not world["env"].exists() and not (world["tmp"] / "uv-cache").exists()


def test_a_tampered_wheel_is_refused_and_the_new_environment_removed(run, world):
    # the mirror's lark replaced by other bytes under the same name, after the lock was made
    os.remove(str(world["house"] / "lark-1.3.1-py3-none-any.whl"))
    make_wheel(world["house"], "lark", "1.3.1", payload="import os  # not what was locked\n")
    code, res = run(dict(world["args"], lock=world["lock"]))
    assert code == 1
    msg = res["msg"]
    assert msg.startswith("Staging vllm 0.33.0 on h1 failed at 'install': the index serves a wheel whose sha256 is "
                          "not the one the lock names")
    assert "Hash mismatch" in msg or "hash mismatch" in msg
    assert msg.endswith("The incomplete environment %s was removed; the service and %s were not touched."
                        % (world["env"], world["current"]))
    assert res["removed"] is True and not world["env"].exists()
    untouched(world)


def test_a_lock_for_another_python_is_refused_before_the_install(run, world):
    other = "3.99" if PY != "3.99" else "3.98"
    code, res = run(dict(world["args"], lock=make_lock(world["house"], world["pins"], python=other)))
    assert code == 1
    assert ("failed at 'check the new interpreter against the lock': The lock does not fit h1: the lock is for "
            "Python %s, this host's environment runs Python %s" % (other, PY)) in res["msg"]
    assert [s["step"] for s in res["steps"]] == ["cache", "cache", "venv", "probe"]
    assert not world["env"].exists()
    untouched(world)


def test_a_package_the_index_does_not_have_fails_naming_it(run, world):
    code, res = run(dict(world["args"], extra_packages=["gpufleet-no-such-package"]))
    assert code == 1
    assert "failed at 'install': " in res["msg"] and "gpufleet-no-such-package" in res["msg"]
    assert "was removed" in res["msg"] and not world["env"].exists()
    untouched(world)


def fake_uv(world, script):
    path = world["tmp"] / "uv-wrapper"
    path.write_text("#!/bin/sh\n%s\nexec %s \"$@\"\n" % (script, world["uv"]))
    path.chmod(0o755)
    return str(path)


def test_uv_past_its_time_limit_is_killed_and_the_environment_removed(run, world):
    uv = fake_uv(world, 'if [ "$1" = pip ]; then exec sleep 60; fi')
    code, res = run(dict(world["args"], uv=uv, timeout=2))
    assert code == 1
    assert "failed at 'install': " in res["msg"] and "did not answer within 2 s and was killed" in res["msg"]
    assert res["steps"][-1]["step"] == "install" and res["steps"][-1]["seconds"] < 30
    assert not world["env"].exists()
    untouched(world)


def test_a_file_changed_after_the_install_fails_the_record_check(run, world):
    # uv "installs", then something edits vLLM before the check (a hook, a bad mirror of the files)
    uv = fake_uv(world, '"%s" "$@" || exit $?\nif [ "$2" = install ]; then for f in $(find "%s" -path "*/vllm/__init__.py"); '
                 'do echo "_t = 1" >> "$f"; done; fi\nexit 0' % (world["uv"], world["env"]))
    code, res = run(dict(world["args"], uv=uv))
    assert code == 1, res
    assert "failed at 'verify the new environment against RECORD': " in res["msg"]
    assert "vllm/__init__.py" in res["msg"] and "was removed" in res["msg"]
    assert res["check"]["pristine"] is False
    assert not world["env"].exists()


def test_a_removal_that_fails_says_so_and_what_to_remove(world, monkeypatch):
    def fail(path):
        raise OSError(13, "Permission denied")
    monkeypatch.setattr(stagebuild, "_remove", fail)
    params = dict(vllm_stage_defaults(), **dict(world["args"], extra_packages=["gpufleet-no-such-package"]))
    with pytest.raises(stagebuild.StageFailed) as exc:
        stagebuild.build(params)
    assert ("The incomplete environment %s could NOT be removed (Permission denied): remove it by hand before the "
            "next run; the service and %s were not touched." % (world["env"], world["current"])) in exc.value.msg
    assert exc.value.result["removed"] is False


def vllm_stage_defaults():
    defaults = dict(package="vllm", lock=None, extra_packages=[], python="/usr/bin/python3", cache_dir="",
                    cache_clean=True, index_url="", extra_index_urls=[], find_links=[], no_index=False, prerelease="",
                    torch_backend="", no_deps=False, environment={}, min_free_mib=0, room_purpose="", verify=True,
                    accept_not_pristine=[], current_env="", host_name="", timeout=3600, check_timeout=600, max_list=10)
    return defaults


@pytest.mark.parametrize("change,expected", [
    ({"extra_packages": ["--index-url=http://127.0.0.1:9/simple"]},
     "extra_packages[0] is '--index-url=http://127.0.0.1:9/simple', which starts with '-'"),
    ({"index_url": "http://mirror/simple\n--no-verify"}, "index_url holds a line break (U+000A)"),
    ({"find_links": ["-e."]}, "find_links[0] is '-e.', which starts with '-'"),
    ({"version": ">=0.33"}, "version must be one exact version such as 0.33.0, got '>=0.33'"),
    ({"package": "vllm; rm -rf /"}, "package must be a distribution name"),
    ({"env": "relative/env"}, "env must be an absolute path"),
    ({"env": "/opt/vllm/envs/../../etc"}, "env must be a plain path"),
    ({"prerelease": "always"}, "prerelease must be one of"),
    ({"environment": {"UV INDEX": "x"}}, "environment holds 'UV INDEX', which is not a variable name"),
    ({"environment": {"UV_INDEX_URL": "a\x00b"}}, "environment.UV_INDEX_URL holds a NUL character"),
    ({"timeout": 0}, "timeout must be 1 or more, got 0"),
    ({"uv": "bin/uv"}, "uv must be the uv executable"),
])
def test_hostile_values_are_refused_before_anything_runs(run, world, change, expected):
    calls = world["tmp"] / "calls"
    uv = fake_uv(world, 'echo "$@" >> "%s"' % calls)
    code, res = run(dict(world["args"], uv=uv, **change) if "uv" not in change else dict(world["args"], **change))
    assert code == 1
    assert res["msg"].startswith("Refused, nothing was changed: ") and expected in res["msg"], res["msg"]
    assert not calls.exists() and not world["env"].exists()
    untouched(world)


def test_the_current_environment_is_never_the_new_one(run, world):
    code, res = run(dict(world["args"], env=str(world["current"]) + "/"))
    assert code == 1 and "env is the current environment" in res["msg"]
    untouched(world)


def test_a_path_that_exists_is_refused_and_left_as_it_was(run, world):
    world["env"].mkdir()
    (world["env"] / "mine").write_text("someone's\n")
    code, res = run(dict(world["args"]))
    assert code == 1
    assert res["msg"] == ("Staging vllm 0.33.0 on h1 was refused: %s already exists; run the role again (a new "
                          "environment's name carries the time now). Nothing was changed; the service and %s were "
                          "not touched." % (world["env"], world["current"]))
    assert (world["env"] / "mine").read_text() == "someone's\n"


@pytest.mark.parametrize("edit,expected", [
    (lambda text: text.replace("lark==1.3.1", "lark==1.3.2"), "its pins do not match its fingerprint"),
    (lambda text: text.replace("# gpufleet.vllm lock v2", "# another lock"), "missing header"),
    (lambda text: "", "missing header"),
])
def test_a_lock_that_is_not_one_of_ours_is_refused(run, world, edit, expected):
    code, res = run(dict(world["args"], lock=edit(world["lock"])))
    assert code == 1 and "was refused: the lock" in res["msg"] and expected in res["msg"], res["msg"]
    assert "steps" in res and res["steps"] == [] and not world["env"].exists()


def test_a_lock_for_another_version_is_refused(run, world):
    code, res = run(dict(world["args"], lock=world["lock"], version="0.33.1"))
    assert code == 1 and "the lock is for vllm==0.33.0, not for vllm==0.33.1" in res["msg"]
    assert not world["env"].exists()


def test_missing_uv_and_short_room_are_refused_before_anything_is_written(run, world):
    code, res = run(dict(world["args"], uv=str(world["tmp"] / "no-uv")))
    assert code == 1
    assert "uv was not found at %s, or is not an executable file. Set reinstall_uv" % (world["tmp"] / "no-uv") in res["msg"]
    code, res = run(dict(world["args"], min_free_mib=1 << 40, room_purpose="reinstall_min_free_mib"))
    assert code == 1 and "MiB are free" in res["msg"] and "reinstall_min_free_mib" in res["msg"]
    assert "Nothing was changed" in res["msg"]
    assert not world["env"].exists() and not (world["tmp"] / "uv-cache").exists()


def test_a_trailing_slash_names_the_same_environment(run, world):
    # (its directory is the environments directory, not the new environment itself)
    code, res = run(dict(world["args"], env=str(world["env"]) + "/"), check=True)
    assert code == 0 and res["env"] == str(world["env"])
    assert res["commands"][2][-1] == str(world["env"]) and res["commands"][-1][res["commands"][-1].index("--python") + 1] \
        == str(world["env"] / "bin" / "python")


def test_an_interpreter_uv_cannot_use_fails_at_the_venv_and_leaves_nothing(run, world):
    code, res = run(dict(world["args"], python=str(world["tmp"] / "no-such-python")))
    assert code == 1
    assert "failed at 'create the venv': " in res["msg"], res["msg"]
    assert "The incomplete environment %s was removed" % world["env"] in res["msg"]
    assert res["created"] is True and res["removed"] is True and not world["env"].exists()
    untouched(world)


def test_a_path_that_appears_while_staging_is_left_alone(run, world):
    # another run (or a person) makes the path while uv cleans its cache: this run does not build into it, nor remove it
    uv = fake_uv(world, 'if [ "$2" = prune ]; then mkdir -p "%s" && echo theirs > "%s/mine"; fi' % (world["env"], world["env"]))
    code, res = run(dict(world["args"], uv=uv))
    assert code == 1
    assert ("failed at 'create the venv': %s appeared while this run staged (another run, or a person); it was left "
            "alone. The new environment was not created" % world["env"]) in res["msg"], res["msg"]
    assert (world["env"] / "mine").read_text() == "theirs\n" and res["removed"] is False


def test_a_directory_swapped_in_during_the_venv_step_is_not_removed(run, world):
    # the venv step's directory is replaced by another one (same path, another inode) and uv fails: left alone
    uv = fake_uv(world, 'if [ "$1" = venv ]; then rm -rf "%s"; mkdir "%s"; echo theirs > "%s/mine"; exit 3; fi'
                 % (world["env"], world["env"], world["env"]))
    code, res = run(dict(world["args"], uv=uv))
    assert code == 1
    assert "%s is not the directory this run made (another run or a person put it there); it was left alone" % (
        world["env"]) in res["msg"], res["msg"]
    assert (world["env"] / "mine").read_text() == "theirs\n" and res["removed"] is False


def test_a_cache_step_that_fails_says_the_environment_was_not_created(run, world):
    uv = fake_uv(world, 'if [ "$1" = cache ]; then echo "error: the cache is locked by another uv" >&2; exit 2; fi')
    code, res = run(dict(world["args"], uv=uv))
    assert code == 1
    assert res["msg"] == ("Staging vllm 0.33.0 on h1 failed at 'remove the package from uv's cache': uv cache clean said: "
                          "error: the cache is locked by another uv. The new environment was not created; the service "
                          "and %s were not touched." % world["current"])
    assert not world["env"].exists()


def test_credentials_in_an_index_url_stay_out_of_the_result(run, world):
    uv = fake_uv(world, 'if [ "$1" = pip ]; then exec sleep 60; fi')
    url = "https://alice:s3cr3t@127.0.0.1:9/simple"
    code, res = run(dict(world["args"], uv=uv, timeout=1, index_url=url, no_index=False, find_links=[]))
    assert code == 1 and "did not answer within 1 s" in res["msg"], res["msg"]
    # (the options as given stay in the invocation, as Ansible keeps every module's: not in what the module says)
    assert "s3cr3t" not in json_text(dict((k, v) for k, v in res.items() if k != "invocation"))
    assert "https://***@127.0.0.1:9/simple" in json_text(res["commands"])


def test_without_verify_the_message_does_not_claim_a_proof(run, world):
    code, res = run(dict(world["args"], verify=False))
    assert code == 0 and res["check"] is None
    assert res["msg"].endswith("(resolved on the host), not verified (verify is false)")


def json_text(value):
    import json  # pylint: disable=import-outside-toplevel
    return json.dumps(value)


# A staging killed mid-install: the directory it leaves is unfinished, never reused, removed by the next run
# ---------------------------------------------------------------------------

STAGE_IN_A_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.vllm.plugins.module_utils import stagebuild
stagebuild.build(json.loads(sys.argv[2]))
"""


def _group_alive(pgid):
    """Whether a live (not zombie) process is in process group PGID."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _kill_group(pgid, timeout=60):
    """SIGKILL process group PGID and wait (bounded) until none of it runs: a kill is delivered asynchronously, and
    a process still dying would count as one that stages into the directory."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        return
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _kill_staging_mid_install(world, tmp_path):
    """Stage in a process of its own with a uv that installs for real, says so, then blocks; SIGKILL that process
    (and the blocked uv, in a process group of its own) once vLLM is written. The path of the directory it left."""
    flag = tmp_path / "installed"
    uv = fake_uv(world, 'if [ "$1" = pip ]; then "%s" "$@" || exit $?; echo $$ > "%s.tmp"; mv "%s.tmp" "%s"; '
                        'exec sleep 600; fi' % (world["uv"], flag, flag, flag))
    params = dict(vllm_stage_defaults(), **dict(world["args"], uv=uv))
    collections = [path for path in sys.path if os.path.isdir(os.path.join(path, "ansible_collections"))][0]
    stage = subprocess.Popen([sys.executable, "-c", STAGE_IN_A_PROCESS, collections, json_text(params)],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uv_group = None
    try:
        deadline = time.monotonic() + 120
        while not flag.exists() and stage.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flag.exists(), "the staging did not reach the install (rc %s)" % stage.poll()
        uv_group = os.getpgid(int(flag.read_text().strip()))
        stage.send_signal(signal.SIGKILL)
        assert stage.wait(timeout=30) == -signal.SIGKILL
    finally:
        _kill_group(stage.pid)
        if stage.poll() is None:
            stage.kill()
        stage.wait(timeout=30)
        if uv_group is not None:
            _kill_group(uv_group)
    assert installed(world["env"]) == ["lark-1.3.1", "vllm-0.33.0"]  # (vLLM written: it looks finished)
    assert (world["env"] / stagebuild.MARKER).exists()
    return world["env"]


def test_a_staging_killed_mid_install_is_never_reused_and_the_next_run_removes_it(world, tmp_path, capsys):
    env = _kill_staging_mid_install(world, tmp_path)
    run_envs = module_runner(vllm_envs.main, capsys)
    args = {"envs_dir": str(env.parent), "adopt_venv": str(world["current"]), "target_version": "0.33.0",
            "decide": True, "uv_cache_dir": [], "stamp": "20261207T120000Z"}
    # check mode: says what it would remove, removes nothing
    code, res = run_envs(args, check=True)
    assert code == 0, res["msg"]
    assert res["reuse"] == "" and res["action"] == "build" and res["env"] != str(env)
    assert res["unfinished"] == [str(env)] and res["unfinished_removed"] == [] and env.exists()
    assert "would remove 1 unfinished staging(s) a killed run left: %s" % env in res["msg"]
    # the run that owns the environments: not reused, removed, said so
    code, res = run_envs(args)
    assert code == 0, res["msg"]
    assert res["reuse"] == "" and res["action"] == "build" and str(env) not in res["staged"]
    assert res["reuse_check"]["skipped"] is True
    assert res["unfinished"] == [str(env)] and res["unfinished_removed"] == [str(env)]
    assert res["changed"] is True and not env.exists()
    assert "removed 1 unfinished staging(s) a killed run left: %s" % env in res["msg"]
    assert (world["current"] / "bin" / "keep").read_text() == "the serving environment\n"


def test_a_staging_still_running_is_left_to_it(world):
    # the mark of a process that runs (this one) is another run's staging: listed, never reused, not removed
    env = world["env"]
    (env / "bin").mkdir(parents=True)
    (env / stagebuild.MARKER).write_text(venvs.staging_mark("0" * 32))
    found = venvs.read_envs(str(env.parent), "vllm", 2, target_version="0.33.0")
    assert [e["path"] for e in found["unfinished"]] == [str(env)] and found["reuse"] == ""
    assert found["unfinished"][0]["owner"] == "process %d" % os.getpid()
    done = venvs.remove_unfinished(str(env.parent), found["unfinished"])
    assert done["removed"] == [] and done["left"] == [[str(env), "process %d still stages into it" % os.getpid()]]
    assert env.exists()


def test_a_mark_of_a_process_gone_or_of_another_boot_names_no_owner(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    mark = venvs.staging_mark("0" * 32, pid=child.pid)
    assert venvs.staging_owner(mark) == "process %d" % child.pid or child.poll() is not None
    child.wait(timeout=30)
    assert venvs.staging_owner(mark) == ""
    mine = venvs.staging_mark("0" * 32)
    assert venvs.staging_owner(mine) == "process %d" % os.getpid()
    # (a process id reused by another process: another start time)
    start = mine.split("start=")[1].split()[0]
    assert venvs.staging_owner(mine.replace("start=%s" % start, "start=%d" % (int(start) + 1))) == ""
    assert venvs.staging_owner(mine.replace(" boot=", " boot=x")) == ""
    for odd in ("", "0" * 32, "0" * 32 + " pid=abc start=1", "0" * 32 + " pid=%d start=-" % os.getpid()):
        assert venvs.staging_owner(odd) == ""


def _stop_when_gone(pid_file, stop):
    """Tell the fake uv to stop (STOP), then wait for the process named in PID_FILE to end (bounded)."""
    stop.write_text("")
    deadline = time.monotonic() + 60
    pid = int(pid_file.read_text().strip())
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_a_staging_killed_alone_while_uv_still_writes_is_left_until_uv_ends(world, tmp_path, capsys):
    # the OOM killer or a kill -9 of the module's process: uv, in a session of its own, goes on writing a dependency
    # into the new environment; the next run must leave the directory to it, and remove it once uv ended
    flag, stop = tmp_path / "installed", tmp_path / "stop"
    late = world["env"] / "lib" / "late_dep"
    uv = fake_uv(world, 'if [ "$1" = pip ]; then "%s" "$@" || exit $?; echo $$ > "%s.tmp"; mv "%s.tmp" "%s"; i=0; '
                        'while [ ! -e "%s" ] && [ $i -lt 2400 ]; do i=$((i+1)); mkdir -p "%s/d$i" && '
                        'echo x > "%s/d$i/f.py"; sleep 0.05; done; mkdir -p "%s/last" && echo x > "%s/last/f.py"; '
                        'exit 0; fi' % (world["uv"], flag, flag, flag, stop, late, late, late, late))
    params = dict(vllm_stage_defaults(), **dict(world["args"], uv=uv))
    collections = [path for path in sys.path if os.path.isdir(os.path.join(path, "ansible_collections"))][0]
    stage = subprocess.Popen([sys.executable, "-c", STAGE_IN_A_PROCESS, collections, json_text(params)],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uv_group = None
    env = world["env"]
    run_envs = module_runner(vllm_envs.main, capsys)
    args = {"envs_dir": str(env.parent), "adopt_venv": str(world["current"]), "target_version": "0.33.0",
            "decide": True, "uv_cache_dir": [], "stamp": "20261207T120000Z"}
    try:
        deadline = time.monotonic() + 120
        while not flag.exists() and stage.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flag.exists(), "the staging did not reach the install (rc %s)" % stage.poll()
        uv_group = os.getpgid(int(flag.read_text().strip()))
        stage.send_signal(signal.SIGKILL)  # the module's process only
        assert stage.wait(timeout=30) == -signal.SIGKILL
        code, res = run_envs(args)
        assert code == 0, res["msg"]
        assert res["unfinished"] == [str(env)] and res["unfinished_removed"] == [] and res["reuse"] == ""
        assert len(res["unfinished_left"]) == 1 and "still stages into it" in res["unfinished_left"][0]
        assert env.exists() and (env / stagebuild.MARKER).exists()
        _stop_when_gone(flag, stop)
        assert (late / "last" / "f.py").exists()  # (written into the marked directory, not a new one)
        code, res = run_envs(args)
        assert code == 0, res["msg"]
        assert res["unfinished_removed"] == [str(env)] and not env.exists() and str(env) not in res["staged"]
    finally:
        stop.write_text("")
        if stage.poll() is None:
            stage.kill()
        stage.wait(timeout=30)
        if uv_group is not None:
            _kill_group(uv_group)
    assert (world["current"] / "bin" / "keep").read_text() == "the serving environment\n"


def test_a_process_that_carries_the_staging_token_or_works_in_the_directory_owns_it(tmp_path):
    env = tmp_path / STAMP
    env.mkdir()
    token = "1" * 32
    # the mark's own process is gone (the module was killed): what uv started still carries the token
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    mark = venvs.staging_mark(token, pid=gone.pid)
    assert venvs.staging_owner(mark, [str(env)]) == ""
    procs = []
    try:
        procs.append(subprocess.Popen(["sleep", "600"], env=dict(os.environ, **{venvs.VARIABLE: token})))
        assert venvs.staging_owner(mark) == "process %d" % procs[-1].pid
        assert venvs.staging_owner(mark.replace(token, "2" * 32)) == ""
        procs[-1].kill()
        procs[-1].wait(timeout=30)
        # a process that names the directory on its command line, or works in it
        procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                                       "--python=%s/bin/python" % env]))
        assert venvs.staging_owner(mark, [str(env)]) == "process %d" % procs[-1].pid
        assert venvs.staging_owner(mark, [str(env) + "-other"]) == ""
        procs[-1].kill()
        procs[-1].wait(timeout=30)
        procs.append(subprocess.Popen(["sleep", "600"], cwd=str(env)))
        assert venvs.staging_owner(mark, [str(env)]) == "process %d" % procs[-1].pid
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    assert venvs.staging_owner(mark, [str(env)]) == ""


def test_a_removed_staging_that_an_installer_writes_again_stays_unfinished(tmp_path):
    # an installer no look found (not this host's processes, say) writes the removed directory again, unmarked
    envs = tmp_path / "envs"
    env = envs / STAMP
    (env / "bin").mkdir(parents=True)
    (env / venvs.STAGING_MARKER).write_text(venvs.staging_mark("3" * 32, pid=2 ** 22 - 1))
    found = venvs.read_envs(str(envs), "vllm", 2, target_version="0.33.0")
    assert [e["path"] for e in found["unfinished"]] == [str(env)] and found["unfinished"][0]["owner"] == ""
    assert venvs.remove_unfinished(str(envs), found["unfinished"])["removed"] == [str(env)]
    (env / "lib" / "late_dep").mkdir(parents=True)
    (env / "lib" / "late_dep" / "f.py").write_text("x\n")
    found = venvs.read_envs(str(envs), "vllm", 2, target_version="0.33.0")
    assert found["staged"] == [] and found["reuse"] == "" and found["to_remove"] == []
    assert [e["path"] for e in found["unfinished"]] == [str(env)]
    assert venvs.remove_unfinished(str(envs), found["unfinished"])["removed"] == [str(env)]
    assert not env.exists()
