# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every filter the collection exports is documented: a .yml beside its plugin file, named as the filter, with a
description, its input, EXAMPLES that call it and RETURN; and ansible-doc renders them all. A filter exported
without docs fails here: document it as an operator's tool, or keep its logic in module_utils and do not export it.

A filter that is a step of the collection's own roles and playbooks (exported only because their YAML calls it) says
so with the doc fragment gpufleet.vllm.internal, and one of those roles or playbooks must call it: an internal
filter nothing calls is not exported at all."""

import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
FILTERS = os.path.join(REPO, "plugins", "filter")


def exported():
    """{filter name: plugin file} of every FilterModule in plugins/filter/*.py."""
    names = {}
    for path in sorted(glob.glob(os.path.join(FILTERS, "*.py"))):
        plugin = os.path.basename(path)[:-3]
        if plugin == "__init__":
            continue
        module = importlib.import_module("ansible_collections.gpufleet.vllm.plugins.filter.%s" % plugin)
        for name in module.FilterModule().filters():
            assert name not in names, "%s is exported by both %s and %s" % (name, names[name], plugin)
            names[name] = plugin
    return names


EXPORTED = exported()


def test_the_collection_exports_filters():
    assert len(EXPORTED) > 10


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_an_exported_filter_is_documented(name):
    path = os.path.join(FILTERS, name + ".yml")
    assert os.path.isfile(path), "filter %s (plugins/filter/%s.py) is exported without docs: %s.yml is missing" % (
        name, EXPORTED[name], name)
    with open(path, encoding="utf-8") as handle:
        docs = yaml.safe_load(handle)
    doc = docs["DOCUMENTATION"]
    assert doc["name"] == name
    assert doc.get("short_description") and doc.get("description") and doc.get("version_added")
    assert "_input" in (doc.get("options") or {})
    examples = yaml.safe_load(docs["EXAMPLES"])
    assert isinstance(examples, list) and examples, "EXAMPLES of %s are not a list of tasks" % name
    assert "gpufleet.vllm.%s" % name in docs["EXAMPLES"]
    assert (docs.get("RETURN") or {}).get("_value", {}).get("description")


def test_every_filter_doc_belongs_to_an_exported_filter():
    documented = set(os.path.basename(path)[:-4] for path in glob.glob(os.path.join(FILTERS, "*.yml")))
    assert documented - set(EXPORTED) == set()


def _docs(name):
    with open(os.path.join(FILTERS, name + ".yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


INTERNAL = sorted(name for name in EXPORTED if os.path.isfile(os.path.join(FILTERS, name + ".yml")) and "gpufleet.vllm.internal"
                  in (_docs(name)["DOCUMENTATION"].get("extends_documentation_fragment") or []))


def _calls():
    """The text of every role's and playbook's YAML and templates."""
    texts = []
    for top in ("roles", "playbooks"):
        for folder, dummy, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith((".yml", ".yaml", ".j2")):
                    with open(os.path.join(folder, name), encoding="utf-8") as handle:
                        texts.append(handle.read())
    return "\n".join(texts)


def test_some_filters_are_internal_and_some_are_operator_tools():
    assert INTERNAL and len(INTERNAL) < len(EXPORTED)
    assert "rollout_rows" in INTERNAL and "rollout_host_plan" not in INTERNAL and "query" not in INTERNAL


@pytest.mark.parametrize("name", INTERNAL)
def test_an_internal_filter_is_called_by_a_role_or_playbook(name):
    assert re.search(r"gpufleet\.vllm\.%s\b" % name, _calls()), (
        "%s is documented as a step of the collection's roles and playbooks, but none calls it: do not export it"
        % name)


def _ansible_doc():
    tool = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    return tool if os.path.exists(tool) else shutil.which("ansible-doc")


@pytest.mark.skipif(_ansible_doc() is None, reason="ansible-doc not installed")
def test_ansible_doc_lists_and_renders_every_exported_filter(tmp_path):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), HOME=str(tmp_path))
    listed = subprocess.run([_ansible_doc(), "-t", "filter", "--list", "--json", "gpufleet.vllm"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, check=False, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr.decode()
    names = ["gpufleet.vllm.%s" % name for name in sorted(EXPORTED)]
    assert sorted(json.loads(listed.stdout)) == names
    shown = subprocess.run([_ansible_doc(), "-t", "filter", "--json"] + names, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, check=False, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr.decode()
    data = json.loads(shown.stdout)
    for name in names:
        assert data[name]["doc"]["short_description"] and data[name]["examples"] and data[name]["return"], name
        internal = name.rsplit(".", 1)[-1] in INTERNAL
        assert internal == any("not a stable interface" in note for note in data[name]["doc"].get("notes") or []), name
