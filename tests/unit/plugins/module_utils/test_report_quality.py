# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""report/quality.py: the quality gate's figures next to the reference's, as the reports show them."""

import json
import re

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.report import quality as report

import quality_results as results

HOSTILE = "evil\u202eorp\n# heading <img src=x> | [link](http://x)"


@pytest.mark.parametrize("result, phrase", [
    (results.gated(), "quality passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %)"),
    (results.gated(nll=6.9, differing=7), "quality FAILED: 1/8 answers, NLL 6.9000 (ref 1.2301, +460.9 %)"),
    (results.gated(nll=1.2301, differing=2), "quality FAILED: 6/8 answers, NLL 1.2301 (ref 1.2301, +0.0 %)"),
    (results.gated(tokens=130),
     "quality FAILED: 8/8 answers, NLL 1.2345 over 130 tokens (ref 1.2301 over 120, +0.4 %)"),
    (results.gated(nll=float("inf")), "quality FAILED: 8/8 answers, NLL infinite (ref 1.2301, inf)"),
    (results.not_gated(), "quality not gated (no reference): NLL 1.2345"),
    (results.not_gated(recorded=True), "quality recorded, not gated: NLL 1.2345"),
    (results.not_measured(), "quality not measured (timed out)"),
    (results.not_measured("no_logprobs"), "quality not measured (no prompt_logprobs)"),
    (results.not_measured("something new"), "quality not measured (something new)"),
])
def test_the_phrase_of_each_verdict(result, phrase):
    if result.get("figures") and result["figures"]["passage_nll"] == float("inf"):
        result["figures"]["passage_nll"] = None  # (the module shows an infinite NLL as null)
    assert report.phrase(report.digest(result)) == phrase
    assert report.cell_text(report.digest(result)) == phrase[len("quality "):]


@pytest.mark.parametrize("result", [None, {}, "passed", [], results.skipped(), results.preflight(),
                                    {"verdict": "maybe"}, {"changed": False}])
def test_no_gate_no_figures(result):
    assert report.digest(result) is None
    assert report.phrase(report.digest(result)) == ""
    assert report.table(report.digest(result)) == []
    assert report.section([("gpu-a01", report.digest(result))]) == []


def test_a_digest_is_small_json_and_digests_to_itself():
    full = results.gated(nll=6.9, differing=7)
    summary = report.digest(full)
    assert summary["verdict"] == "failed" and summary["gated"] is True and summary["error_kind"] is None
    assert summary["answers"] == {"matched": 1, "total": 8, "min_match": 0.8, "compare_tokens": 16}
    assert summary["passage"]["reference_nll"] == 1.2301 and summary["passage"]["tolerance"] == 0.05
    assert summary["reference"] == {"build": "0.32.0", "recorded_at": "2026-12-01T10:00:00Z"}
    assert len(summary["failures"]) == 2
    # (no per-prompt texts, token ids or entry: the digest is what a report shows)
    assert "per_prompt" not in json.dumps(summary) and "token_ids" not in json.dumps(summary)
    assert json.loads(json.dumps(summary)) == summary
    for result in (full, results.gated(), results.not_gated(), results.not_gated(recorded=True),
                   results.not_measured()):
        once = report.digest(result)
        assert report.digest(json.loads(json.dumps(once))) == once


def test_the_table_of_a_failed_gate():
    lines = report.table(report.digest(results.gated(nll=6.9, differing=7)))
    assert lines[:2] == ["| answer quality | this host | reference | gate |", "|---|---|---|---|"]
    assert "| verdict | **FAILED** |  |  |" in lines
    assert ("| greedy answers matching the reference | 1 of 8 (12 %) |  | at least 80 %, first 16 tokens compared |"
            in lines)
    assert ("| passage mean NLL per token | 6.9000 over 120 tokens | 1.2301 over 120 tokens | same token count |"
            in lines)
    assert "| relative difference | +460.9 % |  | within ±5.0 % |" in lines
    assert "| build | 0.33.0 | 0.32.0, recorded 2026-12-01T10:00:00Z |  |" in lines
    # what failed, in the module's own words, as a list under the table
    assert [line for line in lines if line.startswith("- ")] == [
        "- the greedy answers match the reference for 1 of 8 prompts (12 %, at least 80 % needed; the first to "
        "differ is prompt 1, at token 0)",
        "- the passage's mean NLL is 6.9000 per token against the reference's 1.2301 (+460.9 %, tolerance 5.0 %)"]


def test_the_table_of_a_passed_gate_not_gated_and_not_measured():
    passed = report.table(report.digest(results.gated()))
    assert "| verdict | passed |  |  |" in passed and not [line for line in passed if line.startswith("- ")]
    assert "| relative difference | +0.4 % |  | within ±5.0 % |" in passed
    free = report.table(report.digest(results.not_gated()))
    assert "| verdict | not gated: no reference for this model and quantisation |  |  |" in free
    assert "| greedy answers | 8 measured, not compared |  |  |" in free
    assert "| passage mean NLL per token | 1.2345 over 120 tokens |  |  |" in free
    assert not any(line.startswith("| relative difference") for line in free)
    failed = report.table(report.digest(results.not_measured()))
    assert "| verdict | **not measured** (timed out) |  |  |" in failed
    assert failed[-1].startswith("Not measured: Quality of kimi-k2.5 (nvfp4) at http://127.0.0.1:8000 not measured")


def test_the_section_names_each_host_whose_gate_ran():
    lines = report.section([("gpu-a01", report.digest(results.gated())), ("gpu-a02", None),
                            ("gpu-a03", report.digest(results.not_gated()))])
    assert lines[1] == "## Answer quality"
    assert "**gpu-a01**: quality passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %)" in lines
    assert "**gpu-a03**: quality not gated (no reference): NLL 1.2345" in lines
    assert not any("gpu-a02" in line for line in lines)


def _hostile_result():
    result = results.gated(nll=6.9, differing=7)
    result.update(build=HOSTILE, msg=HOSTILE, failures=[HOSTILE, 42, None],
                  reference={"build": HOSTILE, "recorded_at": HOSTILE})
    return result


def test_hostile_strings_stay_text_on_one_line():
    lines = report.section([(HOSTILE, report.digest(_hostile_result())),
                            ("gpu-a02", report.digest(results.not_measured(HOSTILE, HOSTILE)))])
    text = "\n".join(lines)
    assert "\u202e" not in text and "\\u202e" in text
    # (markup only as escaped text: no HTML, no link, no heading of the host's)
    assert not re.search(r"(?<!\\)<img|(?<!\\)\]\(http", text) and "\n# heading" not in text
    for line in lines:
        if line.startswith("| "):
            # the host's | is escaped: each row keeps its four cells
            assert line.replace("\\|", "").count("|") == 5, line
    # the terminal's line: one line, the bidirectional override visible, the kind not a sentence of the host's
    phrase = report.phrase(report.digest(results.not_measured(HOSTILE, HOSTILE)))
    assert "\n" not in phrase and "\u202e" not in phrase
    assert phrase.startswith("quality not measured (evil\\u202eorp\\n")


@pytest.mark.parametrize("bad", [
    {"verdict": "passed", "answers": {"matched": "8", "total": True},
     "passage": {"nll": "1.2", "reference_nll": 1e400, "relative_difference": [1]}},
    {"verdict": "failed", "answers": [], "passage": "x", "failures": "not a list", "reference": "0.32.0"},
    {"verdict": "not_gated", "figures": {"passage_nll": float("nan"), "passage_tokens": -3, "answers": "x"}},
    {"verdict": "error", "error_kind": {"a": 1}, "msg": ["x"]},
])
def test_a_hand_edited_digest_shows_dashes_not_garbage(bad):
    summary = report.digest(bad)
    assert summary is not None and summary["verdict"] == bad["verdict"]
    lines = report.table(summary) + [report.phrase(summary)]
    text = "\n".join(lines)
    assert "1e400" not in text and "nan" not in text.lower() and "True" not in text and "[1]" not in text
