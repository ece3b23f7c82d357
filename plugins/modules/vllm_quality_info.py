#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_quality_info
short_description: Measure whether a vLLM server answers right, against a recorded reference
version_added: 0.1.0
description:
  - The quality gate of a vLLM server, run on its host against its OpenAI-compatible API. A server can be ready and fast
    and still answer garbage (weights damaged, a tensor-parallel sharding mismatch); two cheap measures catch that.
  - "Greedy answers: each prompt of a fixed set is completed with temperature 0, a fixed seed and a few dozen tokens;
    the first O(compare_tokens) token ids of each answer (vLLM's C(return_token_ids); else the C(token_id:N) strings
    of C(return_tokens_as_token_ids); else the text) are compared with the reference's. The share of prompts that match
    must be at least O(min_match)."
  - "Perplexity of a fixed passage: one completion with vLLM's C(prompt_logprobs=0) gives the log-probability of every
    token of the passage; the mean negative log-likelihood (NLL) per token must be within O(nll_tolerance) (relative)
    of the reference's, over the same number of tokens."
  - "O(mode=check) compares with the reference and fails the task when the gate fails, with the figures and the
    reference's side by side in one sentence that says what failed first. O(mode=record) measures and returns
    RV(entry), the reference for a person to review and commit under C(quality_references); nothing is written on the
    host or the control node. O(mode=measure) returns the figures only. O(mode=preflight) sends nothing: it checks
    the options and the reference (its shape, model, quantisation and the tokenizer of O(model_dir)) and says whether
    the host would be gated, so that a bad reference stops a rollout before any host is stopped."
  - "The reference is a table: C(format) (1), C(model), C(quantization), C(build) (the server's C(/version) when it was
    recorded), C(tokenizer) (the tokenizer's fingerprint, see O(tokenizer_fingerprint)), C(recorded_at),
    C(settings) (C(max_tokens), C(compare_tokens), C(seed)), C(prompts) (per prompt C(prompt), C(token_ids), C(text))
    and C(passage) (C(text), C(tokens), C(nll)). A table of them keyed by model, then quantisation, is
    O(references), like the benchmark role's C(benchmark_baselines)."
  - "A reference that is malformed, recorded for another model or quantisation, or with another tokenizer is refused
    before any request. No reference for the model and quantisation is no failure: RV(gated=false),
    RV(verdict=not_gated) and a sentence; the figures are measured all the same."
  - "Refused with a sentence naming what is missing: a server whose reply has no C(prompt_logprobs) (a build without
    them, or one that refuses them, see its C(--max-logprobs)); a passage longer than the server's C(max_model_len)
    (from C(/v1/models), the passage counted with C(/tokenize)), before the passage is sent."
  - Read-only; RV(changed) is always V(false). It is named C(_info) because it only reads and returns data, in every
    mode; the caller writes a recorded reference where it belongs.
options:
  mode:
    description:
      - V(check) gates against the reference, V(record) returns a new reference in RV(entry), V(measure) returns the
        figures only, V(preflight) checks the options and the reference without any request.
    type: str
    choices: [check, record, measure, preflight]
    default: check
  base_url:
    description:
      - The server's base URL, for example V(http://127.0.0.1:8000). Without it, the URL is made from O(host) and
        O(port).
    type: str
  host:
    description: The address of the server when O(base_url) is not given. Default V(127.0.0.1).
    type: str
  port:
    description: The server's port when O(base_url) is not given. Default V(8000).
    type: int
  served_model_name:
    description:
      - The model name the server serves (vLLM's C(--served-model-name)), used in the requests. Without it, the first
        model C(/v1/models) lists.
    type: str
  model:
    description:
      - The model's name in the reference (the key of O(references) and the reference's C(model)). Default
        O(served_model_name). Required with O(references).
    type: str
  quantization:
    description:
      - The quantisation of the served checkpoint (C(int4), C(fp8), ...), the second key of O(references) and the
        reference's C(quantization). Empty for a checkpoint recorded without one.
      - Not given, it is read from O(model_dir) as the benchmark reads it (C(hf_quant_config.json)'s
        C(quantization.quant_algo), else C(config.json)'s C(quantization_config), else its C(torch_dtype)); empty
        when there is no O(model_dir) or nothing there names one.
    type: str
  references:
    description:
      - The table of references keyed by model, then quantisation (C(quality_references)). Mutually exclusive with
        O(reference).
      - A model that has references for other quantisations but none for this one is refused (the quantisation may
        have been read wrong from O(model_dir)); a quantisation set to V(null) has no reference on purpose and is
        measured without a gate.
    type: dict
  reference:
    description: One reference (an entry of O(references)). Mutually exclusive with O(references).
    type: dict
  tokenizer_fingerprint:
    description:
      - The served model's tokenizer identity, computed by the caller (any string, for example C(sha256:...)). A
        reference recorded with another is refused before any request.
      - Without it, the fingerprint is read from O(model_dir); without either, the tokenizer is not compared
        (RV(tokenizer) is V(null)).
    type: str
  model_dir:
    description:
      - The served model's directory; the sha256 of its tokenizer files (C(tokenizer.json), C(tokenizer_config.json),
        C(tokenizer.model), C(vocab.json), C(merges.txt), C(special_tokens_map.json), C(added_tokens.json),
        C(vocab.txt), those present; at most 512 MiB read) makes the fingerprint C(sha256:...).
    type: path
  prompts:
    description:
      - The prompts of O(mode=record) and O(mode=measure), 1 to 64, each 1 to 4000 characters. Default a built-in set
        of 8. In O(mode=check) the reference's prompts are used; giving others is refused.
    type: list
    elements: str
  passage:
    description:
      - The passage of O(mode=record) and O(mode=measure), 1 to 65536 characters. Default a built-in paragraph of
        some 130 words. In O(mode=check) the reference's passage is used; giving another is refused.
    type: str
  max_tokens:
    description: Tokens generated per prompt in O(mode=record) and O(mode=measure), 1 to 256.
    type: int
    default: 32
  compare_tokens:
    description: How many first tokens of each answer are compared, 1 to O(max_tokens); recorded in the reference.
    type: int
    default: 16
  seed:
    description: The seed of every completion; recorded in the reference.
    type: int
    default: 0
  min_match:
    description: The least share of prompts whose answers must match the reference's, from 0 to 1.
    type: float
    default: 0.8
  nll_tolerance:
    description: The largest relative difference of the passage's mean NLL from the reference's, from 0 to 10.
    type: float
    default: 0.05
  timeout:
    description: Seconds the whole measure may take (every request within what is left), from 1 to 3600.
    type: int
    default: 300
  request_timeout:
    description: Seconds one request may take in all (connect to the last byte), from 0.1 to 600.
    type: float
    default: 60.0
  max_response_bytes:
    description: The most bytes of one reply that are read, from 1024 to 268435456 (256 MiB); a larger one fails.
    type: int
    default: 16777216
  api_key:
    description: The server's API key (vLLM's C(--api-key)), sent as a bearer token.
    type: str
  validate_certs:
    description: Whether to verify the server's TLS certificate for an C(https://) O(base_url).
    type: bool
    default: true
extends_documentation_fragment:
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - "Requests, in order: C(GET /version), C(GET /v1/models), C(POST /tokenize) (a server without it answers for itself
    below), one C(POST /v1/completions) per prompt (C(temperature=0), C(seed), C(return_token_ids),
    C(logprobs=0), C(return_tokens_as_token_ids)), and one with the passage (C(max_tokens=1), C(prompt_logprobs=0),
    C(return_token_ids))."
  - The figures come from the served build itself; run it after the readiness gate and before the host takes traffic.
  - Where the tokenizer is not known (neither O(tokenizer_fingerprint) nor O(model_dir)), a reference of another
    tokenizer still fails the gate on the passage's token count, after the requests.
requirements:
  - Python 3.10 or newer on the host the module runs on (standard library only).
seealso:
  - module: gpufleet.vllm.vllm_ready
  - name: vLLM's completions API
    description: The extra parameters C(prompt_logprobs), C(return_token_ids) and C(return_tokens_as_token_ids).
    link: https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Record a reference on a healthy host (review it, then commit it under quality_references)
  gpufleet.vllm.vllm_quality_info:
    mode: record
    served_model_name: kimi-k2.5
    quantization: int4
    model_dir: /models/kimi-k2.5
  register: recorded

- name: Show it as YAML for the inventory
  ansible.builtin.debug:
    msg: "{{ {'quality_references': {'kimi-k2.5': {'int4': recorded.entry}}} | to_nice_yaml }}"

- name: Quality gate after the readiness gate
  gpufleet.vllm.vllm_quality_info:
    served_model_name: kimi-k2.5
    quantization: int4
    references: "{{ quality_references }}"
    model_dir: /models/kimi-k2.5
    min_match: 0.8
    nll_tolerance: 0.05
  register: quality

- name: Say when nothing was gated
  ansible.builtin.debug:
    msg: "{{ quality.msg }}"
  when: not quality.gated
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
check_mode:
  description: Whether the module ran in check mode (it reads the same way).
  returned: always
  type: bool
  sample: false
msg:
  description: One sentence with the verdict and the figures next to the reference's, or what went wrong.
  returned: always
  type: str
  sample: "Quality of kimi-k2.5 (int4) at http://127.0.0.1:8000 passed: 8 of 8 answers match, NLL 3.2170 per token
    against the reference's 3.2168 (+0.0 %, tolerance 5.0 %)."
verdict:
  description: V(passed), V(failed) or V(not_gated) (no reference, O(mode=record), O(mode=measure) or O(mode=preflight)).
  returned: success, and on a gate failure
  type: str
  sample: passed
gated:
  description:
    - Whether the figures were compared with a reference; in O(mode=preflight), whether they will be.
    - On a measure that failed (no logprobs, a timeout, ...), whether the host was to be gated; a caller may treat the
      failure of a host without a reference as a warning.
  returned: success, and on a failure once the reference was chosen
  type: bool
  sample: true
error_kind:
  description:
    - On a failure, what failed. C(gate) (the figures are outside the reference's bounds), C(options), C(reference) (malformed, another model,
      quantisation or tokenizer), C(tokenizer) (its files unreadable), C(no_model), C(no_logprobs), C(too_long),
      C(timeout), C(too_large), C(http), C(server) (refused, reset, another network fault), C(invalid) (an answer that
      is not vLLM's).
  returned: failure
  type: str
  sample: no_logprobs
url:
  description: The server's base URL.
  returned: always but for invalid options
  type: str
  sample: http://127.0.0.1:8000
model:
  description: The model's name in the reference.
  returned: always but for invalid options
  type: str
  sample: kimi-k2.5
quantization:
  description: The quantisation key (given, or read from O(model_dir)).
  returned: always but for invalid options
  type: str
  sample: int4
quantization_source:
  description:
    - Where RV(quantization) came from (C(given), the file and key of O(model_dir)), or C(nothing found) and why when
      O(model_dir) names none; V(null) without either.
  returned: always but for invalid options
  type: str
  sample: config.json torch_dtype (no quantization_config)
tokenizer:
  description: The tokenizer's fingerprint used (given or read from O(model_dir)); V(null) when neither.
  returned: always but for invalid options
  type: str
  sample: sha256:9f2c...
build:
  description: The server's version (C(/version)).
  returned: success, and on a gate failure
  type: str
  sample: 0.33.0
max_model_len:
  description: The served model's C(max_model_len) from C(/v1/models); V(null) when it is not listed.
  returned: success, and on a gate failure
  type: int
  sample: 262144
figures:
  description:
    - The measured figures. C(answers) per prompt (C(prompt), C(token_ids), C(text), C(finish_reason)),
      C(passage_nll) (mean NLL per token, V(null) when infinite), C(passage_tokens) (tokens scored),
      C(requests), C(elapsed).
  returned: success, and on a gate failure
  type: dict
answers:
  description:
    - The greedy answers against the reference's. C(matched), C(total), C(share), C(min_match), C(compare_tokens),
      C(passed), and C(per_prompt) (C(index), C(prompt), C(matched), C(first_difference) (the first token or character
      that differs, V(null) when they match), C(compared) (C(token_ids) or C(text)), C(text), C(reference_text)).
  returned: when gated
  type: dict
passage:
  description:
    - The passage's figures next to the reference's. C(nll), C(tokens), C(reference_nll), C(reference_tokens),
      C(relative_difference), C(tolerance), C(same_tokens), C(passed).
  returned: when gated
  type: dict
failures:
  description: What failed, in the order checked (token count of the passage, answers, NLL), one sentence each.
  returned: when gated
  type: list
  elements: str
reference:
  description: The reference's C(build), C(tokenizer) and C(recorded_at) (the reference compared with).
  returned: when gated
  type: dict
entry:
  description: The reference recorded (O(mode=record)), to keep under C(quality_references[model][quantization]).
  returned: success with O(mode=record)
  type: dict
"""

import datetime
import math

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.quality import (
    DEFAULT_PASSAGE,
    DEFAULT_PROMPTS,
    MAX_ANSWER_TOKENS,
    MAX_PASSAGE_CHARS,
    MAX_PROMPT_CHARS,
    MAX_PROMPTS,
    QualityError,
    compare,
    figures_phrase,
    make_entry,
    measure,
    reference_problems,
    select_reference,
    tokenizer_fingerprint,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench.baseline import (
    detect_quantization, normalize_quantization)
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import one_line
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import VllmClient, make_base_url, show


def _problems(params):
    problems = []
    if not 1 <= params["timeout"] <= 3600:
        problems.append("timeout must be 1 to 3600 seconds; got %s" % params["timeout"])
    if not (math.isfinite(params["request_timeout"]) and 0.1 <= params["request_timeout"] <= 600):
        problems.append("request_timeout must be 0.1 to 600 seconds; got %s" % params["request_timeout"])
    if not 1024 <= params["max_response_bytes"] <= 256 * 1024 * 1024:
        problems.append("max_response_bytes must be 1024 to 268435456; got %s" % params["max_response_bytes"])
    if not 1 <= params["max_tokens"] <= MAX_ANSWER_TOKENS:
        problems.append("max_tokens must be 1 to %d; got %s" % (MAX_ANSWER_TOKENS, params["max_tokens"]))
    if not 1 <= params["compare_tokens"] <= params["max_tokens"]:
        problems.append("compare_tokens must be 1 to max_tokens (%s); got %s" % (params["max_tokens"],
                                                                                 params["compare_tokens"]))
    if not -2 ** 63 <= params["seed"] < 2 ** 63:
        problems.append("seed must fit 64 bits; got %s" % params["seed"])
    if not (math.isfinite(params["min_match"]) and 0 <= params["min_match"] <= 1):
        problems.append("min_match must be 0 to 1; got %s" % params["min_match"])
    if not (math.isfinite(params["nll_tolerance"]) and 0 <= params["nll_tolerance"] <= 10):
        problems.append("nll_tolerance must be 0 to 10; got %s" % params["nll_tolerance"])
    prompts = params["prompts"]
    if prompts is not None:
        if not 1 <= len(prompts) <= MAX_PROMPTS:
            problems.append("prompts must hold 1 to %d prompts; got %d" % (MAX_PROMPTS, len(prompts)))
        for index, prompt in enumerate(prompts[:MAX_PROMPTS]):
            if not 0 < len(prompt) <= MAX_PROMPT_CHARS:
                problems.append("prompts[%d] must be 1 to %d characters; got %d" % (
                    index, MAX_PROMPT_CHARS, len(prompt)))
    if params["passage"] is not None and not 0 < len(params["passage"]) <= MAX_PASSAGE_CHARS:
        problems.append("passage must be 1 to %d characters; got %d" % (MAX_PASSAGE_CHARS, len(params["passage"])))
    for name in ("served_model_name", "model"):
        if params[name] is not None and not 0 < len(params[name]) <= 1000:
            problems.append("%s must be 1 to 1000 characters" % name)
    if params["mode"] in ("check", "preflight"):
        for name in ("prompts", "passage"):
            if params[name] is not None:
                problems.append("%s is for mode=record and mode=measure; mode=%s uses the reference's" % (
                    name, params["mode"]))
    if params["quantization"]:
        try:
            normalize_quantization(params["quantization"])
        except ValueError as exc:
            problems.append("quantization: %s" % exc)
    if params["references"] is not None and not (params["model"] or params["served_model_name"]):
        problems.append("references needs model (or served_model_name) to find the model's reference")
    if params["mode"] == "record" and not (params["model"] or params["served_model_name"]):
        problems.append("mode=record needs model (or served_model_name) to name the reference's model")
    return problems


def _quantization(params):
    """(name, source): the quantisation given, else the one the model directory names, else '' (and, from a model
    directory, why none was found)."""
    if params["quantization"] is not None:
        return (normalize_quantization(params["quantization"]) if params["quantization"] else ""), "given"
    if not params["model_dir"]:
        return "", None
    found = detect_quantization(params["model_dir"])
    if not found.get("name"):
        return "", "nothing found: %s" % one_line(found.get("detail") or "no file names one")[:300]
    return found["name"], found["source"]


def _how(source):
    """How the quantisation was found, in words, for a refusal."""
    if not source or source == "given":
        return "as given" if source else "no model directory to read it from"
    if source.startswith("nothing found: "):
        return "none found in the model directory: " + source[len("nothing found: "):]
    return "read from " + source


def _sentence_of(params, url, model, quantization):
    return "%s%s at %s" % (model or params["served_model_name"] or "the served model",
                           " (%s)" % quantization if quantization else "", url)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["check", "record", "measure", "preflight"], default="check"),
            base_url=dict(type="str"),
            host=dict(type="str"),
            port=dict(type="int"),
            served_model_name=dict(type="str"),
            model=dict(type="str"),
            quantization=dict(type="str"),
            references=dict(type="dict"),
            reference=dict(type="dict"),
            tokenizer_fingerprint=dict(type="str", no_log=False),
            model_dir=dict(type="path"),
            prompts=dict(type="list", elements="str"),
            passage=dict(type="str", no_log=False),
            max_tokens=dict(type="int", default=32, no_log=False),
            compare_tokens=dict(type="int", default=16, no_log=False),
            seed=dict(type="int", default=0),
            min_match=dict(type="float", default=0.8),
            nll_tolerance=dict(type="float", default=0.05),
            timeout=dict(type="int", default=300),
            request_timeout=dict(type="float", default=60.0),
            max_response_bytes=dict(type="int", default=16 * 1024 * 1024),
            api_key=dict(type="str", no_log=True),
            validate_certs=dict(type="bool", default=True),
        ),
        mutually_exclusive=[["base_url", "host"], ["base_url", "port"], ["references", "reference"]],
        supports_check_mode=True,
    )
    params = module.params
    problems = _problems(params)
    if problems:
        module.fail_json(msg="Invalid options for gpufleet.vllm.vllm_quality_info: %s. Nothing was sent." % "; ".join(
            problems), changed=False, check_mode=module.check_mode, error_kind="options")
    try:
        url = make_base_url(host=params["host"], port=params["port"], base_url=params["base_url"])
        client = VllmClient(url, api_key=params["api_key"], timeout=params["request_timeout"],
                            validate_certs=params["validate_certs"], max_response_bytes=params["max_response_bytes"])
    except ValueError as exc:
        module.fail_json(msg="Cannot reach vLLM: %s. Nothing was sent." % exc, changed=False,
                         check_mode=module.check_mode, error_kind="options")

    mode = params["mode"]
    model = params["model"] or params["served_model_name"]
    quantization, quantization_source = _quantization(params)
    where = _sentence_of(params, url, model, quantization)
    result = {"changed": False, "check_mode": module.check_mode, "url": url, "model": model,
              "quantization": quantization, "quantization_source": quantization_source, "tokenizer": None}

    def fail(message, kind, **extra):
        result.update(extra)
        module.fail_json(msg=message, error_kind=kind, **result)

    tokenizer = params["tokenizer_fingerprint"]
    if not tokenizer and params["model_dir"]:
        try:
            tokenizer = tokenizer_fingerprint(params["model_dir"])
        except QualityError as exc:
            fail("Quality of %s not measured: %s. Nothing was sent." % (where, exc), exc.kind)
    result["tokenizer"] = tokenizer

    entry = None
    if mode in ("check", "preflight"):
        try:
            entry = params["reference"] if params["reference"] is not None else select_reference(
                params["references"], model, quantization, _how(quantization_source))
        except QualityError as exc:
            fail("The quality reference of %s is refused: %s. Nothing was sent." % (where, exc), exc.kind)
        if entry is not None:
            problems = reference_problems(entry, model=model, quantization=quantization, tokenizer=tokenizer)
            if problems:
                fail("The quality reference of %s is refused: %s. Nothing was sent; record a reference for this "
                     "model, quantisation and tokenizer with mode=record." % (where, "; ".join(problems)),
                     "reference")
    if mode == "preflight":
        result.update(verdict="not_gated", gated=entry is not None)
        if entry is None:
            result["msg"] = ("Quality of %s will not be gated: there is no reference for this model and quantisation "
                             "(record one with mode=record). Nothing was sent." % where)
        else:
            result["msg"] = ("The quality reference of %s fits (model, quantisation%s; recorded on build %s); the "
                             "gate runs once the server is ready. Nothing was sent." % (
                                 where, ", tokenizer" if tokenizer and entry.get("tokenizer") else "",
                                 one_line(entry.get("build"))))
        module.exit_json(**result)

    # (known before the measure: a measure that fails says whether the host was to be gated)
    result["gated"] = entry is not None
    if entry is not None:
        prompts = [item["prompt"] for item in entry["prompts"]]
        passage = entry["passage"]["text"]
        max_tokens = entry["settings"]["max_tokens"]
        seed = entry["settings"]["seed"]
    else:
        prompts = params["prompts"] if params["prompts"] is not None else DEFAULT_PROMPTS
        passage = params["passage"] if params["passage"] is not None else DEFAULT_PASSAGE
        max_tokens = params["max_tokens"]
        seed = params["seed"]

    try:
        figures = measure(client, served_model_name=params["served_model_name"], prompts=prompts, passage=passage,
                          max_tokens=max_tokens, seed=seed, timeout=params["timeout"])
    except QualityError as exc:
        fail("Quality of %s not measured: %s." % (where, exc), exc.kind)
    figures["build"] = one_line(figures["build"]) if figures["build"] is not None else None
    result["build"] = figures["build"]
    result["max_model_len"] = figures["max_model_len"]
    shown = dict(figures)
    if not math.isfinite(shown["passage_nll"]):
        shown["passage_nll"] = None
    result["figures"] = shown

    if mode == "record":
        try:
            result["entry"] = make_entry(
                figures, model, quantization, tokenizer, passage, max_tokens, params["compare_tokens"], seed,
                datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        except QualityError as exc:
            fail("Quality of %s not recorded: %s." % (where, exc), exc.kind)
        result.update(verdict="not_gated", gated=False)
        result["msg"] = "Quality reference of %s recorded on build %s: %s. Review it and keep it under " \
            "quality_references[%s][%s]." % (where, figures["build"], figures_phrase(figures), show(model),
                                             show(quantization))
        module.exit_json(**result)
    if entry is None:
        result.update(verdict="not_gated", gated=False)
        if mode == "measure":
            result["msg"] = "Quality of %s measured (not gated): %s." % (where, figures_phrase(figures))
        else:
            result["msg"] = ("Quality of %s not gated: there is no reference for this model and quantisation "
                             "(record one with mode=record); measured %s." % (where, figures_phrase(figures)))
        module.exit_json(**result)

    gate = compare(figures, entry, min_match=params["min_match"], nll_tolerance=params["nll_tolerance"])
    result.update(gated=True, answers=gate["answers"], passage=gate["passage"], failures=gate["failed"],
                  reference={"build": entry.get("build"), "tokenizer": entry.get("tokenizer"),
                             "recorded_at": entry.get("recorded_at")})
    answers, passage_figures = gate["answers"], gate["passage"]
    figures_text = "%d of %d answers match (at least %.0f %% needed), NLL %s per token over %d tokens against the " \
        "reference's %.4f over %d (%s, tolerance %.1f %%); reference recorded on build %s, this is %s" % (
            answers["matched"], answers["total"], answers["min_match"] * 100,
            "%.4f" % passage_figures["nll"] if passage_figures["nll"] is not None else "infinite",
            passage_figures["tokens"], passage_figures["reference_nll"], passage_figures["reference_tokens"],
            "%+.1f %%" % (passage_figures["relative_difference"] * 100)
            if passage_figures["relative_difference"] is not None else "infinitely more",
            passage_figures["tolerance"] * 100, one_line(entry.get("build")), figures["build"])
    if gate["passed"]:
        result["verdict"] = "passed"
        result["msg"] = "Quality of %s passed: %s." % (where, figures_text)
        module.exit_json(**result)
    result["verdict"] = "failed"
    fail("Quality of %s failed: %s. Figures: %s." % (where, "; ".join(gate["failed"]), figures_text), "gate")


if __name__ == "__main__":
    main()
