# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.vllm_quality_info against a server that answers as vLLM does (tests/unit/fakevllm_quality.py).

A reference is recorded from the server, kept as YAML (as an inventory keeps it), then gated against: the same
server passes, a damaged one fails with the figures beside the reference's, and a reference that cannot be the
server's is refused before any request.
"""

import pytest
import yaml

from ansible_collections.gpufleet.vllm.plugins.modules import vllm_quality_info
from fakevllm_quality import FakeVllm
from helpers import module_runner


@pytest.fixture
def fake():
    server = FakeVllm().start()
    yield server
    server.stop()


@pytest.fixture
def run(capsys):
    return module_runner(vllm_quality_info.main, capsys)


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "WordLevel", "vocab": {"[UNK]": 0}}}')
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    return str(tmp_path)


def recorded(run, fake, model_dir, **extra):
    args = dict(mode="record", base_url=fake.url, served_model_name="tiny", quantization="bf16", model_dir=model_dir,
                max_tokens=12, compare_tokens=8)
    args.update(extra)
    code, result = run(args)
    assert code == 0, result
    fake.requests.clear()
    # kept in an inventory as YAML, read back as Ansible reads it
    return yaml.safe_load(yaml.safe_dump({"tiny": {"bf16": result["entry"]}}))


def check(run, fake, model_dir, references, **extra):
    check_mode = extra.pop("check_mode", False)
    args = dict(base_url=fake.url, served_model_name="tiny", quantization="bf16", model_dir=model_dir,
                references=references)
    args.update(extra)
    return run(args, check=check_mode)


def test_record_returns_a_reference_and_the_same_server_passes_it(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    entry = references["tiny"]["bf16"]
    assert entry["model"] == "tiny" and entry["quantization"] == "bf16" and entry["build"] == "0.33.0"
    assert entry["tokenizer"].startswith("sha256:") and len(entry["prompts"]) == 8
    assert entry["prompts"][0]["token_ids"] == fake.answer_ids(entry["prompts"][0]["prompt"], 12)
    assert entry["settings"] == {"max_tokens": 12, "compare_tokens": 8, "seed": 0}
    code, result = check(run, fake, model_dir, references)
    assert code == 0, result
    assert result["verdict"] == "passed" and result["gated"] and result["changed"] is False
    assert result["answers"]["matched"] == 8 and result["passage"]["relative_difference"] == 0.0
    assert result["msg"].startswith("Quality of tiny (bf16) at %s passed: 8 of 8 answers match" % fake.url)
    assert "reference recorded on build 0.33.0, this is 0.33.0" in result["msg"]


def test_check_mode_reads_the_same_way(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    code, result = check(run, fake, model_dir, references, check_mode=True)
    assert code == 0 and result["check_mode"] is True and result["verdict"] == "passed"
    assert len(fake.completions()) == 9


def test_changed_answers_fail_with_the_figures_beside_the_reference(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    fake.answer_salt = "a damaged build"
    code, result = check(run, fake, model_dir, references)
    assert code == 1 and result["failed"] is True and len(result["failures"]) == 1
    assert result["verdict"] == "failed" and result["error_kind"] == "gate"
    assert result["msg"].startswith("Quality of tiny (bf16) at %s failed: the greedy answers match the reference for "
                                    "0 of 8 prompts (0 %%, at least 80 %% needed; the first to differ is prompt 1, at "
                                    "token 0). Figures: 0 of 8 answers match" % fake.url)
    assert result["passage"]["passed"] and not result["answers"]["passed"]


def test_an_nll_out_of_tolerance_fails_and_the_message_says_so_first(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    fake.nll_scale = 1.5
    code, result = check(run, fake, model_dir, references, nll_tolerance=0.1)
    assert code == 1 and result["verdict"] == "failed"
    assert "failed: the passage's mean NLL is " in result["msg"] and "(+50.0 %, tolerance 10.0 %)" in result["msg"]
    code, result = check(run, fake, model_dir, references, nll_tolerance=0.6)
    assert code == 0 and result["verdict"] == "passed"


def test_a_missing_reference_is_said_not_gated(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    code, result = check(run, fake, model_dir, references, model="other")
    assert code == 0 and result["gated"] is False and result["verdict"] == "not_gated"
    assert "not gated: there is no reference for this model and quantisation" in result["msg"]
    assert result["figures"]["passage_tokens"] > 10


@pytest.mark.parametrize("fault, words", [
    (lambda refs: refs["tiny"]["bf16"].update(model="other"), "recorded for the model 'other', not 'tiny'"),
    (lambda refs: refs["tiny"]["bf16"].update(tokenizer="sha256:0000"), "recorded with the tokenizer sha256:0000"),
    (lambda refs: refs["tiny"]["bf16"].update(quantization="fp8"), "quantisation 'fp8', not 'bf16'"),
    (lambda refs: refs["tiny"]["bf16"]["passage"].pop("nll"), "passage.nll is not a positive number"),
    (lambda refs: refs["tiny"]["bf16"].update(prompts="none"), "prompts is not a list"),
    (lambda refs: refs["tiny"].update(bf16=["a list"]), "the reference is not a table (got list)"),
    (lambda refs: refs.update(tiny="fp8"), "not a table keyed by quantisation"),
], ids=["other-model", "other-tokenizer", "other-quantisation", "no-nll", "no-prompts", "entry-list", "table"])
def test_a_reference_that_cannot_be_this_servers_is_refused_before_any_request(run, fake, model_dir, fault, words):
    references = recorded(run, fake, model_dir)
    fault(references)
    code, result = check(run, fake, model_dir, references)
    assert code == 1 and result["error_kind"] == "reference"
    assert words in result["msg"] and "Nothing was sent" in result["msg"]
    assert fake.requests == []


def test_another_tokenizer_on_disk_is_refused_before_any_request(run, fake, model_dir, tmp_path_factory):
    references = recorded(run, fake, model_dir)
    other = tmp_path_factory.mktemp("other")
    (other / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    code, result = check(run, fake, str(other), references)
    assert code == 1 and result["error_kind"] == "reference" and "recorded with the tokenizer" in result["msg"]
    assert fake.requests == []


def test_a_server_without_logprobs_is_a_clear_error(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    fake.prompt_logprobs = False
    code, result = check(run, fake, model_dir, references)
    assert code == 1 and result["error_kind"] == "no_logprobs"
    assert "the server's reply has no prompt_logprobs" in result["msg"]


def test_a_passage_longer_than_max_model_len_is_refused_naming_both(run, fake, model_dir):
    fake.max_model_len = 40
    code, result = run(dict(mode="measure", base_url=fake.url, served_model_name="tiny", passage="word " * 60))
    assert code == 1 and result["error_kind"] == "too_long"
    assert "the passage is 61 tokens long and the server's max_model_len is 40" in result["msg"]
    assert [body for method, path, body in fake.completions() if body.get("prompt_logprobs") is not None] == []
    assert fake.completions() == []


def test_an_oversized_reply_fails_at_the_cap(run, fake, model_dir):
    fake.padding = 5000
    code, result = run(dict(mode="measure", base_url=fake.url, served_model_name="tiny", max_response_bytes=4096))
    assert code == 1 and result["error_kind"] == "too_large" and "cap of 4096 bytes" in result["msg"]


def test_a_slow_server_hits_the_request_deadline(run, fake):
    fake.delay = 120
    code, result = run(dict(mode="measure", base_url=fake.url, served_model_name="tiny", request_timeout=0.5))
    assert code == 1 and result["error_kind"] == "timeout"
    assert "the greedy completion of prompt 1: no complete answer within 0.5 s" in result["msg"]


def test_options_that_cannot_work_are_refused_before_any_request(run, fake):
    code, result = run(dict(base_url=fake.url, served_model_name="tiny", prompts=["x"], references={}))
    assert code == 1 and result["error_kind"] == "options" and "mode=check uses the reference's" in result["msg"]
    code, result = run(dict(mode="record", base_url=fake.url, compare_tokens=40))
    assert code == 1 and "compare_tokens must be 1 to max_tokens (32); got 40" in result["msg"]
    assert "mode=record needs model" in result["msg"]
    assert fake.requests == []


def test_record_mode_without_token_ids_keeps_the_text(run, fake, model_dir):
    fake.token_ids = False
    references = recorded(run, fake, model_dir)
    assert references["tiny"]["bf16"]["prompts"][0]["token_ids"] == fake.answer_ids(
        references["tiny"]["bf16"]["prompts"][0]["prompt"], 12)
    code, result = check(run, fake, model_dir, references)
    assert code == 0 and result["answers"]["per_prompt"][0]["compared"] == "token_ids"


def test_preflight_sends_nothing_and_says_whether_the_host_will_be_gated(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    code, result = check(run, fake, model_dir, references, mode="preflight")
    assert code == 0, result
    assert result["gated"] is True and result["verdict"] == "not_gated" and "figures" not in result
    assert "fits (model, quantisation, tokenizer; recorded on build 0.33.0)" in result["msg"]
    code, result = check(run, fake, model_dir, {"other": {}}, mode="preflight")
    assert code == 0 and result["gated"] is False and "will not be gated" in result["msg"]
    assert fake.requests == []


@pytest.mark.parametrize("fault, words", [
    (lambda entry: entry.update(model="other"), "recorded for the model 'other', not 'tiny'"),
    (lambda entry: entry.update(tokenizer="sha256:" + "0" * 64), "recorded with the tokenizer sha256:000"),
    (lambda entry: entry["passage"].pop("nll"), "passage.nll is not a positive number"),
])
def test_preflight_refuses_a_reference_that_cannot_be_this_hosts(run, fake, model_dir, fault, words):
    references = recorded(run, fake, model_dir)
    fault(references["tiny"]["bf16"])
    code, result = check(run, fake, model_dir, references, mode="preflight")
    assert code == 1 and result["error_kind"] == "reference" and words in result["msg"], result
    assert "Nothing was sent" in result["msg"] and fake.requests == []


def test_the_quantisation_is_read_from_the_model_directory_when_not_given(run, fake, model_dir, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"torch_dtype": "bfloat16"}')
    references = recorded(run, fake, model_dir, quantization=None)
    assert list(references["tiny"]) == ["bf16"]
    code, result = check(run, fake, model_dir, references, quantization=None)
    assert code == 0 and result["quantization"] == "bf16" and result["verdict"] == "passed", result
    assert result["quantization_source"].startswith("config.json torch_dtype")
    config.write_text('{"quantization_config": {"quant_method": "fp8"}}')
    code, result = check(run, fake, model_dir, references, quantization=None, mode="preflight")
    assert code == 1 and result["quantization"] == "fp8" and result["error_kind"] == "reference", result
    assert "none for 'fp8' (read from config.json quantization_config" in result["msg"], result["msg"]


def test_a_quantisation_that_is_no_plain_name_is_refused(run, fake, model_dir):
    code, result = check(run, fake, model_dir, None, quantization="int4\nfp8")
    assert code == 1 and result["error_kind"] == "options" and "quantization" in result["msg"], result


def test_a_quantisation_without_a_reference_beside_others_is_refused_not_waved_through(run, fake, model_dir, tmp_path):
    # (the model directory's config broken: no quantisation is read, and the damaged server must not pass as
    # "not gated")
    references = recorded(run, fake, model_dir)
    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16",}')
    fake.answer_salt = "damaged"
    for mode in ("preflight", "check"):
        code, result = check(run, fake, model_dir, references, quantization=None, mode=mode)
        assert code == 1 and result["error_kind"] == "reference", result
        assert "has a reference for 'bf16' but none for 'no quantisation' (none found in the model directory" in (
            result["msg"]), result["msg"]
    # null on purpose: measured without a gate
    references["tiny"]["fp8"] = None
    code, result = check(run, fake, model_dir, references, quantization="fp8")
    assert code == 0 and result["verdict"] == "not_gated" and result["gated"] is False, result


def test_a_failed_measure_says_whether_the_host_was_to_be_gated(run, fake, model_dir):
    references = recorded(run, fake, model_dir)
    fake.prompt_logprobs = False
    code, result = check(run, fake, model_dir, references)
    assert code == 1 and result["error_kind"] == "no_logprobs" and result["gated"] is True, result
    code, result = check(run, fake, model_dir, None)
    assert code == 1 and result["error_kind"] == "no_logprobs" and result["gated"] is False, result


def test_a_build_with_control_characters_stays_on_one_line_in_the_message(run, fake, model_dir):
    fake.build = "0.33.0\u202e\n# x: y"
    code, result = run(dict(mode="measure", base_url=fake.url, served_model_name="tiny", model_dir=model_dir))
    assert code == 0 and "\n" not in result["msg"] and "\u202e" not in result["build"], result
