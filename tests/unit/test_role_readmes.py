# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role's README documents exactly its entry points and its variables.

The truth is the role's meta/argument_specs.yml (its public entry points and
their options) and defaults/main.yml (the defaults). A README must:

* have a section "Entry points" and name every entry point other than
  ``main`` as ``tasks_from: NAME``; a ``tasks_from:`` it names must be an
  entry point of the argument specs (a private or missing task file is not
  one);
* list every option in a Markdown table row whose first cell is the
  option's name; where defaults/main.yml gives a scalar default, the row's
  second cell shows it (``true``, ``300``, ``/opt/vllm/current``, ``""``);
* mention no variable with the role's prefix that is neither an option nor
  a result the role's own tasks set (``register`` or ``set_fact``), or a
  fact the operator's own task files set for the role (CONTRACT).
"""

import os
import re

import pytest
import yaml

from helpers import load_source

SPECS = load_source("argument_specs_for_readmes", "tests", "unit", "roles", "test_argument_specs.py")
REPO = SPECS.REPO
ROLES = SPECS.ROLES

# Variables of a role's prefix that neither its options nor its own tasks set, yet its README must name: what the
# operator's own task files set for the role (the balancer hook's contract).
CONTRACT = {"balancer": {"balancer_servers"}}

TASKS_FROM = re.compile(r"tasks_from:\s*`?\"?'?([A-Za-z0-9_.]+)")
ROW = re.compile(r"^\|\s*`([A-Za-z0-9_]+)`\s*\|([^|]*)\|", re.M)


def readme(role):
    with open(os.path.join(REPO, "roles", role, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def entry_points(role):
    return set(SPECS.load(role, "meta", "argument_specs.yml")["argument_specs"])


def named_entry_points(text, role=None):
    """The entry points TEXT names as ``tasks_from: NAME``; in an example's include_role of another role of the
    collection (``name: gpufleet.vllm.OTHER`` just before), that role's, not ROLE's."""
    found = set()
    for line_no, line in enumerate(text.splitlines()):
        for name in TASKS_FROM.findall(line):
            before = text.splitlines()[max(0, line_no - 2):line_no]
            other = [m for b in before for m in re.findall(r"name:\s*gpufleet\.vllm\.(\w+)", b)]
            if role is not None and other and other[-1] != role:
                continue
            name = name.rstrip(".")
            found.add(os.path.splitext(name)[0] if name.endswith(".yml") else name)
    return found


def _walk(tasks):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key))


def role_results(role):
    """Variables the role's own tasks set: register names and set_fact keys."""
    found = set()
    for top, dummy, files in os.walk(os.path.join(REPO, "roles", role, "tasks")):
        for name in files:
            if not name.endswith(".yml"):
                continue
            with open(os.path.join(top, name), encoding="utf-8") as handle:
                tasks = yaml.safe_load(handle)
            for task in _walk(tasks if isinstance(tasks, list) else []):
                if isinstance(task.get("register"), str):
                    found.add(task["register"])
                facts = task.get("ansible.builtin.set_fact") or task.get("set_fact")
                if isinstance(facts, dict):
                    found.update(key for key in facts if key != "cacheable")
    return found


def render(value):
    """How a scalar default reads in a README table cell."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


@pytest.mark.parametrize("role", ROLES)
def test_readme_names_every_entry_point_and_no_other(role):
    text = readme(role)
    assert re.search(r"^#+ Entry points", text, re.M), "%s/README.md has no section 'Entry points'" % role
    entries = entry_points(role)
    named = named_entry_points(text, role)
    missing = sorted(entries - named - {"main"})
    assert not missing, "%s/README.md does not name the entry points %s (as `tasks_from: NAME`)" % (role, missing)
    unknown = sorted(named - entries)
    assert not unknown, "%s/README.md names entry points that meta/argument_specs.yml does not have: %s" % (
        role, unknown)


@pytest.mark.parametrize("role", ROLES)
def test_readme_lists_every_option_with_its_default(role):
    text = readme(role)
    rows = {name: cell.strip() for name, cell in ROW.findall(text)}
    defaults = SPECS.load(role, "defaults", "main.yml") or {}
    missing = sorted(set(SPECS.options(role)) - set(rows))
    assert not missing, "%s/README.md has no table row for the options %s" % (role, missing)
    wrong = []
    for name, value in sorted(defaults.items()):
        if isinstance(value, (list, dict)) or "{{" in str(value):
            continue
        shown = render(value)
        if shown not in rows[name].replace("`", ""):
            wrong.append("%s: the row says %r, defaults/main.yml %r" % (name, rows[name], shown))
    assert not wrong, "%s/README.md: %s" % (role, "; ".join(wrong))


@pytest.mark.parametrize("role", ROLES)
def test_readme_mentions_no_variable_of_the_role_that_does_not_exist(role):
    text = readme(role)
    known = set(SPECS.options(role)) | role_results(role) | CONTRACT.get(role, set())
    mentioned = set(re.findall(r"(?<![\w./-])(%s_[a-z0-9_]*[a-z0-9])\b" % re.escape(role), text))
    unknown = sorted(mentioned - known)
    assert not unknown, ("%s/README.md mentions variables that are neither options in meta/argument_specs.yml nor "
                         "results the role sets: %s" % (role, unknown))


def test_the_checks_catch_what_they_are_for():
    # (a README naming a private task file, or missing an option, must fail the checks above)
    assert named_entry_points("`tasks_from: _defaults.yml` runs no task") == {"_defaults"}
    assert named_entry_points("* `tasks_from: take_out` (before a stop)") == {"take_out"}
    example = "- ansible.builtin.include_role:\n    name: gpufleet.vllm.service\n    tasks_from: cutover\n"
    assert named_entry_points(example, "reinstall") == set() and named_entry_points(example, "service") == {"cutover"}
    assert ROW.findall("| `fleet_package` | `vllm` | reinstall |\n") == [("fleet_package", " `vllm` ")]
    assert render(True) == "true" and render("") == '""' and render(None) == "null" and render(300) == "300"
