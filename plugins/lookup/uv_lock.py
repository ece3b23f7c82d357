# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
name: uv_lock
short_description: Resolve a whole environment once on the control node into a hash-locked fleet lock
version_added: 0.1.0
author: gpufleet.vllm developers (@gpufleet)
description:
  - Resolves the requirements given as terms (for example V(vllm==0.33.0)) and every dependency they pull in, for
    the hosts' Python and platform, by running C(uv pip compile --generate-hashes) on the control node (never
    through a shell), and returns the fleet lock, one text.
  - The lock is uv's requirements output (each distribution as C(name==version) with the sha256 hashes of its files)
    under a header of comment lines (C(# gpufleet.vllm lock v2), then C(python-version), C(python-platform),
    C(package), C(sources), C(excluded), C(resolved-at), C(resolver) and C(fingerprint)), so a host installs exactly
    it with C(uv pip sync --require-hashes LOCK) and nothing is resolved again on a host.
  - The fingerprint is the digest of every pin (name and version) that a host's environment gives too when it holds
    exactly the same set; a lock whose pins were edited afterwards no longer matches it and is refused when read.
  - "Fails, with nothing changed on any host, with a message that says what went wrong: uv missing; an index that
    cannot be reached; a version or a per-commit index that does not exist (C(not found)); a resolution that is
    impossible (uv's reason); the time limit passed; a resolution that cannot be hash-locked (a dependency from a
    URL or a git repository)."
options:
  _terms:
    description:
      - The requirements, each a package name with an optional PEP 440 version specifier, for example
        V(vllm==0.33.0), V(vllm==0.16.0rc2.dev344+gea5f903f8), V(vllm>=0.32,<0.34) or V(nvidia-ml-py). No markers,
        extras, URLs or options.
      - Empty with O(lock_file).
      - With O(version) or O(resolve), the first term is a bare package name, and the version comes from those.
    type: list
    elements: str
  version:
    description:
      - The version of the first term's package, a bare name, as the C(uv_resolve) lookup takes it - V(latest) (or
        empty) for the newest, an exact version such as V(0.33.0), or a specifier such as V(>=0.32,<0.34). Without
        O(resolve) the first term becomes that requirement (V(vllm==0.33.0), V(vllm>=0.32,<0.34), V(vllm)).
    type: str
    default: ""
  resolve:
    description:
      - First resolve O(version) of the first term's package into one exact version, as the C(uv_resolve) lookup does
        (C(uv pip compile --no-deps) from the same sources, O(prerelease), Python and platform, bounded by the same
        O(timeout)), then lock C(name==that version). So the version a fleet gets is the newest the sources offer,
        and a newest one whose dependencies cannot be resolved fails the lock rather than giving an older version.
      - One lookup call resolves and locks, once, on the control node.
    type: bool
    default: false
  lock_file:
    description:
      - A lock kept by an earlier run (a path on the control node). It is read and checked (its header, every pin with
        its hashes, its fingerprint against its pins) and returned as it is; nothing is resolved and no requirement
        may be given. This is how a fleet rolls out exactly a previous lock.
    type: path
  check_sources:
    description:
      - With O(lock_file), compare the package sources the kept lock was made from (its header's C(sources)) with
        O(index_url), O(extra_index_urls), O(find_links) and O(no_index), and refuse the lock when they differ - a
        lock made from a per-commit nightly index, rolled out again without that commit, would look for wheels the
        hosts' sources no longer offer.
    type: bool
    default: false
  package:
    description:
      - The package the lock is about (its header's C(package) line, C(name==version)). Empty for the first term's
        name.
    type: str
    default: ""
  package_index:
    description:
      - When set, O(package) must come from this index (for example vLLM's per-commit index
        C(https://wheels.vllm.ai/<commit>)), else the lookup fails with C(not found). Without it an extra index that
        does not know the commit would let uv take the package from O(index_url) instead, silently.
    type: str
    default: ""
  index_url:
    description: The package index URL (uv C(--index-url)); empty for uv's default (PyPI or C(UV_INDEX_URL)).
    type: str
    default: ""
  extra_index_urls:
    description:
      - Extra index URLs (uv C(--extra-index-url)), for example a per-commit nightly index. uv prefers them over
        O(index_url) for a package they hold.
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
    description: uv's pre-release strategy (C(--prerelease)). Empty for uv's default (V(if-necessary-or-explicit)).
    type: str
    default: ""
    choices: ["", disallow, allow, if-necessary, explicit, if-necessary-or-explicit]
  python_version:
    description:
      - The hosts' Python version, V(3.12) (uv C(--python-version)); the lock is for this Python only.
      - Required unless O(lock_file) is given.
    type: str
  python_platform:
    description:
      - The hosts' platform (uv C(--python-platform)), for example V(x86_64-manylinux_2_36) for x86-64 hosts with
        glibc 2.36 or newer; the lock is for this platform only.
    type: str
    default: x86_64-manylinux_2_28
  exclude:
    description:
      - Package names to leave out of the environment with all they alone pull in, by uv's documented override
        C(name; sys_platform == 'never').
    type: list
    elements: str
    default: []
  overrides:
    description:
      - Requirements that replace every other constraint on a package (uv C(--override)), each a name with an
        optional version specifier, for example V(torch==2.9.0).
    type: list
    elements: str
    default: []
  torch_backend:
    description:
      - uv's PyTorch index selection (C(--torch-backend), for example V(auto), V(cu130), V(cpu)); empty to leave it
        out. The hosts install with the same value, so the wheels come from the same index.
    type: str
    default: ""
  allow_builds:
    description:
      - Let uv build source distributions on the control node to read their metadata. By default only wheels are
        used (uv C(--no-build)), so the hosts install the exact files the lock names and no package's build code
        runs on the control node.
    type: bool
    default: false
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
    default: 300
  environment:
    description:
      - Extra environment variables for uv, for example C(UV_HTTP_RETRIES), proxy settings or index credentials
        (C(UV_INDEX_<NAME>_PASSWORD)).
    type: dict
    default: {}
notes:
  - Lookups run on the control node. uv's cache is not used (C(--no-cache)) and its configuration files are ignored
    (C(--no-config)), so only these options decide; Python interpreters are never downloaded.
  - "Bounds: the lock is read from uv's output file, at most 4 MiB; only the last 64 KiB of uv's error output are
    read; the temporary directory (requirements, overrides, output) is removed afterwards."
  - "Refused before uv runs: a term or override that is not a name with an optional version specifier; an O(exclude)
    item that is not a package name or that is a term; a value of O(index_url), O(extra_index_urls),
    O(find_links), O(python_platform) or O(uv) that starts with C(-) or holds a control character; a
    O(python_version) that is not like V(3.12)."
  - Credentials in index URLs are never written into the lock (its C(sources) line shows C(***@)).
seealso:
  - name: uv pip compile
    description: The command this lookup runs.
    link: https://docs.astral.sh/uv/reference/cli/#uv-pip-compile
  - name: uv dependency overrides
    description: How an override with a marker that is never true removes a dependency.
    link: https://docs.astral.sh/uv/concepts/resolution/#dependency-overrides
  - name: vLLM nightly wheels
    description: How vLLM publishes its nightly and per-commit wheel indexes.
    link: https://docs.vllm.ai/en/latest/getting_started/installation/gpu.html
  - plugin: gpufleet.vllm.uv_resolve
    plugin_type: lookup
    description: One exact version of one package, without its dependencies.
"""

EXAMPLES = r"""
- name: Lock the whole environment of one vLLM nightly commit for the fleet
  ansible.builtin.set_fact:
    fleet_lock: >-
      {{ lookup('gpufleet.vllm.uv_lock', 'vllm',
                extra_index_urls=['https://wheels.vllm.ai/' ~ vllm_commit],
                package_index='https://wheels.vllm.ai/' ~ vllm_commit,
                python_version='3.12', python_platform='x86_64-manylinux_2_36') }}
  run_once: true

- name: Resolve the newest vLLM on the mirror and lock the environment of exactly that version, in one call
  ansible.builtin.set_fact:
    fleet_lock: >-
      {{ lookup('gpufleet.vllm.uv_lock', 'vllm', version='latest', resolve=true,
                index_url='https://mirror.example/simple',
                python_version='3.12', python_platform='x86_64-manylinux_2_36') }}
  run_once: true

- name: Lock vLLM 0.33.0 from the offline mirror, without one dependency
  ansible.builtin.set_fact:
    fleet_lock: >-
      {{ lookup('gpufleet.vllm.uv_lock', 'vllm==0.33.0', 'nvidia-ml-py',
                find_links=['/srv/wheelhouse'], no_index=true, exclude=['gguf'],
                python_version='3.11', python_platform='x86_64-manylinux_2_28') }}
  run_once: true

- name: Keep the lock with the rollout's report
  ansible.builtin.copy:
    content: "{{ fleet_lock }}"
    dest: "{{ report_dir }}/fleet.lock"
    mode: "0644"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
_raw:
  description:
    - One element, the text of the lock; C(uv pip sync --require-hashes) reads it as it is.
  type: list
  elements: str
  sample:
    - |
      # gpufleet.vllm lock v2
      # python-version: 3.12
      # python-platform: x86_64-manylinux_2_36
      # package: vllm==0.33.0
      # sources: index https://mirror.example/simple
      # excluded: none
      # resolved-at: 2026-12-05T13:47:43Z
      # resolver: uv 0.13.9
      # fingerprint: sha256:4bab6577a51acd91a7974ae5351069f6ac5e1536ce0cdbc225705265296c1565
      lark==1.2.2 \
          --hash=sha256:db447c38d64e769d48f74ab4cf22794709cb4f053ca71839f165b1919cd387b0
          # via vllm
          # from https://mirror.example/simple
"""

import datetime
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpufleet.vllm.plugins.lookup import uv_resolve
from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, pkgnames, uvcli

_REQ_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(.*)\Z")
_PYTHON_XY = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}\Z")
_TORCH_BACKEND = re.compile(r"[a-z][a-z0-9.-]{0,31}\Z")
_FROM = re.compile(r"(\s*# from )(\S.*)\Z")
VERSION_TIMEOUT = 20
# The options the resolution before the lock (resolve) shares with it.
RESOLVE_KEYS = ("index_url", "extra_index_urls", "find_links", "no_index", "prerelease", "python_version",
                "python_platform", "uv", "timeout", "environment")


def requirement(text, what="term"):
    """(canonical name, requirement line) of 'name' or 'name<specifiers>'; UvError (bad_input) otherwise."""
    value = text.strip() if isinstance(text, str) else ""
    if uvcli.CONTROL_RE.search(value):
        raise uvcli.bad(what, text, "holds a control character (a newline, tab, NUL...)")
    match = _REQ_NAME.match(value)
    problem = None
    if not match or not pkgnames.valid_name(match.group(1)):
        problem = "is not a package name"
    else:
        rest = match.group(2).strip()
        if rest and not all(uvcli.SPECIFIER_RE.match(p) for p in rest.split(",")):
            problem = "is not a package name with an optional version specifier"
    if problem:
        raise uvcli.bad(what, text, "%s such as vllm==0.33.0 or nvidia-ml-py (no markers, extras, URLs or options)"
                        % problem)
    name = match.group(1)
    return pkgnames.canonical_name(name), (name + ",".join(p.strip() for p in rest.split(",")) if rest else name)


def describe(index_url="", extra_index_urls=(), find_links=(), no_index=False):
    """The lock's sources line: 'index URL; extra-index URL; find-links PATH; no-index', credentials hidden."""
    parts = []
    if not no_index:
        parts.append("index %s" % (uvcli.without_credentials(index_url) or "uv-default"))
    parts.extend("extra-index %s" % uvcli.without_credentials(u) for u in extra_index_urls or ())
    parts.extend("find-links %s" % uvcli.without_credentials(f) for f in find_links or ())
    if no_index:
        parts.append("no-index")
    return "; ".join(parts)


def uv_version(uv_bin, env, runner, timeout=VERSION_TIMEOUT):
    """'uv 0.13.9' from `uv --version` (at most TIMEOUT seconds), or 'uv unknown'."""
    try:
        rc, out, _err = runner([uv_bin, "--version"], None, env, timeout)
    except (subprocess.TimeoutExpired, OSError):
        return "uv unknown"
    match = re.match(r"\s*uv ([0-9][0-9A-Za-z.+-]{0,40})", out or "")
    return "uv %s" % match.group(1) if rc == 0 and match else "uv unknown"


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


def _read_output(path):
    """uv's output file, at most lockfile.MAX_BYTES; UvError when it is missing or larger."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(lockfile.MAX_BYTES + 1)
    except (IOError, OSError) as exc:
        raise uvcli.UvError("uv_error", "uv finished but wrote no requirements file: %s" % to_native(exc))
    if len(data) > lockfile.MAX_BYTES:
        raise uvcli.UvError("bad_lock", "uv's resolution is larger than the %d MiB a lock may have."
                            % (lockfile.MAX_BYTES // (1024 * 1024)))
    return data.decode("utf-8", "replace")


def _origins(body):
    """{canonical name: index URL} from uv's '# from URL' annotations, and BODY with their credentials hidden."""
    origins = {}
    current = None
    lines = []
    for line in body.split("\n"):
        pin = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if pin:
            current = pkgnames.canonical_name(pin.group(1))
        match = _FROM.match(line)
        if match:
            line = match.group(1) + uvcli.without_credentials(match.group(2))
            if current:
                origins[current] = match.group(2).strip()
        lines.append(line)
    return origins, "\n".join(lines)


def _term_missing(stderr, names):
    """Whether uv's error says that one of the requested packages (NAMES, canonical), or the version asked of
    it, does not exist (rather than that their dependencies cannot be satisfied together)."""
    text = stderr or ""
    found = re.findall(r"(?:there is no version of|no versions of|only pre-release versions of) ([A-Za-z0-9._-]+)",
                       text, re.IGNORECASE)
    found += re.findall(r"([A-Za-z0-9._-]+) was not found in the", text)
    found += re.findall(r"only ([A-Za-z0-9._-]+)[^ ]* (?:is|are) available and you require", text)
    return any(pkgnames.canonical_name(name) in names for name in found)


def _same_index(one, other):
    return uvcli.without_credentials(one).rstrip("/") == uvcli.without_credentials(other).rstrip("/")


def read_lock_file(path, limit=lockfile.MAX_BYTES):
    """The text of the lock at PATH (a regular file, at most LIMIT bytes), checked by lockfile.parse_lock;
    UvError (bad_lock) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise uvcli.UvError("bad_lock", "The lock %s cannot be read: %s. Nothing was changed on any host."
                            % (path, exc.strerror or exc))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise uvcli.UvError("bad_lock", "The lock %s is not a regular file. Nothing was changed on any host." % path)
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise uvcli.UvError("bad_lock", "The lock %s is larger than %d bytes, more than a lock holds. Nothing was "
                            "changed on any host." % (path, limit))
    text = data.decode("utf-8", "surrogateescape")
    try:
        lockfile.parse_lock(text, where="the lock %s" % path)
    except lockfile.LockError as exc:
        raise uvcli.UvError("bad_lock", "%s Nothing was changed on any host." % to_native(exc))
    return text


def first_term(terms, version="", resolve=False, resolver=None, **sources):
    """TERMS with the first, a bare package name, made the requirement of VERSION (resolved first with RESOLVE).

    Without VERSION and RESOLVE the terms are returned as they are. SOURCES are uv_resolve.resolve's keywords (the
    indexes, prerelease, Python, platform, uv, timeout, environment); UvError when a term or the version is refused
    or the resolution fails.
    """
    terms = list(terms)
    if not version and not resolve:
        return terms
    name = terms[0].strip() if terms and isinstance(terms[0], str) else ""
    if not uv_resolve.NAME_RE.match(name):
        raise uvcli.bad("term", terms[0] if terms else "", "must be a bare package name (such as vllm) when version "
                        "or resolve is given")
    if resolve:
        exact = (resolver or uv_resolve.resolve)(name, version or "latest", **sources)
        return ["%s==%s" % (name, exact)] + terms[1:]
    return [uv_resolve.requirement(name, version)] + terms[1:]


def lock(terms, package="", package_index="", index_url="", extra_index_urls=(), find_links=(), no_index=False,
         prerelease="", python_version="", python_platform="x86_64-manylinux_2_28", exclude=(), overrides=(),
         allow_builds=False, uv="", timeout=300, environment=None, runner=None, now=None, torch_backend=""):
    """The lock text of TERMS for the hosts' Python and platform; UvError (kind and sentence) otherwise."""
    if not terms:
        raise uvcli.UvError("bad_input", "No requirement was given to lock (for example 'vllm==0.33.0').")
    wanted = []
    for term in terms:
        name, line = requirement(term)
        if name in [n for n, _l in wanted]:
            raise uvcli.bad("term", term, "names %s a second time" % name)
        wanted.append((name, line))
    names = [n for n, _l in wanted]
    override_lines = []
    for item in overrides or ():
        name, line = requirement(item, "overrides item")
        override_lines.append((name, line))
    excluded = []
    for item in exclude or ():
        if not isinstance(item, str) or not pkgnames.valid_name(item.strip()):
            raise uvcli.bad("exclude item", item, "is not a package name")
        name = pkgnames.canonical_name(item.strip())
        if name in names:
            raise uvcli.bad("exclude item", item, "is one of the requirements to lock")
        if name in [n for n, _l in override_lines]:
            raise uvcli.bad("exclude item", item, "is also given in overrides")
        excluded.append(name)
    if not python_version or not _PYTHON_XY.match(python_version):
        raise uvcli.bad("python_version", python_version, "is not the hosts' Python version such as 3.12 (a lock is "
                        "for one Python)")
    if not python_platform:
        raise uvcli.UvError("bad_input", "python_platform is empty: a lock is for the hosts' platform, such as "
                            "x86_64-manylinux_2_28; nothing was run.")
    uvcli.check_values(index_url, extra_index_urls, find_links, python_version, python_platform, uv, timeout,
                       environment)
    if torch_backend and not _TORCH_BACKEND.match(torch_backend):
        raise uvcli.bad("torch_backend", torch_backend, "is not a uv torch backend such as auto, cu130 or cpu")
    if package_index:
        uvcli.check_values(index_url=package_index)
    sources = describe(index_url, extra_index_urls, find_links, no_index)
    if len(sources) > lockfile.MAX_SOURCES:
        raise uvcli.UvError("bad_input", "the package sources (%d index URLs and find-links) take %d characters, more "
                            "than a lock's sources line holds (%d); nothing was run."
                            % (1 + len(extra_index_urls or ()) + len(find_links or ()), len(sources), lockfile.MAX_SOURCES))
    package_name = names[0]
    if package:
        if not pkgnames.valid_name(package.strip()) or pkgnames.canonical_name(package.strip()) not in names:
            raise uvcli.bad("package", package, "is not the name of one of the requirements")
        package_name = pkgnames.canonical_name(package.strip())
    if no_index and not find_links:
        raise uvcli.UvError("bad_input", "no_index is set but no find_links were given: there is nowhere to look.")
    uv_bin = uvcli.find_uv(uv)
    env = uvcli.uv_environment(timeout, environment)
    run = runner or uvcli.run_uv
    what = ", ".join(line for _n, line in wanted)
    sources = uvcli.describe_sources(index_url, extra_index_urls, find_links, no_index)
    workdir = tempfile.mkdtemp(prefix="gpufleet-uv-lock-")
    try:
        output = os.path.join(workdir, "lock.txt")
        argv = [uv_bin, "pip", "compile", "-", "--generate-hashes", "--no-header", "--emit-index-annotation",
                "--no-cache", "--no-config", "--no-progress", "--quiet", "--color", "never", "--no-python-downloads",
                "--output-file", output]
        if not allow_builds:
            argv.append("--no-build")
        if torch_backend:
            argv += ["--torch-backend", torch_backend]
        if override_lines or excluded:
            override_file = os.path.join(workdir, "overrides.txt")
            with open(override_file, "w") as handle:
                handle.write("".join(line + "\n" for _n, line in override_lines))
                handle.write("".join("%s; sys_platform == 'never'\n" % name for name in excluded))
            argv += ["--override", override_file]
        argv += uvcli.source_args(index_url, extra_index_urls, find_links, no_index, prerelease,
                                  python_version, python_platform)
        started = time.monotonic()
        resolver = uv_version(uv_bin, env, run, min(VERSION_TIMEOUT, timeout))
        left = max(1, int(round(timeout - (time.monotonic() - started))))
        resolved_at = (now or _utc_now)().strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            rc, _out, stderr = run(argv, "".join(line + "\n" for _n, line in wanted), env, left, workdir=workdir)
        except subprocess.TimeoutExpired:
            raise uvcli.UvError(
                "timeout",
                "Locking %s from %s took longer than %s seconds (timeout), so uv was stopped; the index may be "
                "unreachable or slow. Nothing was changed on any host." % (what, sources, timeout))
        except OSError as exc:
            raise uvcli.UvError("no_uv", "uv (%s) could not be run on the control node: %s"
                                % (uv_bin, to_native(exc)))
        if rc != 0:
            error = uvcli.classify(stderr, what, sources, limit=12)
            if error.kind == "not_found" and not _term_missing(stderr, names):
                error = uvcli.UvError(
                    "unsatisfiable",
                    "The environment of %s cannot be resolved from %s for Python %s on %s: uv said: %s. Nothing was "
                    "changed on any host." % (what, sources, python_version, python_platform,
                                              uvcli.uv_causes(stderr, 12)))
            if error.kind == "uv_error" and "no usable wheels" in (stderr or "").lower() and not allow_builds:
                error.message += " (only wheels are used unless allow_builds is set)"
            raise error
        body = _read_output(output)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    origins, body = _origins(body)
    if package_index:
        came_from = origins.get(package_name)
        if not came_from or not _same_index(came_from, package_index):
            raise uvcli.UvError(
                "not_found",
                "%s was not found in %s (package_index): uv took it from %s instead. That index does not offer it "
                "(for a per-commit nightly index: the commit is unknown or has no wheels yet). Nothing was changed "
                "on any host." % (package_name, uvcli.without_credentials(package_index),
                                  uvcli.without_credentials(came_from) if came_from else "nowhere it could name"))
    meta = {
        "python_version": python_version,
        "python_platform": python_platform,
        "package": package_name,
        "sources": describe(index_url, extra_index_urls, find_links, no_index),
        "excluded": excluded,
        "resolved_at": resolved_at,
        "resolver": resolver,
    }
    try:
        return lockfile.render_lock(meta, body, where="uv's resolution of %s" % what)
    except lockfile.LockError as exc:
        raise uvcli.UvError(
            "bad_lock",
            "%s cannot be made a lock: %s Exclude or override that dependency, or publish it to the index as a "
            "wheel. Nothing was changed on any host." % (what, to_native(exc)))


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        lock_path = self.get_option("lock_file")
        if lock_path:
            if terms or self.get_option("version") or self.get_option("resolve"):
                raise AnsibleLookupError("uv_lock: give requirements to resolve (with version and resolve) or lock_file "
                                         "to read, not both.")
            try:
                text = read_lock_file(to_text(lock_path))
            except uvcli.UvError as exc:
                raise AnsibleLookupError(exc.message)
            if self.get_option("check_sources"):
                made_from = lockfile.parse_lock(text)["meta"]["sources"]
                now = describe(to_text(self.get_option("index_url") or ""),
                               [to_text(u) for u in self.get_option("extra_index_urls") or [] if u],
                               [to_text(f) for f in self.get_option("find_links") or [] if f],
                               bool(self.get_option("no_index")))
                if made_from != now:
                    raise AnsibleLookupError(
                        "uv_lock: the lock %s was made from %s, and this run's package sources are %s: the hosts "
                        "would look for its wheels where they may not be (a per-commit nightly index needs the same "
                        "commit: -e reinstall_nightly_commit=...). Give the same sources, or make a new lock. Nothing "
                        "was changed on any host." % (to_text(lock_path), made_from, now))
            return [text]
        opts = dict(
            package=to_text(self.get_option("package") or ""),
            package_index=to_text(self.get_option("package_index") or ""),
            index_url=to_text(self.get_option("index_url") or ""),
            extra_index_urls=[to_text(u) for u in self.get_option("extra_index_urls") or [] if u],
            find_links=[to_text(f) for f in self.get_option("find_links") or [] if f],
            no_index=bool(self.get_option("no_index")),
            prerelease=to_text(self.get_option("prerelease") or ""),
            python_version=to_text(self.get_option("python_version") or ""),
            python_platform=to_text(self.get_option("python_platform") or ""),
            exclude=[to_text(e) for e in self.get_option("exclude") or []],
            overrides=[to_text(o) for o in self.get_option("overrides") or []],
            allow_builds=bool(self.get_option("allow_builds")),
            torch_backend=to_text(self.get_option("torch_backend") or ""),
            uv=to_text(self.get_option("uv") or ""),
            timeout=self.get_option("timeout"),
            environment=self.get_option("environment") or {},
        )
        try:
            terms = first_term([to_text(t) for t in terms], version=to_text(self.get_option("version") or ""),
                               resolve=bool(self.get_option("resolve")),
                               **dict((key, opts[key]) for key in RESOLVE_KEYS))
            return [lock(terms, **opts)]
        except uvcli.UvError as exc:
            raise AnsibleLookupError(exc.message)
