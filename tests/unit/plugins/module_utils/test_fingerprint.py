# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""fingerprint: a fake environment's distributions (dist-info directories and RECORDs written here), their
sources, their files against RECORD, the fingerprint, and the comparison with an expected set; hostile trees."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import hashlib
import json
import os
import sys
import time

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import environment, filecheck

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import fingerprint
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.fingerprint import (
    compare,
    fingerprint_environment,
    normalize_expected,
    source_of,
    strip_credentials,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import set_fingerprint
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError

PYDIR = "python%d.%d" % sys.version_info[:2]


# ---------------------------------------------------------------------------
# A fake environment
# ---------------------------------------------------------------------------

def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def site_of(root):
    site = os.path.join(str(root), "lib", PYDIR, "site-packages")
    os.makedirs(site, exist_ok=True)
    os.makedirs(os.path.join(str(root), "bin"), exist_ok=True)
    cfg = os.path.join(str(root), "pyvenv.cfg")
    if not os.path.exists(cfg):
        with open(cfg, "w") as handle:
            handle.write("home = /usr/bin\nversion_info = %d.%d.%d\n" % sys.version_info[:3])
    return site


def add_dist(root, name, version, files=None, installer="uv", direct_url=None, scripts=None, data=None,
             dir_name=None, metadata=None, extra_rows=""):
    """Install a distribution into the venv-like tree ``root`` as an installer would: its files, a dist-info
    directory with METADATA, INSTALLER, direct_url.json (``direct_url``: a dict or raw bytes) and a RECORD listing
    each with its hash and size; ``scripts`` land in bin/ (recorded as ../../../bin/NAME, with the venv's
    interpreter in the first line), ``data`` below the environment (recorded as ../../../PATH).
    Returns the dist-info path."""
    site = site_of(root)
    dist_info = os.path.join(site, dir_name or "%s-%s.dist-info" % (name.replace("-", "_"), version))
    os.makedirs(dist_info)
    if files is None:
        files = {"%s/__init__.py" % name.replace("-", "_").lower(): b"VERSION = %r\n" % version.encode()}
    rows = []

    def put(path, rel, payload):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(payload)
        rows.append((rel, payload))
    for rel, payload in files.items():
        put(os.path.join(site, *rel.split("/")), rel, payload)
    for script, payload in (scripts or {}).items():
        payload = payload.replace(b"#!python", b"#!" + os.path.join(str(root), "bin", "python").encode(), 1)
        put(os.path.join(str(root), "bin", script), "../../../bin/" + script, payload)
    for rel, payload in (data or {}).items():
        put(os.path.join(str(root), *rel.split("/")), "../../../" + rel, payload)
    meta_name = os.path.basename(dist_info)
    if metadata is None:
        metadata = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\nA test distribution.\n" % (name, version)).encode()
    put(os.path.join(dist_info, "METADATA"), meta_name + "/METADATA", metadata)
    if installer is not None:
        put(os.path.join(dist_info, "INSTALLER"), meta_name + "/INSTALLER", (installer + "\n").encode())
    if direct_url is not None:
        payload = direct_url if isinstance(direct_url, bytes) else json.dumps(direct_url).encode()
        put(os.path.join(dist_info, "direct_url.json"), meta_name + "/direct_url.json", payload)
    with open(os.path.join(dist_info, "RECORD"), "w", encoding="utf-8", errors="surrogateescape") as handle:
        for rel, payload in rows:
            handle.write("%s,%s,%d\n" % (rel, record_hash(payload), len(payload)))
        handle.write("%s/RECORD,,\n" % meta_name)
        handle.write(extra_rows)
    return dist_info


def edit(path, old, new):
    with open(path, "rb") as handle:
        data = handle.read()
    assert old in data
    with open(path, "wb") as handle:
        handle.write(data.replace(old, new, 1))


SCRIPT = b"#!python\nimport sys\nfrom demo import main\nsys.exit(main())\n"


@pytest.fixture
def root(tmp_path):
    """A venv-like tree with three pristine distributions (one with a script, one with a data file)."""
    root = tmp_path / "venv"
    files = {"demo/__init__.py": b"def main():\n    return 0\n", "demo/big.bin": os.urandom(400 * 1024)}
    add_dist(root, "demo", "1.0", files=files, scripts={"demo-cli": SCRIPT})
    add_dist(root, "Typing_Extensions", "4.16.0", files={"typing_extensions.py": b"X = 1\n"})
    add_dist(root, "sympy", "1.14.0", data={"share/man/man1/isympy.1": b".TH ISYMPY 1\n"})
    return str(root)


def run(root, **kw):
    env = environment.locate_environment(venv=root)
    return fingerprint_environment(env, **kw)


def by_name(result):
    return dict((d["name"], d) for d in result["distributions"])


# ---------------------------------------------------------------------------
# A pristine environment
# ---------------------------------------------------------------------------

def test_pristine_environment(root):
    result = run(root)
    assert result["count"] == 3
    assert [d["name"] for d in result["distributions"]] == ["demo", "sympy", "typing-extensions"]
    assert result["fingerprint"] == set_fingerprint([("demo", "1.0"), ("sympy", "1.14.0"), ("typing_extensions", "4.16.0")])
    for dist in result["distributions"]:
        assert dist["pristine"] is True and dist["problem"] is None
        assert dist["source"] == "index" and dist["installer"] == "uv"
    assert result["not_pristine"] == [] and result["not_pristine_total"] == 0
    assert result["problems"] == [] and result["matches"] is None
    # the script in bin/ and the data file in share/ are hashed, not called "outside"
    assert result["files_checked"] == 4 + 2 + 3 + 3
    assert result["msg"] == (
        "3 distributions in %s, fingerprint %s; all pristine (the 12 files their RECORDs list all match)."
        % (os.path.join(root, "lib", PYDIR, "site-packages"), result["fingerprint"][:19]))
    json.dumps(result)


def test_the_fingerprint_is_the_lock_side_digest_of_name_and_version_only(root, tmp_path):
    other = tmp_path / "other"
    add_dist(other, "typing-extensions", "4.16.0", files={"typing_extensions.py": b"DIFFERENT = 2\n"}, installer="pip")
    add_dist(other, "SymPy", "1.14.0", dir_name="SymPy-1.14.0.dist-info")
    add_dist(other, "demo", "1.0", direct_url={"url": "file:///src/demo", "dir_info": {}})
    # other files, installer, source and spelling: the same names and versions, the same fingerprint
    assert run(str(other))["fingerprint"] == run(root)["fingerprint"]
    add_dist(other, "six", "1.17.0")
    pairs = [("demo", "1.0"), ("sympy", "1.14.0"), ("six", "1.17.0"), ("typing-extensions", "4.16.0")]
    assert run(str(other))["fingerprint"] == set_fingerprint(pairs)


def test_verify_false_reads_only_metadata(root):
    edit(os.path.join(root, "lib", PYDIR, "site-packages", "demo", "__init__.py"), b"return 0", b"return 1")
    result = run(root, verify=False)
    assert result["verified"] is False and result["files_checked"] == 0
    assert all(d["pristine"] is None for d in result["distributions"])
    assert result["not_pristine"] == [] and "files not verified (verify is false)" in result["msg"]
    assert result["fingerprint"] == run(root)["fingerprint"]


# ---------------------------------------------------------------------------
# Drift
# ---------------------------------------------------------------------------

def test_an_edited_file_and_a_missing_file(root):
    site = os.path.join(root, "lib", PYDIR, "site-packages")
    edit(os.path.join(site, "demo", "__init__.py"), b"return 0", b"return 1")
    os.unlink(os.path.join(site, "typing_extensions.py"))
    result = run(root)
    names = by_name(result)
    assert names["demo"]["pristine"] is False and names["typing-extensions"]["pristine"] is False
    assert names["sympy"]["pristine"] is True
    assert result["not_pristine_total"] == 2
    assert result["not_pristine"] == [
        {"name": "demo", "version": "1.0", "reason": "1 modified (first: demo/__init__.py (modified))",
         "overwritten_by": []},
        {"name": "typing-extensions", "version": "4.16.0",
         "reason": "1 missing (first: typing_extensions.py (missing))", "overwritten_by": []}]
    assert "2 not pristine: demo 1.0 (1 modified (first: demo/__init__.py (modified)))" in result["msg"]
    # the fingerprint is of names and versions: drift does not change it, pristine says it
    assert result["fingerprint"] == run(root, verify=False)["fingerprint"]


def test_an_edited_script_in_bin_and_an_edited_data_file(root):
    edit(os.path.join(root, "bin", "demo-cli"), b"sys.exit", b"print(1); sys.exit")
    edit(os.path.join(root, "share", "man", "man1", "isympy.1"), b"ISYMPY", b"HACKED")
    names = by_name(run(root))
    assert names["demo"]["pristine"] is False and names["sympy"]["pristine"] is False
    reasons = dict((i["name"], i["reason"]) for i in run(root)["not_pristine"])
    assert reasons["demo"] == "1 size differs (first: ../../../bin/demo-cli (size differs))"
    assert reasons["sympy"] == "1 modified (first: ../../../share/man/man1/isympy.1 (modified))"


def test_a_path_leaving_the_environment_is_never_opened(root, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"root:x:0:0\n")
    rel = os.path.relpath(str(secret), os.path.join(root, "lib", PYDIR, "site-packages"))
    add_dist(root, "evil", "1.0", extra_rows="%s,%s,11\n" % (rel, record_hash(b"root:x:0:0\n")))
    opened = []
    real_open = os.open

    def spy(path, *args, **kwargs):
        opened.append(path)
        return real_open(path, *args, **kwargs)
    try:
        os.open = spy
        result = run(root, workers=1)
    finally:
        os.open = real_open
    assert str(secret) not in opened
    assert [i["reason"] for i in result["not_pristine"]] == ["1 outside (first: %s (outside))" % rel]


def test_a_file_two_distributions_install_is_overwritten_not_edited(root):
    # both install build_backend.py; the one installed last wrote it, so it matches that one's RECORD only
    add_dist(root, "torch-c-dlpack-ext", "0.1.5", files={"build_backend.py": b"OLD = 1\n", "dlpack/__init__.py": b""})
    files = {"flashinfer/__init__.py": b"", "build_backend.py": b"NEWER_AND_LONGER = 2\n"}
    add_dist(root, "flashinfer-python", "0.7.2.post1", files=files)
    result = run(root)
    item = [i for i in result["not_pristine"] if i["name"] == "torch-c-dlpack-ext"]
    assert item == [{"name": "torch-c-dlpack-ext", "version": "0.1.5", "overwritten_by": ["flashinfer-python 0.7.2.post1"],
                     "reason": "1 file overwritten by flashinfer-python 0.7.2.post1 (they match its RECORD: both "
                               "distributions install them and the one installed last wins)"}]
    assert by_name(result)["flashinfer-python"]["pristine"] is True
    # edited afterwards it matches neither: an edit again
    edit(os.path.join(root, "lib", PYDIR, "site-packages", "build_backend.py"), b"NEWER", b"EDITS")
    reasons = dict((i["name"], i["reason"]) for i in run(root)["not_pristine"])
    assert reasons["torch-c-dlpack-ext"].startswith("1 size differs")
    assert reasons["flashinfer-python"].startswith("1 modified")


# ---------------------------------------------------------------------------
# Sources (direct_url.json) and credentials
# ---------------------------------------------------------------------------

def test_sources(root):
    add_dist(root, "gguf", "0.17.1", direct_url={
        "url": "https://deploy:s3cr3t@github.com/ggml-org/llama.cpp",
        "vcs_info": {"vcs": "git", "commit_id": "4c0a8e1b7e3e0d1c2b3a4958676a5b4c3d2e1f00", "requested_revision": "main"}})
    add_dist(root, "mylib", "2.0", direct_url={"url": "file:///srv/src/my%20lib", "dir_info": {}})
    add_dist(root, "devlib", "0.1", direct_url={"url": "file:///home/op/devlib", "dir_info": {"editable": True}})
    add_dist(root, "wheelpkg", "3.0", direct_url={
        "url": "https://mirror.example/wheelpkg-3.0-py3-none-any.whl?X-Amz-Signature=abcdef&X-Amz-Credential=AKIA&v=1",
        "archive_info": {"hashes": {"sha256": "00"}}})
    result = run(root)
    names = by_name(result)
    assert names["gguf"]["source"] == "git+https://github.com/ggml-org/llama.cpp@4c0a8e1b7e3e0d1c2b3a4958676a5b4c3d2e1f00"
    assert names["mylib"]["source"] == "dir:/srv/src/my lib"
    assert names["devlib"]["source"] == "editable:/home/op/devlib"
    assert names["wheelpkg"]["source"] == ("url:https://mirror.example/wheelpkg-3.0-py3-none-any.whl?"
                                           "X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED&v=1")
    assert names["gguf"]["pristine"] is True and names["wheelpkg"]["pristine"] is True
    assert names["devlib"]["pristine"] is False
    assert "editable install (/home/op/devlib)" in names["devlib"]["problem"]
    text = json.dumps(result)
    assert "s3cr3t" not in text and "deploy" not in text and "abcdef" not in text and "AKIA" not in text


@pytest.mark.parametrize("url, clean", [
    ("https://user:pass@host/p", "https://host/p"),
    ("https://TOKEN@host:8443/p?ref=main#egg=x", "https://host:8443/p?ref=main#egg=x"),
    ("ssh://git@github.com/org/repo.git", "ssh://github.com/org/repo.git"),
    ("git@github.com:org/repo.git", "github.com:org/repo.git"),
    ("https://host/p?token=abc&x=1", "https://host/p?token=REDACTED&x=1"),
    ("file:///srv/x", "file:///srv/x"),
    ("https://[::1/", "https://[::1/"),     # unparseable: kept, no userinfo in it
    ("https://u:p@[::1/", "https://[::1/"),
])
def test_strip_credentials(url, clean):
    assert strip_credentials(url) == clean


@pytest.mark.parametrize("payload, problem", [
    (b"{not json", "direct_url.json is not valid JSON"),
    (b"[1, 2]", "direct_url.json has no url"),
    (b'{"url": "https://x"}', "direct_url.json has none of vcs_info, dir_info, archive_info"),
    (b'{"url": "https://x", "vcs_info": {"vcs": "git"}}', "direct_url.json's vcs_info has no vcs or commit_id"),
    (b"\xff\xfe{}", "direct_url.json is not valid JSON"),
    (b'{"url": "https://x", "archive_info": {}, "pad": "' + b"x" * (70 << 10) + b'"}',
     "direct_url.json is larger than 65536 bytes; not read"),
])
def test_a_malformed_direct_url_json_is_a_problem(root, payload, problem):
    add_dist(root, "odd", "1.0", direct_url=payload)
    result = run(root)
    odd = by_name(result)["odd"]
    assert odd["source"] == "unknown" and odd["pristine"] is False
    assert odd["problem"].startswith(problem)
    assert result["problems"][0]["name"] == "odd" and result["problems"][0]["problem"].startswith(problem)


def test_a_linked_direct_url_json_is_not_followed(root, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"url": "https://x", "archive_info": {}}))
    dist_info = add_dist(root, "odd", "1.0", direct_url={"url": "https://y", "archive_info": {}})
    os.unlink(os.path.join(dist_info, "direct_url.json"))
    os.symlink(str(target), os.path.join(dist_info, "direct_url.json"))
    odd = by_name(run(root))["odd"]
    assert odd["problem"] == "direct_url.json is a symbolic link; not followed" and odd["source"] == "unknown"


def test_source_of_reads_no_more_than_it_is_given():
    assert source_of(None) == ("index", False, None)
    big = b'{"url": "https://x", "archive_info": {}}' + b" " * (64 << 10)
    assert source_of(big)[2] == "direct_url.json is larger than 65536 bytes; not read"


# ---------------------------------------------------------------------------
# Hostile trees
# ---------------------------------------------------------------------------

def test_a_linked_dist_info_is_not_followed_but_counted(root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    target = add_dist(elsewhere, "ghost", "9.9")
    site = os.path.join(root, "lib", PYDIR, "site-packages")
    os.symlink(target, os.path.join(site, "ghost-1.0.dist-info"))
    result = run(root)
    ghost = by_name(result)["ghost"]
    # name and version from the link's own name: nothing behind the link was read
    assert ghost["version"] == "1.0" and ghost["pristine"] is False and ghost["source"] == "unknown"
    assert ghost["problem"] == "ghost-1.0.dist-info is a symbolic link to %s; not followed" % target
    assert result["count"] == 4


def test_a_linked_metadata_is_not_followed(root, tmp_path):
    fake = tmp_path / "METADATA"
    fake.write_bytes(b"Name: demo\nVersion: 99.0\n\n")
    meta = os.path.join(root, "lib", PYDIR, "site-packages", "demo-1.0.dist-info", "METADATA")
    os.unlink(meta)
    os.symlink(str(fake), meta)
    demo = by_name(run(root))["demo"]
    assert demo["version"] == "1.0" and demo["pristine"] is False
    assert demo["problem"] == "METADATA is a symbolic link; not followed"


def test_huge_metadata_is_read_only_up_to_its_bound(root, monkeypatch):
    # a 64 MiB description after a normal header: the header is read, the rest is not
    body = b"Metadata-Version: 2.1\nName: huge\nVersion: 2.0\n\n" + b"x" * (64 << 20)
    add_dist(root, "huge", "2.0", metadata=body)
    reads = []
    real = fingerprint.read_regular

    def spy(path, limit):
        reads.append((os.path.basename(path), limit))
        return real(path, limit)
    monkeypatch.setattr(fingerprint, "read_regular", spy)
    result = run(root, verify=False)
    assert by_name(result)["huge"]["version"] == "2.0" and by_name(result)["huge"]["problem"] is None
    assert max(limit for name, limit in reads if name == "METADATA") == fingerprint.METADATA_LIMIT + 1


def test_a_header_without_version_within_the_bound_is_a_problem(root):
    body = b"Metadata-Version: 2.1\nName: padded\n" + b"".join(b"Classifier: %d\n" % i for i in range(40000)) + \
        b"Version: 2.0\n\n"
    add_dist(root, "padded", "2.0", metadata=body)
    padded = by_name(run(root))["padded"]
    assert padded["version"] == "2.0"       # from the directory's name
    assert padded["problem"] == "METADATA gives no Version in its header (first 262144 bytes read)"


def test_metadata_naming_another_distribution_is_a_problem(root):
    add_dist(root, "alias", "1.0", metadata=b"Name: torch\nVersion: 1.0\n\n")
    result = run(root)
    assert "alias" not in by_name(result)
    torch = by_name(result)["torch"]
    assert torch["problem"] == "METADATA names 'torch' but the directory is 'alias-1.0.dist-info'"


def test_a_huge_record_makes_the_distribution_not_pristine(root):
    dist_info = add_dist(root, "bloated", "1.0")
    with open(os.path.join(dist_info, "RECORD"), "a") as handle:
        handle.write("pad/x.py,,\n" * 20000)
    result = run(root, record_limit=100000)
    bloated = by_name(result)["bloated"]
    assert bloated["pristine"] is False
    assert bloated["problem"].endswith("is larger than 100000 bytes (the limit for a RECORD file); it was not parsed")


def test_all_records_together_are_bounded(root, monkeypatch):
    monkeypatch.setattr(fingerprint, "TOTAL_RECORD_LIMIT", 600)
    with pytest.raises(IntegrityError, match=r"The RECORD files of this environment hold more than 600 bytes in all"):
        run(root)


def test_non_utf8_names(root):
    site = os.path.join(root, "lib", PYDIR, "site-packages")
    odd_dir = b"caf\xe9-1.0.dist-info".decode("utf-8", "surrogateescape")
    add_dist(root, "cafe", "1.0", dir_name=odd_dir, metadata=b"Name: caf\xe9\nVersion: 1.0\n\n",
             files={b"caf\xe9/__init__.py".decode("utf-8", "surrogateescape"): b""})
    assert os.path.isdir(os.path.join(site, odd_dir))
    result = run(root)
    text = json.dumps(result, ensure_ascii=False).encode("utf-8")    # valid UTF-8 throughout
    assert b"\\\\xe9" in text
    odd = [d for d in result["distributions"] if d["name"].startswith("caf")][0]
    assert odd["pristine"] is False and "is not a valid distribution name" in odd["problem"]
    assert result["count"] == 4 and result["fingerprint"].startswith("sha256:")


def test_two_metadata_directories_for_one_name(root):
    add_dist(root, "six", "1.16.0", files={"six.py": b"OLD = 1\n"})
    add_dist(root, "Six", "1.17.0", files={"six_new.py": b""}, dir_name="Six-1.17.0.dist-info")
    result = run(root, expected={"demo": "1.0", "sympy": "1.14.0", "typing-extensions": "4.16.0", "six": "1.17.0"})
    sixes = [d for d in result["distributions"] if d["name"] == "six"]
    assert [d["version"] for d in sixes] == ["1.16.0", "1.17.0"]
    for dist in sixes:
        assert dist["pristine"] is False and "another metadata directory for six is installed" in dist["problem"]
    assert result["different"] == [{"name": "six", "expected": "1.17.0", "found": "1.16.0, 1.17.0"}]
    assert result["matches"] is False and result["count"] == 5
    assert result["problems_total"] == 2


def test_egg_info_and_egg_link(root):
    site = os.path.join(root, "lib", PYDIR, "site-packages")
    with open(os.path.join(site, "oldlib-0.9.egg-info"), "wb") as handle:
        handle.write(b"Metadata-Version: 1.0\nName: oldlib\nVersion: 0.9\n\n")
    with open(os.path.join(site, "devtool.egg-link"), "w") as handle:
        handle.write("/home/op/devtool\n.\n")
    result = run(root)
    old = by_name(result)["oldlib"]
    assert old["version"] == "0.9" and old["pristine"] is False and "without a RECORD" in old["problem"]
    assert "devtool" not in by_name(result)
    assert result["problems"][0]["path"].endswith("devtool.egg-link")
    assert "devtool.egg-link is an editable (develop) install" in result["msg"]


def test_many_distributions_are_bounded(root):
    for number in range(10):
        add_dist(root, "pkg%d" % number, "1.0")
    assert run(root, max_distributions=13)["count"] == 13
    with pytest.raises(IntegrityError, match=r"More than 12 Python distributions are installed in .*site-packages; "
                                             r"stopped listing them"):
        run(root, max_distributions=12)


def test_lists_are_bounded_by_max_list_with_totals(root):
    for number in range(6):
        dist_info = add_dist(root, "pkg%d" % number, "1.0")
        os.unlink(os.path.join(os.path.dirname(dist_info), "pkg%d" % number, "__init__.py"))
    result = run(root, max_list=2)
    assert len(result["not_pristine"]) == 2 and result["not_pristine_total"] == 6
    assert len(result["distributions"]) == 9


# ---------------------------------------------------------------------------
# The deadline
# ---------------------------------------------------------------------------

def test_timeout_stops_hashing_with_how_far_it_got(root, monkeypatch):
    for number in range(30):
        add_dist(root, "pkg%02d" % number, "1.0")
    real = filecheck.check_file

    def slow(*args, **kwargs):
        time.sleep(0.05)
        return real(*args, **kwargs)
    monkeypatch.setattr(filecheck, "check_file", slow)
    started = time.monotonic()
    with pytest.raises(IntegrityError) as exc:
        run(root, timeout=0.5, workers=1)
    took = time.monotonic() - started
    assert took < 2.0, took      # all of it would take 33 * 3 * 0.05 s (about 5 s)
    message = str(exc.value)
    assert message.startswith("The check did not finish within 0.5 seconds (timeout) and was stopped while hashing "
                              "the files RECORD lists (")
    checked, total = message.split("lists (", 1)[1].split(" checked")[0].split(" of ")
    assert 0 < int(checked) < int(total) == 3 * 33 + 2 + 1


def test_timeout_while_reading_metadata(root, monkeypatch):
    for number in range(70):
        add_dist(root, "pkg%02d" % number, "1.0")
    real = fingerprint._read_entry

    def slow(*args):
        time.sleep(0.02)
        return real(*args)
    monkeypatch.setattr(fingerprint, "_read_entry", slow)
    with pytest.raises(IntegrityError, match=r"stopped while reading the metadata of the installed distributions "
                                             r"\(64 so far\)"):
        run(root, timeout=0.3)


# ---------------------------------------------------------------------------
# Against an expected set
# ---------------------------------------------------------------------------

EXPECTED = {"demo": "1.0", "sympy": "1.14.0", "typing-extensions": "4.16.0"}


def test_expected_match_with_other_spellings(root):
    result = run(root, expected={"Demo": "v1.0", "SymPy": "1.14.0", "Typing_Extensions": "4.16.0"})
    assert result["matches"] is True
    assert result["missing"] == result["extra"] == result["different"] == []
    assert result["msg"].endswith("; it matches the expected set.")


def test_expected_match_of_a_post_release_spelled_two_ways(tmp_path):
    add_dist(tmp_path / "v", "certifi", "2026.10.19-1")
    result = run(str(tmp_path / "v"), expected={"CERTIFI": "2026.10.19.post1"})
    assert result["matches"] is True
    assert result["distributions"][0]["version"] == "2026.10.19.post1"
    assert result["fingerprint"] == set_fingerprint([("certifi", "2026.10.19.post1")])


def test_expected_mismatch_in_each_direction(root):
    expected = {"demo": "1.1", "sympy": "1.14.0", "flashinfer-python": "0.6.4"}
    result = run(root, expected=expected)
    assert result["matches"] is False
    assert result["missing"] == [{"name": "flashinfer-python", "version": "0.6.4"}]
    assert result["extra"] == [{"name": "typing-extensions", "version": "4.16.0"}]
    assert result["different"] == [{"name": "demo", "expected": "1.1", "found": "1.0"}]
    assert result["msg"].endswith("; it differs from the expected set: 1 different (demo 1.1 expected, 1.0 found), "
                                  "1 missing (flashinfer-python 0.6.4), 1 not expected (typing-extensions 4.16.0).")


def test_the_locked_version_from_another_source_is_not_the_lock(tmp_path):
    # a local build of lark 1.2.2 (its own RECORD, so pristine) is not the index wheel the lock pins by its hash
    venv = str(tmp_path / "v")
    add_dist(venv, "lark", "1.2.2", files={"lark/__init__.py": b"PATCHED = True\n"},
             direct_url={"url": "file:///root/builds/lark-1.2.2-py3-none-any.whl", "archive_info": {}})
    add_dist(venv, "six", "1.17.0")
    result = run(venv, expected={"lark": "1.2.2", "six": "1.17.0"})
    assert result["fingerprint"] == set_fingerprint([("lark", "1.2.2"), ("six", "1.17.0")])
    assert by_name(result)["lark"]["pristine"] is True
    assert result["matches"] is False and result["missing"] == [] and result["extra"] == []
    assert result["different"] == [{"name": "lark", "expected": "1.2.2",
                                    "found": "1.2.2 from url:file:///root/builds/lark-1.2.2-py3-none-any.whl"}]


def test_expected_fingerprint(root):
    good = set_fingerprint(EXPECTED.items())
    assert run(root, expected_fingerprint=good)["matches"] is True
    bad = set_fingerprint(list(EXPECTED.items()) + [("six", "1.17.0")])
    result = run(root, expected_fingerprint=bad)
    assert result["matches"] is False and result["missing"] == []
    assert result["msg"].endswith("it differs from the expected set: the fingerprint is not the expected %s." % bad[:19])
    # both given: both must hold
    assert run(root, expected=EXPECTED, expected_fingerprint=bad)["matches"] is False
    assert run(root, expected=EXPECTED, expected_fingerprint=good)["matches"] is True


def test_normalize_expected():
    assert normalize_expected({"Typing_Extensions": "4.16", "CERTIFI": "2026.10.19-1", "odd": "custom-1"}) == {
        "typing-extensions": "4.16", "certifi": "2026.10.19.post1", "odd": "custom-1"}
    with pytest.raises(ValueError, match=r"expected gives torch the float 1.1 as its version; give every version as "
                                         r"text \(quote it in YAML"):
        normalize_expected({"torch": 1.1})
    with pytest.raises(ValueError, match=r"expected gives six twice with two versions"):
        normalize_expected({"six": "1.16.0", "Six": "1.17.0"})
    with pytest.raises(ValueError, match="not a distribution name"):
        normalize_expected({"bad name": "1.0"})
    # one version in two spellings is one version
    assert normalize_expected({"six": "1.16.0", "Six": "v1.16.0"}) == {"six": "1.16.0"}


def test_compare_is_symmetric_in_words():
    missing, extra, different = compare({"a": ["1.0"], "b": ["2.0"]}, {"b": "2.1", "c": "3.0"})
    assert missing == [{"name": "c", "version": "3.0"}]
    assert extra == [{"name": "a", "version": "1.0"}]
    assert different == [{"name": "b", "expected": "2.1", "found": "2.0"}]


def test_metadata_header_reads_name_and_version_only_from_the_header():
    data = (b"Metadata-Version: 2.1\nName: real\nSummary: x\nDescription: first line\n"
            b"        Version: 6.6 (inside a description)\nVersion: 1.2\n\nVersion: 9.9\n")
    assert fingerprint.metadata_header(data, False) == ("real", "1.2")
    assert fingerprint.metadata_header(b"Name: cut\nVersion: 1.2", True) == ("cut", None)
    assert fingerprint.metadata_header(b"Name: a\n\nVersion: 1.0\n", False) == ("a", None)


def test_a_version_the_directory_spells_otherwise_is_no_problem(root):
    # an older installer kept the wheel's escaped spelling in the directory name
    add_dist(root, "legacy", "1.0-1", dir_name="legacy-1.0_1.dist-info")
    legacy = by_name(run(root))["legacy"]
    assert legacy["version"] == "1.0.post1" and legacy["problem"] is None and legacy["pristine"] is True
    add_dist(root, "liar", "2.0", dir_name="liar-1.0.dist-info")
    assert by_name(run(root))["liar"]["problem"] == "METADATA gives version '2.0' but the directory is 'liar-1.0.dist-info'"


def test_many_metadata_directories_for_one_name_are_named_bounded(root):
    for number in range(40):
        add_dist(root, "six", "1.%d" % number, files={})
    result = run(root)
    sixes = [d for d in result["distributions"] if d["name"] == "six"]
    assert len(sixes) == 40
    for dist in sixes:
        assert dist["problem"].count(".dist-info") == 3 and " and 36 more); Python sees only one" in dist["problem"]
    assert len(json.dumps(result)) < 100000
