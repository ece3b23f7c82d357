# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role's meta/argument_specs.yml is in step with its defaults/main.yml.

A default without an option is not validated (and not documented); an
option whose default differs from defaults/main.yml documents a value the
role does not use. Variables carry the role's name as prefix.
"""

import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(os.listdir(os.path.join(REPO, "roles")))


def load(role, *path):
    full = os.path.join(REPO, "roles", role, *path)
    if not os.path.exists(full):
        return None
    with open(full) as handle:
        return yaml.safe_load(handle)


def options(role):
    """name -> [(entry point, option spec)] over every entry point."""
    found = {}
    for entry, spec in (load(role, "meta", "argument_specs.yml") or {})["argument_specs"].items():
        for name, option in (spec.get("options") or {}).items():
            found.setdefault(name, []).append((entry, option))
    return found


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_an_option_with_the_same_default(role):
    defaults = load(role, "defaults", "main.yml") or {}
    specs = options(role)
    missing = sorted(set(defaults) - set(specs))
    assert not missing, "%s: defaults without an option in argument_specs: %s" % (role, missing)
    wrong = []
    for name, value in defaults.items():
        for entry, option in specs[name]:
            if "default" in option and option["default"] != value:
                wrong.append("%s (%s): argument_specs says %r, defaults %r" % (name, entry, option["default"], value))
    assert not wrong, "%s: %s" % (role, "; ".join(wrong))


@pytest.mark.parametrize("role", ROLES)
def test_every_option_with_a_default_is_in_defaults(role):
    defaults = load(role, "defaults", "main.yml") or {}
    extra = sorted(name for name, uses in options(role).items()
                   if name.startswith(role + "_") and any("default" in option for dummy, option in uses)
                   and name not in defaults)
    assert not extra, "%s: options with a default that defaults/main.yml lacks: %s" % (role, extra)


@pytest.mark.parametrize("role", ROLES)
def test_variables_carry_the_role_prefix(role):
    defaults = load(role, "defaults", "main.yml") or {}
    assert [name for name in defaults if not name.startswith(role + "_")] == []


def test_every_role_has_argument_specs():
    for role in ROLES:
        assert load(role, "meta", "argument_specs.yml"), role


class _NoTwiceLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a mapping key given twice, a key merged with << and given again included (what
    ansible-core warns about, at every include of the role)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen = {}
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise AssertionError("%s: the key %r is given twice (lines %d and %d)" % (
                        node.start_mark.name, key, seen[key] + 1, key_node.start_mark.line + 1))
                seen[key] = key_node.start_mark.line
        return super(_NoTwiceLoader, self).construct_mapping(node, deep=deep)


_NoTwiceLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _NoTwiceLoader.construct_mapping)


@pytest.mark.parametrize("role", ROLES)
def test_no_option_is_given_twice_in_an_entry_point(role):
    full = os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")
    if not os.path.exists(full):
        pytest.skip("no argument specs")
    with open(full) as handle:
        yaml.load(handle, Loader=_NoTwiceLoader)  # noqa: S506 (a SafeLoader)


# The rollout validates each role's options once, in its pre-flight (on every
# host of the run, before any is touched); the per-host steps include their
# entry points with rolespec_validate: false. That is safe only while the
# entry point the pre-flight validates has every option of the one included.
PREFLIGHT_ENTRY = {"reinstall": "preflight", "service": "unit", "balancer": "check"}
# (options an entry point's own task file sets, whatever the inventory says)
SET_BY_ENTRY = {("service", "rollback"): {"service_cutover_render"}}
ROLLOUT_FILES = ["playbooks/tasks/rollout_host.yml", "playbooks/tasks/in_place_host.yml", "playbooks/tasks/rollback_host.yml"]


def _includes(tasks):
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            yield from _includes(task.get(key))
        include = task.get("ansible.builtin.include_role") or task.get("ansible.builtin.import_role")
        if include:
            yield include, task.get("vars") or {}


def _unvalidated():
    found = []
    for path in ROLLOUT_FILES:
        with open(os.path.join(REPO, path)) as handle:
            for include, play_vars in _includes(yaml.safe_load(handle)):
                if include.get("rolespec_validate") is False:
                    entry = include.get("tasks_from", "main")
                    # (tasks_from chosen by a template: each entry point it names)
                    for name in re.findall(r"'([\w.]+)'", entry) if "{{" in entry else [entry]:
                        found.append((path, include["name"].split(".")[-1], name, play_vars))
    return found


def test_the_rollout_skips_validation_of_some_entry_points():
    # (the test below must have something to check)
    assert {(role, entry) for dummy, role, entry, dummy2 in _unvalidated()} >= {
        ("reinstall", "stage.yml"), ("reinstall", "cleanup.yml"), ("balancer", "take_out"), ("service", "cutover")}


@pytest.mark.parametrize("path,role,entry,play_vars", _unvalidated(), ids=lambda v: v if isinstance(v, str) else "")
def test_an_entry_point_included_without_validation_has_only_options_the_preflight_validated(path, role, entry,
                                                                                             play_vars):
    specs = load(role, "meta", "argument_specs.yml")["argument_specs"]
    entry = os.path.splitext(entry)[0]
    if role not in PREFLIGHT_ENTRY:
        # (a role the pre-flight does not validate: its options are the fleet's, checked there, or go to modules)
        assert role in ("sm120_config", "debug_artifacts"), "%s includes %s without validation" % (path, role)
        return
    options = set((specs.get(entry) or {}).get("options") or {})
    validated = set((specs[PREFLIGHT_ENTRY[role]].get("options") or {}))
    # (the playbook's own values: where the cutover points the links, from the fleet's settings the pre-flight
    # checked, and the failed cutover's result for its rollback)
    own = {name for name in play_vars if name.startswith("service_cutover_") or name == "service_rollback_from"}
    unchecked = sorted(options - validated - own - SET_BY_ENTRY.get((role, entry), set()))
    assert not unchecked, "%s: %s/%s has options the pre-flight (%s) did not validate: %s" % (
        path, role, entry, PREFLIGHT_ENTRY[role], unchecked)
    # any other option the include sets itself must be set so in the pre-flight too (validated there with that
    # value: rollout_min_in_service reaches the take-out as balancer_min_in_service)
    preflight_vars = _preflight_vars(role)
    differ = sorted(name for name in (options & set(play_vars)) - own if preflight_vars.get(name) != play_vars[name])
    assert not differ, "%s: %s/%s is given %s, which the pre-flight's %s does not validate with the same value" % (
        path, role, entry, differ, PREFLIGHT_ENTRY[role])


def _preflight_vars(role):
    """The vars the rollout's pre-flight passes to ROLE's entry point it validates."""
    with open(os.path.join(REPO, "playbooks", "rollout.yml")) as handle:
        plays = yaml.safe_load(handle)
    for include, play_vars in _includes(plays[0]["tasks"]):
        if include["name"].split(".")[-1] == role and os.path.splitext(include.get("tasks_from", "main"))[0] == (
                PREFLIGHT_ENTRY[role]):
            return play_vars
    raise AssertionError("the rollout's pre-flight does not include %s/%s" % (role, PREFLIGHT_ENTRY[role]))
