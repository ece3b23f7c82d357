# SPDX-License-Identifier: GPL-3.0-or-later
"""Results of gpufleet.vllm.vllm_quality_info, as a host's ``quality_result`` holds them, for the reports' tests.

The gate's parts come from module_utils/quality.py's own compare() and make_entry(), so a change of their shape
shows here; the keys around them are the module's (verdict, gated, msg, error_kind, build, figures, reference).
A result registered with ``failed_when: false`` (as the role registers it) has ``failed: false``.
"""

from ansible_collections.gpufleet.vllm.plugins.module_utils import quality

PROMPTS = ["The capital of France is", "Water boils at a temperature of", "The first five prime numbers are",
           "def fibonacci(n):", "Once upon a time,", "The chemical symbol for gold is", "Translate: good morning ->",
           "1, 2, 3, 5, 8, 13,"]
REF_NLL = 1.2301
TOKENS = 120


def _figures(nll, differing=0, tokens=TOKENS, build="0.33.0"):
    answers = [{"prompt": prompt, "token_ids": [100 + index, 7, 8, 9] if index >= differing else [5, 5, 5, 5],
                "text": " answer %d" % index, "finish_reason": "length"} for index, prompt in enumerate(PROMPTS)]
    return {"build": build, "served_model_name": "kimi-k2.5", "max_model_len": 4096, "answers": answers,
            "passage_nll": nll, "passage_tokens": tokens, "requests": 12, "elapsed": 3.2}


def entry(build="0.32.0"):
    return quality.make_entry(_figures(REF_NLL, build=build), "kimi-k2.5", "nvfp4", "sha256:ab", "A passage.", 32, 16,
                              0, "2026-12-01T10:00:00Z")


def _base(build="0.33.0"):
    return {"changed": False, "check_mode": False, "url": "http://127.0.0.1:8000", "model": "kimi-k2.5",
            "quantization": "nvfp4", "tokenizer": "sha256:ab", "build": build, "max_model_len": 4096}


def gated(nll=1.2345, differing=0, tokens=TOKENS, build="0.33.0", reference_build="0.32.0"):
    """A gate's result: passed or failed as module_utils/quality.compare() says (NLL, answers that differ)."""
    ref = entry(reference_build)
    figures = _figures(nll, differing, tokens, build)
    gate = quality.compare(figures, ref, min_match=0.8, nll_tolerance=0.05)
    result = dict(_base(build), gated=True, figures=figures, answers=gate["answers"], passage=gate["passage"],
                  failures=gate["failed"], reference={"build": ref["build"], "tokenizer": ref["tokenizer"],
                                                      "recorded_at": ref["recorded_at"]})
    if gate["passed"]:
        result.update(verdict="passed", msg="Quality of kimi-k2.5 (nvfp4) at http://127.0.0.1:8000 passed: %d of %d "
                      "answers match." % (gate["answers"]["matched"], gate["answers"]["total"]))
    else:
        result.update(verdict="failed", failed=False, error_kind="gate",
                      msg="Quality of kimi-k2.5 (nvfp4) at http://127.0.0.1:8000 failed: %s."
                      % "; ".join(gate["failed"]))
    return result


def not_gated(nll=1.2345, recorded=False):
    result = dict(_base(), verdict="not_gated", gated=False, figures=_figures(nll),
                  msg="Quality of kimi-k2.5 (nvfp4) at http://127.0.0.1:8000 not gated: there is no reference for "
                      "this model and quantisation (record one with mode=record); measured ...")
    if recorded:
        result["entry"] = entry("0.33.0")
    return result


def not_measured(kind="timeout", msg="Quality of kimi-k2.5 (nvfp4) at http://127.0.0.1:8000 not measured: the overall "
                                     "timeout passed before the greedy completion of prompt 3."):
    return dict(_base(), failed=False, error_kind=kind, msg=msg)


def preflight():
    """mode=preflight's answer: nothing measured."""
    return dict(_base(), verdict="not_gated", gated=True, msg="The quality reference of kimi-k2.5 fits ...")


def skipped():
    return {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
