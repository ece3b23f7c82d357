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

import re
import subprocess

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpufleet.vllm.plugins.module_utils import uvcli

LATEST = ("", "latest")
# A PEP 440 version, with an optional local part (nightlies: 0.16.0rc2.dev344+gea5f903f8).
EXACT_VERSION_RE = re.compile(r"^v?[0-9][0-9A-Za-z.!+_-]*\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\Z")
SPECIFIER_RE = uvcli.SPECIFIER_RE
STDOUT_CAP = uvcli.STDOUT_CAP
STDERR_TAIL = uvcli.STDERR_TAIL

# The running of uv, its checks and its error sentences are shared with the uv_lock lookup (module_utils/uvcli).
ResolveError = uvcli.UvError
check_values = uvcli.check_values
classify = uvcli.classify
describe_sources = uvcli.describe_sources
find_uv = uvcli.find_uv


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


def build_argv(uv, index_url="", extra_index_urls=(), find_links=(), no_index=False,
               prerelease="", python_version="", python_platform=""):
    """The argv of `uv pip compile` reading one requirement from stdin."""
    argv = [uv, "pip", "compile", "-", "--no-deps", "--no-header", "--no-annotate", "--no-cache",
            "--no-config", "--no-progress", "--color", "never", "--no-python-downloads"]
    return argv + uvcli.source_args(index_url, extra_index_urls, find_links, no_index, prerelease,
                                    python_version, python_platform)


def parse_version(stdout, name):
    """The exact version of NAME in uv's compiled requirements, or None."""
    wanted = normalize_name(name)
    for line in (stdout or "").splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"^([A-Za-z0-9._-]+)\s*==\s*(\S+?)(\s*;.*)?\Z", line)
        if match and normalize_name(match.group(1)) == wanted:
            return match.group(2)
    return None


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
    env = uvcli.uv_environment(timeout, environment)
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
    """Run uv bounded (:func:`uvcli.run_uv`) in an empty temporary directory, STDIN given as text.

    -> (rc, first STDOUT_CAP bytes of stdout, last STDERR_TAIL bytes of stderr); TimeoutExpired on timeout,
    OSError when uv could not be started.
    """
    return uvcli.run_uv(argv, stdin, env, timeout, prefix="gpufleet-uv-resolve-")


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
