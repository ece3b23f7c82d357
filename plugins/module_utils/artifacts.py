# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Find and remove debug artifacts by name pattern, never following a link.

Directories are opened one path component at a time with ``O_NOFOLLOW`` and
``O_DIRECTORY`` and every later operation is relative to an open directory
descriptor (``os.scandir(fd)``, ``os.stat(name, dir_fd=...,
follow_symlinks=False)``, ``os.unlink(name, dir_fd=...)``).  A directory
swapped for a symbolic link between the scan and the removal therefore makes
the open fail instead of being followed, and a file whose inode changed since
the scan is left alone.  A symbolic link that matches a pattern is removed as
a link (its target is never opened or touched) or skipped.

Use: ``validate_options`` (or ``validate_directory`` and ``validate_pattern``) on the inputs,
``scan`` to find candidates, ``find_holders`` for processes that hold them
open (``/proc/<pid>/fd``), ``remove`` to unlink them.  Standard library only.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import fnmatch
import os
import re
import stat
import time

DEFAULT_PATTERNS = ('nomla_debug_tp*.pt', 'embed_debug_tp*.pt', 'mla_debug_layer*_tp*.pt')
DEFAULT_PATHS = ('/tmp',)
# directories never scanned: the root and the kernel's pseudo file systems
FORBIDDEN_DIRECTORIES = ('/', '/proc', '/sys', '/dev')
LIST_LIMIT = 1000

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)
_AGE = re.compile(r'^\s*(\d+)\s*([smhdw]?)\s*$')
_AGE_UNITS = {'': 1, 's': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 604800}


class ArtifactError(Exception):
    """A refused input or a failed operation; str() is for the operator."""


# --------------------------------------------------------------------------
# validation


def validate_directory(path):
    """Return the normalised absolute directory, or raise ArtifactError."""
    if not isinstance(path, str) or not path.strip():
        raise ArtifactError('an empty directory name was given; list absolute directories such as /tmp.')
    if '\0' in path:
        raise ArtifactError('directory %r contains a NUL byte.' % path)
    if not os.path.isabs(path):
        raise ArtifactError('directory %r is relative; give an absolute path such as /tmp (a relative path '
                            'depends on where the module happens to run).' % path)
    if '..' in path.split('/'):
        raise ArtifactError('directory %r contains "..", which could escape the allowed place; give the '
                            'directory without "..".' % path)
    normal = '/' + os.path.normpath(path).lstrip('/')
    if normal in FORBIDDEN_DIRECTORIES:
        raise ArtifactError('directory %r is refused: removing by pattern from %s is never what is wanted. '
                            'Give the directory where the dumps are, such as /tmp.' % (path, normal))
    real = os.path.realpath(normal)
    if real != normal:
        raise ArtifactError('directory %s resolves through a symbolic link to %s; links are never followed. '
                            'Give the real directory (%s) if that is the one meant.' % (normal, real, real))
    return normal


def validate_pattern(pattern):
    """Raise ArtifactError for a pattern that is empty, a path, or matches every name."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ArtifactError('an empty pattern was given; patterns are file names with wildcards such as '
                            'embed_debug_tp*.pt.')
    if '\0' in pattern:
        raise ArtifactError('pattern %r contains a NUL byte.' % pattern)
    if pattern.startswith('/'):
        raise ArtifactError('pattern %r is absolute; patterns match file names only. Put the directory in '
                            '"paths" and the name in "patterns".' % pattern)
    if '/' in pattern:
        raise ArtifactError('pattern %r contains "/"; patterns match file names only, not paths. Put the '
                            'directory in "paths" (with recursive: true for subdirectories).' % pattern)
    if '..' in pattern:
        raise ArtifactError('pattern %r contains ".."; it is refused so that no pattern can name a parent '
                            'directory.' % pattern)
    if set(pattern) <= set('*?') or pattern in ('.*', '*.*'):
        raise ArtifactError('pattern %r matches every file; give a pattern with a fixed part, such as '
                            'embed_debug_tp*.pt.' % pattern)


def parse_age(value):
    """Seconds from an int or a string like '300', '90s', '10m', '2h', '1d', '1w'; None stays None."""
    if value is None or value == '':
        return None
    if isinstance(value, int):
        seconds = value
    else:
        match = _AGE.match(str(value))
        if not match:
            raise ArtifactError('min_age %r is not understood; use a number of seconds or a number with a unit '
                                's, m, h, d or w (for example 10m or 2h).' % (value,))
        seconds = int(match.group(1)) * _AGE_UNITS[match.group(2)]
    if seconds < 0:
        raise ArtifactError('min_age must not be negative.')
    return seconds


def validate_options(paths, patterns, recursive=False, max_depth=None, min_age=None):
    """Check a scan's inputs at once; return (normalised unique directories, min_age in seconds).

    Raises ArtifactError with the sentence for the operator.  Shared by the
    modules that scan for artifacts (remove_artifacts, drift_info).
    """
    if not paths:
        raise ArtifactError('"paths" is empty; list the directories to clean, such as /tmp.')
    if not patterns:
        raise ArtifactError('"patterns" is empty; list file name patterns such as embed_debug_tp*.pt.')
    normal_paths = []
    for path in paths:
        normal = validate_directory(path)
        if normal not in normal_paths:
            normal_paths.append(normal)
    for pattern in patterns:
        validate_pattern(pattern)
    if max_depth is not None:
        if not recursive:
            raise ArtifactError('max_depth only applies with recursive: true.')
        if max_depth < 0:
            raise ArtifactError('max_depth must be 0 or more.')
    return normal_paths, parse_age(min_age)


def human_bytes(count):
    """Decimal (SI) figure as ls -h --si prints it: 65276224 -> '65.3 MB'."""
    value = float(count)
    for unit in ('B', 'kB', 'MB', 'GB', 'TB'):
        if value < 1000 or unit == 'TB':
            if unit == 'B':
                return '%d B' % count
            return '%.1f %s' % (value, unit)
        value /= 1000.0
    return '%d B' % count  # pragma: no cover


# --------------------------------------------------------------------------
# walking


class Candidate(object):
    """A directory entry that matched a pattern and may be removed."""

    __slots__ = ('path', 'top', 'chain', 'name', 'kind', 'size', 'dev', 'ino', 'mtime', 'link_target',
                 'in_use_by', 'dir_ids')

    def __init__(self, top, chain, name, st, dir_ids, link_target=None):
        self.top = top
        self.chain = tuple(chain)
        self.name = name
        self.path = os.path.join(top, *(self.chain + (name,)))
        self.kind = 'link' if stat.S_ISLNK(st.st_mode) else 'file'
        # a link frees only its own inode; the target is not ours
        self.size = 0 if self.kind == 'link' else st.st_size
        self.dev = st.st_dev
        self.ino = st.st_ino
        self.mtime = st.st_mtime
        self.link_target = link_target
        self.in_use_by = []
        self.dir_ids = tuple(dir_ids)

    def as_dict(self):
        result = {'path': self.path, 'size': self.size, 'type': self.kind, 'in_use_by': list(self.in_use_by)}
        if self.kind == 'link':
            result['link_target'] = self.link_target
        return result


def _open_top(path):
    """Open an absolute directory component by component without following links."""
    fd = os.open('/', _DIR_FLAGS)
    for part in [p for p in path.split('/') if p]:
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def _open_chain(top, chain, dir_ids):
    """Re-open top/chain... checking each directory is the one scanned."""
    fd = _open_top(top)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != dir_ids[0]:
            raise OSError(errno.ESTALE, 'directory replaced since the scan')
        for part, ident in zip(chain, dir_ids[1:]):
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != ident:
                raise OSError(errno.ESTALE, 'directory replaced since the scan')
    except OSError:
        os.close(fd)
        raise
    return fd


def _reason(exc):
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return 'is (or was swapped for) a symbolic link or not a directory; not followed'
    if exc.errno == errno.EACCES:
        return 'permission denied'
    if exc.errno == errno.ENOENT:
        return 'does not exist'
    if exc.errno == errno.ESTALE:
        return 'was replaced since the scan; left alone'
    return exc.strerror or str(exc)


def scan(paths, patterns, recursive=False, max_depth=None, symlinks='remove_link', min_age=None, now=None):
    """Walk the (validated) directories; return (candidates, skipped).

    candidates: list of Candidate in walk order.  skipped: list of
    {'path', 'reason'} for matching entries that are not removed and for
    directories that could not be read or were not followed.
    max_depth: levels of subdirectories below each path (None: unlimited);
    only used when recursive.
    """
    if symlinks not in ('remove_link', 'skip'):
        raise ValueError('symlinks must be remove_link or skip')
    now = time.time() if now is None else now
    candidates = []
    skipped = []
    seen = set()

    def matches(name):
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    def walk(top, chain, fd, dir_ids, depth):
        here = os.path.join(top, *chain) if chain else top
        try:
            entries = sorted(os.scandir(fd), key=lambda e: e.name)
        except OSError as exc:
            skipped.append({'path': here, 'reason': 'cannot list directory: %s' % _reason(exc)})
            return
        for entry in entries:
            full = os.path.join(here, entry.name)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    skipped.append({'path': full, 'reason': 'cannot stat: %s' % _reason(exc)})
                continue
            mode = st.st_mode
            if matches(entry.name):
                if full in seen:
                    continue
                if stat.S_ISLNK(mode):
                    if symlinks == 'skip':
                        skipped.append({'path': full, 'reason': 'symbolic link (symlinks=skip); neither the link '
                                                                'nor its target is touched'})
                        continue
                    try:
                        target = os.readlink(entry.name, dir_fd=fd)
                    except OSError:
                        target = None
                    cand = Candidate(top, chain, entry.name, st, dir_ids, link_target=target)
                elif stat.S_ISREG(mode):
                    cand = Candidate(top, chain, entry.name, st, dir_ids)
                elif stat.S_ISDIR(mode):
                    skipped.append({'path': full, 'reason': 'a directory named like a dump; only files are removed'})
                    continue
                else:
                    skipped.append({'path': full, 'reason': 'not a regular file (fifo, socket or device)'})
                    continue
                if min_age is not None and now - st.st_mtime < min_age:
                    skipped.append({'path': full, 'reason': 'modified %d s ago, younger than min_age (%d s)'
                                                            % (max(0, now - st.st_mtime), min_age)})
                    continue
                seen.add(full)
                candidates.append(cand)
                continue
            if not recursive:
                continue
            if stat.S_ISLNK(mode):
                if entry.is_dir(follow_symlinks=True):
                    skipped.append({'path': full, 'reason': 'symbolic link to a directory; not followed'})
                continue
            if not stat.S_ISDIR(mode):
                continue
            if max_depth is not None and depth >= max_depth:
                continue
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                skipped.append({'path': full, 'reason': 'cannot open directory: %s' % _reason(exc)})
                continue
            try:
                cst = os.fstat(child)
                if (cst.st_dev, cst.st_ino) != (st.st_dev, st.st_ino):
                    skipped.append({'path': full, 'reason': 'directory replaced during the scan; not followed'})
                    continue
                walk(top, chain + (entry.name,), child, dir_ids + ((cst.st_dev, cst.st_ino),), depth + 1)
            finally:
                os.close(child)

    for top in paths:
        try:
            fd = _open_top(top)
        except OSError as exc:
            skipped.append({'path': top, 'reason': 'directory %s' % _reason(exc)})
            continue
        try:
            st = os.fstat(fd)
            walk(top, (), fd, ((st.st_dev, st.st_ino),), 0)
        finally:
            os.close(fd)
    return candidates, skipped


# --------------------------------------------------------------------------
# processes holding files open


def find_holders(candidates, proc='/proc'):
    """Fill Candidate.in_use_by from /proc/<pid>/fd; return (pids scanned, pids unreadable).

    A descriptor matches when its link text is the candidate's path, or when
    it names a file with the same base name and the same device and inode
    (a process in another mount namespace, such as a service with
    PrivateTmp, sees another path).  Only processes this user may inspect are
    seen; root sees all.
    """
    files = [c for c in candidates if c.kind == 'file']
    if not files:
        return 0, 0
    by_path = dict((c.path, c) for c in files)
    by_name = {}
    for cand in files:
        by_name.setdefault(cand.name, []).append(cand)
    scanned = unreadable = 0
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return 0, 0
    for pid in pids:
        fd_dir = os.path.join(proc, pid, 'fd')
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            unreadable += 1
            continue
        scanned += 1
        hits = []
        for num in fds:
            link = os.path.join(fd_dir, num)
            try:
                target = os.readlink(link)
            except OSError:
                continue
            cand = by_path.get(target)
            if cand is None:
                for other in by_name.get(os.path.basename(target), ()):
                    try:
                        st = os.stat(link)
                    except OSError:
                        break
                    if (st.st_dev, st.st_ino) == (other.dev, other.ino):
                        cand = other
                        break
            if cand is not None and cand not in hits:
                hits.append(cand)
        if hits:
            holder = {'pid': int(pid), 'name': _comm(proc, pid)}
            for cand in hits:
                cand.in_use_by.append(holder)
    return scanned, unreadable


def _comm(proc, pid):
    try:
        with open(os.path.join(proc, pid, 'comm')) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


# --------------------------------------------------------------------------
# removal


def remove(candidates):
    """Unlink the candidates; return (removed, failed, vanished).

    removed: Candidates unlinked.  failed: {'path', 'reason'} for entries
    that could not be removed or were replaced since the scan.  vanished:
    {'path', 'reason'} for entries already gone (someone else removed them).

    Each directory is re-opened without following links and checked to be
    the one scanned; each entry is checked to be the same inode before it is
    unlinked relative to the directory descriptor.
    """
    removed = []
    failed = []
    vanished = []
    groups = {}
    order = []
    for cand in candidates:
        key = (cand.top, cand.chain)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(cand)
    for key in order:
        group = groups[key]
        try:
            fd = _open_chain(key[0], key[1], group[0].dir_ids)
        except OSError as exc:
            for cand in group:
                failed.append({'path': cand.path, 'reason': 'directory %s' % _reason(exc)})
            continue
        try:
            for cand in group:
                try:
                    st = os.stat(cand.name, dir_fd=fd, follow_symlinks=False)
                except OSError as exc:
                    if exc.errno == errno.ENOENT:
                        vanished.append({'path': cand.path, 'reason': 'already gone before removal'})
                    else:
                        failed.append({'path': cand.path, 'reason': _reason(exc)})
                    continue
                if (st.st_dev, st.st_ino) != (cand.dev, cand.ino):
                    failed.append({'path': cand.path, 'reason': 'replaced since the scan; left alone'})
                    continue
                try:
                    os.unlink(cand.name, dir_fd=fd)
                except OSError as exc:
                    failed.append({'path': cand.path, 'reason': 'cannot remove: %s' % _reason(exc)})
                    continue
                removed.append(cand)
        finally:
            os.close(fd)
    return removed, failed, vanished
