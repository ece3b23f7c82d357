# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.sm120_config: the role's settings check, GPU read, decision, plan and edit in one module run.

Most cases run the module in-process on model directories of a temporary
tree; the GPU cases run its file as Ansible does, with the fake NVML library
(tests/sim/fakenvml) under the real pynvml, loaded from a "tools venv".
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.modules import sm120_config

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "sm120_config.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")

fixtures = load_source("gpufleet_model_fixtures_sm120_module", "tests", "sim", "model", "fixtures.py")
nvml_state = load_source("fakenvml_state_for_sm120_config", "tests", "sim", "fakenvml", "state.py")

BROKEN = '{\n  "architectures": ["DeepseekV3ForCausalLM"],\n  "quantization_config": {\n    "quant_method": "fp8",\n  }\n}\n'
H100 = {"available": True, "sm120": False, "compute_capabilities": ["9.0"], "count": 8, "names": ["NVIDIA H100"]}
# the keys of the role's sm120_config_result (sm120.summarize), all returned at the top level
RESULT_KEYS = {"action", "applied", "sm120", "forced", "reason", "build", "build_row", "summary", "check_mode",
               "changed", "removed_count", "dirs"}


@pytest.fixture
def run(capsys):
    """run(args, check=False, diff=False) -> (exit code, result dict)."""
    return module_runner(sm120_config.main, capsys)


def tree(root):
    """path -> (sha256, mtime_ns) of every file and link under root."""
    found = {}
    for base, dirs, files in os.walk(str(root)):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            path = os.path.join(base, name)
            if os.path.islink(path):
                found[path] = ("link:" + os.readlink(path), os.lstat(path).st_mtime_ns)
            else:
                with open(path, "rb") as handle:
                    found[path] = (hashlib.sha256(handle.read()).hexdigest(), os.stat(path).st_mtime_ns)
    return found


@pytest.fixture
def dirs(tmp_path):
    """Two dirty model directories (both KV-cache keys in config.json and hf_quant_config.json) and a clean one."""
    made = {}
    for name in ("a", "b"):
        made[name] = str(tmp_path / name)
        fixtures.make_model_dir(made[name])
    made["clean"] = str(tmp_path / "clean")
    fixtures.write_plain(made["clean"], {"config.json": b'{"architectures": []}\n'})
    return made


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


# ------------------------------------------------------------------ the edit


def test_forced_run_removes_the_keys_of_every_directory_and_returns_the_roles_result(dirs, run):
    rc, res = run({"model_dirs": [dirs["a"], dirs["clean"], dirs["a"]], "force": True, "backup": True})
    assert rc == 0, res
    assert RESULT_KEYS <= set(res)
    assert (res["action"], res["applied"], res["forced"], res["sm120"]) == ("apply", True, True, None)
    assert res["reason"].startswith("fleet_strip_kv_cache_keys_force is true")
    assert res["changed"] is True and res["check_mode"] is False and res["removed_count"] == 2
    # a repeated directory counts once
    dirty, clean = res["dirs"]
    assert dirty["path"] == dirs["a"] and dirty["changed"] is True and dirty["removed_count"] == 2
    assert sorted((os.path.basename(r["file"]), r["key"]) for r in dirty["removed"]) == [
        ("config.json", "quantization_config.kv_cache_scheme"), ("hf_quant_config.json", "quantization.kv_cache_quant_algo")]
    assert len(dirty["backups"]) == 2 and all(os.path.exists(b) for b in dirty["backups"])
    assert clean == {"path": dirs["clean"], "changed": False, "removed_count": 0, "removed": [], "backups": [],
                     "skipped_files": [dirs["clean"] + "/hf_quant_config.json"]}
    assert res["lines"] == [
        "removed 2 key(s) in %s: quantization_config.kv_cache_scheme, quantization.kv_cache_quant_algo" % dirs["a"],
        "removed 0 key(s) in %s: keys already absent" % dirs["clean"]]
    # the GPUs were not read (forced): no gpus, no fact
    assert "gpus" not in res and "ansible_facts" not in res
    assert "kv_cache_scheme" not in read(os.path.join(dirs["a"], "config.json"))
    assert "kv_cache_quant_algo" not in read(os.path.join(dirs["a"], "hf_quant_config.json"))

    rc, again = run({"model_dirs": [dirs["a"], dirs["clean"]], "force": True, "backup": True})
    assert rc == 0 and again["changed"] is False and again["removed_count"] == 0
    assert [d["backups"] for d in again["dirs"]] == [[], []]


def test_one_directory_under_two_spellings_is_edited_once(dirs, run, tmp_path):
    # (a trailing slash, a link to it: every directory is planned before any is written, so a second plan of the
    # same files would find them changed by the first write and fail the host)
    os.symlink(dirs["a"], str(tmp_path / "current"))
    rc, res = run({"model_dirs": [dirs["a"], dirs["a"] + "/", str(tmp_path / "current")], "force": True})
    assert rc == 0, res["msg"]
    assert [d["path"] for d in res["dirs"]] == [dirs["a"]] and res["removed_count"] == 2
    assert "kv_cache_scheme" not in read(os.path.join(dirs["a"], "config.json"))


def test_check_mode_with_diff_shows_each_file_and_writes_nothing(dirs, run, tmp_path):
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [dirs["a"], dirs["b"]], "force": True, "backup": True}, check=True, diff=True)
    assert rc == 0, res
    assert res["check_mode"] is True and res["changed"] is True and res["removed_count"] == 4
    assert [d["changed"] for d in res["dirs"]] == [True, True] and all(d["backups"] == [] for d in res["dirs"])
    assert res["lines"][0].startswith("would remove 2 key(s) in %s: " % dirs["a"])
    # one diff per file that changes, in every directory, with what the edit removes
    headers = [d["before_header"] for d in res["diff"]]
    assert headers == [os.path.join(d, f) for d in (dirs["a"], dirs["b"]) for f in ("config.json", "hf_quant_config.json")]
    first = res["diff"][0]
    assert "kv_cache_scheme" in first["before"] and "kv_cache_scheme" not in first["after"]
    assert tree(tmp_path) == before


def test_no_diff_without_diff_mode(dirs, run):
    rc, res = run({"model_dirs": [dirs["a"]], "force": True}, check=True)
    assert rc == 0 and "diff" not in res


def test_a_malformed_second_directory_fails_before_the_first_is_written(dirs, run, tmp_path):
    broken = str(tmp_path / "broken")
    fixtures.write_plain(broken, {"config.json": BROKEN.encode()})
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [dirs["a"], broken], "force": True, "backup": True})
    assert rc == 1 and res["failed"] is True and res["changed"] is False
    assert res["model_dir"] == broken and res["file"] == broken + "/config.json"
    assert res["line"] == 5 and res["column"] == 3, res["msg"]
    assert broken + "/config.json" in res["msg"]
    assert res["msg"].endswith("No file was changed in any of the 2 model directories: every one is planned before "
                               "any is written.")
    # the first directory keeps its keys, byte for byte, and no backup was made
    assert tree(tmp_path) == before


def test_a_missing_directory_fails_before_anything_is_written(dirs, run, tmp_path):
    before = tree(tmp_path)
    missing = str(tmp_path / "missing")
    rc, res = run({"model_dirs": [dirs["a"], missing], "force": True})
    assert rc == 1 and res["changed"] is False and res["model_dir"] == missing
    assert res["msg"].startswith("The model directory %s does not exist or is not a directory" % missing)
    assert tree(tmp_path) == before


def test_a_link_that_needs_an_edit_is_refused_by_default_and_copied_when_asked(tmp_path, run):
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    fixtures.make_model_dir(str(tmp_path / "src"))
    shutil.copy(str(tmp_path / "src" / "config.json"), str(blob))
    snap = tmp_path / "snap"
    snap.mkdir()
    os.symlink(str(blob), str(snap / "config.json"))
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [str(snap)], "force": True, "files": {"config.json": ["**.kv_cache_scheme"]}})
    assert rc == 1 and "symbolic link" in res["msg"] and tree(tmp_path) == before
    rc, res = run({"model_dirs": [str(snap)], "force": True, "files": {"config.json": ["**.kv_cache_scheme"]},
                   "symlinks": "copy"})
    assert rc == 0 and res["removed_count"] == 1
    assert not os.path.islink(str(snap / "config.json")) and "kv_cache_scheme" in blob.read_text()


# ------------------------------------------------------------------ the decision without the GPUs


def test_policy_off_reads_and_changes_nothing(dirs, run, tmp_path):
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [dirs["a"]], "strip_kv_cache_keys": False, "force": True, "host_tools_ready": True,
                   "nvml_venvs": [str(tmp_path / "nowhere")]})
    assert rc == 0 and res["action"] == "skip" and res["dirs"] == [] and res["changed"] is False
    assert res["reason"].startswith("fleet_strip_kv_cache_keys is false") and res["lines"] == []
    assert "gpus" not in res and tree(tmp_path) == before


def test_a_gpus_fact_that_is_not_sm120_changes_nothing_and_says_why(dirs, run, tmp_path):
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [dirs["a"]], "detect": False, "gpus": H100})
    assert rc == 0 and res["action"] == "skip" and res["sm120"] is False and res["dirs"] == []
    assert "(found: 9.0)" in res["reason"] and tree(tmp_path) == before


def test_check_mode_without_host_tools_previews(dirs, run, tmp_path):
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [dirs["a"]]}, check=True)
    assert rc == 0 and res["action"] == "preview" and res["sm120"] is None and res["applied"] is False
    assert res["reason"].startswith("Check mode on a host without the host tools venv")
    assert res["changed"] is True and res["removed_count"] == 2 and "gpus" not in res
    assert tree(tmp_path) == before


def test_without_host_tools_a_real_run_changes_nothing(dirs, run, tmp_path):
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [dirs["a"]]})
    assert rc == 0 and res["action"] == "skip" and res["sm120"] is None and "gpus" not in res
    assert tree(tmp_path) == before


def test_a_build_that_runs_fp8_kv_cache_on_sm120_keeps_the_keys_and_reads_no_gpu(dirs, run, tmp_path):
    before = tree(tmp_path)
    builds = [{"versions": "<0.19.0", "fp8_kv_cache_on_sm120": False},
              {"versions": ">=0.19.0", "fp8_kv_cache_on_sm120": True, "note": "Triton MLA"}]
    rc, res = run({"model_dirs": [dirs["a"]], "force": True, "build": "0.33.1.dev7", "builds": builds,
                   "host_tools_ready": True})
    assert rc == 0 and res["action"] == "skip" and res["build_row"]["index"] == 1 and "gpus" not in res
    assert res["summary"] == 'keys kept: vLLM 0.33.1.dev7, fleet_sm120_fp8_kv_cache_builds[1] ">=0.19.0"'
    assert tree(tmp_path) == before


@pytest.mark.parametrize("args, text", [
    ({"files": {"../config.json": ["**.kv_cache_scheme"]}}, '"../config.json" (a name with "..")'),
    ({"required_files": ["other.json"]}, 'fleet_config_required_files may only name files of fleet_config_files'),
    ({"builds": [{"versions": "0.19", "fp8_kv_cache_on_sm120": True}]},
     "fleet_sm120_fp8_kv_cache_builds[0].versions must be a PEP 440 version specifier"),
    ({"timeout": 0}, "timeout must be from 1 to 604800 seconds, got 0."),
])
def test_bad_settings_fail_before_anything_is_read(dirs, run, tmp_path, args, text):
    before = tree(tmp_path)
    rc, res = run(dict({"model_dirs": [dirs["a"]], "force": True}, **args))
    assert rc == 1 and text in res["msg"] and res["msg"].endswith(" Nothing was changed.")
    assert tree(tmp_path) == before


# ------------------------------------------------------------------ the time limit


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(sm120_config, "_clock", lambda: now[0])
    return now


def test_time_up_while_planning_changes_nothing(dirs, run, clock, monkeypatch, tmp_path):
    real = sm120_config.plan_file

    def slow(*a, **kw):
        clock[0] += 100
        return real(*a, **kw)

    monkeypatch.setattr(sm120_config, "plan_file", slow)
    before = tree(tmp_path)
    rc, res = run({"model_dirs": [dirs["a"], dirs["b"]], "force": True, "timeout": 150})
    assert rc == 1 and res["changed"] is False and res["model_dir"] == dirs["b"]
    assert res["msg"].startswith("The time limit of 150 s (timeout) passed before %s/config.json was planned. Nothing "
                                 "was changed (2 file(s) planned, none written)." % dirs["b"])
    assert tree(tmp_path) == before


def test_time_up_while_writing_names_what_was_written(dirs, run, clock, monkeypatch):
    real = sm120_config.write_plan

    def slow(*a, **kw):
        clock[0] += 100
        return real(*a, **kw)

    monkeypatch.setattr(sm120_config, "write_plan", slow)
    rc, res = run({"model_dirs": [dirs["a"], dirs["b"]], "force": True, "timeout": 150})
    # a's two files take 200 s: the time is up before b's first file, named with what a had written
    assert rc == 1 and res["changed"] is True and res["model_dir"] == dirs["b"]
    written = [dirs["a"] + "/config.json", dirs["a"] + "/hf_quant_config.json"]
    assert res["msg"] == ("The time limit of 150 s (timeout) passed before %s/config.json was written. Already "
                          "written before this failure: %s." % (dirs["b"], ", ".join(written)))
    assert [f.get("written") for f in res["files"]] == written
    assert "kv_cache_scheme" in read(os.path.join(dirs["b"], "config.json"))


# ------------------------------------------------------------------ the GPUs, through the fake NVML library


class Host:
    """The module run as Ansible runs it, with the fake NVML and pynvml only in a tools venv."""

    def __init__(self, tmp_path, lib_dir):
        import pynvml
        self.tmp = tmp_path
        self.tools = tmp_path / "tools"
        site = self.tools / "lib" / "python3.11" / "site-packages"
        site.mkdir(parents=True)
        shutil.copy(pynvml.__file__, str(site / "pynvml.py"))
        hidden = tmp_path / "no-pynvml"
        hidden.mkdir()
        (hidden / "pynvml.py").write_text("raise ImportError(\"No module named 'pynvml'\")\n")
        self.nvml = str(tmp_path / "nvml" / "state")
        os.makedirs(os.path.dirname(self.nvml))
        self.env = dict(os.environ, LD_LIBRARY_PATH=lib_dir, FAKE_NVML_STATE=self.nvml,
                        PYTHONPATH=os.pathsep.join([str(hidden), COLLECTIONS]))

    def run(self, args, check=False):
        args = dict({"nvml_venvs": [str(self.tools)], "host_tools_ready": True}, **args)
        path = self.tmp / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
        proc = subprocess.run([sys.executable, MODULE, str(path)], env=self.env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def host(tmp_path, lib_dir):
    return Host(tmp_path, lib_dir)


def test_sm120_gpus_are_read_from_the_tools_venv_and_the_keys_removed(host, dirs):
    rc, res = host.run({"model_dirs": [dirs["a"]]})
    assert rc == 0, res
    assert res["action"] == "apply" and res["sm120"] is True and res["forced"] is False
    assert res["reason"].startswith("The GPUs report compute capability 12.0 (SM120)")
    assert res["removed_count"] == 2 and "kv_cache_scheme" not in read(os.path.join(dirs["a"], "config.json"))
    assert res["gpus"]["count"] == 8 and res["gpus"]["sm120"] is True
    assert res["ansible_facts"] == {"gpufleet_gpus": res["gpus"]}


def test_gpus_that_are_not_sm120_change_nothing(host, dirs, tmp_path):
    nvml_state.update_state(lambda d: d.update({"default.cc": "9.0"}), host.nvml)
    before = tree(dirs["a"])
    rc, res = host.run({"model_dirs": [dirs["a"]]})
    assert rc == 0 and res["action"] == "skip" and res["sm120"] is False and res["dirs"] == []
    assert "(found: 9.0)" in res["reason"]
    assert res["ansible_facts"]["gpufleet_gpus"]["compute_capabilities"] == ["9.0"]
    assert tree(dirs["a"]) == before


def test_an_nvml_error_is_quoted_and_nothing_changes(host, dirs):
    nvml_state.update_state(lambda d: d.update({"init_error": "DRIVER_NOT_LOADED"}), host.nvml)
    before = tree(dirs["a"])
    rc, res = host.run({"model_dirs": [dirs["a"]]})
    assert rc == 0 and res["action"] == "skip" and res["sm120"] is None
    assert res["reason"].startswith("The GPUs could not be read through NVML (") and "DRIVER_NOT_LOADED" in res["reason"]
    assert res["gpus"]["available"] is False and res["ansible_facts"]["gpufleet_gpus"]["available"] is False
    assert "DRIVER_NOT_LOADED" in json.dumps(res.get("warnings")), res
    assert tree(dirs["a"]) == before


def test_no_pynvml_in_the_tools_venv_says_so(host, dirs, tmp_path):
    rc, res = host.run({"model_dirs": [dirs["a"]], "nvml_venvs": [str(tmp_path / "nothing")]})
    assert rc == 0 and res["action"] == "skip" and res["sm120"] is None
    assert "nvidia-ml-py" in res["reason"] and "gpufleet_gpus" in res["ansible_facts"]


def test_forced_or_detection_off_reads_no_gpu(host, dirs):
    nvml_state.update_state(lambda d: d.update({"init_error": "DRIVER_NOT_LOADED"}), host.nvml)
    rc, res = host.run({"model_dirs": [dirs["a"]], "force": True}, check=True)
    assert rc == 0 and res["action"] == "apply" and "gpus" not in res and "warnings" not in res
    rc, res = host.run({"model_dirs": [dirs["a"]], "detect": False})
    assert rc == 0 and res["action"] == "skip" and "gpus" not in res
