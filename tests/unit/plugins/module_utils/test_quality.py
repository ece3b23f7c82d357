# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/quality.py: vLLM's replies read as vLLM writes them, the reference's checks, the gate's arithmetic.

The server is tests/unit/fakevllm_quality.py, a thread answering in the shapes of vLLM's OpenAI server.
"""

import copy
import math
import time

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import quality
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import VllmClient
from fakevllm_quality import FakeVllm, encode

PROMPTS = ["The capital of France is", "def add(a, b):", "One, two, three,"]
PASSAGE = "The quick brown fox jumps over the lazy dog, and the dog does not mind at all."


@pytest.fixture
def fake():
    server = FakeVllm().start()
    yield server
    server.stop()


def client_of(fake, timeout=10.0, max_bytes=quality.MAX_TOKENIZER_BYTES):
    return VllmClient(fake.url, timeout=timeout, max_response_bytes=max_bytes)


def measured(fake, **kwargs):
    args = dict(served_model_name="tiny", prompts=PROMPTS, passage=PASSAGE, max_tokens=8, seed=0, timeout=60)
    args.update(kwargs)
    return quality.measure(client_of(fake), **args)


def entry_of(figures, tokenizer="sha256:abc"):
    return quality.make_entry(figures, "tiny", "", tokenizer, PASSAGE, 8, 4, 0, "2026-01-01T00:00:00Z")


# -- vLLM's replies --------------------------------------------------------------------------------------------------


def test_prompt_logprobs_as_vllm_writes_them_give_the_mean_nll_of_the_prompts_own_tokens(fake):
    ids = encode(PASSAGE)
    body = fake.completion({"prompt": PASSAGE, "max_tokens": 1, "prompt_logprobs": 0, "return_token_ids": True})
    assert body["choices"][0]["prompt_logprobs"][0] is None
    nll, count = quality.parse_prompt_logprobs(body)
    expected = -sum(fake.logprob(position, token) for position, token in enumerate(ids[1:], 1)) / (len(ids) - 1)
    assert count == len(ids) - 1
    assert nll == pytest.approx(expected)
    # the most likely token (logprob -0.01) sits beside the prompt's own in each entry: it must not be the one read,
    # wherever it stands in the table
    assert nll > 0.4
    choice = body["choices"][0]
    choice["prompt_logprobs"] = [None] + [dict(reversed(list(e.items()))) for e in choice["prompt_logprobs"][1:]]
    assert quality.parse_prompt_logprobs(body) == (nll, count)


def test_prompt_logprobs_without_the_prompts_token_ids_are_read_only_when_unambiguous(fake):
    body = fake.completion({"prompt": PASSAGE, "max_tokens": 1, "prompt_logprobs": 0})
    with pytest.raises(quality.QualityError, match="no prompt_token_ids"):
        quality.parse_prompt_logprobs(body)
    for entry in body["choices"][0]["prompt_logprobs"][1:]:
        for key in [k for k, v in entry.items() if v["rank"] == 1]:
            del entry[key]
    nll, count = quality.parse_prompt_logprobs(body)
    assert count == len(encode(PASSAGE)) - 1 and nll > 0.4


@pytest.mark.parametrize("logprob", [-10 ** 400, "missing"], ids=["too-large-for-a-float", "missing"])
def test_a_logprob_that_is_no_float_or_missing_is_refused_not_counted(fake, logprob):
    body = fake.completion({"prompt": PASSAGE, "max_tokens": 1, "prompt_logprobs": 0, "return_token_ids": True})
    ids = body["choices"][0]["prompt_token_ids"]
    if logprob == "missing":
        del body["choices"][0]["prompt_logprobs"][2][str(ids[2])]["logprob"]
    else:
        body["choices"][0]["prompt_logprobs"][2][str(ids[2])]["logprob"] = logprob
    with pytest.raises(quality.QualityError, match=r"prompt_logprobs\[2\] has no logprob of the prompt's token"):
        quality.parse_prompt_logprobs(body)


def test_a_null_logprob_counts_as_infinite_and_a_missing_list_names_prompt_logprobs(fake):
    body = fake.completion({"prompt": PASSAGE, "max_tokens": 1, "prompt_logprobs": 0, "return_token_ids": True})
    ids = body["choices"][0]["prompt_token_ids"]
    body["choices"][0]["prompt_logprobs"][2][str(ids[2])]["logprob"] = None
    assert math.isinf(quality.parse_prompt_logprobs(body)[0])
    body["choices"][0]["prompt_logprobs"] = None
    with pytest.raises(quality.QualityError, match="no prompt_logprobs") as exc:
        quality.parse_prompt_logprobs(body)
    assert exc.value.kind == "no_logprobs"


def test_answers_are_read_from_token_ids_then_from_token_id_strings_then_as_text(fake):
    body = fake.completion({"prompt": "hi", "max_tokens": 5, "return_token_ids": True, "logprobs": 0,
                            "return_tokens_as_token_ids": True})
    expected = fake.answer_ids("hi", 5)
    assert quality.parse_answer(body)["token_ids"] == expected
    fake.token_ids = False
    body = fake.completion({"prompt": "hi", "max_tokens": 5, "return_token_ids": True, "logprobs": 0,
                            "return_tokens_as_token_ids": True})
    assert body["choices"][0]["logprobs"]["tokens"][0].startswith("token_id:")
    assert quality.parse_answer(body)["token_ids"] == expected
    body = fake.completion({"prompt": "hi", "max_tokens": 5, "logprobs": 0})
    answer = quality.parse_answer(body)
    assert answer["token_ids"] is None and answer["text"] == body["choices"][0]["text"]


# -- the reference ---------------------------------------------------------------------------------------------------


def test_a_recorded_entry_has_no_problem_and_each_fault_is_named(fake):
    entry = entry_of(measured(fake))
    assert quality.reference_problems(entry, model="tiny", quantization="", tokenizer="sha256:abc") == []
    assert "recorded for the model 'tiny', not 'big'" in quality.reference_problems(entry, model="big")[0]
    assert "quantisation" in quality.reference_problems(entry, quantization="fp8")[0]
    assert "tokenizer sha256:abc" in quality.reference_problems(entry, tokenizer="sha256:other")[0]
    broken = copy.deepcopy(entry)
    broken["passage"]["nll"] = "low"
    broken["prompts"][1]["token_ids"] = ["a"]
    del broken["settings"]["seed"]
    problems = quality.reference_problems(broken)
    assert any("passage.nll" in p for p in problems) and any("prompts[1].token_ids" in p for p in problems)
    assert any("settings.seed" in p for p in problems)
    assert quality.reference_problems(["not", "a", "table"]) == ["the reference is not a table (got list)"]


def test_select_reference_by_model_then_quantisation_and_a_malformed_table_is_refused():
    table = {"tiny": {"fp8": {"format": 1}, "": {"format": 1, "plain": True}}}
    assert quality.select_reference(table, "tiny", "fp8") == {"format": 1}
    assert quality.select_reference(table, "tiny", "")["plain"]
    assert quality.select_reference(table, "other", "fp8") is None
    assert quality.select_reference(None, "tiny", "fp8") is None
    with pytest.raises(quality.QualityError, match="keyed by quantisation"):
        quality.select_reference({"tiny": ["fp8"]}, "tiny", "fp8")


def test_the_tokenizer_fingerprint_follows_the_tokenizer_files_only(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (tmp_path / "config.json").write_text("{}")
    first = quality.tokenizer_fingerprint(str(tmp_path))
    assert first.startswith("sha256:") and len(first) == 71
    (tmp_path / "config.json").write_text('{"changed": true}')
    assert quality.tokenizer_fingerprint(str(tmp_path)) == first
    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}')
    assert quality.tokenizer_fingerprint(str(tmp_path)) != first
    with pytest.raises(quality.QualityError, match="more than 10 bytes"):
        quality.tokenizer_fingerprint(str(tmp_path), max_bytes=10)
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(quality.QualityError, match="holds none of the tokenizer files"):
        quality.tokenizer_fingerprint(str(tmp_path))


# -- measure and compare against the server --------------------------------------------------------------------------


def test_the_same_server_measured_twice_passes_its_own_reference(fake):
    figures = measured(fake)
    assert figures["build"] == "0.33.0" and figures["max_model_len"] == 512
    assert figures["passage_tokens"] == len(encode(PASSAGE)) - 1
    assert [a["token_ids"] for a in figures["answers"]] == [fake.answer_ids(p, 8) for p in PROMPTS]
    gate = quality.compare(measured(fake), entry_of(figures))
    assert gate["passed"] and gate["failed"] == []
    assert gate["answers"]["share"] == 1.0 and gate["passage"]["relative_difference"] == 0.0
    sent = [body for method, path, body in fake.requests if path == "/v1/completions"]
    assert all(body["temperature"] == 0 and body["seed"] == 0 and body["stream"] is False for body in sent)
    assert sent[-1]["prompt_logprobs"] == 0 and sent[-1]["max_tokens"] == 1


def test_changed_answers_fail_below_the_share_and_pass_above_it(fake):
    entry = entry_of(measured(fake))
    fake.changed_prompts = (PROMPTS[1],)
    gate = quality.compare(measured(fake), entry, min_match=0.6)
    assert gate["passed"] and gate["answers"]["matched"] == 2
    gate = quality.compare(measured(fake), entry, min_match=0.8)
    assert not gate["passed"]
    assert gate["failed"] == ["the greedy answers match the reference for 2 of 3 prompts (67 %, at least 80 % needed; "
                              "the first to differ is prompt 2, at token 0)"]
    assert gate["answers"]["per_prompt"][1]["first_difference"] == 0


def test_only_the_first_compare_tokens_count(fake):
    entry = entry_of(measured(fake))
    for item in entry["prompts"]:
        item["token_ids"][5] += 1  # beyond compare_tokens (4)
    assert quality.compare(measured(fake), entry)["passed"]
    entry["prompts"][0]["token_ids"][3] += 1
    gate = quality.compare(measured(fake), entry, min_match=1.0)
    assert gate["answers"]["per_prompt"][0]["first_difference"] == 3 and not gate["passed"]


def test_an_nll_out_of_tolerance_fails_and_within_passes(fake):
    entry = entry_of(measured(fake))
    fake.nll_scale = 1.03
    assert quality.compare(measured(fake), entry, nll_tolerance=0.05)["passed"]
    fake.nll_scale = 1.2
    gate = quality.compare(measured(fake), entry, nll_tolerance=0.05)
    assert not gate["passed"] and gate["answers"]["passed"] and not gate["passage"]["passed"]
    assert gate["failed"][0].startswith("the passage's mean NLL is ")
    assert "+20.0 %, tolerance 5.0 %" in gate["failed"][0]


def test_another_passage_length_fails_first_whatever_the_nll(fake):
    entry = entry_of(measured(fake))
    entry["passage"]["tokens"] += 1
    gate = quality.compare(measured(fake), entry)
    assert gate["failed"] == ["the passage is %d tokens long and was %d when the reference was recorded (another "
                              "tokenizer or passage)" % (entry["passage"]["tokens"] - 1, entry["passage"]["tokens"])]


def test_a_server_without_prompt_logprobs_is_named(fake):
    fake.prompt_logprobs = False
    with pytest.raises(quality.QualityError, match="no prompt_logprobs") as exc:
        measured(fake)
    assert exc.value.kind == "no_logprobs"


def test_a_server_that_refuses_prompt_logprobs_is_named(fake):
    fake.refuse_logprobs = True
    with pytest.raises(quality.QualityError, match="the server refuses prompt_logprobs .HTTP 400: Requested prompt "
                       "logprobs of 0.*check its --max-logprobs") as exc:
        measured(fake)
    assert exc.value.kind == "no_logprobs"


def test_answers_without_token_ids_on_either_side_are_compared_as_text(fake):
    entry = entry_of(measured(fake))
    for item in entry["prompts"]:
        item["token_ids"] = None
    assert quality.compare(measured(fake), entry)["passed"]
    entry["prompts"][2]["text"] = entry["prompts"][2]["text"][:5] + "#"
    row = quality.compare(measured(fake), entry)["answers"]["per_prompt"][2]
    assert row == dict(row, matched=False, first_difference=5, compared="text")


def test_a_passage_longer_than_max_model_len_is_refused_before_it_is_sent(fake):
    fake.max_model_len = 12
    with pytest.raises(quality.QualityError) as exc:
        measured(fake)
    assert exc.value.kind == "too_long"
    assert str(exc.value).startswith("the passage is %d tokens long and the server's max_model_len is 12"
                                     % len(encode(PASSAGE)))
    assert fake.completions() == []


def test_without_tokenize_the_servers_own_refusal_names_the_length(fake):
    fake.tokenize = False
    fake.max_model_len = 16
    with pytest.raises(quality.QualityError) as exc:
        measured(fake, prompts=["hi"])
    assert exc.value.kind == "too_long" and "max_model_len 16" in str(exc.value)
    assert "maximum context length is 16" in str(exc.value)


def test_an_oversized_reply_is_cut_at_the_cap(fake):
    fake.padding = 300000
    with pytest.raises(quality.QualityError, match="more than the cap of 200000 bytes") as exc:
        quality.measure(client_of(fake, max_bytes=200000), served_model_name="tiny", prompts=PROMPTS, passage=PASSAGE)
    assert exc.value.kind == "too_large"


def test_a_slow_server_hits_the_request_deadline(fake):
    fake.delay = 120
    started = time.monotonic()
    with pytest.raises(quality.QualityError, match="no complete answer within 0.5 s") as exc:
        quality.measure(client_of(fake, timeout=0.5), served_model_name="tiny", prompts=PROMPTS, passage=PASSAGE)
    assert exc.value.kind == "timeout"
    assert time.monotonic() - started < 60


def test_the_overall_timeout_bounds_every_request(fake):
    ticks = iter([0.0, 0.0, 0.0, 0.0, 0.0, 400.0, 400.0, 400.0])
    with pytest.raises(quality.QualityError, match="overall timeout passed before") as exc:
        quality.measure(client_of(fake), served_model_name="tiny", prompts=PROMPTS, passage=PASSAGE, timeout=300,
                        clock=lambda: next(ticks))
    assert exc.value.kind == "timeout"


def test_a_model_the_server_does_not_serve_is_named(fake):
    with pytest.raises(quality.QualityError, match="does not serve 'big' \\(it lists 'tiny'\\)"):
        measured(fake, served_model_name="big")
