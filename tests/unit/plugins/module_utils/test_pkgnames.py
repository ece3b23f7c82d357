# SPDX-License-Identifier: GPL-3.0-or-later
"""pkgnames: one spelling of a distribution's name and version on the control node and on the hosts.

canonical_version is checked against packaging's Version (the reference
implementation of PEP 440) on hand-picked spellings and on every version
in the wheelhouse's file names; set_fingerprint must not depend on the
order or the spelling of the pairs.
"""

import os

import pytest
from packaging.version import InvalidVersion, Version

from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import (
    canonical_name,
    canonical_version,
    pin_text,
    set_fingerprint,
    short_fingerprint,
    valid_name,
)

SPELLINGS = [
    "1.0", "1.0.0", "01.002", "1.0-1", "1.0_post2", "1.0.rev3", "1.0r", "2.0RC1", "2.0c1", "2.0-preview.2",
    "1.0alpha", "1.0.beta.3", "1!2.0", "0!1.0", "1.0.dev", "1.0-dev4", "v1.2", " 1.2 ", "1.0+Local.07-ab",
    "0.16.0rc2.dev344+gea5f903f8", "2026.10.19.post1", "13.615.71", "3.9.10.post20261028", "1.0a1.post2.dev3",
]


@pytest.mark.parametrize("text", SPELLINGS)
def test_canonical_version_is_packagings_normal_form(text):
    assert canonical_version(text) == str(Version(text))


def wheelhouse_versions():
    root = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.expanduser("~/.cache/gpufleet-vllm/wheelhouse")
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(set(name.split("-")[1] for name in names if name.endswith(".whl") and name.count("-") >= 4))


def test_every_wheelhouse_version_has_packagings_normal_form():
    versions = wheelhouse_versions()
    if not versions:
        pytest.skip("no wheelhouse here")
    assert [v for v in versions if canonical_version(v) != str(Version(v))] == []


@pytest.mark.parametrize("text", ["", "latest", "1.0.0.0-final", "1..0", "1.0+", "1.0+a..b", "1.0 2", "==1.0",
                                  "1.0\n2.0", None, 1.0, b"1.0"])
def test_a_value_that_is_not_a_pep440_version_is_none(text):
    if isinstance(text, str) and text.strip():
        with pytest.raises(InvalidVersion):
            Version(text)
    assert canonical_version(text) is None


@pytest.mark.parametrize("text", ["9" * 21, "1." + "1." * 40 + "1", "1.0+" + "a" * 65, "1" * 201])
def test_a_version_beyond_the_bounds_is_none_though_pep440_allows_it(text):
    assert canonical_version(text) is None


def test_canonical_name_folds_case_and_separators():
    assert canonical_name("PyNvVideoCodec") == "pynvvideocodec"
    assert canonical_name("typing_extensions") == "typing-extensions"
    assert canonical_name("zope.interface") == "zope-interface"
    assert canonical_name("a__-.b") == "a-b"


@pytest.mark.parametrize("name, ok", [("vllm", True), ("nvidia-ml-py", True), ("A.b_c-9", True), ("x", True),
                                      ("-x", False), ("x-", False), ("", False), ("x y", False), ("x;rm", False),
                                      ("x" * 201, False), (None, False), ("v\u00e9", False)])
def test_valid_name(name, ok):
    assert valid_name(name) is ok


def test_the_fingerprint_is_the_same_for_the_same_set_in_any_order_or_spelling():
    one = set_fingerprint([("vllm", "0.33.0"), ("Typing_Extensions", "4.16.0"), ("certifi", "2026.10.19-1")])
    two = set_fingerprint([("certifi", "2026.10.19.post1"), ("vllm", "0.33.0"), ("typing-extensions", "4.16.0"),
                           ("vllm", "0.33.0")])
    assert one == two
    assert one.startswith("sha256:") and len(one) == 7 + 64
    assert short_fingerprint(one) == one[7:19]


def test_the_fingerprint_changes_with_any_name_or_version():
    base = [("vllm", "0.33.0"), ("tabulate", "0.9.0")]
    fingerprints = {set_fingerprint(base), set_fingerprint([("vllm", "0.33.0"), ("tabulate", "0.10.0")]),
                    set_fingerprint([("vllm", "0.33.0")]), set_fingerprint(base + [("six", "1.16.0")]),
                    set_fingerprint([("vllm", "0.33.1"), ("tabulate", "0.9.0")])}
    assert len(fingerprints) == 5


def test_pin_text_keeps_a_version_that_is_not_pep440():
    assert pin_text("My_Pkg", "1.0-1") == "my-pkg==1.0.post1"
    assert pin_text("legacy", "2004d") == "legacy==2004d"
    assert short_fingerprint(None) == ""
