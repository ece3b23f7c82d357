# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""docs/modules.md lists exactly what the collection exports.

Every module (but one meta/runtime.yml routes elsewhere or deprecates),
every filter a filter plugin exports, every lookup, callback, role and
playbook has a row of the table, named by its kind; no row names what the
collection does not have.
"""

import glob
import importlib
import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _names(folder, pattern="*.py"):
    return {os.path.splitext(os.path.basename(path))[0]
            for path in glob.glob(os.path.join(REPO, folder, pattern)) if not os.path.basename(path).startswith("_")}


def _routed_modules():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        runtime = yaml.safe_load(handle) or {}
    return set(((runtime.get("plugin_routing") or {}).get("modules") or {}))


def _filters():
    names = set()
    for plugin in _names("plugins/filter"):
        module = importlib.import_module("ansible_collections.gpufleet.vllm.plugins.filter." + plugin)
        names |= set(module.FilterModule().filters())
    return names


def exported():
    return {
        "module": _names("plugins/modules") - _routed_modules(),
        "filter": _filters(),
        "lookup": _names("plugins/lookup"),
        "callback": _names("plugins/callback"),
        "role": {name for name in os.listdir(os.path.join(REPO, "roles"))
                 if os.path.isdir(os.path.join(REPO, "roles", name))},
        "playbook": _names("playbooks", "*.yml"),
    }


def listed():
    with open(os.path.join(REPO, "docs", "modules.md"), encoding="utf-8") as handle:
        text = handle.read()
    found = {}
    for kind, cell in re.findall(r"^\| (\w+) \| ([^|]+) \|", text, re.M):
        found.setdefault(kind, set()).update(re.findall(r"`(?:gpufleet\.vllm\.)?(\w+)`", cell))
    return found


@pytest.mark.parametrize("kind", ["module", "filter", "lookup", "callback", "role", "playbook"])
def test_docs_modules_lists_exactly_what_the_collection_exports(kind):
    have, documented = exported()[kind], listed().get(kind, set())
    assert not sorted(have - documented), "docs/modules.md has no %s row for %s" % (kind, sorted(have - documented))
    assert not sorted(documented - have), "docs/modules.md lists the %ss %s, which the collection does not export" % (
        kind, sorted(documented - have))


def _internal_plugins():
    """What carries the doc fragment gpufleet.vllm.internal: modules by their file, filters by their docs."""
    found = set()
    for path in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")) + glob.glob(
            os.path.join(REPO, "plugins", "filter", "*.yml")):
        with open(path, encoding="utf-8") as handle:
            if "gpufleet.vllm.internal" in handle.read():
                found.add(os.path.splitext(os.path.basename(path))[0])
    return found


def test_docs_modules_lists_the_internal_plugins_apart_from_the_operator_tools():
    with open(os.path.join(REPO, "docs", "modules.md"), encoding="utf-8") as handle:
        text = handle.read()
    operator, _sep, rest = text.partition("\n## Internal plugins\n")
    internal_part = rest.partition("\n## ")[0]
    names = {}
    for part, body in (("operator", operator), ("internal", internal_part)):
        names[part] = set()
        for cell in re.findall(r"^\| \w+ \| ([^|]+) \|", body, re.M):
            names[part].update(re.findall(r"`(?:gpufleet\.vllm\.)?(\w+)`", cell))
    marked = _internal_plugins()
    assert marked, "no plugin carries the internal doc fragment"
    assert not sorted(marked - names["internal"]), "internal, but not under 'Internal plugins': %s" % sorted(
        marked - names["internal"])
    assert not sorted(names["internal"] - marked), "under 'Internal plugins' without the internal fragment: %s" % sorted(
        names["internal"] - marked)
    assert not sorted(names["operator"] & marked), "internal plugins among the operator tools: %s" % sorted(
        names["operator"] & marked)
