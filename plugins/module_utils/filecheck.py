# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Installed files against their RECORD rows, and files RECORD does not list.

Each listed file is checked for existence, type, size and (only when the
size matches) its hash.  Hashing streams each file through a small
per-thread buffer (a large ``.so`` is never read whole) in a bounded thread
pool (:class:`Hasher`); ``hashlib`` releases the GIL while it hashes, so all
cores are used.  Files are taken largest first so that the largest file never
starts last.  :func:`walk` lists a distribution's own directories (never
following links, bounded in depth and entries) for files RECORD does not
list.  Files are opened with ``O_NOFOLLOW | O_NONBLOCK``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import collections
import hashlib
import os
import stat
import threading
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import (
    CHUNK,
    HASH_ALGORITHMS,
    O_READ,
    IntegrityError,
    b64,
)

SMALL = 1 << 18          # files up to this size are read with one call


# ---------------------------------------------------------------------------
# Hashing
# ---------------------------------------------------------------------------

HASHERS = dict((name, getattr(hashlib, name)) for name in HASH_ALGORITHMS if hasattr(hashlib, name))


class _Stopped(Exception):
    """The deadline passed while a large file was being hashed."""


def check_file(full, size, algorithm, digest, buf, view, expired=None):
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
        fd = os.open(full, O_READ)
    except OSError as exc:
        return "unreadable", {"reason": "cannot open: %s" % (exc.strerror or exc)}, st
    try:
        hasher = HASHERS[algorithm]()
        if st.st_size <= SMALL:
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
        return OK
    return "modified", {"size": st.st_size, "expected_hash": "%s=%s" % (algorithm, b64(digest)),
                        "hash": "%s=%s" % (algorithm, b64(actual))}, st


OK = ("ok", None, None)


def _check_small(full, size, algorithm, digest, buf, view):
    """Fast path for a small file the directory walk saw as a regular file:
    open (never following a link), read ``size + 1`` bytes, compare the
    length, then hash.  Anything unusual falls back to :func:`check_file`."""
    try:
        fd = os.open(full, O_READ)
    except OSError:
        return check_file(full, size, algorithm, digest, buf, view)
    try:
        data = os.read(fd, size + 1)
    except OSError:
        data = None
    finally:
        os.close(fd)
    if data is None or len(data) != size:
        return check_file(full, size, algorithm, digest, buf, view)
    if HASHERS[algorithm](data).digest() == digest:
        return OK
    return check_file(full, size, algorithm, digest, buf, view)


def default_workers():
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


class Hasher:
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
        buf = bytearray(CHUNK)
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
                results[index] = check_file(full, size, algorithm, digest, buf, view, expired)
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
                    results[index] = check_file(full, size, algorithm, digest, buf, view)
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


def dir_state(rel_dir, real_site, memo):
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


def walk(real_site, top_dirs, recorded, check=None, deadline=None):
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
