# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
name: uv_resolve
short_description: Resolve a package version request to one exact version with the control node's uv
version_added: 0.1.0
author: gpufleet.vllm developers (@gpufleet)
description:
  - Turns C(latest), a version range or an exact version of a package into the one exact version that the given
    package index, extra index URLs or wheelhouse (find-links) offer, by running C(uv pip compile --no-deps) on the
    control node (never through a shell).
  - Used by the P(gpufleet.vllm.reinstall#role) role with C(run_once) so that a whole fleet installs the same build, for
    example the nightly C(0.16.0rc2.dev344+gea5f903f8) that was newest when the rollout started, even when a newer
    nightly appears during the rollout.
  - Fails with a message that says what went wrong when the version does not exist (C(not found)), when the index
    cannot be reached (C(unreachable)), when a wheelhouse directory cannot be read, or when uv is missing.
options:
  _terms:
    description: The package name(s) to resolve, for example V(vllm). One exact version is returned per name.
    required: true
    type: list
    elements: str
  version:
    description:
      - V(latest) (or empty) for the newest version the sources offer, an exact version such as V(0.33.0) or
        V(0.16.0rc2.dev344+gea5f903f8), or a specifier such as V(>=0.32,<0.34).
      - Pre-releases (nightlies) follow uv's O(prerelease) rules; with uv's default an index that holds only
        nightlies (such as C(https://wheels.vllm.ai/nightly)) yields its newest nightly.
    type: str
    default: latest
  index_url:
    description: The package index URL (uv C(--index-url)); empty for uv's default (PyPI or C(UV_INDEX_URL)).
    type: str
    default: ""
  extra_index_urls:
    description:
      - Extra index URLs (uv C(--extra-index-url)). uv prefers them over O(index_url) for a package they hold, as
        vLLM's documentation for nightly builds relies on.
    type: list
    elements: str
    default: []
  find_links:
    description: Wheelhouse directories or URLs (uv C(--find-links)).
    type: list
    elements: str
    default: []
  no_index:
    description: Ignore all indexes, use only O(find_links) (uv C(--no-index)).
    type: bool
    default: false
  prerelease:
    description:
      - uv's pre-release strategy (C(--prerelease)). Empty for uv's default (V(if-necessary-or-explicit)).
    type: str
    default: ""
    choices: ["", disallow, allow, if-necessary, explicit, if-necessary-or-explicit]
  python_version:
    description:
      - The Python version of the hosts (uv C(--python-version)), for C(Requires-Python) and wheel tags. Empty for the
        control node's own Python.
    type: str
    default: ""
  python_platform:
    description:
      - The platform of the hosts (uv C(--python-platform)), so that a control node on another platform picks the
        version that has a wheel for the hosts. Empty for the control node's own platform.
    type: str
    default: x86_64-manylinux_2_28
  uv:
    description:
      - The uv executable on the control node. Empty to use C(uv) from C(PATH), else the C(uv) Python package that
        the control node's Python has installed.
    type: str
    default: ""
  timeout:
    description:
      - Seconds the resolution may take in all (at least 1); also uv's HTTP timeout unless C(UV_HTTP_TIMEOUT) is set.
        When it passes, uv is killed with its whole process group.
    type: int
    default: 120
  environment:
    description:
      - Extra environment variables for uv, for example C(UV_HTTP_RETRIES), proxy settings or index credentials
        (C(UV_INDEX_<NAME>_PASSWORD)).
    type: dict
    default: {}
notes:
  - Lookups run on the control node. uv's cache is not used (C(--no-cache)) so that C(latest) is always asked of
    the index, and uv's configuration files are ignored (C(--no-config)) so that only these options decide.
  - Python interpreters are never downloaded (C(--no-python-downloads)).
  - "Bounds: uv's output goes to temporary files; only the first 1 MiB of its standard output and the last 64 KiB of
    its error output are read."
  - "Refused before uv runs: a value of O(index_url), O(extra_index_urls), O(find_links), O(python_version),
    O(python_platform) or O(uv) that starts with C(-) (it would be read as an option) or holds a control character
    (newline, tab, NUL); a O(python_version) that is not like V(3.12); a O(python_platform) that is not a word
    like V(x86_64-manylinux_2_28); an O(environment) name that is not a variable name or a value with a NUL."
seealso:
  - name: uv pip compile
    description: The command this lookup runs.
    link: https://docs.astral.sh/uv/reference/cli/#uv-pip-compile
  - name: vLLM nightly wheels
    description: How vLLM publishes its nightly and per-commit wheel indexes.
    link: https://docs.vllm.ai/en/latest/getting_started/installation/gpu.html
"""

EXAMPLES = r"""
- name: Resolve the newest vLLM nightly once for the whole fleet
  ansible.builtin.set_fact:
    fleet_vllm_version: >-
      {{ lookup('gpufleet.vllm.uv_resolve', 'vllm',
                extra_index_urls=['https://wheels.vllm.ai/nightly']) }}
  run_once: true

- name: Check that a pinned version is on the offline mirror
  ansible.builtin.set_fact:
    fleet_vllm_version: >-
      {{ lookup('gpufleet.vllm.uv_resolve', 'vllm', version='0.33.0',
                find_links=['/srv/wheelhouse'], no_index=true, python_version='3.11') }}
  run_once: true
"""

RETURN = r"""
_raw:
  description: One exact version per name, for example V(0.33.0).
  type: list
  elements: str
"""

import os
import re
import shutil
import subprocess
import tempfile

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded

LATEST = ("", "latest")
# A PEP 440 version, with an optional local part (nightlies: 0.16.0rc2.dev344+gea5f903f8).
EXACT_VERSION_RE = re.compile(r"^v?[0-9][0-9A-Za-z.!+_-]*$")
SPECIFIER_RE = re.compile(r"^\s*(===|==|~=|!=|>=|<=|<|>)\s*[0-9A-Za-z.*!+_-]+\s*$")
NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
PYTHON_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,2}$")
PLATFORM_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


class ResolveError(Exception):
    """A resolution that failed; kind is not_found, unreachable, find_links, bad_input, no_uv or uv_error."""

    def __init__(self, kind, message):
        super(ResolveError, self).__init__(message)
        self.kind = kind
        self.message = message


def normalize_name(name):
    """The PEP 503 normalised form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement(name, version):
    """The requirement line for NAME and a version request (latest, exact or specifier)."""
    name = (name or "").strip()
    if not NAME_RE.match(name):
        raise ResolveError("bad_input", "%r is not a valid package name." % (name,))
    request = (version or "").strip()
    if request.lower() in LATEST:
        return name
    if any(c in request for c in "\n\r;#@ "):
        raise ResolveError(
            "bad_input",
            "The version request %r for %s is not a version: give 'latest', an exact version such as 0.33.0 "
            "or a specifier such as '>=0.32,<0.34'." % (request, name))
    if EXACT_VERSION_RE.match(request):
        return "%s==%s" % (name, request[1:] if request.startswith("v") else request)
    parts = request.split(",")
    if all(SPECIFIER_RE.match(p) for p in parts):
        return name + ",".join(p.strip() for p in parts)
    raise ResolveError(
        "bad_input",
        "The version request %r for %s is not understood: give 'latest', an exact version such as 0.33.0 "
        "or a specifier such as '>=0.32,<0.34'." % (request, name))


def _bad(what, value, why):
    return ResolveError("bad_input", "%s %s %s; nothing was run." % (what, _shown(value), why))


def _shown(value):
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def check_values(index_url="", extra_index_urls=(), find_links=(), python_version="", python_platform="", uv="",
                 timeout=120, environment=None):
    """Raise ResolveError (bad_input) for a value that must not reach uv's command line or environment."""
    values = [("index_url", index_url)] + [("extra_index_urls item", u) for u in extra_index_urls or ()]
    values += [("find_links item", f) for f in find_links or ()]
    values += [("python_version", python_version), ("python_platform", python_platform), ("uv", uv)]
    for what, value in values:
        if not value:
            continue
        if CONTROL_RE.search(value):
            raise _bad(what, value, "holds a control character (a newline, tab, NUL...)")
        if value.startswith("-"):
            raise _bad(what, value, "starts with '-' and would be read as an option of uv")
    if python_version and not PYTHON_VERSION_RE.match(python_version):
        raise _bad("python_version", python_version, "is not a Python version such as 3.12")
    if python_platform and not PLATFORM_RE.match(python_platform):
        raise _bad("python_platform", python_platform, "is not a platform such as x86_64-manylinux_2_28")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
        raise _bad("timeout", timeout, "is not a whole number of seconds of at least 1")
    for key, value in (environment or {}).items():
        if not ENV_NAME_RE.match(str(key)):
            raise _bad("environment variable name", str(key), "is not a name (letters, digits, _)")
        if "\x00" in str(value):
            raise ResolveError("bad_input", "environment variable %s holds a NUL character; nothing was run." % (key,))


def build_argv(uv, index_url="", extra_index_urls=(), find_links=(), no_index=False,
               prerelease="", python_version="", python_platform=""):
    """The argv of `uv pip compile` reading one requirement from stdin."""
    argv = [uv, "pip", "compile", "-", "--no-deps", "--no-header", "--no-annotate", "--no-cache",
            "--no-config", "--no-progress", "--color", "never", "--no-python-downloads"]
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


def parse_version(stdout, name):
    """The exact version of NAME in uv's compiled requirements, or None."""
    wanted = normalize_name(name)
    for line in (stdout or "").splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"^([A-Za-z0-9._-]+)\s*==\s*(\S+?)(\s*;.*)?$", line)
        if match and normalize_name(match.group(1)) == wanted:
            return match.group(2)
    return None


def describe_sources(index_url="", extra_index_urls=(), find_links=(), no_index=False):
    """Where the version was looked for, in words."""
    parts = []
    if not no_index:
        parts.append("index %s" % (index_url or "(uv's default, PyPI)"))
        parts.extend("extra index %s" % u for u in extra_index_urls or ())
    parts.extend("find-links %s" % f for f in find_links or ())
    return ", ".join(parts) if parts else "no source at all (no_index without find_links)"


def uv_causes(stderr, limit=6):
    """uv's own error lines, shortened, for the end of a message."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.lower().startswith("warning:")]
    return " / ".join(lines[:limit])


def classify(stderr, req, sources):
    """A ResolveError for uv's error output."""
    low = (stderr or "").lower()
    detail = uv_causes(stderr)
    if any(m in low for m in FIND_LINKS_MARKERS):
        return ResolveError(
            "find_links",
            "A wheelhouse (find-links) could not be read on the control node while resolving %s from %s. "
            "Check that the directory exists and is readable. uv said: %s" % (req, sources, detail))
    if any(m in low for m in UNREACHABLE_MARKERS):
        return ResolveError(
            "unreachable",
            "The package index could not be reached from the control node while resolving %s from %s. "
            "Check the URL, the network or proxy, and credentials; nothing was changed on any host. uv said: %s"
            % (req, sources, detail))
    if any(m in low for m in NOT_FOUND_MARKERS):
        return ResolveError(
            "not_found",
            "No build matching %s was found in %s. Check the requested version (for nightlies use the exact "
            "version the index lists, or 'latest') and the index URLs; nothing was changed on any host. uv said: %s"
            % (req, sources, detail))
    return ResolveError("uv_error", "uv could not resolve %s from %s: %s" % (req, sources, detail or "no output"))


def find_uv(uv=""):
    """The uv executable to run: the given one, uv on PATH, or the uv Python package's binary."""
    if uv:
        found = shutil.which(uv) if os.sep not in uv else (uv if os.access(uv, os.X_OK) else None)
        if not found:
            raise ResolveError("no_uv", "The uv executable %r was not found on the control node." % (uv,))
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
    raise ResolveError(
        "no_uv",
        "uv was not found on the control node (not on PATH, and the Python that runs Ansible has no 'uv' package). "
        "Install it (for example 'pip install uv') or give its path.")


def resolve(name, version="latest", index_url="", extra_index_urls=(), find_links=(), no_index=False,
            prerelease="", python_version="", python_platform="", uv="", timeout=120, environment=None,
            runner=None):
    """Resolve NAME and a version request to one exact version; raise ResolveError."""
    req = requirement(name, version)
    check_values(index_url, extra_index_urls, find_links, python_version, python_platform, uv, timeout, environment)
    if no_index and not find_links:
        raise ResolveError("bad_input", "no_index is set but no find_links were given: there is nowhere to look.")
    uv_bin = find_uv(uv)
    argv = build_argv(uv_bin, index_url, extra_index_urls, find_links, no_index, prerelease,
                      python_version, python_platform)
    env = dict(os.environ)
    env.setdefault("UV_HTTP_TIMEOUT", str(timeout))
    env["NO_COLOR"] = "1"
    for key, value in (environment or {}).items():
        env[str(key)] = str(value)
    sources = describe_sources(index_url, extra_index_urls, find_links, no_index)
    run = runner or _run
    try:
        rc, stdout, stderr = run(argv, req + "\n", env, timeout)
    except subprocess.TimeoutExpired:
        raise ResolveError(
            "unreachable",
            "Resolving %s from %s took longer than %s seconds (timeout), so uv was stopped; the index may be "
            "unreachable or slow. Nothing was changed on any host." % (req, sources, timeout))
    except OSError as exc:
        raise ResolveError("no_uv", "uv (%s) could not be run on the control node: %s" % (uv_bin, to_native(exc)))
    if rc != 0:
        raise classify(stderr, req, sources)
    found = parse_version(stdout, name)
    if not found:
        raise ResolveError(
            "uv_error", "uv resolved %s from %s but printed no exact version of %s: %s"
            % (req, sources, name, (stdout or "").strip() or "no output"))
    return found


def _run(argv, stdin, env, timeout):
    """Run uv with :func:`bounded.run_bounded` (a session of its own, killed whole when TIMEOUT passes), in an
    empty working directory, STDIN given as text.

    -> (rc, first STDOUT_CAP bytes of stdout, last STDERR_TAIL bytes of stderr); TimeoutExpired on timeout,
    OSError when uv could not be started.
    """
    workdir = tempfile.mkdtemp(prefix="gpufleet-uv-resolve-")
    try:
        rc, out, err = bounded.run_bounded(argv, timeout, max_output=STDOUT_CAP, env=env, stdin=stdin, cwd=workdir,
                                           stdout_head=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if bounded.timed_out(rc, err):
        raise subprocess.TimeoutExpired(argv, timeout)
    if bounded.not_started(rc, err):
        raise OSError(err)

    def text(value):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return rc, text(out), text(err)[-STDERR_TAIL:]


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        opts = dict(
            version=to_text(self.get_option("version") or "latest"),
            index_url=to_text(self.get_option("index_url") or ""),
            extra_index_urls=[to_text(u) for u in self.get_option("extra_index_urls") or [] if u],
            find_links=[to_text(f) for f in self.get_option("find_links") or [] if f],
            no_index=bool(self.get_option("no_index")),
            prerelease=to_text(self.get_option("prerelease") or ""),
            python_version=to_text(self.get_option("python_version") or ""),
            python_platform=to_text(self.get_option("python_platform") or ""),
            uv=to_text(self.get_option("uv") or ""),
            timeout=self.get_option("timeout"),
            environment=self.get_option("environment") or {},
        )
        results = []
        for term in terms:
            try:
                results.append(resolve(to_text(term), **opts))
            except ResolveError as exc:
                raise AnsibleLookupError(exc.message)
        return results
