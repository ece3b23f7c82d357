# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.model_info: the operator's check of a model directory, through the module's main().

Real safetensors shards written by the tests (tests/unit/plugins/module_utils/test_modeldir.py writes them); the
module returns the problems, the fingerprint and the files, reads only metadata on its second run, writes its hash
cache nowhere in check mode, and fails with a sentence on bad options, a broken model with fail_on_problem, a
directory it cannot check and a time limit.
"""

import os
import stat

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import modeldir
from ansible_collections.gpufleet.vllm.plugins.modules import model_info
from helpers import load_source, module_runner

shards = load_source("modeldir_shards_for_model_info", "tests", "unit", "plugins", "module_utils", "test_modeldir.py")


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    """No racy window (the files are written just before the check) and the test process keeps its priority."""
    monkeypatch.setattr(modeldir, "RACY_SECONDS", 0.0)
    monkeypatch.setattr(model_info, "lower_priority", lambda module: "nice 10, I/O best-effort level 7 (test)")


@pytest.fixture
def run(capsys):
    return module_runner(model_info.main, capsys)


@pytest.fixture
def plain(tmp_path):
    return shards.write_plain(str(tmp_path / "model"))


def args(path, tmp_path, **extra):
    given = dict(path=path, cache_path=str(tmp_path / "cache" / "model.json"))
    given.update(extra)
    return given


def test_a_whole_model_and_its_second_quick_run_from_the_cache(run, plain, tmp_path):
    code, first = run(args(plain, tmp_path))
    assert code == 0, first
    assert first["ok"] and first["changed"] is False and first["check_mode"] is False
    assert first["layout"] == "plain" and first["problems"] == [] and first["fingerprint"].startswith("sha256:")
    assert first["cache_written"] and first["bytes_hashed"] > 0 and first["cache_hits"] == 0
    assert first["msg"].startswith("The model directory %s (plain) is whole: fingerprint %s;"
                                   % (plain, first["fingerprint"]))
    assert first["io_priority"].startswith("nice 10")
    # the check's mode, not the directory's file mode (AnsibleModule adds a path's owner and mode to a result that
    # names a path)
    assert first["mode"] == "quick" and "owner" not in first and first["directory"] == plain
    code, second = run(args(plain, tmp_path))
    assert code == 0 and second["bytes_hashed"] == 0 and second["cache_hits"] == first["fingerprint_files"]
    assert second["fingerprint"] == first["fingerprint"]
    code, full = run(args(plain, tmp_path, mode="full"))
    assert code == 0 and full["bytes_hashed"] == first["bytes_hashed"] and full["fingerprint"] == first["fingerprint"]


def test_check_mode_checks_the_same_and_writes_no_cache(run, plain, tmp_path):
    code, result = run(args(plain, tmp_path), check=True)
    assert code == 0 and result["check_mode"] is True and result["ok"] and result["fingerprint"]
    assert not result["cache_written"] and not os.path.exists(str(tmp_path / "cache"))


def test_problems_are_returned_and_fail_only_when_asked(run, plain, tmp_path):
    os.truncate(os.path.join(plain, "model-00002-of-00003.safetensors"), 100)
    with open(os.path.join(plain, "model-00001-of-00003.safetensors"), "wb") as handle:
        handle.write(shards.LFS_POINTER)
    code, result = run(args(plain, tmp_path))
    assert code == 0 and result["ok"] is False
    assert [(p["file"], p["kind"]) for p in result["problems"]] == [
        ("model-00001-of-00003.safetensors", "lfs_pointer"), ("model-00002-of-00003.safetensors", "truncated")]
    assert "has 2 problem(s)" in result["msg"] and "Git LFS pointer, not the shard (run git lfs pull)" in result["msg"]
    code, failed = run(args(plain, tmp_path, fail_on_problem=True))
    assert code == 1 and failed["failed"] and failed["problems"] == result["problems"]
    assert "- model-00002-of-00003.safetensors: " in failed["msg"] and "Fetch the named files again" in failed["msg"]


def test_an_hf_cache_repository(run, tmp_path):
    repo, snap = shards.write_hf(str(tmp_path / "hub"))
    code, result = run(args(repo, tmp_path, mode="full"))
    assert code == 0 and result["ok"] and result["layout"] == "hf-cache"
    assert result["directory"] == os.path.realpath(snap)


def test_a_changed_tokenizer_changes_the_fingerprint(run, plain, tmp_path):
    dummy, first = run(args(plain, tmp_path))
    with open(os.path.join(plain, "tokenizer.json"), "w") as handle:
        handle.write('{"model": {"type": "WordLevel", "vocab": {"[UNK]": 0}}}')
    dummy, second = run(args(plain, tmp_path))
    assert second["ok"] and second["fingerprint"] != first["fingerprint"]
    before = dict((f["path"], f["sha256"]) for f in first["files"])
    assert [f["path"] for f in second["files"] if f["sha256"] != before[f["path"]]] == ["tokenizer.json"]


@pytest.mark.parametrize("extra, words", [
    (dict(path="relative/model"), "path must be absolute"),
    (dict(max_workers=0), "max_workers must be 1 to 64, got 0"),
    (dict(max_workers=65), "max_workers must be 1 to 64, got 65"),
    (dict(timeout=0), "timeout must be at least 1 second"),
    (dict(max_files=0), "max_files must be 1 to 1000000"),
    (dict(cache_path="/var/cache/x.txt"), "cache_path must name a .json file"),
    (dict(cache_path="/var/cache/../x.json"), "plain file path"),
], ids=["relative", "no-workers", "too-many-workers", "timeout", "max-files", "not-json", "dotdot"])
def test_bad_options_fail_before_anything_is_read(run, plain, tmp_path, extra, words):
    given = args(plain, tmp_path)
    given.update(extra)
    code, result = run(given)
    assert code == 1 and words in result["msg"] and result["msg"].startswith("Invalid options")
    assert "Nothing was read." in result["msg"]


def test_a_cache_path_inside_the_model_directory_is_refused(run, plain, tmp_path):
    code, result = run(args(plain, tmp_path, cache_path=os.path.join(plain, "hashes.json")))
    assert code == 1 and "lies inside the model directory" in result["msg"]
    assert not os.path.exists(os.path.join(plain, "hashes.json"))


def test_the_default_cache_path_of_a_user_who_is_not_root(run, plain, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(modeldir.os, "geteuid", lambda: 1000)
    code, result = run(dict(path=plain))
    assert code == 0 and result["cache_written"]
    assert os.path.dirname(result["cache_path"]) == str(tmp_path / "xdg" / "gpufleet" / "model-hashes")
    assert stat.S_IMODE(os.stat(os.path.dirname(result["cache_path"])).st_mode) == 0o700


def test_a_directory_that_links_to_the_root_is_refused(run, tmp_path):
    os.symlink("/", str(tmp_path / "model"))
    code, result = run(args(str(tmp_path / "model"), tmp_path))
    assert code == 1 and result["msg"].startswith("Cannot check the model directory: the model directory ")
    assert "system directory /;" in result["msg"] and not os.path.exists(str(tmp_path / "cache"))


def test_a_missing_directory(run, tmp_path):
    code, result = run(args(str(tmp_path / "nowhere"), tmp_path))
    assert code == 1 and "cannot be read: No such file or directory" in result["msg"]


def test_the_time_limit(run, plain, tmp_path, monkeypatch):
    def late(*dummy, **kwargs):
        raise modeldir.DeadlinePassed("the time limit of 1 s (timeout) passed before hashing the files (0 of 8 hashed)")

    monkeypatch.setattr(model_info, "check_model_dir", late)
    code, result = run(args(plain, tmp_path, timeout=1))
    assert code == 1 and "did not finish: the time limit of 1 s (timeout) passed" in result["msg"]
    assert "kept in the hash cache" in result["msg"]


def test_lower_priority_sets_nice_and_asks_ionice_without_a_shell(monkeypatch):
    calls = []
    monkeypatch.undo()
    monkeypatch.setattr(model_info.os, "getpriority", lambda which, who: 0)
    monkeypatch.setattr(model_info.os, "setpriority", lambda which, who, value: calls.append(("nice", value)))
    monkeypatch.setattr(model_info, "run_bounded", lambda argv, timeout: calls.append(argv) or (0, "", ""))

    class Module(object):
        def get_bin_path(self, name):
            return "/usr/bin/" + name

    assert model_info.lower_priority(Module()) == "nice 10, I/O best-effort level 7"
    assert calls == [("nice", 10), ["/usr/bin/ionice", "-c", "2", "-n", "7", "-p", str(os.getpid())]]
