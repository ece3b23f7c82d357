# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""drift.wheel_diffs and wheeldiff.diff_modified: which changed files are diffed against the wheel, and the bounds.

The wheels and installs are the integrity tests' own (a small wheel written in
the test, installed as pip or uv would); verify() gives the changed files, as
it does for drift_info.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import zipfile

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import drift, safetext

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import wheeldiff
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import verify

from helpers import load_source

helpers = load_source("gpufleet_integrity_helpers_diffs", "tests", "unit", "plugins", "module_utils", "test_integrity.py")

DEBUG_BLOCK = (b"    # --- debug (nomla) ---\n"
               b"    import torch as _t\n"
               b"    _t.save(x, '/tmp/nomla_debug_tp0.pt')\n"
               b"    # --- end debug ---\n")


def many_files(count=6):
    files = dict(helpers.DEMO_FILES)
    for i in range(count):
        files["demo/layer%02d.py" % i] = b"".join(b"def f%d_%d(x):\n    return x + %d\n\n\n" % (i, n, n) for n in range(40))
    return files


@pytest.fixture
def host(tmp_path):
    """A wheelhouse (two directories, the wheel in the second) and a venv installed from it."""
    class Host:
        pass
    h = Host()
    h.empty = tmp_path / "mirror-empty"
    h.empty.mkdir()
    h.wheelhouse = tmp_path / "wheelhouse"
    h.wheelhouse.mkdir()
    h.wheel = helpers.make_wheel(h.wheelhouse, files=many_files(), name="vllm", version="0.33.0")
    h.site = helpers.install_wheel(h.wheel, tmp_path / "venv")
    h.root = str(tmp_path / "venv")
    return h


def add_block(site, rel, after=b"    return x\n", block=DEBUG_BLOCK):
    path = os.path.join(site, *rel.split("/"))
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data.replace(after, after + block, 1))


def checked(h, max_list=10):
    return verify(venv=h.root, dist_name="vllm", uv_cache_dirs=[], max_list=max_list)


def test_modified_file_is_diffed_against_the_wheel_of_its_version_showing_the_added_block(host):
    add_block(host.site, "demo/core.py")
    integrity = checked(host)
    result = drift.wheel_diffs(integrity, "vllm", wheel_dirs=[str(host.empty), str(host.wheelhouse)])
    assert result["wheel"] == host.wheel and result["note"] is None
    assert [f["path"] for f in result["files"]] == ["demo/core.py"]
    text = result["files"][0]["diff"]
    assert text.startswith("--- wheel/demo/core.py\n+++ installed/demo/core.py\n@@ ")
    assert "+    _t.save(x, '/tmp/nomla_debug_tp0.pt')\n" in text
    assert "-" + "    return x" not in text  # the line kept is context, not removed
    assert result["files"][0]["class"] == "size_differs" and result["not_diffed"] == 0
    assert result["bytes"] == len(text.encode("utf-8"))


def test_pristine_or_only_new_files_give_no_diffs_and_no_note(host):
    assert drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)]) == drift.no_diffs()
    with open(os.path.join(host.site, "demo", "extra.py"), "w") as handle:
        handle.write("import torch\n")
    integrity = checked(host)
    assert integrity["counts"]["unowned"] == 1
    assert drift.wheel_diffs(integrity, "vllm", wheel_dirs=[str(host.wheelhouse)])["files"] == []


def test_without_wheel_dirs_the_note_says_how_to_get_diffs(host):
    add_block(host.site, "demo/core.py")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[])
    assert result["files"] == [] and result["not_diffed"] == 1
    assert result["note"] == "no diffs: no directory of wheels on the host was given (wheel_dirs)"


def test_no_wheel_of_the_installed_version_names_each_directory(host, tmp_path):
    add_block(host.site, "demo/core.py")
    other = tmp_path / "other"
    other.mkdir()
    helpers.make_wheel(other, files=many_files(), name="vllm", version="0.32.1")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(other), str(tmp_path / "gone")])
    assert result["wheel"] is None and result["files"] == [] and result["not_diffed"] == 1
    assert result["note"] == "no wheel of vllm 0.33.0 in %s, %s (not a directory)" % (other, tmp_path / "gone")


def test_a_wheel_of_another_build_with_the_same_version_is_not_diffed(host, tmp_path):
    add_block(host.site, "demo/core.py")
    other = tmp_path / "other-build"
    other.mkdir()
    files = many_files()
    files["demo/core.py"] = files["demo/core.py"].replace(b"upstream note", b"upstream NOTE")  # same size
    helpers.make_wheel(other, files=files, name="vllm", version="0.33.0")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(other)])
    assert result["files"][0]["diff"] == ""
    assert "not the one RECORD names (another build of the same version?)" in result["files"][0]["note"]


def test_same_size_edit_is_checked_by_hash_and_diffed(host):
    helpers.edit_in_place(os.path.join(host.site, "demo", "core.py"), b"return x", b"return 0")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)])
    assert result["files"][0]["class"] == "modified"
    assert "-    return x\n+    return 0\n" in result["files"][0]["diff"]


def test_number_of_files_diffed_is_bounded_and_the_rest_counted(host):
    for i in range(6):
        add_block(host.site, "demo/layer%02d.py" % i, after=b"    return x + 3\n")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)], max_files=4)
    assert [f["path"] for f in result["files"]] == ["demo/layer%02d.py" % i for i in range(4)]
    assert result["not_diffed"] == 2
    # verify() lists at most max_list per class: the files it did not list are counted too
    result = drift.wheel_diffs(checked(host, max_list=3), "vllm", wheel_dirs=[str(host.wheelhouse)], max_files=10)
    assert len(result["files"]) == 3 and result["not_diffed"] == 3


def test_one_diff_is_cut_at_a_line_end_and_says_so(host):
    big = b"".join(b"    print('debug line %04d')\n" % n for n in range(400))
    add_block(host.site, "demo/core.py", block=big)
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)], max_bytes=2048)
    entry = result["files"][0]
    assert entry["truncated"] is True
    head, dummy, tail = entry["diff"].rpartition("... diff truncated at 2048 bytes (")
    assert head.endswith("\n") and len(head.encode()) <= 2048 and tail.endswith(" in all)\n")


def test_total_bytes_returned_are_bounded_and_the_rest_listed_with_a_note(host):
    big = b"".join(b"    print('debug line %04d')\n" % n for n in range(60))
    for i in range(5):
        add_block(host.site, "demo/layer%02d.py" % i, after=b"    return x + 3\n", block=big)
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)], max_total=5000)
    sizes = [len(f["diff"].encode()) for f in result["files"]]
    assert 0 < result["bytes"] == sum(sizes) <= 5000
    assert len(result["files"]) == 5 and sizes[-1] == 0
    assert "reached the bound of 5000 bytes (diff_max_total)" in result["files"][-1]["note"]


def test_terminal_escapes_and_bytes_not_utf8_are_shown_escaped(host):
    add_block(host.site, "demo/core.py", block=b"    x = '\x1b[2J\x1b]0;owned\x07'  # \xff\xfe \r\n    y = '\xe2\x80\xae'\n")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)])
    text = result["files"][0]["diff"]
    assert "+    x = '\\x1b[2J\\x1b]0;owned\\x07'  # \\xff\\xfe \\x0d\n" in text
    assert "+    y = '\\u202e'\n" in text
    assert safetext.control_character(text.replace("\n", "").replace("\t", "")) is None
    text.encode("utf-8")  # no surrogates left


def test_binary_file_gets_a_note_not_a_diff(host):
    path = os.path.join(host.site, "demo", "weights.bin")
    helpers.edit_in_place(path, open(path, "rb").read(16), b"\x00" * 16)
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)])
    entry = [f for f in result["files"] if f["path"] == "demo/weights.bin"][0]
    assert entry["diff"] == "" and entry["note"].startswith("binary file")


def test_hostile_paths_are_not_read_outside_site_packages(host, tmp_path):
    outside = tmp_path / "secret.py"
    outside.write_text("TOKEN = 1\n")
    items = [{"path": "../../../secret.py", "class": "modified"}, {"path": str(outside), "class": "modified"},
             {"path": "demo/\x1b[31mx\n.py", "class": "modified"}]
    result = wheeldiff.diff_modified([str(host.wheelhouse)], "vllm", "0.33.0", host.site, items)
    assert [f["diff"] for f in result["files"]] == ["", "", ""]
    assert result["files"][0]["note"] == result["files"][1]["note"] == "not a path inside site-packages; no diff"
    assert result["files"][2]["note"].startswith("not in the wheel")


def test_deadline_stops_before_the_next_file_and_says_so(host):
    for i in range(3):
        add_block(host.site, "demo/layer%02d.py" % i, after=b"    return x + 3\n")
    integrity = checked(host)
    now = [0.0]
    deadline = Deadline(10, clock=lambda: now[0])
    now[0] = 11.0
    result = drift.wheel_diffs(integrity, "vllm", wheel_dirs=[str(host.wheelhouse)], deadline=deadline)
    assert result["files"] == [] and result["not_diffed"] == 3
    assert result["note"] == "the time limit of 10 s (timeout) passed before the diffs against the wheel were made"


def test_printable_block_keeps_lines_and_tabs_and_escapes_the_rest():
    text = u"a\tb\nc\x1b[31md\x00\x7f\x85\u2028\u202e" + b"\xff".decode("utf-8", "surrogateescape")
    assert safetext.printable_block(text) == "a\tb\nc\\x1b[31md\\x00\\x7f\\x85\\u2028\\u202e\\xff"
    assert safetext.printable_block(b"ok\xc3\n") == "ok\\xc3\n"


def other_build(tmp_path, directory, edit, name=None):
    """A wheel of vllm 0.33.0 of another build (the file EDIT changed, same size) in DIRECTORY, named NAME."""
    staging = tmp_path / ("staging-%d" % len(os.listdir(str(tmp_path))))
    staging.mkdir()
    files = many_files()
    files[edit] = files[edit].replace(b"return x", b"return 0")
    made = helpers.make_wheel(staging, files=files, name="vllm", version="0.33.0")
    target = os.path.join(str(directory), name or os.path.basename(made))
    os.rename(made, target)
    return target


def test_each_file_is_checked_against_the_installed_record_not_only_the_first(host, tmp_path):
    # the wheel matches RECORD for layer00 but is another build's for layer01: layer01 must not be diffed against it
    add_block(host.site, "demo/layer00.py", after=b"    return x + 3\n")
    add_block(host.site, "demo/layer01.py", after=b"    return x + 3\n")
    other = tmp_path / "other-build"
    other.mkdir()
    other_build(tmp_path, other, "demo/layer01.py")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(other)])
    files = dict((f["path"], f) for f in result["files"])
    assert "+    # --- debug (nomla) ---\n" in files["demo/layer00.py"]["diff"]
    assert files["demo/layer01.py"]["diff"] == ""
    assert "not the one RECORD names (another build of the same version?)" in files["demo/layer01.py"]["note"]


def test_a_file_named_like_a_later_wheel_does_not_win_over_the_build_installed(host, tmp_path):
    add_block(host.site, "demo/core.py")
    planted = other_build(tmp_path, host.wheelhouse, "demo/core.py", name="vllm-0.33.0-py3-none-zzz.whl")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(host.wheelhouse)])
    assert result["wheel"] == host.wheel != planted and result["note"] is None
    assert "+    _t.save(x, '/tmp/nomla_debug_tp0.pt')\n" in result["files"][0]["diff"]
    # the check of the installed files picks the same wheel
    record = wheeldiff.installed_record(checked(host)["dist_info"])
    assert wheeldiff.find_wheel(str(host.wheelhouse), "vllm", "0.33.0", record) == host.wheel


def test_several_wheels_of_a_version_and_none_the_build_installed_are_refused_with_a_note(host, tmp_path):
    add_block(host.site, "demo/core.py")
    other = tmp_path / "two-builds"
    other.mkdir()
    other_build(tmp_path, other, "demo/core.py")
    other_build(tmp_path, other, "demo/layer00.py", name="vllm-0.33.0-py3-none-zzz.whl")
    result = drift.wheel_diffs(checked(host), "vllm", wheel_dirs=[str(other)])
    assert result["wheel"] is None and result["files"] == []
    assert result["note"] == ("no wheel of vllm 0.33.0 in %s (2 wheels of it, none the build installed: "
                              "vllm-0.33.0-py3-none-any.whl, vllm-0.33.0-py3-none-zzz.whl)" % other)
    # without an installed RECORD to tell them apart: no guess by name
    with pytest.raises(wheeldiff.IntegrityError, match="no installed RECORD to tell which build is installed"):
        wheeldiff.find_wheel(str(other), "vllm", "0.33.0")


def test_a_dot_dot_part_anywhere_keeps_the_diff_inside_site_packages(tmp_path):
    # a wheel (from a mirror) with a member that climbs out: the installed side must not be read outside
    site = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    (site / "demo").mkdir(parents=True)
    (tmp_path / "secret.py").write_text("TOKEN = 'hunter2'\n")
    climb = "demo/" + "../" * 5 + "secret.py"
    assert os.path.isfile(os.path.join(str(site), *climb.split("/")))
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    with zipfile.ZipFile(str(wheelhouse / "vllm-0.33.0-py3-none-any.whl"), "w") as zf:
        for member in (climb, "demo/./x.py", "demo//y.py"):
            zf.writestr(member, "TOKEN = None\n")
    items = [{"path": p, "class": "modified"} for p in (climb, "demo/./x.py", "demo//y.py", "demo/..")]
    result = wheeldiff.diff_modified([str(wheelhouse)], "vllm", "0.33.0", str(site), items)
    assert [f["diff"] for f in result["files"]] == ["", "", "", ""]
    assert [f["note"] for f in result["files"]] == ["not a path inside site-packages; no diff"] * 4
    assert not [p for p in ("a.py", "a/b.py", "a/.b/c.py", "a..b/c") if not wheeldiff.inside(p)]
