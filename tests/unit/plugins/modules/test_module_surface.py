# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's module surface: meta/runtime.yml's routing, the documentation of every module, the names in use.

A redirect points at a module that exists and leaves no file under the old name; a tombstone names a module that is
gone; every module documents itself under its file's name; read-only modules carry the ``_info`` suffix; no role,
playbook or scenario calls a module by a redirected or removed name (a redirect is for operators' own playbooks).
"""

import ast
import glob
import os
import re

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULES_DIR = os.path.join(REPO, "plugins", "modules")
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(MODULES_DIR, "*.py"))
                 if not os.path.basename(p).startswith("_"))
PREFIX = "gpufleet.vllm."


def _runtime():
    with open(os.path.join(REPO, "meta", "runtime.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _routing():
    return ((_runtime().get("plugin_routing") or {}).get("modules") or {})


def _version(text):
    return tuple(int(part) for part in str(text).split("-", 1)[0].split("+", 1)[0].split("."))


def _collection_version():
    with open(os.path.join(REPO, "galaxy.yml"), encoding="utf-8") as handle:
        return _version(yaml.safe_load(handle)["version"])


def _docs(name):
    with open(os.path.join(MODULES_DIR, name + ".py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if getattr(target, "id", None) in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                    found[target.id] = node.value.value
    return found


def _redirected_and_removed():
    return sorted(old for old, entry in _routing().items() if "redirect" in entry or "tombstone" in entry)


def test_the_routing_is_read():
    assert len(MODULES) >= 16
    assert _routing(), "meta/runtime.yml has no plugin_routing for modules"


@pytest.mark.parametrize("old", sorted(_routing()), ids=str)
def test_each_routing_entry_is_valid(old):
    entry = _routing()[old]
    assert set(entry) <= {"redirect", "deprecation", "tombstone"}, entry
    assert not os.path.exists(os.path.join(MODULES_DIR, old + ".py")), (
        "%s is routed in meta/runtime.yml but still has a module file: the file would never run" % old)
    current = _collection_version()
    if "redirect" in entry:
        target = entry["redirect"]
        assert target.startswith(PREFIX) and target[len(PREFIX):] in MODULES, (
            "%s redirects to %s, which is not a module of this collection" % (old, target))
        assert "tombstone" not in entry
    if "tombstone" in entry:
        tomb = entry["tombstone"]
        assert set(tomb) == {"removal_version", "warning_text"}, tomb
        assert _version(tomb["removal_version"]) <= current, "a tombstone's removal_version must not be in the future"
    if "deprecation" in entry:
        dep = entry["deprecation"]
        assert set(dep) == {"removal_version", "warning_text"}, dep
        assert _version(dep["removal_version"]) > current, "a deprecation's removal_version must be in the future"
        if "redirect" in entry:
            assert entry["redirect"] in dep["warning_text"], "the warning names the module to use"


@pytest.mark.parametrize("name", MODULES, ids=str)
def test_every_module_is_documented_under_its_own_name(name):
    docs = _docs(name)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, "%s lacks %s" % (
        name, {"DOCUMENTATION", "EXAMPLES", "RETURN"} - set(docs))
    doc = yaml.safe_load(docs["DOCUMENTATION"])
    assert doc["module"] == name
    assert doc.get("short_description") and doc.get("description") and doc.get("author")
    assert doc.get("version_added") == "0.1.0", "nothing was released before 0.1.0"
    fragments = doc.get("extends_documentation_fragment") or []
    shared = [f for f in fragments if f in ("gpufleet.vllm.attributes", "gpufleet.vllm.attributes.info_module",
                                            "gpufleet.vllm.attributes.controller_writer")]
    assert len(shared) == 1 and "ansible.builtin.action_common_attributes" in fragments, (
        "%s does not extend its attributes from one of the collection's attributes fragments and ansible-core's" % name)
    # (of two fragments that set one attribute the first wins: ours gives the support, ansible-core's the words)
    assert fragments.index(shared[0]) < fragments.index("ansible.builtin.action_common_attributes")
    reads_only = name.endswith("_info")
    assert (shared[0] == "gpufleet.vllm.attributes.info_module") == reads_only, (
        "a module that only reads is named *_info and uses the info_module attributes, and only such a module")
    if not reads_only:
        assert set(doc.get("attributes") or {}) >= {"check_mode", "diff_mode"}, (
            "%s edits: it says itself what its check mode and diff mode do" % name)
    examples = yaml.safe_load(docs["EXAMPLES"])
    assert examples and any(PREFIX + name in task for task in examples), "%s's examples do not call it" % name
    assert isinstance(yaml.safe_load(docs["RETURN"]), dict)


@pytest.mark.parametrize("name", [m for m in MODULES if m.endswith("_info")], ids=str)
def test_info_modules_only_read(name):
    with open(os.path.join(MODULES_DIR, name + ".py"), encoding="utf-8") as handle:
        source = handle.read()
    assert not re.search(r"[\"']?changed[\"']?\s*[=:]\s*True\b", source), "%s may report a change" % name


def _calls(name):
    """Where a role or playbook runs module NAME as a task."""
    pattern = re.compile(r"^\s*-?\s*gpufleet\.vllm\.%s:\s*$" % re.escape(name))
    return [(path, number) for path, number, line in _uses()
            if path.startswith(("roles", "playbooks")) and path.endswith(".yml") and pattern.match(line)]


def _internal():
    """The modules documented as steps of the collection's own roles and playbooks (gpufleet.vllm.internal.module)."""
    return [name for name in MODULES if "gpufleet.vllm.internal.module" in (
        yaml.safe_load(_docs(name)["DOCUMENTATION"]).get("extends_documentation_fragment") or [])]


@pytest.mark.parametrize("name", _internal(), ids=str)
def test_an_internal_module_is_a_step_of_a_role_or_playbook(name):
    assert _calls(name), "%s is marked internal, but no role or playbook runs it: remove it" % name


def test_every_doc_fragment_is_used():
    fragments = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "plugins", "doc_fragments", "*.py")))
    text = ""
    for kind in ("modules", "filter", "lookup", "callback"):
        for path in glob.glob(os.path.join(REPO, "plugins", kind, "*.*")):
            with open(path, encoding="utf-8") as handle:
                text += handle.read()
    unused = [f for f in fragments if not re.search(r"gpufleet\.vllm\.%s\b" % f, text)]
    assert not unused, "doc fragments no plugin extends: %s" % unused


def _uses():
    """(path, line number, line) of every reference to a module in what the collection runs and ships."""
    roots = ["roles", "playbooks", "molecule", "inventories", "plugins", "benchmarks",
             os.path.join("tests", "unit"), os.path.join("tests", "integration"), os.path.join("tests", "sim")]
    for root in roots:
        for folder, _dirs, files in os.walk(os.path.join(REPO, root)):
            for file_name in files:
                if not file_name.endswith((".yml", ".yaml", ".py", ".j2", ".sh", ".md")):
                    continue
                path = os.path.join(folder, file_name)
                if path == os.path.abspath(__file__):
                    continue
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for number, line in enumerate(handle, 1):
                        if PREFIX in line:
                            yield os.path.relpath(path, REPO), number, line


def test_nothing_the_collection_runs_calls_an_old_name():
    old = _redirected_and_removed()
    if not old:
        pytest.skip("no module is redirected or removed")
    pattern = re.compile(r"gpufleet\.vllm\.(%s)(?![\w])" % "|".join(re.escape(n) for n in old))
    found = ["%s:%d: %s" % (path, number, line.strip()) for path, number, line in _uses() if pattern.search(line)]
    assert not found, "old module names still in use:\n" + "\n".join(found)


def test_every_module_named_in_a_task_exists():
    known = set(MODULES) | set(_routing())
    pattern = re.compile(r"^\s*-?\s*gpufleet\.vllm\.(\w+):\s*$")
    unknown = []
    for path, number, line in _uses():
        if path.endswith((".yml", ".yaml")) and not path.startswith(os.path.join("plugins", "filter")):
            match = pattern.match(line)
            if match and match.group(1) not in known and not _is_other_plugin(match.group(1)):
                unknown.append("%s:%d: %s" % (path, number, line.strip()))
    assert not unknown, "tasks call modules that do not exist:\n" + "\n".join(unknown)


def _is_other_plugin(name):
    """A lookup or filter of the collection named as a key (not a module call)."""
    return any(os.path.exists(os.path.join(REPO, "plugins", kind, name + ".py")) for kind in ("lookup", "filter"))
