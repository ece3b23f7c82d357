# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""record: the RECORD reader on generated, hostile RECORD text.

Any bytes give either rows and malformed entries or an IntegrityError, never
another exception; every path, size and reason is usable and the malformed
entries are valid UTF-8 once made safe for a module result.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import check as integrity

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import record
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError

FIELD_CHARS = st.sampled_from([",", '"', "\n", "\r", "\x00", "=", "/", "..", "a", "Z", "9", "²", "٣", "-", "_",
                               "sha256=", "md5=", "\udcff", "é", " ", "\t", "\\"])
FIELD = st.one_of(
    st.lists(FIELD_CHARS, max_size=12).map("".join),
    st.text(max_size=20),
    st.integers(min_value=-5, max_value=10 ** 30).map(str),
    st.just("sha256=" + "A" * 43),
    st.just("sha256=" + "_" * 43 + "=="),
)
ROW = st.one_of(st.lists(FIELD, max_size=5).map(",".join),
                st.tuples(FIELD, FIELD, FIELD).map(",".join))
RECORD_TEXT = st.lists(ROW, max_size=8).map("\n".join)

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def check_parsed(parsed):
    rows, malformed = parsed
    for row in rows:
        assert isinstance(row.path, str) and row.path and "\x00" not in row.path
        assert row.size is None or (isinstance(row.size, int) and row.size >= 0)
        assert (row.algorithm is None) == (row.digest is None)
        if row.algorithm is not None:
            assert row.algorithm in record.HASH_ALGORITHMS and isinstance(row.digest, bytes)
    for item in malformed:
        assert set(item) == {"line", "path", "reason"} and isinstance(item["line"], int)
    json.dumps(integrity._clean(malformed)).encode("utf-8")


def parse(data):
    try:
        return record.parse_record(data)
    except IntegrityError as exc:
        assert "RECORD" in str(exc)
        return [], []


@SETTINGS
@given(RECORD_TEXT)
def test_generated_record_text_parses_cleanly(text):
    check_parsed(parse(text.encode("utf-8", "surrogatepass")))


@SETTINGS
@given(st.binary(max_size=300))
def test_random_record_bytes_parse_cleanly(data):
    check_parsed(parse(data))


@pytest.mark.parametrize("size", ["²", "٣", "1" * 5000, "-1", " 1"])
def test_odd_sizes_are_malformed_rows_not_crashes(size):
    rows, malformed = record.parse_record(("demo/a.py,,%s\ndemo/b.py,sha256=%s,%s\n" % (size, "A" * 43, size)).encode())
    assert rows == [] and [m["path"] for m in malformed] == ["demo/a.py", "demo/b.py"]
    assert all("is not a non-negative integer" in m["reason"] for m in malformed)


def test_record_larger_than_the_limit_is_a_clear_error():
    with pytest.raises(IntegrityError, match="larger than 10 bytes"):
        record.parse_record(b"a,,1\nb,,2\nc,,3\n", limit=10)


def test_non_utf8_paths_are_kept_for_the_file_system_and_shown_safely():
    rows, malformed = record.parse_record(b"demo/\xff.py,,3\n")
    assert rows[0].path.encode("utf-8", "surrogateescape") == b"demo/\xff.py"
    assert record.safe_text(rows[0].path) == "demo/\\xff.py"
