# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.report_files, its action plugin run in-process: the diffs of a run written in one task, nothing outside the directory."""

import os

import pytest

from writer_actions import action_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils.writers import report_files

DIFF = "--- a/vllm/model.py\n+++ b/vllm/model.py\n@@ -1 +1,2 @@\n x = 1\n+_t.save(q, '/tmp/q.pt')\n"


@pytest.fixture
def run():
    return action_runner("report_files")


def _tree(top):
    return sorted(os.path.relpath(os.path.join(d, f), str(top)) for d, dummy, names in os.walk(str(top)) for f in names)


def test_writes_every_file_below_the_directory_in_one_run(run, tmp_path):
    files = [{"file": "diffs/gpu-1/vllm/model_executor/models/deepseek_v2.py.diff", "content": DIFF},
             {"file": "diffs/gpu-2/vllm/model.py.diff", "content": u"+ caf\u00e9\n"}]
    rc, result = run({"path": str(tmp_path / "rollout-1"), "files": files})
    assert rc == 0 and result["changed"] is False and result["check_mode"] is False
    assert result["files"] == [f["file"] for f in files]
    assert _tree(tmp_path / "rollout-1") == sorted(f["file"] for f in files)
    assert (tmp_path / "rollout-1" / files[0]["file"]).read_text() == DIFF
    assert result["bytes"] == len(DIFF) + len(u"+ caf\u00e9\n".encode("utf-8"))


def test_check_mode_writes_nothing_and_says_what_it_would_write(run, tmp_path):
    rc, result = run({"path": str(tmp_path / "r"), "files": [{"file": "diffs/h/a.diff", "content": DIFF}]}, check=True)
    assert rc == 0 and result["check_mode"] is True and result["files"] == ["diffs/h/a.diff"]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("bad, why", [
    ("../outside.diff", "'.' or '..' part"),
    ("diffs/../../outside.diff", "'.' or '..' part"),
    ("/etc/cron.d/x", "absolute"),
    ("diffs//x.diff", "empty"),
    ("diffs/h/x.diff\n[Service]", "control character"),
    ("diffs/h/\x1b[2Jx.diff", "control character"),
    ("", "empty"),
    ("diffs/" + "a" * 256 + ".diff", "longer than 255 bytes"),
])
def test_a_path_that_could_leave_the_directory_is_refused_before_anything_is_written(run, tmp_path, bad, why):
    files = [{"file": "diffs/ok/first.diff", "content": DIFF}, {"file": bad, "content": DIFF}]
    rc, result = run({"path": str(tmp_path / "r"), "files": files})
    assert rc == 1 and why in result["msg"] and "nothing was written" in result["msg"]
    assert "\n" not in result["msg"] and "\x1b" not in result["msg"]
    assert not (tmp_path / "r").exists() and _tree(tmp_path) == []


@pytest.mark.parametrize("check", [False, True])
def test_a_symbolic_link_inside_the_directory_is_refused_before_anything_is_written(run, tmp_path, check):
    outside = tmp_path / "outside"
    outside.mkdir()
    report = tmp_path / "r"
    (report / "diffs").mkdir(parents=True)
    os.symlink(str(outside), str(report / "diffs" / "gpu-1"))
    files = [{"file": "diffs/gpu-0/a.diff", "content": DIFF}, {"file": "diffs/gpu-1/b.diff", "content": DIFF}]
    rc, result = run({"path": str(report), "files": files}, check=check)
    assert rc == 1 and "symbolic link" in result["msg"] and "nothing was written" in result["msg"]
    assert os.listdir(str(outside)) == [] and not (report / "diffs" / "gpu-0").exists()


def test_a_link_that_appears_after_the_plan_is_refused_at_its_write(run, tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    report = tmp_path / "r"
    real_write = report_files.reportfile.write_below

    def write_then_swap(base, relative, data):
        real_write(base, relative, data)
        if not (report / "diffs" / "gpu-1").exists():
            os.symlink(str(outside), str(report / "diffs" / "gpu-1"))

    monkeypatch.setattr(report_files.reportfile, "write_below", write_then_swap)
    files = [{"file": "diffs/gpu-0/a.diff", "content": DIFF}, {"file": "diffs/gpu-1/b.diff", "content": DIFF}]
    rc, result = run({"path": str(report), "files": files})
    assert rc == 1 and "symbolic link" in result["msg"] and "Written before it: 1 of 2" in result["msg"]
    assert result["files"] == ["diffs/gpu-0/a.diff"] and os.listdir(str(outside)) == []


@pytest.mark.parametrize("swapped", ["diffs", "diffs/gpu-1"])
def test_a_link_swapped_in_between_the_check_and_the_write_is_refused(run, tmp_path, monkeypatch, swapped):
    # the directory is there and plain when the file's path is checked, a link to elsewhere when it is written
    outside = tmp_path / "outside"
    (outside / "gpu-1").mkdir(parents=True)
    report = tmp_path / "r"
    (report / "diffs" / "gpu-1").mkdir(parents=True)
    real_check = report_files.tree_problem
    checks = []

    def check_then_swap(base, relative, planned_dirs, planned_files):
        problem = real_check(base, relative, planned_dirs, planned_files)
        checks.append(relative)
        if problem is None and checks == ["diffs/gpu-1/b.diff"] * 2:
            # (the plan's check and the write's own passed: the swap lands between the last and the write)
            os.rename(str(report / swapped), str(tmp_path / "moved"))
            os.symlink(str(outside / os.path.relpath(swapped, "diffs")) if swapped != "diffs" else str(outside),
                       str(report / swapped))
        return problem

    monkeypatch.setattr(report_files, "tree_problem", check_then_swap)
    files = [{"file": "diffs/gpu-1/b.diff", "content": DIFF}]
    rc, result = run({"path": str(report), "files": files})
    assert rc == 1 and "is a symbolic link; report files are not written through links" in result["msg"]
    assert "Written before it: 0 of 1" in result["msg"] and result["files"] == []
    assert checks == ["diffs/gpu-1/b.diff"] * 2
    assert _tree(outside) == [] and _tree(tmp_path / "moved") == []


@pytest.mark.parametrize("second, why", [
    ("diffs/h/a.diff", "same path"),
    ("diffs/h/a.diff/b.diff", "is another file of this run"),
    ("diffs/h", "needs it as a directory"),
])
def test_no_file_of_the_run_hides_another(run, tmp_path, second, why):
    files = [{"file": "diffs/h/a.diff", "content": "first"}, {"file": second, "content": "second"}]
    rc, result = run({"path": str(tmp_path / "r"), "files": files})
    assert rc == 1 and why in result["msg"] and "nothing was written" in result["msg"]
    assert not (tmp_path / "r").exists()


def test_a_name_of_255_bytes_is_written(run, tmp_path):
    name = "diffs/h/" + "a" * 250 + ".diff"
    rc, result = run({"path": str(tmp_path / "r"), "files": [{"file": name, "content": DIFF}]})
    assert rc == 0 and (tmp_path / "r" / name).read_text() == DIFF


def test_too_many_files_or_bytes_are_refused_unwritten(run, tmp_path):
    files = [{"file": "diffs/h/%d.diff" % i, "content": DIFF} for i in range(3)]
    rc, result = run({"path": str(tmp_path / "r"), "files": files, "max_files": 2})
    assert rc == 1 and "more than max_files (2)" in result["msg"]
    rc, result = run({"path": str(tmp_path / "r"), "files": files, "max_bytes": 2 * len(DIFF)})
    assert rc == 1 and "more than max_bytes" in result["msg"]
    assert not (tmp_path / "r").exists()


def test_a_file_written_again_keeps_its_mode_and_a_new_one_gets_the_umask(run, tmp_path):
    report = tmp_path / "r"
    files = [{"file": "diffs/h/a.diff", "content": "first"}]
    assert run({"path": str(report), "files": files})[0] == 0
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(str(report / "diffs/h/a.diff")).st_mode & 0o777 == 0o666 & ~umask
    os.chmod(str(report / "diffs/h/a.diff"), 0o600)
    assert run({"path": str(report), "files": [{"file": "diffs/h/a.diff", "content": "second"}]})[0] == 0
    assert (report / "diffs/h/a.diff").read_text() == "second"
    assert os.stat(str(report / "diffs/h/a.diff")).st_mode & 0o777 == 0o600
    assert _tree(report) == ["diffs/h/a.diff"]
