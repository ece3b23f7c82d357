# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/lib.sh: the test world's index address on a fresh machine, where podman comes with bootstrap.

lib.sh is sourced before bootstrap installs podman, so its first reading of
the podman network's gateway finds nothing; test.sh and demo.sh read it
again once bootstrap has run. An empty GPUFLEET_INDEX_URL sent every
simulated host's uv to PyPI (the molecule reinstall and rollout scenarios
failed on a fresh machine).
"""

import os
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FAKE_PODMAN = """#!/bin/sh
# podman network inspect podman --format ...: the default network's gateway
[ "$1 $2 $3" = "network inspect podman" ] && echo "10.88.0.1 " && exit 0
exit 125
"""


def run(script, tmp_path, with_podman_later):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    later = tmp_path / "later"
    later.mkdir(exist_ok=True)
    (later / "podman").write_text(FAKE_PODMAN)
    (later / "podman").chmod(0o755)
    # (a PATH of the few tools lib.sh uses, none of them podman, whatever this machine has)
    for tool in ("dirname", "tr", "grep", "head", "ln"):
        path = shutil.which(tool)
        if path and not (bindir / tool).exists():
            os.symlink(path, str(bindir / tool))
    env = {"HOME": str(tmp_path), "PATH": str(bindir), "GPUFLEET_CACHE": str(tmp_path / "cache")}
    body = 'source "%s/scripts/lib.sh"\necho "first=$GPUFLEET_INDEX_URL"\n' % REPO
    if with_podman_later:
        # what bootstrap does: podman is on the PATH afterwards
        body += 'ln -s "%s/podman" "%s/podman"\n' % (later, bindir)
    body += script + '\necho "after=$GPUFLEET_INDEX_URL"\n'
    proc = subprocess.run([shutil.which("bash"), "-c", body], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_the_index_url_is_read_again_once_bootstrap_brought_podman(tmp_path):
    seen = run("index_env", tmp_path, with_podman_later=True)
    assert seen["first"] == ""
    assert seen["after"] == "http://10.88.0.1:8765/simple/"


def test_a_url_given_by_the_operator_is_kept(tmp_path):
    seen = run("GPUFLEET_INDEX_URL=http://127.0.0.1:9/simple/; index_env", tmp_path, with_podman_later=True)
    assert seen["after"] == "http://127.0.0.1:9/simple/"


def test_test_sh_and_demo_sh_read_it_again_after_bootstrap():
    for name in ("test.sh", "demo.sh"):
        with open(os.path.join(REPO, "scripts", name), encoding="utf-8") as handle:
            text = handle.read()
        after = text.split("scripts/bootstrap.sh", 2)[-1]
        assert "\nindex_env\n" in after, name
