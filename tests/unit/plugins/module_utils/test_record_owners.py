# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""record: who owns a file (Owners) and reading small files (read_regular).

The look-ups search the RECORD bytes of the other distributions (not decoded
text); they must answer exactly what the text search they replaced answered,
which these tests keep as the reference.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import csv
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import record

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def reference_owner(records, full_path):
    """The look-up before it searched bytes: "\\n" + decoded RECORD text, two needles in turn."""
    for entry, real_site, text in records:
        if not full_path.startswith(real_site + os.sep):
            continue
        rel = full_path[len(real_site) + 1:].replace(os.sep, "/")
        for needle in ("\n" + rel + ",", "\n\"" + rel + "\","):
            pos = text.find(needle)
            if pos >= 0:
                line = text[pos + 1:].split("\n", 1)[0]
                try:
                    row = next(csv.reader([line]))
                except (csv.Error, StopIteration):
                    return entry, None
                return entry, (row[1] if len(row) > 1 else None)
    return None


def make_site(tmp_path, records):
    site = tmp_path / "site-packages"
    site.mkdir()
    for name, data in records:
        meta = site / name
        meta.mkdir()
        (meta / "RECORD").write_bytes(data)
    return str(site)


def lookup_all(site, paths, skip=()):
    owners = record.Owners([site], set(skip))
    return [owners.owner(os.path.join(os.path.realpath(site), p)) for p in paths]


def test_plain_quoted_first_line_crlf_and_prefixes(tmp_path):
    site = make_site(tmp_path, [
        ("a-1.dist-info", b"xevil.pth,sha256=AAA,3\n\"evil.pth\",sha256=QUOTED,4\nevil.pth,sha256=PLAIN,5\n"),
        ("b-1.dist-info", b"first.pth,sha256=FIRST,1\r\nsub/evil.pth,sha256=SUB,2\r\nlast.pth,sha256=LAST,9"),
        ("c-1.dist-info", b"\"only-quoted.pth\",sha256=Q,1\n"),
    ])
    got = lookup_all(site, ["evil.pth", "first.pth", "sub/evil.pth", "last.pth", "only-quoted.pth", "vil.pth",
                            "missing.pth"])
    assert got == [
        ("a-1.dist-info", "sha256=PLAIN"),    # the plain row wins over an earlier quoted one
        ("b-1.dist-info", "sha256=FIRST"),    # the first line of a RECORD (no newline before it)
        ("b-1.dist-info", "sha256=SUB"),
        ("b-1.dist-info", "sha256=LAST"),     # the last line, no newline after it
        ("c-1.dist-info", "sha256=Q"),
        None,                                 # "xevil.pth" and "evil.pth" do not own "vil.pth"
        None,
    ]


def test_skipped_distribution_and_non_utf8_names(tmp_path):
    raw_name = b"caf\xe9.pth"                 # Latin-1 bytes, not UTF-8
    site = make_site(tmp_path, [
        ("mine-1.dist-info", b"hook.pth,sha256=MINE,1\n"),
        ("other-1.dist-info", raw_name + b",sha256=RAW,1\nhook.pth,sha256=OTHER,1\n"),
    ])
    skip = [os.path.join(os.path.realpath(site), "mine-1.dist-info")]
    got = lookup_all(site, ["hook.pth", os.fsdecode(raw_name), "lone\ud800.pth"], skip)
    assert got == [("other-1.dist-info", "sha256=OTHER"), ("other-1.dist-info", "sha256=RAW"), None]


def test_index_after_many_lookups_agrees_with_the_search(tmp_path):
    rows = b"".join(b"pkg/m%d.py,sha256=H%d,%d\n" % (i, i, i) for i in range(40))
    site = make_site(tmp_path, [("pkg-1.dist-info", rows + b'"pkg/q.py",sha256=HQ,1\n')])
    paths = ["pkg/m%d.py" % i for i in range(40)] + ["pkg/q.py", "pkg/none.py"]
    owners = record.Owners([site], set())
    real = os.path.realpath(site)
    got = [owners.owner(os.path.join(real, p)) for p in paths]
    assert owners._index is not None          # the later look-ups came from the index
    assert got == [("pkg-1.dist-info", "sha256=H%d" % i) for i in range(40)] + [("pkg-1.dist-info", "sha256=HQ"), None]


NAME = st.lists(st.sampled_from(["a", "b", ".pth", "/", ",", '"', "é", "\udce9", " "]), min_size=1, max_size=5).map("".join)
LINE = st.one_of(
    st.tuples(NAME, st.sampled_from(["sha256=X", "", "sha256=Y,extra"])).map(lambda t: "%s,%s,1" % t),
    st.tuples(NAME, st.sampled_from(["sha256=X", ""])).map(lambda t: '"%s",%s,1' % t),
    NAME,
)
RECORD_TEXT = st.tuples(st.lists(LINE, max_size=6), st.sampled_from(["\n", "\r\n"]), st.booleans()).map(
    lambda t: t[1].join(t[0]) + (t[1] if t[2] else ""))


@SETTINGS
@given(texts=st.lists(RECORD_TEXT, min_size=1, max_size=3), asked=st.lists(NAME, min_size=1, max_size=4))
def test_search_answers_as_the_text_search_did(tmp_path_factory, texts, asked):
    tmp = tmp_path_factory.mktemp("owners")
    datas = [t.encode("utf-8", "surrogateescape") for t in texts]
    site = make_site(tmp, [("d%d-1.dist-info" % i, d) for i, d in enumerate(datas)])
    real = os.path.realpath(site)
    reference = [("d%d-1.dist-info" % i, real, "\n" + d.decode("utf-8", "surrogateescape"))
                 for i, d in enumerate(datas) if d]
    paths = [p for p in asked if not p.startswith("/")]
    owners = record.Owners([site], set())
    for path in paths[:record.Owners._INDEX_AFTER]:
        full = os.path.join(real, path)
        assert owners.owner(full) == reference_owner(reference, full), (texts, path)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, record.CHUNK - 1, record.CHUNK, record.CHUNK + 5, 3 * record.CHUNK])
def test_read_regular_reads_the_whole_file_up_to_the_limit(tmp_path, size):
    path = tmp_path / "f"
    data = os.urandom(size)
    path.write_bytes(data)
    assert record.read_regular(str(path), size + 1) == data
    assert record.read_regular(str(path), size + 10) == data
    if size:
        assert record.read_regular(str(path), size - 1) == data[:size - 1]
        assert record.read_regular(str(path), 1) == data[:1]
