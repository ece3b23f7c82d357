# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checks of vLLM's answers (module_utils/vllm_api.py) against any bytes a server may send.

The client's ``request`` is replaced by one that returns the bytes under
test, so the parsing is exercised without a server: every answer gives a
clean result or a VllmApiError, never another exception, and what comes out
(results and messages) is short, valid UTF-8 text that Ansible can carry.
"""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ansible_collections.gpufleet.vllm.plugins.module_utils import systemd, vllm_api

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


class CannedClient(vllm_api.VllmClient):
    """A VllmClient whose every request answers 200 with RAW."""

    def __init__(self, raw):
        super(CannedClient, self).__init__("http://127.0.0.1:9")
        self.raw = raw

    def request(self, method, path, body=None, timeout=None):
        return 200, self.raw


def carried(value):
    """VALUE as Ansible carries a result: strict JSON, encoded as UTF-8 (fails on lone surrogates, NaN...)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


def outcome(call):
    """The result of CALL, or the VllmApiError message; any other exception fails the test."""
    try:
        value = call()
    except vllm_api.VllmApiError as exc:
        message = str(exc)
        carried(message)
        assert len(message) < 2000, "an error message of %d characters" % len(message)
        return ("error", message)
    carried(value)
    return ("ok", value)


def every_check(raw):
    client = CannedClient(raw)
    results = [outcome(client.version), outcome(client.models),
               outcome(lambda: client.complete("m")), outcome(lambda: vllm_api._error_text(raw))]
    gate = vllm_api.wait_ready(client, "m", timeout=0, once=True)
    carried(gate)
    assert len(gate["msg"]) < 4000
    return results


# --------------------------------------------------------------------------- one answer each


def test_deeply_nested_json_is_a_clean_error():
    raw = b'{"data": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    (kind, message) = outcome(CannedClient(raw).models)
    assert (kind, message) == ("error", "/v1/models answered JSON nested too deeply to read")
    assert vllm_api._error_text(b"[" * 100000) == ("[" * 300) + "..."


@pytest.mark.parametrize("raw, words", [
    (b'{"data": 5}', "/v1/models did not give a model list: {'data': 5}"),
    (b"[]", "/v1/models did not give a model list: []"),
    (b"\xff\xfe{}", "/v1/models did not answer JSON: b'\\xff\\xfe{}'"),
    (b"1" * 5000, "/v1/models did not answer JSON"),
    (b"", "/v1/models did not answer JSON: b''"),
])
def test_answers_that_are_not_a_model_list(raw, words):
    kind, message = outcome(CannedClient(raw).models)
    assert kind == "error" and message.startswith(words)


def test_a_huge_wrong_answer_gives_a_short_message():
    raw = json.dumps({"data": 5, "pad": "x" * 1000000}).encode()
    kind, message = outcome(CannedClient(raw).models)
    assert kind == "error" and message.startswith("/v1/models did not give a model list: {")
    assert len(message) < 500


def test_lone_surrogates_and_odd_values_become_valid_text():
    client = CannedClient(b'{"data": [{"id": "a\\ud800b"}, {"id": 7}, "x", {"id": "ok"}], "version": "1\\udfff"}')
    assert client.models() == ["a\\ud800b", "ok"]
    assert client.version() == "1\\udfff"
    client.raw = (b'{"choices": [{"text": "\\udc80", "finish_reason": 5}], '
                  b'"usage": {"completion_tokens": 1, "x\\ud800": 2, "f": 1e999, "n": NaN, "b": true, "deep": [[1]]}}')
    assert client.complete("m") == {"text": "\\udc80", "finish_reason": None, "completion_tokens": 1,
                                    "usage": {"completion_tokens": 1, "x\\ud800": 2}}


def test_a_models_message_lists_at_most_twenty_names():
    client = CannedClient(json.dumps({"data": [{"id": "n%d" % i} for i in range(5000)]}).encode())
    result = vllm_api.wait_ready(client, "missing", timeout=0, once=True, completion=False)
    error = result["stages"]["models"]["last_error"]
    assert error.startswith("'missing' is not listed (listed: 'n0', 'n1',") and error.endswith("and 4980 more)")


# --------------------------------------------------------------------------- fuzzed answers


json_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(alphabet=st.characters(blacklist_categories=()), max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=30)
shaped = st.one_of(
    st.fixed_dictionaries({"data": json_values}),
    st.fixed_dictionaries({"data": st.lists(st.fixed_dictionaries({"id": json_values}), max_size=5)}),
    st.fixed_dictionaries({"version": json_values}),
    st.fixed_dictionaries({"choices": st.lists(st.dictionaries(st.sampled_from(["text", "finish_reason", "x"]),
                                                               json_values), max_size=3),
                           "usage": json_values}),
    st.fixed_dictionaries({"error": json_values, "detail": json_values, "message": json_values}),
    json_values,
)
deep = st.integers(min_value=1, max_value=60000).map(lambda n: ("[" * n + "]" * n).encode())
huge_numbers = st.integers(min_value=1, max_value=6000).map(lambda n: b'{"usage": {"completion_tokens": ' + b"9" * n
                                                            + b'}, "choices": [{}]}')


@FUZZ
@given(st.binary(max_size=3000))
@example(b"\xed\xa0\x80")
def test_any_bytes_give_a_result_or_a_clean_error(raw):
    every_check(raw)


@FUZZ
@given(shaped.map(lambda value: json.dumps(value).encode()))
@example(b'{"data": [{"id": "\\ud800"}]}')
def test_any_json_of_vllms_shapes_gives_a_result_or_a_clean_error(raw):
    every_check(raw)


@FUZZ
@given(st.one_of(deep, huge_numbers, deep.map(lambda raw: b'{"error": {"message": ' + raw + b"}}")))
@example(b"[" * 60000 + b"]" * 60000)
def test_deep_nesting_and_huge_numbers_give_a_result_or_a_clean_error(raw):
    every_check(raw)


# --------------------------------------------------------------------------- the unit's journal in a result


def test_journal_lines_with_odd_bytes_and_huge_lines_are_valid_and_short():
    raw = b"10:00 host vllm[1]: caf\xe9 \xff\n" + b"10:01 host vllm[1]: " + b"x" * 100000 + b"\n" + b"lone \xed\xa0\x80\n"
    out = raw.decode("utf-8", "surrogateescape")  # what AnsibleModule.run_command gives for these bytes

    lines = systemd.journal_tail(lambda argv: (0, out, ""), "/bin/journalctl", "v.service", 5)
    carried(lines)
    assert lines[0] == "10:00 host vllm[1]: caf\\xe9 \\xff"
    assert len(lines[1]) <= 2003 and lines[1].endswith("...")
    assert lines[2] == "lone \\xed\\xa0\\x80"
    assert systemd.journal_tail(lambda argv: (0, "a\ud800b\n", ""), "/bin/journalctl", "v", 5) == ["a\\ud800b"]


@FUZZ
@given(st.binary(max_size=500))
def test_any_journal_bytes_give_valid_lines(raw):
    lines = systemd.journal_tail(lambda argv: (0, raw.decode("utf-8", "surrogateescape"), ""), "/bin/jc", "v", 30)
    carried(lines)


def test_show_stays_short_when_escaping_makes_a_bounded_repr_long():
    # (found by the fuzz test above: 8 keys of 8 non-ASCII characters at 4 levels, each escaped to 10 characters)
    word = "\U00041fa8" * 8
    level = {word + str(i): None for i in range(8)}
    for dummy in range(3):
        level = {word + str(i): dict(level) for i in range(8)}
    text = vllm_api.show({"detail": [level, level]})
    assert len(text) <= vllm_api.SHOW_MAX_CHARS and text.endswith("...") and text.isascii()
    message = str(vllm_api.VllmApiError("/version did not give a version: %s" % text))
    assert len(message) < 2000
    assert vllm_api.show({"a": 1}) == "{'a': 1}"
