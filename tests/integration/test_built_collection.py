# SPDX-License-Identifier: GPL-3.0-or-later
"""The built tarball, installed with ansible-galaxy, works by FQCN.

scripts/test.sh (stage "build") builds the collection, installs the tarball
into a directory of its own and runs this file with ANSIBLE_COLLECTIONS_PATH
pointing there, so nothing here can come from the checkout.
"""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")
INSTALLED = os.path.join(COLLECTIONS, "ansible_collections", "gpufleet", "vllm")
BIN = os.path.dirname(sys.executable)
MODULES = sorted(
    name[:-3] for name in os.listdir(os.path.join(REPO, "plugins", "modules"))
    if name.endswith(".py") and not name.startswith("_")
)

pytestmark = pytest.mark.skipif(
    not os.path.isfile(os.path.join(INSTALLED, "MANIFEST.json")),
    reason="run through scripts/test.sh build (needs the installed tarball)",
)


def run(*argv, **kwargs):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, **kwargs)


def test_installed_from_tarball_not_a_link():
    assert not os.path.islink(INSTALLED)
    manifest = json.load(open(os.path.join(INSTALLED, "MANIFEST.json")))
    assert manifest["collection_info"]["namespace"] == "gpufleet"
    assert manifest["collection_info"]["name"] == "vllm"
    # development clutter stays out of the tarball
    for clutter in ("molecule", ".ci", "scripts", ".cache", ".venv"):
        assert not os.path.exists(os.path.join(INSTALLED, clutter)), clutter


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders(module):
    result = run(os.path.join(BIN, "ansible-doc"), "-t", "module", "gpufleet.vllm." + module)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert INSTALLED in text or "gpufleet.vllm." + module in text
    for section in ("OPTIONS", "ATTRIBUTES", "EXAMPLES", "RETURN VALUES"):
        assert section in text, "%s: no %s section" % (module, section)


def test_roles_and_playbooks_are_in_the_tarball():
    for role in os.listdir(os.path.join(REPO, "roles")):
        assert os.path.isfile(os.path.join(INSTALLED, "roles", role, "meta", "argument_specs.yml")), role
    # every file under playbooks/ (the playbooks and the task files they import, playbooks/tasks/)
    for top, dummy, names in os.walk(os.path.join(REPO, "playbooks")):
        for name in names:
            relative = os.path.relpath(os.path.join(top, name), REPO)
            assert os.path.isfile(os.path.join(INSTALLED, relative)), relative


def test_modules_run_by_fqcn_from_the_tarball(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    config = {"architectures": ["DeepseekV3ForCausalLM"],
              "quantization_config": {"quant_method": "compressed-tensors",
                                      "kv_cache_scheme": {"num_bits": 8, "type": "float"}}}
    (model / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "embed_debug_tp0.pt").write_bytes(b"x" * 1000)
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - gpufleet.vllm.sm120_config:\n"
        "        model_dirs: [%s]\n"
        "        force: true\n"
        "      register: cfg\n"
        "    - gpufleet.vllm.remove_artifacts:\n"
        "        paths: [%s]\n"
        "      register: dumps\n"
        "    - ansible.builtin.assert:\n"
        "        that:\n"
        "          - cfg is changed\n"
        "          - dumps.count == 1\n"
        "          - dumps.bytes_freed == 1000\n" % (model, dumps)
    )
    result = run(os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                 "-e", "ansible_python_interpreter=" + sys.executable, str(playbook))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kv_cache_scheme" not in (model / "config.json").read_text()
    assert not (dumps / "embed_debug_tp0.pt").exists()
