# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A model directory judged whole, and one fingerprint of what it serves.

:func:`check_model_dir` lists a model directory (bounded in depth and
entries, never following a link out of it), checks that the files a model
needs are there (``config.json``, a tokenizer, every shard
``model.safetensors.index.json`` names and no other), that each safetensors
shard is whole (its header parses within the format's cap, every tensor's
byte range lies inside the file, the file is exactly as long as the header
says; a Git LFS pointer is named as such), and gives each file the model
needs a sha256 and the directory one fingerprint.

Layouts: a plain directory, or a Hugging Face cache snapshot
(``models--org--name/snapshots/<rev>/X -> ../../blobs/<name>``), given as
the snapshot or as the repository (``refs/main`` picks the snapshot).  A
blob named by 64 hex digits is an LFS file named by its content's sha256:
``full`` verifies the content against the name, ``quick`` takes the name.
The other blobs (config and tokenizer files, named by git's sha1) are
hashed, since the SM120 policy may edit them in place; the fingerprint holds
them as they are on disk, so hosts under one policy share it.  Files are
named by their path in the snapshot: a plain copy of the same files has the
same fingerprint.

Hashing streams each file through a per-thread buffer of :data:`CHUNK`
bytes in a bounded pool of threads (``hashlib`` releases the GIL), largest
file first.  A hash cache (a JSON file the caller names) keeps, per
relative path, the file's device, inode, size, mtime and ctime with its
sha256 and the verdicts of its checks; ``quick`` takes an entry only when
all five still match (a file rewritten in place changes its ctime), so a
second check of an unchanged directory reads only metadata.  An entry is
not written for a file changed within :data:`RACY_SECONDS` of its reading
(a write in the same timestamp tick would go unseen), nor for a file that
changed while it was read.  A cache file that is not a regular file owned by
this user and writable only by it, is too large, is not JSON or is for
another directory is ignored and replaced.

Memory: a shard's header is read whole but is capped at
:data:`MAX_HEADER` bytes (the safetensors library's own cap); JSON files at
:data:`MAX_JSON` (parsed whole: the parsed objects take about ten times the
file's size while it is checked, about 28 MB for a 2.8 MB tokenizer.json of
160,000 tokens); no other file is read whole.

Time: hashing runs beside the checks of the headers and JSON files, but
parsing a JSON file holds Python's interpreter lock (the hashing threads wait
for it), so a full check takes about the hashing's time plus that of the
parsing: a fixed cost (about 0.05 s for that tokenizer.json) that the
benchmark (benchmarks/model_info_speed.py) shows beside its ratio.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import collections
import errno
import hashlib
import json
import os
import re
import stat
import struct
import tempfile
import threading
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline, DeadlinePassed
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import one_line

CHUNK = 1 << 20                 # per-thread read buffer
MAX_HEADER = 100000000          # a safetensors header's cap (the safetensors library's MAX_HEADER_SIZE)
MAX_JSON = 64 << 20             # config, tokenizer and index JSON files
MAX_CACHE = 64 << 20            # the hash cache file
MAX_DEPTH = 3                   # directory levels looked into below the model directory
MAX_FILES = 10000               # entries listed (option max_files)
MAX_PROBLEMS = 200              # problems returned (the rest counted)
MAX_LIST = 2000                 # files returned
MAX_DIMS = 64                   # a tensor's shape
MAX_WORKERS = 64
LFS_MAX = 1024                  # an LFS pointer file is about 130 bytes
LFS_PREFIX = b"version https://git-lfs.github.com/spec/v1"
RACY_SECONDS = 2.0              # a file changed this recently is hashed but not cached
CACHE_FORMAT = "gpufleet.vllm model hashes"
CACHE_VERSION = 1
INDEX = "model.safetensors.index.json"
O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)

# bits per element of each safetensors dtype
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64,
    "F64": 64, "I64": 64, "U64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
TOKENIZER_SETS = (("tokenizer.json",), ("tokenizer.model",), ("tiktoken.model",), ("vocab.json", "merges.txt"),
                  ("vocab.txt",))
# top-level files a model does not need (documentation, images, the backups of config edits)
_NOT_NEEDED = re.compile(r"^(readme|license|licence|notice|use_policy|copying)(\..*)?\Z|"
                         r"\.(md|png|jpe?g|gif|svg|webp|pdf)\Z|"
                         r"\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~?\Z", re.I)
_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
_REV = re.compile(r"^[0-9a-zA-Z._-]{1,128}\Z")
# directories that are never a model directory (a link to one is refused before anything is read)
SYSTEM_DIRS = frozenset(("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/proc", "/root",
                         "/run", "/sbin", "/sys", "/tmp", "/usr", "/var", "/usr/lib", "/usr/local", "/var/lib",
                         "/var/tmp"))
_ODD_TYPES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"))


class ModelDirError(Exception):
    """The directory cannot be checked at all; str() says why and what to do."""


class _Stopped(Exception):
    """The deadline passed while a file was being hashed."""


def _odd_type(mode):
    for test, name in _ODD_TYPES:
        if test(mode):
            return name
    return "neither a file nor a directory"


def _within(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def _key(st):
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _shown(rel):
    return one_line(rel)


class _Entry(object):
    """One regular file of the listing: REL its path in the model directory, FULL the path opened (a link's
    resolved target), ST its stat, BLOB the sha256 its blob name gives (Hugging Face cache) or None."""

    __slots__ = ("rel", "full", "st", "blob", "needed", "top", "facts", "source", "link")

    def __init__(self, rel, full, st, blob=None, link=None):
        self.rel, self.full, self.st, self.blob, self.link = rel, full, st, blob, link
        self.top = "/" not in rel
        self.needed = self.top and not rel.startswith(".") and not _NOT_NEEDED.search(rel)
        self.facts = {}
        self.source = None


class _Report(object):
    """The problems found, bounded: the first MAX_PROBLEMS kept, the rest counted."""

    def __init__(self):
        self.problems = []
        self.more = 0
        self.notes = []

    def add(self, rel, kind, detail):
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append({"file": _shown(rel), "kind": kind, "detail": detail})
        else:
            self.more += 1

    def note(self, text):
        if len(self.notes) < 50:
            self.notes.append(text)

    def kinds_of(self, rel):
        shown = _shown(rel)
        return [p["kind"] for p in self.problems if p["file"] == shown]


# ---------------------------------------------------------------------------
# Where the files are
# ---------------------------------------------------------------------------

def _read_small_text(path, limit=256):
    fd = os.open(path, O_READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit + 1)[:limit + 1]
    finally:
        os.close(fd)


def locate(path):
    """(layout, listed directory, Hugging Face repository or None) of PATH, an absolute path; raises
    ModelDirError when it is no directory, is (or links to) a system directory or names no one snapshot."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ModelDirError("path must be an absolute path, got %s" % _shown(str(path)))
    try:
        real = os.path.realpath(path, strict=True)
        st = os.stat(real)
    except OSError as exc:
        raise ModelDirError("the model directory %s cannot be read: %s" % (_shown(path), exc.strerror or exc))
    if not stat.S_ISDIR(st.st_mode):
        raise ModelDirError("the model directory %s is not a directory" % _shown(path))
    if real in SYSTEM_DIRS:
        raise ModelDirError("the model directory %s is (or links to) the system directory %s; point path at the "
                            "directory that holds config.json and the shards" % (_shown(path), real))
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots" and os.path.isdir(os.path.join(os.path.dirname(parent), "blobs")):
        return "hf-cache", real, os.path.dirname(parent)
    snapshots = os.path.join(real, "snapshots")
    if os.path.isdir(snapshots) and os.path.isdir(os.path.join(real, "blobs")):
        rev = None
        try:
            text = _read_small_text(os.path.join(real, "refs", "main"))
            if text is not None:
                rev = text.decode("ascii", "replace").strip()
        except OSError:
            rev = None
        if rev and _REV.match(rev) and os.path.isdir(os.path.join(snapshots, rev)):
            return "hf-cache", os.path.join(snapshots, rev), real
        try:
            revs = sorted(os.listdir(snapshots))[:1000]
        except OSError as exc:
            raise ModelDirError("the snapshots of %s cannot be listed: %s" % (_shown(path), exc.strerror or exc))
        if len(revs) == 1 and _REV.match(revs[0]) and os.path.isdir(os.path.join(snapshots, revs[0])):
            return "hf-cache", os.path.join(snapshots, revs[0]), real
        raise ModelDirError("%s is a Hugging Face cache repository with %d snapshots and no usable refs/main; point "
                            "path at the snapshot the service loads (%s/snapshots/<revision>)"
                            % (_shown(path), len(revs), _shown(path)))
    return "plain", real, None


def _judge_link(full, rel, roots, report):
    """The stat and resolved path of the link FULL when it stays inside ROOTS, else None (named in REPORT)."""
    try:
        target = os.readlink(full)
    except OSError as exc:
        report.add(rel, "unreadable", "the link cannot be read: %s" % (exc.strerror or exc))
        return None, None
    try:
        real = os.path.realpath(full, strict=True)
    except OSError as exc:
        what = "a loop of links" if exc.errno == errno.ELOOP else "a broken link"
        report.add(rel, "broken_link", "%s (to %s): the file it should be is not there" % (what, _shown(target)))
        return None, None
    if not any(_within(real, root) for root in roots):
        report.add(rel, "link_out", "link out of the model directory (to %s, which is %s); not followed"
                   % (_shown(target), _shown(real)))
        return None, None
    try:
        return real, os.stat(real)
    except OSError as exc:
        report.add(rel, "unreadable", "the file the link names cannot be read: %s" % (exc.strerror or exc))
        return None, None


def list_files(top, repo, report, max_files=MAX_FILES, deadline=None):
    """The regular files under TOP (the listed directory, real), as _Entry; True when the listing is whole.

    Links are followed only when they resolve inside TOP or (REPO given) inside REPO/blobs; directories whose
    name starts with a dot, links to directories and levels past MAX_DEPTH are not looked into (noted)."""
    roots = [top]
    if repo is not None:
        roots.append(os.path.join(os.path.realpath(repo), "blobs"))
    entries = []
    seen = 0
    complete = True
    todo = collections.deque([("", 0)])
    while todo:
        rel_dir, depth = todo.popleft()
        if deadline is not None:
            deadline.check("listing the model directory")
        here = os.path.join(top, rel_dir) if rel_dir else top
        scan = []
        try:
            with os.scandir(here) as items:
                for item in items:
                    scan.append(item)
                    if seen + len(scan) > max_files:
                        break
        except OSError as exc:
            report.add(rel_dir or ".", "unreadable", "the directory cannot be listed: %s" % (exc.strerror or exc))
            continue
        for item in sorted(scan, key=lambda e: e.name):
            seen += 1
            if seen > max_files:
                report.add(rel_dir or ".", "too_many_files",
                           "more than %d entries; the rest were not looked at (raise max_files)" % max_files)
                return entries, False
            rel = rel_dir + "/" + item.name if rel_dir else item.name
            try:
                st = os.lstat(item.path)
            except OSError as exc:
                report.add(rel, "unreadable", "cannot be read: %s" % (exc.strerror or exc))
                continue
            if stat.S_ISLNK(st.st_mode):
                real, target_st = _judge_link(item.path, rel, roots, report)
                if real is None:
                    continue
                if stat.S_ISDIR(target_st.st_mode):
                    report.note("%s is a link to a directory; not looked into" % _shown(rel))
                    continue
                if not stat.S_ISREG(target_st.st_mode):
                    report.add(rel, "odd_type", "odd file type: the link leads to %s; never opened"
                               % _odd_type(target_st.st_mode))
                    continue
                blob = None
                if repo is not None and os.path.basename(os.path.dirname(real)) == "blobs":
                    name = os.path.basename(real)
                    blob = name if _SHA256.match(name) else None
                entries.append(_Entry(rel, real, target_st, blob=blob, link=real))
            elif stat.S_ISREG(st.st_mode):
                entries.append(_Entry(rel, item.path, st))
            elif stat.S_ISDIR(st.st_mode):
                if item.name.startswith("."):
                    report.note("%s/ (a hidden directory) was not looked into" % _shown(rel))
                elif depth + 1 >= MAX_DEPTH:
                    report.note("%s/ is deeper than %d levels; not looked into" % (_shown(rel), MAX_DEPTH))
                else:
                    todo.append((rel, depth + 1))
            else:
                report.add(rel, "odd_type", "odd file type: %s; never opened" % _odd_type(st.st_mode))
    return entries, complete


# ---------------------------------------------------------------------------
# Reading one file
# ---------------------------------------------------------------------------

def _open(entry):
    """A descriptor of ENTRY's file, checked to be the regular file that was listed (raises OSError)."""
    fd = os.open(entry.full, O_READ)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (entry.st.st_dev, entry.st.st_ino):
            raise OSError(errno.ESTALE, "it was replaced while it was being checked")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _pread_all(fd, size, offset):
    parts = []
    got = 0
    while got < size:
        data = os.pread(fd, min(size - got, 16 << 20), offset + got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _loads(data):
    """JSON from bytes; ValueError with a short reason when it is not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("its JSON nests too deeply")
    except ValueError as exc:
        raise ValueError("it is not JSON (%s)" % str(exc)[:120])


def _names_digest(names):
    text = "\n".join(sorted(names)).encode("utf-8", "surrogatepass")
    return [len(names), hashlib.sha256(text).hexdigest()]


def _counts(values, limit=None):
    """Whether VALUES is a list of ints >= 0 (at most LIMIT of them)."""
    if not isinstance(values, list) or (limit is not None and len(values) > limit):
        return False
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return False
    return True


def _tensor_problem(name, info):
    """(begin, end) of the tensor's bytes, or a sentence saying what is wrong."""
    if not isinstance(info, dict):
        return "tensor %s is described by %s, not an object" % (_shown(name), type(info).__name__)
    offsets = info.get("data_offsets")
    if not _counts(offsets) or len(offsets) != 2:
        return "tensor %s has no valid data_offsets [begin, end]" % _shown(name)
    begin, end = offsets
    if end < begin:
        return "tensor %s ends (byte %d) before it begins (byte %d)" % (_shown(name), end, begin)
    shape = info.get("shape")
    if not _counts(shape, MAX_DIMS):
        return "tensor %s has no valid shape" % _shown(name)
    dtype = info.get("dtype")
    if not isinstance(dtype, str):
        return "tensor %s has no dtype" % _shown(name)
    bits = DTYPE_BITS.get(dtype)
    if bits is not None:
        count = 1
        for dim in shape:
            count *= dim
        if count * bits != (end - begin) * 8:
            return ("tensor %s (%s, shape %s) needs %s bytes but its range [%d, %d] holds %d"
                    % (_shown(name), dtype, shape, (count * bits + 7) // 8, begin, end, end - begin))
    return (begin, end)


def check_header(fd, size, want_names=False):
    """(problems as (kind, detail), facts) of a safetensors file open as FD, SIZE bytes long."""
    if size < 8:
        return [("truncated", "%d bytes: too short to be a safetensors file (8 bytes of header length at least)"
                 % size)], {}
    head = _pread_all(fd, min(size, LFS_MAX), 0)
    if size <= LFS_MAX and head.startswith(LFS_PREFIX):
        return [("lfs_pointer", "Git LFS pointer, not the shard (run git lfs pull)")], {}
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER:
        return [("bad_header", "its header announces %d bytes, more than the %d a safetensors header may have; "
                               "the file is damaged or not a safetensors file" % (length, MAX_HEADER))], {}
    if 8 + length > size:
        return [("truncated", "its header announces %d bytes, but the file has only %d: truncated (an interrupted "
                              "download or copy) or not a safetensors file" % (length, size))], {}
    data = _pread_all(fd, length, 8)
    if len(data) != length:
        return [("truncated", "the file ended while its header was read")], {}
    if data[:1] != b"{":
        return [("bad_header", "its header does not start with '{': not a safetensors file")], {}
    try:
        header = _loads(data)
    except ValueError as exc:
        return [("bad_header", "its header cannot be read: %s" % exc)], {}
    del data
    if not isinstance(header, dict):
        return [("bad_header", "its header is not a JSON object")], {}
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        return [("bad_header", "its __metadata__ is not an object of strings")], {}
    ranges = []
    for name, info in header.items():
        judged = _tensor_problem(name, info)
        if isinstance(judged, str):
            return [("bad_offsets", judged)], {}
        ranges.append((judged[0], judged[1], name))
    ranges.sort()
    area = size - 8 - length
    expected = 0
    for begin, end, name in ranges:
        if begin != expected:
            what = "overlaps the tensor before it" if begin < expected else "leaves a gap of %d bytes before it" % (
                begin - expected)
            return [("bad_offsets", "tensor %s (bytes %d to %d of the data) %s; the header is damaged"
                     % (_shown(name), begin, end, what))], {}
        expected = end
    if expected > area:
        return [("truncated", "the header says its data ends at byte %d of the file, but the file has %d bytes "
                              "(%d missing): an interrupted download or copy; fetch the shard again"
                 % (8 + length + expected, size, 8 + length + expected - size))], {}
    if expected < area:
        return [("bad_offsets", "%d bytes after the last tensor (the header says the file ends at byte %d, it has "
                                "%d); the file is damaged" % (area - expected, 8 + length + expected, size))], {}
    facts = {"tensors": _names_digest(list(header))}
    if want_names:
        facts["names"] = set(header)
    return [], facts


def check_index(fd, size):
    """(problems, facts) of model.safetensors.index.json open as FD: facts["shards"] maps each named shard to
    [tensor count, digest of the names]; facts["names"] to the set of tensor names."""
    if size > MAX_JSON:
        return [("bad_index", "%d bytes, more than the %d checked" % (size, MAX_JSON))], {}
    data = _pread_all(fd, size, 0)
    if data.startswith(LFS_PREFIX):
        return [("lfs_pointer", "Git LFS pointer, not the file (run git lfs pull)")], {}
    try:
        index = _loads(data)
    except ValueError as exc:
        return [("bad_index", "the index cannot be read: %s" % exc)], {}
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        return [("bad_index", "the index has no weight_map object")], {}
    problems = []
    by_shard = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            problems.append(("bad_index", "tensor %s is mapped to %s, not a file name" % (_shown(tensor), shard)))
            break
        if "/" in shard or "\\" in shard or shard.startswith(".") or "\x00" in shard:
            problems.append(("bad_index", "it names the shard %s, which is not a file of this directory (only plain "
                                          "file names are allowed); not looked at" % _shown(shard)))
            break
        by_shard.setdefault(shard, set()).add(tensor)
    if problems:
        return problems, {}
    return [], {"shards": dict((s, _names_digest(n)) for s, n in by_shard.items()), "names": by_shard}


def check_json(fd, size):
    if size > MAX_JSON:
        return [], {}
    data = _pread_all(fd, size, 0)
    if data.startswith(LFS_PREFIX):
        return [("lfs_pointer", "Git LFS pointer, not the file (run git lfs pull)")], {}
    try:
        _loads(data)
    except ValueError as exc:
        return [("bad_json", "cannot be read: %s" % exc)], {}
    return [], {}


def judge(entry, want_names=False):
    """(problems, facts) of ENTRY's content by its kind (a shard, the index, a JSON file, a small file)."""
    fd = _open(entry)
    try:
        size = os.fstat(fd).st_size
        name = entry.rel
        if name.endswith(".safetensors"):
            return check_header(fd, size, want_names)
        if name == INDEX:
            return check_index(fd, size)
        if name.endswith(".json"):
            return check_json(fd, size)
        if size <= LFS_MAX and _pread_all(fd, size, 0).startswith(LFS_PREFIX):
            return [("lfs_pointer", "Git LFS pointer, not the file (run git lfs pull)")], {}
        return [], {}
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# Hashing
# ---------------------------------------------------------------------------

def _hash_fd(fd, buf, view, expired):
    digest = hashlib.sha256()
    chunks = 0
    total = 0
    readinto = os.readv
    bufs = [buf]
    while True:
        count = readinto(fd, bufs)
        if not count:
            break
        digest.update(view[:count])
        total += count
        chunks += 1
        if not chunks % 16 and expired():
            raise _Stopped()
    return digest.hexdigest(), total


class _Pool(object):
    """WORKERS threads that hash entries, largest first, until the deadline: start(), then (the caller's thread
    free for other work meanwhile) finish()."""

    def __init__(self, workers, deadline):
        self.workers = max(1, min(MAX_WORKERS, workers))
        self.deadline = deadline
        self.results = {}
        self.bytes = 0
        self._lock = threading.Lock()
        self._jobs = collections.deque()
        self._errors = []
        self._threads = []

    def start(self, entries):
        self._jobs.extend(sorted(entries, key=lambda e: -e.st.st_size))
        self._threads = []
        for number in range(min(self.workers, len(self._jobs))):
            thread = threading.Thread(target=self._work, name="modeldir-hash-%d" % number)
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def finish(self):
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise self._errors[0]
        return self.results

    def run(self, entries):
        self.start(entries)
        return self.finish()

    def _work(self):
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        expired = self.deadline.passed
        try:
            while not expired():
                try:
                    entry = self._jobs.popleft()
                except IndexError:
                    return
                self.results[entry.rel] = self._one(entry, buf, view, expired)
        except _Stopped:
            return
        except Exception as exc:  # pylint: disable=broad-exception-caught
            self._errors.append(exc)

    def _one(self, entry, buf, view, expired):
        """(sha256 hex, None) or (None, a sentence)."""
        try:
            fd = _open(entry)
        except OSError as exc:
            return None, "cannot be opened: %s" % (exc.strerror or exc)
        try:
            sha, total = _hash_fd(fd, buf, view, expired)
            after = os.fstat(fd)
        except OSError as exc:
            return None, "read failed: %s" % (exc.strerror or exc)
        finally:
            os.close(fd)
        with self._lock:
            self.bytes += total
        if _key(after) != _key(entry.st) or total != entry.st.st_size:
            return None, "it changed while it was read (%d bytes read, %d listed); run again" % (
                total, entry.st.st_size)
        return sha, None


# ---------------------------------------------------------------------------
# The hash cache
# ---------------------------------------------------------------------------

def _valid_cached(value):
    if not isinstance(value, dict):
        return False
    key = value.get("key")
    if not isinstance(key, list) or len(key) != 5 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in key):
        return False
    sha = value.get("sha256")
    if sha is not None and not (isinstance(sha, str) and _SHA256.match(sha)):
        return False
    tensors = value.get("tensors")
    if tensors is not None and not _valid_digest(tensors):
        return False
    shards = value.get("shards")
    if shards is not None and not (isinstance(shards, dict) and len(shards) <= MAX_FILES and all(
            isinstance(k, str) and _valid_digest(v) for k, v in shards.items())):
        return False
    return value.get("ok") in (None, True)


def _valid_digest(value):
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
            and isinstance(value[1], str) and _SHA256.match(value[1]) is not None)


def load_cache(cache_path, model, report, max_entries=MAX_FILES):
    """The entries of the hash cache at CACHE_PATH for the model directory MODEL ({} when there is none or it
    cannot be trusted; the reason noted in REPORT)."""
    if not cache_path:
        return {}
    try:
        fd = os.open(cache_path, O_READ)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            report.note("the hash cache %s was not used: %s" % (_shown(cache_path), exc.strerror or exc))
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            report.note("the hash cache %s is not a regular file; not used" % _shown(cache_path))
            return {}
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            report.note("the hash cache %s is owned by another user (uid %d) or writable by others; not used, "
                        "replaced" % (_shown(cache_path), st.st_uid))
            return {}
        if st.st_size > MAX_CACHE:
            report.note("the hash cache %s has %d bytes, more than %d; not used, replaced"
                        % (_shown(cache_path), st.st_size, MAX_CACHE))
            return {}
        data = _pread_all(fd, st.st_size, 0)
    except OSError as exc:
        report.note("the hash cache %s was not used: %s" % (_shown(cache_path), exc.strerror or exc))
        return {}
    finally:
        os.close(fd)
    try:
        doc = _loads(data)
    except ValueError as exc:
        report.note("the hash cache %s was not used (%s); it will be replaced" % (_shown(cache_path), exc))
        return {}
    if not (isinstance(doc, dict) and doc.get("format") == CACHE_FORMAT and doc.get("version") == CACHE_VERSION
            and isinstance(doc.get("files"), dict)):
        report.note("the hash cache %s is not one this module wrote; not used, replaced" % _shown(cache_path))
        return {}
    if doc.get("model") != model:
        report.note("the hash cache %s is for another directory; not used, replaced" % _shown(cache_path))
        return {}
    files = doc["files"]
    if len(files) > max_entries:
        report.note("the hash cache %s has more than %d entries; not used" % (_shown(cache_path), max_entries))
        return {}
    return dict((rel, value) for rel, value in files.items() if isinstance(rel, str) and _valid_cached(value))


def write_cache(cache_path, model, files):
    """Write the cache atomically (a temporary file beside it, renamed over it); the directory is made (0700)
    when missing. Returns None, or the sentence of why it could not be written."""
    directory = os.path.dirname(cache_path)
    tmp = None
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
        fd, tmp = tempfile.mkstemp(prefix=".model-hashes-", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "w") as handle:
            json.dump({"format": CACHE_FORMAT, "version": CACHE_VERSION, "model": model, "files": files},
                      handle, sort_keys=True, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, cache_path)
        tmp = None
    except (OSError, ValueError) as exc:
        return "the hash cache %s could not be written: %s; the next check hashes again" % (
            _shown(cache_path), getattr(exc, "strerror", None) or exc)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return None


def default_cache_path(path, home=None):
    """Where the hash cache of the model directory PATH goes by default: /var/cache/gpufleet/model-hashes for
    root, ~/.cache/gpufleet/model-hashes for another user; named by the sha256 of the directory's real path."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        real = path
    name = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".json"
    if os.geteuid() == 0:
        return os.path.join("/var/cache/gpufleet/model-hashes", name)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home or os.path.expanduser("~"), ".cache")
    if not base.startswith("/"):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpufleet", "model-hashes", name)


def cache_path_problem(cache_path, model_dir):
    """A sentence saying why CACHE_PATH cannot be the hash cache of MODEL_DIR, or None."""
    if not isinstance(cache_path, str) or not cache_path.startswith("/"):
        return "cache_path must be an absolute path, got %s" % _shown(str(cache_path))
    if any(ord(c) < 32 or ord(c) == 127 for c in cache_path):
        return "cache_path holds a control character: %s" % _shown(cache_path)
    if os.path.normpath(cache_path) != cache_path.rstrip("/") or cache_path.endswith("/"):
        return "cache_path must be a plain file path (no '..', '.', '//' or trailing '/'), got %s" % _shown(cache_path)
    if not cache_path.endswith(".json"):
        return "cache_path must name a .json file, got %s" % _shown(cache_path)
    if os.path.isdir(cache_path):
        return "cache_path %s is a directory; name a file in it" % _shown(cache_path)
    try:
        model = os.path.realpath(model_dir)
        where = os.path.realpath(os.path.dirname(cache_path))
    except (OSError, ValueError):
        return None
    if model in SYSTEM_DIRS:
        return None     # locate() refuses the directory itself
    if _within(where, model) or _within(os.path.dirname(cache_path), model_dir.rstrip("/") or "/"):
        return ("cache_path %s lies inside the model directory; the check never writes there: put it elsewhere "
                "(the default is under /var/cache/gpufleet/model-hashes)" % _shown(cache_path))
    return None


# ---------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------

def fingerprint_of(files):
    """'sha256:<hex>' over the sorted lines 'relative path<TAB>size<TAB>sha256' of FILES [(rel, size, sha)]."""
    digest = hashlib.sha256()
    for rel, size, sha in sorted(files):
        # (a name with a tab, a line break or bytes that are not UTF-8 counts escaped, as it is shown)
        digest.update(("%s\t%d\t%s\n" % (_shown(rel), size, sha)).encode("utf-8"))
    return "sha256:" + digest.hexdigest()


def _has(present, names):
    return all(name in present for name in names)


def _structure(entries, report, index_facts, shard_entries, rejudge):
    """The files the model needs: config.json, a tokenizer, the shards against the index (and each shard's tensors
    against what the index puts in it). A name already named in REPORT (a link out, an odd file) is not named
    again as missing."""
    present = dict((e.rel, e) for e in entries if e.top)

    def absent(name):
        return name not in present and not report.kinds_of(name)

    if absent("config.json"):
        report.add("config.json", "missing", "config.json is missing: vLLM cannot load the model without it")
    if not any(_has(present, names) for names in TOKENIZER_SETS) and not any(
            report.kinds_of(name) for names in TOKENIZER_SETS for name in names):
        report.add("tokenizer.json", "missing", "no tokenizer file (tokenizer.json, tokenizer.model, "
                                                "tiktoken.model, or vocab.json with merges.txt)")
    shards = dict((e.rel, e) for e in shard_entries)
    if INDEX in present:
        if index_facts is None:
            return
        named = index_facts["shards"]
        for shard in sorted(named):
            if absent(shard):
                report.add(shard, "missing", "the index (%s) names this shard (%d tensors), but it is not in the "
                                             "directory" % (INDEX, named[shard][0]))
        for rel in sorted(shards):
            if rel not in named:
                report.add(rel, "extra_shard", "a shard the index (%s) does not name: a leftover of another "
                                               "revision? vLLM would not load it" % INDEX)
                continue
            entry = shards[rel]
            if "tensors" in entry.facts and entry.facts["tensors"] == named[rel]:
                continue
            if report.kinds_of(rel):
                continue
            missing = rejudge(entry)
            if missing:
                report.add(rel, "index_mismatch", "the index puts %d tensor(s) in this shard that its header does "
                                                  "not have (first: %s); the shard is of another revision or damaged"
                           % (len(missing), _shown(sorted(missing)[0])))
    elif not shards and not any(e.rel.endswith((".bin", ".pt", ".pth", ".gguf")) for e in present.values()):
        report.add("model.safetensors", "missing", "no weights: no *.safetensors file and no index")


def _judge_all(entries, report, deadline):
    """Judge each of ENTRIES (its facts and problems), until DEADLINE."""
    for entry in entries:
        deadline.check("checking the headers and JSON files")
        if entry.facts.get("unreadable"):
            continue
        try:
            problems, facts = judge(entry)
        except OSError as exc:
            report.add(entry.rel, "unreadable", "cannot be read: %s" % (exc.strerror or exc))
            entry.facts["unreadable"] = True
            continue
        for kind, detail in problems:
            report.add(entry.rel, kind, detail)
        facts.pop("names", None)
        entry.facts.update(facts)
        entry.facts["judged_ok"] = not problems


def check_model_dir(path, mode="quick", cache_path=None, max_workers=2, timeout=3600.0, max_files=MAX_FILES,
                    write=True, deadline=None, racy_seconds=None):
    """Judge the model directory PATH; return the result (see the model_info module's RETURN).

    mode ``quick`` takes what the cache says of an unchanged file and an LFS blob's name; ``full`` reads and
    hashes everything again. With WRITE false (check mode) the cache is read but not written. Raises
    ModelDirError when PATH cannot be checked at all, DeadlinePassed when TIMEOUT (or DEADLINE) passes first
    (what was hashed by then is still cached)."""
    started = time.monotonic()
    began = time.time()
    if mode not in ("quick", "full"):
        raise ModelDirError("mode must be quick or full, got %s" % _shown(str(mode)))
    racy = RACY_SECONDS if racy_seconds is None else racy_seconds
    deadline = deadline or Deadline(timeout)
    layout, top, repo = locate(path)
    report = _Report()
    entries, complete = list_files(top, repo, report, max_files=max_files, deadline=deadline)
    cached = load_cache(cache_path, top, report, max_entries=max_files) if cache_path else {}
    needed = [e for e in entries if e.needed]
    fresh = {}          # rel -> cache entry to write
    to_judge = []
    for entry in needed:
        hit = cached.get(entry.rel)
        if mode == "quick" and hit is not None and hit["key"] == _key(entry.st):
            entry.facts = dict((k, v) for k, v in hit.items() if k in ("tensors", "shards"))
            if hit.get("sha256"):
                entry.facts["sha256"] = hit["sha256"]
                entry.source = "cache"
            if hit.get("ok"):
                fresh[entry.rel] = hit
                continue
        to_judge.append(entry)
    # hashing (full: everything; quick: what the cache does not know, but an LFS blob, named by its sha256)
    todo = []
    for entry in needed:
        if mode == "full" or "sha256" not in entry.facts:
            entry.facts.pop("sha256", None)
            if mode == "quick" and entry.blob:
                entry.facts["sha256"] = entry.blob
                entry.source = "blob name"
            else:
                todo.append(entry)
    # the checks of each file's content run in this thread while the pool hashes; a file whose content the cache
    # judged whole is judged after it is hashed: the same sha256, the same verdict
    later = []
    now = []
    for entry in to_judge:
        hit = cached.get(entry.rel)
        if mode == "full" and hit is not None and hit.get("ok") and hit.get("sha256"):
            later.append(entry)
        else:
            now.append(entry)
    pool = _Pool(max_workers, deadline)
    stopped = None
    try:
        deadline.check("hashing the files")
        pool.start(todo)
        _judge_all(now, report, deadline)
    except DeadlinePassed as exc:
        stopped = exc
    finally:
        results = pool.finish()
    for entry in todo:
        got = results.get(entry.rel)
        if got is None:
            continue
        sha, why = got
        if sha is None:
            if not entry.facts.get("unreadable"):
                report.add(entry.rel, "unreadable", why)
            entry.facts["unreadable"] = True
            continue
        entry.facts["sha256"] = sha
        entry.source = "hashed"
        if entry.blob and sha != entry.blob:
            report.add(entry.rel, "hash_mismatch", "its content's sha256 is %s, but its blob is named by %s: the "
                                                   "blob was damaged or edited in place; download it again"
                       % (sha, entry.blob))
    for entry in needed:
        if entry.source == "cache" and entry.blob and entry.facts["sha256"] != entry.blob:
            report.add(entry.rel, "hash_mismatch", "its content's sha256 was %s when it was last hashed, but its "
                                                   "blob is named by %s: the blob was damaged or edited in place; "
                                                   "download it again" % (entry.facts["sha256"], entry.blob))
    if stopped is None and deadline.passed() and len(results) < len(todo):
        stopped = DeadlinePassed(deadline.message("hashing the files (%d of %d hashed)" % (len(results), len(todo))))
    if stopped is None:
        again = []
        for entry in later:
            hit = cached[entry.rel]
            if entry.source == "hashed" and hit["sha256"] == entry.facts["sha256"]:
                entry.facts.update((k, v) for k, v in hit.items() if k in ("tensors", "shards"))
                entry.facts["judged_ok"] = True
            elif not entry.facts.get("unreadable"):
                again.append(entry)
        try:
            _judge_all(again, report, deadline)
        except DeadlinePassed as exc:
            stopped = exc
    index_facts = None
    for entry in needed:
        if entry.rel == INDEX and "shards" in entry.facts:
            index_facts = entry.facts

    def rejudge(entry):
        index = [e for e in needed if e.rel == INDEX][0]
        try:
            dummy, ifacts = judge(index)
            problems, facts = judge(entry, want_names=True)
        except OSError:
            return set()
        if problems or "names" not in ifacts or "names" not in facts:
            return set()
        return ifacts["names"].get(entry.rel, set()) - facts["names"]

    if not stopped:
        _structure(entries, report, index_facts, [e for e in needed if e.rel.endswith(".safetensors")], rejudge)
    # a file changed within RACY seconds before this check began might change again within the same timestamp tick
    # after it was read: not cached
    racy_after = int((began - racy) * 1e9)
    for entry in needed:
        if entry.rel in fresh or entry.facts.get("unreadable"):
            continue
        if max(entry.st.st_mtime_ns, entry.st.st_ctime_ns) > racy_after:
            continue
        if entry.source not in ("hashed", "cache") and not entry.facts.get("judged_ok"):
            continue
        value = {"key": _key(entry.st)}
        if entry.source in ("hashed", "cache"):
            value["sha256"] = entry.facts["sha256"]
        for name in ("tensors", "shards"):
            if name in entry.facts:
                value[name] = entry.facts[name]
        if entry.facts.get("judged_ok") and not report.kinds_of(entry.rel):
            value["ok"] = True
        fresh[entry.rel] = value
    cache_error = None
    cache_written = False
    if cache_path and write and fresh != cached:
        cache_error = write_cache(cache_path, top, fresh)
        cache_written = cache_error is None
        if cache_error:
            report.note(cache_error)
    if stopped is not None:
        raise stopped
    lines = [(e.rel, e.st.st_size, e.facts.get("sha256")) for e in needed]
    whole = complete and all(line[2] for line in lines)
    files = []
    for entry in entries[:MAX_LIST]:
        item = {"path": _shown(entry.rel), "size": entry.st.st_size, "needed": entry.needed,
                "sha256": entry.facts.get("sha256") if entry.needed else None, "source": entry.source}
        if entry.link:
            item["blob"] = _shown(os.path.basename(entry.link))
        files.append(item)
    problems = report.problems
    if report.more:
        problems = problems + [{"file": ".", "kind": "more", "detail": "%d more problems not listed" % report.more}]
    return {
        "ok": not problems,
        "path": path,
        "layout": layout,
        "directory": _shown(top),
        "mode": mode,
        "problems": problems,
        "notes": report.notes,
        "files": files,
        "files_total": len(entries),
        "fingerprint": fingerprint_of(lines) if whole else None,
        "fingerprint_files": len(lines) if whole else 0,
        "bytes_hashed": pool.bytes,
        "files_hashed": sum(1 for e in todo if e.source == "hashed"),
        "cache_hits": sum(1 for e in needed if e.source == "cache"),
        "cache_written": cache_written,
        "seconds": round(time.monotonic() - started, 3),
    }
