# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role's meta/argument_specs.yml is in step with its defaults/main.yml.

A default without an option is not validated (and not documented); an
option whose default differs from defaults/main.yml documents a value the
role does not use. Variables carry the role's name as prefix.
"""

import os

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
