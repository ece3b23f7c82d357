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

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text

DEFAULT_PATTERNS = ('nomla_debug_tp*.pt', 'embed_debug_tp*.pt', 'mla_debug_layer*_tp*.pt')
DEFAULT_PATHS = ('/tmp',)
# directories never scanned: the root, the system's own trees and the kernel's pseudo file systems
FORBIDDEN_DIRECTORIES = ('/', '/proc', '/sys', '/dev', '/etc', '/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64',
                         '/libx32', '/boot', '/run', '/var/lib')
# ... and nothing below these either (a recursive scan does not enter them)
FORBIDDEN_TREES = ('/proc', '/sys', '/dev', '/etc', '/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32',
                   '/boot', '/run', '/var/lib')
# ... except these, where dumps are written (the shared-memory tmpfs)
ALLOWED_TREES = ('/dev/shm',)
LIST_LIMIT = 1000
# bounds of one scan: directory entries read in all, levels of subdirectories even without max_depth
MAX_ENTRIES = 100000
DEPTH_LIMIT = 2000
# bounds of the /proc scan for processes holding a dump open: descriptors read per process
HOLDER_FDS_LIMIT = 65536
# a pattern needs this many literal characters (outside *, ? and [...])
PATTERN_LITERALS = 3
# names a dump pattern must never match: if it does, it would remove ordinary files too
ORDINARY_NAMES = ('passwd', 'shadow', 'hosts', 'fstab', 'config.json', 'tokenizer.json', 'generation_config.json',
                  'a', 'x', '.bashrc', '.profile', '.ssh', 'id_rsa', 'authorized_keys', 'model.safetensors',
                  'model-00001-of-00002.safetensors', 'pytorch_model.bin', 'libfoo.so.1', 'libc.so.6', 'README',
                  'README.md', 'LICENSE', 'Makefile', 'main.py', '__init__.py', 'setup.cfg', 'requirements.txt',
                  'notes.txt', 'run.sh', 'nohup.out', 'core', 'python3', 'vllm', 'data.bin', 'index.html',
                  'systemd-private-5f1c2a9e8b7d4c3e', '.X11-unix', 'tmpq8z1x_4k', 'ssh-k3JdQ9aLb2Xz',
                  'krb5cc_0', 'lost+found', 'vllm.log', 'server.pid', 'output.json', 'model.pt', 'checkpoint.pt')

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)
_AGE = re.compile(r'^\s*(\d+)\s*([smhdw]?)\s*\Z')
_AGE_UNITS = {'': 1, 's': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 604800}


class ArtifactError(Exception):
    """A refused input or a failed operation; str() is for the operator."""


# the clock of the deadlines (a name of its own, so that a test can make time pass)
_clock = time.monotonic


class Deadline(object):
    """An overall time limit of seconds from now; check() raises ArtifactError once it is past."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.at = _clock() + seconds

    def passed(self):
        return _clock() >= self.at

    def check(self, doing):
        if self.passed():
            raise ArtifactError('the time limit of %s s (timeout) was reached while %s.' % (_number(self.seconds), doing))


def _number(value):
    return ('%d' % value) if float(value) == int(value) else ('%g' % value)


def safe_text(value):
    """Text that is valid UTF-8 for a result: bytes of a name that are not UTF-8 are shown as \\xff.

    Python keeps such bytes of a file name as lone surrogates (surrogateescape),
    which no JSON reader on the controller accepts.
    """
    return valid_text(value)


def safe_result(value):
    """A copy of a result (dicts, lists, tuples, text) with every text made safe by safe_text."""
    if isinstance(value, (str, bytes)):
        return safe_text(value)
    if isinstance(value, dict):
        return dict((safe_result(k), safe_result(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [safe_result(v) for v in value]
    return value


# --------------------------------------------------------------------------
# validation


def _system_directory(path):
    """The refused system directory that path is or lies in, or None."""
    if path in FORBIDDEN_DIRECTORIES:
        return path
    for tree in ALLOWED_TREES:
        if path == tree or path.startswith(tree + '/'):
            return None
    for tree in FORBIDDEN_TREES:
        if path == tree or path.startswith(tree + '/'):
            return tree
    return None


def validate_directory(path, option='paths'):
    """Return the normalised absolute directory, or raise ArtifactError naming the option."""
    if not isinstance(path, str) or not path.strip():
        raise ArtifactError('%s: an empty directory name was given; list absolute directories such as /tmp.' % option)
    shown = safe_text(path)
    if '\0' in path:
        raise ArtifactError('%s: directory %r contains a NUL byte.' % (option, shown))
    if not os.path.isabs(path):
        raise ArtifactError('%s: directory %r is relative; give an absolute path such as /tmp (a relative path '
                            'depends on where the module happens to run).' % (option, shown))
    if '..' in path.split('/'):
        raise ArtifactError('%s: directory %r contains "..", which could escape the allowed place; give the '
                            'directory without "..".' % (option, shown))
    normal = '/' + os.path.normpath(path).lstrip('/')
    real = os.path.realpath(normal)
    for checked in (normal, real):
        system = _system_directory(checked)
        if system is not None:
            raise ArtifactError('%s: directory %r is refused: %s is %s, and removing by pattern from there is never '
                                'what is wanted. Give the directory where the dumps are, such as /tmp.'
                                % (option, shown, safe_text(checked),
                                   'a system directory' if system == checked else 'inside the system directory %s'
                                   % system))
    if real != normal:
        raise ArtifactError('%s: directory %s resolves through a symbolic link to %s; links are never followed. '
                            'Give the real directory (%s) if that is the one meant.'
                            % (option, safe_text(normal), safe_text(real), safe_text(real)))
    return normal


def pattern_literals(pattern):
    """The characters of a shell-style pattern that must appear as they are (outside *, ? and [...])."""
    literals = []
    index = 0
    length = len(pattern)
    while index < length:
        char = pattern[index]
        index += 1
        if char in '*?':
            continue
        if char == '[':
            # a bracket set as fnmatch reads it: "!" first negates, "]" first is a member
            end = index
            if end < length and pattern[end] == '!':
                end += 1
            if end < length and pattern[end] == ']':
                end += 1
            while end < length and pattern[end] != ']':
                end += 1
            if end < length:
                index = end + 1
                continue
        literals.append(char)
    return ''.join(literals)


def _catch_all_words(pattern):
    """What a pattern of only * and ? (or .* / *.*) matches, in words."""
    marks = pattern.count('?')
    if '*' not in pattern:
        return 'every name of %d character%s' % (marks, '' if marks == 1 else 's')
    if marks <= 1:
        return 'every file'
    return 'every name of %d or more characters' % marks


def pattern_stem(pattern):
    """(stem, ending) of a pattern: ending is the literal tail after the last wildcard when it starts with "."
    (a file type such as .pt or .tar.gz), else empty and stem is the whole pattern."""
    last = max(pattern.rfind('*'), pattern.rfind('?'), pattern.rfind(']'))
    tail = pattern[last + 1:]
    if last >= 0 and tail.startswith('.'):
        return pattern[:last + 1], tail
    return pattern, ''


def validate_pattern(pattern, option='patterns'):
    """Raise ArtifactError for a pattern that is empty, a path, or not anchored to dump-like names.

    A pattern must have PATTERN_LITERALS literal characters, as many before
    a file-type ending (``*.pem``, ``x*.tar.gz`` are refused: they name files
    by their type, not as dumps), and match none of ORDINARY_NAMES; the error
    says which ordinary names it matched.
    """
    if not isinstance(pattern, str) or not pattern.strip():
        raise ArtifactError('%s: an empty pattern was given; patterns are file names with wildcards such as '
                            'embed_debug_tp*.pt.' % option)
    shown = safe_text(pattern)
    if '\0' in pattern:
        raise ArtifactError('%s: pattern %r contains a NUL byte.' % (option, shown))
    if pattern.startswith('/'):
        raise ArtifactError('%s: pattern %r is absolute; patterns match file names only. Put the directory in '
                            '"paths" and the name in "patterns".' % (option, shown))
    if '/' in pattern:
        raise ArtifactError('%s: pattern %r contains "/"; patterns match file names only, not paths. Put the '
                            'directory in "paths" (with recursive: true for subdirectories).' % (option, shown))
    if '..' in pattern:
        raise ArtifactError('%s: pattern %r contains ".."; it is refused so that no pattern can name a parent '
                            'directory.' % (option, shown))
    if set(pattern) <= set('*?') or pattern in ('.*', '*.*'):
        raise ArtifactError('%s: pattern %r has no fixed part: it matches %s; give a pattern with a fixed part, '
                            'such as embed_debug_tp*.pt.'
                            % (option, shown, _catch_all_words(pattern)))
    literals = pattern_literals(pattern)
    if len(literals) < PATTERN_LITERALS:
        raise ArtifactError('%s: pattern %r has %d fixed character%s outside the wildcards (*, ?, [...]), so it '
                            'matches nearly every file; give at least %d, as in embed_debug_tp*.pt.'
                            % (option, shown, len(literals), '' if len(literals) == 1 else 's', PATTERN_LITERALS))
    try:
        hits = [name for name in ORDINARY_NAMES if fnmatch.fnmatchcase(name, pattern)]
    except re.error as exc:
        raise ArtifactError('%s: pattern %r cannot be read as a shell-style pattern (%s).' % (option, shown, exc))
    if hits:
        raise ArtifactError('%s: pattern %r also matches ordinary file names such as %s, not only debug dumps; '
                            'give a pattern anchored to the dump names, such as embed_debug_tp*.pt.'
                            % (option, shown, ', '.join(hits[:5])))
    stem, ending = pattern_stem(pattern)
    if ending and len(pattern_literals(stem)) < PATTERN_LITERALS:
        raise ArtifactError('%s: pattern %r names files by their ending (%s) with fewer than %d fixed characters '
                            'before it: it would remove nearly every such file, not only debug dumps. Put a fixed '
                            'part of the dump\'s name before the ending, as in embed_debug_tp*.pt.'
                            % (option, shown, safe_text(ending), PATTERN_LITERALS))


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


def validate_options(paths, patterns, recursive=False, max_depth=None, min_age=None, names=None,
                     max_entries=MAX_ENTRIES, timeout=None):
    """Check a scan's inputs at once; return (normalised unique directories, min_age in seconds).

    Raises ArtifactError with the sentence for the operator.  Shared by the
    modules that scan for artifacts (remove_artifacts, drift_info); names
    maps paths, patterns, max_depth, max_entries and timeout to the options
    of the module, for the messages.
    """
    names = dict(dict((n, n) for n in ('paths', 'patterns', 'max_depth', 'max_entries', 'timeout')), **(names or {}))
    if not paths:
        raise ArtifactError('"%s" is empty; list the directories to clean, such as /tmp.' % names['paths'])
    if not patterns:
        raise ArtifactError('"%s" is empty; list file name patterns such as embed_debug_tp*.pt.' % names['patterns'])
    normal_paths = []
    for path in paths:
        normal = validate_directory(path, names['paths'])
        if normal not in normal_paths:
            normal_paths.append(normal)
    for pattern in patterns:
        validate_pattern(pattern, names['patterns'])
    if max_depth is not None:
        if not recursive:
            raise ArtifactError('%s only applies with recursive: true.' % names['max_depth'])
        if max_depth < 0:
            raise ArtifactError('%s must be 0 or more.' % names['max_depth'])
        if max_depth > DEPTH_LIMIT:
            raise ArtifactError('%s must be at most %d (levels of subdirectories a scan enters).'
                                % (names['max_depth'], DEPTH_LIMIT))
    if max_entries is not None and max_entries < 1:
        raise ArtifactError('%s must be 1 or more.' % names['max_entries'])
    if timeout is not None and not timeout > 0:
        raise ArtifactError('%s must be more than 0 seconds.' % names['timeout'])
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
        result = {'path': safe_text(self.path), 'size': self.size, 'type': self.kind,
                  'in_use_by': [dict(h, name=None if h['name'] is None else safe_text(h['name'])) for h in self.in_use_by]}
        if self.kind == 'link':
            result['link_target'] = None if self.link_target is None else safe_text(self.link_target)
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


def scan(paths, patterns, recursive=False, max_depth=None, symlinks='remove_link', min_age=None, now=None,
         max_entries=MAX_ENTRIES, depth_limit=None, deadline=None):
    """Walk the (validated) directories; return (candidates, skipped).

    candidates: list of Candidate in walk order.  skipped: list of
    {'path', 'reason'} for matching entries that are not removed and for
    directories that could not be read or were not followed.
    max_depth: levels of subdirectories below each path (None: unlimited);
    only used when recursive.

    The walk is a loop over an explicit stack, not recursion, and holds one
    directory descriptor at a time: going down opens the child relative to
    the parent, coming back opens ".." and checks it is the directory
    scanned (else the chain is re-opened from the top, checked the same
    way).  Bounds: max_entries directory entries read in all, depth_limit
    levels (DEPTH_LIMIT when None) even when max_depth is None, and the
    Deadline; past one of them ArtifactError says which bound and where.
    """
    if symlinks not in ('remove_link', 'skip'):
        raise ValueError('symlinks must be remove_link or skip')
    if depth_limit is None:
        depth_limit = DEPTH_LIMIT
    now = time.time() if now is None else now
    candidates = []
    skipped = []
    seen = set()
    listed = [0]

    def matches(name):
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    def skip(path, reason):
        skipped.append({'path': safe_text(path), 'reason': reason})

    def read(fd, here):
        """The entries of an open directory, sorted, each (name, lstat, link to a directory)."""
        found = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    listed[0] += 1
                    if max_entries is not None and listed[0] > max_entries:
                        raise ArtifactError('the scan stopped at %s: more than %d directory entries were read in '
                                            'all (max_entries). Scan fewer or smaller '
                                            'directories (or less deep), or raise max_entries.'
                                            % (safe_text(here), max_entries))
                    if deadline is not None and listed[0] % 1000 == 0:
                        deadline.check('scanning %s' % safe_text(here))
                    found.append(entry)
        except OSError as exc:
            skip(here, 'cannot list directory: %s' % _reason(exc))
            return []
        result = []
        for entry in sorted(found, key=lambda e: e.name):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    skip(os.path.join(here, entry.name), 'cannot stat: %s' % _reason(exc))
                continue
            link_to_dir = False
            if recursive and stat.S_ISLNK(st.st_mode) and not matches(entry.name):
                try:
                    link_to_dir = entry.is_dir(follow_symlinks=True)
                except OSError:
                    link_to_dir = False
            result.append((entry.name, st, link_to_dir))
        return result

    for top in paths:
        if deadline is not None:
            deadline.check('starting the scan of %s' % safe_text(top))
        try:
            fd = _open_top(top)
        except OSError as exc:
            skip(top, 'directory %s' % _reason(exc))
            continue
        try:
            st = os.fstat(fd)
            # frames: [chain, dir_ids, depth, entries, next index]
            stack = [[(), ((st.st_dev, st.st_ino),), 0, read(fd, top), 0]]
            while stack:
                frame = stack[-1]
                chain, dir_ids, depth, entries, index = frame
                here = os.path.join(top, *chain) if chain else top
                if index >= len(entries):
                    stack.pop()
                    if stack and fd is not None:
                        fd = _back_up(fd, stack[-1][1])
                    continue
                if fd is None:
                    try:
                        fd = _open_chain(top, chain, dir_ids)
                    except OSError:
                        skip(here, 'directory moved or replaced during the scan; the rest of it was not read')
                        frame[4] = len(entries)
                        continue
                frame[4] = index + 1
                name, st, link_to_dir = entries[index]
                full = os.path.join(here, name)
                mode = st.st_mode
                if matches(name):
                    if full in seen:
                        continue
                    if stat.S_ISLNK(mode):
                        if symlinks == 'skip':
                            skip(full, 'symbolic link (symlinks=skip); neither the link nor its target is touched')
                            continue
                        try:
                            target = os.readlink(name, dir_fd=fd)
                        except OSError:
                            target = None
                        cand = Candidate(top, chain, name, st, dir_ids, link_target=target)
                    elif stat.S_ISREG(mode):
                        cand = Candidate(top, chain, name, st, dir_ids)
                    elif stat.S_ISDIR(mode):
                        skip(full, 'a directory named like a dump; only files are removed')
                        continue
                    else:
                        skip(full, 'not a regular file (fifo, socket or device)')
                        continue
                    if min_age is not None and now - st.st_mtime < min_age:
                        skip(full, 'modified %d s ago, younger than min_age (%d s)' % (max(0, now - st.st_mtime), min_age))
                        continue
                    seen.add(full)
                    candidates.append(cand)
                    continue
                if not recursive:
                    continue
                if stat.S_ISLNK(mode):
                    if link_to_dir:
                        skip(full, 'symbolic link to a directory; not followed')
                    continue
                if not stat.S_ISDIR(mode):
                    continue
                if max_depth is not None and depth >= max_depth:
                    continue
                system = _system_directory(full)
                if system is not None:
                    skip(full, 'a system directory (%s); never scanned' % safe_text(system))
                    continue
                if depth >= depth_limit:
                    raise ArtifactError('the scan stopped at %s: it is more than %d levels of subdirectories below '
                                        '%s (the depth bound). Set max_depth to scan less deep, '
                                        'or look at that tree by hand.' % (safe_text(full), depth_limit, safe_text(top)))
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    skip(full, 'cannot open directory: %s' % _reason(exc))
                    continue
                cst = os.fstat(child)
                if (cst.st_dev, cst.st_ino) != (st.st_dev, st.st_ino):
                    os.close(child)
                    skip(full, 'directory replaced during the scan; not followed')
                    continue
                os.close(fd)
                fd = child
                stack.append([chain + (name,), dir_ids + ((cst.st_dev, cst.st_ino),), depth + 1, read(fd, full), 0])
        finally:
            if fd is not None:
                os.close(fd)
    return candidates, skipped


def _back_up(fd, parent_ids):
    """Close fd (a directory) and return its parent opened through "..", or None when that is not the one scanned."""
    try:
        parent = os.open('..', _DIR_FLAGS, dir_fd=fd)
    except OSError:
        parent = None
    finally:
        os.close(fd)
    if parent is not None:
        st = os.fstat(parent)
        if (st.st_dev, st.st_ino) == parent_ids[-1]:
            return parent
        os.close(parent)
    return None


# --------------------------------------------------------------------------
# processes holding files open


def find_holders(candidates, proc='/proc', deadline=None, fds_limit=HOLDER_FDS_LIMIT):
    """Fill Candidate.in_use_by from /proc/<pid>/fd; return (pids scanned, pids unreadable).

    A descriptor matches when its link text is the candidate's path, or when
    it names a file with the same base name and the same device and inode
    (a process in another mount namespace, such as a service with
    PrivateTmp, sees another path).  Only processes this user may inspect are
    seen; root sees all.  Bounded: at most fds_limit descriptors are read per
    process (one with more counts as unreadable), and the Deadline is checked
    for every process (ArtifactError when it has passed).
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
        if deadline is not None:
            deadline.check('looking for processes that hold the dumps open in %s' % proc)
        fd_dir = os.path.join(proc, pid, 'fd')
        fds = []
        try:
            with os.scandir(fd_dir) as entries:
                for entry in entries:
                    if len(fds) >= fds_limit:
                        fds = None
                        break
                    fds.append(entry.name)
        except OSError:
            fds = None
        if fds is None:
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
        with open(os.path.join(proc, pid, 'comm'), errors='backslashreplace') as handle:
            return handle.read(256).strip()
    except (IOError, OSError):
        return None


# --------------------------------------------------------------------------
# removal


def remove(candidates, deadline=None, removed=None):
    """Unlink the candidates; return (removed, failed, vanished).

    removed: Candidates unlinked, appended as they go to the list given as
    ``removed`` (if any), so that a caller knows what went even when this
    raises: ArtifactError when the Deadline passes part-way.  failed: {'path', 'reason'} for entries
    that could not be removed or were replaced since the scan.  vanished:
    {'path', 'reason'} for entries already gone (someone else removed them).

    Each directory is re-opened without following links and checked to be
    the one scanned; each entry is checked to be the same inode before it is
    unlinked relative to the directory descriptor.
    """
    removed = [] if removed is None else removed
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
                if deadline is not None:
                    deadline.check('removing the dumps, after %d of %d were removed' % (len(removed), len(candidates)))
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
