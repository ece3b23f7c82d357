# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Talk to a vLLM server (its OpenAI-compatible HTTP API) and wait until it is ready.

Standard library only (``urllib``), so it runs on any managed host with
Python 3.10 or newer and nothing installed.

Public API (used by the ``vllm_ready`` module; other modules that talk to
vLLM should use the same client):

* :func:`server_argument_spec` and :data:`SERVER_MUTUALLY_EXCLUSIVE` -- the
  options of a module that talks to a vLLM server (documented by the doc
  fragment ``gpufleet.vllm.vllm_server``).
* :func:`make_base_url` -- ``http://HOST:PORT`` from a host and port (IPv6
  in brackets), or a given base URL without its trailing slash.
* :class:`VllmClient` -- ``health()``, ``version()``, ``models()``,
  ``complete(model, prompt, max_tokens)`` and the lower-level
  ``request()``/``get_json()``/``post_json()``.  Every fault (refused,
  timed out, HTTP status >= 400, an answer that is not what vLLM sends)
  raises :class:`VllmApiError`, whose ``str()`` is a short phrase such as
  ``connection refused`` or ``HTTP 503: ...``.
* :func:`wait_ready` -- the readiness gate: ``/health`` answers 200, then
  ``/v1/models`` lists the served model, then a 1-token completion succeeds,
  all within one deadline; returns a result dict (never raises for an
  unready server): ``ready``, ``failed_stage``, ``stages`` (per stage:
  ``passed``, ``elapsed``, ``attempts``, ``last_error``), ``elapsed``,
  ``version``, ``models``, ``model``, ``completion``, ``stopped_reason``,
  ``msg``.
* :data:`STAGES` and :data:`STAGE_TEXT` -- the stage names and what each
  one checks, in words.
* systemd helpers for watching the unit that runs the server:
  :func:`unit_state`, :func:`unit_stopped_reason`, :func:`seconds_since_start`,
  :func:`journal_tail`;
  and :func:`failure_message`, the sentence a failed gate reports.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import http.client
import ipaddress
import json
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
USER_AGENT = "gpufleet.vllm-ready/0.1"

STAGES = ("health", "models", "completion")
STAGE_TEXT = {
    "health": "GET /health answers 200",
    "models": "GET /v1/models lists the served model",
    "completion": "a 1-token completion succeeds",
}

UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "InvocationID",
                   "ExecMainStartTimestampMonotonic")


class VllmApiError(Exception):
    """A request to vLLM that did not give the expected answer.

    ``kind`` is one of ``refused``, ``timeout``, ``reset``, ``http``,
    ``invalid`` (an answer that is not what vLLM sends), ``url`` (another
    network fault); ``status`` is the HTTP status for ``http``.
    """

    def __init__(self, message, kind="url", status=None):
        super(VllmApiError, self).__init__(message)
        self.kind = kind
        self.status = status


def server_argument_spec():
    """The options of a module that talks to a vLLM server (doc fragment gpufleet.vllm.vllm_server)."""
    return dict(
        base_url=dict(type="str"),
        host=dict(type="str"),
        port=dict(type="int"),
        served_model_name=dict(type="str"),
        request_timeout=dict(type="float", default=30.0),
        completion=dict(type="bool", default=True),
        prompt=dict(type="str", default="ping"),
        api_key=dict(type="str", no_log=True),
        validate_certs=dict(type="bool", default=True),
        journal_lines=dict(type="int", default=30),
    )


SERVER_MUTUALLY_EXCLUSIVE = [["base_url", "host"], ["base_url", "port"]]


def make_base_url(host=None, port=None, scheme="http", base_url=None):
    """The server's base URL, without a trailing slash."""
    if base_url:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("base_url %r is not an http:// or https:// URL with a host, for example "
                             "http://127.0.0.1:8000" % (base_url,))
        return base_url.rstrip("/")
    host = host or DEFAULT_HOST
    port = DEFAULT_PORT if port is None else int(port)
    if not 0 < port < 65536:
        raise ValueError("port %r is not a TCP port (1-65535)" % (port,))
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host
    return "%s://%s:%d" % (scheme, host, port)


def is_loopback(url):
    """True when the URL's host is this machine (no proxy must be used for it)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _error_text(raw):
    """The message of a vLLM/FastAPI error body, shortened."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            text = str(error["message"])
        elif isinstance(error, str):
            text = error
        elif body.get("detail"):
            text = str(body["detail"])
        elif body.get("message"):
            text = str(body["message"])
    text = " ".join(text.split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _network_error(exc, timeout):
    """A VllmApiError for an OSError/URLError raised by urllib or http.client."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return VllmApiError("connection refused", kind="refused")
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return VllmApiError("timed out after %.0f s" % timeout, kind="timeout")
    if isinstance(reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return VllmApiError("connection reset", kind="reset")
    if isinstance(reason, ssl.SSLError):
        return VllmApiError("TLS error: %s" % (reason,), kind="url")
    if isinstance(reason, socket.gaierror):
        return VllmApiError("cannot resolve the host name: %s" % (reason,), kind="url")
    return VllmApiError("%s" % (reason,) or type(reason).__name__, kind="url")


class VllmClient(object):
    """A small client of vLLM's HTTP API (``/health``, ``/version``, ``/v1/models``, ``/v1/completions``)."""

    def __init__(self, base_url, api_key=None, timeout=30.0, validate_certs=True):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or None
        self.timeout = float(timeout)
        handlers = []
        if is_loopback(self.base_url):
            handlers.append(urllib.request.ProxyHandler({}))
        if self.base_url.startswith("https:"):
            context = ssl.create_default_context()
            if not validate_certs:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def request(self, method, path, body=None, timeout=None):
        """Send one request; return (status, body bytes). Raises VllmApiError."""
        timeout = self.timeout if timeout is None else float(timeout)
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                exc.close()
            text = _error_text(raw)
            raise VllmApiError("HTTP %d%s" % (exc.code, (": " + text) if text else ""), kind="http", status=exc.code)
        except (urllib.error.URLError, OSError) as exc:
            raise _network_error(exc, timeout)
        except http.client.HTTPException as exc:
            raise VllmApiError("the connection broke: %s" % (type(exc).__name__,), kind="reset")

    def get_json(self, path, timeout=None):
        return self._json(self.request("GET", path, timeout=timeout)[1], path)

    def post_json(self, path, body, timeout=None):
        return self._json(self.request("POST", path, body=body, timeout=timeout)[1], path)

    @staticmethod
    def _json(raw, path):
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise VllmApiError("%s did not answer JSON: %r" % (path, raw[:120]), kind="invalid")

    def health(self, timeout=None):
        """The HTTP status of GET /health (200 when ready); VllmApiError otherwise."""
        return self.request("GET", "/health", timeout=timeout)[0]

    def version(self, timeout=None):
        """The server's version from GET /version."""
        body = self.get_json("/version", timeout=timeout)
        if not isinstance(body, dict) or not isinstance(body.get("version"), str):
            raise VllmApiError("/version did not give a version: %r" % (body,), kind="invalid")
        return body["version"]

    def models(self, timeout=None):
        """The ids of the served models from GET /v1/models."""
        body = self.get_json("/v1/models", timeout=timeout)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise VllmApiError("/v1/models did not give a model list: %r" % (body,), kind="invalid")
        return [entry["id"] for entry in data if isinstance(entry, dict) and isinstance(entry.get("id"), str)]

    def complete(self, model, prompt="ping", max_tokens=1, timeout=None):
        """One non-streaming completion; returns text, finish_reason, completion_tokens, usage."""
        body = self.post_json("/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": False,
        }, timeout=timeout)
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise VllmApiError("/v1/completions gave no choices: %r" % (body,), kind="invalid")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        tokens = usage.get("completion_tokens")
        if isinstance(tokens, int) and tokens < 1:
            raise VllmApiError("/v1/completions generated no token (usage %r)" % (usage,), kind="invalid")
        return {
            "text": choices[0].get("text"),
            "finish_reason": choices[0].get("finish_reason"),
            "completion_tokens": tokens,
            "usage": usage,
        }


def _round(seconds):
    return round(seconds, 3)


def wait_ready(client, served_model_name=None, timeout=900, interval=5.0, completion=True, prompt="ping",
               once=False, watch=None, clock=time.monotonic, sleep=time.sleep):
    """Poll until the server is ready or the deadline passes; return the result dict.

    Stages, in order, within one deadline of ``timeout`` seconds: ``health``
    (GET /health answers 200), ``models`` (GET /v1/models lists
    ``served_model_name``; without a name, any model, and the first one is
    used), ``completion`` (one completion of ``max_tokens=1`` succeeds; left
    out with ``completion=False``).  A failing stage is retried every
    ``interval`` seconds.  ``once``: one attempt per stage and no waiting
    (check mode).  ``watch``: called between attempts; a non-empty string it
    returns stops the wait at once with that reason (the unit died).
    """
    stages = [stage for stage in STAGES if completion or stage != "completion"]
    started = clock()
    deadline = started + max(0.0, float(timeout))
    result = {
        "ready": False, "url": client.base_url, "failed_stage": None, "stopped_reason": None,
        "stages": dict((stage, {"passed": False, "elapsed": None, "attempts": 0, "last_error": None})
                       for stage in stages),
        "elapsed": 0.0, "version": None, "models": None, "model": served_model_name, "completion": None,
        "timeout": timeout, "once": bool(once),
    }

    def attempt(stage, request_timeout):
        if stage == "health":
            status = client.health(timeout=request_timeout)
            if status != 200:
                raise VllmApiError("HTTP %d" % status, kind="http", status=status)
            try:
                result["version"] = client.version(timeout=request_timeout)
            except VllmApiError:
                result["version"] = None
        elif stage == "models":
            names = client.models(timeout=request_timeout)
            result["models"] = names
            if served_model_name is None:
                if not names:
                    raise VllmApiError("no model listed", kind="invalid")
                result["model"] = names[0]
            elif served_model_name not in names:
                raise VllmApiError("%r is not listed (listed: %s)" % (
                    served_model_name, ", ".join(repr(n) for n in names) or "none"), kind="invalid")
        else:
            result["completion"] = client.complete(result["model"], prompt=prompt, max_tokens=1,
                                                   timeout=request_timeout)

    for stage in stages:
        record = result["stages"][stage]
        while True:
            now = clock()
            record["attempts"] += 1
            try:
                attempt(stage, max(1.0, min(client.timeout, deadline - now)) if not once else client.timeout)
            except VllmApiError as exc:
                record["last_error"] = str(exc)
            else:
                record["passed"] = True
                record["elapsed"] = _round(clock() - started)
                break
            reason = watch() if watch is not None else None
            if reason:
                result["stopped_reason"] = reason
            if once or reason or clock() >= deadline:
                result["failed_stage"] = stage
                result["elapsed"] = _round(clock() - started)
                result["msg"] = _summary(result, stages)
                return result
            sleep(max(0.0, min(float(interval), deadline - clock())))
    result["ready"] = True
    result["elapsed"] = _round(clock() - started)
    result["msg"] = _summary(result, stages)
    return result


def _stage_phrase(stage, model):
    if stage == "models":
        return "GET /v1/models lists %r" % (model,) if model else "GET /v1/models lists a model"
    if stage == "completion":
        return "a 1-token completion of %r succeeds" % (model,)
    return STAGE_TEXT[stage]


def _summary(result, stages):
    url = result["url"]
    if result["ready"]:
        parts = []
        for stage in stages:
            parts.append("%s after %.1f s" % (_stage_phrase(stage, result["model"]),
                                              result["stages"][stage]["elapsed"]))
        return "vLLM at %s is ready (version %s): %s." % (url, result["version"] or "unknown", "; ".join(parts))
    stage = result["failed_stage"]
    record = result["stages"][stage]
    passed = [_stage_phrase(s, result["model"]) for s in stages if result["stages"][s]["passed"]]
    what = "the check that never passed: %s (%d attempt%s, last error: %s)" % (
        _stage_phrase(stage, result["model"]), record["attempts"], "" if record["attempts"] == 1 else "s",
        record["last_error"])
    if result["once"]:
        head = "vLLM at %s is not ready (checked once, without waiting)" % url
    elif result["stopped_reason"]:
        head = "vLLM at %s did not get ready: %s after %.0f s" % (url, result["stopped_reason"], result["elapsed"])
    else:
        head = "vLLM at %s did not get ready within %s s (waited %.0f s)" % (
            url, result["timeout"], result["elapsed"])
    return "%s; %s%s." % (head, what, ("; passed: " + ", ".join(passed)) if passed else "")


# ---------------------------------------------------------------------------
# the systemd unit that runs the server


def unit_state(run_command, systemctl, unit):
    """The unit's properties (:data:`UNIT_PROPERTIES`; the numbers as int).

    ``run_command`` is ``AnsibleModule.run_command`` (a list of words, no
    shell); returns {} when systemctl cannot answer.
    """
    rc, out, dummy = run_command([systemctl, "show", "--property=" + ",".join(UNIT_PROPERTIES), "--", unit])
    if rc != 0:
        return {}
    state = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            state[key] = value
    for key in ("NRestarts", "MainPID", "ExecMainStartTimestampMonotonic"):
        if key in state:
            try:
                state[key] = int(state[key])
            except ValueError:
                pass
    return state


def seconds_since_start(state, now=None):
    """Seconds since the unit's main process started (CLOCK_MONOTONIC, like systemd), or None."""
    started = state.get("ExecMainStartTimestampMonotonic") if state else None
    if not isinstance(started, int) or started <= 0:
        return None
    now = time.monotonic() if now is None else now
    return round(now - started / 1e6, 3)


def unit_stopped_reason(unit, state):
    """A sentence when the unit is not loaded, failed or stopped (waiting is pointless), else None.

    A unit between two restarts (``activating``/``auto-restart``) is still
    coming up: None.
    """
    if not state:
        return None
    if state.get("LoadState") == "not-found":
        return "the unit %s does not exist" % unit
    active = state.get("ActiveState")
    if active == "failed":
        return "the unit %s failed (result: %s, restarts: %s)" % (unit, state.get("Result"), state.get("NRestarts"))
    if active in ("inactive", "deactivating"):
        return "the unit %s is not running (%s, result: %s)" % (unit, active, state.get("Result"))
    return None


def journal_tail(run_command, journalctl, unit, lines=30):
    """The last ``lines`` lines of the unit's journal (a list of str; [] when unreadable)."""
    if not journalctl or lines <= 0:
        return []
    rc, out, dummy = run_command([journalctl, "--unit=" + unit, "--lines=%d" % lines, "--no-pager",
                                  "--output=short-iso", "--quiet"])
    if rc != 0:
        return []
    return [line for line in out.splitlines() if line.strip()][-lines:]


def failure_message(result, unit=None, journal=None, timeout_variable=None):
    """The message of a failed gate: the summary, what to do, and the unit's journal lines."""
    parts = [result["msg"]]
    if result.get("stopped_reason"):
        parts.append("The server process is gone; see why below and with 'systemctl status %s'." % unit
                     if unit else "The server process is gone.")
    elif result["failed_stage"] == "health":
        advice = "The server never answered /health: it is still loading, crashed or listens elsewhere."
        if timeout_variable:
            advice += " If the model needs longer to load, raise %s." % timeout_variable
        parts.append(advice)
    elif result["failed_stage"] == "models":
        parts.append("The server runs but does not serve the model under that name: compare "
                     "--served-model-name with the name asked for.")
    elif result["failed_stage"] == "completion":
        parts.append("The server lists the model but cannot generate: look for errors in its log.")
    if unit and not journal:
        parts.append("The journal of %s had no lines to show (journalctl -u %s)." % (unit, unit))
    message = " ".join(parts)
    if unit and journal:
        message += "\nLast %d lines of the journal of %s:\n%s" % (len(journal), unit, "\n".join(journal))
    return message
