# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet lock: one environment (vLLM and every dependency) pinned by version and sha256 hash.

A lock is a uv requirements file (``uv pip compile --generate-hashes``
output) under a header of comment lines, so ``uv pip sync --require-hashes
LOCK`` reads it as it is::

    # gpufleet.vllm lock v2
    # python-version: 3.12
    # python-platform: x86_64-manylinux_2_36
    # package: vllm==0.33.0
    # sources: index https://mirror/simple; extra-index https://wheels.vllm.ai/<commit>
    # excluded: none
    # resolved-at: 2026-12-05T13:47:43Z
    # resolver: uv 0.13.9
    # fingerprint: sha256:<64 hex>
    lark==1.2.2 \\
        --hash=sha256:<64 hex>
        # via vllm
    ...

The fingerprint is :func:`pkgnames.set_fingerprint` of every pin, so a lock
whose pins were edited after it was made is refused, and a host's
environment (read on the host with the same function) can be compared with
the lock by one value.

Public API:

* :func:`render_lock` -- the lock text from its meta values and uv's output;
* :func:`parse_lock` -- a lock's meta, pins and fingerprint; anything that
  is not exactly ``name==version`` with sha256 hashes is refused
  (:class:`LockError`, naming the line);
* :func:`check_target` -- why a lock does not fit a host (Python, CPU
  architecture, glibc);
* :func:`dependency_diff` and :func:`diff_lines` -- what changes between
  two environments, in lines an operator reads in ten seconds;
* :func:`fetch_names`, :func:`requirements_of` and :func:`hash_mismatch` --
  which of a lock's wheels an install into an existing environment needs
  (fetched and checked before a unit is stopped), as a requirements file,
  and what uv said when one of them did not have the lock's hash.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import re

from ansible_collections.gpufleet.vllm.plugins.module_utils import pkgnames
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import control_character, shown

MAGIC = "# gpufleet.vllm lock v2"
#: header keys, in the order they are written, and the meta key each becomes
HEADER_KEYS = (
    ("python-version", "python_version"),
    ("python-platform", "python_platform"),
    ("package", "package"),
    ("sources", "sources"),
    ("excluded", "excluded"),
    ("resolved-at", "resolved_at"),
    ("resolver", "resolver"),
    ("fingerprint", "fingerprint"),
)
#: the last line of a lock: the digest of its header and of every pin with its hashes (a trailer, so the body's
#: lines keep their numbers)
DIGEST_PREFIX = "# digest: "
_META_OF = dict(HEADER_KEYS)
_KNOWN_KEYS = ", ".join(key for key, _meta in HEADER_KEYS)

#: the largest lock read (a whole vLLM environment with every platform's hashes is well under 1 MiB)
MAX_BYTES = 4 * 1024 * 1024
MAX_LINES = 100000
MAX_LINE = 4096
#: the most hashes of one pin (uv writes one a line; a release with a wheel for every platform has a few dozen)
MAX_HASHES = 1024
MAX_PACKAGES = 5000
MAX_SOURCES = 2000

_HEADER_LINE = re.compile(r"# ([a-z][a-z-]{0,40}): (.*)\Z")
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^=<>!~\s]+)\Z")
_HASH = re.compile(r"--hash=sha256:([0-9a-fA-F]{64})\Z")
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}\Z")
_PYTHON = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}\Z")
_PLATFORM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\Z")
_RESOLVED_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")
_RESOLVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.+()-]{0,99}\Z")
_BLANKS = re.compile(r"[ \t]+")
_ODD_SPACE = re.compile(u"[^\\S \t]")
_INLINE_COMMENT = re.compile(r"(^|\s)#.*\Z")

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
_OLD_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


class LockError(Exception):
    """A lock that cannot be used; str() is the sentence for the operator."""


# --- reading ---------------------------------------------------------------------------------------------------

def _decode(text, where):
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise LockError("%s is %d bytes, more than the %d MiB a lock may have; it is not a lock this "
                            "collection wrote." % (where, len(text), MAX_BYTES // (1024 * 1024)))
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = text[:exc.start].count(b"\n") + 1
            raise LockError("%s, line %d: is not UTF-8 text (byte %d); a lock is a text file as uv writes it."
                            % (where, line, exc.start))
    if not isinstance(text, str):
        raise LockError("%s is not text (a %s)." % (where, type(text).__name__))
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise LockError("%s is not UTF-8 text (it holds characters that cannot be written as UTF-8)." % (where,))
    if size > MAX_BYTES:
        raise LockError("%s is %d bytes, more than the %d MiB a lock may have; it is not a lock this "
                        "collection wrote." % (where, size, MAX_BYTES // (1024 * 1024)))
    return text


def _lines(text, where):
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_LINES:
        raise LockError("%s has %d lines, more than the %d a lock may have." % (where, len(lines), MAX_LINES))
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise LockError("%s, line %d: is %d characters long, more than the %d a lock line may have."
                            % (where, number, len(line), MAX_LINE))
        found = control_character(line)
        if found is not None:
            raise LockError("%s, line %d: holds a control character (U+%04X) at character %d: %s; a lock is plain "
                            "text with Unix line ends." % (where, number, ord(found[1]), found[0] + 1, shown(line)))
    return lines


def _meta_value(key, value, where, number=None):
    """The meta value of header KEY, checked; LockError when it is not what the collection writes."""
    at = "%s, line %d" % (where, number) if number else where
    value = value.strip() if isinstance(value, str) else value
    if key == "python_version":
        if not isinstance(value, str) or not _PYTHON.match(value):
            raise LockError("%s: python-version %s is not a Python version such as 3.12." % (at, shown(str(value))))
    elif key == "python_platform":
        if not isinstance(value, str) or not _PLATFORM.match(value):
            raise LockError("%s: python-platform %s is not a uv platform such as x86_64-manylinux_2_28."
                            % (at, shown(str(value))))
    elif key == "package":
        if not isinstance(value, str) or not _pin(value):
            raise LockError("%s: package %s is not name==version." % (at, shown(str(value))))
    elif key == "sources":
        if not isinstance(value, str) or not value or len(value) > MAX_SOURCES:
            raise LockError("%s: sources must be one line of at most %d characters." % (at, MAX_SOURCES))
    elif key == "excluded":
        if isinstance(value, str):
            value = [] if value == "none" else [v.strip() for v in value.split(",")]
        if not isinstance(value, (list, tuple)) or not all(pkgnames.valid_name(v) for v in value):
            raise LockError("%s: excluded %s is not 'none' or a comma-separated list of package names."
                            % (at, shown(str(value))))
        value = sorted(set(pkgnames.canonical_name(v) for v in value))
    elif key == "resolved_at":
        if not isinstance(value, str) or not _RESOLVED_AT.match(value):
            raise LockError("%s: resolved-at %s is not a UTC time such as 2026-12-05T13:47:43Z."
                            % (at, shown(str(value))))
    elif key == "resolver":
        if not isinstance(value, str) or not _RESOLVER.match(value):
            raise LockError("%s: resolver %s is not a tool and version such as 'uv 0.13.9'." % (at, shown(str(value))))
    elif key in ("fingerprint", "digest"):
        if not isinstance(value, str) or not _FINGERPRINT.match(value):
            raise LockError("%s: %s %s is not sha256:<64 hex digits>." % (at, key, shown(str(value))))
    return value


def _pin(text):
    """(canonical name, canonical version, name as written) of 'name==version', or None."""
    match = _PIN.match(text)
    if not match or not pkgnames.valid_name(match.group(1)):
        return None
    version = pkgnames.canonical_version(match.group(2))
    if version is None:
        return None
    return pkgnames.canonical_name(match.group(1)), version, match.group(1)


def _requirement(parts, where):
    """One requirement, PARTS its physical lines [(number, text)] -> (canonical name, {name, version, hashes})."""
    number = parts[0][0]
    at = "%s, line %d" % (where, number)
    text = " ".join(part for _n, part in parts).strip()
    odd = [part for _n, part in parts if _ODD_SPACE.search(part)]
    if odd:
        # (str.split() takes a no-break space for a blank; uv does not, and would refuse the line on every host)
        raise LockError("%s: %s holds a space that is not an ASCII blank or tab (a no-break or other Unicode space); "
                        "uv cannot read it." % (at, shown(odd[0])))
    words = [(word, n) for n, part in parts for word in _BLANKS.split(part) if word]
    if words[0][0].startswith("-"):
        raise LockError("%s: %s is an option line; a lock holds only name==version lines with hashes (no -e, -r, "
                        "-c, --index-url, --extra-index-url, -f or other option)." % (at, shown(text)))
    if "@" in text:
        raise LockError("%s: %s is a URL or path requirement; a lock pins name==version from an index, with "
                        "hashes." % (at, shown(text)))
    if ";" in text:
        raise LockError("%s: %s carries an environment marker; a lock is for one platform and Python and "
                        "holds none." % (at, shown(text)))
    if "[" in text:
        raise LockError("%s: %s names extras; a lock lists every distribution on its own line, without extras."
                        % (at, shown(text)))
    first = words[0][0]
    pin = _pin(first)
    if pin is None:
        raise LockError("%s: %s is not name==version (an exact PEP 440 version)." % (at, shown(first)))
    hashes = []
    seen = set()
    for word, line in words[1:]:
        match = _HASH.match(word)
        if not match:
            raise LockError("%s, line %d: %s after %s is not --hash=sha256:<64 hex digits>."
                            % (where, line, shown(word), first))
        digest = "sha256:" + match.group(1).lower()
        if digest not in seen:
            seen.add(digest)
            hashes.append(digest)
            if len(hashes) > MAX_HASHES:
                # (refused at the first hash past the bound, before the rest is read)
                raise LockError("%s, line %d: %s has more than %d hashes, the most a pin may have (a wheel for "
                                "every platform and Python of a release is a few dozen)."
                                % (where, line, first, MAX_HASHES))
    if not hashes:
        raise LockError("%s: %s has no --hash=sha256:... ; every pin of a lock carries the hashes of its files."
                        % (at, first))
    return pin[0], {"name": pin[0], "version": pin[1], "hashes": hashes}


def _body(lines, first, where):
    """The pins of requirement LINES (numbered from FIRST) -> {canonical name: {name, version, hashes}}."""
    packages = {}
    seen_at = {}
    pending = None
    for number, line in enumerate(lines, first):
        stripped = line.strip()
        if pending is None and (not stripped or stripped.startswith("#")):
            continue
        if pending is not None and stripped.startswith("#"):
            raise LockError("%s, line %d: a comment inside the requirement that starts on line %d."
                            % (where, number, pending[0][0]))
        part = _INLINE_COMMENT.sub("", line).strip()
        continued = part.endswith("\\")
        if continued:
            part = part[:-1]
        if pending is None:
            pending = []
        # (appended in place: a requirement continued over many lines costs each line once)
        pending.append((number, part))
        if continued:
            if len(pending) > MAX_HASHES + 1:
                # (uv writes the pin and then one hash per line: past the bound it cannot be one of its pins)
                words = pending[0][1].split()
                raise LockError("%s, line %d: %s, the requirement that starts on line %d, goes on for more than %d "
                                "lines; a pin may have at most %d hashes, one a line." % (
                                    where, number, shown(words[0] if words else ""), pending[0][0], MAX_HASHES + 1,
                                    MAX_HASHES))
            continue
        if any(p for _n, p in pending):
            start = pending[0][0]
            name, pin = _requirement(pending, where)
            if name in packages:
                raise LockError("%s, line %d: %s is pinned a second time (first on line %d)."
                                % (where, start, name, seen_at[name]))
            if len(packages) >= MAX_PACKAGES:
                raise LockError("%s, line %d: more than %d pins." % (where, start, MAX_PACKAGES))
            packages[name] = pin
            seen_at[name] = start
        pending = None
    if pending is not None:
        raise LockError("%s, line %d: the file ends in the middle of the requirement that starts there (a line "
                        "ending in a backslash)." % (where, pending[0][0]))
    if not packages:
        raise LockError("%s holds no pinned requirement at all." % (where,))
    return packages


def digest_of(packages, header=()):
    """sha256:<hex> of the HEADER lines (as written, the first line included) and of every pin WITH its hashes
    (sorted ``name==version sha256:... sha256:...`` lines): what the fingerprint (names and versions only, which a
    host can compute too) does not cover. A lock whose header (its Python, its platform, its sources) or hashes
    were changed after it was made no longer matches it."""
    lines = sorted("%s==%s %s" % (name, pin["version"], " ".join(sorted(pin["hashes"])))
                   for name, pin in packages.items())
    return "sha256:" + hashlib.sha256("".join(line + "\n" for line in list(header) + lines).encode("utf-8")).hexdigest()


def fingerprint_of(packages):
    """pkgnames.set_fingerprint of the pins {name: {version}}."""
    return pkgnames.set_fingerprint((name, pin["version"]) for name, pin in packages.items())


def parse_lock(text, where="the lock"):
    """A lock's content: {meta, packages: {canonical name: {name, version, hashes}}, fingerprint,
    package: {name, version}}; LockError, naming the line, for anything this collection did not write."""
    lines = _lines(_decode(text, where), where)
    if not lines or lines[0] != MAGIC:
        first = lines[0] if lines else ""
        if first.startswith("# gpufleet.vllm lock v"):
            raise LockError("%s, line 1: %s is a lock format this collection does not know (it reads %r)."
                            % (where, shown(first), MAGIC))
        raise LockError("%s, line 1: missing header: a lock starts with %r (this is %s)."
                        % (where, MAGIC, shown(first) if first else "an empty file"))
    meta = {}
    number = 1
    for number, line in enumerate(lines[1:], 2):
        match = _HEADER_LINE.match(line)
        if not match:
            if line.startswith("# ") and re.match(r"# [A-Za-z][A-Za-z0-9_ -]{0,40}:", line):
                raise LockError("%s, line %d: %s is not a header line this collection writes (%s)."
                                % (where, number, shown(line), _KNOWN_KEYS))
            break
        key = match.group(1)
        if key not in _META_OF:
            raise LockError("%s, line %d: unknown header key %r (known: %s)."
                            % (where, number, key, _KNOWN_KEYS))
        if _META_OF[key] in meta:
            raise LockError("%s, line %d: header key %r is given twice." % (where, number, key))
        meta[_META_OF[key]] = _meta_value(_META_OF[key], match.group(2), where, number)
    else:
        number = len(lines) + 1
    missing = [key for key, name in HEADER_KEYS if name not in meta]
    if missing:
        raise LockError("%s: the header lacks %s; it was not written by this collection or was cut."
                        % (where, ", ".join(missing)))
    packages = _body(lines[number - 1:], number, where)
    fingerprint = fingerprint_of(packages)
    if fingerprint != meta["fingerprint"]:
        raise LockError("%s: its pins do not match its fingerprint (header %s, pins %s): it was edited after it "
                        "was made. Make a new lock rather than editing one."
                        % (where, pkgnames.short_fingerprint(meta["fingerprint"]),
                           pkgnames.short_fingerprint(fingerprint)))
    trailers = [(n, line) for n, line in enumerate(lines, 1) if line.startswith(DIGEST_PREFIX)]
    if len(trailers) != 1:
        raise LockError("%s: %s, where a lock ends in one line %s<sha256:...> (the digest of its header and of every pin with its hashes); "
                        "it was not written by this collection or was cut." % (
                            where, "it has no digest line" if not trailers else "it has %d digest lines" % len(trailers),
                            DIGEST_PREFIX))
    meta["digest"] = _meta_value("digest", trailers[0][1][len(DIGEST_PREFIX):], where, trailers[0][0])
    name, version, _written = _pin(meta["package"])
    pinned = packages.get(name)
    if pinned is None:
        raise LockError("%s: the package of its header, %s, is not among its pins." % (where, meta["package"]))
    if pinned["version"] != version:
        raise LockError("%s: the header names %s but the pin is %s==%s."
                        % (where, meta["package"], name, pinned["version"]))
    digest = digest_of(packages, lines[:number - 1])
    if digest != meta["digest"]:
        raise LockError("%s: its header or hashes do not match its digest (digest line %s, content %s): its Python, "
                        "platform, sources or a wheel's hash was changed after it was made. Make a new lock rather "
                        "than editing one."
                        % (where, pkgnames.short_fingerprint(meta["digest"]), pkgnames.short_fingerprint(digest)))
    return {"meta": meta, "packages": packages, "fingerprint": fingerprint,
            "package": {"name": name, "version": version}}


def versions(parsed):
    """{canonical name: canonical version} of a parsed lock (what a host must hold)."""
    return dict((name, pin["version"]) for name, pin in parsed["packages"].items())


# --- writing ---------------------------------------------------------------------------------------------------

def render_lock(meta, body, where="the resolution"):
    """The lock text: the header of META (python_version, python_platform, package, sources, excluded,
    resolved_at, resolver) over BODY, uv's ``--generate-hashes`` output. The fingerprint is computed from
    BODY's pins; META's package may be a bare name, then its pinned version is filled in. The text is read
    back with :func:`parse_lock` before it is returned, so it is never one this collection would refuse."""
    if not isinstance(body, str):
        raise LockError("%s is not text." % (where,))
    lines = _lines(_decode(body, where), where)
    packages = _body(lines, 1, where)
    values = dict(meta)
    package = values.get("package")
    if isinstance(package, str) and "==" not in package and pkgnames.valid_name(package.strip()):
        pin = packages.get(pkgnames.canonical_name(package.strip()))
        if pin is None:
            raise LockError("%s does not hold %s itself." % (where, package.strip()))
        values["package"] = "%s==%s" % (pin["name"], pin["version"])
    values["fingerprint"] = fingerprint_of(packages)
    header = [MAGIC]
    for key, name in HEADER_KEYS:
        if values.get(name) in (None, "") and name != "excluded":
            raise LockError("the lock's %s is not given." % (key,))
        value = _meta_value(name, values.get(name) or ([] if name == "excluded" else ""), "the lock's header")
        if name == "excluded":
            value = ", ".join(value) if value else "none"
        if control_character(value):
            raise LockError("the lock's %s holds a control character." % (key,))
        header.append("# %s: %s" % (key, value))
    body_lines = [line for line in lines if not line.startswith(DIGEST_PREFIX)]
    text = "\n".join(header + body_lines + [DIGEST_PREFIX + digest_of(packages, header)]) + "\n"
    parse_lock(text, where)
    return text


# --- fitting a host --------------------------------------------------------------------------------------------

def platform_target(platform):
    """(os, arch, libc, glibc level tuple or None) of a uv --python-platform value; os None when not known."""
    value = (platform or "").strip().lower()
    if value == "linux":
        return "linux", "x86_64", "glibc", (2, 17)
    if value in ("windows", "macos"):
        return value, None, None, None
    arch, _sep, rest = value.partition("-")
    arch = _ARCH_ALIASES.get(arch, arch)
    match = re.match(r"manylinux_([0-9]+)_([0-9]+)\Z", rest)
    if match:
        return "linux", arch, "glibc", (int(match.group(1)), int(match.group(2)))
    if rest in _OLD_MANYLINUX:
        return "linux", arch, "glibc", _OLD_MANYLINUX[rest]
    if rest == "unknown-linux-gnu":
        return "linux", arch, "glibc", (2, 17)
    if rest.startswith("unknown-linux-musl") or rest.startswith("musllinux"):
        return "linux", arch, "musl", None
    if rest.endswith("apple-darwin"):
        return "macos", arch, None, None
    if rest.endswith("windows-msvc"):
        return "windows", arch, None, None
    return None, arch or None, None, None


def _level(glibc):
    """(major, minor) of '2.36', 'glibc 2.36', ('glibc', '2.36') or (2, 36); None when unknown."""
    if isinstance(glibc, (tuple, list)):
        glibc = " ".join(str(g) for g in glibc)
    match = re.search(r"([0-9]+)\.([0-9]+)", str(glibc or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_target(meta, python_version, machine, glibc):
    """Why a lock (its META) does not fit a host with PYTHON_VERSION (3.12 or 3.12.3), MACHINE (x86_64,
    aarch64) and GLIBC ('2.36'); a list of sentences, empty when it fits. A host value that is empty is not
    checked."""
    problems = []
    want_python = str(meta.get("python_version") or "")
    platform = str(meta.get("python_platform") or "")
    have_python = ".".join(str(python_version or "").strip().split(".")[:2])
    if have_python and want_python and have_python != want_python:
        problems.append("the lock is for Python %s, this host's environment runs Python %s"
                        % (want_python, have_python))
    system, arch, libc, level = platform_target(platform)
    have_arch = str(machine or "").strip().lower()
    have_arch = _ARCH_ALIASES.get(have_arch, have_arch)
    if system is None:
        problems.append("the lock's platform %r is not one this collection can check against a Linux host"
                        % (platform,))
    elif system != "linux":
        problems.append("the lock is for %s (%s), not for Linux" % ({"macos": "macOS"}.get(system, "Windows"),
                                                                    platform))
    elif libc == "musl" and _level(glibc):
        problems.append("the lock is for musl Linux (%s), this host has glibc" % (platform,))
    if have_arch and arch and arch != have_arch:
        problems.append("the lock is for %s (%s), this host is %s" % (arch, platform, have_arch))
    have_level = _level(glibc)
    if level and have_level and level > have_level:
        problems.append("the lock needs glibc %d.%d or newer (%s), this host has glibc %d.%d"
                        % (level + (platform,) + have_level))
    return problems


# --- what changes ----------------------------------------------------------------------------------------------

def without_credentials(text):
    """TEXT (a source, a URL) with any user:password@ after the scheme replaced by ***@."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", str(text))


def _entries(environment):
    """{canonical name: (version, source without credentials, name)} of {name: {version, source}}."""
    found = {}
    for name, value in (environment or {}).items():
        value = value if isinstance(value, dict) else {"version": value}
        version = str(value.get("version") or "")
        found[pkgnames.canonical_name(str(name))] = (pkgnames.canonical_version(version) or version,
                                                     without_credentials(value.get("source") or "index"),
                                                     pkgnames.canonical_name(str(name)))
    return found


def dependency_diff(before, after):
    """What changes from BEFORE to AFTER, each {name: {"version": v, "source": s}} (source "index" when
    missing; names and versions compared in their canonical spelling):
    {added [{name, version}], removed [{name, version}], changed [{name, old, new}],
    source_changed [{name, old, new, version}], unchanged (count), counts (text)}, each list sorted by name.
    A distribution whose version and source both change is in changed and in source_changed."""
    old = _entries(before)
    new = _entries(after)
    added = [{"name": n, "version": new[n][0]} for n in sorted(set(new) - set(old))]
    removed = [{"name": n, "version": old[n][0]} for n in sorted(set(old) - set(new))]
    changed = []
    source_changed = []
    unchanged = 0
    for name in sorted(set(old) & set(new)):
        (old_version, old_source, _n), (new_version, new_source, _m) = old[name], new[name]
        if old_version != new_version:
            changed.append({"name": name, "old": old_version, "new": new_version})
        if old_source != new_source:
            source_changed.append({"name": name, "old": old_source, "new": new_source, "version": new_version})
        if old_version == new_version and old_source == new_source:
            unchanged += 1
    parts = ["%d %s" % (len(items), word) for items, word in
             ((changed, "changed"), (added, "added"), (removed, "removed"), (source_changed, "source changed"))
             if items]
    counts = ("%s (%d unchanged)" % (", ".join(parts), unchanged)) if parts else \
        "no change (%d unchanged)" % unchanged
    return {"added": added, "removed": removed, "changed": changed, "source_changed": source_changed,
            "unchanged": unchanged, "counts": counts}


def _source(text, limit=80):
    """A source for a line: credentials hidden, control characters escaped, cut to LIMIT characters."""
    text = without_credentials(text)
    if control_character(text):
        text = shown(text, limit)[1:-1]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def diff_lines(diff, limit=20):
    """Short lines of DIFF (from :func:`dependency_diff`): 'lark 1.2.2 -> 1.3.1', '+ gguf 0.17.1',
    '- foo 1.0', 'gguf: git+https://...@abc -> index'; at most LIMIT of them, the last saying how many more
    when there are."""
    lines = ["%s %s -> %s" % (c["name"], c["old"], c["new"]) for c in diff.get("changed", ())]
    lines += ["+ %s %s" % (a["name"], a["version"]) for a in diff.get("added", ())]
    lines += ["- %s %s" % (r["name"], r["version"]) for r in diff.get("removed", ())]
    lines += ["%s: %s -> %s" % (s["name"], _source(s["old"]), _source(s["new"])) for s in diff.get("source_changed", ())]
    limit = max(1, int(limit))
    if len(lines) > limit:
        more = len(lines) - (limit - 1)
        lines = lines[:limit - 1] + ["... and %d more" % more]
    return lines


# --- fetching before a stop ------------------------------------------------------------------------------------

#: a line of ``uv pip sync --dry-run`` (or of the install itself) naming a distribution it installs:
#: `` + name==version`` (``~`` when it reinstalls the same version)
_PLANNED = re.compile(r"\s*[+~] ([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*\Z")
_MISMATCH = re.compile(r"Hash mismatch for `([A-Za-z0-9][A-Za-z0-9._-]*)==([^`\s]+)`")
_DIGEST = re.compile(r"\s*(sha256:[0-9a-fA-F]{64})\s*\Z")
#: the most of uv's output read for its plan or its error (its plan for a whole environment is well under this)
MAX_OUTPUT = 1024 * 1024


def planned_installs(output):
    """The canonical names uv's OUTPUT (``uv pip sync --dry-run``'s lines, stdout and stderr together) says it
    installs, sorted; names it removes (``- name==version``) are not among them."""
    found = set()
    for line in str(output or "")[:MAX_OUTPUT].splitlines():
        match = _PLANNED.match(line)
        if match and pkgnames.valid_name(match.group(1)):
            found.add(pkgnames.canonical_name(match.group(1)))
    return sorted(found)


def _reinstalled(args):
    """(everything, names) of uv's reinstall options ARGS: --reinstall; --reinstall-package NAME, --reinstall-package=NAME."""
    everything, names = False, set()
    args = [str(a) for a in (args or ())]
    for number, arg in enumerate(args):
        if arg == "--reinstall":
            everything = True
        elif arg.startswith("--reinstall-package="):
            names.add(arg[len("--reinstall-package="):])
        elif arg == "--reinstall-package" and number + 1 < len(args):
            names.add(args[number + 1])
    return everything, set(pkgnames.canonical_name(n) for n in names if pkgnames.valid_name(n))


def fetch_names(parsed, planned=(), current=None, reinstall=()):
    """The canonical names of the pins of PARSED (:func:`parse_lock`) that ``uv pip sync`` of the lock installs into
    an existing environment, sorted: those PLANNED (:func:`planned_installs` of its dry run), those CURRENT (an
    ``env_fingerprint_info`` result against the lock: its ``missing`` and ``different``) does not hold at the lock's
    version, and those REINSTALL (uv's reinstall options) names, every pin with ``--reinstall``. A name the lock does
    not pin is not among them (the install takes nothing else)."""
    pins = parsed["packages"]
    names = set(pkgnames.canonical_name(str(n)) for n in planned or () if pkgnames.valid_name(str(n)))
    if isinstance(current, dict) and not current.get("skipped"):
        for key in ("missing", "different"):
            for item in current.get(key) or ():
                if isinstance(item, dict) and pkgnames.valid_name(str(item.get("name") or "")):
                    names.add(pkgnames.canonical_name(str(item["name"])))
    everything, named = _reinstalled(reinstall)
    if everything:
        return sorted(pins)
    return sorted((names | named) & set(pins))


def requirements_of(parsed, names):
    """The requirements text of the pins NAMES of PARSED, each ``name==version`` with every sha256 hash of the lock
    (what ``uv pip install --require-hashes --no-deps -r`` reads); a name the lock does not pin is a LockError."""
    lines = []
    for name in sorted(set(pkgnames.canonical_name(str(n)) for n in names)):
        pin = parsed["packages"].get(name)
        if pin is None:
            raise LockError("the lock does not pin %s." % (shown(name),))
        lines.append("%s==%s \\" % (pin["name"], pin["version"]))
        lines.extend("    --hash=%s%s" % (digest, " \\" if n + 1 < len(pin["hashes"]) else "")
                     for n, digest in enumerate(pin["hashes"]))
    return "".join(line + "\n" for line in lines)


def hash_mismatch(output):
    """What uv's OUTPUT says of the first wheel whose hash is not the lock's ('Hash mismatch for `name==version`'
    with its Expected: and Computed: digests): {name, version, expected [sha256:...], computed [sha256:...]}, or
    None when it says no such thing."""
    text = str(output or "")[:MAX_OUTPUT]
    match = _MISMATCH.search(text)
    if not match or not pkgnames.valid_name(match.group(1)):
        return None
    found = {"name": pkgnames.canonical_name(match.group(1)), "version": match.group(2)[:100],
             "expected": [], "computed": []}
    section = None
    for line in text[match.end():].splitlines():
        label = line.strip()
        if label in ("Expected:", "Computed:"):
            section = label[:-1].lower()
        elif _DIGEST.match(line) and section:
            found[section].append(label.lower())
        elif label and section:
            break
    return found
