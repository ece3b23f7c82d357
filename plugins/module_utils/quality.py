# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The quality gate of a vLLM server: greedy answers and a passage's perplexity, against a recorded reference.

Standard library only; the HTTP client is ``vllm_api.VllmClient`` (every
request under one deadline, every reply capped).

Public API (used by the ``vllm_quality_info`` module):

* :func:`tokenizer_fingerprint` -- ``sha256:...`` over the tokenizer files
  of a model directory (names, sizes and sha256 of each), bounded in bytes.
* :func:`select_reference` -- the entry of a ``quality_references`` table
  (model, then quantisation); None when there is none.
* :func:`reference_problems` -- what is wrong with an entry (malformed, for
  another model, quantisation or tokenizer), as sentences; checked before
  any request.
* :func:`measure` -- the figures of a server: its build, ``max_model_len``,
  each prompt's greedy answer (token ids and text) and the passage's mean
  negative log-likelihood per token (``prompt_logprobs``).
* :func:`compare` -- the figures against a reference: per-prompt match of
  the first N tokens, share matched, NLL difference, verdict and the
  sentence that says what failed first.
* :func:`make_entry` -- the reference entry a record run returns.
* :class:`QualityError` -- every fault, with ``kind`` (``reference``,
  ``no_logprobs``, ``too_long``, ``no_model``, ``timeout``, ``server``,
  ``http`` (an HTTP error status), ``too_large``, ``invalid``, ``tokenizer``).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import math
import os
import re
import stat
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import one_line
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import VllmApiError, clean_text, show

FORMAT = 1
MAX_PROMPTS = 64
MAX_PROMPT_CHARS = 4000
MAX_PASSAGE_CHARS = 65536
MAX_ANSWER_TOKENS = 256
MAX_TEXT_CHARS = 8000
MAX_TOKENIZER_BYTES = 512 * 1024 * 1024
TOKENIZER_FILES = ("added_tokens.json", "merges.txt", "special_tokens_map.json", "tokenizer.json",
                   "tokenizer.model", "tokenizer_config.json", "vocab.json", "vocab.txt")
TOKEN_ID_PLACEHOLDER = re.compile(r"token_id:([0-9]{1,12})\Z")
# what a vLLM error says when a prompt does not fit the model's context
TOO_LONG_WORDS = re.compile(r"max_model_len|maximum context length|context length|too long", re.I)

DEFAULT_PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "The first five prime numbers are",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "The chemical symbol for gold is",
    "Translate to German: Good morning, how are you? ->",
    "1, 2, 3, 5, 8, 13,",
]

DEFAULT_PASSAGE = (
    "The river rises in the hills to the north and runs south through farmland for most of its length. "
    "In spring the water is high and fast, fed by melting snow, and the old stone bridge at the market town "
    "is sometimes closed for a day or two. By late summer the river is slow and shallow, and children wade "
    "across it where the ford used to be. The mill that once stood on the east bank was turned into a museum, "
    "and its wheel still turns on weekends. Fishermen come for the trout in the upper reaches, while the lower "
    "river, wider and muddier, is known for its birds: herons stand in the reeds, and in winter thousands of "
    "geese rest on the flooded meadows before flying on."
)


class QualityError(Exception):
    """A fault of the quality measure; ``kind`` says which (see the module's docs)."""

    def __init__(self, message, kind="invalid", detail=None):
        super(QualityError, self).__init__(message)
        self.kind = kind
        self.detail = detail  # the server's own words (an HTTP error's), when there are some


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------------------
# the tokenizer's identity


def tokenizer_fingerprint(model_dir, max_bytes=MAX_TOKENIZER_BYTES):
    """``sha256:<hex>`` over the tokenizer files of MODEL_DIR; QualityError (kind ``tokenizer``) when none or too big.

    Each file of TOKENIZER_FILES present as a regular file (a link to one,
    as in a Hugging Face cache snapshot, is read) adds the line
    ``<name> <size> <sha256>``; the fingerprint is the sha256 of those lines.
    At most MAX_BYTES are read in all.
    """
    if not os.path.isdir(model_dir):
        raise QualityError("model_dir %s is not a directory" % show(model_dir), kind="tokenizer")
    lines = []
    total = 0
    for name in TOKENIZER_FILES:
        path = os.path.join(model_dir, name)
        try:
            info = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        total += info.st_size
        if total > max_bytes:
            raise QualityError("the tokenizer files of %s hold more than %d bytes; give tokenizer_fingerprint instead"
                               % (show(model_dir), max_bytes), kind="tokenizer")
        digest = hashlib.sha256()
        read = 0
        try:
            with open(path, "rb") as handle:
                while read <= info.st_size:
                    chunk = handle.read(1024 * 1024)
                    if not chunk:
                        break
                    read += len(chunk)
                    digest.update(chunk)
        except OSError as exc:
            raise QualityError("cannot read %s: %s" % (show(path), exc.strerror or exc), kind="tokenizer")
        if read != info.st_size:
            raise QualityError("%s changed while it was read" % show(path), kind="tokenizer")
        lines.append("%s %d %s\n" % (name, read, digest.hexdigest()))
    if not lines:
        raise QualityError("model_dir %s holds none of the tokenizer files (%s)" % (
            show(model_dir), ", ".join(TOKENIZER_FILES)), kind="tokenizer")
    return "sha256:" + hashlib.sha256("".join(lines).encode("ascii")).hexdigest()


# ---------------------------------------------------------------------------
# the reference


def select_reference(references, model, quantization, quantization_how=None):
    """The entry of REFERENCES (model, then quantisation) or None; QualityError when the table is malformed.

    A model with references for other quantisations but none for QUANTIZATION is refused (kind ``reference``): the
    quantisation may have been read wrong from the model directory (QUANTIZATION_HOW says how it was found), and a
    gate that quietly passed as "not gated" would wave a damaged host through. ``references[model][quantization]:
    null`` says on purpose that a quantisation has no reference yet.
    """
    if references is None:
        return None
    if not isinstance(references, dict):
        raise QualityError("references is not a table keyed by model (got %s)" % type(references).__name__,
                           kind="reference")
    per_model = references.get(model)
    if per_model is None:
        return None
    if not isinstance(per_model, dict):
        raise QualityError("references[%s] is not a table keyed by quantisation (got %s)" % (
            show(model), type(per_model).__name__), kind="reference")
    if quantization not in per_model and per_model:
        raise QualityError(
            "references[%s] has a reference for %s but none for %s (%s); record one for it, or set "
            "references[%s][%s] to null to measure it without a gate" % (
                show(model), ", ".join(show(key or "no quantisation") for key in sorted(per_model, key=str)[:8]),
                show(quantization or "no quantisation"), quantization_how or "the quantisation given",
                show(model), show(quantization)), kind="reference")
    return per_model.get(quantization)


def _ids_problem(value, where):
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_ANSWER_TOKENS or not all(
            _is_int(item) and item >= 0 for item in value):
        return "%s is not a list of at most %d token ids" % (where, MAX_ANSWER_TOKENS)
    return None


def reference_problems(entry, model=None, quantization=None, tokenizer=None):
    """Sentences that say what is wrong with a reference ENTRY (an empty list: none)."""
    if not isinstance(entry, dict):
        return ["the reference is not a table (got %s)" % type(entry).__name__]
    problems = []
    if entry.get("format") != FORMAT:
        problems.append("its format is %s, not %d" % (show(entry.get("format")), FORMAT))
    for key in ("model", "build"):
        if not isinstance(entry.get(key), str) or not entry.get(key):
            problems.append("it has no %s" % key)
    if model is not None and isinstance(entry.get("model"), str) and entry["model"] != model:
        problems.append("it was recorded for the model %s, not %s" % (show(entry["model"]), show(model)))
    recorded_quant = entry.get("quantization") or ""
    if quantization is not None and isinstance(recorded_quant, str) and recorded_quant != (quantization or ""):
        problems.append("it was recorded for the quantisation %s, not %s" % (
            show(recorded_quant or None), show(quantization or None)))
    recorded_tok = entry.get("tokenizer")
    if recorded_tok is not None and not isinstance(recorded_tok, str):
        problems.append("its tokenizer is not a string")
    elif tokenizer and recorded_tok and recorded_tok != tokenizer:
        problems.append("it was recorded with the tokenizer %s, and this server's is %s" % (recorded_tok, tokenizer))
    settings = entry.get("settings")
    if not isinstance(settings, dict):
        problems.append("it has no settings")
        settings = {}
    max_tokens = settings.get("max_tokens")
    if not _is_int(max_tokens) or not 1 <= max_tokens <= MAX_ANSWER_TOKENS:
        problems.append("settings.max_tokens is not 1 to %d" % MAX_ANSWER_TOKENS)
    compare_tokens = settings.get("compare_tokens")
    if not _is_int(compare_tokens) or not 1 <= compare_tokens <= (max_tokens if _is_int(max_tokens) else 0):
        problems.append("settings.compare_tokens is not 1 to settings.max_tokens")
    if not _is_int(settings.get("seed")):
        problems.append("settings.seed is not a whole number")
    prompts = entry.get("prompts")
    if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS:
        problems.append("prompts is not a list of 1 to %d answers" % MAX_PROMPTS)
    else:
        for index, item in enumerate(prompts):
            where = "prompts[%d]" % index
            if not isinstance(item, dict):
                problems.append("%s is not a table" % where)
                continue
            if not isinstance(item.get("prompt"), str) or not 0 < len(item["prompt"]) <= MAX_PROMPT_CHARS:
                problems.append("%s.prompt is not a text of 1 to %d characters" % (where, MAX_PROMPT_CHARS))
            if not isinstance(item.get("text"), str):
                problems.append("%s.text is not a text" % where)
            problem = _ids_problem(item.get("token_ids"), where + ".token_ids")
            if problem:
                problems.append(problem)
            if len(problems) > 12:
                break
    passage = entry.get("passage")
    if not isinstance(passage, dict):
        problems.append("it has no passage")
    else:
        if not isinstance(passage.get("text"), str) or not 0 < len(passage["text"]) <= MAX_PASSAGE_CHARS:
            problems.append("passage.text is not a text of 1 to %d characters" % MAX_PASSAGE_CHARS)
        if not _is_int(passage.get("tokens")) or passage["tokens"] < 1:
            problems.append("passage.tokens is not a count of tokens")
        nll = passage.get("nll")
        if not _is_number(nll) or not math.isfinite(nll) or nll <= 0:
            problems.append("passage.nll is not a positive number")
    return problems


# ---------------------------------------------------------------------------
# the server's answers


def _left(deadline, request_timeout, clock, what):
    left = deadline - clock()
    if left <= 0:
        raise QualityError("the overall timeout passed before %s" % what, kind="timeout")
    return min(request_timeout, left)


def _choice(body, path):
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise QualityError("%s gave no choices: %s" % (path, show(body)), kind="invalid")
    return choices[0]


def parse_answer(body):
    """token_ids (a list, or None when the reply has none), text and finish_reason of a greedy completion."""
    choice = _choice(body, "/v1/completions")
    text = choice.get("text")
    if not isinstance(text, str):
        raise QualityError("/v1/completions gave no text: %s" % show(choice), kind="invalid")
    ids = choice.get("token_ids")
    if not (isinstance(ids, list) and all(_is_int(item) and item >= 0 for item in ids)):
        ids = None
        logprobs = choice.get("logprobs")
        tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        if isinstance(tokens, list) and tokens and all(
                isinstance(item, str) and TOKEN_ID_PLACEHOLDER.match(item) for item in tokens):
            ids = [int(TOKEN_ID_PLACEHOLDER.match(item).group(1)) for item in tokens]
    if ids is not None:
        ids = ids[:MAX_ANSWER_TOKENS]
    return {"token_ids": ids, "text": clean_text(text, MAX_TEXT_CHARS),
            "finish_reason": clean_text(choice.get("finish_reason"), 100)}


def parse_prompt_logprobs(body, prompt_ids=None):
    """(mean NLL per token, tokens scored) of a completion asked with ``prompt_logprobs``.

    vLLM's choice carries ``prompt_logprobs``: a list with None first (the
    first token has no context), then per prompt token a table
    ``{token_id: {logprob, rank, decoded_token}}`` holding the prompt's own
    token (and the top ones asked for); with ``return_token_ids`` the choice's
    ``prompt_token_ids`` say which entry is the prompt's (else PROMPT_IDS, the
    passage as ``/tokenize`` counted it, else an entry of one token). A
    logprob of null (vLLM writes minus infinity so) counts as infinite.
    """
    choice = _choice(body, "/v1/completions")
    entries = choice.get("prompt_logprobs")
    if entries is None:
        raise QualityError(
            "the server's reply has no prompt_logprobs: it ignored the request's prompt_logprobs (a vLLM build "
            "without it, or a server that is not vLLM); the passage's perplexity cannot be measured", kind="no_logprobs")
    if not isinstance(entries, list) or len(entries) < 2:
        raise QualityError("prompt_logprobs is not a list of at least 2 entries: %s" % show(entries),
                           kind="no_logprobs")
    ids = None
    for candidate in (choice.get("prompt_token_ids"), prompt_ids):
        if isinstance(candidate, list) and len(candidate) == len(entries) and all(_is_int(item) for item in candidate):
            ids = candidate
            break
    total = 0.0
    for position, entry in enumerate(entries[1:], 1):
        if not isinstance(entry, dict) or not entry:
            raise QualityError("prompt_logprobs[%d] is not a table of token logprobs: %s" % (position, show(entry)),
                               kind="no_logprobs")
        if ids is not None:
            value = entry.get(str(ids[position]))
        elif len(entry) == 1:
            value = next(iter(entry.values()))
        else:
            raise QualityError("prompt_logprobs[%d] holds %d tokens and the reply has no prompt_token_ids to tell "
                               "the prompt's own" % (position, len(entry)), kind="invalid")
        if not isinstance(value, dict) or "logprob" not in value:
            raise QualityError("prompt_logprobs[%d] has no logprob of the prompt's token: %s" % (position, show(entry)),
                               kind="invalid")
        logprob = value["logprob"]
        if logprob is None:
            logprob = float("-inf")
        try:
            # (a whole number too large for a float is no logprob either)
            logprob = float(logprob) if _is_number(logprob) else None
        except OverflowError:
            logprob = None
        if logprob is None or math.isnan(logprob) or logprob > 0:
            raise QualityError("prompt_logprobs[%d] has no logprob of the prompt's token: %s" % (position, show(entry)),
                               kind="invalid")
        total -= logprob
    count = len(entries) - 1
    return total / count, count


def _models(client, timeout):
    body = client.get_json("/v1/models", timeout=timeout)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise QualityError("/v1/models did not give a model list: %s" % show(body), kind="invalid")
    return [entry for entry in data[:256] if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def _api_call(what, call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except VllmApiError as exc:
        if exc.kind == "timeout":
            raise QualityError("%s: %s" % (what, exc), kind="timeout")
        if exc.kind == "too_large":
            raise QualityError("%s: %s" % (what, exc), kind="too_large")
        raise QualityError("%s: %s" % (what, exc), kind="http" if exc.kind == "http" else "server", detail=str(exc))


def measure(client, served_model_name=None, prompts=None, passage=None, max_tokens=32, seed=0,
            timeout=300.0, clock=time.monotonic):
    """The server's figures: build, model, max_model_len, answers, passage NLL and tokens; QualityError on a fault.

    Order: GET /version, GET /v1/models (the model listed, its
    ``max_model_len``), POST /tokenize of the passage (a passage longer than
    ``max_model_len`` is refused before it is sent for completion), then one
    greedy completion per prompt and one completion with ``prompt_logprobs``
    of the passage. Every request within ``client.timeout`` and what is left
    of TIMEOUT.
    """
    prompts = list(DEFAULT_PROMPTS if prompts is None else prompts)
    passage = DEFAULT_PASSAGE if passage is None else passage
    deadline = clock() + float(timeout)
    per = client.timeout
    started = clock()
    result = {"requests": 0}

    def call(what, fn, *args, **kwargs):
        kwargs["timeout"] = _left(deadline, per, clock, what)
        result["requests"] += 1
        return _api_call(what, fn, *args, **kwargs)

    version = call("GET /version", client.get_json, "/version")
    result["build"] = clean_text(version.get("version"), 200) if isinstance(version, dict) else None
    models = call("GET /v1/models", _models, client)
    names = [entry["id"] for entry in models]
    if served_model_name is None:
        if not models:
            raise QualityError("/v1/models lists no model", kind="no_model")
        served_model_name = names[0]
    elif served_model_name not in names:
        raise QualityError("the server does not serve %s (it lists %s)" % (
            show(served_model_name), ", ".join(show(name) for name in names[:20]) or "none"), kind="no_model")
    model_entry = models[names.index(served_model_name)]
    max_len = model_entry.get("max_model_len")
    result["served_model_name"] = clean_text(served_model_name, 1000)
    result["max_model_len"] = max_len if _is_int(max_len) and max_len > 0 else None

    try:
        tokenized = call("POST /tokenize", client.post_json, "/tokenize",
                         {"model": served_model_name, "prompt": passage})
    except QualityError as exc:
        if exc.kind != "http":
            raise
        tokenized = None  # a server without /tokenize: its own limit answers below
    count = tokenized.get("count") if isinstance(tokenized, dict) else None
    result["passage_prompt_tokens"] = count if _is_int(count) else None
    passage_ids = tokenized.get("tokens") if isinstance(tokenized, dict) else None
    if result["max_model_len"] and result["passage_prompt_tokens"] and \
            result["passage_prompt_tokens"] + 1 > result["max_model_len"]:
        raise QualityError("the passage is %d tokens long and the server's max_model_len is %d (with the 1 token "
                           "generated it must fit); it was not sent: give a shorter passage" % (
                               result["passage_prompt_tokens"], result["max_model_len"]), kind="too_long")

    answers = []
    for index, prompt in enumerate(prompts):
        body = call("the greedy completion of prompt %d" % (index + 1), client.post_json, "/v1/completions", {
            "model": served_model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": seed,
            "stream": False, "return_token_ids": True, "logprobs": 0, "return_tokens_as_token_ids": True})
        try:
            answer = parse_answer(body)
        except QualityError as exc:
            raise QualityError("prompt %d: %s" % (index + 1, exc), kind=exc.kind)
        answer["prompt"] = prompt
        answers.append(answer)
    result["answers"] = answers

    try:
        body = call("the passage's completion with prompt_logprobs", client.post_json, "/v1/completions", {
            "model": served_model_name, "prompt": passage, "max_tokens": 1, "temperature": 0, "seed": seed,
            "stream": False, "prompt_logprobs": 0, "return_token_ids": True})
    except QualityError as exc:
        text = exc.detail or ""
        if exc.kind == "http" and text.startswith("HTTP 4") and TOO_LONG_WORDS.search(text):
            raise QualityError("the passage does not fit the server's context (max_model_len %s); the server says: "
                               "%s" % (result["max_model_len"] or "unknown", text), kind="too_long")
        if exc.kind == "http" and text.startswith("HTTP 4") and "logprob" in text.lower():
            raise QualityError("the server refuses prompt_logprobs (%s); check its --max-logprobs and that the build "
                               "supports prompt_logprobs" % text, kind="no_logprobs")
        raise
    result["passage_nll"], result["passage_tokens"] = parse_prompt_logprobs(body, passage_ids)
    result["elapsed"] = round(clock() - started, 3)
    return result


# ---------------------------------------------------------------------------
# the verdict


def _first_difference(left, right):
    for index, (one, other) in enumerate(zip(left, right)):
        if one != other:
            return index
    return None if len(left) == len(right) else min(len(left), len(right))


def compare_answers(answers, reference_answers, compare_tokens):
    """Per prompt: matched, first_difference (token or character index) and what was compared."""
    rows = []
    for index, (got, ref) in enumerate(zip(answers, reference_answers)):
        if got.get("token_ids") is not None and ref.get("token_ids") is not None:
            first = _first_difference(got["token_ids"][:compare_tokens], ref["token_ids"][:compare_tokens])
            compared = "token_ids"
        else:
            first = _first_difference(got.get("text") or "", ref.get("text") or "")
            compared = "text"
        rows.append({"index": index, "prompt": clean_text(ref.get("prompt"), 200), "matched": first is None,
                     "first_difference": first, "compared": compared,
                     "text": got.get("text"), "reference_text": clean_text(ref.get("text"), MAX_TEXT_CHARS)})
    return rows


def compare(figures, entry, min_match=0.8, nll_tolerance=0.05):
    """The gate: figures against a reference ENTRY. Returns answers, passage, passed, failed (in order), message."""
    compare_tokens = entry["settings"]["compare_tokens"]
    rows = compare_answers(figures["answers"], entry["prompts"], compare_tokens)
    matched = sum(1 for row in rows if row["matched"])
    total = len(rows)
    share = matched / total if total else 0.0
    answers = {"matched": matched, "total": total, "share": round(share, 4), "min_match": min_match,
               "compare_tokens": compare_tokens, "passed": share >= min_match, "per_prompt": rows}
    ref_nll = float(entry["passage"]["nll"])
    nll = figures["passage_nll"]
    difference = (nll - ref_nll) / ref_nll if math.isfinite(nll) else float("inf")
    passage = {"nll": _rounded(nll), "tokens": figures["passage_tokens"], "reference_nll": round(ref_nll, 6),
               "reference_tokens": entry["passage"]["tokens"], "relative_difference": _rounded(difference),
               "tolerance": nll_tolerance,
               "same_tokens": figures["passage_tokens"] == entry["passage"]["tokens"]}
    passage["passed"] = passage["same_tokens"] and abs(difference) <= nll_tolerance
    failed = []
    if not passage["same_tokens"]:
        failed.append("the passage is %d tokens long and was %d when the reference was recorded (another tokenizer "
                      "or passage)" % (passage["tokens"], passage["reference_tokens"]))
    if not answers["passed"]:
        first = next(row for row in rows if not row["matched"])
        failed.append("the greedy answers match the reference for %d of %d prompts (%.0f %%, at least %.0f %% "
                      "needed; the first to differ is prompt %d, at %s %d)" % (
                          matched, total, share * 100, min_match * 100, first["index"] + 1,
                          "token" if first["compared"] == "token_ids" else "character", first["first_difference"]))
    if passage["same_tokens"] and not abs(difference) <= nll_tolerance:
        failed.append("the passage's mean NLL is %s per token against the reference's %.4f (%s, tolerance %.1f %%)" % (
            "%.4f" % nll if math.isfinite(nll) else "infinite", ref_nll,
            "%+.1f %%" % (difference * 100) if math.isfinite(difference) else "infinitely more", nll_tolerance * 100))
    return {"answers": answers, "passage": passage, "passed": not failed, "failed": failed}


def _rounded(value):
    return round(value, 6) if math.isfinite(value) else None


def figures_phrase(figures):
    """The figures in words (measure and record modes)."""
    with_ids = sum(1 for answer in figures["answers"] if answer["token_ids"] is not None)
    return "%d greedy answers (%d with token ids), the passage's mean NLL %s per token over %d tokens" % (
        len(figures["answers"]), with_ids,
        "%.4f" % figures["passage_nll"] if math.isfinite(figures["passage_nll"]) else "infinite",
        figures["passage_tokens"])


def make_entry(figures, model, quantization, tokenizer, passage, max_tokens, compare_tokens, seed, recorded_at):
    """The reference entry of a record run (``quality_references[model][quantization]``)."""
    if not math.isfinite(figures["passage_nll"]) or figures["passage_nll"] <= 0:
        raise QualityError("the passage's NLL is %s: a reference needs a positive, finite one" % (
            figures["passage_nll"],), kind="invalid")
    return {
        "format": FORMAT,
        "model": model,
        "quantization": quantization or None,
        "build": figures["build"],
        "tokenizer": tokenizer,
        "recorded_at": recorded_at,
        "served_model_name": figures["served_model_name"],
        "max_model_len": figures["max_model_len"],
        "settings": {"max_tokens": max_tokens, "compare_tokens": compare_tokens, "seed": seed},
        "prompts": [{"prompt": answer["prompt"], "token_ids": answer["token_ids"], "text": answer["text"]}
                    for answer in figures["answers"]],
        "passage": {"text": passage, "tokens": figures["passage_tokens"], "nll": round(figures["passage_nll"], 6)},
    }


# ---------------------------------------------------------------------------
# several hosts' records of one run


def merge_recorded(records, nll_tolerance=0.05):
    """The references of a record run over several hosts.

    RECORDS: a list of ``{'host': name, 'entry': entry}`` (hosts without an entry are left out). Per model and
    quantisation the first host's entry is kept; every other host that recorded the same model and quantisation is
    compared with it (the greedy answers, the passage's NLL within NLL_TOLERANCE) and said to agree or not. Returns
    ``{'references': {model: {quantization: entry}}, 'hosts': {model: {quantization: [host, ...]}}, 'notes': [...]}``.
    """
    references, hosts, notes = {}, {}, []
    for record in records or []:
        if not isinstance(record, dict) or not isinstance(record.get("entry"), dict):
            continue
        host, entry = one_line(record.get("host")), record["entry"]
        problems = reference_problems(entry)
        if problems:
            notes.append("%s: its record is left out (%s)" % (host, "; ".join(problems[:3])))
            continue
        model, quantization = entry["model"], entry.get("quantization") or ""
        kept = references.setdefault(model, {}).get(quantization)
        hosts.setdefault(model, {}).setdefault(quantization, []).append(record.get("host"))
        if kept is None:
            references[model][quantization] = entry
            continue
        differ = [index + 1 for index, (left, right) in enumerate(zip(entry["prompts"], kept["prompts"]))
                  if (left.get("token_ids"), left.get("text")) != (right.get("token_ids"), right.get("text"))]
        difference = (entry["passage"]["nll"] - kept["passage"]["nll"]) / kept["passage"]["nll"]
        first = hosts[model][quantization][0]
        if differ or len(entry["prompts"]) != len(kept["prompts"]) or abs(difference) > nll_tolerance:
            notes.append("%s disagrees with %s on %s (%s): %s, its passage NLL %+.2f %% from the kept one; look at "
                         "both hosts before you commit the reference" % (
                             host, one_line(first), one_line(model), one_line(quantization or 'no quantisation'),
                             "answers %s differ" % ", ".join(str(item) for item in differ[:8])
                             if differ else "the same answers", difference * 100))
        else:
            notes.append("%s agrees with %s on %s (%s): the same answers, passage NLL %+.2f %%" % (
                host, one_line(first), one_line(model), one_line(quantization or 'no quantisation'), difference * 100))
    return {"references": references, "hosts": hosts, "notes": notes}
