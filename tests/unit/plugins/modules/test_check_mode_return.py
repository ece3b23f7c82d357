# SPDX-License-Identifier: GPL-3.0-or-later
"""Every module of the collection documents the check_mode it returns.

The roles decide check mode from a registered result's check_mode (module.check_mode), never from
ansible_check_mode, which stays false under a play's, a block's or an include's check_mode: true. A
module that does not return it would leave a role guessing; tests/unit/roles/test_check_mode_convention.py
shows the roles reading it.
"""

import ast
import glob
import os
import re

import pytest
import yaml

MODULES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "modules", "*.py")))


def _doc(path, name):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return yaml.safe_load(node.value.value)
    return None


def test_the_modules_are_found():
    assert len(MODULES) >= 16
    assert "env_fingerprint_info.py" in [os.path.basename(p) for p in MODULES]


@pytest.mark.parametrize("path", MODULES, ids=[os.path.basename(p)[:-3] for p in MODULES])
def test_check_mode_is_documented_and_set_from_the_module(path):
    returned = _doc(path, "RETURN")
    assert "check_mode" in returned, "RETURN of %s does not document check_mode" % os.path.basename(path)
    assert returned["check_mode"]["type"] == "bool"
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    if "AnsibleModule(" not in source:
        # a control-node writer: the module file holds the documentation, an action plugin runs the writer in
        # module_utils/writers, which reports the task's check mode
        writer = os.path.join(os.path.dirname(path), "..", "module_utils", "writers", os.path.basename(path))
        with open(writer, encoding="utf-8") as handle:
            source = handle.read()
        assert re.search(r"\bmode\.check_mode\b", source) and re.search(r"check_mode\s*=|\['check_mode'\]", source)
        return
    assert re.search(r"check_mode(['\"]\])?\s*=\s*module\.check_mode\b", source)
