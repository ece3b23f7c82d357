# SPDX-License-Identifier: GPL-3.0-or-later
"""The uv_lock lookup with the control node's real uv: a whole environment locked from a wheelhouse of small
wheels the test builds (and from a real HTTP index with a per-commit directory), what it refuses, how it fails,
and that `uv pip sync --require-hashes` installs its lock exactly and refuses a tampered wheel."""

import base64
import functools
import hashlib
import http.server
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

import pytest
import yaml

from ansible.errors import AnsibleLookupError

from ansible_collections.gpufleet.vllm.plugins.lookup import uv_lock as ul
from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, pkgnames, uvcli

PY = "%d.%d" % sys.version_info[:2]
PLATFORM = "x86_64-manylinux_2_28"


def make_wheel(directory, name, version, requires=(), payload=""):
    """A small valid wheel: METADATA (with Requires-Dist), WHEEL, RECORD and one module."""
    dist = "%s-%s" % (name.replace("-", "_"), version)
    module = name.replace("-", "_")
    files = {
        "%s/__init__.py" % module: "VERSION = %r\n%s" % (version, payload),
        "%s.dist-info/METADATA" % dist: "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
            name, version, "".join("Requires-Dist: %s\n" % r for r in requires)),
        "%s.dist-info/WHEEL" % dist: "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(text.encode())))
    record.append("%s.dist-info/RECORD,," % dist)
    files["%s.dist-info/RECORD" % dist] = "\n".join(record) + "\n"
    path = os.path.join(str(directory), "%s-py3-none-any.whl" % dist)
    with zipfile.ZipFile(path, "w") as zf:
        for name_in_zip, text in sorted(files.items()):
            zf.writestr(zipfile.ZipInfo(name_in_zip, (2020, 1, 1, 0, 0, 0)), text)
    return path


def sha256(path):
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.sha256(handle.read()).hexdigest()


def have_uv():
    try:
        uvcli.find_uv("")
        return True
    except uvcli.UvError:
        return False


needs_uv = pytest.mark.skipif(not have_uv(), reason="uv is not installed on this control node")

WHEELS = [
    ("vllm", "0.33.0", ["lark==1.2.2", "nvidia-ml-py>=13"]),
    ("vllm", "0.34.0", ["lark==1.3.1", "gguf>=0.17", "nvidia-ml-py>=13"]),
    ("lark", "1.2.2", []),
    ("lark", "1.3.1", []),
    ("gguf", "0.17.1", ["numpy-lite>=1"]),
    ("numpy-lite", "1.0", []),
    ("nvidia-ml-py", "13.615.71", []),
]


@pytest.fixture
def house(tmp_path):
    directory = tmp_path / "wheelhouse"
    directory.mkdir()
    for name, version, requires in WHEELS:
        make_wheel(directory, name, version, requires)
    return str(directory)


def offline(house, *terms, **kw):
    kw.setdefault("python_version", PY)
    kw.setdefault("python_platform", PLATFORM)
    return ul.lock(list(terms) or ["vllm==0.34.0"], find_links=[house], no_index=True, **kw)


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- success ---------------------------------------------------------------------------------------------------

@needs_uv
def test_a_whole_environment_is_locked_with_the_hashes_of_its_files(house):
    text = offline(house, now=lambda: __import__("datetime").datetime(2026, 12, 5, 13, 47, 43))
    parsed = lockfile.parse_lock(text)
    assert lockfile.versions(parsed) == {"vllm": "0.34.0", "lark": "1.3.1", "gguf": "0.17.1", "numpy-lite": "1.0",
                                         "nvidia-ml-py": "13.615.71"}
    for name, pin in parsed["packages"].items():
        wheel = os.path.join(house, "%s-%s-py3-none-any.whl" % (name.replace("-", "_"), pin["version"]))
        assert pin["hashes"] == [sha256(wheel)]
    meta = parsed["meta"]
    assert meta["package"] == "vllm==0.34.0" and parsed["package"] == {"name": "vllm", "version": "0.34.0"}
    assert meta["python_version"] == PY and meta["python_platform"] == PLATFORM
    assert meta["sources"] == "find-links %s; no-index" % house
    assert meta["excluded"] == [] and "# excluded: none\n" in text
    assert meta["resolved_at"] == "2026-12-05T13:47:43Z"
    assert meta["resolver"].startswith("uv 0.") and meta["resolver"] != "uv unknown"
    # round trip: the header's fingerprint is the set fingerprint of the pins, as a host computes it
    assert parsed["fingerprint"] == pkgnames.set_fingerprint(
        [(p["name"], p["version"]) for p in parsed["packages"].values()])
    assert text.startswith("# gpufleet.vllm lock v2\n# python-version: %s\n" % PY)


@needs_uv
def test_the_same_request_gives_the_same_lock(house):
    fixed = functools.partial(offline, house, now=lambda: __import__("datetime").datetime(2026, 1, 1))
    assert fixed() == fixed()


@needs_uv
def test_exclude_drops_a_dependency_and_what_only_it_pulled_in(house):
    parsed = lockfile.parse_lock(offline(house, exclude=["GGUF"]))
    assert sorted(parsed["packages"]) == ["lark", "nvidia-ml-py", "vllm"]
    assert parsed["meta"]["excluded"] == ["gguf"]


@needs_uv
def test_an_override_replaces_a_pinned_dependency(house):
    parsed = lockfile.parse_lock(offline(house, overrides=["lark==1.2.2"]))
    assert parsed["packages"]["lark"]["version"] == "1.2.2"


@needs_uv
def test_several_terms_and_the_package_of_the_header(house):
    parsed = lockfile.parse_lock(offline(house, "nvidia-ml-py", "vllm>=0.33,<0.34", package="vllm"))
    assert parsed["package"] == {"name": "vllm", "version": "0.33.0"}
    assert "gguf" not in parsed["packages"]


# --- failures --------------------------------------------------------------------------------------------------

@needs_uv
def test_an_unknown_version_is_not_found(house):
    with pytest.raises(uvcli.UvError) as err:
        offline(house, "vllm==0.99.0")
    assert err.value.kind == "not_found"
    assert "No build matching vllm==0.99.0" in err.value.message and house in err.value.message
    assert "nothing was changed on any host" in err.value.message


@needs_uv
@pytest.mark.parametrize("terms,overrides", [
    (["vllm==0.34.0", "lark==1.2.2"], []),   # vllm 0.34.0 pins lark==1.3.1
    (["vllm==0.34.0"], ["lark==9.9"]),       # a dependency's version that does not exist
])
def test_an_impossible_resolution_gives_uvs_reason(house, terms, overrides):
    with pytest.raises(uvcli.UvError) as err:
        offline(house, *terms, overrides=overrides)
    assert err.value.kind == "unsatisfiable"
    message = err.value.message
    assert message.startswith("The environment of %s cannot be resolved from find-links %s for Python %s on %s: "
                              "uv said: " % (", ".join(terms), house, PY, PLATFORM))
    assert "lark" in message and "unsatisfiable" in message and "No build matching" not in message


@needs_uv
def test_an_unreachable_index():
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(["vllm"], index_url="http://127.0.0.1:%d/simple" % port, python_version=PY, timeout=20,
                environment={"UV_HTTP_RETRIES": "0"})
    assert time.monotonic() - started < 20
    assert err.value.kind == "unreachable"
    assert "could not be reached" in err.value.message and "127.0.0.1:%d" % port in err.value.message


@needs_uv
def test_a_missing_wheelhouse(tmp_path):
    with pytest.raises(uvcli.UvError) as err:
        offline(str(tmp_path / "nope"))
    assert err.value.kind == "find_links"


def fake_uv(tmp_path, body):
    path = tmp_path / "uv"
    path.write_text("#!%s\nimport os, sys, time\n%s" % (sys.executable, body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_hung_uv_is_stopped_at_the_timeout(tmp_path):
    uv = fake_uv(tmp_path, "time.sleep(300)\n")
    started = time.monotonic()
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(["vllm"], index_url="http://127.0.0.1:9/simple", python_version="3.12", uv=uv, timeout=2)
    assert time.monotonic() - started < 6
    assert err.value.kind == "timeout"
    assert "took longer than 2 seconds (timeout), so uv was stopped" in err.value.message


def test_a_resolution_that_cannot_be_hash_locked_is_refused(tmp_path):
    # uv's output holding a dependency from a URL (as a git build of gguf would be)
    uv = fake_uv(tmp_path, """if sys.argv[1] == '--version':
    print('uv 0.13.9')
    sys.exit(0)
out = sys.argv[sys.argv.index('--output-file') + 1]
open(out, 'w').write('gguf @ git+https://github.com/ggml-org/llama.cpp@abc1234#subdirectory=gguf-py\\n'
                     'vllm==0.34.0 \\\\\\n    --hash=sha256:' + 'a' * 64 + '\\n')
""")
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(["vllm"], index_url="http://127.0.0.1:9/simple", python_version="3.12", uv=uv, timeout=20)
    assert err.value.kind == "bad_lock"
    assert "is a URL or path requirement" in err.value.message and "gguf @ git+" in err.value.message


def test_credentials_never_reach_the_lock(tmp_path):
    uv = fake_uv(tmp_path, """if sys.argv[1] == '--version':
    print('uv 0.13.9')
    sys.exit(0)
out = sys.argv[sys.argv.index('--output-file') + 1]
open(out, 'w').write('vllm==0.34.0 \\\\\\n    --hash=sha256:' + 'a' * 64 + '\\n    # from https://bob:s3cret@mirror.example/simple\\n')
""")
    text = ul.lock(["vllm"], index_url="https://bob:s3cret@mirror.example/simple", python_version="3.12", uv=uv)
    assert "s3cret" not in text
    assert "# sources: index https://***@mirror.example/simple\n" in text
    assert "# from https://***@mirror.example/simple" in text


def test_a_password_holding_an_at_sign_and_a_token_in_the_query_never_reach_the_lock(tmp_path):
    # (uv itself drops user:password from its "# from" lines, not a query's token)
    uv = fake_uv(tmp_path, """if sys.argv[1] == '--version':
    print('uv 0.13.9')
    sys.exit(0)
out = sys.argv[sys.argv.index('--output-file') + 1]
open(out, 'w').write('vllm==0.34.0 \\\\\\n    --hash=sha256:' + 'a' * 64 + '\\n    # from https://mirror.example/simple?token=SEKRET\\n')
""")
    text = ul.lock(["vllm"], index_url="https://user:p@ss@mirror.example/simple?token=SEKRET&page=2",
                   python_version="3.12", uv=uv)
    assert "SEKRET" not in text and "ss@" not in text and "user" not in text
    assert "# sources: index https://***@mirror.example/simple?token=REDACTED&page=2\n" in text
    assert "# from https://mirror.example/simple?token=REDACTED" in text


def test_without_credentials_in_uvs_words():
    words = ("error: Failed to fetch `https://a:b@c@idx.example/simple/vllm/?X-Amz-Signature=xyz&v=1` (see "
             "http://other.example/x?access_key=k1)")
    shown = uvcli.without_credentials(words)
    assert shown == ("error: Failed to fetch `https://***@idx.example/simple/vllm/?X-Amz-Signature=REDACTED&v=1` (see "
                     "http://other.example/x?access_key=REDACTED)")


def test_uvs_own_settings_from_the_control_nodes_environment_do_not_reach_uv(monkeypatch):
    # an index set by UV_EXTRA_INDEX_URL would change the resolution without being in the lock's sources
    monkeypatch.setenv("UV_EXTRA_INDEX_URL", "http://elsewhere.example/simple")
    monkeypatch.setenv("UV_INDEX", "x=http://elsewhere.example/simple")
    monkeypatch.setenv("UV_CACHE_DIR", "/var/cache/uv")
    env = uvcli.uv_environment(30, {"UV_INDEX_STRATEGY": "unsafe-best-match"})
    assert "UV_EXTRA_INDEX_URL" not in env and "UV_INDEX" not in env
    assert env["UV_CACHE_DIR"] == "/var/cache/uv" and env["UV_HTTP_TIMEOUT"] == "30"
    # given on purpose (the environment option): kept
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"


@pytest.mark.parametrize("kwargs, words", [
    ({"index_url": "https://mirror.example/simple\u2028# python-version: 3.11"}, "holds a control character"),
    ({"extra_index_urls": ["https://mirror.example/%d/simple" % n for n in range(80)]},
     "more than a lock's sources line holds"),
])
def test_values_a_lock_cannot_hold_are_refused_before_uv_runs(tmp_path, kwargs, words):
    marker = tmp_path / "ran"
    uv = fake_uv(tmp_path, "open(%r, 'w').write('ran')\nsys.exit(1)\n" % str(marker))
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(["vllm"], python_version="3.12", uv=uv, **kwargs)
    assert words in err.value.message and err.value.kind == "bad_input"
    assert not marker.exists()


def test_an_output_larger_than_a_lock_may_be_is_refused_unread(tmp_path):
    uv = fake_uv(tmp_path, """if sys.argv[1] == '--version':
    print('uv 0.13.9')
    sys.exit(0)
out = sys.argv[sys.argv.index('--output-file') + 1]
open(out, 'w').write('vllm==0.34.0 --hash=sha256:' + 'a' * 64 + '\\n' + '# via x\\n' * (1024 * 1024))
""")
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(["vllm"], index_url="http://127.0.0.1:9/simple", python_version="3.12", uv=uv, timeout=20)
    assert err.value.kind == "bad_lock"
    assert "larger than the 4 MiB a lock may have" in err.value.message


@needs_uv
def test_no_temporary_file_is_left_behind(house, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    offline(house, exclude=["gguf"])
    with pytest.raises(uvcli.UvError):
        offline(house, "vllm==0.99.0", exclude=["gguf"])
    with pytest.raises(uvcli.UvError):
        ul.lock(["vllm"], python_version="3.12", uv=fake_uv(tmp_path, "time.sleep(300)\n"), timeout=1)
    assert os.listdir(str(scratch)) == []


def never(*args, **kwargs):
    raise AssertionError("uv must not run")


@pytest.mark.parametrize("terms,kwargs,words", [
    (["vllm; python_version < '3.13'"], {}, "term \"vllm; python_version < '3.13'\" is not a package name with"),
    (["vllm @ https://evil.example/vllm.whl"], {}, "is not a package name with an optional version specifier"),
    (["vllm[audio]==0.33.0"], {}, "is not a package name with"),
    (["--index-url=https://evil.example"], {}, "is not a package name"),
    (["vllm==0.33.0\n-e x"], {}, "term 'vllm==0.33.0\\n-e x' holds a control character"),
    (["vllm", "VLLM==0.33.0"], {}, "names vllm a second time"),
    ([], {}, "No requirement was given"),
    (["vllm"], {"exclude": ["vllm"]}, "exclude item 'vllm' is one of the requirements"),
    (["vllm"], {"exclude": ["gguf; x"]}, "exclude item 'gguf; x' is not a package name"),
    (["vllm"], {"exclude": ["lark"], "overrides": ["lark==1.2.2"]}, "is also given in overrides"),
    (["vllm"], {"overrides": ["lark @ file:///evil"]}, "overrides item 'lark @ file:///evil' is not"),
    (["vllm"], {"python_version": ""}, "is not the hosts' Python version such as 3.12"),
    (["vllm"], {"python_version": "3.12.3"}, "is not the hosts' Python version"),
    (["vllm"], {"python_platform": ""}, "python_platform is empty"),
    (["vllm"], {"python_platform": "-x"}, "python_platform '-x' starts with '-'"),
    (["vllm"], {"index_url": "--no-index"}, "starts with '-'"),
    (["vllm"], {"package_index": "https://x\n--no-index"}, "holds a control character"),
    (["vllm"], {"package": "torch"}, "package 'torch' is not the name of one of the requirements"),
    (["vllm"], {"no_index": True}, "no_index is set but no find_links"),
])
def test_bad_input_is_refused_before_uv_runs(terms, kwargs, words):
    kwargs.setdefault("python_version", "3.12")
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(terms, runner=never, **kwargs)
    assert err.value.kind == "bad_input"
    assert words in err.value.message


# --- a real HTTP index with a per-commit directory ---------------------------------------------------------------

def write_simple(root, prefix, wheels):
    """A PEP 503 index under ROOT/PREFIX: one page per project, links with #sha256= fragments."""
    by_project = {}
    for path in wheels:
        project = pkgnames.canonical_name(os.path.basename(path).split("-")[0])
        by_project.setdefault(project, []).append(path)
    for project, paths in by_project.items():
        page = os.path.join(root, prefix, project)
        os.makedirs(page)
        links = "".join('<a href="/files/%s#%s">%s</a>\n' % (os.path.basename(p), sha256(p).replace(":", "="),
                                                             os.path.basename(p)) for p in paths)
        with open(os.path.join(page, "index.html"), "w") as handle:
            handle.write("<!DOCTYPE html><html><body>\n%s</body></html>\n" % links)


@pytest.fixture
def index(tmp_path):
    """http://127.0.0.1:PORT: /simple/ holds every wheel but vllm 0.34.0; /c0ffee/ (a commit) holds vllm 0.34.0."""
    root = tmp_path / "www"
    files = root / "files"
    files.mkdir(parents=True)
    paths = {}
    for name, version, requires in WHEELS:
        paths[(name, version)] = make_wheel(files, name, version, requires)
    nightly = paths.pop(("vllm", "0.34.0"))
    write_simple(str(root), "simple", list(paths.values()))
    write_simple(str(root), "c0ffee", [nightly])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@needs_uv
def test_a_per_commit_index_gives_that_commits_build(index):
    text = ul.lock(["vllm"], index_url=index + "/simple", extra_index_urls=[index + "/c0ffee"],
                   package_index=index + "/c0ffee/", python_version=PY, timeout=60)
    parsed = lockfile.parse_lock(text)
    assert parsed["package"]["version"] == "0.34.0"
    assert parsed["meta"]["sources"] == "index %s/simple; extra-index %s/c0ffee" % (index, index)


@needs_uv
def test_an_unknown_commit_is_not_found_instead_of_falling_back_to_the_main_index(index):
    # the commit's index answers 404: uv alone would take vllm 0.33.0 from /simple/ without a word
    quiet = ul.lock(["vllm"], index_url=index + "/simple", extra_index_urls=[index + "/deadbeef"],
                    python_version=PY, timeout=60)
    assert lockfile.parse_lock(quiet)["package"]["version"] == "0.33.0"
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(["vllm"], index_url=index + "/simple", extra_index_urls=[index + "/deadbeef"],
                package_index=index + "/deadbeef", python_version=PY, timeout=60)
    assert err.value.kind == "not_found"
    assert "vllm was not found in %s/deadbeef (package_index): uv took it from %s/simple" % (index, index) \
        in err.value.message
    assert "the commit is unknown" in err.value.message


@needs_uv
def test_an_index_that_does_not_exist_is_not_found(index):
    with pytest.raises(uvcli.UvError) as err:
        ul.lock(["vllm"], index_url=index + "/no-such-index", python_version=PY, timeout=60)
    assert err.value.kind == "not_found"


# --- the lock is what uv installs, exactly --------------------------------------------------------------------

def uv_run(args, tmp_path, timeout=120):
    env = dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uv-cache"), NO_COLOR="1", UV_NO_CONFIG="1")
    return subprocess.run([uvcli.find_uv("")] + args, capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


def installed(venv):
    lib = os.path.join(venv, "lib", "python%s" % PY, "site-packages")
    return sorted(d[:-len(".dist-info")] for d in os.listdir(lib) if d.endswith(".dist-info"))


@needs_uv
def test_uv_pip_sync_installs_the_lock_exactly_and_refuses_a_tampered_wheel(house, tmp_path):
    lock_file = tmp_path / "fleet.lock"
    lock_file.write_text(offline(house))
    venv = str(tmp_path / "venv")
    made = uv_run(["venv", "--python", sys.executable, "--no-python-downloads", venv], tmp_path)
    assert made.returncode == 0, made.stderr
    sync = ["pip", "sync", "--require-hashes", "--no-index", "--find-links", house, "--python",
            os.path.join(venv, "bin", "python"), str(lock_file)]
    done = uv_run(sync, tmp_path)
    assert done.returncode == 0, done.stderr
    assert installed(venv) == ["gguf-0.17.1", "lark-1.3.1", "numpy_lite-1.0", "nvidia_ml_py-13.615.71",
                               "vllm-0.34.0"]

    # a tampered mirror: same file name and version, other bytes; a fresh environment and cache
    os.remove(os.path.join(house, "gguf-0.17.1-py3-none-any.whl"))
    make_wheel(house, "gguf", "0.17.1", ["numpy-lite>=1"], payload="import os  # not what was locked\n")
    other = str(tmp_path / "venv2")
    assert uv_run(["venv", "--python", sys.executable, "--no-python-downloads", other], tmp_path).returncode == 0
    sync[sync.index("--python") + 1] = os.path.join(other, "bin", "python")
    refused = uv_run(sync + ["--no-cache"], tmp_path)
    assert refused.returncode != 0
    assert "hash mismatch" in refused.stderr.lower() and "gguf" in refused.stderr
    assert installed(other) == []


@needs_uv
def test_a_lock_whose_pins_were_edited_is_refused(house):
    text = offline(house)
    with pytest.raises(lockfile.LockError) as err:
        lockfile.parse_lock(text.replace("lark==1.3.1", "lark==1.2.2"), where="fleet.lock")
    assert "edited after it was made" in str(err.value)


# --- as Ansible loads it ---------------------------------------------------------------------------------------

def loaded_lookup():
    """The lookup with its options defined from its own DOCUMENTATION, as the plugin loader does."""
    from ansible import constants as C
    defs = yaml.safe_load(ul.DOCUMENTATION)["options"]
    C.config.initialize_plugin_configuration_definitions("lookup", "gpufleet.vllm.uv_lock", defs)
    lookup = ul.LookupModule()
    lookup._load_name = "gpufleet.vllm.uv_lock"
    return lookup


@needs_uv
def test_the_lookup_plugin(house):
    lookup = loaded_lookup()
    result = lookup.run(["vllm==0.33.0"], variables={}, find_links=[house], no_index=True, python_version=PY)
    assert len(result) == 1
    assert lockfile.parse_lock(result[0])["package"] == {"name": "vllm", "version": "0.33.0"}
    assert lockfile.parse_lock(result[0])["meta"]["python_platform"] == "x86_64-manylinux_2_28"
    with pytest.raises(AnsibleLookupError) as err:
        lookup.run(["vllm==0.99.0"], variables={}, find_links=[house], no_index=True, python_version=PY)
    assert "No build matching vllm==0.99.0" in str(err.value)


# --- a kept lock, no_deps, torch_backend -----------------------------------------------------------------------

@needs_uv
def test_a_kept_lock_is_read_back_as_it_is_and_nothing_is_resolved(house, tmp_path):
    text = offline(house)
    kept = tmp_path / "fleet.lock"
    kept.write_text(text)
    lookup = loaded_lookup()
    # no index, no uv needed: a lock file is read, never resolved again
    assert lookup.run([], variables={}, lock_file=str(kept), uv="/nonexistent/uv") == [text]


def test_a_kept_lock_made_from_other_sources_is_refused_when_asked_to_check_them(house, tmp_path):
    kept = tmp_path / "fleet.lock"
    kept.write_text(offline(house))
    lookup = loaded_lookup()
    same = dict(lock_file=str(kept), check_sources=True, find_links=[house], no_index=True)
    assert lookup.run([], variables={}, **same) == [kept.read_text()]
    with pytest.raises(AnsibleLookupError) as err:
        lookup.run([], variables={}, lock_file=str(kept), check_sources=True,
                   index_url="https://wheels.example/nightly")
    message = str(err.value)
    assert "was made from no-index" not in message  # the header's words, as written
    assert "was made from find-links %s; no-index, and this run's package sources are index " \
           "https://wheels.example/nightly" % house in message
    assert "reinstall_nightly_commit" in message and "Nothing was changed on any host" in message


@pytest.mark.parametrize("case, words", [
    ("edited", "edited after it was made"),
    ("missing", "cannot be read: No such file or directory"),
    ("directory", "is not a regular file"),
    ("fifo", "is not a regular file"),
    ("huge", "is larger than 4194304 bytes"),
    ("not_a_lock", "missing header"),
])
def test_a_kept_lock_that_is_not_one_is_refused(house, tmp_path, case, words):
    kept = tmp_path / "fleet.lock"
    if case == "edited":
        kept.write_text(offline(house).replace("lark==1.3.1", "lark==1.2.2"))
    elif case == "directory":
        kept.mkdir()
    elif case == "fifo":
        os.mkfifo(str(kept))
    elif case == "huge":
        kept.write_bytes(b"#" * (lockfile.MAX_BYTES + 1))
    elif case == "not_a_lock":
        kept.write_text("vllm==0.33.0\n")
    with pytest.raises(AnsibleLookupError) as err:
        loaded_lookup().run([], variables={}, lock_file=str(kept))
    assert words in str(err.value)
    assert "Nothing was changed on any host." in str(err.value)


def test_a_kept_lock_and_requirements_together_are_refused(tmp_path):
    with pytest.raises(AnsibleLookupError, match="not both"):
        loaded_lookup().run(["vllm"], variables={}, lock_file=str(tmp_path / "fleet.lock"))


def test_a_torch_backend_reaches_uv_and_a_bad_one_is_refused(house):
    seen = []

    def runner(argv, stdin, env, timeout, workdir=None):
        seen.append(argv)
        return 1, "", "error: boom"

    with pytest.raises(uvcli.UvError):
        offline(house, torch_backend="cu130", runner=runner, uv=sys.executable)
    compile_argv = [argv for argv in seen if "compile" in argv][0]
    assert compile_argv[compile_argv.index("--torch-backend") + 1] == "cu130"
    with pytest.raises(uvcli.UvError, match="torch_backend"):
        offline(house, torch_backend="--index-url=http://x", runner=runner, uv=sys.executable)


# --- version and resolve: the resolution and the lock in one call ----------------------------------------------

@needs_uv
@pytest.mark.parametrize("version, expected", [("latest", "0.34.0"), ("", "0.34.0"), ("0.33.0", "0.33.0"),
                                               ("<0.34", "0.33.0")])
def test_resolve_locks_exactly_the_version_the_request_resolves_to(house, version, expected):
    result = loaded_lookup().run(["vllm", "nvidia-ml-py"], variables={}, version=version, resolve=True,
                                 find_links=[house], no_index=True, python_version=PY)
    parsed = lockfile.parse_lock(result[0])
    assert parsed["package"] == {"name": "vllm", "version": expected}
    assert parsed["meta"]["package"] == "vllm==%s" % expected


@needs_uv
def test_resolve_takes_the_newest_even_when_its_environment_cannot_be_locked(house):
    """As the rollout resolved, then locked: the newest build the sources offer is the target; when its
    dependencies cannot be resolved the lock fails, naming it, instead of quietly locking an older build (what a
    bare name would give)."""
    make_wheel(house, "vllm", "0.35.0", ["not-on-the-mirror>=1"])
    bare = loaded_lookup().run(["vllm"], variables={}, find_links=[house], no_index=True, python_version=PY)
    assert lockfile.parse_lock(bare[0])["package"]["version"] == "0.34.0"
    with pytest.raises(AnsibleLookupError) as err:
        loaded_lookup().run(["vllm"], variables={}, version="latest", resolve=True, find_links=[house],
                            no_index=True, python_version=PY)
    assert "vllm==0.35.0" in str(err.value) and "Nothing was changed on any host" in str(err.value)


@needs_uv
@pytest.mark.parametrize("version, expected", [("0.33.0", "0.33.0"), ("v0.33.0", "0.33.0"), (">=0.33,<0.34", "0.33.0"),
                                               ("latest", "0.34.0")])
def test_a_version_without_resolve_is_the_requirement_locked(house, version, expected):
    result = loaded_lookup().run(["vllm"], variables={}, version=version, find_links=[house], no_index=True,
                                 python_version=PY)
    assert lockfile.parse_lock(result[0])["package"]["version"] == expected


def test_first_term_resolves_with_the_locks_own_sources_and_bounds():
    seen = []

    def resolver(name, version, **sources):
        seen.append((name, version, sources))
        return "0.16.0rc2.dev344+gea5f903f8"

    sources = dict(index_url="https://mirror.example/simple", extra_index_urls=["https://wheels.example/c0ffee"],
                   find_links=[], no_index=False, prerelease="allow", python_version="3.12",
                   python_platform="x86_64-manylinux_2_36", uv="/opt/uv", timeout=42, environment={"A": "1"})
    assert ul.first_term(["vllm", "lark"], "", True, resolver, **sources) == [
        "vllm==0.16.0rc2.dev344+gea5f903f8", "lark"]
    assert seen == [("vllm", "latest", sources)]
    assert ul.first_term(["vllm==0.33.0"], "", False, resolver) == ["vllm==0.33.0"]
    assert len(seen) == 1


@pytest.mark.parametrize("terms, kwargs, words", [
    (["vllm==0.33.0"], {"version": "0.34.0"}, "must be a bare package name"),
    (["vllm>=0.33"], {"resolve": True}, "must be a bare package name"),
    ([], {"resolve": True}, "must be a bare package name"),
    (["vllm"], {"version": "0.33.0; os_name=='nt'"}, "is not a version"),
    (["vllm"], {"version": "newest please"}, "is not a version"),
])
def test_version_and_resolve_refuse_what_is_not_a_name_and_a_version(terms, kwargs, words):
    def resolver(*_args, **_kwargs):
        raise AssertionError("nothing may be resolved")
    with pytest.raises(uvcli.UvError) as err:
        ul.first_term(terms, resolver=resolver, **kwargs)
    assert words in err.value.message


@pytest.mark.parametrize("kwargs", [{"version": "0.33.0"}, {"resolve": True}])
def test_a_kept_lock_and_a_version_to_resolve_together_are_refused(tmp_path, kwargs):
    with pytest.raises(AnsibleLookupError, match="not both"):
        loaded_lookup().run([], variables={}, lock_file=str(tmp_path / "fleet.lock"), **kwargs)
