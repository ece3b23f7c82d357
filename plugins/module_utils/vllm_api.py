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
* Bounds: every request ends within its timeout in all (connect, headers
  and body, not per read), reads at most ``max_response_bytes``
  (:data:`DEFAULT_MAX_RESPONSE_BYTES`), and follows redirects only within
  the same origin (scheme, host, port): a redirect elsewhere is refused, so
  the API key never leaves the server it was given for.
* :func:`parse_json`, :func:`parse_version`, :func:`parse_models`,
  :func:`parse_completion` -- the checks of vLLM's answers, callable without
  a server; they return plain, valid text or raise :class:`VllmApiError`.
* :func:`wait_ready` -- the readiness gate: ``/health`` answers 200, then
  ``/v1/models`` lists the served model, then a 1-token completion succeeds,
  all within one deadline; returns a result dict (never raises for an
  unready server): ``ready``, ``failed_stage``, ``stages`` (per stage:
  ``passed``, ``elapsed``, ``attempts``, ``last_error``), ``elapsed``,
  ``version``, ``models``, ``model``, ``completion``, ``stopped_reason``,
  ``msg``.
* :data:`STAGES` and :data:`STAGE_TEXT` -- the stage names and what each
  one checks, in words.
* :func:`failure_message`, the sentence a failed gate reports (the unit
  that runs the server is watched through ``module_utils/systemd.py``).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import functools
import http.client
import io
import ipaddress
import json
import math
import re
import reprlib
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
USER_AGENT = "gpufleet.vllm-ready/0.1"
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
ERROR_BODY_BYTES = 64 * 1024
MAX_REDIRECTS = 5
MAX_WAIT_SECONDS = 7 * 24 * 3600
HOST_CHARS = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\.?\Z")

STAGES = ("health", "models", "completion")
STAGE_TEXT = {
    "health": "GET /health answers 200",
    "models": "GET /v1/models lists the served model",
    "completion": "a 1-token completion succeeds",
}


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


def _has_control(text):
    """True when TEXT holds a control character, a space or anything outside printable ASCII."""
    return any(not 0x20 < ord(char) < 0x7f for char in text)


def _check_host(host, what):
    """Raise ValueError unless HOST is an IP address or a plain DNS name."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
        return
    except ValueError:
        pass
    if bare != host or not HOST_CHARS.match(host) or len(host) > 253:
        raise ValueError("%s %s is not an IP address or a host name (letters, digits, '.', '-' and '_' only)"
                         % (what, show(host)))


def make_base_url(host=None, port=None, scheme="http", base_url=None):
    """The server's base URL, without a trailing slash.

    Raises ValueError for a URL, host or port that could not be sent as
    they are (control characters, spaces, user names, queries...).
    """
    if base_url:
        if _has_control(base_url):
            raise ValueError("base_url %s holds a space, a control character or a non-ASCII character; give a URL "
                             "such as http://127.0.0.1:8000" % show(base_url))
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("base_url %s is not an http:// or https:// URL with a host, for example "
                             "http://127.0.0.1:8000" % show(base_url))
        if parsed.username is not None or parsed.password is not None or "@" in parsed.netloc:
            raise ValueError("base_url %s holds a user name or password; give the API key in api_key instead"
                             % show(parsed._replace(netloc="...@" + parsed.netloc.rpartition("@")[2]).geturl()))
        if parsed.query or parsed.fragment or "?" in base_url or "#" in base_url:
            raise ValueError("base_url %s has a query or fragment; give the server's base URL only"
                             % show(base_url))
        try:
            url_port = parsed.port
        except ValueError:
            url_port = -1
        if url_port is not None and not 0 < url_port < 65536:
            raise ValueError("base_url %s has no valid TCP port (1-65535)" % show(base_url))
        _check_host(parsed.hostname or "", "the host of base_url")
        return base_url.rstrip("/")
    host = host or DEFAULT_HOST
    port = DEFAULT_PORT if port is None else int(port)
    if not 0 < port < 65536:
        raise ValueError("port %r is not a TCP port (1-65535)" % (port,))
    _check_host(host, "host")
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host
    return "%s://%s:%d" % (scheme, host, port)


def seconds_problem(name, value):
    """A sentence when VALUE (seconds) is NaN, infinite or more than a week (MAX_WAIT_SECONDS), else None."""
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = float("inf") if value > 0 else float("-inf")
    if math.isnan(number) or (math.isinf(number) and isinstance(value, float)):
        return "%s=%s is not a number of seconds" % (name, value)
    if number > MAX_WAIT_SECONDS:
        return "%s=%s is more than a week (%d s), the longest wait there is" % (name, value, MAX_WAIT_SECONDS)
    return None


def check_api_key(api_key):
    """Raise ValueError when the API key cannot go into an HTTP header as it is (the key is never shown)."""
    if api_key and _has_control(api_key):
        position = next(i for i, char in enumerate(api_key) if not 0x20 < ord(char) < 0x7f)
        raise ValueError("api_key holds a space, a control character or a non-ASCII character (character %d of %d); "
                         "a bearer token is printable ASCII" % (position + 1, len(api_key)))


def is_loopback(url):
    """True when the URL's host is this machine (no proxy must be used for it)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin(url):
    """(scheme, host, port) of a URL, the default port filled in; None when it has none."""
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port
    except ValueError:
        return None
    scheme = parsed.scheme.lower()
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parsed.hostname or "").lower(), port


_SHOW = reprlib.Repr()
_SHOW.maxstring = 160
_SHOW.maxother = 160
_SHOW.maxlist = _SHOW.maxdict = _SHOW.maxtuple = 8
_SHOW.maxlevel = 4


# the most characters show() gives (reprlib bounds each part; escaping non-ASCII can make them 10 times longer)
SHOW_MAX_CHARS = 1200


def show(value):
    """A short, bounded repr of VALUE for a message (any depth or size; plain ASCII, at most SHOW_MAX_CHARS)."""
    try:
        text = _SHOW.repr(value)
    except (RecursionError, ValueError, MemoryError):
        text = "<%s>" % type(value).__name__
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= SHOW_MAX_CHARS else text[:SHOW_MAX_CHARS - 3] + "..."


def clean_text(value, limit=1000):
    """VALUE (a str from an answer) as text that is valid UTF-8, at most LIMIT characters; None for a non-str."""
    if not isinstance(value, str):
        return None
    if len(value) > limit:
        value = value[:limit] + "..."
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _error_text(raw):
    """The message of a vLLM/FastAPI error body, shortened (plain, valid text)."""
    text = raw[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            error = error["message"]
        elif not (isinstance(error, str) and error):
            error = body.get("detail") or body.get("message") or text
        text = error if isinstance(error, str) else show(error)
    text = " ".join(text.split())
    text = text[:300] + ("..." if len(text) > 300 else "")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _network_error(exc, timeout):
    """A VllmApiError for an OSError/URLError raised by urllib or http.client."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return VllmApiError("connection refused", kind="refused")
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return VllmApiError("no complete answer within %.1f s (the request's timeout, connect to last byte)" % timeout,
                            kind="timeout")
    if isinstance(reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return VllmApiError("connection reset", kind="reset")
    if isinstance(reason, ssl.SSLError):
        return VllmApiError("TLS error: %s" % (reason,), kind="url")
    if isinstance(reason, socket.gaierror):
        return VllmApiError("cannot resolve the host name: %s" % (reason,), kind="url")
    return VllmApiError(clean_text("%s" % (reason,), 300) or type(reason).__name__, kind="url")


# ---------------------------------------------------------------------------
# answers read within a deadline and a size cap


class _DeadlineRaw(io.RawIOBase):
    """A socket's reading side whose every read ends by DEADLINE (time.monotonic), however slow the sender."""

    def __init__(self, sock, deadline):
        super(_DeadlineRaw, self).__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # holds the socket open until the answer is closed
        self._deadline = deadline

    def readable(self):
        return True

    def readinto(self, buf):
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("the request's deadline passed")
        self._sock.settimeout(left)
        return self._raw.readinto(buf)

    def close(self):
        if not self.closed:
            self._raw.close()
        super(_DeadlineRaw, self).close()


class _DeadlineSocket(object):
    def __init__(self, sock, deadline):
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode="rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineRaw(self._sock, self._deadline))


class _DeadlineResponse(http.client.HTTPResponse):
    """An HTTP answer whose status line, headers and body are all read by one deadline."""

    def __init__(self, sock, debuglevel=0, method=None, url=None, deadline=None):
        super(_DeadlineResponse, self).__init__(_DeadlineSocket(sock, deadline), debuglevel, method, url)


def _deadline_connection(connection_class, deadline):
    def make(host, timeout=None, **kwargs):
        left = deadline - time.monotonic()
        if left <= 0:
            raise urllib.error.URLError(socket.timeout("the request's deadline passed"))
        timeout = left if timeout is None else min(timeout, left)
        connection = connection_class(host, timeout=timeout, **kwargs)
        connection.response_class = functools.partial(_DeadlineResponse, deadline=deadline)
        return connection
    return make


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline):
        urllib.request.HTTPHandler.__init__(self)
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(_deadline_connection(http.client.HTTPConnection, self.deadline), req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline, context):
        urllib.request.HTTPSHandler.__init__(self, context=context)
        self.deadline = deadline

    def https_open(self, req):
        # the TLS handshake is bounded by the connection's timeout in all (CPython's ssl counts it as one)
        return self.do_open(_deadline_connection(http.client.HTTPSConnection, self.deadline), req,
                            context=self._context)


class _SameOriginRedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to the same scheme, host and port; anything else is an error, never a request."""

    max_redirections = MAX_REDIRECTS

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if origin(newurl) != origin(req.full_url):
            fp.close()
            raise VllmApiError("HTTP %d redirects to another origin, %s; it is not followed, so that neither the "
                               "request nor the API key goes there (give that URL as base_url if it is the server)"
                               % (code, show(newurl)), kind="redirect", status=code)
        try:
            body = fp.read(ERROR_BODY_BYTES + 1)
        except (OSError, http.client.HTTPException, ValueError):
            body = b""
        fp.close()  # urllib's own fp.read() then reads nothing: a redirect's body is capped too
        if len(body) > ERROR_BODY_BYTES:
            raise VllmApiError("HTTP %d redirect with a body of more than %d bytes" % (code, ERROR_BODY_BYTES),
                               kind="invalid", status=code)
        return urllib.request.HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)


def read_capped(response, limit, what):
    """The body of RESPONSE, at most LIMIT bytes; VllmApiError (kind ``too_large``) beyond it."""
    length = response.getheader("Content-Length") if hasattr(response, "getheader") else None
    # (only plain ASCII digits: str.isdigit() also takes a superscript two, which int() refuses)
    if length and re.match(r"[0-9]{1,40}\Z", length.strip()) and int(length) > limit:
        raise VllmApiError("the answer of %s announces %s bytes, more than the cap of %d bytes "
                           "(max_response_bytes); it was not read" % (what, length.strip(), limit), kind="too_large")
    chunks = []
    total = 0
    while True:
        chunk = response.read(min(65536, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise VllmApiError("the answer of %s is larger than the cap of %d bytes (max_response_bytes); reading "
                               "stopped there" % (what, limit), kind="too_large")
        chunks.append(chunk)


# ---------------------------------------------------------------------------
# vLLM's answers, checked


def parse_json(raw, path):
    """The JSON value of an answer's bytes; VllmApiError when it is not UTF-8 JSON (any depth, any size)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise VllmApiError("%s did not answer JSON: %s" % (path, show(raw[:120])), kind="invalid")
    except RecursionError:
        raise VllmApiError("%s answered JSON nested too deeply to read" % path, kind="invalid")


def parse_version(body):
    """The version string of GET /version's JSON."""
    if not isinstance(body, dict) or not isinstance(body.get("version"), str):
        raise VllmApiError("/version did not give a version: %s" % show(body), kind="invalid")
    return clean_text(body["version"], 200)


def parse_models(body):
    """The ids of the served models from GET /v1/models's JSON."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise VllmApiError("/v1/models did not give a model list: %s" % show(body), kind="invalid")
    return [clean_text(entry["id"], 1000) for entry in data if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def parse_completion(body):
    """text, finish_reason, completion_tokens and usage (whole numbers only) of a /v1/completions JSON."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise VllmApiError("/v1/completions gave no choices: %s" % show(body), kind="invalid")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    usage = dict((clean_text(key, 100), value) for key, value in list(usage.items())[:32]
                 if isinstance(value, int) and not isinstance(value, bool))
    tokens = usage.get("completion_tokens")
    if isinstance(tokens, int) and tokens < 1:
        raise VllmApiError("/v1/completions generated no token (usage %s)" % show(usage), kind="invalid")
    return {
        "text": clean_text(choices[0].get("text"), 1000),
        "finish_reason": clean_text(choices[0].get("finish_reason"), 100),
        "completion_tokens": tokens,
        "usage": usage,
    }


class VllmClient(object):
    """A small client of vLLM's HTTP API (``/health``, ``/version``, ``/v1/models``, ``/v1/completions``).

    ``timeout``: seconds one request may take in all (connect, send, status,
    headers, body), not per read. ``max_response_bytes``: the most bytes of
    an answer's body that are read. Redirects are followed within the same
    origin only. Raises ValueError for an ``api_key`` that cannot be sent.
    """

    def __init__(self, base_url, api_key=None, timeout=30.0, validate_certs=True,
                 max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or None
        check_api_key(self.api_key)
        self.timeout = float(timeout)
        self.max_response_bytes = int(max_response_bytes)
        self._proxy = [urllib.request.ProxyHandler({})] if is_loopback(self.base_url) else []
        self._context = None
        if self.base_url.startswith("https:"):
            self._context = ssl.create_default_context()
            if not validate_certs:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE

    def _opener(self, deadline):
        handlers = self._proxy + [_DeadlineHTTPHandler(deadline), _SameOriginRedirectHandler()]
        if self._context is not None:
            handlers.append(_DeadlineHTTPSHandler(deadline, self._context))
        return urllib.request.build_opener(*handlers)

    def request(self, method, path, body=None, timeout=None, accept="application/json"):
        """Send one request; return (status, body bytes). Raises VllmApiError.

        The whole request ends within ``timeout`` seconds (default: the
        client's), and at most ``max_response_bytes`` of the body are read.
        ``accept`` is the Accept header (``/metrics`` is read as text).
        """
        timeout = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + timeout
        headers = {"User-Agent": USER_AGENT, "Accept": accept}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        try:
            req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
            with self._opener(deadline).open(req, timeout=timeout) as response:
                return response.status, read_capped(response, self.max_response_bytes, path)
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read(ERROR_BODY_BYTES)
            except (OSError, http.client.HTTPException, ValueError):
                raw = b""
            finally:
                exc.close()
            text = _error_text(raw)
            if not text and 300 <= exc.code < 400:
                text = ("a redirect that was not followed: a loop, more than %d, one without a Location, or a POST "
                        "redirected with 307/308" % MAX_REDIRECTS)
            raise VllmApiError("HTTP %d%s" % (exc.code, (": " + text) if text else ""), kind="http", status=exc.code)
        except (urllib.error.URLError, OSError) as exc:
            raise _network_error(exc, timeout)
        except http.client.HTTPException as exc:
            raise VllmApiError("the connection broke or the answer is not HTTP: %s" % (type(exc).__name__,),
                               kind="reset")
        except ValueError as exc:
            # http.client's own checks (a URL or header it will not send, a bad chunk size)
            raise VllmApiError("the request could not be made or its answer read: %s" % clean_text(str(exc), 200),
                               kind="invalid")

    def get_json(self, path, timeout=None):
        return parse_json(self.request("GET", path, timeout=timeout)[1], path)

    def post_json(self, path, body, timeout=None):
        return parse_json(self.request("POST", path, body=body, timeout=timeout)[1], path)

    @staticmethod
    def _json(raw, path):
        return parse_json(raw, path)

    def health(self, timeout=None):
        """The HTTP status of GET /health (200 when ready); VllmApiError otherwise."""
        return self.request("GET", "/health", timeout=timeout)[0]

    def version(self, timeout=None):
        """The server's version from GET /version."""
        return parse_version(self.get_json("/version", timeout=timeout))

    def models(self, timeout=None):
        """The ids of the served models from GET /v1/models."""
        return parse_models(self.get_json("/v1/models", timeout=timeout))

    def complete(self, model, prompt="ping", max_tokens=1, timeout=None):
        """One non-streaming completion; returns text, finish_reason, completion_tokens, usage."""
        return parse_completion(self.post_json("/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": False,
        }, timeout=timeout))


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
            begun = clock()
            status = client.health(timeout=request_timeout)
            if status != 200:
                raise VllmApiError("HTTP %d" % status, kind="http", status=status)
            # the version is read within what is left of this attempt's time, so the deadline holds
            left = request_timeout - (clock() - begun)
            try:
                result["version"] = client.version(timeout=left) if left > 0 else None
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
                listed = ", ".join(show(n) for n in names[:20]) or "none"
                if len(names) > 20:
                    listed += " and %d more" % (len(names) - 20)
                raise VllmApiError("%s is not listed (listed: %s)" % (show(served_model_name), listed), kind="invalid")
        else:
            result["completion"] = client.complete(result["model"], prompt=prompt, max_tokens=1,
                                                   timeout=request_timeout)

    for stage in stages:
        record = result["stages"][stage]
        while True:
            now = clock()
            record["attempts"] += 1
            try:
                # once (check mode) with a timeout keeps to it too; once with timeout 0 gives each request its own
                left = deadline - now if (timeout > 0 or not once) else client.timeout
                attempt(stage, max(1.0, min(client.timeout, left)))
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
