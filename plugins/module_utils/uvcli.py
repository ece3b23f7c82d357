# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The control node's uv, run for a lookup: found, given checked values, bounded, its errors in words.

Shared by the lookups ``gpufleet.vllm.uv_resolve`` (one exact version of a
package) and ``gpufleet.vllm.uv_lock`` (the whole environment, hash-locked):

* :func:`check_values` -- refuses a value that would become an option of uv
  or carries a control character, before anything runs;
* :func:`source_args` -- uv's options for the package sources and target;
* :func:`find_uv` -- the uv executable (given, on PATH, or the ``uv``
  Python package's binary);
* :func:`run_uv` -- runs uv (never a shell) with :func:`bounded.run_bounded`:
  its own session killed whole at the time limit, output read capped;
* :func:`classify` -- an :class:`UvError` whose kind and sentence say what
  went wrong (not found, unreachable, wheelhouse unreadable, other).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import shutil
import subprocess
import tempfile

from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import control_character

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
PYTHON_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,2}\Z")
PLATFORM_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# one PEP 440 version clause, as a requirement carries it (==0.33.0, >=0.32, ==0.33.*)
SPECIFIER_RE = re.compile(r"^\s*(===|==|~=|!=|>=|<=|<|>)\s*[0-9A-Za-z.*!+_-]+\s*\Z")
#: uv's environment settings kept from the control node's environment (they do not change what is resolved)
UV_ENV_KEPT = ("UV_CACHE_DIR", "UV_HTTP_TIMEOUT", "UV_NATIVE_TLS", "UV_CONCURRENT_DOWNLOADS", "UV_NO_PROGRESS")
STDOUT_CAP = 1024 * 1024
STDERR_TAIL = 64 * 1024

NOT_FOUND_MARKERS = (
    "there is no version of",
    "was not found in the package registry",
    "was not found in the provided package locations",
    "is available and you require",
    "are available and you require",
    "no versions of",
    "only pre-release versions",
    "requirements are unsatisfiable",
)
UNREACHABLE_MARKERS = (
    "failed to fetch",
    "error sending request",
    "dns error",
    "connection refused",
    "tcp connect error",
    "timed out",
    "request failed after",
    "network is unreachable",
    "certificate",
    "401 unauthorized",
    "403 forbidden",
    "407 proxy",
)
FIND_LINKS_MARKERS = ("failed to read `--find-links`", "failed to read --find-links")


class UvError(Exception):
    """A run of uv that failed or was refused; kind is not_found, unreachable, find_links, bad_input, no_uv,
    bad_lock or uv_error; message is the sentence for the operator."""

    def __init__(self, kind, message):
        super(UvError, self).__init__(message)
        self.kind = kind
        self.message = message


def shown(value):
    """A value in an error: repr, cut to about 100 characters."""
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def bad(what, value, why):
    """The bad_input UvError for a value that was refused before uv ran."""
    return UvError("bad_input", "%s %s %s; nothing was run." % (what, shown(value), why))


def check_values(index_url="", extra_index_urls=(), find_links=(), python_version="", python_platform="", uv="",
                 timeout=120, environment=None):
    """Raise UvError (bad_input) for a value that must not reach uv's command line or environment."""
    values = [("index_url", index_url)] + [("extra_index_urls item", u) for u in extra_index_urls or ()]
    values += [("find_links item", f) for f in find_links or ()]
    values += [("python_version", python_version), ("python_platform", python_platform), ("uv", uv)]
    for what, value in values:
        if not value:
            continue
        if CONTROL_RE.search(value) or control_character(value):
            raise bad(what, value, "holds a control character (a newline, tab, NUL, a Unicode line separator...)")
        if value.startswith("-"):
            raise bad(what, value, "starts with '-' and would be read as an option of uv")
    if python_version and not PYTHON_VERSION_RE.match(python_version):
        raise bad("python_version", python_version, "is not a Python version such as 3.12")
    if python_platform and not PLATFORM_RE.match(python_platform):
        raise bad("python_platform", python_platform, "is not a platform such as x86_64-manylinux_2_28")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
        raise bad("timeout", timeout, "is not a whole number of seconds of at least 1")
    for key, value in (environment or {}).items():
        if not ENV_NAME_RE.match(str(key)):
            raise bad("environment variable name", str(key), "is not a name (letters, digits, _)")
        if "\x00" in str(value):
            raise UvError("bad_input", "environment variable %s holds a NUL character; nothing was run." % (key,))


def source_args(index_url="", extra_index_urls=(), find_links=(), no_index=False, prerelease="",
                python_version="", python_platform=""):
    """uv's options for where packages come from and which Python and platform they are for."""
    argv = []
    if index_url:
        argv += ["--index-url", index_url]
    for url in extra_index_urls or ():
        argv += ["--extra-index-url", url]
    for link in find_links or ():
        argv += ["--find-links", link]
    if no_index:
        argv.append("--no-index")
    if prerelease:
        argv += ["--prerelease", prerelease]
    if python_version:
        argv += ["--python-version", python_version]
    if python_platform:
        argv += ["--python-platform", python_platform]
    return argv


#: a URL in free text (uv's words, a lock's comment)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"`<>]+")
#: a query parameter whose name says it holds a secret (its value is replaced)
_SECRET_QUERY = re.compile(r"([?&;][^=&;#\s]*(?:token|secret|passw|signature|credential|key|auth|sig)[^=&;#\s]*=)[^&;#\s)\]]*",
                           re.I)


def _redact(match):
    url = match.group(0)
    scheme, rest = url.split("://", 1)
    cut = min([i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0] or [len(rest)])
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        # user:password@ up to the LAST @ (a password may hold one)
        netloc = "***@" + netloc.rpartition("@")[2]
    return scheme + "://" + netloc + _SECRET_QUERY.sub(r"\1REDACTED", tail)


def without_credentials(text):
    """TEXT (a URL, or uv's words holding URLs) with each URL's user:password@ part replaced by ***@ and the value
    of each secret-looking query parameter (token=, X-Amz-Signature=, ...) by REDACTED (for a message, a report or a
    lock)."""
    return _URL.sub(_redact, text or "")


def describe_sources(index_url="", extra_index_urls=(), find_links=(), no_index=False):
    """Where the packages were looked for, in words."""
    parts = []
    if not no_index:
        parts.append("index %s" % (without_credentials(index_url) or "(uv's default, PyPI)"))
        parts.extend("extra index %s" % without_credentials(u) for u in extra_index_urls or ())
    parts.extend("find-links %s" % without_credentials(f) for f in find_links or ())
    return ", ".join(parts) if parts else "no source at all (no_index without find_links)"


def uv_causes(stderr, limit=6):
    """uv's own error lines, shortened, for the end of a message."""
    lines = [without_credentials(ln.strip()) for ln in (stderr or "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.lower().startswith("warning:")]
    return " / ".join(lines[:limit])


def classify(stderr, req, sources, limit=6):
    """A UvError for uv's error output while resolving REQ (text) from SOURCES (words)."""
    low = (stderr or "").lower()
    detail = uv_causes(stderr, limit)
    if any(m in low for m in FIND_LINKS_MARKERS):
        return UvError(
            "find_links",
            "A wheelhouse (find-links) could not be read on the control node while resolving %s from %s. "
            "Check that the directory exists and is readable. uv said: %s" % (req, sources, detail))
    if any(m in low for m in UNREACHABLE_MARKERS):
        return UvError(
            "unreachable",
            "The package index could not be reached from the control node while resolving %s from %s. "
            "Check the URL, the network or proxy, and credentials; nothing was changed on any host. uv said: %s"
            % (req, sources, detail))
    if any(m in low for m in NOT_FOUND_MARKERS):
        return UvError(
            "not_found",
            "No build matching %s was found in %s. Check the requested version (for nightlies use the exact "
            "version the index lists, or 'latest') and the index URLs; nothing was changed on any host. uv said: %s"
            % (req, sources, detail))
    return UvError("uv_error", "uv could not resolve %s from %s: %s" % (req, sources, detail or "no output"))


def find_uv(uv=""):
    """The uv executable to run: the given one, uv on PATH, or the uv Python package's binary."""
    if uv:
        found = shutil.which(uv) if os.sep not in uv else (uv if os.access(uv, os.X_OK) else None)
        if not found:
            raise UvError("no_uv", "The uv executable %r was not found on the control node." % (uv,))
        return found
    found = shutil.which("uv")
    if found:
        return found
    try:
        import uv as uv_package  # pylint: disable=import-outside-toplevel
        found = uv_package.find_uv_bin()
    except Exception:  # pylint: disable=broad-except
        found = None
    if found and os.access(found, os.X_OK):
        return found
    raise UvError(
        "no_uv",
        "uv was not found on the control node (not on PATH, and the Python that runs Ansible has no 'uv' package). "
        "Install it (for example 'pip install uv') or give its path.")


def uv_environment(timeout, environment=None):
    """The environment uv runs with: ours, uv's HTTP timeout (unless set), no colour, then ENVIRONMENT."""
    # (uv's own settings from the environment would change the resolution without being recorded: an index
    # set by UV_EXTRA_INDEX_URL is not in the lock's sources; they are dropped, but for those that cannot change
    # what is resolved; ENVIRONMENT gives any one on purpose)
    env = dict((key, value) for key, value in os.environ.items()
               if not key.startswith("UV_") or key in UV_ENV_KEPT)
    env.setdefault("UV_HTTP_TIMEOUT", str(timeout))
    env["NO_COLOR"] = "1"
    for key, value in (environment or {}).items():
        env[str(key)] = str(value)
    return env


def run_uv(argv, stdin, env, timeout, workdir=None, prefix="gpufleet-uv-"):
    """Run uv with :func:`bounded.run_bounded` (a session of its own, killed whole when TIMEOUT passes), in
    WORKDIR (else an empty temporary directory, removed afterwards), STDIN given as text.

    -> (rc, first STDOUT_CAP bytes of stdout, last STDERR_TAIL bytes of stderr); TimeoutExpired on timeout,
    OSError when uv could not be started.
    """
    own = workdir is None
    if own:
        workdir = tempfile.mkdtemp(prefix=prefix)
    try:
        rc, out, err = bounded.run_bounded(argv, timeout, max_output=STDOUT_CAP, env=env, stdin=stdin, cwd=workdir,
                                           stdout_head=True)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    if bounded.timed_out(rc, err):
        raise subprocess.TimeoutExpired(argv, timeout)
    if bounded.not_started(rc, err):
        raise OSError(err)

    def text(value):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return rc, text(out), text(err)[-STDERR_TAIL:]
