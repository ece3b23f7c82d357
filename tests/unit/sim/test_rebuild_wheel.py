# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The test world's second build (tests/sim/rebuild_wheel.py), on a tiny wheel made here.

The re-versioned wheel must be a real wheel: uv installs it, and
gpufleet.vllm.package_integrity_info finds the installed copy pristine.
"""

from __future__ import absolute_import, division, print_function

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.modules import package_integrity_info

rebuild = load_source("gpufleet_rebuild_wheel", "tests", "sim", "rebuild_wheel.py")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
METADATA = (b"Metadata-Version: 2.4\nName: tiny\nVersion: 1.0\nRequires-Dist: lark==1.2.2\n"
            b"Requires-Dist: numpy\nRequires-Dist: rich; extra == \"cli\"\n\nTiny: Version: 9 stays.\n")
WHEEL = b"Wheel-Version: 1.0\nGenerator: gpufleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
FILES = {
    "tiny/__init__.py": b"VERSION = '1.0'\n",
    "tiny/big.py": b"# padding\n" + b"x = 1\n" * 20000,
    "tiny-1.0.data/scripts/tiny-cli": b"#!python\nprint('tiny')\n",
    "tiny-1.0.dist-info/WHEEL": WHEEL,
    "tiny-1.0.dist-info/top_level.txt": b"tiny\n",
    "tiny-1.0.dist-info/METADATA": METADATA,
}


def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_tiny(directory, files=None):
    files = dict(FILES if files is None else files)
    record = "".join("%s,%s,%d\n" % (name, _hash(data), len(data)) for name, data in FILES.items())
    record += "tiny-1.0.dist-info/RECORD,,\n"
    path = os.path.join(str(directory), "tiny-1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("tiny-1.0.dist-info/RECORD", record)
    return path


def run_cli(capsys, *argv):
    code = rebuild.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def build(capsys, source, out):
    code, stdout, err = run_cli(capsys, source, out, "--version", "1.1.dev3", "--commit", COMMIT,
                                "--pin", "lark==1.3.1", "--add", "gguf==0.19.0")
    assert code == 0, err
    path, commit = stdout.strip().split("\t")
    return path, commit


def test_rebuilt_wheel_is_reversioned_with_one_pin_changed_one_added_and_a_true_record(tmp_path, capsys):
    source = make_tiny(tmp_path)
    path, commit = build(capsys, source, tmp_path / "out")
    assert commit == COMMIT
    assert os.path.basename(path) == "tiny-1.1.dev3+g0123456789ab-py3-none-any.whl"
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        dist = "tiny-1.1.dev3+g0123456789ab.dist-info"
        assert "tiny-1.1.dev3+g0123456789ab.data/scripts/tiny-cli" in names
        assert not [n for n in names if n.startswith("tiny-1.0.")]
        assert names[-2:] == [dist + "/METADATA", dist + "/RECORD"]
        meta = zf.read(dist + "/METADATA").decode()
        assert zf.read(dist + "/WHEEL") == WHEEL
        assert zf.read("tiny/big.py") == FILES["tiny/big.py"]
        rows = list(csv.reader(io.StringIO(zf.read(dist + "/RECORD").decode())))
        for name, digest, size in rows:
            if name == dist + "/RECORD":
                assert digest == size == ""
                continue
            data = zf.read(name)
            assert (digest, size) == (_hash(data), str(len(data))), name
        assert sorted(r[0] for r in rows) == sorted(names)
    head, body = meta.split("\n\n", 1)
    assert head.splitlines() == [
        "Metadata-Version: 2.4", "Name: tiny", "Version: 1.1.dev3+g0123456789ab",
        "Requires-Dist: lark==1.3.1", "Requires-Dist: numpy", "Requires-Dist: gguf==0.19.0",
        'Requires-Dist: rich; extra == "cli"']
    assert body == "Tiny: Version: 9 stays.\n"


def test_same_input_same_bytes_and_the_stamp_skips_a_second_build(tmp_path, capsys):
    source = make_tiny(tmp_path)
    first, dummy = build(capsys, source, tmp_path / "a")
    second, dummy = build(capsys, source, tmp_path / "b")
    with open(first, "rb") as a, open(second, "rb") as b:
        assert a.read() == b.read()
    inode = os.stat(first).st_ino
    again, dummy = build(capsys, source, tmp_path / "a")
    assert again == first and os.stat(again).st_ino == inode      # reused, not rewritten
    # an output edited on disk since (same size) is made again
    with open(first, "r+b") as handle:
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 1]))
    again, dummy = build(capsys, source, tmp_path / "a")
    assert os.stat(again).st_ino != inode
    with open(again, "rb") as a, open(second, "rb") as b:
        assert a.read() == b.read()


def test_default_commit_is_derived_from_the_source(tmp_path, capsys):
    source = make_tiny(tmp_path)
    code, out1, err = run_cli(capsys, source, tmp_path / "a", "--version", "1.1.dev3", "--pin", "lark==1.3.1")
    code2, out2, err = run_cli(capsys, source, tmp_path / "b", "--version", "1.1.dev3", "--pin", "lark==1.3.1")
    assert code == code2 == 0
    path, commit = out1.strip().split("\t")
    assert out2.strip().split("\t")[1] == commit and len(commit) == 40
    assert os.path.basename(path) == "tiny-1.1.dev3+g%s-py3-none-any.whl" % commit[:12]


def test_uv_installs_it_and_package_integrity_finds_it_pristine(tmp_path, capsys):
    uv = shutil.which("uv") or os.path.join(os.path.dirname(sys.executable), "uv")
    if not os.path.exists(uv):
        pytest.skip("no uv (requirements/control.txt installs it)")
    path, dummy = build(capsys, make_tiny(tmp_path), tmp_path / "out")
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--offline", "--no-cache", "--no-deps",
                    "-p", str(venv / "bin" / "python"), path], check=True)
    run = module_runner(package_integrity_info.main, capsys)
    code, result = run({"venv": str(venv), "name": "tiny", "wheel": path, "uv_cache_dir": []})
    assert code == 0, result["msg"]
    assert result["pristine"] is True and result["version"] == "1.1.dev3+g0123456789ab"
    assert "is pristine" in result["msg"]


def test_damaged_source_is_refused_and_leaves_no_file(tmp_path, capsys):
    files = dict(FILES, **{"tiny/__init__.py": b"VERSION = 'evil'\n"})
    source = make_tiny(tmp_path, files)
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, source, out, "--pin", "lark==1.3.1")
    assert code == 1 and stdout == ""
    assert "tiny/__init__.py does not match the source wheel's RECORD" in err
    assert os.listdir(out) == []


@pytest.mark.parametrize("argv, message", [
    (["--pin", "torch==2.0"], "--pin torch: the source wheel has no unconditional requirement on torch"),
    (["--pin", "rich==14"], "--pin rich: the source wheel has no unconditional requirement on rich"),
    (["--add", "numpy==2.0"], "--add numpy: the source wheel already requires numpy (use --pin)"),
    (["--pin", "lark>=1"], "--pin 'lark>=1': expected NAME==VERSION"),
    (["--version", "1.1-dev"], "--version '1.1-dev+g"),
    (["--commit", "XYZ"], "--commit 'XYZ': expected 40 lowercase hex digits"),
])
def test_bad_options_are_clear_errors(tmp_path, capsys, argv, message):
    code, stdout, err = run_cli(capsys, make_tiny(tmp_path), tmp_path / "out", *argv)
    assert code == 1 and stdout == ""
    assert message in err
