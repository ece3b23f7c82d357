# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The quality gate's figures next to the reference's, as the reports show them (the rollout's summary, the
benchmark's fleet report, the audit's drift report).

Pure functions. Their input is a host's ``quality_result`` (what gpufleet.vllm.vllm_quality_info returns, registered
by the role gpufleet.vllm.quality) or the digest made of one (:func:`digest`, kept in summary.json files): every value
is checked again, so a hand-edited or hostile file shows as text, never as markup.

* :func:`digest` -- the figures of one result, small and checked (None: the gate did not run).
* :func:`phrase` -- one short line: ``quality passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %)``.
* :func:`cell_text` -- the phrase without its ``quality`` (a table's cell).
* :func:`table` -- the Markdown lines of one host's small table (verdict, answers, NLL and the reference's,
  relative difference, tolerance, builds), with what failed or why nothing was measured under it.
* :func:`section` -- ``## Answer quality``: each host's table.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import markdown_inline, one_line, valid_text

VERDICTS = ("passed", "failed", "not_gated", "error")
#: What a measure that failed before its verdict was about, in a few words (vllm_quality_info's error_kind).
KIND_WORDS = {
    "options": "options refused",
    "reference": "reference refused",
    "tokenizer": "tokenizer files unreadable",
    "no_model": "model not served",
    "no_logprobs": "no prompt_logprobs",
    "too_long": "passage too long",
    "timeout": "timed out",
    "too_large": "reply too large",
    "http": "HTTP error",
    "server": "server not answering",
    "invalid": "answers not vLLM's",
    # (the task that measures failed before the module answered: its options refused, the role's checks)
    "task": "its task failed",
}
MAX_TEXT = 200
MAX_MSG = 2000
MAX_FAILURES = 10
MAX_FAILURE = 600


def cell(value):
    """VALUE (from a host) as one Markdown table cell that shows exactly VALUE: one line, no markup, no | that ends
    the cell (as report.rollout.cell, without its '-' for an empty value)."""
    return markdown_inline(one_line(valid_text(value))).replace("|", "\\|")


def _text(value, limit=MAX_TEXT):
    """VALUE as bounded valid text; None for None or an empty text."""
    if value is None or isinstance(value, (dict, list, tuple, bool)):
        return None
    value = valid_text(value)
    if not value:
        return None
    return value if len(value) <= limit else value[:limit - 3] + "..."


def _count(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 10 ** 9:
        return None
    return value


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and abs(value) < 1e12 else None


def _flag(value):
    return value if isinstance(value, bool) else None


def _dict(value):
    return value if isinstance(value, dict) else {}


def digest(result):
    """The figures of one host's quality gate, small and checked: a dict of verdict (passed, failed, not_gated,
    error), gated, why_not_gated, error_kind, msg, build, model, quantization, answers (matched, total, min_match,
    compare_tokens), passage (nll, tokens, reference_nll, reference_tokens, relative_difference, tolerance,
    same_tokens), failures and reference (build, recorded_at); None when the gate did not run (no result, skipped,
    or a pre-flight's answer: nothing measured). RESULT: a quality_result, or a digest (the same keys)."""
    if not isinstance(result, dict) or result.get("skipped") is True:
        return None
    verdict = result.get("verdict")
    figures = _dict(result.get("figures"))
    passage_in = _dict(result.get("passage"))
    if verdict == "failed" or verdict == "error" or verdict not in VERDICTS and (
            result.get("failed") is True or result.get("error_kind")):
        # (a failed gate keeps its figures; a measure that failed before its verdict has none)
        verdict = "failed" if verdict == "failed" or result.get("error_kind") == "gate" else "error"
    elif verdict not in VERDICTS:
        return None
    measured_nll = passage_in.get("nll") if "nll" in passage_in else figures.get("passage_nll")
    measured_tokens = passage_in.get("tokens") if "tokens" in passage_in else figures.get("passage_tokens")
    if verdict == "not_gated" and not figures and not passage_in:
        return None  # (mode=preflight: nothing was measured)
    answers_in = _dict(result.get("answers"))
    answers = None
    if answers_in:
        answers = {"matched": _count(answers_in.get("matched")), "total": _count(answers_in.get("total")),
                   "min_match": _number(answers_in.get("min_match")),
                   "compare_tokens": _count(answers_in.get("compare_tokens"))}
    elif isinstance(figures.get("answers"), list):
        answers = {"matched": None, "total": _count(len(figures["answers"])), "min_match": None, "compare_tokens": None}
    passage = None
    if passage_in or figures:
        passage = {"nll": _number(measured_nll), "tokens": _count(measured_tokens),
                   "reference_nll": _number(passage_in.get("reference_nll")),
                   "reference_tokens": _count(passage_in.get("reference_tokens")),
                   "relative_difference": _number(passage_in.get("relative_difference")),
                   "tolerance": _number(passage_in.get("tolerance")),
                   "same_tokens": _flag(passage_in.get("same_tokens"))}
    failures = result.get("failures") if isinstance(result.get("failures"), list) else []
    reference_in = _dict(result.get("reference"))
    why = result.get("why_not_gated")
    if verdict == "not_gated" and why not in ("no reference", "recorded"):
        why = "recorded" if isinstance(result.get("entry"), dict) else "no reference"
    return {
        "verdict": verdict,
        "gated": verdict in ("passed", "failed") and result.get("gated") is not False,
        "why_not_gated": why if verdict == "not_gated" else None,
        "error_kind": _text(result.get("error_kind"), 40) if verdict == "error" else None,
        "msg": _text(result.get("msg"), MAX_MSG),
        "build": _text(result.get("build")),
        "model": _text(result.get("model")),
        "quantization": _text(result.get("quantization")),
        "answers": answers,
        "passage": passage,
        "failures": [_text(item, MAX_FAILURE) for item in failures[:MAX_FAILURES] if _text(item, MAX_FAILURE)],
        "reference": {"build": _text(reference_in.get("build")),
                      "recorded_at": _text(reference_in.get("recorded_at"), 40)} if reference_in else None,
    }


def finding(summary):
    """Whether a digest is something an operator must act on: a failed gate, or a measure that failed."""
    return isinstance(summary, dict) and summary.get("verdict") in ("failed", "error")


def _nll(value):
    return "%.4f" % value if value is not None else "infinite"


def _relative(value):
    if value is None:
        return "inf"
    # (a difference that rounds to nothing is +0.0 %, not -0.0 %)
    return "%+.1f %%" % (value * 100 if round(value * 100, 1) != 0 else 0.0)


def _answers(answers):
    """'8/8 answers' (a gate) or '8 answers' (not gated); '' without them."""
    if not answers or answers.get("total") is None:
        return ""
    if answers.get("matched") is None:
        return "%d answers" % answers["total"]
    return "%d/%d answers" % (answers["matched"], answers["total"])


def cell_text(summary):
    """The figures of a digest in a few words, without 'quality': 'passed: 8/8 answers, NLL 1.2345 (ref 1.2301,
    +0.4 %)', 'FAILED: ...', 'not gated (no reference): NLL 1.2345', 'not measured (timed out)'; '' when None.
    Plain text (every value from the host one_line()d): the caller escapes it for its medium."""
    if not isinstance(summary, dict) or summary.get("verdict") not in VERDICTS:
        return ""
    verdict = summary["verdict"]
    if verdict == "error":
        kind = summary.get("error_kind")
        return "not measured (%s)" % one_line(KIND_WORDS.get(kind, kind or "no reason given"))
    answers, passage = summary.get("answers") or {}, summary.get("passage") or {}
    # (not gated: the answers' count says nothing, the NLL is the figure)
    parts = [_answers(answers)] if answers.get("matched") is not None else []
    if passage:
        nll = "NLL %s" % _nll(passage.get("nll"))
        if passage.get("same_tokens") is False:
            nll += " over %s tokens" % one_line(passage.get("tokens"))
        if passage.get("reference_nll") is not None:
            nll += " (ref %s%s, %s)" % (
                _nll(passage["reference_nll"]),
                " over %s" % one_line(passage.get("reference_tokens")) if passage.get("same_tokens") is False else "",
                _relative(passage.get("relative_difference")))
        parts.append(nll)
    if verdict == "not_gated":
        head = "recorded, not gated" if summary.get("why_not_gated") == "recorded" else "not gated (no reference)"
    else:
        head = "passed" if verdict == "passed" else "FAILED"
    return "%s: %s" % (head, ", ".join(parts)) if parts else head


def phrase(summary):
    """One line for a terminal: 'quality ' and cell_text(); '' when the gate did not run."""
    text = cell_text(summary)
    return "quality " + text if text else ""


def _percent(value):
    return "%.0f %%" % (value * 100) if value is not None else "-"


def _row(*cells):
    return "| %s |" % " | ".join(cells)


def table(summary):
    """The Markdown lines of one host's small table (verdict, answers, NLL and the reference's, relative difference,
    tolerance, builds), then what failed, or why nothing was measured, as a list; [] when the gate did not run.
    Every value from the host is escaped (cell(): one line, no markup, no | that ends a cell)."""
    if not isinstance(summary, dict) or summary.get("verdict") not in VERDICTS:
        return []
    verdict = summary["verdict"]
    words = {"passed": "passed", "failed": "**FAILED**", "error": "**not measured**",
             "not_gated": "recorded, not gated" if summary.get("why_not_gated") == "recorded"
             else "not gated: no reference for this model and quantisation"}[verdict]
    if verdict == "error":
        kind = summary.get("error_kind")
        words += " (%s)" % cell(KIND_WORDS.get(kind, kind or "no reason given"))
    lines = [_row("answer quality", "this host", "reference", "gate"), "|---|---|---|---|",
             _row("verdict", words, "", "")]
    answers, passage = summary.get("answers") or {}, summary.get("passage") or {}
    reference = summary.get("reference") or {}
    if answers.get("total") is not None and answers.get("matched") is not None:
        share = float(answers["matched"]) / answers["total"] if answers["total"] else None
        gate = []
        if answers.get("min_match") is not None:
            gate.append("at least %s" % _percent(answers["min_match"]))
        if answers.get("compare_tokens") is not None:
            gate.append("first %d tokens compared" % answers["compare_tokens"])
        lines.append(_row("greedy answers matching the reference", "%d of %d (%s)" % (
            answers["matched"], answers["total"], _percent(share)), "", ", ".join(gate)))
    elif answers.get("total") is not None:
        lines.append(_row("greedy answers", "%d measured, not compared" % answers["total"], "", ""))
    if passage:
        tokens = " over %d tokens" % passage["tokens"] if passage.get("tokens") is not None else ""
        ref_tokens = (" over %d tokens" % passage["reference_tokens"]
                      if passage.get("reference_tokens") is not None else "")
        lines.append(_row("passage mean NLL per token", _nll(passage.get("nll")) + tokens,
                          _nll(passage["reference_nll"]) + ref_tokens if passage.get("reference_nll") is not None
                          else "", "same token count" if passage.get("same_tokens") is not None else ""))
        if passage.get("reference_nll") is not None:
            lines.append(_row("relative difference", _relative(passage.get("relative_difference")), "",
                              "within ±%.1f %%" % (passage["tolerance"] * 100)
                              if passage.get("tolerance") is not None else ""))
    if summary.get("build") or reference.get("build"):
        recorded = reference.get("recorded_at")
        lines.append(_row("build", cell(summary.get("build")) if summary.get("build") else "-",
                          (cell(reference["build"]) + (", recorded %s" % cell(recorded) if recorded else ""))
                          if reference.get("build") else "", ""))
    if verdict == "failed" and summary.get("failures"):
        lines.append("")
        lines.extend("- %s" % cell(item) for item in summary["failures"])
    elif verdict == "error" and summary.get("msg"):
        lines.extend(["", "Not measured: %s" % cell(summary["msg"])])
    return lines


def section(items, heading="## Answer quality"):
    """Markdown lines of HEADING and, per (host, digest) of ITEMS whose gate ran, ``**host**: phrase`` and its table;
    [] when none ran. The host's name is escaped here."""
    out = []
    for host, summary in items:
        lines = table(summary)
        if lines:
            out.extend(["", "**%s**: %s" % (cell(host), cell(phrase(summary))), ""] + lines)
    if not out:
        return []
    return ["", heading, "", "Each host's greedy answers and the mean negative log-likelihood (NLL) per token of a "
            "fixed passage, against the reference recorded for its model and quantisation "
            "(gpufleet.vllm.vllm_quality_info)."] + out
