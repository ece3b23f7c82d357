# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""integrity: hostile environments and odd trees (issue 14).

Real virtual environments with ``.pth`` hooks that would run code, a
site-packages reached through a symbolic link, deep trees and hostile RECORD
files; each test makes the fault happen and checks the result.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from helpers import load_source
from ansible_collections.gpufleet.vllm.plugins.module_utils import environment, filecheck
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import check as integrity
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import record
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError

helpers = load_source("gpufleet_integrity_helpers_hostile", "tests", "unit", "plugins", "module_utils", "test_integrity.py")


def make_venv(path, base=None):
    """A real venv (no pip) made by ``base`` (default: the running interpreter);
    returns (root, python, site-packages)."""
    base = base or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(path)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    python = os.path.join(str(path), "bin", "python")
    version = subprocess.run([python, "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=True,
                             stdout=subprocess.PIPE, timeout=60).stdout.decode().strip()
    site = os.path.join(str(path), "lib", "python" + version, "site-packages")
    assert os.path.isdir(site)
    return str(path), python, site


# ---------------------------------------------------------------------------
# Item 2: the python probe runs no site hooks and has a deadline
# ---------------------------------------------------------------------------

def other_python(name):
    """An installed interpreter other than the running one (on PATH or in pyenv), or None."""
    candidates = [shutil.which(name)] + sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/%s*/bin/%s" % (name[6:], name))))
    for found in candidates:
        if not found:
            continue
        try:
            subprocess.run([found, "-c", "pass"], check=True, timeout=30, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            continue
        return found
    return None


# Before 3.11, a venv's sys.prefix is set by site.py, which -S skips: pyvenv.cfg must be read by the probe.
@pytest.mark.parametrize("base", ["running", "python3.8", "python3.10"])
def test_probe_runs_no_pth_hook_and_still_finds_the_venv(tmp_path, base):
    base = sys.executable if base == "running" else other_python(base)
    if base is None:
        pytest.skip("that Python version is not installed here")
    root, python, site = make_venv(tmp_path / "venv", base)
    marker = tmp_path / "pwned"
    with open(os.path.join(site, "evil.pth"), "w") as handle:
        handle.write("import pathlib; pathlib.Path(%r).write_text('ran')\n" % str(marker))
    # the hook is live: a normal start of this interpreter runs it
    subprocess.run([python, "-c", "pass"], check=True, timeout=60)
    assert marker.exists()
    marker.unlink()

    located = environment.locate_environment(python=python)
    assert not marker.exists(), "the probe ran the environment's .pth hook"
    assert os.path.realpath(located.site_dirs[0]) == os.path.realpath(site)
    assert os.path.realpath(located.scripts_dir) == os.path.realpath(os.path.join(root, "bin"))
    assert os.path.realpath(located.root) == os.path.realpath(root)


def test_probe_of_a_venv_whose_layout_leaves_doubt_runs_no_pth_hook(tmp_path, monkeypatch):
    """The files of this venv leave doubt (a second lib/python* directory), so the interpreter is asked: still -I -S."""
    root, python, site = make_venv(tmp_path / "venv")
    os.makedirs(os.path.join(root, "lib", "python3.0", "site-packages"))
    marker = tmp_path / "pwned"
    with open(os.path.join(site, "evil.pth"), "w") as handle:
        handle.write("import pathlib; pathlib.Path(%r).write_text('ran')\n" % str(marker))
    subprocess.run([python, "-c", "pass"], check=True, timeout=60)
    assert marker.exists()
    marker.unlink()
    asked = []
    real = environment._default_run
    monkeypatch.setattr(environment, "_default_run", lambda argv, timeout=30: asked.append(argv) or real(argv, timeout))

    located = environment.locate_environment(python=python)
    assert len(asked) == 1, "the probe was not run"
    assert not marker.exists(), "the probe ran the environment's .pth hook"
    assert os.path.realpath(located.site_dirs[0]) == os.path.realpath(site)


def test_probe_of_a_sleeping_pth_does_not_hang(tmp_path):
    root, python, site = make_venv(tmp_path / "venv")
    with open(os.path.join(site, "slow.pth"), "w") as handle:
        handle.write("import time; time.sleep(30)\n")
    started = time.monotonic()
    located = environment.locate_environment(python=python, timeout=10)
    assert time.monotonic() - started < 10
    assert os.path.realpath(located.site_dirs[0]) == os.path.realpath(site)


def test_probe_of_a_hanging_interpreter_is_killed_at_the_deadline(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!%s -S\nimport time\ntime.sleep(60)\n" % sys.executable)
    fake.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(IntegrityError) as exc:
        environment.locate_environment(python=str(fake), timeout=1)
    assert time.monotonic() - started < 5
    message = str(exc.value)
    assert str(fake) in message and "within 1 seconds" in message and "python_timeout" in message


# ---------------------------------------------------------------------------
# Item 10a: site-packages reached through a symbolic link
# ---------------------------------------------------------------------------

@pytest.fixture
def linked_site(tmp_path):
    """The demo wheel installed, then site-packages moved away and linked back."""
    wheel = helpers.make_wheel(tmp_path)
    root = tmp_path / "venv"
    site = helpers.install_wheel(wheel, root)
    real = tmp_path / "store" / "site-packages"
    real.parent.mkdir()
    shutil.move(site, str(real))
    os.symlink(str(real), site)
    return str(root), site


@pytest.mark.parametrize("how", ["venv", "site_packages", "environment"])
def test_pristine_install_through_a_linked_site_packages_is_pristine(linked_site, how):
    root, site = linked_site
    if how == "venv":
        kw = {"venv": root}
    elif how == "site_packages":
        kw = {"site_packages": site}
    else:
        kw = {"environment": environment.Environment([site], os.path.join(root, "bin"), root, "test")}
    result = integrity.verify(dist_name="demo", uv_cache_dirs=[], **kw)
    assert result["counts"]["outside"] == 0, result["files"]["outside"]
    assert result["pristine"] is True
    assert result["counts"]["ok"] == len(helpers.DEMO_FILES) + 5


def test_edited_script_through_a_linked_site_packages_is_still_caught(linked_site):
    root, site = linked_site
    helpers.edit_in_place(os.path.join(root, "bin", "demo-cli"), b"print(VERSION)", b"print(VERSIOM)")
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    assert [f["path"] for f in result["files"]["modified"]] == ["../../../bin/demo-cli"]
    assert result["counts"]["outside"] == 0 and result["pristine"] is False


# ---------------------------------------------------------------------------
# Hostile RECORD files
# ---------------------------------------------------------------------------

@pytest.fixture
def demo(tmp_path):
    wheel = helpers.make_wheel(tmp_path)
    root = tmp_path / "venv"
    site = helpers.install_wheel(wheel, root)
    return str(root), site, os.path.join(site, "demo-1.0.dist-info", "RECORD")


def append_record(record, data):
    with open(record, "ab") as handle:
        handle.write(data)


def test_record_with_non_utf8_paths_and_odd_sizes_gives_a_valid_utf8_result(demo):
    root, site, record = demo
    with open(os.path.join(site, "demo", b"\xff-extra.py".decode("utf-8", "surrogateescape")), "wb") as handle:
        handle.write(b"x = 1\n")
    append_record(record, b"demo/\xfe-gone.py,,12\ndemo/sizes.py,,\xc2\xb2\n\x00nul,,1\n")
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    text = json.dumps(result, ensure_ascii=False).encode("utf-8").decode("utf-8")
    assert "demo/\\xfe-gone.py" in [f["path"] for f in result["files"]["missing"]]
    assert "demo/\\xff-extra.py" in [f["path"] for f in result["files"]["unowned"]]
    assert "\\udc" not in text.encode("unicode_escape").decode("ascii")
    reasons = dict((m["path"], m["reason"]) for m in result["files"]["malformed"])
    assert "is not a non-negative integer" in reasons["demo/sizes.py"]
    assert result["pristine"] is False and result["verifiable"] is True


def test_record_larger_than_the_limit_cannot_be_verified(demo, monkeypatch):
    root, site, record_path = demo
    monkeypatch.setattr(record, "RECORD_LIMIT", os.path.getsize(record_path) - 1)
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    assert result["verifiable"] is False and result["pristine"] is False
    assert "is larger than %d bytes" % (os.path.getsize(record_path) - 1) in result["reason"]
    assert record_path in result["reason"]


# ---------------------------------------------------------------------------
# Odd trees: deep, long paths, unreadable directories, a deadline
# ---------------------------------------------------------------------------

def test_record_path_with_thousands_of_components_is_no_crash(demo):
    root, site, record = demo
    append_record(record, ("demo/" + "d/" * 3000 + "f.py,,3\n").encode())
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    assert [f["path"] for f in result["files"]["missing"]] == ["demo/" + "d/" * 3000 + "f.py"]
    assert result["pristine"] is False and result["counts"]["ok"] == len(helpers.DEMO_FILES) + 5


def test_deep_unowned_tree_is_reported_at_the_depth_bound_not_walked(demo):
    root, site, record = demo
    deep = os.path.join(site, "demo")
    for dummy in range(filecheck.WALK_MAX_DEPTH + 30):
        deep = os.path.join(deep, "d")
    os.makedirs(deep)
    with open(os.path.join(deep, "hidden.py"), "w") as handle:
        handle.write("import torch\ntorch.save(1, '/tmp/x')\n")
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    unowned = result["files"]["unowned"]
    assert len(unowned) == 1 and unowned[0]["path"] == "demo" + "/d" * filecheck.WALK_MAX_DEPTH + "/"
    assert "nested more than %d levels deep" % filecheck.WALK_MAX_DEPTH in unowned[0]["reason"]
    assert result["pristine"] is False


def test_too_many_entries_is_a_clear_error(demo, monkeypatch):
    root, site, record = demo
    extra = os.path.join(site, "demo", "spam")
    os.makedirs(extra)
    for number in range(40):
        open(os.path.join(extra, "f%d" % number), "w").close()
    monkeypatch.setattr(filecheck, "WALK_MAX_ENTRIES", 30)
    with pytest.raises(IntegrityError, match="More than 30 entries below .*site-packages"):
        integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])


def test_directory_that_cannot_be_listed_is_unreadable(demo, monkeypatch):
    root, site, record = demo
    blocked = os.path.join(os.path.realpath(site), "demo", "sub")
    real_scandir = os.scandir

    def scandir(path="."):
        if path == blocked:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)
    monkeypatch.setattr(integrity.os, "scandir", scandir)
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    assert result["files"]["unreadable"] == [{"path": "demo/sub/", "reason": "directory cannot be listed: Permission denied; "
                                              "files in it were not checked for unowned ones"}]
    assert result["pristine"] is False


def test_deadline_stops_the_check_and_says_how_far_it_got(demo):
    root, site, record = demo
    with pytest.raises(IntegrityError) as exc:
        integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[], timeout=1e-9)
    message = str(exc.value)
    assert "did not finish within 1e-09 seconds (timeout)" in message
    assert "Nothing was changed" in message and "while " in message


def test_large_changed_python_file_gets_a_not_scanned_finding(demo):
    root, site, record_path = demo
    with open(os.path.join(site, "demo", "big.py"), "w") as handle:
        handle.write("x = 1\n" * (record.TEXT_LIMIT // 6 + 10))
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    kinds = [(f["path"], f["kind"]) for f in result["findings"]]
    assert ("demo/big.py", "not_scanned") in kinds


def test_deadline_stops_hashing_a_huge_file_midway(demo):
    root, site, record = demo
    huge = os.path.join(site, "demo", "huge.bin")
    size = 16 << 30
    with open(huge, "wb") as handle:
        handle.truncate(size)           # sparse: 16 GiB of zeros, minutes to hash
    append_record(record, ("demo/huge.bin,sha256=%s,%d\n" % ("A" * 43, size)).encode())
    started = time.monotonic()
    with pytest.raises(IntegrityError) as exc:
        integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[], timeout=0.5, workers=1)
    assert time.monotonic() - started < 4
    assert "did not finish within 0.5 seconds (timeout) and was stopped while hashing the files RECORD lists (" in str(exc.value)


def test_diff_of_a_file_of_repeated_lines_is_quick(tmp_path):
    # An exact line match of many repeated lines is cubic: 1,000 lines took 10 s, 1,500 half a minute.
    lines = 1500
    files = dict(helpers.DEMO_FILES)
    files["demo/rep.py"] = b"x = 1\n" * lines
    wheel = helpers.make_wheel(tmp_path, files=files)
    root = tmp_path / "venv"
    site = helpers.install_wheel(wheel, root)
    with open(os.path.join(site, "demo", "rep.py"), "wb") as handle:
        handle.write(b"".join(b"x = 1\n" if k % 2 else b"y = 2\n" for k in range(lines)))
    started = time.monotonic()
    result = integrity.verify(venv=str(root), dist_name="demo", uv_cache_dirs=[], wheel=wheel, diff_max_bytes=4096)
    assert time.monotonic() - started < 5
    assert [f["path"] for f in result["files"]["modified"]] == ["demo/rep.py"]
    diff = result["diffs"][0]
    assert diff["path"] == "demo/rep.py" and diff["truncated"] is True and "@@ -1,1500 +1,1500 @@" in diff["diff"]


def test_large_pth_of_another_distribution_is_hashed_whole(demo, tmp_path):
    root, site, record = demo
    big = b"".join(b"# padding line %07d\n" % k for k in range(80000))     # 1.8 MiB: above the old 1 MiB read
    other = helpers.make_wheel(tmp_path, files={"otherpkg/__init__.py": b""}, name="otherpkg", version="2.0",
                               scripts={}, pth={"otherpkg.pth": big})
    helpers.install_wheel(other, root)
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    assert result["files"]["unowned"] == [] and result["pristine"] is True
    with open(os.path.join(site, "otherpkg.pth"), "ab") as handle:
        handle.write(b"import dbg\n")
    result = integrity.verify(venv=root, dist_name="demo", uv_cache_dirs=[])
    assert [(f["path"], f["owner"]) for f in result["files"]["unowned"]] == [("otherpkg.pth", "otherpkg-2.0.dist-info")]
