# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fingerprint of a Python environment: every installed distribution, where it came from, and whether its
files are still the ones its installer recorded.

:func:`fingerprint_environment` lists the ``*.dist-info`` (and ``*.egg-info``)
entries of an :class:`environment.Environment`'s site directories (never
following a link, at most :data:`MAX_DISTRIBUTIONS`), reads each one's
METADATA ``Name`` and ``Version``, ``INSTALLER`` and ``direct_url.json``
(each read bounded), and turns the set of (name, version) pairs into one
:func:`pkgnames.set_fingerprint`, the same digest the control node computes
for a lock.  With ``verify``, every file each RECORD lists is checked against
its size and hash by the machinery of :mod:`integrity` (:class:`integrity.
RecordPaths` per distribution, one :class:`filecheck.Hasher` pool for all of
them, largest files first, stopped at the deadline): a distribution is
pristine when every row is ok.  :func:`compare` holds the result against an
expected set (a lock's name -> version) and an expected fingerprint.

Anything odd about an entry (a linked metadata directory, two of them for one
name, METADATA that cannot be read, a malformed ``direct_url.json``, an
editable install, no RECORD) is a ``problem``: the entry stays in the
fingerprint (Python sees it) and is never pristine.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import json
import os
import re
import time
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ansible_collections.gpufleet.vllm.plugins.module_utils.environment import (
    PROBE_TIMEOUT,
    locate_environment,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.filecheck import (
    OK,
    SMALL,
    Deadline,
    Hasher,
    default_workers,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import (
    CLASSES,
    DRIFT_CLASSES,
    RecordPaths,
    clean_strings,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import (
    canonical_name,
    canonical_version,
    not_accepted,
    set_fingerprint,
    valid_name,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import (
    RECORD_LIMIT,
    IntegrityError,
    editable_reason,
    read_record,
    read_regular,
    safe_text,
)

#: The most metadata entries (``.dist-info``, ``.egg-info``) one environment may hold; a real vLLM environment
#: has about 200.  More fails the check, naming the directory.
MAX_DISTRIBUTIONS = 10000
#: The most directory entries read from one site directory (a real one has a few hundred).
MAX_SITE_ENTRIES = 200000
#: How much of METADATA is read: its header (Name, Version) comes first; the description after it is not needed.
METADATA_LIMIT = 256 << 10
#: The largest direct_url.json read (a real one is a few hundred bytes).
DIRECT_URL_LIMIT = 64 << 10
#: The largest INSTALLER read.
INSTALLER_LIMIT = 200
#: The most RECORD bytes read for the whole environment (vLLM with all its dependencies: about 9 MB).
TOTAL_RECORD_LIMIT = 512 << 20
#: The longest URL or path kept in a source.
SOURCE_MAX = 1000
#: Query keys whose values are secrets (signed URLs, tokens): their values are replaced.
_SECRET_KEY = re.compile(r"token|secret|passw|signature|credential|key|auth|sig\Z", re.I)
#: Files per distribution named in its not-pristine reason.
_FIRST = 3


# ---------------------------------------------------------------------------
# Reading one metadata entry
# ---------------------------------------------------------------------------

def _read(path, limit):
    """(bytes or None, problem or None): up to ``limit`` bytes, never through a link; None when absent."""
    try:
        return read_regular(path, limit + 1), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            return None, "%s is a symbolic link; not followed" % os.path.basename(path)
        return None, "%s cannot be read (%s)" % (os.path.basename(path), exc.strerror or exc)


def metadata_header(data, truncated):
    """The Name and Version of a METADATA or PKG-INFO header (the lines before the first empty one).
    A header cut by the read limit ignores its last, partial line."""
    name = version = None
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    if truncated:
        lines = lines[:-1]
    for line in lines:
        line = line.rstrip("\r")
        if not line.strip():
            break
        if line[0] in " \t":
            continue            # the continuation of a multi-line field (a description), never Name or Version
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "name" and name is None:
            name = value.strip()
        elif key == "version" and version is None:
            version = value.strip()
        if name is not None and version is not None:
            break
    return name, version


def strip_credentials(url):
    """``url`` without its user and password (``https://user:token@host/`` -> ``https://host/``) and with the
    values of secret-looking query keys (``token``, ``X-Amz-Signature``, ...) replaced, at most
    :data:`SOURCE_MAX` characters."""
    if not isinstance(url, str):
        return ""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(_SECRET_KEY.search(k) for k, v in pairs):
                query = urlencode([(k, "REDACTED" if _SECRET_KEY.search(k) else v) for k, v in pairs])
        path = parts.path
        if not parts.scheme and not netloc and "@" in path.split("/", 1)[0]:
            # scp-like git@host:org/repo.git
            path = path.split("@", 1)[1]
        url = urlunsplit((parts.scheme, netloc, path, query, parts.fragment))
    except ValueError:
        url = re.sub(r"//[^/@]*@", "//", url)
    return url[:SOURCE_MAX]


def source_of(data):
    """(source, editable, problem) from the bytes of a direct_url.json (None: installed from an index)."""
    if data is None:
        return "index", False, None
    if len(data) > DIRECT_URL_LIMIT:
        return "unknown", False, "direct_url.json is larger than %d bytes; not read" % DIRECT_URL_LIMIT
    try:
        info = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return "unknown", False, "direct_url.json is not valid JSON (%s)" % str(exc)[:120]
    if not isinstance(info, dict) or not isinstance(info.get("url"), str) or not info["url"]:
        return "unknown", False, "direct_url.json has no url"
    url = strip_credentials(info["url"])
    vcs = info.get("vcs_info")
    if isinstance(vcs, dict):
        kind = vcs.get("vcs")
        commit = vcs.get("commit_id")
        if not isinstance(kind, str) or not re.match(r"[a-z]{2,10}\Z", kind) or not isinstance(commit, str) or not commit:
            return "unknown", False, "direct_url.json's vcs_info has no vcs or commit_id"
        prefix = "" if url.startswith(kind + "+") else kind + "+"
        return "%s%s@%s" % (prefix, url, commit[:100]), False, None
    folder = info.get("dir_info")
    if isinstance(folder, dict):
        editable = folder.get("editable") is True
        path = unquote(url[len("file://"):]) if url.startswith("file://") else url
        return "%s:%s" % ("editable" if editable else "dir", path[:SOURCE_MAX]), editable, None
    if isinstance(info.get("archive_info"), dict):
        return "url:" + url, False, None
    return "unknown", False, "direct_url.json has none of vcs_info, dir_info, archive_info"


def _parse_entry_name(entry):
    """(kind, name, version) of a metadata entry's file name, or None."""
    for suffix, kind in ((".dist-info", "dist-info"), (".egg-info", "egg-info"), (".egg-link", "egg-link")):
        if entry.endswith(suffix) and len(entry) > len(suffix):
            stem = entry[:-len(suffix)]
            if kind == "egg-link":
                return kind, stem, None
            name, sep, rest = stem.partition("-")
            return kind, name, (rest.split("-", 1)[0] if sep else None)
    return None


class _Dist:
    """One metadata entry and what is known of it."""

    __slots__ = ("site", "entry", "path", "kind", "name", "version", "raw_version", "installer", "source",
                 "problems", "check", "verified", "rows")

    def __init__(self, site, entry, kind):
        self.site = site
        self.entry = entry
        self.path = os.path.join(site, entry)
        self.kind = kind
        self.name = None
        self.version = None
        self.raw_version = None
        self.installer = None
        self.source = None
        self.problems = []
        self.check = None
        self.verified = False
        self.rows = 0

    def problem(self, text):
        self.problems.append(text)


def _read_entry(dist, dir_name, dir_version):
    """Fill in a dist-info or egg-info entry from its files."""
    if dist.kind == "dist-info":
        meta_file = os.path.join(dist.path, "METADATA")
    elif os.path.isdir(dist.path):
        meta_file = os.path.join(dist.path, "PKG-INFO")
    else:
        meta_file = dist.path          # an egg-info file is the PKG-INFO itself
    name = version = None
    data, problem = _read(meta_file, METADATA_LIMIT)
    if problem:
        dist.problem(problem)
    elif data is None:
        dist.problem("%s is missing" % os.path.basename(meta_file))
    else:
        name, version = metadata_header(data[:METADATA_LIMIT], len(data) > METADATA_LIMIT)
        if not name or not version:
            dist.problem("%s gives no %s in its header%s" % (
                os.path.basename(meta_file), "Name" if not name else "Version",
                " (first %d bytes read)" % METADATA_LIMIT if len(data) > METADATA_LIMIT else ""))
    if name and dir_name and canonical_name(name) != canonical_name(dir_name):
        dist.problem("METADATA names %s but the directory is %s" % (shown(name), shown(dist.entry)))
    elif canonical_version(version or "") and canonical_version(dir_version or "") and \
            canonical_version(dir_version) != canonical_version(version):
        dist.problem("METADATA gives version %s but the directory is %s" % (shown(version), shown(dist.entry)))
    _settle_name(dist, name or dir_name, version or dir_version)
    if dist.kind != "dist-info":
        dist.source = "unknown"
        dist.problem("installed without a RECORD (.egg-info): there are no recorded hashes; reinstall it from a wheel")
        return
    installer, problem = _read(os.path.join(dist.path, "INSTALLER"), INSTALLER_LIMIT)
    if installer is not None:
        dist.installer = installer[:INSTALLER_LIMIT].decode("utf-8", "replace").strip() or None
    data, problem = _read(os.path.join(dist.path, "direct_url.json"), DIRECT_URL_LIMIT)
    if problem:
        dist.source = "unknown"
        dist.problem(problem)
        return
    dist.source, editable, problem = source_of(data)
    if problem:
        dist.problem(problem)
    if editable:
        dist.problem("it is an editable install (%s): its code lives in the source tree, not in site-packages"
                     % dist.source[len("editable:"):])


def _settle_name(dist, name, version):
    name = safe_text(name or "")
    version = safe_text(version or "")
    if not valid_name(name):
        dist.problem("%r is not a valid distribution name" % name[:100] if name else "no distribution name")
    dist.name = canonical_name(name)[:200] if name else "?"
    canonical = canonical_version(version) if version else None
    if version and canonical is None:
        dist.problem("version %r is not a PEP 440 version" % version[:100])
    dist.raw_version = version[:200] if version else None
    dist.version = canonical or (version[:200] if version else "?")


def list_distributions(site_dirs, deadline=None, max_distributions=None):
    """The metadata entries of ``site_dirs``: (list of :class:`_Dist`, problems of entries that are no
    distribution).  Raises :class:`IntegrityError` when the first site directory cannot be listed or a bound
    is passed."""
    deadline = deadline or Deadline()
    max_distributions = MAX_DISTRIBUTIONS if max_distributions is None else max_distributions
    dists = []
    loose = []
    seen_real = set()
    for number, site in enumerate(site_dirs):
        real = os.path.realpath(site)
        if real in seen_real:
            continue
        seen_real.add(real)
        try:
            scan = os.scandir(site)
        except OSError as exc:
            if number:
                continue
            raise IntegrityError("The site-packages directory %s cannot be listed (%s). Run the check as a user who "
                                 "can read it (become: true), or check the venv, python or site_packages option."
                                 % (site, exc.strerror or exc))
        entries = []
        with scan:
            for count, item in enumerate(scan, 1):
                if count > MAX_SITE_ENTRIES:
                    raise IntegrityError(
                        "More than %d entries in %s; stopped listing it. That is not a Python environment the "
                        "fingerprint can vouch for: look at what was added there." % (MAX_SITE_ENTRIES, site))
                parsed = _parse_entry_name(item.name)
                if parsed is None:
                    continue
                try:
                    link = item.is_symlink()
                    folder = item.is_dir(follow_symlinks=False)
                except OSError:
                    link = folder = False
                entries.append((item.name, parsed, link, folder))
        for name, parsed, link, folder in sorted(entries):
            kind, dir_name, dir_version = parsed
            path = os.path.join(site, name)
            if kind == "egg-link":
                loose.append({"name": canonical_name(safe_text(dir_name)), "path": path,
                              "problem": "an editable (develop) install: its code lives in the source tree; "
                                         "it has no version to put in the fingerprint"})
                continue
            if len(dists) >= max_distributions:
                raise IntegrityError(
                    "More than %d Python distributions are installed in %s; stopped listing them. That is not an "
                    "environment the fingerprint can vouch for: look at what was added there."
                    % (max_distributions, " and ".join(site_dirs)))
            dist = _Dist(site, name, kind)
            dists.append(dist)
            if link:
                try:
                    target = os.readlink(path)[:300]
                except OSError:
                    target = "?"
                dist.problem("%s is a symbolic link to %s; not followed" % (name, target))
                _settle_name(dist, dir_name, dir_version)
                dist.source = "unknown"
            elif kind == "dist-info" and not folder:
                dist.problem("%s is not a directory" % name)
                _settle_name(dist, dir_name, dir_version)
                dist.source = "unknown"
            else:
                _read_entry(dist, dir_name, dir_version)
            if not len(dists) % 64:
                deadline.check("reading the metadata of the installed distributions (%d so far)" % len(dists))
    by_name = {}
    for dist in dists:
        by_name.setdefault(dist.name, []).append(dist)
    for name, same in by_name.items():
        if len(same) > 1:
            for dist in same:
                others = [d.path for d in same if d is not dist]
                shown = ", ".join(others[:_FIRST]) + (" and %d more" % (len(others) - _FIRST) if len(others) > _FIRST else "")
                dist.problem("another metadata directory for %s is installed (%s); Python sees only one of them: "
                             "remove the stale one" % (name, shown))
    return dists, loose


# ---------------------------------------------------------------------------
# Verifying every distribution against its RECORD in one pool
# ---------------------------------------------------------------------------

class _Counts:
    """One distribution's files per class, its first offending files (what :class:`integrity.RecordPaths` and the
    hash results are added to), and the distributions that overwrote some of its files."""

    def __init__(self):
        self.counts = dict((c, 0) for c in CLASSES)
        self.offenders = []
        self.overwritten = {}

    def add(self, cls, item):
        self.counts[cls] += 1
        if cls in DRIFT_CLASSES and len(self.offenders) < _FIRST:
            self.offenders.append("%s (%s)" % (item.get("path", ""), cls.replace("_", " ")))

    def drift(self):
        return any(self.counts[c] for c in DRIFT_CLASSES) or bool(self.overwritten)


def verify_distributions(dists, environment, deadline, workers=None, record_limit=None):
    """Check every file of every verifiable distribution against its RECORD, in one :class:`Hasher` pool,
    largest files first.  Fills in each one's ``check``; raises :class:`IntegrityError` at the deadline."""
    record_limit = RECORD_LIMIT if record_limit is None else record_limit
    data_root = environment.root
    labels = []
    big = []
    small = []
    total_bytes = 0
    first_lister = {}   # full path -> index of the first job that checks it
    clashes = {}        # full path listed by more than one RECORD -> their job indexes
    for dist in dists:
        if dist.problems or dist.kind != "dist-info":
            continue
        deadline.check("reading RECORD files (%s)" % dist.entry)
        record_path = os.path.join(dist.path, "RECORD")
        try:
            total_bytes += os.lstat(record_path).st_size
        except OSError:
            pass
        if total_bytes > TOTAL_RECORD_LIMIT:
            raise IntegrityError(
                "The RECORD files of this environment hold more than %d bytes in all (at %s); stopped reading them. "
                "That is not an environment the fingerprint can vouch for." % (TOTAL_RECORD_LIMIT, dist.path))
        try:
            rows, malformed = read_record(record_path, record_limit)
        except FileNotFoundError:
            dist.problem("it has no RECORD file: there are no recorded hashes to verify against; reinstall it from a "
                         "wheel")
            continue
        except OSError as exc:
            dist.problem("its RECORD cannot be read (%s)" % (exc.strerror or exc))
            continue
        except IntegrityError as exc:
            dist.problem(str(exc))
            continue
        editable = editable_reason(dist.path, rows)
        if editable:
            dist.problem(editable)
            continue
        dist.check = _Counts()
        dist.verified = True
        dist.rows = len(rows)
        paths = RecordPaths(dist.check, dist.site, dist.path, environment, data_root=data_root)
        paths.add_malformed(malformed)
        classify = paths.classify
        for row in rows:
            found = classify(row)
            if found is None:
                continue
            job = (len(labels), found[1], row.size, row.algorithm, row.digest, False)
            shared = first_lister.setdefault(found[1], len(labels))
            if shared != len(labels):
                clashes.setdefault(found[1], [shared]).append(len(labels))
            labels.append((dist, found[0], found[1]))
            if row.size is not None and row.size <= SMALL and row.algorithm is not None:
                small.append(job)
            else:
                big.append(job)
    deadline.check("reading RECORD files")
    hasher = Hasher(workers or default_workers(), deadline)
    hasher.start(big)
    try:
        hasher.add_small(small)
    finally:
        hashed = hasher.finish()
    for index, res in hashed.items():
        dist, label, full = labels[index]
        if res is OK:
            dist.check.counts["ok"] += 1
            continue
        cls, detail, dummy = res
        if cls in ("modified", "size_differs") and full in clashes:
            # Two distributions install this file; the one installed last wrote it. When it matches that one's
            # RECORD, it is not an edit: say whose it is.
            owners = [labels[i][0] for i in clashes[full] if i != index and hashed.get(i) is OK]
            if owners:
                key = "%s %s" % (owners[0].name, owners[0].version)
                dist.check.overwritten[key] = dist.check.overwritten.get(key, 0) + 1
                continue
        item = {"path": label}
        if detail:
            item.update(detail)
        dist.check.add(cls, item)
    return len(labels)


def _reason(dist):
    if dist.problems:
        return "; ".join(dist.problems)
    counts = dist.check.counts
    reasons = []
    parts = ", ".join("%d %s" % (counts[c], c.replace("_", " ")) for c in DRIFT_CLASSES if counts.get(c))
    if parts:
        more = sum(counts[c] for c in DRIFT_CLASSES) > len(dist.check.offenders)
        reasons.append("%s (first: %s%s)" % (parts, ", ".join(sorted(dist.check.offenders)), ", ..." if more else ""))
    for other, count in sorted(dist.check.overwritten.items()):
        reasons.append("%d file%s overwritten by %s (they match its RECORD: both distributions install them and the "
                       "one installed last wins)" % (count, "" if count == 1 else "s", other))
    return "; ".join(reasons)


# ---------------------------------------------------------------------------
# Comparing with a lock
# ---------------------------------------------------------------------------

def normalize_expected(expected):
    """``expected`` (name -> version) in canonical spelling.  Raises ValueError, for the operator, on a version
    that is not text (YAML turns an unquoted 1.10 into the number 1.1) or two spellings of one name with two
    versions."""
    out = {}
    spelled = {}
    for name, version in (expected or {}).items():
        if not isinstance(name, str) or not valid_name(name):
            raise ValueError("expected holds %r, which is not a distribution name" % (name,))
        if not isinstance(version, str):
            raise ValueError("expected gives %s the %s %r as its version; give every version as text (quote it in "
                             "YAML: '1.10' stays 1.10, an unquoted 1.10 becomes the number 1.1)"
                             % (name, type(version).__name__, version))
        key = canonical_name(name)
        value = canonical_version(version) or version.strip()
        if key in out and out[key] != value:
            raise ValueError("expected gives %s twice with two versions (%s as %s, %s as %s)"
                             % (key, spelled[key], out[key], name, value))
        out[key] = value
        spelled[key] = name
    return out


def compare(found, expected, sources=None):
    """(missing, extra, different) between ``found`` (canonical name -> list of versions) and ``expected``
    (canonical name -> version), each sorted by name. ``sources`` (canonical name -> list of sources): a
    distribution at the expected version that was not installed from an index (a local build, a git checkout, a
    file; its direct_url.json says so) is different too: a lock pins index wheels by their hashes."""
    missing = [{"name": n, "version": v} for n, v in sorted(expected.items()) if n not in found]
    extra = []
    different = []
    for name in sorted(found):
        versions = found[name]
        if name not in expected:
            extra.extend({"name": name, "version": v} for v in versions)
        elif versions != [expected[name]]:
            different.append({"name": name, "expected": expected[name], "found": ", ".join(versions)})
        else:
            other = [src for src in (sources or {}).get(name, ()) if src != "index"]
            if other:
                different.append({"name": name, "expected": expected[name],
                                  "found": "%s from %s" % (versions[0], other[0])})
    return missing, extra, different


# ---------------------------------------------------------------------------
# The whole check
# ---------------------------------------------------------------------------

def fingerprint_environment(environment, verify=True, expected=None, expected_fingerprint=None, max_list=50,
                            timeout=None, workers=None, max_distributions=None, record_limit=None):
    """The fingerprint of ``environment`` (an :class:`environment.Environment`); returns the module's result.

    ``expected``: name -> version (any spelling; see :func:`normalize_expected`); ``expected_fingerprint``: a
    :func:`pkgnames.set_fingerprint` value.  ``max_list`` bounds ``not_pristine`` and ``problems`` (their totals
    are complete).  Raises :class:`IntegrityError` when no fingerprint is possible (site-packages unreadable, a
    bound passed, ``timeout`` seconds passed) and ValueError for an ``expected`` that cannot be compared.
    """
    started = time.monotonic()
    deadline = Deadline(timeout)
    max_list = max(1, int(max_list))
    wanted = normalize_expected(expected) if expected is not None else None
    dists, loose = list_distributions(environment.site_dirs, deadline, max_distributions)
    files = 0
    if verify:
        files = verify_distributions(dists, environment, deadline, workers, record_limit)
    dists.sort(key=lambda d: (d.name, d.version, d.path))
    distributions = []
    not_pristine = []
    problems = list(loose)
    found = {}
    found_sources = {}
    for dist in dists:
        found.setdefault(dist.name, []).append(dist.version)
        found_sources.setdefault(dist.name, []).append(dist.source)
        if verify:
            pristine = not dist.problems and dist.verified and not dist.check.drift()
        else:
            pristine = None
        distributions.append({"name": dist.name, "version": dist.version, "source": dist.source,
                              "installer": dist.installer, "pristine": pristine,
                              "problem": "; ".join(dist.problems) or None})
        if dist.problems:
            problems.extend({"name": dist.name, "path": dist.path, "problem": p} for p in dist.problems)
        if pristine is False:
            not_pristine.append({"name": dist.name, "version": dist.version, "reason": _reason(dist),
                                 "overwritten_by": sorted(dist.check.overwritten) if dist.check else []})
    fingerprint = set_fingerprint((d.name, d.version) for d in dists)
    missing, extra, different = compare(found, wanted, found_sources) if wanted is not None else ([], [], [])
    matches = None
    if wanted is not None or expected_fingerprint:
        matches = True
        if wanted is not None and (missing or extra or different):
            matches = False
        if expected_fingerprint and expected_fingerprint != fingerprint:
            matches = False
    result = {
        "changed": False,
        "fingerprint": fingerprint,
        "count": len(distributions),
        "files_checked": files,
        "verified": bool(verify),
        "distributions": distributions,
        "not_pristine": not_pristine[:max_list],
        "not_pristine_total": len(not_pristine),
        "problems": problems[:max_list],
        "problems_total": len(problems),
        "matches": matches,
        "expected_fingerprint": expected_fingerprint or None,
        "missing": missing,
        "extra": extra,
        "different": different,
        "environment": environment.as_dict(),
        "elapsed": round(time.monotonic() - started, 3),
    }
    result["msg"] = summary(result)
    return clean_strings(result)


def check_environment(python=None, venv=None, site_packages=None, python_timeout=PROBE_TIMEOUT, verify=True,
                      expected=None, expected_fingerprint=None, accept_not_pristine=(), max_list=50, timeout=None):
    """The check of the module env_fingerprint_info (and of the decision of vllm_envs): ``expected`` checked first, the
    environment located from exactly one of ``python``, ``venv``, ``site_packages`` (an interpreter stopped after
    ``python_timeout`` seconds), then :func:`fingerprint_environment` within ``timeout`` seconds.  With
    ``verify``, ``unaccepted`` names every distribution that is not pristine but those of ``accept_not_pristine``
    (any spelling).

    Raises :class:`IntegrityError` for an ``expected`` that cannot be compared, when no fingerprint is possible,
    and for an unexpected error, in one sentence.
    """
    if expected is not None:
        try:
            normalize_expected(expected)
        except ValueError as exc:
            raise IntegrityError("The expected option cannot be compared: %s. Nothing was checked." % exc)
    try:
        environment = locate_environment(python=python, venv=venv, site_packages=site_packages, timeout=python_timeout)
        result = fingerprint_environment(environment, verify=verify, expected=expected,
                                         expected_fingerprint=expected_fingerprint, max_list=max_list, timeout=timeout)
    except IntegrityError:
        raise
    except (OSError, RecursionError, MemoryError, ValueError, RuntimeError) as exc:
        # Not expected: say what happened in one sentence rather than with a traceback.
        raise IntegrityError("The environment fingerprint stopped on an unexpected %s: %s. Nothing was changed (the "
                             "check only reads)." % (type(exc).__name__, exc))
    if verify:
        result["unaccepted"] = not_accepted([d["name"] for d in result["distributions"] if d.get("pristine") is False],
                                            accept_not_pristine)
    return result


def _pairs(items, first):
    shown = ", ".join("%s %s" % (i["name"], i["version"]) for i in items[:first])
    return shown + (", ..." if len(items) > first else "")


def summary(result, first=3):
    """One sentence for the operator: how many distributions, the fingerprint, pristine or not, and how the set
    differs from the expected one."""
    where = ", ".join(result["environment"]["site_dirs"][:2])
    parts = ["%d distributions in %s, fingerprint %s" % (result["count"], where, result["fingerprint"][:19])]
    if result["verified"]:
        total = result["not_pristine_total"]
        if total:
            listed = result["not_pristine"][:first]
            parts.append("%d not pristine: %s%s" % (total, "; ".join(
                "%s %s (%s)" % (i["name"], i["version"], i["reason"][:300]) for i in listed), "; ..." if total > len(listed) else ""))
        else:
            parts.append("all pristine (the %d files their RECORDs list all match)" % result["files_checked"])
    else:
        parts.append("files not verified (verify is false)")
    loose = [p for p in result["problems"] if p["path"].endswith(".egg-link")]
    if loose:
        parts.append("also %s" % "; ".join("%s is %s" % (p["path"], p["problem"]) for p in loose[:first]))
    if result["matches"] is True:
        parts.append("it matches the expected set")
    elif result["matches"] is False:
        diffs = []
        if result["different"]:
            diffs.append("%d different (%s%s)" % (len(result["different"]), ", ".join(
                "%s %s expected, %s found" % (d["name"], d["expected"], d["found"]) for d in result["different"][:first]),
                ", ..." if len(result["different"]) > first else ""))
        if result["missing"]:
            diffs.append("%d missing (%s)" % (len(result["missing"]), _pairs(result["missing"], first)))
        if result["extra"]:
            diffs.append("%d not expected (%s)" % (len(result["extra"]), _pairs(result["extra"], first)))
        if not diffs:
            diffs.append("the fingerprint is not the expected %s" % (result["expected_fingerprint"] or "")[:19])
        parts.append("it differs from the expected set: %s" % ", ".join(diffs))
    return "; ".join(parts) + "."


def mismatch_message(result, first=5):
    """Why an environment is not the lock's: the first differences and the packages that are not pristine."""
    parts = []
    for item in result["different"][:first]:
        parts.append("%s is %s, expected %s" % (item["name"], item["found"], item["expected"]))
    for item in result["missing"][:first]:
        parts.append("%s %s is missing" % (item["name"], item["version"]))
    for item in result["extra"][:first]:
        parts.append("%s %s is not expected" % (item["name"], item["version"]))
    total = len(result["different"]) + len(result["missing"]) + len(result["extra"])
    if not total:
        text = "its fingerprint %s is not the expected %s" % (result["fingerprint"], result["expected_fingerprint"])
    else:
        text = "; ".join(parts) + ("; and %d more" % (total - len(parts)) if total > len(parts) else "")
    msg = "The environment (%s) is not the expected one: %s." % (", ".join(result["environment"]["site_dirs"][:2]), text)
    if result["not_pristine_total"]:
        listed = "; ".join("%s %s (%s)" % (i["name"], i["version"], i["reason"][:200])
                           for i in result["not_pristine"][:first])
        msg += " Not pristine: %s%s." % (listed, "; ..." if result["not_pristine_total"] > first else "")
    return msg


def not_pristine_message(result, names, first=5):
    """Which packages of an environment are not pristine (those of NAMES), with why."""
    versions = dict((d["name"], d["version"]) for d in result["distributions"])
    # (why: from not_pristine, which holds up to max_list of them; else the entry's own problem)
    reasons = dict((d["name"], d.get("problem")) for d in result["distributions"] if d.get("problem"))
    reasons.update((d["name"], d["reason"]) for d in result["not_pristine"])
    listed = "; ".join("%s %s (%s)" % (name, versions[name], (reasons.get(name) or "its files differ from its RECORD")
                                       [:200]) for name in names[:first])
    return "The environment (%s) has %d distribution%s that %s not pristine: %s%s" % (
        ", ".join(result["environment"]["site_dirs"][:2]), len(names), "" if len(names) == 1 else "s",
        "is" if len(names) == 1 else "are", listed, "; and %d more" % (len(names) - first) if len(names) > first else "")
