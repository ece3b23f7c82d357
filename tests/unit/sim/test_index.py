# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The test world's package index (scripts/index.sh, tests/sim/index_server.py), on loopback.

The real pypiserver serves a small world made here: a wheelhouse with a
``vllm`` 0.33.0 that pins ``lark==1.2.2``, a "nightly" directory with the
second build made by tests/sim/rebuild_wheel.py (``lark==1.3.1``, ``gguf``
added) and its extra dependencies. The real uv locks and installs against
it. The last test does the same with the real wheelhouse and the real
nightly build where scripts/bootstrap.sh has made them.
"""

from __future__ import absolute_import, division, print_function

import base64
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile

import pytest

from helpers import REPO, load_source

rebuild = load_source("gpufleet_rebuild_wheel_for_index", "tests", "sim", "rebuild_wheel.py")

INDEX_SH = os.path.join(REPO, "scripts", "index.sh")
SERVER = os.path.join(REPO, "tests", "sim", "index_server.py")
VENV = sys.prefix
UV = shutil.which("uv") or os.path.join(VENV, "bin", "uv")
COMMIT = "feedc0de" * 5


def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory, name, version, requires=()):
    """A small real wheel: one module, METADATA with the requirements, a true RECORD."""
    dist = "%s-%s.dist-info" % (name, version)
    members = {
        "%s/__init__.py" % name: ("VERSION = %r\n" % version).encode(),
        dist + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s\n" % (
            name, version, "".join("Requires-Dist: %s\n" % r for r in requires))).encode(),
        dist + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpufleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join("%s,%s,%d\n" % (p, _hash(d), len(d)) for p, d in members.items()) + dist + "/RECORD,,\n"
    path = os.path.join(str(directory), "%s-%s-py3-none-any.whl" % (name, version))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        zf.writestr(dist + "/RECORD", record)
    return path


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.status, reply.read().decode()


def links(url):
    status, body = get(url)
    assert status == 200
    return dict(re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', body))


@pytest.fixture
def world(tmp_path):
    """A wheelhouse, a nightly directory with the second build, and index.sh's environment."""
    cache = tmp_path / "cache"
    wheelhouse = cache / "wheelhouse"
    index_dir = cache / "index"
    nightly = index_dir / "nightly"
    for d in (wheelhouse, nightly):
        d.mkdir(parents=True)
    stable = make_wheel(wheelhouse, "vllm", "0.33.0", ["lark==1.2.2", "numpy"])
    make_wheel(wheelhouse, "lark", "1.2.2")
    make_wheel(wheelhouse, "numpy", "2.3.5")
    make_wheel(nightly, "lark", "1.3.1")
    make_wheel(nightly, "gguf", "0.19.0", ["numpy>=1.17"])
    assert rebuild.main([stable, str(tmp_path / "build"), "--version", "0.33.1.dev7", "--commit", COMMIT,
                         "--pin", "lark==1.3.1", "--add", "gguf==0.19.0"]) == 0
    port = free_port()
    env = dict(os.environ, GPUFLEET_CACHE=str(cache), GPUFLEET_WHEELHOUSE=str(wheelhouse),
               GPUFLEET_INDEX_DIR=str(index_dir), GPUFLEET_INDEX_ADDR="127.0.0.1",
               GPUFLEET_INDEX_PORT=str(port), GPUFLEET_VENV=VENV)
    env.pop("GPUFLEET_INDEX_URL", None)
    world = {"env": env, "port": port, "nightly": str(nightly), "index_dir": str(index_dir),
             "wheelhouse": str(wheelhouse), "tmp": tmp_path,
             "build": os.path.join(str(tmp_path / "build"),
                                   "vllm-0.33.1.dev7+gfeedc0defeed-py3-none-any.whl"),
             "url": "http://127.0.0.1:%d/simple/" % port, "base": "http://127.0.0.1:%d" % port}
    yield world
    subprocess.run([INDEX_SH, "down"], env=env, capture_output=True, timeout=60, check=False)


def index_sh(world, *args, check=True, **env):
    result = subprocess.run([INDEX_SH] + list(args), env=dict(world["env"], **env), capture_output=True,
                            text=True, timeout=120, check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def uv(*args, check=True):
    result = subprocess.run([UV] + list(args), capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, UV_NO_CONFIG="1"), check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def compile_lock(world, requirement, out, *extra):
    req = world["tmp"] / ("%s.in" % out)
    req.write_text(requirement + "\n")
    lock = world["tmp"] / ("%s.txt" % out)
    uv("pip", "compile", "--quiet", "--no-cache", "--index-url", world["url"], "--generate-hashes",
       "--python-version", "3.11", *extra, str(req), "-o", str(lock))
    return lock.read_text()


def pins(lock):
    return dict(re.findall(r"^([a-z0-9-]+)==(\S+)", lock, re.M))


def test_up_serves_both_builds_and_both_lark_versions_with_sha256(world):
    index_sh(world, "publish", world["build"], COMMIT)
    up = index_sh(world, "up")
    assert "index up at %s" % world["url"] in up.stderr
    assert index_sh(world, "url").stdout.strip() == world["url"]
    vllm = links(world["url"] + "vllm/")
    assert sorted(os.path.basename(h) for h in vllm) == [
        "vllm-0.33.0-py3-none-any.whl", "vllm-0.33.1.dev7+gfeedc0defeed-py3-none-any.whl"]
    with open(world["build"], "rb") as handle:
        assert vllm["/packages/vllm-0.33.1.dev7+gfeedc0defeed-py3-none-any.whl"] == \
            hashlib.sha256(handle.read()).hexdigest()
    assert sorted(os.path.basename(h) for h in links(world["url"] + "lark/")) == [
        "lark-1.2.2-py3-none-any.whl", "lark-1.3.1-py3-none-any.whl"]
    # no fallback to another index: an unknown project is a 404 here
    with pytest.raises(urllib.error.HTTPError) as err:
        get(world["url"] + "torch/")
    assert err.value.code == 404
    # again: nothing restarted
    pid = open(os.path.join(world["index_dir"], "run", "index.pid")).read().strip()
    again = index_sh(world, "up")
    assert "index already up at %s (pid %s)" % (world["url"], pid) in again.stderr


def test_lock_with_hashes_differs_in_lark_and_gguf_and_installs_exactly(world):
    index_sh(world, "publish", world["build"], COMMIT)
    index_sh(world, "up")
    t0 = time.monotonic()
    old = compile_lock(world, "vllm==0.33.0", "old")
    new = compile_lock(world, "vllm==0.33.1.dev7+gfeedc0defeed", "new")
    assert time.monotonic() - t0 < 60
    assert pins(old) == {"vllm": "0.33.0", "lark": "1.2.2", "numpy": "2.3.5"}
    assert pins(new) == {"vllm": "0.33.1.dev7+gfeedc0defeed", "lark": "1.3.1", "gguf": "0.19.0",
                         "numpy": "2.3.5"}
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", new)) == 4
    venv = world["tmp"] / "venv"
    uv("venv", "-q", "-p", sys.executable, str(venv))
    uv("pip", "install", "-q", "--no-cache", "--require-hashes", "--no-deps", "--index-url", world["url"],
       "-p", str(venv / "bin" / "python"), "-r", str(world["tmp"] / "new.txt"))
    listed = uv("pip", "list", "--format", "freeze", "-p", str(venv / "bin" / "python")).stdout
    assert set(listed.split()) == {"vllm==0.33.1.dev7+gfeedc0defeed", "lark==1.3.1", "gguf==0.19.0",
                                   "numpy==2.3.5"}


def test_a_wheel_changed_on_the_mirror_after_the_lock_fails_the_install(world):
    index_sh(world, "publish", world["build"], COMMIT)
    index_sh(world, "up")
    compile_lock(world, "vllm==0.33.1.dev7+gfeedc0defeed", "new")
    # the tampered mirror: lark 1.3.1 replaced by other bytes under the same name
    tampered = world["tmp"] / "tampered"
    tampered.mkdir()
    make_wheel(tampered, "lark", "1.3.1", ["evil==1.0"])
    shutil.copy(str(tampered / "lark-1.3.1-py3-none-any.whl"), os.path.join(world["nightly"], "lark-1.3.1-py3-none-any.whl"))
    venv = world["tmp"] / "venv"
    uv("venv", "-q", "-p", sys.executable, str(venv))
    result = uv("pip", "install", "--no-cache", "--require-hashes", "--no-deps", "--index-url", world["url"],
                "-p", str(venv / "bin" / "python"), "-r", str(world["tmp"] / "new.txt"), check=False)
    assert result.returncode != 0
    assert "lark" in result.stderr and re.search(r"[Hh]ash mismatch", result.stderr), result.stderr
    assert not (venv / "lib").exists() or "lark" not in uv("pip", "list", "-p", str(venv / "bin" / "python")).stdout


def test_a_published_wheel_is_listed_at_once(world):
    index_sh(world, "up")
    assert "vllm-0.33.1.dev7+gfeedc0defeed-py3-none-any.whl" not in str(links(world["url"] + "vllm/"))
    published = index_sh(world, "publish", world["build"], COMMIT).stdout.strip()
    assert published == os.path.join(world["nightly"], os.path.basename(world["build"]))
    assert not [n for n in os.listdir(world["nightly"]) if n.startswith(".publish-")]
    assert "/packages/vllm-0.33.1.dev7+gfeedc0defeed-py3-none-any.whl" in links(world["url"] + "vllm/")
    # a newer build, mid-rollout: listed at the next request, hashed as it is
    newer = world["tmp"] / "newer"
    newer.mkdir()
    path = make_wheel(newer, "vllm", "0.33.1.dev8")
    index_sh(world, "publish", path)
    with open(path, "rb") as handle:
        assert links(world["url"] + "vllm/")["/packages/vllm-0.33.1.dev8-py3-none-any.whl"] == \
            hashlib.sha256(handle.read()).hexdigest()


def test_unpublish_takes_a_build_out_of_the_index_and_its_commit_and_refuses_paths(world):
    index_sh(world, "publish", world["build"], COMMIT)
    index_sh(world, "up")
    name = os.path.basename(world["build"])
    assert "/packages/" + name in links(world["url"] + "vllm/")
    index_sh(world, "unpublish", name)
    assert "/packages/" + name not in links(world["url"] + "vllm/")
    assert not os.path.exists(os.path.join(world["nightly"], name))
    assert not os.path.exists(os.path.join(world["index_dir"], "commits", COMMIT, name))
    index_sh(world, "unpublish", name)  # gone already: nothing to do
    outside = world["tmp"] / "keep.whl"
    outside.write_text("x")
    for bad in ("../../keep.whl", str(outside), "", "vllm.tar.gz"):
        result = index_sh(world, "unpublish", bad, check=False)
        assert result.returncode != 0 and ("not a wheel's file name" in result.stderr or "usage" in result.stderr)
    assert outside.exists()


def test_per_commit_index_has_the_commits_build_only_and_unknown_commits_are_404(world):
    index_sh(world, "publish", world["build"], COMMIT)
    index_sh(world, "up")
    assert list(links("%s/%s/vllm/" % (world["base"], COMMIT))) == [
        "/%s/packages/vllm-0.33.1.dev7+gfeedc0defeed-py3-none-any.whl" % COMMIT]
    for url in ("%s/%s/vllm/" % (world["base"], "0" * 40), "%s/%s/" % (world["base"], "0" * 40)):
        with pytest.raises(urllib.error.HTTPError) as err:
            get(url)
        assert err.value.code == 404 and "no build of commit" in err.value.read().decode()
    # vLLM's way: the commit's index as an extra index URL
    lock = compile_lock(world, "vllm", "commit", "--extra-index-url", "%s/%s/" % (world["base"], COMMIT))
    assert pins(lock)["vllm"] == "0.33.1.dev7+gfeedc0defeed" and pins(lock)["lark"] == "1.3.1"
    assert "--hash=sha256:" in lock
    # an unknown commit: uv takes its index's 404 as "not here" and goes on to the main index, silently
    # (the stable build): whoever resolves "nightly at commit X" must ask <commit>/vllm/ itself first
    lock = compile_lock(world, "vllm", "unknown", "--extra-index-url", "%s/%s/" % (world["base"], "0" * 40))
    assert pins(lock)["vllm"] == "0.33.0"


def test_up_on_a_port_taken_by_another_program_fails_clearly(world):
    with socket.socket() as other:
        other.bind(("127.0.0.1", world["port"]))
        other.listen(1)
        result = index_sh(world, "up", check=False)
    assert result.returncode != 0
    assert "the index did not start: index_server: port %d on 127.0.0.1 is taken by another program" % world["port"] \
        in result.stderr
    assert "GPUFLEET_INDEX_PORT" in result.stderr
    assert not os.path.exists(os.path.join(world["index_dir"], "run", "index.pid"))


def test_bad_settings_are_refused(world):
    for env, message in (({"GPUFLEET_INDEX_PORT": "99999"}, "is not a TCP port"),
                         ({"GPUFLEET_INDEX_ADDR": "0.0.0.0"}, "does not listen on 0.0.0.0"),
                         ({"GPUFLEET_INDEX_ADDR": "host; rm -rf /"}, "is not an IPv4 address")):
        result = index_sh(world, "up", check=False, **env)
        assert result.returncode != 0 and message in result.stderr
    result = index_sh(world, "publish", str(world["tmp"] / "nothing.whl"), check=False)
    assert result.returncode != 0 and "no file" in result.stderr
    result = index_sh(world, "publish", world["build"], "not-a-commit", check=False)
    assert result.returncode != 0 and "expected 40 lowercase hex digits" in result.stderr


def _wait_gone(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        time.sleep(0.1)
    return False


def test_down_stops_it_and_kills_one_that_ignores_sigterm(world):
    index_sh(world, "up")
    pid_file = os.path.join(world["index_dir"], "run", "index.pid")
    pid = int(open(pid_file).read())
    index_sh(world, "down")
    assert _wait_gone(pid, 5) and not os.path.exists(pid_file)
    with pytest.raises(urllib.error.URLError):
        get(world["url"], timeout=2)
    # a server that does not stop on SIGTERM (stopped here): killed after the wait
    index_sh(world, "up")
    pid = int(open(pid_file).read())
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    result = index_sh(world, "down", GPUFLEET_INDEX_STOP_WAIT="1")
    assert "did not stop in 1 s: killing it" in result.stderr
    assert _wait_gone(pid, 5) and time.monotonic() - t0 < 10
    # down when nothing runs: nothing to do
    assert index_sh(world, "down").returncode == 0


REAL_INDEX = os.path.join(os.environ.get("GPUFLEET_CACHE") or os.path.join(
    os.path.expanduser("~"), ".cache", "gpufleet-vllm"), "index")


@pytest.mark.skipif(not os.path.isfile(os.path.join(REAL_INDEX, "nightly-build")),
                    reason="no nightly build yet (scripts/bootstrap.sh makes it)")
def test_real_world_lock_of_the_nightly_with_every_dependency(tmp_path):
    """The real wheelhouse and nightly directory, served on loopback (read only)."""
    wheel, commit = open(os.path.join(REAL_INDEX, "nightly-build")).read().split()
    version = os.path.basename(wheel).split("-")[1]
    wheelhouse = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(os.path.dirname(REAL_INDEX), "wheelhouse")
    port = free_port()
    access_log = open(str(tmp_path / "access.log"), "w")
    server = subprocess.Popen([sys.executable, SERVER, "--host", "127.0.0.1", "--port", str(port),
                               "--root", wheelhouse, "--root", os.path.join(REAL_INDEX, "nightly"),
                               "--commits", os.path.join(REAL_INDEX, "commits"),
                               "--ready-file", str(tmp_path / "ready")],
                              stdout=subprocess.DEVNULL, stderr=access_log)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        url = "http://127.0.0.1:%d/simple/" % port
        req = tmp_path / "req.in"
        locks = {}
        for name, spec in (("old", "vllm==0.33.0"), ("new", "vllm==" + version)):
            req.write_text(spec + "\n")
            uv("pip", "compile", "--quiet", "--no-cache", "--index-url", url, "--generate-hashes",
               "--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_36",
               str(req), "-o", str(tmp_path / (name + ".txt")))
            locks[name] = (tmp_path / (name + ".txt")).read_text()
        old, new = pins(locks["old"]), pins(locks["new"])
        assert (old["lark"], new["lark"]) == ("1.2.2", "1.3.1")
        assert "gguf" not in old and new["gguf"] == "0.19.0"
        assert len(new) > 150 and set(new) - set(old) == {"gguf"}
        assert new["vllm"] == version and commit[:12] in version
        assert locks["new"].count("--hash=sha256:") >= len(new)
        # the hashes come from the index's #sha256= fragments: uv read each wheel's metadata with
        # range requests, a few MB of the wheelhouse's GB
        access = (tmp_path / "access.log").read_text()
        sent = sum(int(n) for n in re.findall(r'"GET /packages/\S+ HTTP/1\.1" 20[06] (\d+)', access))
        assert 0 < sent < 100 * 2**20
    finally:
        server.terminate()
        server.wait(timeout=10)
        access_log.close()
