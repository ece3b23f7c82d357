# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PEP 440 ordering and specifiers in module_utils/pkgnames.py (standard library only), as tables of cases.

Where ``packaging`` is importable (the control node's), every case is also
checked against it (with pre-releases allowed, as the collection matches them).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import itertools

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import pkgnames

try:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
except ImportError:  # pragma: no cover - the control node has it
    SpecifierSet = Version = None

# in PEP 440 order, each strictly greater than the one before
ORDERED = [
    "0.17.1", "0.18.0.dev3", "0.18.0a1", "0.18.0b2", "0.18.0rc1.dev1", "0.18.0rc1", "0.18.0",
    "0.18.0+cu130", "0.18.0.post1.dev2", "0.18.0.post1", "0.18.0.post2", "0.18.1", "0.19.0", "0.33.0",
    "0.33.1.dev7", "0.33.1.dev7+g1a2b3c4.cu130", "0.33.1", "1!0.1",
]


def test_versions_sort_in_pep440_order():
    keys = [pkgnames.version_key(v) for v in ORDERED]
    assert all(a < b for a, b in zip(keys, keys[1:]))


@pytest.mark.parametrize("a, b", [("0.19", "0.19.0"), ("0.19.0", "v0.19.00"), ("1.0RC1", "1.0rc1"),
                                  ("1.0-1", "1.0.post1")])
def test_spellings_of_one_version_are_equal(a, b):
    assert pkgnames.version_key(a) == pkgnames.version_key(b)


@pytest.mark.parametrize("text", ["", "latest", "0.33.x", None, 33, "1" * 201])
def test_what_is_no_version_has_no_key(text):
    assert pkgnames.version_key(text) is None


# (specifier, version, contained)
CASES = [
    (">=0.19.0", "0.19.0", True),
    (">=0.19.0", "0.33.0", True),
    (">=0.19.0", "0.33.1.dev7", True),  # a nightly after the release
    (">=0.19.0", "0.33.1.dev7+g1a2b3c4.cu130", True),  # local label ignored
    (">=0.19.0", "0.19.0rc1", False),
    (">=0.19.0", "0.19.0.dev5", False),
    (">=0.19.0", "0.18.1", False),
    ("<0.19.0", "0.18.1", True),
    ("<0.19.0", "0.19.0rc1", False),  # <V takes no pre-release of V
    ("<0.19.0rc2", "0.19.0rc1", True),
    ("<0.19.0", "0.17.0.dev3", True),
    ("<=0.18.1", "0.18.1+cu129", True),
    (">0.18.0", "0.18.0.post1", False),  # >V takes no post-release of V
    (">0.18.0", "0.18.1", True),
    (">0.18.0.post1", "0.18.0.post2", True),
    ("==0.33.*", "0.33.1.dev7", True),
    ("==0.33.*", "0.34.0", False),
    ("==0.33", "0.33.0", True),
    ("==0.33.0", "0.33.0+cu130", True),
    ("==0.33.0+cu130", "0.33.0+cu129", False),
    ("!=0.18.*", "0.18.1", False),
    ("!=0.18.*", "0.19.0", True),
    ("~=0.18.0", "0.18.5", True),
    ("~=0.18.0", "0.19.0", False),
    ("~=0.18", "0.19.0", True),
    ("~=0.18", "1.0", False),
    (">=0.18.0, <0.19.0", "0.18.1", True),
    (">=0.18.0,<0.19.0", "0.19.0", False),
    (">=0", "0.0.1", True),
    (">=0.19.0", "not a version", False),
]


@pytest.mark.parametrize("specifier, version, contained", CASES)
def test_specifier_contains(specifier, version, contained):
    assert pkgnames.specifier_problem(specifier) is None
    assert pkgnames.specifier_contains(specifier, version) is contained


@pytest.mark.skipif(SpecifierSet is None, reason="packaging is not importable")
@pytest.mark.parametrize("specifier, version, contained", [c for c in CASES if pkgnames.version_key(c[1])])
def test_packaging_agrees(specifier, version, contained):
    assert SpecifierSet(specifier).contains(Version(version), prereleases=True) is contained


@pytest.mark.skipif(SpecifierSet is None, reason="packaging is not importable")
def test_packaging_agrees_on_every_pair_of_the_ordered_versions():
    operators = ["<", "<=", ">", ">=", "==", "!="]
    for spec_version, version, operator in itertools.product(ORDERED, ORDERED, operators):
        if "+" in spec_version and operator not in ("==", "!="):
            continue
        specifier = operator + spec_version
        expected = SpecifierSet(specifier).contains(Version(version), prereleases=True)
        assert pkgnames.specifier_contains(specifier, version) is expected, (specifier, version)


@pytest.mark.parametrize("specifier, words", [
    ("", "empty"),
    (None, "empty"),
    ("0.19.0", "not an operator"),
    ("=>0.19", "not an operator"),
    ("===0.19.0", "not a PEP 440 version"),
    (">=0.19.*", "only == and !="),
    ("==0.19.0rc1.*", "only hold release numbers"),
    (">=0.19+cu130", "local version"),
    ("~=1", "two release numbers"),
    (">=latest", "not a PEP 440 version"),
    (">=0.19,", "not an operator"),
    (",".join([">=0"] * 17), "more than 16"),
])
def test_bad_specifiers_are_named(specifier, words):
    problem = pkgnames.specifier_problem(specifier)
    assert problem and words in problem
    with pytest.raises(ValueError):
        pkgnames.specifier_contains(specifier, "0.19.0")
