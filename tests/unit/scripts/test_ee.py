# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/ee.sh playbook: ansible-playbook from the execution environment's venv and nothing else.

The rollout scenario runs the audit and a check-mode rollout through it, to
prove that the EE's own requirements and collections are enough. That
proof holds only if nothing of the caller's environment comes along: no
ANSIBLE_* setting (molecule's plugin paths), no collection but the EE's,
this checkout's tarball, and the connection to the simulated hosts. Here
a fake EE venv (an ansible-galaxy and an ansible-playbook that print what
they get) shows what the script hands over.
"""

import hashlib
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

FAKE_GALAXY = """#!/bin/bash
# collection build --output-path DIR SRC | collection install --force --collections-path DIR TARBALL
case "$2" in
  build) touch "$4/gpufleet-vllm-0.1.0.tar.gz" ;;
  install) mkdir -p "$5/ansible_collections/gpufleet/vllm" && echo '{}' >"$5/ansible_collections/gpufleet/vllm/MANIFEST.json" ;;
esac
"""
FAKE_PLAYBOOK = """#!/bin/bash
printf 'arg=%s\\n' "$@"
env | sort
# what the first and the last collection paths hold (gone once the script ends)
[[ -f "${ANSIBLE_COLLECTIONS_PATH%%:*}/ansible_collections/gpufleet/vllm/MANIFEST.json" ]] && echo "@installed"
for d in "${ANSIBLE_COLLECTIONS_PATH##*:}"/ansible_collections/*/*; do
  [[ -f "$d/plugins/connection/podman.py" ]] && echo "@linked ${d#*/ansible_collections/}"
done
exit 3
"""


def ee_hash():
    """scripts/ee.sh's ee_hash: the EE definition, its requirements and the ansible-builder pin."""
    data = b""
    for name in ("execution-environment.yml", os.path.join("requirements", "runtime.txt")):
        with open(os.path.join(REPO, name), "rb") as handle:
            data += handle.read()
    with open(os.path.join(REPO, "requirements", "control.txt"), "rb") as handle:
        data += b"".join(line for line in handle if line.startswith(b"ansible-builder=="))
    return hashlib.sha256(data).hexdigest()[:16]


def fake_ee(tmp_path, stamp=True):
    venv = tmp_path / "ee"
    (venv / "bin").mkdir(parents=True)
    for name, text in (("ansible-galaxy", FAKE_GALAXY), ("ansible-playbook", FAKE_PLAYBOOK)):
        (venv / "bin" / name).write_text(text)
        (venv / "bin" / name).chmod(0o755)
    if stamp:
        (venv / (".installed-" + ee_hash())).touch()
    return venv


def run(tmp_path, venv, *args):
    env = dict(os.environ)
    env.update({
        "GPUFLEET_EE_VENV": str(venv),
        "GPUFLEET_CACHE": str(tmp_path / "cache"),
        "GPUFLEET_SCENARIO_REPORTS": "/reports/of/the/scenario",
        "ANSIBLE_LIBRARY": "/leaked/library",
        "ANSIBLE_COLLECTIONS_PATH": "/leaked/collections",
        "ANSIBLE_FILTER_PLUGINS": "/leaked/filters",
        "SOME_TOKEN": "not-for-the-ee",
    })
    return subprocess.run([os.path.join(REPO, "scripts", "ee.sh"), "playbook"] + list(args),
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_playbook_gets_the_ee_and_nothing_of_the_caller(tmp_path):
    venv = fake_ee(tmp_path)
    result = run(tmp_path, venv, "-i", "inventory", "playbooks/audit.yml")
    assert result.returncode == 3, result.stderr  # ansible-playbook's own exit code
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("arg=")] == ["arg=-i", "arg=inventory", "arg=playbooks/audit.yml"]
    env = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith(("arg=", "@")))
    assert "/leaked" not in result.stdout and "SOME_TOKEN" not in env
    assert sorted(name for name in env if name.startswith("ANSIBLE_")) == [
        "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_CONFIG", "ANSIBLE_NOCOLOR"]
    assert env["ANSIBLE_CONFIG"] == os.path.join(REPO, "ansible.cfg")
    assert env["GPUFLEET_SCENARIO_REPORTS"] == "/reports/of/the/scenario"
    assert env["PATH"].split(":")[0] == str(venv / "bin")
    paths = env["ANSIBLE_COLLECTIONS_PATH"].split(":")
    # the tarball's install, the EE's collections, the simulated hosts' connection and containers.podman under it
    assert len(paths) == 4
    assert paths[1] == str(venv / "collections")
    assert paths[2] == os.path.join(REPO, "tests", "sim", "collections")
    assert [line for line in lines if line.startswith("@")] == ["@installed", "@linked containers/podman"]
    # (all of it in a temporary directory, removed afterwards)
    assert not os.path.exists(paths[0]) and not os.path.exists(paths[3])


def test_a_stale_ee_venv_is_refused(tmp_path):
    venv = fake_ee(tmp_path, stamp=False)
    (venv / ".installed-0000000000000000").touch()
    result = run(tmp_path, venv, "playbooks/audit.yml")
    assert result.returncode == 1
    assert "missing or stale" in result.stderr and "scripts/bootstrap.sh" in result.stderr
    assert "arg=" not in result.stdout
