# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a control node needs to run the playbooks, in step everywhere it is named.

- requirements/runtime.txt (the runtime set: docs, the EE, CI's EE check) pins
  every package at the version of requirements/control.txt (the development
  set the tests ran with), and holds every distribution the code that runs on
  the control node imports: filters, lookups, callbacks, action plugins, the
  modules the roles and playbooks run on localhost, and what they import of
  this collection, followed import by import. The list is derived from the
  code, so a new import there fails here until runtime.txt has it.
- execution-environment.yml installs runtime.txt, the same ansible-core, every
  collection the roles and playbooks call, and this collection's tarball
  under any version galaxy.yml gives.
- meta/runtime.yml's requires_ansible claims the tested ansible-core minor
  release and nothing else: the pinned ansible-core is the one the tests run.
"""

import ast
import fnmatch
import importlib.metadata
import re
import sys
from pathlib import Path

import ansible.release
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
COLLECTION = "gpufleet.vllm"
# plugin types whose code runs in ansible-playbook's own process
CONTROLLER_TYPES = ("action", "become", "cache", "callback", "cliconf", "connection", "filter", "httpapi",
                    "inventory", "lookup", "netconf", "shell", "strategy", "terminal", "test", "vars")
LOCAL = {"localhost", "127.0.0.1", "::1"}
FQCN = re.compile(r"^([a-z0-9_]+)\.([a-z0-9_]+)\.([a-z0-9_]+)$")
# a plugin named in Jinja: | ns.coll.filter, is ns.coll.test, lookup('ns.coll.x'), query("ns.coll.x")
JINJA_FQCN = re.compile(r"""(?:\|\s*|\bis\s+(?:not\s+)?|\b(?:lookup|query|q)\(\s*['"])"""
                        r"""([a-z0-9_]+)\.([a-z0-9_]+)\.([a-z0-9_]+)""")
BUILTIN = {"ansible.builtin", "ansible.legacy", COLLECTION}
# Imported by code that the control node loads, but called on the GPU hosts
# only (and imported there lazily, inside those functions: a test below)
HOST_ONLY = {
    # NVML (module_utils/nvml.py): the filters reach it through drift.py,
    # whose NVML reading runs in modules on the hosts
    "pynvml": "nvidia-ml-py, in the hosts' tools venv",
}


def pins(path):
    """{canonical name: version} of a requirements file's `name==version` lines."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", "%s: %r is not pinned with ==" % (path.name, line)
        found[canonicalize_name(req.name)] = specs[0].version
    return found


RUNTIME = pins(ROOT / "requirements" / "runtime.txt")
RUNTIME_TOP = pins(ROOT / "requirements" / "runtime.in")
CONTROL = pins(ROOT / "requirements" / "control.txt")
CONTROL_TOP = pins(ROOT / "requirements" / "control.in")
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text(encoding="utf-8"))
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))
META = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))


def yaml_files(*dirs):
    for top in dirs:
        yield from sorted((ROOT / top).rglob("*.yml"))


def playbook_yaml():
    """(path, data) of every task file and playbook that ships."""
    for path in yaml_files("roles", "playbooks"):
        rel = path.relative_to(ROOT).parts
        if rel[0] == "roles" and rel[2] not in ("tasks", "handlers"):
            continue
        yield path, yaml.safe_load(path.read_text(encoding="utf-8"))


def walk_tasks(node, local=False):
    """(module FQCN, runs on the control node) of every task under NODE."""
    if isinstance(node, list):
        for item in node:
            yield from walk_tasks(item, local)
        return
    if not isinstance(node, dict):
        return
    here = (local or str(node.get("delegate_to", "")).strip() in LOCAL
            or str(node.get("hosts", "")).strip() in LOCAL or node.get("connection") == "local")
    for key, value in node.items():
        if isinstance(key, str) and FQCN.match(key):
            yield key, here
        if key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from walk_tasks(value, here)


def module_file(name):
    """plugins/modules/NAME.py, or where meta/runtime.yml redirects NAME to."""
    path = PLUGINS / "modules" / ("%s.py" % name)
    if path.is_file():
        return path
    redirect = ((META.get("plugin_routing") or {}).get("modules") or {}).get(name, {}).get("redirect", "")
    assert redirect.startswith(COLLECTION + "."), "module %s.%s: no file and no redirect" % (COLLECTION, name)
    return module_file(redirect.rsplit(".", 1)[1])


def collection_file(parts):
    """The file of ansible_collections.gpufleet.vllm.<PARTS>, or None."""
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports(path):
    """(third-party top-level names, files of this collection) that PATH imports, anywhere in it."""
    prefix = ["ansible_collections"] + COLLECTION.split(".")
    outside, inside = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [(alias.name.split("."), None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [(node.module.split("."), [alias.name for alias in node.names])]
        else:
            continue
        for parts, members in names:
            if parts[:3] == prefix:
                for member in members or [None]:
                    found = (member and collection_file(parts[3:] + [member])) or collection_file(parts[3:])
                    if found:
                        inside.add(found)
            elif parts[0] == "ansible_collections":
                outside.add(".".join(parts[:3]))
            elif parts[0] not in sys.stdlib_module_names and parts[0] not in ("ansible", "__future__"):
                outside.add(parts[0])
    return outside, inside


def controller_code():
    """Every file of this collection that runs on the control node."""
    start = set()
    for kind in CONTROLLER_TYPES:
        start.update(p for p in (PLUGINS / kind).glob("*.py") if p.name != "__init__.py")
    for path, data in playbook_yaml():
        for name, local in walk_tasks(data):
            if local and name.startswith(COLLECTION + "."):
                start.add(module_file(name.rsplit(".", 1)[1]))
    seen, todo = set(), list(start)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(imports(path)[1] - seen)
    return start, seen


def controller_imports():
    names = set()
    for path in controller_code()[1]:
        names |= imports(path)[0]
    return names


def test_runtime_pins_are_the_development_pins():
    assert RUNTIME, "requirements/runtime.txt pins nothing"
    differ = {name: (version, CONTROL.get(name)) for name, version in RUNTIME.items() if CONTROL.get(name) != version}
    assert not differ, "runtime.txt pins that control.txt does not pin the same (runtime, control): %s" % differ
    top = {name: (version, RUNTIME.get(name)) for name, version in RUNTIME_TOP.items() if RUNTIME.get(name) != version}
    assert not top, "runtime.in pins that its lock runtime.txt does not hold the same (in, txt): %s" % top


def test_the_runtime_set_has_no_development_tool():
    tools = {"molecule", "pytest", "ansible-lint", "yamllint", "ansible-builder", "antsibull-changelog",
             "transformers", "pypiserver", "hypothesis", "ansible"}
    assert not tools & set(RUNTIME), sorted(tools & set(RUNTIME))


def test_the_control_node_code_is_found():
    start, files = controller_code()
    rel = {str(p.relative_to(ROOT)) for p in files}
    # (the scan is the test: it must see the filters, lookups and callback,
    # the report module the playbooks run on localhost and what they import)
    for kind in ("filter", "lookup", "callback", "modules", "module_utils"):
        assert any(name.startswith("plugins/%s/" % kind) for name in rel), (kind, sorted(rel))
    assert "plugins/filter/query.py" in rel
    assert {"jmespath", "uv", "matplotlib", "PIL", "yaml"} <= controller_imports()


def top_level_imports(path):
    """The top-level names PATH imports outside any function (when it is loaded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    lazy = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(fn)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in lazy:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_host_only_imports_are_not_loaded_on_the_control_node():
    # (imported only inside the functions that run on a host: loading a
    # filter or lookup on the control node never imports them)
    loaded = {}
    for path in controller_code()[1]:
        for name in top_level_imports(path) & set(HOST_ONLY):
            loaded.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not loaded, "host-only packages imported when control-node code loads: %s" % loaded


def test_every_controller_import_is_a_runtime_requirement():
    distributions = importlib.metadata.packages_distributions()
    missing, unknown = {}, []
    for name in sorted(controller_imports()):
        if name.startswith("ansible_collections."):
            continue  # (a collection: the EE test below)
        if name in HOST_ONLY:
            continue
        dists = {canonicalize_name(d) for d in distributions.get(name, [])}
        if not dists:
            unknown.append(name)
        elif not dists & set(RUNTIME):
            missing[name] = sorted(dists)
    assert not unknown, "imported on the control node, installed nowhere here: %s" % unknown
    assert not missing, ("imported on the control node, not in requirements/runtime.txt "
                         "(import: distributions): %s" % missing)


def test_ansible_core_is_pinned_the_same_everywhere():
    pin = CONTROL_TOP["ansible-core"]
    assert CONTROL["ansible-core"] == RUNTIME["ansible-core"] == RUNTIME_TOP["ansible-core"] == pin
    assert EE["dependencies"]["ansible_core"]["package_pip"] == "ansible-core==%s" % pin
    # the tests run on the pinned one
    assert ansible.release.__version__ == pin


def test_requires_ansible_claims_the_tested_minor_release_only():
    claimed = SpecifierSet(META["requires_ansible"])
    tested = Version(CONTROL["ansible-core"])
    major, minor = tested.major, tested.minor
    assert tested in claimed
    assert Version("%d.%d.0" % (major, minor)) in claimed
    assert Version("%d.%d.99" % (major, minor - 1)) not in claimed, "claims a release older than the tested one"
    assert Version("%d.%d.0" % (major, minor + 1)) not in claimed, "claims a release newer than the tested one"


def test_the_ee_installs_the_runtime_set():
    assert EE["version"] == 3
    assert EE["dependencies"]["python"] == "requirements/runtime.txt"
    runner = EE["dependencies"]["ansible_runner"]["package_pip"]
    assert re.fullmatch(r"ansible-runner==[0-9][0-9.]*", runner), runner


def ee_collections():
    galaxy = EE["dependencies"].get("galaxy") or {}
    if isinstance(galaxy, str):
        galaxy = yaml.safe_load((ROOT / galaxy).read_text(encoding="utf-8"))
    return {(entry["name"] if isinstance(entry, dict) else entry) for entry in galaxy.get("collections") or []}


def role_names(node):
    """The FQCN of every role imported, included or listed under NODE."""
    if isinstance(node, list):
        for item in node:
            yield from role_names(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key.rsplit(".", 1)[-1] in ("import_role", "include_role") and isinstance(value, dict):
                yield value.get("name", "")
            elif key == "roles" and isinstance(value, list):
                for role in value:
                    yield role if isinstance(role, str) else role.get("role", role.get("name", ""))
            else:
                yield from role_names(value)


def called_collections():
    """ns.coll of every module, filter, test, lookup and role the roles and playbooks name."""
    found = {}
    for path, data in playbook_yaml():
        text = path.read_text(encoding="utf-8")
        names = {key for key, dummy in walk_tasks(data)}
        names |= {".".join(m) for m in JINJA_FQCN.findall(text)}
        names |= set(role_names(data))
        for name in names:
            if name.count(".") != 2:
                continue  # (a role of the playbook's own directory)
            found.setdefault(name.rsplit(".", 1)[0], set()).add(str(path.relative_to(ROOT)))
    for name in controller_imports():
        if name.startswith("ansible_collections."):
            found.setdefault(name.split(".", 1)[1], set()).add("plugins/")
    for dep in GALAXY.get("dependencies") or {}:
        found.setdefault(dep, set()).add("galaxy.yml")
    return found


def test_the_ee_has_every_collection_the_playbooks_call():
    called = called_collections()
    assert COLLECTION in called and "ansible.builtin" in called  # (the scan sees them)
    needed = {name: sorted(where)[:3] for name, where in called.items() if name not in BUILTIN}
    missing = {name: where for name, where in needed.items() if name not in ee_collections()}
    assert not missing, "collections called but not in execution-environment.yml's galaxy dependencies: %s" % missing


@pytest.mark.parametrize("version", [GALAXY["version"], "9.10.11"])
def test_the_ee_takes_the_tarball_of_any_version(version):
    tarball = "%s-%s-%s.tar.gz" % (GALAXY["namespace"], GALAXY["name"], version)
    sources = [entry["src"] for entry in EE["additional_build_files"]]
    assert any(fnmatch.fnmatch(tarball, Path(src).name) for src in sources), (tarball, sources)
    steps = "\n".join(EE["additional_build_steps"]["append_final"])
    assert GALAXY["version"] not in steps
    # into the collections path of the image, where its user 1000 finds it
    assert "--collections-path /usr/share/ansible/collections" in steps
