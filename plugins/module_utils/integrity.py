# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Verify an installed Python distribution against the hashes in its RECORD.

The verdict comes from the ``RECORD`` file the installer wrote into the
distribution's ``.dist-info`` directory: every listed file is checked for
existence, type, size and (only when the size matches) its hash.  RECORD is
read with :mod:`csv`, not through ``importlib.metadata``, which on Python
3.12+ silently drops the entries of files that are missing.

Classes of a RECORD entry (see :data:`CLASSES`):

``ok``            present, same size, same hash
``modified``      same size, different hash; or a regular file replaced by a
                  symbolic link, or a file below a linked directory
``size_differs``  size differs from RECORD (not hashed: it cannot match)
``missing``       listed but not there
``unreadable``    there but could not be read (permissions, not a regular file)
``unhashed``      listed without a hash (reported, not a drift by itself)
``outside``       a path that leaves site-packages and is not a script in the
                  environment's ``bin/``; never opened
``malformed``     a RECORD row that cannot be understood

plus ``unowned``: files under the distribution's own top-level directories
that RECORD does not list (``__pycache__`` ignored and files other installed
distributions list are not counted), and ``.pth`` / ``sitecustomize`` /
``usercustomize`` start-up hooks in site-packages that no installed
distribution owns (or whose content no longer matches their owner's RECORD).

An editable install, an install without RECORD (``.egg-info``, distutils)
and an ambiguous one (two metadata directories for the same name in one
site directory) cannot be verified: the result says so with the reason and is
never ``pristine``.  Given the wheel, the installed RECORD's hashes are also
compared with the wheel's RECORD, so a rewritten RECORD cannot hide an edit.

Nothing outside the environment is opened: paths in RECORD that leave
site-packages are only followed into the environment's ``bin/``; symbolic
links inside site-packages are reported, never followed; files are opened
with ``O_NOFOLLOW | O_NONBLOCK``.  The uv caches are only ``lstat``-ed.

Hashing streams each file through a small per-thread buffer (a large ``.so``
is never read whole) in a thread pool; ``hashlib`` releases the GIL while it
hashes, so all cores are used.  Files are taken largest first so that the
largest file never starts last.

The explanations for changed files (syntax-tree scan, literal patterns) come
from :mod:`debugscan`; a unified diff against the pristine wheel and the uv
cache taint check are computed only for changed files.

Public API, used by the module, the ``reinstall`` role and the ``audit``
playbook:

* :func:`verify` - the whole check, returns the module's result dict.
* :func:`locate_environment` - site-packages and ``bin/`` of a Python
  interpreter, a virtual environment or a site-packages directory.
* :func:`read_record`, :func:`parse_record` - RECORD rows parsed and
  checked, malformed rows kept (at most :data:`RECORD_LIMIT` bytes).
* :func:`safe_text` - any text as valid UTF-8 for a module result.
* :class:`Deadline` - the ``timeout`` of :func:`verify`.
* :func:`default_uv_cache_dirs`, :func:`find_wheel`,
  :func:`drift_summary` - helpers.
* :class:`IntegrityError` - raised for input that allows no verdict at all
  (unknown distribution, unreadable site-packages, broken interpreter).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import collections
import csv
import difflib
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import threading
import time
import zipfile

from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded
from ansible_collections.gpufleet.vllm.plugins.module_utils.debugscan import (
    DEFAULT_PATTERNS,
    explain,
)

#: Every class a RECORD entry or a found file can end up in.
CLASSES = ("ok", "modified", "size_differs", "missing", "unreadable", "unhashed",
           "unowned", "outside", "malformed")
#: Classes that make an install not pristine.
DRIFT_CLASSES = ("modified", "size_differs", "missing", "unreadable", "unowned",
                 "outside", "malformed")

#: Hash algorithms accepted in RECORD (PEP 376 / PEP 427 forbid md5 and sha1).
HASH_ALGORITHMS = ("sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512",
                   "blake2b", "blake2s")

#: RECORD entries that are listed without a hash by design.
_UNHASHED_BY_DESIGN = ("RECORD", "RECORD.jws", "RECORD.p7s")

#: Files in a .dist-info directory the installer writes itself; they are not
#: in the wheel, so a wheel comparison skips them.
_INSTALLER_FILES = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json")

STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")
STARTUP_PACKAGES = ("sitecustomize", "usercustomize")

#: ``.pth`` files written by virtual-environment tools, recognised by content.
_VENV_TOOL_PTH = {"_virtualenv.pth": b"import _virtualenv"}

_CHUNK = 1 << 20          # per-thread read buffer
_SMALL = 1 << 18          # files up to this size are read with one call
_TEXT_LIMIT = 4 << 20     # largest file that is scanned or diffed
_MAX_ARCHIVE_ENTRIES = 100000
#: Largest RECORD read (installed or in a wheel); vLLM's is about 1 MiB.
RECORD_LIMIT = 64 << 20

#: Asked of the target interpreter, which runs with ``-I -S``: no site hooks
#: (``.pth`` files, sitecustomize) run, so the venv is found from its
#: ``pyvenv.cfg`` here (Python before 3.11 sets ``sys.prefix`` in site.py).
_PROBE = ("import json, os, site, sys, sysconfig\n"
          "prefix = sys.prefix\n"
          "here = os.path.dirname(os.path.abspath(sys.executable))\n"
          "for cand in (here, os.path.dirname(here)):\n"
          "    if os.path.isfile(os.path.join(cand, 'pyvenv.cfg')):\n"
          "        prefix = cand\n"
          "        break\n"
          "v = {'base': prefix, 'platbase': prefix} if prefix != sys.prefix else None\n"
          "p = sysconfig.get_paths(vars=v) if v else sysconfig.get_paths()\n"
          "g = getattr(site, 'getsitepackages', lambda *a: [])([prefix])\n"
          "print(json.dumps({'purelib': p.get('purelib'), 'platlib': p.get('platlib'), 'site': g, "
          "'scripts': p.get('scripts'), 'data': p.get('data'), 'prefix': prefix, "
          "'base_prefix': getattr(sys, 'base_prefix', sys.prefix), "
          "'version': '%d.%d.%d' % sys.version_info[:3]}))\n")

#: Seconds the target interpreter may take to answer (the python option).
PROBE_TIMEOUT = 30
_PROBE_OUTPUT_LIMIT = 1 << 20

_O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class IntegrityError(Exception):
    """Input that allows no verdict at all; the message is for the operator."""


def normalize_name(name):
    """PEP 503 normalised project name (``My_Pkg.x`` -> ``my-pkg-x``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------
# Locating the environment
# ---------------------------------------------------------------------------

class Environment:
    """Where an environment keeps its packages and scripts.

    ``site_dirs``: directories that may hold ``.dist-info`` directories
    (purelib first); ``scripts_dir``: the ``bin/`` RECORD's ``../../../bin``
    entries point into, or None; ``root``: the environment's prefix, or None;
    ``python_version``: of the target interpreter when it was asked.
    """

    def __init__(self, site_dirs, scripts_dir=None, root=None, source=None, python_version=None):
        self.site_dirs = site_dirs
        self.scripts_dir = scripts_dir
        self.root = root
        self.source = source
        self.python_version = python_version

    def as_dict(self):
        return {"site_dirs": list(self.site_dirs), "scripts_dir": self.scripts_dir,
                "root": self.root, "source": self.source}


def _default_run(argv, timeout=PROBE_TIMEOUT):
    """Run ``argv`` (a list, no shell) with :func:`bounded.run_bounded`: its own session, killed whole after
    ``timeout`` seconds, at most 1 MiB of each output read.  Returns ``(rc, stdout, stderr)``; raises
    :class:`subprocess.TimeoutExpired` when the deadline passed, OSError when it could not be started."""
    rc, out, err = bounded.run_bounded(argv, timeout, max_output=_PROBE_OUTPUT_LIMIT)
    if bounded.timed_out(rc, err):
        raise subprocess.TimeoutExpired(argv, timeout)
    if bounded.not_started(rc, err):
        raise OSError(err)
    return rc, out, err


def probe_argv(python):
    """The list-argument command that asks ``python`` for its install paths:
    isolated (``-I``) and without the site module (``-S``), so no ``.pth``
    file, sitecustomize or usercustomize of the target environment runs."""
    return [python, "-I", "-S", "-c", _PROBE]


def parse_probe(python, rc, out, err):
    """Turn the probe's output into an :class:`Environment`."""
    if rc != 0:
        raise IntegrityError(
            "The Python interpreter %s could not report its site-packages (exit code %s: %s). "
            "Check that it runs, or give the venv or site_packages option instead."
            % (python, rc, (err or out or "no output").strip()[-300:]))
    data = None
    for line in reversed((out or "").strip().splitlines()):
        try:
            data = json.loads(line)
            break
        except ValueError:
            continue
    if not isinstance(data, dict) or not data.get("purelib"):
        raise IntegrityError(
            "The Python interpreter %s answered the site-packages query with something that is "
            "not the expected JSON (%r). Give the venv or site_packages option instead."
            % (python, (out or "")[-200:]))
    site_dirs = [data["purelib"]]
    seen = set([os.path.realpath(data["purelib"])])
    for path in [data.get("platlib")] + list(data.get("site") or []):
        if path and os.path.isdir(path) and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            site_dirs.append(path)
    return Environment(site_dirs, data.get("scripts"), data.get("prefix"),
                       "python:%s" % python, data.get("version"))


def venv_site_dirs(venv):
    """The site-packages directories of a venv (lib and lib64, each pythonX.Y), links counted once."""
    found = []
    for lib in ("lib", "lib64"):
        base = os.path.join(venv, lib)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            if name.startswith("python"):
                candidate = os.path.join(base, name, "site-packages")
                if os.path.isdir(candidate):
                    real = os.path.realpath(candidate)
                    if real not in [os.path.realpath(f) for f in found]:
                        found.append(candidate)
    return found


def _guess_scripts_dir(site_packages):
    """``<prefix>/bin`` for ``<prefix>/lib*/python*/{site,dist}-packages``, as
    given (a linked site-packages keeps its environment) or else resolved."""
    for path in (os.path.abspath(site_packages), os.path.realpath(site_packages)):
        pyver = os.path.dirname(path)
        lib = os.path.dirname(pyver)
        if os.path.basename(pyver).startswith("python") and os.path.basename(lib) in ("lib", "lib64"):
            root = os.path.dirname(lib)
            return os.path.join(root, "bin"), root
    return None, None


def locate_environment(python=None, venv=None, site_packages=None, run_command=None, timeout=PROBE_TIMEOUT):
    """Find site-packages and ``bin/`` from exactly one of the three inputs.

    ``python`` is run as a list-argument subprocess (``run_command(argv) ->
    (rc, stdout, stderr)``; default :func:`subprocess.run`) so the target
    interpreter may differ from the one running this code.  It is killed
    after ``timeout`` seconds.
    """
    given = [n for n, v in (("python", python), ("venv", venv), ("site_packages", site_packages)) if v]
    if len(given) != 1:
        raise IntegrityError("Give exactly one of python, venv or site_packages (got %s)."
                             % (", ".join(given) or "none"))
    if python:
        if not os.path.isfile(python) or not os.access(python, os.X_OK):
            raise IntegrityError(
                "The Python interpreter %s does not exist or is not executable on this host. "
                "Point python at the environment's interpreter (for example /root/ml-env/bin/python)."
                % python)
        try:
            if run_command is None:
                rc, out, err = _default_run(probe_argv(python), timeout)
            else:
                rc, out, err = run_command(probe_argv(python))
        except subprocess.TimeoutExpired:
            raise IntegrityError(
                "The Python interpreter %s did not report its site-packages within %s seconds (python_timeout) "
                "and was stopped; nothing was checked. It was run with -I -S (no site hooks); check that it starts, "
                "or give the venv or site_packages option instead." % (python, timeout))
        except (OSError, subprocess.SubprocessError) as exc:
            raise IntegrityError("Could not run the Python interpreter %s: %s." % (python, exc))
        return parse_probe(python, rc, out, err)
    if venv:
        if not os.path.isdir(venv):
            raise IntegrityError("The virtual environment %s does not exist or is not a directory." % venv)
        dirs = venv_site_dirs(venv)
        if not dirs:
            raise IntegrityError(
                "No lib/python*/site-packages directory was found in the virtual environment %s. "
                "Is it a virtual environment? Give site_packages or python instead." % venv)
        return Environment(dirs, os.path.join(venv, "bin"), venv, "venv:%s" % venv)
    scripts, root = _guess_scripts_dir(site_packages)
    return Environment([site_packages], scripts, root, "site_packages:%s" % site_packages)


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


def _read_regular(path, limit):
    """Up to ``limit`` bytes of a regular file, never following a symbolic
    link in the last component and never blocking on a FIFO; OSError else."""
    fd = os.open(path, _O_READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(21, "not a regular file", path)
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_small(path, limit=1 << 16):
    try:
        return _read_regular(path, limit)
    except OSError:
        return None


def _metadata_field(data, field):
    if data is None:
        return None
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == field.lower():
            return value.strip()
    return None


def _editable_reason(dist_info_path, record_rows):
    data = _read_small(os.path.join(dist_info_path, "direct_url.json"))
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


def _decode_digest(algorithm, encoded):
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
    digest = _decode_digest(algorithm, encoded)
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
    return parse_record(_read_regular(path, limit + 1), path, limit)


def _b64(digest):
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# ---------------------------------------------------------------------------
# Hashing
# ---------------------------------------------------------------------------

_HASHERS = dict((name, getattr(hashlib, name)) for name in HASH_ALGORITHMS if hasattr(hashlib, name))


class _Stopped(Exception):
    """The deadline passed while a large file was being hashed."""


def _check_file(full, size, algorithm, digest, buf, view, expired=None):
    """Classify one file. Returns (class, detail dict or None, lstat or None).
    Raises :class:`_Stopped` when ``expired()`` turns true between chunks."""
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return "missing", None, None
    except OSError as exc:
        return "unreadable", {"reason": "cannot stat: %s" % (exc.strerror or exc)}, None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(full)
        except OSError:
            target = "?"
        return "modified", {"reason": "replaced by a symbolic link to %s (wheels install regular files)" % target[:300]}, st
    if not stat.S_ISREG(mode):
        kind = "directory" if stat.S_ISDIR(mode) else "special file"
        return "unreadable", {"reason": "is a %s, not a regular file" % kind}, st
    if size is not None and st.st_size != size:
        return "size_differs", {"size": st.st_size, "expected_size": size}, st
    if algorithm is None:
        return "unhashed", {"size": st.st_size}, st
    try:
        fd = os.open(full, _O_READ)
    except OSError as exc:
        return "unreadable", {"reason": "cannot open: %s" % (exc.strerror or exc)}, st
    try:
        hasher = _HASHERS[algorithm]()
        if st.st_size <= _SMALL:
            hasher.update(os.read(fd, st.st_size + 1))
        else:
            bufs = [buf]
            chunks = 0
            while True:
                count = os.readv(fd, bufs)
                if not count:
                    break
                hasher.update(view[:count])
                chunks += 1
                if expired is not None and not chunks % 32 and expired():
                    raise _Stopped()
    except OSError as exc:
        return "unreadable", {"reason": "read failed: %s" % (exc.strerror or exc)}, st
    finally:
        os.close(fd)
    actual = hasher.digest()
    if actual == digest:
        return _OK
    return "modified", {"size": st.st_size, "expected_hash": "%s=%s" % (algorithm, _b64(digest)),
                        "hash": "%s=%s" % (algorithm, _b64(actual))}, st


_OK = ("ok", None, None)


def _check_small(full, size, algorithm, digest, buf, view):
    """Fast path for a small file the directory walk saw as a regular file:
    open (never following a link), read ``size + 1`` bytes, compare the
    length, then hash.  Anything unusual falls back to :func:`_check_file`."""
    try:
        fd = os.open(full, _O_READ)
    except OSError:
        return _check_file(full, size, algorithm, digest, buf, view)
    try:
        data = os.read(fd, size + 1)
    except OSError:
        data = None
    finally:
        os.close(fd)
    if data is None or len(data) != size:
        return _check_file(full, size, algorithm, digest, buf, view)
    if _HASHERS[algorithm](data).digest() == digest:
        return _OK
    return _check_file(full, size, algorithm, digest, buf, view)


def _default_workers():
    """Hashing threads besides the calling thread (which joins them): one per
    usable core, less the caller's, at most 7."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return max(1, min(8, count) - 1)


class Deadline:
    """The overall time limit of one check (``seconds`` None or 0: none)."""

    def __init__(self, seconds=None):
        self.seconds = seconds
        self.end = time.monotonic() + seconds if seconds else None

    def expired(self):
        return self.end is not None and time.monotonic() > self.end

    def check(self, doing):
        if self.expired():
            raise IntegrityError(
                "The check did not finish within %s seconds (timeout) and was stopped while %s. Nothing was "
                "changed (the check only reads) and no verdict was reached; raise timeout or look at why the "
                "file system is this slow or this large." % (self.seconds, doing))


class _Hasher:
    """Worker threads that classify files: large ones first, small ones once
    the caller has walked the directories (``add_small``).  Every worker
    stops taking files once ``deadline`` has passed."""

    def __init__(self, workers, deadline=None):
        self.deadline = deadline or Deadline()
        self.total = 0
        self.results = {}
        self._big = collections.deque()
        self._small = collections.deque()
        self._ready = threading.Event()
        self._errors = []
        self._threads = []
        self._workers = max(1, workers)

    def start(self, big_jobs):
        self._big.extend(sorted(big_jobs, key=lambda j: -(j[2] or 0)))
        self.total += len(big_jobs)
        for number in range(self._workers):
            thread = threading.Thread(target=self._run, name="integrity-hash-%d" % number)
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def add_small(self, jobs):
        self._small.extend(jobs)
        self.total += len(jobs)
        self._ready.set()

    def _run(self):
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        results = self.results
        expired = self.deadline.expired
        try:
            pop = self._big.popleft
            while not expired():
                try:
                    index, full, size, algorithm, digest, dummy = pop()
                except IndexError:
                    break
                results[index] = _check_file(full, size, algorithm, digest, buf, view, expired)
            self._ready.wait()
            pop = self._small.popleft
            while not expired():
                try:
                    index, full, size, algorithm, digest, fast = pop()
                except IndexError:
                    break
                if fast:
                    results[index] = _check_small(full, size, algorithm, digest, buf, view)
                else:
                    results[index] = _check_file(full, size, algorithm, digest, buf, view)
        except _Stopped:
            pass
        except Exception as exc:  # pylint: disable=broad-exception-caught
            self._errors.append(exc)

    def finish(self):
        self._ready.set()
        self._run()
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise self._errors[0]
        self.deadline.check("hashing the files RECORD lists (%d of %d checked)" % (len(self.results), self.total))
        return self.results


# ---------------------------------------------------------------------------
# Ownership of files other distributions installed
# ---------------------------------------------------------------------------

class _Owners:
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
                    data = _read_small(os.path.join(meta, "RECORD"), 64 << 20)
                    if data:
                        records.append((entry, real_site, meta, "record", "\n" + data.decode("utf-8", "surrogateescape")))
                elif entry.endswith(".egg-info"):
                    data = _read_small(os.path.join(meta, "installed-files.txt"), 64 << 20)
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
                for row in csv.reader(io.StringIO(text[1:], newline="")):
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
            rel = full_path[len(real_site) + 1:].replace(os.sep, "/")
            for needle in ("\n" + rel + ",", "\n\"" + rel + "\","):
                pos = text.find(needle)
                if pos >= 0:
                    line = text[pos + 1:].split("\n", 1)[0]
                    try:
                        row = next(csv.reader([line]))
                    except (csv.Error, StopIteration):
                        return entry, None
                    return entry, (row[1] if len(row) > 1 else None)
        return None


# ---------------------------------------------------------------------------
# uv cache taint
# ---------------------------------------------------------------------------

def default_uv_cache_dirs(environ=None):
    """uv cache directories to search: ``$UV_CACHE_DIR``, ``$XDG_CACHE_HOME/uv``,
    ``~/.cache/uv`` of the user running this code (existing ones only)."""
    environ = os.environ if environ is None else environ
    candidates = []
    if environ.get("UV_CACHE_DIR"):
        candidates.append(environ["UV_CACHE_DIR"])
    if environ.get("XDG_CACHE_HOME"):
        candidates.append(os.path.join(environ["XDG_CACHE_HOME"], "uv"))
    candidates.append(os.path.join(os.path.expanduser("~"), ".cache", "uv"))
    found = []
    for path in candidates:
        if os.path.isdir(path) and os.path.realpath(path) not in [os.path.realpath(f) for f in found]:
            found.append(path)
    return found


def _archive_entries(cache_dirs, dist_info_name):
    """Archive entries in the uv caches that hold ``dist_info_name``."""
    entries = []
    seen = 0
    for cache in cache_dirs:
        try:
            tops = sorted(os.listdir(cache))
        except OSError:
            continue
        for top in tops:
            if not top.startswith("archive-v"):
                continue
            base = os.path.join(cache, top)
            try:
                with os.scandir(base) as it:
                    for item in it:
                        seen += 1
                        if seen > _MAX_ARCHIVE_ENTRIES:
                            return entries
                        if os.path.isdir(os.path.join(item.path, dist_info_name)):
                            entries.append(item.path)
            except OSError:
                continue
    return entries


def find_uv_taint(changed, cache_dirs, dist_info_name):
    """uv cache files sharing an inode with a changed installed file.

    ``changed``: list of (relative path, lstat result).  Returns
    ``(tainted, hardlinked_elsewhere)`` lists of dicts.
    """
    tainted = []
    elsewhere = []
    candidates = [(rel, st) for rel, st in changed if st is not None and st.st_nlink > 1]
    if not candidates:
        return tainted, elsewhere
    entries = _archive_entries(cache_dirs, dist_info_name)
    for rel, st in candidates:
        hit = None
        for entry in entries:
            cache_file = os.path.join(entry, *rel.split("/"))
            try:
                cst = os.lstat(cache_file)
            except OSError:
                continue
            if cst.st_ino == st.st_ino and cst.st_dev == st.st_dev:
                hit = {"path": rel, "cache_file": cache_file, "cache_entry": entry, "links": st.st_nlink}
                break
        if hit:
            tainted.append(hit)
        else:
            elsewhere.append({"path": rel, "links": st.st_nlink})
    return tainted, elsewhere


# ---------------------------------------------------------------------------
# Wheel comparison
# ---------------------------------------------------------------------------

def find_wheel(wheel, dist_name, version):
    """A wheel file for ``dist_name`` ``version``: ``wheel`` itself when it is
    a file, else the matching ``*.whl`` in the directory ``wheel``."""
    if os.path.isfile(wheel):
        return wheel
    if not os.path.isdir(wheel):
        raise IntegrityError("The wheel %s is neither a wheel file nor a wheelhouse directory." % wheel)
    wanted = normalize_name(dist_name)
    matches = []
    for name in sorted(os.listdir(wheel)):
        if not name.endswith(".whl"):
            continue
        parts = name[:-4].split("-")
        if len(parts) < 5:
            continue
        if normalize_name(parts[0]) == wanted and (version is None or parts[1] == version):
            matches.append(os.path.join(wheel, name))
    if not matches:
        raise IntegrityError("No wheel for %s %s in the wheelhouse %s." % (dist_name, version or "(any version)", wheel))
    return matches[-1]


def _decode_text(data):
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


#: Above this many differing lines (after the common head and tail), the
#: matcher junks popular lines (an exact match of many repeated lines takes
#: time cubic in their number: minutes for 2,000 lines).
_EXACT_DIFF_LINES = 200
#: Above this many differing lines every one of them counts as changed.
_MAX_DIFF_LINES = 20000


def _changed_lines(old_lines, new_lines):
    """1-based line numbers of ``new_lines`` that are not in ``old_lines``;
    bounded work (see :data:`_EXACT_DIFF_LINES`, :data:`_MAX_DIFF_LINES`)."""
    head = 0
    limit = min(len(old_lines), len(new_lines))
    while head < limit and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while tail < limit - head and old_lines[-1 - tail] == new_lines[-1 - tail]:
        tail += 1
    old_mid = old_lines[head:len(old_lines) - tail]
    new_mid = new_lines[head:len(new_lines) - tail]
    if max(len(old_mid), len(new_mid)) > _MAX_DIFF_LINES:
        return set(range(head + 1, head + len(new_mid) + 1))
    exact = max(len(old_mid), len(new_mid)) <= _EXACT_DIFF_LINES
    changed = set()
    matcher = difflib.SequenceMatcher(None, old_mid, new_mid, autojunk=not exact)
    for tag, dummy_i1, dummy_i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            changed.update(range(head + j1 + 1, head + j2 + 1))
    return changed


def _diff_one(zf, member, installed, rel, max_bytes):
    """(diff record, changed line numbers or None)."""
    record = {"path": rel, "diff": "", "truncated": False}
    try:
        info = zf.getinfo(member)
    except KeyError:
        record["note"] = "not in the wheel"
        return record, None
    if info.file_size > _TEXT_LIMIT:
        record["note"] = "wheel copy is larger than %d bytes; no diff" % _TEXT_LIMIT
        return record, None
    old = _decode_text(zf.read(info))
    new_raw = _read_small(installed, _TEXT_LIMIT + 1)
    if new_raw is None:
        record["note"] = "installed file could not be read"
        return record, None
    if len(new_raw) > _TEXT_LIMIT:
        record["note"] = "installed file is larger than %d bytes; no diff" % _TEXT_LIMIT
        return record, None
    new = _decode_text(new_raw)
    if old is None or new is None:
        record["note"] = "binary file (wheel %d bytes, installed %d bytes); no text diff" % (info.file_size, len(new_raw))
        return record, None
    old_lines = old.splitlines(True)
    new_lines = new.splitlines(True)
    text = "".join(difflib.unified_diff(old_lines, new_lines, "wheel/" + rel, "installed/" + rel, n=3))
    encoded = text.encode("utf-8")
    if len(encoded) > max_bytes:
        text = encoded[:max_bytes].decode("utf-8", "ignore")
        text = text[:text.rfind("\n") + 1] if "\n" in text else text
        record["truncated"] = True
        text += "... diff truncated at %d bytes (%d in all)\n" % (max_bytes, len(encoded))
    record["diff"] = text
    return record, _changed_lines(old_lines, new_lines)


def _wheel_record(zf):
    """path -> RecordRow of the wheel's own RECORD ({} when it has none)."""
    for info in zf.infolist():
        parts = info.filename.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "RECORD":
            if info.file_size > RECORD_LIMIT:
                raise IntegrityError("its RECORD is larger than %d bytes" % RECORD_LIMIT)
            rows, dummy = parse_record(zf.read(info), limit=RECORD_LIMIT)
            return dict((r.path, r) for r in rows)
    return {}


# ---------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------

def _empty_result(dist_name):
    return {
        "changed": False,
        "pristine": False,
        "verifiable": False,
        "reason": None,
        "distribution": dist_name,
        "version": None,
        "installer": None,
        "site_packages": None,
        "dist_info": None,
        "environment": None,
        "counts": dict((c, 0) for c in CLASSES),
        "files": dict((c, []) for c in CLASSES if c != "ok"),
        "truncated": False,
        "offenders": [],
        "findings": [],
        "findings_total": 0,
        "diffs": [],
        "wheel": None,
        "wheel_error": None,
        "uv_cache_tainted": False,
        "uv_cache_taint": [],
        "uv_cache_dirs": [],
        "hardlinked_elsewhere": [],
        "shadowed": [],
        "elapsed": 0.0,
        "msg": "",
    }


def safe_text(text):
    """``text`` as valid UTF-8 text for a module result: bytes that were not
    UTF-8 (surrogate escapes from the file system or a RECORD) and NUL
    characters are shown as backslash escapes instead of breaking the result."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\0") if "\x00" in text else text


def _clean(value):
    """A copy of a result value with every string made :func:`safe_text`."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return dict((safe_text(k) if isinstance(k, str) else k, _clean(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _within(path, root):
    return path == root or path.startswith(root + os.sep)


class _Check:
    """One run of :func:`verify` (keeps the many intermediate lists together)."""

    def __init__(self, result, max_list):
        self.result = result
        self.max_list = max_list
        self.offenders = []

    def add(self, cls, item):
        self.result["counts"][cls] += 1
        if cls == "ok":
            return
        listed = self.result["files"][cls]
        if len(listed) < self.max_list:
            listed.append(item)
        else:
            self.result["truncated"] = True
        if cls in DRIFT_CLASSES and len(self.offenders) < self.max_list:
            self.offenders.append({"path": item.get("path", ""), "class": cls})


def _dir_state(rel_dir, real_site, memo):
    """'ok', 'link:<dir>' or 'absent' for a directory relative to site-packages
    (iterative: a RECORD path may have thousands of components)."""
    if rel_dir in memo:
        return memo[rel_dir]
    pending = []
    current = rel_dir
    while current and current not in memo:
        pending.append(current)
        current = current.rsplit("/", 1)[0] if "/" in current else ""
    state = memo.get(current, "ok")
    for path in reversed(pending):
        if state == "ok":
            try:
                st = os.lstat(os.path.join(real_site, path))
            except (OSError, ValueError):
                state = "absent"
            else:
                if stat.S_ISLNK(st.st_mode):
                    state = "link:" + path
                elif not stat.S_ISDIR(st.st_mode):
                    state = "absent"
        memo[path] = state
    return state


#: Bounds of the walk through the distribution's own directories.
WALK_MAX_DEPTH = 64
WALK_MAX_ENTRIES = 1000000


def _walk(real_site, top_dirs, recorded, check=None, deadline=None):
    """Walk ``top_dirs`` (never following links, skipping ``__pycache__``),
    iteratively, at most :data:`WALK_MAX_DEPTH` directories deep and
    :data:`WALK_MAX_ENTRIES` entries in all.

    Returns ``(candidates, regular)``: sorted (relative path, "file", "link",
    "other" or "deep") of entries RECORD does not list (a "deep" directory
    was not walked), and the set of listed paths that are regular files (from
    the directory entry type, no extra system call).  A directory that cannot
    be listed is added to ``check`` as ``unreadable``.  Raises
    :class:`IntegrityError` when the entry bound or ``deadline`` is hit.
    """
    candidates = []
    regular = set()
    stack = [(d, 1) for d in sorted(top_dirs)]
    seen = 0
    while stack:
        rel_dir, depth = stack.pop()
        try:
            it = os.scandir(os.path.join(real_site, rel_dir))
        except OSError as exc:
            if check is not None:
                check.add("unreadable", {"path": rel_dir + "/", "reason": "directory cannot be listed: %s; files in it were "
                                         "not checked for unowned ones" % (exc.strerror or exc)})
            continue
        with it:
            for item in it:
                seen += 1
                if seen > WALK_MAX_ENTRIES:
                    raise IntegrityError(
                        "More than %d entries below %s (directories %s); stopped walking them. Such a tree is not "
                        "an installed distribution: look at what was added there." % (
                            WALK_MAX_ENTRIES, real_site, ", ".join(sorted(top_dirs)[:5])))
                if deadline is not None and not seen % 4096:
                    deadline.check("walking %s for unowned files (%d entries so far)" % (real_site, seen))
                rel = rel_dir + "/" + item.name
                try:
                    if item.is_dir(follow_symlinks=False):
                        if item.name == "__pycache__":
                            continue
                        if depth >= WALK_MAX_DEPTH:
                            if rel not in recorded:
                                candidates.append((rel, "deep"))
                            continue
                        stack.append((rel, depth + 1))
                        continue
                    is_file = item.is_file(follow_symlinks=False)
                except OSError:
                    is_file = False
                if rel in recorded:
                    if is_file:
                        regular.add(rel)
                else:
                    candidates.append((rel, "file" if is_file else "link" if item.is_symlink() else "other"))
    candidates.sort()
    return candidates, regular


def verify(site_packages=None, dist_name="vllm", python=None, venv=None, wheel=None,
           patterns=DEFAULT_PATTERNS, uv_cache_dirs=None, max_list=50, diff_max_bytes=16384,
           workers=None, run_command=None, environment=None, timeout=None):
    """Verify ``dist_name`` against its RECORD; returns the module's result dict.

    Exactly one of ``site_packages``, ``python``, ``venv`` (or a ready
    ``environment`` from :func:`locate_environment`).  ``wheel``: a wheel
    file or wheelhouse directory for the diff of changed text files.
    ``uv_cache_dirs``: list of uv caches to look for shared inodes in (None:
    :func:`default_uv_cache_dirs`).  ``max_list`` bounds every list in the
    result (the counts are always complete).

    Raises :class:`IntegrityError` when no verdict is possible at all
    (unknown distribution, unreadable site-packages, broken interpreter), or
    when ``timeout`` seconds (None: no limit) pass before it is done.
    """
    started = time.monotonic()
    deadline = Deadline(timeout)
    if patterns is None:
        patterns = DEFAULT_PATTERNS
    result = _empty_result(dist_name)
    check = _Check(result, max(1, int(max_list)))
    if environment is None:
        environment = locate_environment(python=python, venv=venv, site_packages=site_packages,
                                         run_command=run_command)
    result["environment"] = environment.as_dict()

    metas = find_metadata_dirs(environment.site_dirs, dist_name)
    if not metas:
        raise IntegrityError(
            "The distribution %r is not installed in %s (no %s-*.dist-info directory there). "
            "Check the name and the python, venv or site_packages option."
            % (dist_name, " or ".join(environment.site_dirs), re.sub(r"[-_.]+", "_", dist_name)))
    site, entry, kind, version = metas[0]
    # Python imports from the first site directory that has it; later ones are shadowed.
    result["shadowed"] = [os.path.join(m[0], m[1]) for m in metas if m[0] != site]
    metas = [m for m in metas if m[0] == site]
    meta_path = os.path.join(site, entry)
    real_site = os.path.realpath(site)
    result["site_packages"] = site
    result["dist_info"] = meta_path
    result["version"] = version
    metadata_raw = _read_small(os.path.join(meta_path, "METADATA")) or _read_small(os.path.join(meta_path, "PKG-INFO"))
    result["version"] = _metadata_field(metadata_raw, "Version") or version
    installer = _read_small(os.path.join(meta_path, "INSTALLER"), 200)
    if installer:
        result["installer"] = installer.decode("utf-8", "replace").strip() or None

    def finish(reason=None):
        if reason:
            result["reason"] = reason
            result["verifiable"] = False
            result["pristine"] = False
        result["offenders"] = check.offenders[:check.max_list]
        result["elapsed"] = round(time.monotonic() - started, 4)
        result["msg"] = drift_summary(result)
        cleaned = _clean(result)
        result.clear()
        result.update(cleaned)
        return result

    if len(metas) > 1:
        return finish("more than one metadata directory for %s is installed (%s); remove the stale one "
                      "before a verdict is possible" % (dist_name, ", ".join(os.path.join(m[0], m[1]) for m in metas)))
    if kind == "egg-link":
        return finish("it is an editable (develop) install (%s): its code lives in the source tree, not in "
                      "site-packages" % meta_path)
    if kind != "dist-info":
        return finish("it was installed without a RECORD (%s %s): there are no recorded hashes to verify "
                      "against; reinstall it from a wheel" % (kind, meta_path))
    record_path = os.path.join(meta_path, "RECORD")
    try:
        rows, malformed = read_record(record_path)
    except FileNotFoundError:
        return finish("%s has no RECORD file: there are no recorded hashes to verify against; "
                      "reinstall it from a wheel" % meta_path)
    except OSError as exc:
        return finish("its RECORD %s cannot be read (%s)" % (record_path, exc.strerror or exc))
    except IntegrityError as exc:
        return finish(str(exc))
    editable = _editable_reason(meta_path, rows)
    if editable:
        return finish(editable)
    result["verifiable"] = True
    recorded = set()
    for item in malformed:
        check.add("malformed", item)
        try:
            full = os.path.normpath(os.path.join(real_site, item["path"]))
        except ValueError:
            continue
        if _within(full, real_site):
            recorded.add(full[len(real_site) + 1:].replace(os.sep, "/"))

    # -- classify paths, start hashing the large files --------------------
    real_scripts = os.path.realpath(environment.scripts_dir) if environment.scripts_dir else None
    dist_info_rel = os.path.relpath(os.path.realpath(meta_path), real_site).replace(os.sep, "/")
    skip_unhashed = set(dist_info_rel + "/" + name for name in _UNHASHED_BY_DESIGN)
    prefix = real_site + os.sep
    lexical_site = os.path.abspath(site)
    dir_memo = {"": "ok"}
    seen_outside = set()

    def classify(row):
        """(label, full path, relative path or None) of a row to check, or None."""
        raw = row.path
        if raw[0] != "/" and "//" not in raw and "./" not in raw and raw[-1] not in "./":
            rel = raw
            full = prefix + raw
        else:
            full = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(real_site, raw))
            rel = full[len(prefix):].replace(os.sep, "/") if full.startswith(prefix) else None
        if rel is not None:
            if rel in recorded:
                check.add("malformed", {"line": row.line, "path": raw, "reason": "listed more than once"})
                return None
            recorded.add(rel)
            if rel in skip_unhashed and row.algorithm is None:
                return None
            parent, sep, dummy = rel.rpartition("/")
            if sep:
                state = dir_memo.get(parent)
                if state is None:
                    state = _dir_state(parent, real_site, dir_memo)
                if state != "ok":
                    if state == "absent":
                        check.add("missing", {"path": rel} if row.size is None else {"path": rel, "expected_size": row.size})
                    else:
                        reason = "directory %s is a symbolic link (wheels install real directories); not followed" % state[5:]
                        check.add("modified", {"path": rel, "reason": reason})
                    return None
            return rel, full, rel
        if lexical_site != real_site and not (real_scripts and _within(full, real_scripts)):
            # site-packages is reached through a symbolic link: the installer
            # wrote ../../../bin/NAME relative to the path it was given, not
            # to the link's target; judge the file by its resolved directory.
            lexical = os.path.normpath(os.path.join(lexical_site, raw))
            resolved = os.path.join(os.path.realpath(os.path.dirname(lexical)), os.path.basename(lexical))
            if real_scripts and _within(resolved, real_scripts):
                full = resolved
        if full in seen_outside:
            check.add("malformed", {"line": row.line, "path": raw, "reason": "listed more than once"})
            return None
        seen_outside.add(full)
        if not (real_scripts and _within(full, real_scripts) and full != real_scripts):
            check.add("outside", {"path": raw, "resolved": full,
                                  "reason": "leaves site-packages and is not a script in the environment's bin/; not opened"})
            return None
        parent = os.path.dirname(full)
        if parent != real_scripts and os.path.realpath(parent) != parent:
            check.add("modified", {"path": raw, "reason": "a directory on the way is a symbolic link; not followed"})
            return None
        return raw, full, None

    # Large files (and odd rows) first, so hashing starts before the rest is sorted out.
    labels = []
    big = []
    small_rows = []
    for row in rows:
        if row.size is not None and row.size <= _SMALL and row.algorithm is not None:
            small_rows.append(row)
            continue
        found = classify(row)
        if found is not None:
            big.append((len(labels), found[1], row.size, row.algorithm, row.digest, found[2]))
            labels.append((found[0], row, found[1]))
    deadline.check("reading RECORD")
    hasher = _Hasher(workers or _default_workers(), deadline)
    hasher.start(big)
    try:
        small = []
        for row in small_rows:
            found = classify(row)
            if found is not None:
                small.append((len(labels), found[1], row.size, row.algorithm, row.digest, found[2]))
                labels.append((found[0], row, found[1]))
        top_dirs = set(d for d in set(k.partition("/")[0] for k in dir_memo if k) if dir_memo.get(d) == "ok")
        # -- while the large files hash: walk the package's directories ----
        candidates, regular = _walk(real_site, top_dirs, recorded, check, deadline)
        hasher.add_small([(j[0], j[1], j[2], j[3], j[4], j[5] is not None and j[5] in regular) for j in small])
    finally:
        hashed = hasher.finish()

    changed_stats = []
    rescan = []
    already = set()
    bad = sorted((index, res) for index, res in hashed.items() if res is not _OK)
    result["counts"]["ok"] += len(hashed) - len(bad)
    for index, (cls, detail, st) in bad:
        label, row, full = labels[index]
        already.add(row.path)
        item = {"path": label}
        if detail:
            item.update(detail)
        if cls == "missing" and row.size is not None:
            item["expected_size"] = row.size
        check.add(cls, item)
        if cls in ("modified", "size_differs"):
            changed_stats.append((label, st))
            if st is not None and stat.S_ISREG(st.st_mode):
                rescan.append((label, full, "changed"))

    # -- unowned files ----------------------------------------------------
    owners = _Owners(environment.site_dirs, {os.path.realpath(meta_path)})
    for rel, what in candidates:
        full = os.path.join(real_site, *rel.split("/"))
        if owners.owner(full) is not None:
            continue
        item = {"path": rel}
        if what == "link":
            try:
                item["reason"] = "symbolic link to %s" % os.readlink(full)[:300]
            except OSError:
                item["reason"] = "symbolic link"
        elif what == "other":
            item["reason"] = "not a regular file"
        elif what == "deep":
            item["path"] = rel + "/"
            item["reason"] = ("directory nested more than %d levels deep in the package; not walked (no wheel installs "
                              "such a tree)" % WALK_MAX_DEPTH)
        else:
            rescan.append((rel, full, "unowned"))
        check.add("unowned", item)
    _check_startup_hooks(environment, real_site, recorded, owners, check, rescan)

    # -- wheel: RECORD against the wheel's, and diffs ---------------------
    changed_lines = {}
    if wheel:
        _compare_wheel(wheel, dist_name, result, check, rows, real_site, dist_info_rel, rescan, changed_lines,
                       diff_max_bytes, already, deadline)

    # -- explanations -----------------------------------------------------
    findings = []
    total = 0
    explained = 0
    for label, full, why in rescan:
        deadline.check("explaining changed files (%d of %d scanned; the hashes were all checked)" % (explained, len(rescan)))
        if explained >= check.max_list * 4:
            result["truncated"] = True
            break
        explained += 1
        data = _read_small(full, _TEXT_LIMIT + 1)
        if data is None:
            continue
        if len(data) > _TEXT_LIMIT:
            if label.endswith((".py", ".pyw", ".pth")):
                findings.append({"path": label, "line": 0, "kind": "not_scanned", "text": "",
                                 "what": "larger than %d bytes; not scanned for dumps, debuggers or patterns" % _TEXT_LIMIT})
                total += 1
            continue
        is_pth = label.endswith(".pth")
        items, count = explain(data, label, patterns, python=False if is_pth else None, limit=max(1, check.max_list))
        if is_pth:
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if line.startswith(("import ", "import\t")):
                    items.append({"path": label, "line": number, "kind": "pth_exec",
                                  "what": "executed by every Python start in this environment",
                                  "text": line.strip()[:200]})
                    count += 1
        lines = changed_lines.get(label)
        for item in items:
            if lines is not None:
                item["changed_line"] = item["line"] in lines
        total += count
        findings.extend(items)
    findings.sort(key=lambda f: (f["path"], f["line"], f["kind"] == "pattern"))
    result["findings"] = findings[:check.max_list]
    result["findings_total"] = total
    if len(findings) > len(result["findings"]) or total > len(findings):
        result["truncated"] = True

    # -- uv cache taint ---------------------------------------------------
    caches = default_uv_cache_dirs() if uv_cache_dirs is None else [c for c in uv_cache_dirs if c]
    result["uv_cache_dirs"] = caches
    if changed_stats:
        site_changed = [(label, st) for label, st in changed_stats if not label.startswith("../") and not os.path.isabs(label)]
        tainted, elsewhere = find_uv_taint(site_changed, caches, entry)
        result["uv_cache_taint"] = tainted[:check.max_list]
        result["uv_cache_tainted"] = bool(tainted)
        result["hardlinked_elsewhere"] = elsewhere[:check.max_list]

    result["pristine"] = result["verifiable"] and not any(result["counts"][c] for c in DRIFT_CLASSES)
    return finish()


def _check_startup_hooks(environment, real_site, recorded, owners, check, rescan):
    """``.pth`` and sitecustomize/usercustomize hooks owned by no distribution."""
    for site in environment.site_dirs:
        real = os.path.realpath(site)
        try:
            names = sorted(os.listdir(real))
        except OSError:
            continue
        for name in names:
            is_pkg = name in STARTUP_PACKAGES and os.path.isdir(os.path.join(real, name))
            if not (name.endswith(".pth") or name in STARTUP_FILES or is_pkg):
                continue
            full = os.path.join(real, name)
            if real == real_site and name in recorded:
                continue
            if is_pkg:
                init = os.path.join(full, "__init__.py")
                if owners.owner(init) is None:
                    check.add("unowned", {"path": name + "/", "reason": "start-up hook package owned by no installed distribution"})
                    if os.path.isfile(init):
                        rescan.append((name + "/__init__.py", init, "unowned"))
                continue
            label = name if real == real_site else full
            if os.path.islink(full):
                try:
                    target = os.readlink(full)
                except OSError:
                    target = "?"
                check.add("unowned", {"path": label, "reason": "start-up hook is a symbolic link to %s; not followed" % target[:300]})
                continue
            owner = owners.owner(full)
            if owner is None:
                expected = _VENV_TOOL_PTH.get(name)
                if expected is not None:
                    data = _read_small(full, 4096)
                    if data is not None and data.strip() == expected:
                        continue
                check.add("unowned", {"path": label, "reason": "start-up hook owned by no installed distribution"})
                rescan.append((label, full, "unowned"))
                continue
            owner_entry, hash_text = owner
            if not hash_text or "=" not in hash_text:
                continue
            algorithm, dummy, encoded = hash_text.partition("=")
            algorithm = algorithm.lower()
            digest = _decode_digest(algorithm, encoded) if algorithm in _HASHERS else None
            if digest is None:
                continue
            # streamed like every other file (a large .pth is hashed whole, never read whole)
            buf = bytearray(_CHUNK)
            verdict = _check_file(full, None, algorithm, digest, buf, memoryview(buf))
            if verdict[0] != "ok":
                check.add("unowned", {"path": label, "owner": owner_entry,
                                      "reason": "start-up hook listed by %s, but its content no longer matches that RECORD" % owner_entry})
                rescan.append((label, full, "unowned"))


def _compare_wheel(wheel, dist_name, result, check, rows, real_site, dist_info_rel, rescan, changed_lines,
                   diff_max_bytes, already, deadline=None):
    try:
        path = find_wheel(wheel, dist_name, result["version"])
    except IntegrityError as exc:
        result["wheel_error"] = str(exc)
        return
    except OSError as exc:
        result["wheel_error"] = "The wheel %s cannot be read: %s." % (wheel, exc.strerror or exc)
        return
    result["wheel"] = path
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        result["wheel_error"] = "The wheel %s cannot be opened: %s." % (path, exc)
        return
    with zf:
        try:
            wheel_rows = _wheel_record(zf)
        except (IntegrityError, OSError, zipfile.BadZipFile, RuntimeError, ValueError) as exc:
            result["wheel_error"] = "The wheel %s cannot be used: %s." % (path, exc)
            return
        if not wheel_rows:
            result["wheel_error"] = "The wheel %s has no RECORD." % path
        # The installed RECORD must carry the wheel's hashes: a rewritten RECORD
        # would otherwise hide an edit.
        dist_info_name = dist_info_rel.rsplit("/", 1)[-1]
        for row in rows:
            wrow = wheel_rows.get(row.path)
            if wrow is None or wrow.algorithm is None:
                continue
            if row.path.startswith(dist_info_name + "/") and row.path.split("/", 1)[1] in _INSTALLER_FILES:
                continue
            if row.algorithm == wrow.algorithm and row.digest == wrow.digest:
                continue
            if row.path in already:
                continue
            reason = ("the installed RECORD's hash differs from the wheel's RECORD (%s): RECORD was rewritten"
                      % os.path.basename(path))
            check.add("modified", {"path": row.path, "reason": reason,
                                   "expected_hash": wrow.hash_text, "record_hash": row.hash_text})
            full = os.path.join(real_site, *row.path.split("/"))
            if os.path.isfile(full) and not os.path.islink(full):
                rescan.append((row.path, full, "changed"))
        diffs = []
        for label, full, why in rescan:
            if why != "changed" or len(diffs) >= check.max_list:
                continue
            if label.startswith("../") or os.path.isabs(label):
                continue
            if deadline is not None:
                deadline.check("diffing changed files against the wheel (%d done; the hashes were all checked)" % len(diffs))
            record, lines = _diff_one(zf, label, full, label, max(256, int(diff_max_bytes)))
            diffs.append(record)
            if lines is not None:
                changed_lines[label] = lines
        result["diffs"] = diffs


def drift_summary(result, first=5):
    """One sentence for the operator: the verdict, the counts and the first files."""
    name = "%s %s" % (result["distribution"], result.get("version") or "")
    where = result.get("site_packages") or "?"
    if not result.get("verifiable"):
        return "%s in %s cannot be verified: %s." % (name.strip(), where, result.get("reason") or "unknown reason")
    counts = result["counts"]
    if result.get("pristine"):
        extra = ""
        if counts.get("unhashed"):
            extra = " (%d listed without a hash: %s)" % (counts["unhashed"], ", ".join(
                i["path"] for i in result["files"]["unhashed"][:first]))
        return "%s in %s is pristine: %d files match their RECORD hashes%s." % (name.strip(), where, counts["ok"], extra)
    parts = ["%d %s" % (counts[c], c.replace("_", " ")) for c in DRIFT_CLASSES if counts.get(c)]
    offenders = result.get("offenders") or []
    listed = offenders[:first]
    shown = ", ".join("%s (%s)" % (o["path"], o["class"].replace("_", " ")) for o in listed)
    more = sum(counts[c] for c in DRIFT_CLASSES) > len(listed)
    msg = "%s in %s is not pristine: %s. First: %s%s." % (
        name.strip(), where, ", ".join(parts), shown, ", ..." if more else "")
    if result.get("uv_cache_tainted"):
        entries = sorted(set(t["cache_entry"] for t in result.get("uv_cache_taint") or []))
        caches = sorted(set(os.path.dirname(os.path.dirname(e)) for e in entries))
        clean = " && ".join("uv cache clean %s --cache-dir %s" % (result["distribution"], c) for c in caches[:3])
        msg += (" The edit is also in uv's cache (%s, hard-linked): a plain `uv pip install --reinstall` "
                "can put the edited file back, so clean %s from the cache first (`%s`) "
                "and reinstall with --link-mode=copy." % (", ".join(entries[:3]), result["distribution"], clean))
    return msg
