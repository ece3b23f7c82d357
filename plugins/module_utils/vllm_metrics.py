# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read a vLLM server's ``/metrics`` and wait until it has no work in flight.

The answer is Prometheus text, parsed with ``prometheus_client``'s own
parser (``prometheus_client.parser.text_string_to_metric_families``), never
with regular expressions: label values with escaped quotes, commas or
braces, ``# HELP`` text that looks like a sample, labels in any order all
read as Prometheus defines them.  ``prometheus_client`` is loaded only when
a body is parsed (:func:`load_parser`), from this interpreter or from the
collection's tools venv (:mod:`hostlib`), so the module loads without it
and fails with a sentence that says what to install.

vLLM (``vllm/v1/metrics/loggers.py``) labels every series with
``model_name`` and ``engine`` (one per data-parallel engine); the gate sums
``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` over the
engines of the chosen model (all models when none is chosen).

Public API (used by the ``vllm_metrics_info`` module):

* :func:`metrics_url` -- the checked URL as (base, path); ValueError with a
  sentence (never the credentials) for one that cannot be used.
* :func:`fetch` -- GET the URL (bounded: time, body size) with the
  collection's HTTP client (:class:`vllm_api.VllmClient`).
* :func:`parse` -- families of a body, bounded in families and samples.
* :func:`summarize` -- running, waiting, idle, state, counters, histograms
  and the raw families used, from the parsed families. Idle means a sample
  of each gauge (a gauge, or a family without ``# TYPE``) reads 0; gauges
  declared without a sample, or served as a counter, make the state
  ``unknown`` (``unknown_reason`` says why), never idle.
* :func:`read_once` -- fetch, parse and summarize.
* :func:`wait_idle` -- read until idle or a timeout passes.
* :class:`MetricsError` -- a fault, with ``kind`` (``library``, ``http``,
  ``refused``, ``timeout``, ``too_large``, ``not_prometheus``, ``too_many``,
  ``no_gauges``, ``no_model``, ``invalid``, ...), a sentence for the operator,
  and (from :func:`wait_idle`) ``polls`` and ``waited`` before it.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import sys
import time
import urllib.parse

from ansible_collections.gpufleet.vllm.plugins.module_utils import hostlib
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import (
    VllmApiError,
    VllmClient,
    _check_host,
    _has_control,
    show,
)

DEFAULT_URL = "http://127.0.0.1:8000/metrics"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
SUCCESS = "vllm:request_success"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
COUNTERS = (SUCCESS, PROMPT_TOKENS, GENERATION_TOKENS)

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MIN_BODY_BYTES = 1024
DEFAULT_MAX_FAMILIES = 2000
DEFAULT_MAX_SAMPLES = 200000
MAX_TIMEOUT = 3600
RAW_SAMPLES_PER_FAMILY = 64
MAX_HISTOGRAMS = 64
# the types a family of the two gauges may have: gauge, or no # TYPE line at all (prometheus_client: unknown)
GAUGE_TYPES = ("gauge", "unknown", "untyped")
ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"
PACKAGE = "prometheus-client"
LIBRARY = "prometheus_client"


class MetricsError(Exception):
    """A read of /metrics that did not give vLLM's gauges; str() is the sentence for the operator."""

    def __init__(self, message, kind):
        super(MetricsError, self).__init__(message)
        self.kind = kind
        self.polls = 0
        self.waited = 0.0


# ---------------------------------------------------------------------------
# the URL


def metrics_url(url):
    """(base, path) of URL, an http:// or https:// URL of a /metrics page; ValueError with a sentence otherwise.

    The sentence never holds a user name or password given in the URL.
    """
    if not isinstance(url, str) or not url:
        raise ValueError("url is empty; give the metrics page of the vLLM server, for example %s" % DEFAULT_URL)
    parsed = urllib.parse.urlsplit(url)
    if "@" in parsed.netloc:
        raise ValueError("url %s holds a user name or password; vLLM's /metrics needs none, give the URL without "
                         "them (they are not shown here)"
                         % show(parsed._replace(netloc="...@" + parsed.netloc.rpartition("@")[2]).geturl()))
    if _has_control(url):
        raise ValueError("url %s holds a space, a control character or a non-ASCII character; give a URL such as %s"
                         % (show(url), DEFAULT_URL))
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError("url %s is not an http:// or https:// URL with a host, for example %s"
                         % (show(url), DEFAULT_URL))
    if parsed.query or parsed.fragment or "?" in url or "#" in url:
        raise ValueError("url %s has a query or a fragment; give the metrics page only, for example %s"
                         % (show(url), DEFAULT_URL))
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port < 65536:
        raise ValueError("url %s has no valid TCP port (1-65535)" % show(url))
    _check_host(parsed.hostname or "", "the host of url")
    return "%s://%s" % (parsed.scheme, parsed.netloc), parsed.path or "/metrics"


# ---------------------------------------------------------------------------
# prometheus_client


def load_parser(site_dirs=()):
    """prometheus_client's ``text_string_to_metric_families`` and where it came from (None: this interpreter).

    Raises MetricsError (kind ``library``) with what to install when no
    copy can be imported.
    """
    try:
        where = hostlib.load(LIBRARY, site_dirs)[1]
        parser = hostlib.load("%s.parser" % LIBRARY)[0]
        return parser.text_string_to_metric_families, where
    except (ImportError, AttributeError) as exc:
        text = getattr(exc, "text", None) or str(exc)
        tried = (" nor in %s" % ", ".join(site_dirs)) if site_dirs else ""
        raise MetricsError(
            "The Python package %s is not usable by %s%s: %s. Install it on the host: the gpufleet.vllm.host_tools "
            "role installs it into the tools venv (host_tools_packages holds %s==<version>); then run this module "
            "with that venv's python (ansible_python_interpreter: \"{{ host_tools_interpreter }}\") or give "
            "tools_venvs: [\"{{ fleet_tools_venv }}\"]. Nothing was read." % (
                LIBRARY, sys.executable, tried, text, PACKAGE), "library")


# ---------------------------------------------------------------------------
# reading


def fetch(url, timeout=10.0, max_body_bytes=DEFAULT_MAX_BODY_BYTES, validate_certs=True, api_key=None,
          client=None):
    """The body of GET URL as text (bounded by TIMEOUT seconds in all and MAX_BODY_BYTES); MetricsError otherwise."""
    base, path = metrics_url(url)
    client = client or VllmClient(base, api_key=api_key, timeout=timeout, validate_certs=validate_certs,
                                  max_response_bytes=max_body_bytes)
    try:
        status, raw = client.request("GET", path, accept=ACCEPT)
    except VllmApiError as exc:
        raise MetricsError(_fault_sentence(url, exc, timeout), exc.kind)
    if status != 200:
        raise MetricsError("%s answered HTTP %d, not 200 with the metrics: is that address a vLLM server, and is it "
                           "healthy? Nothing was changed." % (url, status), "http")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetricsError("%s answered %d bytes that are not UTF-8 text (byte %d), so not Prometheus metrics: is "
                           "that address a vLLM server's /metrics? Nothing was changed."
                           % (url, len(raw), exc.start), "not_prometheus")


def _fault_sentence(url, exc, timeout):
    if exc.kind == "refused":
        return ("Could not read vLLM's metrics at %s: connection refused. Nothing listens there: is the vLLM server "
                "running (its systemd unit active) and serving on that address and port? Nothing was changed." % url)
    if exc.kind == "timeout":
        return ("vLLM's metrics at %s did not answer within %s s (request_timeout): the server may be overloaded or "
                "hung, or a firewall drops the packets. Nothing was changed." % (url, _number(timeout)))
    if exc.kind == "too_large":
        return ("%s: %s. A vLLM server's metrics are far smaller: is that address a vLLM server's /metrics? "
                "Nothing was changed." % (url, exc))
    if exc.kind == "http":
        hint = (" The server at that address has no such page: is it a vLLM server, and is the path /metrics?"
                if exc.status == 404 else " Is the vLLM server healthy (its journal says why)?")
        return "vLLM's metrics at %s could not be read: %s.%s Nothing was changed." % (url, exc, hint)
    return "vLLM's metrics at %s could not be read: %s. Nothing was changed." % (url, exc)


def parse(text, parser, url, max_families=DEFAULT_MAX_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES):
    """The metric families of TEXT as prometheus_client reads them; MetricsError when it is not Prometheus text
    or has more than MAX_FAMILIES families or MAX_SAMPLES samples."""
    families = []
    samples = 0
    try:
        for family in parser(text):
            families.append(family)
            samples += len(family.samples)
            if len(families) > max_families or samples > max_samples:
                raise MetricsError(
                    "%s serves more than %d metric families or %d samples (max_families, max_samples); a vLLM "
                    "server serves a few hundred: is that address a vLLM server's /metrics? Nothing was changed."
                    % (url, max_families, max_samples), "too_many")
    except MetricsError:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        # (prometheus_client raises ValueError, IndexError, KeyError... for a body it cannot read)
        first = text.strip().splitlines()[0] if text.strip() else ""
        reason = show(str(exc))[1:-1][:200] or type(exc).__name__
        raise MetricsError(
            "%s did not answer Prometheus metrics (%s; the answer begins %s): is that address a vLLM server's "
            "/metrics? Nothing was changed." % (url, reason, show(first[:80])), "not_prometheus")
    return families


class _Family(object):
    """A family put together again from its parts (name, type and help of the first part)."""

    def __init__(self, first, more_samples):
        self.name = first.name
        self.type = first.type
        self.documentation = first.documentation
        self.samples = list(first.samples) + list(more_samples)


def _number(value):
    """VALUE as an int when it is whole, else a float (NaN and infinities as None)."""
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return int(value) if float(value).is_integer() else round(float(value), 6)


def _wanted(labels, model_name):
    return model_name is None or labels.get("model_name") == model_name


def summarize(families, url, model_name=None):
    """running, waiting, idle, by_engine, models, request_success, prompt/generation token totals, histograms
    and the raw families used, from prometheus_client's families; MetricsError (``no_gauges``/``no_model``)
    when the two gauges are not there."""
    by_name = {}
    for family in families:
        if family.name in by_name:
            # (a family whose samples are not together on the page comes back in parts: one family again)
            by_name[family.name] = _Family(by_name[family.name], family.samples)
        else:
            by_name[family.name] = family
    missing = [name for name in (RUNNING, WAITING) if name not in by_name]
    if missing:
        vllm = [f.name for f in families if f.name.startswith("vllm:")]
        seen = ", ".join(sorted(f.name for f in families)[:6]) or "none"
        raise MetricsError(
            "%s serves Prometheus metrics but not %s (%d %s: %s%s). %s Nothing was changed." % (
                url, " nor ".join(missing), len(families), "family" if len(families) == 1 else "families", seen,
                "..." if len(families) > 6 else "",
                "It is a vLLM server whose engine reports no scheduler state yet (still starting?), or a version "
                "without these gauges." if vllm else
                "It is not a vLLM server (vLLM's metrics are named vllm:...): check the address and port."),
            "no_gauges")

    models = set()
    engines = {}
    sums = {RUNNING: 0.0, WAITING: 0.0}
    sampled = {RUNNING: False, WAITING: False}
    for name in (RUNNING, WAITING):
        for sample in by_name[name].samples:
            # (a counter's samples are NAME_total, a histogram's NAME_count...: none of them is the gauge)
            if sample.name != name or by_name[name].type not in GAUGE_TYPES:
                continue
            models.add(sample.labels.get("model_name"))
            if not _wanted(sample.labels, model_name):
                continue
            if math.isnan(sample.value) or math.isinf(sample.value) or sample.value < 0:
                raise MetricsError("%s reports %s for %s%s, not a count of requests, so nothing proves the server "
                                   "idle. Nothing was changed." % (url, sample.value, name, show(sample.labels)),
                                   "invalid")
            key = (sample.labels.get("model_name"), sample.labels.get("engine"))
            entry = engines.setdefault(key, {"model_name": key[0], "engine": key[1], "running": 0, "waiting": 0})
            value = sample.value
            entry["running" if name == RUNNING else "waiting"] += value
            sums[name] += value
            sampled[name] = True
    known = sorted(m for m in models if m is not None)
    # (no sample of any model: an engine that does not report yet, the state is unknown; samples of other models only:
    # a model_name that is not served)
    if model_name is not None and not engines and known:
        raise MetricsError(
            "%s reports no %s for model_name %s; it serves %s. Give one of those as model_name. Nothing was changed."
            % (url, RUNNING, show(model_name), ", ".join(show(m) for m in known) or "no model_name label at all"),
            "no_model")

    unsure = []
    for name in (RUNNING, WAITING):
        if by_name[name].type not in GAUGE_TYPES:
            unsure.append("%s is served as a %s, not a gauge" % (name, by_name[name].type))
        elif not sampled[name]:
            unsure.append("%s is declared but has no sample%s" % (
                name, (" for model_name %s" % show(model_name)) if model_name is not None else ""))
    result = {
        "running": _number(sums[RUNNING]) if sampled[RUNNING] else None,
        "waiting": _number(sums[WAITING]) if sampled[WAITING] else None,
        "models": known,
        "by_engine": [dict(entry, running=_number(entry["running"]), waiting=_number(entry["waiting"]))
                      for dummy, entry in sorted(engines.items(), key=lambda item: (str(item[0][0]), str(item[0][1])))],
    }
    # (idle only when a sample of each gauge reads 0; a gauge that cannot be read proves nothing)
    result["idle"] = result["running"] == 0 and result["waiting"] == 0
    if (result["running"] or 0) > 0 or (result["waiting"] or 0) > 0:
        result["state"] = "busy"
    else:
        result["state"] = "idle" if result["idle"] else "unknown"
    result["unknown_reason"] = "; ".join(unsure) if result["state"] == "unknown" else None

    success = {"total": 0, "by_finished_reason": {}}
    tokens = {PROMPT_TOKENS: 0.0, GENERATION_TOKENS: 0.0}
    for name in COUNTERS:
        family = by_name.get(name)
        for sample in family.samples if family is not None else ():
            if sample.name != name + "_total" or not _wanted(sample.labels, model_name):
                continue
            if name == SUCCESS:
                reason = sample.labels.get("finished_reason") or "unknown"
                success["by_finished_reason"][reason] = success["by_finished_reason"].get(reason, 0) + sample.value
                success["total"] += sample.value
            else:
                tokens[name] += sample.value
    success["total"] = _number(success["total"])
    success["by_finished_reason"] = dict((k, _number(v)) for k, v in sorted(success["by_finished_reason"].items()))
    result["request_success"] = success
    result["prompt_tokens_total"] = _number(tokens[PROMPT_TOKENS])
    result["generation_tokens_total"] = _number(tokens[GENERATION_TOKENS])

    histograms = {}
    used = [RUNNING, WAITING] + [name for name in COUNTERS if name in by_name]
    for family in families:
        if family.type != "histogram" or not family.name.startswith("vllm:") or family.name in histograms:
            continue
        if len(histograms) >= MAX_HISTOGRAMS:
            break
        count = total = 0.0
        for sample in family.samples:
            if not _wanted(sample.labels, model_name):
                continue
            if sample.name == family.name + "_count":
                count += sample.value
            elif sample.name == family.name + "_sum":
                total += sample.value
        histograms[family.name] = {"count": _number(count), "sum": _number(total),
                                   "mean": _number(total / count) if count else None}
        used.append(family.name)
    result["histograms"] = histograms
    result["families"] = [_raw(by_name[name], model_name) for name in used]
    return result


def _raw(family, model_name):
    """One family as plain data: name, type, help, samples (at most RAW_SAMPLES_PER_FAMILY; buckets left out)."""
    samples = [s for s in family.samples if _wanted(s.labels, model_name) and not s.name.endswith("_bucket")]
    return {
        "name": family.name,
        "type": family.type,
        "help": (family.documentation or "")[:300],
        "samples": [{"name": s.name, "labels": dict(s.labels), "value": _number(s.value)}
                    for s in samples[:RAW_SAMPLES_PER_FAMILY]],
        "samples_left_out": max(0, len(samples) - RAW_SAMPLES_PER_FAMILY),
    }


def read_once(url, parser, model_name=None, timeout=10.0, max_body_bytes=DEFAULT_MAX_BODY_BYTES,
              max_families=DEFAULT_MAX_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES, validate_certs=True, api_key=None):
    """fetch, parse and summarize one read of URL."""
    text = fetch(url, timeout=timeout, max_body_bytes=max_body_bytes, validate_certs=validate_certs, api_key=api_key)
    families = parse(text, parser, url, max_families=max_families, max_samples=max_samples)
    result = summarize(families, url, model_name=model_name)
    result["families_read"] = len(families)
    result["samples_read"] = sum(len(f.samples) for f in families)
    return result


def wait_idle(read, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Call READ() (a summary) until its ``idle`` is true or TIMEOUT seconds passed, every INTERVAL seconds.

    Returns the last summary with ``waited`` (seconds), ``polls`` and
    ``timed_out``.  READ's MetricsError goes through at once: a server that
    stops answering is not a drained one.
    """
    start = clock()
    polls = 0
    while True:
        try:
            result = read()
        except MetricsError as exc:
            if polls:
                exc.args = ("%s (It had answered %d read(s) before, over %s s of waiting.)" % (
                    exc, polls, _number(round(clock() - start, 1))),)
            exc.polls = polls
            exc.waited = round(clock() - start, 3)
            raise
        polls += 1
        waited = clock() - start
        if result["idle"] or waited >= timeout:
            break
        sleep(max(0.0, min(interval, timeout - waited)))
    result.update(waited=round(waited, 3), polls=polls, timed_out=not result["idle"])
    return result


def busy_phrase(result):
    """'3 request(s) running and 2 waiting', or why nothing proves the server idle (state unknown)."""
    if result.get("state") == "unknown":
        return "nothing proves it idle: %s" % result["unknown_reason"]
    return "%s request(s) running and %s waiting" % (result["running"], result["waiting"])


def timeout_message(url, result, timeout, model_name=None):
    """The sentence of a drain wait that timed out."""
    if result.get("state") == "unknown":
        return ("vLLM at %s was not proven idle after %s s (timeout %s s): %s%s at the last of %d read(s), and idle "
                "means a sample of each of %s and %s reads 0. Its in-flight requests, if any, would be cut if it "
                "stopped now: check what that address serves (a vLLM server whose engine does not report yet, or "
                "not vLLM's metrics), wait longer (timeout), or go on anyway with on_timeout=continue." % (
                    url, _number(round(result["waited"], 1)), _number(timeout), busy_phrase(result),
                    (" for model %s" % show(model_name)) if model_name is not None else "", result["polls"],
                    RUNNING, WAITING))
    return ("vLLM at %s still had work in flight after %s s (timeout %s s): %s%s at the last of %d read(s). Its "
            "in-flight requests would be cut if it stopped now: make sure no new traffic reaches it (drain it at the "
            "load balancer), wait longer (timeout), or go on anyway with on_timeout=continue." % (
                url, _number(round(result["waited"], 1)), _number(timeout), busy_phrase(result),
                (" for model %s" % show(model_name)) if model_name is not None else "", result["polls"]))
