# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The RECORD of an installed distribution, and who owns a file.

Finding a distribution's metadata directory in site-packages, reading files
without following links, parsing ``RECORD`` with :mod:`csv` (not through
``importlib.metadata``, which on Python 3.12+ silently drops the entries of
files that are missing), and the index of the files every other installed
distribution lists (:class:`Owners`).  Used by :mod:`integrity`,
:mod:`filecheck` and :mod:`wheeldiff`.

* :func:`read_record`, :func:`parse_record` - RECORD rows parsed and
  checked, malformed rows kept (at most :data:`RECORD_LIMIT` bytes).
* :func:`find_metadata_dirs` - the ``.dist-info`` (or ``.egg-info``,
  ``.egg-link``) entries of a distribution.
* :func:`safe_text` - any text as valid UTF-8 for a module result.
* :class:`IntegrityError` - raised for input that allows no verdict at all.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import binascii
import csv
import io
import json
import os
import re
import stat

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text

#: Hash algorithms accepted in RECORD (PEP 376 / PEP 427 forbid md5 and sha1).
HASH_ALGORITHMS = ("sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512",
                   "blake2b", "blake2s")

#: RECORD entries that are listed without a hash by design.
UNHASHED_BY_DESIGN = ("RECORD", "RECORD.jws", "RECORD.p7s")

CHUNK = 1 << 20          # per-thread read buffer
TEXT_LIMIT = 4 << 20     # largest file that is scanned or diffed
#: Largest RECORD read (installed or in a wheel); vLLM's is about 1 MiB.
RECORD_LIMIT = 64 << 20

O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class IntegrityError(Exception):
    """Input that allows no verdict at all; the message is for the operator."""


def normalize_name(name):
    """PEP 503 normalised project name (``My_Pkg.x`` -> ``my-pkg-x``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------
# Finding the distribution
# ---------------------------------------------------------------------------

def _listdir(path):
    try:
        return os.listdir(path)
    except FileNotFoundError:
        raise IntegrityError("The site-packages directory %s does not exist." % path)
    except NotADirectoryError:
        raise IntegrityError("The site-packages path %s is not a directory." % path)
    except PermissionError:
        raise IntegrityError(
            "The site-packages directory %s cannot be read (permission denied). "
            "Run the check as a user who can read it (become: true)." % path)
    except OSError as exc:
        raise IntegrityError("The site-packages directory %s cannot be read: %s." % (path, exc.strerror or exc))


def _meta_dir_name(entry):
    """(normalised name, version or None, kind) for a metadata dir name, or None."""
    for suffix, kind in ((".dist-info", "dist-info"), (".egg-info", "egg-info"), (".egg-link", "egg-link")):
        if entry.endswith(suffix):
            stem = entry[:-len(suffix)]
            if kind == "egg-link":
                return normalize_name(stem), None, kind
            name, sep, rest = stem.partition("-")
            version = rest.split("-", 1)[0] if sep else None
            return normalize_name(name), version, kind
    return None


def find_metadata_dirs(site_dirs, dist_name):
    """All metadata entries for ``dist_name``: list of (site_dir, entry, kind, version)."""
    wanted = normalize_name(dist_name)
    found = []
    for number, site in enumerate(site_dirs):
        if number and not os.path.isdir(site):
            continue
        for entry in sorted(_listdir(site)):
            parsed = _meta_dir_name(entry)
            if parsed and parsed[0] == wanted:
                found.append((site, entry, parsed[2], parsed[1]))
    return found


def read_regular(path, limit):
    """Up to ``limit`` bytes of a regular file, never following a symbolic
    link in the last component and never blocking on a FIFO; OSError else."""
    fd = os.open(path, O_READ)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(21, "not a regular file", path)
        chunks = []
        left = limit
        # The first read is sized by the file (plus one byte, to see the end):
        # one buffer of the file's size, not a CHUNK for a small file nor
        # CHUNKs joined for a large one; a file that grows meanwhile is read
        # on in CHUNK reads, up to ``limit``.
        want = st.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, want))
            want = CHUNK
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def read_small(path, limit=1 << 16):
    try:
        return read_regular(path, limit)
    except OSError:
        return None


def metadata_field(data, field):
    if data is None:
        return None
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == field.lower():
            return value.strip()
    return None


def editable_reason(dist_info_path, record_rows):
    data = read_small(os.path.join(dist_info_path, "direct_url.json"))
    if data:
        try:
            info = json.loads(data.decode("utf-8", "replace"))
        except ValueError:
            info = None
        if isinstance(info, dict) and isinstance(info.get("dir_info"), dict) and info["dir_info"].get("editable"):
            return ("it is an editable install of %s (direct_url.json): its code lives in the source tree, "
                    "not in site-packages" % info.get("url", "a source tree"))
    for row in record_rows or ():
        path = row.path
        if "__editable__" not in path and not path.endswith(".egg-link"):
            continue
        base = path.rsplit("/", 1)[-1]
        if base.startswith("__editable__") or base.endswith(".egg-link"):
            return "it is an editable install (RECORD lists %s): its code lives in the source tree, not in site-packages" % path
    return None


# ---------------------------------------------------------------------------
# RECORD
# ---------------------------------------------------------------------------

class RecordRow:
    """One RECORD row: ``path``, ``algorithm`` and ``digest`` (bytes) or None,
    ``size`` (int) or None, ``line`` number."""

    __slots__ = ("path", "algorithm", "digest", "size", "line", "hash_text")

    def __init__(self, path, algorithm, digest, size, line, hash_text):
        self.path = path
        self.algorithm = algorithm
        self.digest = digest
        self.size = size
        self.line = line
        self.hash_text = hash_text


_DIGEST_SIZES = {"sha256": 32, "sha384": 48, "sha512": 64, "sha3_256": 32, "sha3_384": 48,
                 "sha3_512": 64, "blake2b": 64, "blake2s": 32}
_B64_RE = dict((size, re.compile(r"[A-Za-z0-9_-]{%d}={0,2}\Z" % ((size * 4 + 2) // 3)))
               for size in set(_DIGEST_SIZES.values()))


def decode_digest(algorithm, encoded):
    """Digest bytes of a RECORD hash value, or None when it is not valid."""
    size = _DIGEST_SIZES.get(algorithm)
    if size is None or not _B64_RE[size].match(encoded):
        return None
    encoded = encoded.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        digest = binascii.a2b_base64(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        return None
    return digest if len(digest) == size else None


def _parse_row(row, line, malformed):
    if len(row) != 3:
        malformed.append({"line": line, "path": row[0][:300].replace("\x00", "\\0") if row else "",
                          "reason": "expected 3 fields (path, hash, size), found %d" % len(row)})
        return None
    path, hash_text, size_text = row
    if not path or "\x00" in path:
        malformed.append({"line": line, "path": path[:300].replace("\x00", "\\0"), "reason": "empty or invalid path"})
        return None
    size = None
    if size_text:
        if _SIZE_TEXT(size_text):
            size = int(size_text)
        else:
            malformed.append({"line": line, "path": path, "reason": "size '%s' is not a non-negative integer" % safe_text(size_text[:40])})
            return None
    if not hash_text:
        return RecordRow(path, None, None, size, line, "")
    algorithm, sep, encoded = hash_text.partition("=")
    if not sep or not encoded:
        malformed.append({"line": line, "path": path, "reason": "hash '%s' is not of the form algorithm=digest" % safe_text(hash_text[:80])})
        return None
    if algorithm not in _DIGEST_SIZES:
        algorithm = algorithm.lower()
        if algorithm not in _DIGEST_SIZES:
            malformed.append({"line": line, "path": path,
                              "reason": "hash algorithm '%s' is not accepted (use one of %s)"
                                        % (safe_text(algorithm[:20]), ", ".join(HASH_ALGORITHMS))})
            return None
    digest = decode_digest(algorithm, encoded)
    if digest is None:
        malformed.append({"line": line, "path": path, "reason": "digest '%s' is not a valid urlsafe-base64 %s digest" % (safe_text(encoded[:80]), algorithm)})
        return None
    return RecordRow(path, algorithm, digest, size, line, hash_text)


_SHA256_TEXT = re.compile(r"[A-Za-z0-9_-]{43}\Z").match
#: A RECORD size: ASCII digits only (str.isdigit also accepts "²"), at most 20.
_SIZE_TEXT = re.compile(r"[0-9]{1,20}\Z").match


def _parse_record_text(text):
    rows = []
    malformed = []
    append = rows.append
    a2b = binascii.a2b_base64
    valid = _SHA256_TEXT
    try:
        for number, row in enumerate(csv.reader(io.StringIO(text, newline="")), 1):
            # fast path: the usual "path,sha256=<43 chars>,size" row
            if len(row) == 3:
                path, hash_text, size_text = row
                if (hash_text[:7] == "sha256=" and _SIZE_TEXT(size_text) and path and "\x00" not in path
                        and valid(hash_text, 7)):
                    digest = a2b(hash_text[7:].replace("-", "+").replace("_", "/") + "=")
                    append(RecordRow(path, "sha256", digest, int(size_text), number, hash_text))
                    continue
            if not row or row == [""]:
                continue
            parsed = _parse_row(row, number, malformed)
            if parsed is not None:
                append(parsed)
        return rows, malformed
    except csv.Error:
        pass
    # Slow path: parse line by line so one bad row does not hide the others.
    rows = []
    malformed = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            parsed_rows = list(csv.reader([line]))
        except csv.Error as exc:
            malformed.append({"line": number, "path": line.split(",", 1)[0][:300].replace("\x00", "\\0"),
                              "reason": "not a valid CSV row (%s)" % exc})
            continue
        for row in parsed_rows:
            parsed = _parse_row(row, number, malformed)
            if parsed is not None:
                rows.append(parsed)
    return rows, malformed


def parse_record(data, where="RECORD", limit=None):
    """Parse the bytes of a RECORD file with :mod:`csv`.

    Returns ``(rows, malformed)``: the valid :class:`RecordRow` objects and
    one dict (``line``, ``path``, ``reason``) per row that could not be
    understood (bad CSV, wrong field count, NUL bytes, odd sizes or hashes).
    Bytes that are not UTF-8 are kept as surrogate escapes (the file names
    they stand for still work).  Raises :class:`IntegrityError` only when the
    data is larger than ``limit`` bytes.
    """
    limit = RECORD_LIMIT if limit is None else limit
    if len(data) > limit:
        raise IntegrityError("%s is larger than %d bytes (the limit for a RECORD file); it was not parsed" % (where, limit))
    return _parse_record_text(data.decode("utf-8", "surrogateescape"))


def read_record(path, limit=None):
    """Read and parse a RECORD file (see :func:`parse_record`).

    Raises OSError when the file cannot be read (a symbolic link is not
    followed) and :class:`IntegrityError` when it is larger than ``limit``.
    """
    limit = RECORD_LIMIT if limit is None else limit
    return parse_record(read_regular(path, limit + 1), path, limit)


def b64(digest):
    return binascii.b2a_base64(digest, newline=False).rstrip(b"=").decode("ascii").replace("+", "-").replace("/", "_")


def safe_text(text):
    """``text`` as valid UTF-8 text for a module result: bytes that were not
    UTF-8 (surrogate escapes from the file system or a RECORD) and NUL
    characters are shown as backslash escapes instead of breaking the result."""
    text = valid_text(text)
    return text.replace("\x00", "\\0") if "\x00" in text else text


# ---------------------------------------------------------------------------
# Ownership of files other distributions installed
# ---------------------------------------------------------------------------

class Owners:
    """Lazy index of the files every other installed distribution lists.

    A few look-ups search the RECORD texts directly; from the
    ``_INDEX_AFTER``-th look-up on, every RECORD is parsed into one dict.
    """

    _INDEX_AFTER = 16

    def __init__(self, site_dirs, skip):
        self._site_dirs = site_dirs
        self._skip = skip
        self._records = None
        self._index = None
        self._lookups = 0

    def _load(self):
        records = []
        for site in self._site_dirs:
            try:
                names = sorted(os.listdir(site))
            except OSError:
                continue
            real_site = os.path.realpath(site)
            for entry in names:
                meta = os.path.join(real_site, entry)
                if meta in self._skip:
                    continue
                if entry.endswith(".dist-info"):
                    data = read_small(os.path.join(meta, "RECORD"), 64 << 20)
                    if data:
                        # kept as bytes: a look-up searches the bytes (decoding every RECORD of a large
                        # environment, megabytes, costs more than the few look-ups it serves)
                        records.append((entry, real_site, meta, "record", data))
                elif entry.endswith(".egg-info"):
                    data = read_small(os.path.join(meta, "installed-files.txt"), 64 << 20)
                    if data:
                        records.append((entry, real_site, meta, "files", data.decode("utf-8", "surrogateescape")))
        self._records = records

    def _build_index(self):
        index = {}
        for entry, real_site, meta, kind, text in self._records:
            if kind == "files":
                for line in text.splitlines():
                    line = line.strip()
                    if line:
                        index.setdefault(os.path.normpath(os.path.join(meta, line)), (entry, None))
                continue
            try:
                for row in csv.reader(io.StringIO(text.decode("utf-8", "surrogateescape"), newline="")):
                    if row and row[0]:
                        full = os.path.normpath(os.path.join(real_site, row[0]))
                        index.setdefault(full, (entry, row[1] if len(row) > 1 else None))
            except csv.Error:
                continue
        self._index = index

    def owner(self, full_path):
        """(metadata entry, RECORD hash text or None) of the owner, or None."""
        if self._records is None:
            self._load()
        if not self._records:
            return None
        self._lookups += 1
        if self._index is None and self._lookups > self._INDEX_AFTER:
            self._build_index()
        if self._index is not None:
            return self._index.get(full_path)
        for entry, real_site, meta, kind, text in self._records:
            if kind == "files":
                for line in text.splitlines():
                    if line.strip() and os.path.normpath(os.path.join(meta, line.strip())) == full_path:
                        return entry, None
                continue
            if not full_path.startswith(real_site + os.sep):
                continue
            # RECORD bytes hold a file name's own bytes (surrogate escapes stand for them in the path)
            try:
                rel = full_path[len(real_site) + 1:].replace(os.sep, "/").encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                continue        # no file name on disk, so in no RECORD
            pos = _find_row(text, rel)
            if pos is None:
                continue
            end = text.find(b"\n", pos)
            line = text[pos:end if end >= 0 else len(text)].decode("utf-8", "surrogateescape")
            try:
                row = next(csv.reader([line]))
            except (csv.Error, StopIteration):
                return entry, None
            return entry, (row[1] if len(row) > 1 else None)
        return None


def _find_row(data, rel):
    """Where the first line of RECORD ``data`` that starts with the path ``rel``
    (``rel,``) starts, else the first that starts with it quoted (``"rel",``);
    None when neither is there.  One pass over the data."""
    quoted = None
    start = 0
    while True:
        pos = data.find(rel, start)
        if pos < 0:
            return quoted
        start = pos + 1
        after = pos + len(rel)
        if data[after:after + 1] == b"," and (pos == 0 or data[pos - 1:pos] == b"\n"):
            return pos
        if quoted is None and data[after:after + 2] == b'",' and (
                pos == 1 or (pos > 1 and data[pos - 2:pos] == b'\n"')) and data[pos - 1:pos] == b'"':
            quoted = pos - 1
