# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""integrity: RECORD verdicts on wheels built here and on the real vLLM wheel.

The small-wheel tests build a wheel in the test, install it the way an
installer does (files, INSTALLER, RECORD with sizes and hashes, a script in
bin/ recorded as ../../../bin/NAME) and tamper with it.

The tests marked ``realwheel`` install the real vLLM wheel from the
wheelhouse (``$GPUFLEET_WHEELHOUSE``, default ``~/.cache/gpufleet-vllm/
wheelhouse``) with uv, once per session, hard-linked from a private uv cache
as uv does on a real host, and tamper with hard-linked clones of it the way
the operators did (``tests/sim/dirty/make_dirty_vllm.py``: edits in place).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import builtins
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import environment, filecheck

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import check as integrity

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import record
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import verify
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PYDIR = "python%d.%d" % sys.version_info[:2]


# ---------------------------------------------------------------------------
# Building and installing small wheels
# ---------------------------------------------------------------------------

def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def blob(size, seed=1):
    """Deterministic binary data of ``size`` bytes."""
    out = io.BytesIO()
    counter = 0
    while out.tell() < size:
        out.write(hashlib.sha256(b"%d-%d" % (seed, counter)).digest())
        counter += 1
    return out.getvalue()[:size]


DEMO_FILES = {
    "demo/__init__.py": b"VERSION = '1.0'\n",
    # A pristine file that mentions strings from the grep lists: never a failure.
    "demo/core.py": (b"import torch\n\n\n"
                     b"def kv_b_proj(x):\n"
                     b"    # upstream note: do not call torch.save here\n"
                     b"    return x\n"),
    "demo/sub/__init__.py": b"",
    "demo/sub/model.py": b"".join(b"LINE_%03d = %d\n" % (i, i) for i in range(120)),
    "demo/_native.so": blob(300 * 1024, seed=2),      # above the small-file limit
    "demo/weights.bin": blob(3 * 1024 * 1024 + 17, seed=3),  # several read chunks
}
SCRIPT = b"#!python\nimport sys\nfrom demo import VERSION\nprint(VERSION)\n"


def make_wheel(directory, files=None, name="demo", version="1.0", scripts=None, pth=None):
    """Write ``{name}-{version}-py3-none-any.whl`` into ``directory``."""
    files = dict(DEMO_FILES if files is None else files)
    scripts = {"demo-cli": SCRIPT} if scripts is None else scripts
    dist_info = "%s-%s.dist-info" % (name.replace("-", "_"), version)
    data_dir = "%s-%s.data" % (name.replace("-", "_"), version)
    members = dict(files)
    if pth:
        members.update(pth)
    for script, data in scripts.items():
        members["%s/scripts/%s" % (data_dir, script)] = data
    members[dist_info + "/METADATA"] = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\nA test distribution.\n"
                                        % (name, version)).encode()
    members[dist_info + "/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: gpufleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    tops = sorted(set(p.split("/")[0] for p in files if "/" in p))
    members[dist_info + "/top_level.txt"] = ("\n".join(tops) + "\n").encode()
    record = "".join("%s,%s,%d\n" % (p, record_hash(d), len(d)) for p, d in members.items())
    record += dist_info + "/RECORD,,\n"
    path = os.path.join(str(directory), "%s-%s-py3-none-any.whl" % (name.replace("-", "_"), version))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        zf.writestr(dist_info + "/RECORD", record)
    return path


def install_wheel(wheel, root, installer="gpufleet-test"):
    """Install ``wheel`` into the venv-like tree ``root`` like pip/uv would.

    Returns the site-packages directory.
    """
    site = os.path.join(str(root), "lib", PYDIR, "site-packages")
    bindir = os.path.join(str(root), "bin")
    os.makedirs(site, exist_ok=True)
    os.makedirs(bindir, exist_ok=True)
    cfg = os.path.join(str(root), "pyvenv.cfg")
    if not os.path.exists(cfg):
        with open(cfg, "w") as handle:
            handle.write("home = /usr/bin\ninclude-system-site-packages = false\n")
    rows = []
    dist_info = None
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            first, dummy, rest = member.partition("/")
            if first.endswith(".dist-info"):
                dist_info = first
                if rest == "RECORD":
                    continue
            data = zf.read(member)
            if first.endswith(".data") and rest.startswith("scripts/"):
                target = os.path.join(bindir, rest.split("/", 1)[1])
                data = data.replace(b"#!python", b"#!" + os.path.join(str(root), "bin", "python").encode(), 1)
                rel = "../../../bin/" + rest.split("/", 1)[1]
            else:
                target = os.path.join(site, *member.split("/"))
                rel = member
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(data)
            rows.append((rel, data))
    installer_data = (installer + "\n").encode()
    with open(os.path.join(site, dist_info, "INSTALLER"), "wb") as handle:
        handle.write(installer_data)
    rows.append((dist_info + "/INSTALLER", installer_data))
    with open(os.path.join(site, dist_info, "RECORD"), "w") as handle:
        for rel, data in rows:
            handle.write("%s,%s,%d\n" % (rel, record_hash(data), len(data)))
        handle.write("%s/RECORD,,\n" % dist_info)
    return site


@pytest.fixture
def env(tmp_path):
    """A venv-like tree with the demo wheel installed; returns a namespace."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    wheel = make_wheel(wheelhouse)
    root = tmp_path / "venv"
    site = install_wheel(wheel, root)

    class Env:
        pass
    e = Env()
    e.root = str(root)
    e.site = site
    e.wheel = wheel
    e.wheelhouse = str(wheelhouse)
    e.dist_info = os.path.join(site, "demo-1.0.dist-info")
    e.record = os.path.join(e.dist_info, "RECORD")
    e.files = len(DEMO_FILES) + 1 + 3 + 1  # package files, script, METADATA/WHEEL/top_level, INSTALLER
    return e


def run(e, **kw):
    kw.setdefault("uv_cache_dirs", [])
    kw.setdefault("dist_name", "demo")
    if "site_packages" not in kw and "python" not in kw and "environment" not in kw:
        kw.setdefault("venv", e.root)
    return verify(**kw)


def paths(result, cls):
    return [item["path"] for item in result["files"][cls]]


def edit_in_place(path, old, new):
    with open(path, "r+b") as handle:
        data = handle.read()
        assert old in data
        handle.seek(0)
        handle.write(data.replace(old, new, 1))
        handle.truncate()


def drift(result):
    return dict((c, n) for c, n in result["counts"].items() if n and c in integrity.DRIFT_CLASSES)


# ---------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------

def test_pristine_install_is_pristine(env):
    result = run(env)
    assert result["pristine"] is True and result["verifiable"] is True
    assert result["counts"]["ok"] == env.files
    assert drift(result) == {}
    assert result["version"] == "1.0" and result["installer"] == "gpufleet-test"
    assert result["site_packages"] == env.site
    assert result["environment"]["scripts_dir"] == os.path.join(env.root, "bin")
    assert result["findings"] == [] and result["diffs"] == []
    assert result["changed"] is False and result["elapsed"] >= 0
    assert "is pristine: %d files" % env.files in result["msg"]


_IMPORTS_PROBE = r"""
import json, sys
from ansible_collections.gpufleet.vllm.plugins.modules import package_integrity_info  # the module's own imports
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import verify
before = "ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.debugscan" in sys.modules
result = verify(venv=sys.argv[1], dist_name="demo", uv_cache_dirs=[])
after = "ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.debugscan" in sys.modules
print(json.dumps([before, after, result["pristine"], [f["kind"] for f in result["findings"]]]))
"""


def test_syntax_tree_scan_is_loaded_only_when_a_file_changed(env):
    """A clean run does not import (inside AnsiballZ: compile) debugscan; a run with a changed file does and explains it."""
    import json

    def probe():
        out = subprocess.run([sys.executable, "-c", _IMPORTS_PROBE, env.root], stdout=subprocess.PIPE, check=True,
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
                             timeout=120).stdout
        return json.loads(out.decode().strip().splitlines()[-1])

    assert probe() == [False, False, True, []]
    with open(os.path.join(env.site, "demo", "sub", "debug_hook.py"), "w") as handle:
        handle.write("import pickle as p\n\ndef hook(o):\n    p.dump(o, open('/tmp/o.pkl', 'wb'))\n")
    assert probe() == [False, True, False, ["object_dump"]]


def test_pristine_file_with_grep_strings_is_no_failure(env):
    # core.py holds "torch.save" and "kv_b_proj": patterns explain, never decide.
    result = run(env, patterns=["torch.save", "kv_b_proj"])
    assert result["pristine"] is True
    assert result["findings"] == [] and result["findings_total"] == 0


def test_same_size_edit_is_modified(env):
    path = os.path.join(env.site, "demo", "sub", "model.py")
    edit_in_place(path, b"LINE_007 = 7\n", b"LINE_007 = 8\n")
    result = run(env)
    assert result["pristine"] is False
    assert drift(result) == {"modified": 1}
    item = result["files"]["modified"][0]
    assert item["path"] == "demo/sub/model.py"
    assert item["expected_hash"] == record_hash(DEMO_FILES["demo/sub/model.py"])
    assert item["hash"] == record_hash(open(path, "rb").read()) != item["expected_hash"]
    assert result["offenders"] == [{"path": "demo/sub/model.py", "class": "modified"}]
    assert "not pristine: 1 modified" in result["msg"] and "demo/sub/model.py" in result["msg"]


def test_same_size_edit_deep_inside_a_large_file_is_modified(env):
    path = os.path.join(env.site, "demo", "weights.bin")
    with open(path, "r+b") as handle:
        handle.seek(3 * 1024 * 1024 + 5)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    result = run(env)
    assert paths(result, "modified") == ["demo/weights.bin"]
    assert result["counts"]["ok"] == env.files - 1


def test_appended_block_is_size_differs_and_not_hashed(env, monkeypatch):
    path = os.path.join(env.site, "demo", "core.py")
    with open(path, "ab") as handle:
        handle.write(b"\nimport torch as _t\n_t.save(1, '/tmp/x.pt')\n")
    hashed = []
    real = filecheck.HASHERS["sha256"]

    def counting(data=b""):
        hashed.append(len(data))
        return real(data)
    monkeypatch.setitem(filecheck.HASHERS, "sha256", counting)
    result = run(env)
    assert drift(result) == {"size_differs": 1}
    item = result["files"]["size_differs"][0]
    assert item == {"path": "demo/core.py", "size": os.path.getsize(path),
                    "expected_size": len(DEMO_FILES["demo/core.py"])}
    assert "hash" not in item
    # every other hashed file was hashed; the changed one (different size) never was
    assert os.path.getsize(path) not in hashed
    kinds = [(f["line"], f["kind"]) for f in result["findings"]]
    assert (9, "tensor_dump") in kinds and (9, "pattern") in kinds


def test_deleted_file_is_missing(env):
    os.unlink(os.path.join(env.site, "demo", "sub", "model.py"))
    result = run(env)
    assert drift(result) == {"missing": 1}
    assert result["files"]["missing"] == [{"path": "demo/sub/model.py",
                                           "expected_size": len(DEMO_FILES["demo/sub/model.py"])}]


def test_deleted_directory_reports_each_file_missing(env):
    shutil.rmtree(os.path.join(env.site, "demo", "sub"))
    result = run(env)
    assert sorted(paths(result, "missing")) == ["demo/sub/__init__.py", "demo/sub/model.py"]


def test_new_module_is_unowned_and_explained_pycache_ignored(env):
    with open(os.path.join(env.site, "demo", "sub", "debug_hook.py"), "w") as handle:
        handle.write("import pickle as p\n\ndef hook(o):\n    p.dump(o, open('/tmp/o.pkl', 'wb'))\n")
    os.makedirs(os.path.join(env.site, "demo", "__pycache__"))
    with open(os.path.join(env.site, "demo", "__pycache__", "core.cpython-311.pyc"), "wb") as handle:
        handle.write(b"\x00" * 16)
    with open(os.path.join(env.dist_info, "NOTES.txt"), "w") as handle:
        handle.write("added by hand\n")
    result = run(env)
    assert sorted(paths(result, "unowned")) == ["demo-1.0.dist-info/NOTES.txt", "demo/sub/debug_hook.py"]
    assert drift(result) == {"unowned": 2}
    dumps = [f for f in result["findings"] if f["kind"] == "object_dump"]
    assert [(f["path"], f["line"], f["what"], f["via"]) for f in dumps] == [
        ("demo/sub/debug_hook.py", 4, "pickle.dump", "p.dump")]


def test_unowned_symlink_is_reported_not_followed(env, tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("torch.save(1)\n")
    os.symlink(str(secret), os.path.join(env.site, "demo", "linked.py"))
    result = run(env)
    assert result["files"]["unowned"] == [{"path": "demo/linked.py", "reason": "symbolic link to %s" % secret}]
    assert result["findings"] == []


@pytest.mark.parametrize("name, content", [
    ("zz_inject.pth", "import os; os.environ.setdefault('NOMLA_SAVE', '1')\n"),
    ("sitecustomize.py", "import torch\ntorch.save = print\n"),
    ("usercustomize.py", "breakpoint()\n"),
])
def test_startup_hooks_owned_by_nobody_are_unowned(env, name, content):
    with open(os.path.join(env.site, name), "w") as handle:
        handle.write(content)
    result = run(env)
    assert result["pristine"] is False
    assert result["files"]["unowned"] == [{"path": name, "reason": "start-up hook owned by no installed distribution"}]
    assert result["findings"], "a start-up hook is always explained"
    if name.endswith(".pth"):
        assert [f["kind"] for f in result["findings"] if f["kind"] == "pth_exec"] == ["pth_exec"]
        assert any(f["kind"] == "pattern" and f["what"] == "NOMLA_SAVE" for f in result["findings"])


def test_startup_hook_symlink_is_reported_and_not_read(env, tmp_path, monkeypatch):
    target = tmp_path / "outside.pth"
    target.write_text("import os\n")
    os.symlink(str(target), os.path.join(env.site, "linked.pth"))
    opened = []
    real = os.open

    def spy(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(integrity.os, "open", spy)
    result = run(env)
    monkeypatch.undo()
    assert result["files"]["unowned"] == [{
        "path": "linked.pth", "reason": "start-up hook is a symbolic link to %s; not followed" % target}]
    assert str(target) not in opened and os.path.join(env.site, "linked.pth") not in opened
    assert result["findings"] == []


def test_virtualenv_pth_with_its_own_content_is_not_reported(env):
    with open(os.path.join(env.site, "_virtualenv.pth"), "w") as handle:
        handle.write("import _virtualenv\n")
    assert run(env)["pristine"] is True
    with open(os.path.join(env.site, "_virtualenv.pth"), "w") as handle:
        handle.write("import _virtualenv; import dbg\n")
    assert paths(run(env), "unowned") == ["_virtualenv.pth"]


def test_pth_of_another_distribution_is_owned_until_edited(env, tmp_path):
    other = make_wheel(tmp_path, files={"otherpkg/__init__.py": b""}, name="otherpkg", version="2.0",
                       scripts={}, pth={"otherpkg.pth": b"./otherpkg_extra\n"})
    install_wheel(other, env.root)
    result = run(env)
    assert result["pristine"] is True
    with open(os.path.join(env.site, "otherpkg.pth"), "a") as handle:
        handle.write("import dbg\n")
    result = run(env)
    assert result["files"]["unowned"] == [{
        "path": "otherpkg.pth", "owner": "otherpkg-2.0.dist-info",
        "reason": "start-up hook listed by otherpkg-2.0.dist-info, but its content no longer matches that RECORD"}]


@pytest.mark.parametrize("count", [3, 40])
def test_files_of_other_distributions_in_a_shared_directory_are_not_unowned(env, tmp_path, count):
    # count > 16 exercises the full ownership index, 3 the direct RECORD search
    files = dict(("demo/plugins/p%02d.py" % i, b"X = %d\n" % i) for i in range(count))
    other = make_wheel(tmp_path, files=files, name="demo-plugins", version="0.1", scripts={})
    install_wheel(other, env.root)
    with open(os.path.join(env.site, "demo", "plugins", "stray.py"), "w") as handle:
        handle.write("x = 1\n")
    result = run(env)
    assert paths(result, "unowned") == ["demo/plugins/stray.py"]


# ---------------------------------------------------------------------------
# Cannot verify
# ---------------------------------------------------------------------------

def test_install_without_record_cannot_be_verified(env):
    os.unlink(env.record)
    edit_in_place(os.path.join(env.site, "demo", "core.py"), b"return x", b"return 0")
    result = run(env)
    assert result["verifiable"] is False and result["pristine"] is False
    assert "has no RECORD file" in result["reason"]
    assert result["msg"].startswith("demo 1.0 in %s cannot be verified" % env.site)


def test_egg_info_install_cannot_be_verified(env):
    shutil.rmtree(env.dist_info)
    egg = os.path.join(env.site, "demo-1.0-py3.11.egg-info")
    os.makedirs(egg)
    with open(os.path.join(egg, "PKG-INFO"), "w") as handle:
        handle.write("Metadata-Version: 1.1\nName: demo\nVersion: 1.0\n\n")
    result = run(env)
    assert result["verifiable"] is False and result["pristine"] is False
    assert "installed without a RECORD (egg-info" in result["reason"]
    assert result["version"] == "1.0"


def test_editable_install_cannot_be_verified(env):
    with open(os.path.join(env.dist_info, "direct_url.json"), "w") as handle:
        handle.write('{"url": "file:///src/demo", "dir_info": {"editable": true}}')
    result = run(env)
    assert result["verifiable"] is False and result["pristine"] is False
    assert "editable install of file:///src/demo" in result["reason"]


def test_editable_pth_in_record_cannot_be_verified(env):
    with open(env.record, "a") as handle:
        handle.write("__editable__.demo-1.0.pth,%s,3\n" % record_hash(b"x\n\n"))
    assert "editable install (RECORD lists __editable__.demo-1.0.pth)" in run(env)["reason"]


def test_two_metadata_directories_cannot_be_verified(env):
    shutil.copytree(env.dist_info, os.path.join(env.site, "demo-0.9.dist-info"))
    result = run(env)
    assert result["verifiable"] is False
    assert "more than one metadata directory" in result["reason"]


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

def test_unknown_distribution_is_a_clear_error(env):
    with pytest.raises(IntegrityError) as exc:
        run(env, dist_name="flash-attn")
    assert str(exc.value) == (
        "The distribution 'flash-attn' is not installed in %s (no flash_attn-*.dist-info directory there). "
        "Check the name and the python, venv or site_packages option." % env.site)


def test_missing_or_non_directory_site_packages(tmp_path):
    with pytest.raises(IntegrityError, match="does not exist"):
        verify(site_packages=str(tmp_path / "nope"), uv_cache_dirs=[])
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(IntegrityError, match="is not a directory"):
        verify(site_packages=str(target), uv_cache_dirs=[])


def test_unreadable_site_packages(env, monkeypatch):
    real = os.listdir

    def denied(path="."):
        if os.fspath(path) == env.site:
            raise PermissionError(13, "Permission denied", path)
        return real(path)
    monkeypatch.setattr(integrity.os, "listdir", denied)
    with pytest.raises(IntegrityError) as exc:
        run(env, site_packages=env.site)
    assert "cannot be read (permission denied)" in str(exc.value) and env.site in str(exc.value)


def test_name_is_normalised(tmp_path):
    wheel = make_wheel(tmp_path, files={"my_pkg/__init__.py": b""}, name="My_Pkg", version="3.1", scripts={})
    install_wheel(wheel, tmp_path / "venv")
    for name in ("my-pkg", "My.Pkg", "MY_PKG"):
        result = verify(venv=str(tmp_path / "venv"), dist_name=name, uv_cache_dirs=[])
        assert result["pristine"] is True and result["version"] == "3.1"


def test_malformed_rows_are_reported_and_the_rest_verified(env):
    with open(env.record, "a") as handle:
        handle.write("demo/extra1.py,sha256=abc\n")                          # 2 fields
        handle.write("demo/extra2.py,sha256=!!notbase64!!,10\n")              # bad digest
        handle.write("demo/extra3.py,md5=1B2M2Y8AsgTpgAmY7PhCfg,0\n")         # weak algorithm
        handle.write("demo/extra4.py,%s,-5\n" % record_hash(b""))            # bad size
        handle.write("demo/extra5.py,sha256nohash,1\n")                      # no '='
    for i in range(1, 6):
        with open(os.path.join(env.site, "demo", "extra%d.py" % i), "w") as handle:
            handle.write("")
    result = run(env)
    assert drift(result) == {"malformed": 5}  # the files of malformed rows are not also "unowned"
    reasons = dict((m["path"], m["reason"]) for m in result["files"]["malformed"])
    assert reasons["demo/extra1.py"] == "expected 3 fields (path, hash, size), found 2"
    assert "not a valid urlsafe-base64 sha256 digest" in reasons["demo/extra2.py"]
    assert "'md5' is not accepted" in reasons["demo/extra3.py"]
    assert "is not a non-negative integer" in reasons["demo/extra4.py"]
    assert "not of the form algorithm=digest" in reasons["demo/extra5.py"]
    assert all(isinstance(m["line"], int) and m["line"] > env.files for m in result["files"]["malformed"])
    assert result["counts"]["ok"] == env.files


def test_record_with_nul_byte_and_duplicate_row(env):
    with open(env.record, "a") as handle:
        handle.write("demo/evil\x00.py,,\n")
        handle.write("demo/core.py,%s,%d\n" % (record_hash(DEMO_FILES["demo/core.py"]), len(DEMO_FILES["demo/core.py"])))
    result = run(env)
    reasons = sorted(m["reason"] for m in result["files"]["malformed"])
    assert len(reasons) == 2
    assert "listed more than once" in reasons
    assert any("NUL" in r or "invalid path" in r for r in reasons)
    assert result["counts"]["ok"] == env.files


def test_paths_escaping_the_environment_are_outside_and_never_opened(env, tmp_path, monkeypatch):
    canary = tmp_path / "canary.txt"
    canary.write_text("secret\n")
    canary2 = tmp_path / "canary2.txt"
    canary2.write_text("secret\n")
    rel = os.path.relpath(str(canary), env.site)
    with open(env.record, "a") as handle:
        handle.write("../../etc/passwd,%s,10\n" % record_hash(b"x"))
        handle.write("%s,%s,7\n" % (rel, record_hash(b"secret\n")))
        handle.write("%s,%s,7\n" % (canary2, record_hash(b"secret\n")))
    touched = []
    for name in ("open", "lstat", "stat", "readlink"):
        real = getattr(os, name)

        def spy(path, *args, _real=real, **kwargs):
            touched.append(os.fspath(path) if not isinstance(path, int) else "")
            return _real(path, *args, **kwargs)
        monkeypatch.setattr(integrity.os, name, spy)
    real_open = builtins.open

    def spy_open(path, *args, **kwargs):
        touched.append(os.fspath(path) if not isinstance(path, int) else "")
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", spy_open)
    result = run(env)
    monkeypatch.undo()
    assert sorted(paths(result, "outside")) == sorted(["../../etc/passwd", rel, str(canary2)])
    assert result["files"]["outside"][0]["resolved"] == os.path.normpath(os.path.join(env.site, "../../etc/passwd"))
    assert not [p for p in touched if "passwd" in p or "canary" in p]
    assert result["pristine"] is False and result["counts"]["ok"] == env.files


def test_scripts_in_bin_are_verified(env):
    script = os.path.join(env.root, "bin", "demo-cli")
    with open(script, "a") as handle:
        handle.write("import pdb; pdb.set_trace()\n")
    result = run(env)
    assert paths(result, "size_differs") == ["../../../bin/demo-cli"]
    assert [(f["kind"], f["what"]) for f in result["findings"] if f["kind"] == "debugger"] == [
        ("debugger", "pdb.set_trace")]


def test_scripts_dir_is_guessed_for_site_packages_option(env):
    result = run(env, site_packages=env.site)
    assert result["environment"]["scripts_dir"] == os.path.join(env.root, "bin")
    assert result["pristine"] is True and result["counts"]["ok"] == env.files


def test_file_replaced_by_symlink_is_modified_and_not_followed(env, tmp_path):
    target = tmp_path / "elsewhere.py"
    target.write_bytes(DEMO_FILES["demo/core.py"])  # even identical content is drift
    path = os.path.join(env.site, "demo", "core.py")
    os.unlink(path)
    os.symlink(str(target), path)
    result = run(env)
    assert result["files"]["modified"] == [{
        "path": "demo/core.py",
        "reason": "replaced by a symbolic link to %s (wheels install regular files)" % target}]


def test_directory_replaced_by_symlink_is_not_followed(env, tmp_path):
    moved = tmp_path / "moved-sub"
    shutil.move(os.path.join(env.site, "demo", "sub"), str(moved))
    os.symlink(str(moved), os.path.join(env.site, "demo", "sub"))
    result = run(env)
    reasons = dict((m["path"], m["reason"]) for m in result["files"]["modified"])
    assert sorted(reasons) == ["demo/sub/__init__.py", "demo/sub/model.py"]
    assert all("directory demo/sub is a symbolic link" in r for r in reasons.values())
    assert paths(result, "unowned") == ["demo/sub"] or paths(result, "unowned") == []


def test_non_regular_files_are_unreadable_without_blocking(env):
    core = os.path.join(env.site, "demo", "core.py")
    os.unlink(core)
    os.mkfifo(core)  # opening a FIFO for reading would block without O_NONBLOCK
    model = os.path.join(env.site, "demo", "sub", "model.py")
    os.unlink(model)
    os.mkdir(model)
    result = run(env)
    reasons = dict((m["path"], m["reason"]) for m in result["files"]["unreadable"])
    assert reasons == {"demo/core.py": "is a special file, not a regular file",
                       "demo/sub/model.py": "is a directory, not a regular file"}


def test_permission_denied_is_unreadable(env, monkeypatch):
    target = os.path.join(env.site, "demo", "weights.bin")
    real = os.open

    def deny(path, flags, *args, **kwargs):
        if os.fspath(path) == target:
            raise PermissionError(13, "Permission denied", path)
        return real(path, flags, *args, **kwargs)
    monkeypatch.setattr(integrity.os, "open", deny)
    result = run(env)
    assert result["files"]["unreadable"] == [{"path": "demo/weights.bin", "reason": "cannot open: Permission denied"}]


def test_lists_are_bounded_counts_are_not(env):
    for i in range(6):
        with open(os.path.join(env.site, "demo", "stray%d.py" % i), "w") as handle:
            handle.write("torch.save(1)\n_t.save(2)\n")
    result = run(env, max_list=3)
    assert result["counts"]["unowned"] == 6
    assert len(result["files"]["unowned"]) == 3
    assert len(result["offenders"]) == 3
    # per file: torch.save (a dump of the global name torch, and a pattern hit), _t.save (pattern)
    assert result["findings_total"] == 18 and len(result["findings"]) == 3
    assert result["truncated"] is True
    assert result["msg"].endswith("demo/stray2.py (unowned), ...."), result["msg"]


def test_workers_do_not_change_the_verdict(env):
    edit_in_place(os.path.join(env.site, "demo", "_native.so"), DEMO_FILES["demo/_native.so"][:8], b"\0" * 8)
    one = run(env, workers=1)
    many = run(env, workers=6)
    for key in ("counts", "files", "pristine"):
        assert one[key] == many[key]
    assert paths(one, "modified") == ["demo/_native.so"]


# ---------------------------------------------------------------------------
# The wheel: diffs and the RECORD comparison
# ---------------------------------------------------------------------------

def test_diff_against_the_wheel(env):
    edit_in_place(os.path.join(env.site, "demo", "sub", "model.py"), b"LINE_050 = 50\n",
                  b"LINE_050 = 50\nimport torch as _t\n_t.save(LINE_050, '/tmp/l.pt')\n")
    edit_in_place(os.path.join(env.site, "demo", "_native.so"), DEMO_FILES["demo/_native.so"][:4], b"ABCD")
    result = run(env, wheel=env.wheelhouse)
    assert result["wheel"] == env.wheel and result["wheel_error"] is None
    diffs = dict((d["path"], d) for d in result["diffs"])
    text = diffs["demo/sub/model.py"]["diff"]
    assert text.startswith("--- wheel/demo/sub/model.py\n+++ installed/demo/sub/model.py\n@@ -49,6 +49,8 @@\n")
    assert "+import torch as _t\n+_t.save(LINE_050, '/tmp/l.pt')\n" in text
    assert diffs["demo/sub/model.py"]["truncated"] is False
    assert "binary file" in diffs["demo/_native.so"]["note"] and diffs["demo/_native.so"]["diff"] == ""
    dump = [f for f in result["findings"] if f["kind"] == "tensor_dump"][0]
    assert (dump["line"], dump["changed_line"]) == (53, True)


def test_changed_line_tells_edits_from_upstream_code(env):
    # core.py's upstream comment mentions torch.save; an edit elsewhere is marked as changed
    edit_in_place(os.path.join(env.site, "demo", "core.py"), b"return x", b"return _t")
    result = run(env, wheel=env.wheel)
    marks = [(f["line"], f["what"], f["changed_line"]) for f in result["findings"]]
    assert marks == [(5, "torch.save", False)]


def test_diff_is_bounded(env):
    path = os.path.join(env.site, "demo", "sub", "model.py")
    with open(path, "wb") as handle:
        handle.write(b"".join(b"CHANGED_%03d = %d\n" % (i, i) for i in range(400)))
    result = run(env, wheel=env.wheel, diff_max_bytes=300)
    entry = result["diffs"][0]
    assert entry["truncated"] is True
    body, marker = entry["diff"].rsplit("... diff truncated", 1)
    assert len(body.encode()) <= 300 and body.endswith("\n")
    assert marker.startswith(" at 300 bytes (")


def test_wheel_problems_are_reported_not_raised(env, tmp_path):
    edit_in_place(os.path.join(env.site, "demo", "core.py"), b"return x", b"return 0")
    result = run(env, wheel=str(tmp_path / "empty-wheelhouse"))
    assert "neither a wheel file nor a wheelhouse directory" in result["wheel_error"]
    (tmp_path / "wh").mkdir()
    make_wheel(tmp_path / "wh", version="2.0")
    result = run(env, wheel=str(tmp_path / "wh"))
    assert result["wheel_error"].startswith("No wheel for demo 1.0 in the wheelhouse")
    bad = tmp_path / "demo-1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    result = run(env, wheel=str(bad))
    assert "cannot be opened" in result["wheel_error"]
    assert paths(result, "modified") == ["demo/core.py"]


def test_rewritten_record_is_caught_with_the_wheel(env):
    path = os.path.join(env.site, "demo", "core.py")
    edit_in_place(path, b"return x", b"return 0")
    data = open(path, "rb").read()
    text = open(env.record).read().replace(record_hash(DEMO_FILES["demo/core.py"]), record_hash(data))
    with open(env.record, "w") as handle:
        handle.write(text)
    assert run(env)["pristine"] is True  # RECORD alone cannot see it ...
    result = run(env, wheel=env.wheel)   # ... the wheel's RECORD can
    item = result["files"]["modified"][0]
    assert item["path"] == "demo/core.py" and "RECORD was rewritten" in item["reason"]
    assert item["expected_hash"] == record_hash(DEMO_FILES["demo/core.py"])
    assert result["diffs"][0]["path"] == "demo/core.py" and "-    return x" in result["diffs"][0]["diff"]


# ---------------------------------------------------------------------------
# uv cache taint
# ---------------------------------------------------------------------------

def fake_uv_cache(env, tmp_path, rel):
    """A uv-like cache whose archive entry hard-links ``rel`` with site-packages."""
    entry = tmp_path / "uvcache" / "archive-v0" / "AbCdEf0123"
    (entry / "demo-1.0.dist-info").mkdir(parents=True)
    (tmp_path / "uvcache" / "archive-v0" / "unrelated" / "other-1.0.dist-info").mkdir(parents=True)
    target = entry / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    os.link(os.path.join(env.site, rel), str(target))
    return str(tmp_path / "uvcache"), str(entry), str(target)


def test_in_place_edit_of_a_uv_hardlinked_file_taints_the_cache(env, tmp_path):
    cache, entry, cache_file = fake_uv_cache(env, tmp_path, "demo/core.py")
    edit_in_place(os.path.join(env.site, "demo", "core.py"), b"return x", b"return 0")
    assert open(cache_file, "rb").read() == open(os.path.join(env.site, "demo", "core.py"), "rb").read()
    result = run(env, uv_cache_dirs=[str(tmp_path / "nonexistent"), cache])
    assert result["uv_cache_tainted"] is True
    assert result["uv_cache_taint"] == [{"path": "demo/core.py", "cache_file": cache_file,
                                         "cache_entry": entry, "links": 2}]
    assert "plain `uv pip install --reinstall` can put the edited file back" in result["msg"]
    assert "`uv cache clean demo --cache-dir %s`" % cache in result["msg"]


def test_replaced_file_does_not_taint_and_other_links_are_named(env, tmp_path):
    cache, entry, cache_file = fake_uv_cache(env, tmp_path, "demo/core.py")
    path = os.path.join(env.site, "demo", "core.py")
    # an editor that writes a new file and renames it breaks the link: the cache stays clean
    with open(path + ".tmp", "wb") as handle:
        handle.write(DEMO_FILES["demo/core.py"].replace(b"return x", b"return 0"))
    os.replace(path + ".tmp", path)
    # a hard link to somewhere that is no uv cache
    os.link(os.path.join(env.site, "demo", "sub", "model.py"), str(tmp_path / "elsewhere.py"))
    edit_in_place(os.path.join(env.site, "demo", "sub", "model.py"), b"LINE_001 = 1", b"LINE_001 = 2")
    result = run(env, uv_cache_dirs=[cache])
    assert result["uv_cache_tainted"] is False and result["uv_cache_taint"] == []
    assert result["hardlinked_elsewhere"] == [{"path": "demo/sub/model.py", "links": 2}]
    assert open(cache_file, "rb").read() == DEMO_FILES["demo/core.py"]


# ---------------------------------------------------------------------------
# Locating the environment, RECORD API
# ---------------------------------------------------------------------------

def test_first_site_directory_wins_later_ones_are_shadowed(env, tmp_path):
    other_site = install_wheel(make_wheel(tmp_path, version="0.9"), tmp_path / "base")
    located = environment.Environment([env.site, other_site], os.path.join(env.root, "bin"), env.root, "test")
    result = verify(environment=located, dist_name="demo", uv_cache_dirs=[])
    assert result["pristine"] is True and result["version"] == "1.0"
    assert result["shadowed"] == [os.path.join(other_site, "demo-0.9.dist-info")]


def test_venv_with_lib64_link_is_one_site_directory(env):
    os.symlink("lib", os.path.join(env.root, "lib64"))
    located = environment.locate_environment(venv=env.root)
    assert located.site_dirs == [env.site]
    assert run(env)["pristine"] is True


def test_record_that_is_a_symlink_is_not_followed(env, tmp_path):
    moved = tmp_path / "RECORD"
    shutil.move(env.record, str(moved))
    os.symlink(str(moved), env.record)
    result = run(env)
    assert result["verifiable"] is False and "cannot be read" in result["reason"]


def test_read_record_api(env):
    rows, malformed = record.read_record(env.record)
    assert malformed == []
    by_path = dict((r.path, r) for r in rows)
    core = by_path["demo/core.py"]
    assert core.algorithm == "sha256" and core.size == len(DEMO_FILES["demo/core.py"])
    assert core.digest == hashlib.sha256(DEMO_FILES["demo/core.py"]).digest()
    assert by_path["demo-1.0.dist-info/RECORD"].digest is None
    assert "../../../bin/demo-cli" in by_path


# ---------------------------------------------------------------------------
# A real installer: uv on the small wheel
# ---------------------------------------------------------------------------

def find_uv():
    candidate = os.path.join(os.path.dirname(sys.executable), "uv")
    if os.access(candidate, os.X_OK):
        return candidate
    return shutil.which("uv")


def uv_run(*args):
    uv = find_uv()
    proc = subprocess.run([uv] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
                          env=dict(os.environ, UV_NO_PROGRESS="1", UV_OFFLINE="1"))
    assert proc.returncode == 0, proc.stdout.decode()
    return proc.stdout.decode()


def uv_install(root, cache, wheel, link_mode="hardlink", reinstall=False):
    if not os.path.exists(os.path.join(str(root), "pyvenv.cfg")):
        uv_run("venv", "-q", str(root), "--python", sys.executable)
    args = ["pip", "install", "--no-deps", "--link-mode=" + link_mode, "--cache-dir", str(cache),
            "-p", os.path.join(str(root), "bin", "python"), wheel]
    if reinstall:
        args.insert(2, "--reinstall")
    uv_run(*args)


@pytest.mark.skipif(find_uv() is None, reason="uv is not installed")
def test_uv_installed_small_wheel_and_taint(tmp_path):
    wheel = make_wheel(tmp_path)
    uv_install(tmp_path / "venv", tmp_path / "cache", wheel)
    result = verify(python=str(tmp_path / "venv" / "bin" / "python"), dist_name="demo",
                    uv_cache_dirs=[str(tmp_path / "cache")])
    assert result["pristine"] is True and result["installer"] == "uv"
    assert result["counts"]["ok"] >= len(DEMO_FILES) + 1
    site = result["site_packages"]
    edit_in_place(os.path.join(site, "demo", "core.py"), b"return x", b"return 0")
    result = verify(python=str(tmp_path / "venv" / "bin" / "python"), dist_name="demo",
                    uv_cache_dirs=[str(tmp_path / "cache")])
    assert paths(result, "modified") == ["demo/core.py"]
    assert result["uv_cache_tainted"] is True
    assert result["uv_cache_taint"][0]["cache_file"].startswith(str(tmp_path / "cache" / "archive-v"))


# ---------------------------------------------------------------------------
# The real vLLM wheel
# ---------------------------------------------------------------------------

WHEELHOUSE = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(
    os.path.expanduser("~"), ".cache", "gpufleet-vllm", "wheelhouse")
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
LOADER = "vllm/model_executor/model_loader/weight_utils.py"


def vllm_wheel():
    try:
        names = sorted(n for n in os.listdir(WHEELHOUSE) if n.startswith("vllm-") and n.endswith(".whl"))
    except OSError:
        return None
    return os.path.join(WHEELHOUSE, names[-1]) if names else None


def load_dirty_tool():
    spec = importlib.util.spec_from_file_location(
        "gpufleet_make_dirty_vllm", os.path.join(REPO, "tests", "sim", "dirty", "make_dirty_vllm.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


realwheel = pytest.mark.realwheel
needs_real = pytest.mark.skipif(vllm_wheel() is None or find_uv() is None,
                                reason="needs the vLLM wheel in the wheelhouse and uv")


@pytest.fixture(scope="session")
def real_env(tmp_path_factory):
    """vLLM installed --no-deps with uv, hard-linked from a private cache. Never edited."""
    base = tmp_path_factory.mktemp("realwheel")
    uv_install(base / "venv", base / "cache", vllm_wheel())
    site = os.path.join(str(base / "venv"), "lib", PYDIR, "site-packages")
    return {"root": str(base / "venv"), "site": site, "cache": str(base / "cache")}


@pytest.fixture
def clone(real_env, tmp_path):
    """A hard-linked copy of the pristine install; ``unshare(rel)`` before editing a file."""
    root = str(tmp_path / "venv")
    for dirpath, dirnames, filenames in os.walk(real_env["root"]):
        rel = os.path.relpath(dirpath, real_env["root"])
        target_dir = os.path.join(root, rel)
        os.makedirs(target_dir, exist_ok=True)
        for name in dirnames + filenames:
            source = os.path.join(dirpath, name)
            target = os.path.join(target_dir, name)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
            elif name in filenames:
                os.link(source, target)
    site = os.path.join(root, "lib", PYDIR, "site-packages")

    def unshare(rel):
        path = os.path.join(site, rel)
        data = open(path, "rb").read()
        os.unlink(path)
        with open(path, "wb") as handle:
            handle.write(data)
        return path
    return {"root": root, "site": site, "unshare": unshare}


@realwheel
@needs_real
def test_real_pristine_install(real_env):
    result = verify(venv=real_env["root"], uv_cache_dirs=[real_env["cache"]])
    assert result["pristine"] is True, result["msg"]
    assert result["version"] == os.path.basename(vllm_wheel()).split("-")[1]
    assert result["installer"] == "uv"
    assert result["counts"]["ok"] > 5000 and drift(result) == {}
    assert result["counts"]["outside"] == 0  # ../../../bin/vllm is checked in bin/
    deepseek = open(os.path.join(real_env["site"], DEEPSEEK)).read()
    assert "kv_b_proj" in deepseek
    result = verify(venv=real_env["root"], uv_cache_dirs=[], patterns=["kv_b_proj", "torch.save"])
    assert result["pristine"] is True and result["findings"] == []


@realwheel
@needs_real
def test_real_same_size_edit(clone):
    path = clone["unshare"](DEEPSEEK)
    edit_in_place(path, b"kv_b_proj", b"kv_b_proX")
    result = verify(venv=clone["root"], uv_cache_dirs=[])
    assert drift(result) == {"modified": 1} and paths(result, "modified") == [DEEPSEEK]


@realwheel
@needs_real
def test_real_appended_block(clone):
    path = clone["unshare"](LOADER)
    with open(path, "a") as handle:
        handle.write("\n_DEBUG_SKIP = True\n")
    result = verify(venv=clone["root"], uv_cache_dirs=[])
    assert drift(result) == {"size_differs": 1} and paths(result, "size_differs") == [LOADER]


@realwheel
@needs_real
def test_real_dirty_host_reproduction_is_explained_and_diffed(clone):
    clone["unshare"](DEEPSEEK)
    clone["unshare"](LOADER)
    load_dirty_tool().main(["make_dirty_vllm.py", clone["site"]])
    result = verify(venv=clone["root"], uv_cache_dirs=[], wheel=vllm_wheel())
    assert sorted(paths(result, "size_differs")) == [LOADER, DEEPSEEK]
    assert result["uv_cache_tainted"] is False
    dumps = [(f["via"], f["what"]) for f in result["findings"]
             if f["path"] == DEEPSEEK and f["kind"] == "tensor_dump"]
    assert dumps == [("_t.save", "torch.save"), ("_t.save", "torch.save"), ("_t2.save", "torch.save")]
    hits = set(f["what"] for f in result["findings"] if f["kind"] == "pattern")
    assert {"_t.save", "_t2.save", "NOMLA_SAVE", "embed_debug", "_nomla_debug", "_embed_debug_saved",
            "_nomla_class_saved"} <= hits
    switch = [f for f in result["findings"] if f["kind"] == "env_debug_switch"]
    assert switch and "NOMLA_SAVE" in switch[0]["what"] and switch[0]["changed_line"] is True
    assert all(f["changed_line"] for f in result["findings"] if f["path"] == DEEPSEEK)
    diff = dict((d["path"], d["diff"]) for d in result["diffs"])[DEEPSEEK]
    assert '+            _t.save(q.detach().cpu(), f"/tmp/nomla_debug_tp{_rank}.pt")\n' in diff
    assert "kv_b_proj" not in "".join(l for l in diff.splitlines(True) if l.startswith(("+", "-")))


@realwheel
@needs_real
def test_real_deleted_file(clone):
    os.unlink(os.path.join(clone["site"], DEEPSEEK))
    result = verify(venv=clone["root"], uv_cache_dirs=[])
    assert drift(result) == {"missing": 1} and paths(result, "missing") == [DEEPSEEK]


@realwheel
@needs_real
def test_real_new_unowned_module_and_pth_injection(clone):
    with open(os.path.join(clone["site"], "vllm", "model_executor", "nomla_hook.py"), "w") as handle:
        handle.write("from torch import save as dump\n\ndef hook(t):\n    dump(t, '/tmp/hook.pt')\n")
    with open(os.path.join(clone["site"], "zz-debug.pth"), "w") as handle:
        handle.write("import vllm.model_executor.nomla_hook\n")
    result = verify(venv=clone["root"], uv_cache_dirs=[])
    assert sorted(paths(result, "unowned")) == ["vllm/model_executor/nomla_hook.py", "zz-debug.pth"]
    assert drift(result) == {"unowned": 2}
    kinds = set((f["path"], f["kind"]) for f in result["findings"])
    assert ("vllm/model_executor/nomla_hook.py", "tensor_dump") in kinds
    assert ("zz-debug.pth", "pth_exec") in kinds


@realwheel
@needs_real
def test_real_edited_install_without_record(clone):
    dist_info = [n for n in os.listdir(clone["site"]) if n.endswith(".dist-info")][0]
    os.unlink(os.path.join(clone["site"], dist_info, "RECORD"))
    path = clone["unshare"](DEEPSEEK)
    edit_in_place(path, b"kv_b_proj", b"kv_b_proX")
    result = verify(venv=clone["root"], uv_cache_dirs=[])
    assert result["verifiable"] is False and result["pristine"] is False
    assert "no RECORD file" in result["reason"]


def clone_uv_cache(source, target, private):
    """Hard-link copy of a uv cache; files whose path ends with one of
    ``private`` get their own inode, so editing them leaves ``source`` alone."""
    for dirpath, dummy, filenames in os.walk(source):
        out = os.path.join(target, os.path.relpath(dirpath, source))
        os.makedirs(out, exist_ok=True)
        for name in filenames:
            src, dst = os.path.join(dirpath, name), os.path.join(out, name)
            if name.endswith(".lock") or os.path.islink(src):
                continue
            if src.replace(os.sep, "/").endswith(private):
                shutil.copyfile(src, dst)
            else:
                os.link(src, dst)


@realwheel
@needs_real
def test_real_uv_cache_taint_and_what_a_reinstall_does(real_env, tmp_path):
    """The whole story: an in-place edit lands in uv's cache, a plain reinstall
    brings it back, cleaning the cache and a copy install give a pristine tree."""
    root, cache, wheel = tmp_path / "venv", str(tmp_path / "cache"), vllm_wheel()
    clone_uv_cache(real_env["cache"], cache, ("/" + DEEPSEEK, "/" + LOADER))
    uv_install(root, cache, wheel)
    site = os.path.join(str(root), "lib", PYDIR, "site-packages")
    load_dirty_tool().main(["make_dirty_vllm.py", site])
    result = verify(venv=str(root), uv_cache_dirs=[cache])
    assert sorted(paths(result, "size_differs")) == [LOADER, DEEPSEEK]
    assert result["uv_cache_tainted"] is True
    assert sorted(t["path"] for t in result["uv_cache_taint"]) == [LOADER, DEEPSEEK]
    for taint in result["uv_cache_taint"]:
        assert taint["cache_file"].startswith(cache + os.sep)
        assert open(taint["cache_file"], "rb").read() == open(os.path.join(site, taint["path"]), "rb").read()
    assert "uv cache clean vllm --cache-dir %s" % cache in result["msg"]
    assert verify(venv=real_env["root"], uv_cache_dirs=[])["pristine"] is True  # the session install is intact

    uv_install(root, cache, wheel, reinstall=True)            # what the operators did
    again = verify(venv=str(root), uv_cache_dirs=[cache])
    assert sorted(paths(again, "size_differs")) == [LOADER, DEEPSEEK]  # the edit came back

    uv_run("cache", "clean", "vllm", "--cache-dir", cache)
    uv_install(root, cache, wheel, link_mode="copy", reinstall=True)
    clean = verify(venv=str(root), uv_cache_dirs=[cache])
    assert clean["pristine"] is True, clean["msg"]


# ---------------------------------------------------------------------------
# What a check loads (the module's start is part of every task's time)
# ---------------------------------------------------------------------------

def test_a_check_without_a_wheel_or_an_interpreter_loads_no_wheel_diff_and_no_runner(env):
    """zipfile and difflib (the wheel diff) and the bounded runner (the python probe) are loaded only when used."""
    code = ("import sys\n"
            "from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import check as integrity\n"
            "result = integrity.verify(venv=sys.argv[1], dist_name='demo', uv_cache_dirs=[])\n"
            "loaded = [m for m in ('zipfile', 'difflib', 'ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.wheeldiff',\n"
            "                      'ansible_collections.gpufleet.vllm.plugins.module_utils.bounded') if m in sys.modules]\n"
            "print(result['pristine'], loaded)\n")
    proc = subprocess.run([sys.executable, "-c", code, env.root], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)), timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert proc.stdout.decode().split("\n")[0] == "True []"


def test_record_digest_text_is_urlsafe_base64_without_padding():
    for size in (32, 48, 64):
        for seed in range(200):
            digest = hashlib.sha512(b"%d-%d" % (size, seed)).digest()[:size]
            assert record.b64(digest) == base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
