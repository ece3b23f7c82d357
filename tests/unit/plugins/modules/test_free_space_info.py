# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.free_space_info, run in-process."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import threading
import time

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.vllm.plugins.modules import free_space_info


@pytest.fixture
def run(capsys):
    def _run(args, check=False):
        with patch_module_args(dict(args, _ansible_check_mode=check)):
            with pytest.raises(SystemExit) as exc:
                free_space_info.main()
        return exc.value.code, json.loads(capsys.readouterr().out)
    return _run


def free_mib(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize // (1024 * 1024)


def test_measures_a_path_that_does_not_exist_yet(run, tmp_path):
    code, result = run({"path": str(tmp_path / "envs" / "vllm-0.33.0")}, check=True)
    assert code == 0
    assert result["changed"] is False
    assert result["checked"] == str(tmp_path)
    assert result["exists"] is False
    assert abs(result["free_mib"] - free_mib(str(tmp_path))) < 64
    assert not (tmp_path / "envs").exists()


def test_enough_space_passes(run, tmp_path):
    code, result = run({"path": str(tmp_path), "min_free_mib": 1})
    assert code == 0 and result["exists"] is True


def test_too_little_space_fails_with_a_plain_message(run, tmp_path):
    code, result = run({"path": str(tmp_path / "envs"), "min_free_mib": 10 ** 9, "purpose": "staging vllm 0.33.0"})
    assert code == 1
    assert result["failed"] is True
    msg = result["msg"]
    assert msg.startswith("Only %d MiB are free for %s" % (result["free_mib"], tmp_path / "envs"))
    assert "staging vllm 0.33.0 needs 1000000000 MiB" in msg
    assert "Nothing was changed" in msg


@pytest.mark.parametrize("args,needle", [
    ({"path": "relative/dir"}, "absolute"),
    ({"path": "/tmp", "min_free_mib": -1}, "0 or more"),
])
def test_bad_input(run, args, needle):
    code, result = run(args)
    assert code == 1 and needle in result["msg"]


def test_a_path_below_a_regular_file_fails_naming_the_file(run, tmp_path):
    (tmp_path / "models").write_text("not a directory\n")
    target = tmp_path / "models" / "llama" / "weights"
    code, result = run({"path": str(target), "min_free_mib": 1})
    assert code == 1
    assert result["failed"] is True and result["changed"] is False
    assert result["blocker"] == str(tmp_path / "models")
    assert "%s cannot exist: %s is a regular file" % (target, tmp_path / "models") in result["msg"]
    assert "free_mib" not in result
    assert (tmp_path / "models").read_text() == "not a directory\n"


def test_a_path_below_a_link_to_a_file_fails_too(run, tmp_path):
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    code, result = run({"path": str(tmp_path / "link" / "sub")})
    assert code == 1
    assert result["blocker"] == str(tmp_path / "link")
    assert "is a regular file" in result["msg"]


def test_a_regular_file_itself_is_measured(run, tmp_path):
    (tmp_path / "f").write_text("x")
    code, result = run({"path": str(tmp_path / "f")})
    assert code == 0 and result["exists"] is True and result["checked"] == str(tmp_path / "f")


def test_a_hung_filesystem_fails_at_the_timeout(run, tmp_path, monkeypatch):
    release = threading.Event()

    def hung_statvfs(path):
        release.wait(20)
        return os.statvfs(path)

    monkeypatch.setattr(os, "statvfs", hung_statvfs)
    try:
        started = time.monotonic()
        code, result = run({"path": str(tmp_path / "envs"), "timeout": 1})
        assert time.monotonic() - started < 3
    finally:
        release.set()
    assert code == 1 and result["changed"] is False
    assert result["msg"] == ("Could not measure the free space: the filesystem that would hold %s did not answer within "
                             "1 s (a hung network mount, NFS or FUSE?). Check the mount (mount, dmesg). Nothing was "
                             "changed." % (tmp_path / "envs"))


def test_says_whether_it_ran_in_check_mode(run, tmp_path):
    # a role reads this instead of ansible_check_mode, which a task's check_mode: true leaves false
    assert run({"path": str(tmp_path)}, check=True)[1]["check_mode"] is True
    assert run({"path": str(tmp_path)}, check=False)[1]["check_mode"] is False
    code, failed = run({"path": str(tmp_path), "min_free_mib": 10 ** 9}, check=True)
    assert code == 1 and failed["check_mode"] is True


# ------------------------------------------------------------------ paths: several in one task


def test_paths_measures_each_and_passes_when_the_room_is_there(run, tmp_path):
    (tmp_path / "model").mkdir()
    code, result = run({"paths": [
        {"path": str(tmp_path / "model"), "min_free_mib": 1, "purpose": "the config edits"},
        {"path": str(tmp_path / "cache" / "vllm"), "min_free_mib": 1, "purpose": "vLLM's caches"},
    ]})
    assert code == 0, result
    assert result["problems"] == [] and result["changed"] is False
    assert [c["purpose"] for c in result["checks"]] == ["the config edits", "vLLM's caches"]
    assert result["checks"][1]["exists"] is False and result["checks"][1]["checked"] == str(tmp_path)
    assert not (tmp_path / "cache").exists()


def test_needs_on_one_filesystem_add_up_and_the_message_names_each(run, tmp_path):
    free = free_mib(str(tmp_path))
    half = free // 2 + 16
    code, result = run({"paths": [
        {"path": str(tmp_path / "a"), "min_free_mib": half, "purpose": "the caches"},
        {"path": str(tmp_path / "b"), "min_free_mib": half, "purpose": "the dumps"},
    ]})
    # each alone fits, both together do not
    assert half < free < 2 * half
    assert code == 1 and result["failed"] is True
    [problem] = result["problems"]
    assert problem.startswith("only ") and "which needs %d MiB" % (2 * half) in problem
    assert "%d MiB for the caches (%s)" % (half, tmp_path / "a") in problem
    assert "%d MiB for the dumps (%s)" % (half, tmp_path / "b") in problem
    assert result["msg"].startswith("Not enough room on this host (nothing was changed):\n- Only ")
    assert result["msg"].endswith("or point the paths elsewhere.")


def test_a_path_that_cannot_exist_is_named_and_the_others_still_measured(run, tmp_path):
    (tmp_path / "file").write_text("x")
    code, result = run({"paths": [
        {"path": str(tmp_path / "file" / "below"), "min_free_mib": 1, "purpose": "the caches"},
        {"path": str(tmp_path), "min_free_mib": 10 ** 9, "purpose": "the dumps"},
    ]})
    assert code == 1
    assert len(result["problems"]) == 2
    assert "(for the caches): " in result["problems"][0] and "is a regular file" in result["problems"][0]
    assert "1000000000 MiB for the dumps" in result["problems"][1]
    assert [c["purpose"] for c in result["checks"]] == ["the dumps"]


@pytest.mark.parametrize("args,needle", [
    ({"paths": []}, "paths is empty"),
    ({"paths": [{"path": "relative"}]}, "every path must be absolute"),
    ({"paths": [{"path": "/tmp", "min_free_mib": -5}]}, "must be 0 or more, got -5"),
    ({"path": "/tmp", "paths": [{"path": "/tmp"}]}, "mutually exclusive"),
    ({}, "one of the following is required"),
])
def test_bad_paths_are_refused_before_anything_is_measured(run, args, needle):
    code, result = run(args)
    assert code == 1 and needle in result["msg"], result["msg"]
    assert "checks" not in result


def test_a_hung_filesystem_among_paths_is_named_at_the_timeout(run, tmp_path, monkeypatch):
    release = threading.Event()

    def hung_statvfs(path):
        release.wait(20)
        return os.statvfs(path)

    monkeypatch.setattr(os, "statvfs", hung_statvfs)
    try:
        started = time.monotonic()
        code, result = run({"paths": [{"path": str(tmp_path / "a"), "purpose": "the caches"},
                                      {"path": str(tmp_path / "b"), "purpose": "the dumps"}], "timeout": 1})
        assert time.monotonic() - started < 3
    finally:
        release.set()
    assert code == 1
    assert "(for the caches): the filesystem that would hold" in result["problems"][0]
    assert result["problems"][1] == "%s (for the dumps) was not measured: the time limit of 1 s passed first" % (
        tmp_path / "b")


def test_paths_with_control_characters_cannot_forge_a_line_of_the_message(run, tmp_path):
    code, result = run({"paths": [{"path": str(tmp_path / "a\n- all good"), "min_free_mib": 10 ** 9,
                                   "purpose": "caches\x1b[2J\n- fine"}]})
    assert code == 1
    assert result["msg"].count("\n- ") == 1, result["msg"]
    assert "a\\n- all good" in result["msg"] and "caches\\x1b[2J\\n- fine" in result["msg"]


def test_the_same_place_named_twice_counts_once(run, tmp_path):
    free = free_mib(str(tmp_path))
    (tmp_path / "d").mkdir()
    os.symlink(str(tmp_path / "d"), str(tmp_path / "link"))
    need = free * 2 // 3
    code, result = run({"paths": [{"path": str(tmp_path / "d"), "min_free_mib": need, "purpose": "caches"},
                                  {"path": str(tmp_path / "link"), "min_free_mib": need, "purpose": "dumps"}]})
    assert code == 0, result.get("msg")
    [check] = result["checks"]
    assert check["purpose"] == "caches; dumps" and check["min_free_mib"] == need
