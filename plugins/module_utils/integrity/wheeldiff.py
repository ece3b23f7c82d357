# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An installed distribution against its pristine wheel.

The installed RECORD's hashes must be the wheel's (a rewritten RECORD would
otherwise hide an edit), and each changed text file gets a bounded unified
diff against the wheel's copy plus the numbers of the lines that changed (so
a finding can say whether it is on a changed line).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import difflib
import hashlib
import os
import zipfile

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import (
    RECORD_LIMIT,
    TEXT_LIMIT,
    IntegrityError,
    normalize_name,
    parse_record,
    read_small,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import printable_block

#: Files in a .dist-info directory the installer writes itself; they are not
#: in the wheel, so a wheel comparison skips them.
_INSTALLER_FILES = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json")


# ---------------------------------------------------------------------------
# Wheel comparison
# ---------------------------------------------------------------------------

class AmbiguousWheel(IntegrityError):
    """Several wheels of one version in a wheelhouse and none that is surely the build installed; ``short`` says
    so in a few words (for a list of the directories looked in)."""

    def __init__(self, message, short):
        super(AmbiguousWheel, self).__init__(message)
        self.short = short


#: At most this many same-name wheels of one version are opened to find the build installed.
_MAX_CANDIDATES = 16


def _agrees(path, record):
    """Whether the wheel at PATH is the build RECORD (path -> RecordRow, installed) names: its own RECORD gives
    the same hash for every file both name with one (installer files aside), and there is at least one such file."""
    try:
        with zipfile.ZipFile(path) as zf:
            rows = _wheel_record(zf)
    except (IntegrityError, OSError, zipfile.BadZipFile, RuntimeError, ValueError, EOFError):
        return False
    same = 0
    for rel, wrow in rows.items():
        row = record.get(rel)
        if row is None or row.algorithm is None or wrow.algorithm is None:
            continue
        if rel.split("/", 1)[0].endswith(".dist-info") and rel.split("/", 1)[-1] in _INSTALLER_FILES:
            continue
        if row.algorithm != wrow.algorithm or row.digest != wrow.digest:
            return False
        same += 1
    return same > 0


def find_wheel(wheel, dist_name, version, record=None):
    """A wheel file for ``dist_name`` ``version``: ``wheel`` itself when it is
    a file, else the matching ``*.whl`` in the directory ``wheel``.

    When the directory holds several (builds of one version, or a file named
    like one), the one whose RECORD carries the hashes of the installed
    RECORD (``record``: path -> RecordRow) is chosen; with none or no
    ``record`` to tell them apart, IntegrityError says so (no guess by name).
    """
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
    if len(matches) == 1:
        return matches[0]
    names = ", ".join(_one_line(os.path.basename(m)) for m in matches[:_MAX_CANDIDATES])
    names += ", ..." if len(matches) > _MAX_CANDIDATES else ""
    what = "%d wheels of %s %s in %s (%s)" % (len(matches), dist_name, version or "(any version)", wheel, names)
    if len(matches) > _MAX_CANDIDATES:
        raise AmbiguousWheel("There are %s: more than %d to tell apart; keep one build of a version in a wheelhouse."
                             % (what, _MAX_CANDIDATES), "%d wheels of it, too many to tell apart" % len(matches))
    if not record:
        raise AmbiguousWheel("There are %s and no installed RECORD to tell which build is installed; keep one build "
                             "of a version in a wheelhouse." % what,
                             "%d wheels of it and no installed RECORD to tell them apart: %s" % (len(matches), names))
    agreeing = [m for m in matches if _agrees(m, record)]
    if not agreeing:
        raise AmbiguousWheel("There are %s and none carries the hashes the installed RECORD names (another build?)."
                             % what, "%d wheels of it, none the build installed: %s" % (len(matches), names))
    return agreeing[0]


def inside(rel):
    """Whether REL is a path inside the directory it is relative to: not absolute, no NUL, no empty, ``.`` or ``..``
    part (``vllm/../../etc/x`` is not)."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\x00" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def _decode_text(data, lossy=False):
    """The text of DATA, or None for a binary file (a NUL in its first 8 KiB) or, unless LOSSY, one that is not
    UTF-8. With LOSSY, bytes that are not UTF-8 are kept as surrogate escapes (shown later as \\xNN)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8", "surrogateescape" if lossy else "strict")
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


def _diff_one(zf, member, installed, rel, max_bytes, lossy=False, label=None):
    """(diff record, changed line numbers or None). LOSSY: diff text files that are not UTF-8 too (their odd bytes as
    surrogate escapes in the record's text). LABEL: the path in the diff's header lines (default REL)."""
    record = {"path": rel, "diff": "", "truncated": False}
    try:
        info = zf.getinfo(member)
    except KeyError:
        record["note"] = "not in the wheel"
        return record, None
    if info.file_size > TEXT_LIMIT:
        record["note"] = "wheel copy is larger than %d bytes; no diff" % TEXT_LIMIT
        return record, None
    old = _decode_text(zf.read(info), lossy)
    new_raw = read_small(installed, TEXT_LIMIT + 1)
    if new_raw is None:
        record["note"] = "installed file could not be read"
        return record, None
    if len(new_raw) > TEXT_LIMIT:
        record["note"] = "installed file is larger than %d bytes; no diff" % TEXT_LIMIT
        return record, None
    new = _decode_text(new_raw, lossy)
    if old is None or new is None:
        record["note"] = "binary file (wheel %d bytes, installed %d bytes); no text diff" % (info.file_size, len(new_raw))
        return record, None
    old_lines = old.splitlines(True)
    new_lines = new.splitlines(True)
    text = "".join(difflib.unified_diff(old_lines, new_lines, "wheel/" + (label or rel), "installed/" + (label or rel), n=3))
    encoded = text.encode("utf-8", "surrogateescape")
    if len(encoded) > max_bytes:
        text = encoded[:max_bytes].decode("utf-8", "surrogateescape" if lossy else "ignore")
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


def compare_wheel(wheel, dist_name, result, check, rows, real_site, dist_info_rel, rescan, changed_lines,
                  diff_max_bytes, already, deadline=None):
    try:
        path = find_wheel(wheel, dist_name, result["version"], dict((r.path, r) for r in rows))
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
            if not inside(label):
                continue
            if deadline is not None:
                deadline.check("diffing changed files against the wheel (%d done; the hashes were all checked)" % len(diffs))
            record, lines = _diff_one(zf, label, full, label, max(256, int(diff_max_bytes)))
            diffs.append(record)
            if lines is not None:
                changed_lines[label] = lines
        result["diffs"] = diffs


# ---------------------------------------------------------------------------
# The drift report's diffs (drift_info)
# ---------------------------------------------------------------------------

#: Defaults of drift_info's bounds: files diffed per host, bytes of one diff, bytes of all the diffs of a host.
DIFF_MAX_FILES = 10
DIFF_MAX_BYTES = 64 << 10
DIFF_MAX_TOTAL = 256 << 10


def find_in_dirs(wheel_dirs, dist_name, version, record=None):
    """(wheel path, None) for ``dist_name`` ``version`` from the first of ``wheel_dirs`` that holds one, or
    (None, why not: each directory and what was wrong with it). RECORD: as for find_wheel."""
    looked = []
    for directory in wheel_dirs or ():
        if not os.path.isdir(directory):
            looked.append("%s (not a directory)" % directory)
            continue
        try:
            return find_wheel(directory, dist_name, version, record), None
        except AmbiguousWheel as exc:
            looked.append("%s (%s)" % (directory, exc.short))
        except IntegrityError:
            looked.append(directory)
        except OSError as exc:
            looked.append("%s (cannot be read: %s)" % (directory, exc.strerror or exc))
    return None, "no wheel of %s %s in %s" % (dist_name, version, ", ".join(looked) or "no directory")


def _one_line(text):
    return printable_block(text).replace("\n", "\\n").replace("\t", "\\t")


def installed_record(dist_info):
    """path -> RecordRow of the installed RECORD in ``dist_info`` ({} when it cannot be read)."""
    data = read_small(os.path.join(dist_info, "RECORD"), RECORD_LIMIT + 1) if dist_info else None
    if not data or len(data) > RECORD_LIMIT:
        return {}
    try:
        rows, dummy = parse_record(data, limit=RECORD_LIMIT)
    except (IntegrityError, ValueError):
        return {}
    return dict((r.path, r) for r in rows)


def _record_mismatch(zf, info, row):
    """Why the wheel's copy is not the file the installed RECORD row names (another build of the same version), or
    None (it is, or RECORD gives no hash to tell)."""
    if row is None or row.algorithm is None or info.file_size > TEXT_LIMIT:
        return None
    if hashlib.new(row.algorithm, zf.read(info)).digest() != row.digest:
        return "the wheel's copy is not the one RECORD names (another build of the same version?); no diff"
    return None


def diff_modified(wheel_dirs, dist_name, version, site_packages, items, max_files=DIFF_MAX_FILES,
                  max_bytes=DIFF_MAX_BYTES, max_total=DIFF_MAX_TOTAL, deadline=None, dist_info=None):
    """Unified diffs of changed installed files against the pristine wheel, bounded, safe to show.

    ``items``: the changed files as verify() lists them (dicts with ``path``
    relative to ``site_packages`` and ``class``), in the order to diff them. The wheel is the one of
    ``dist_name`` ``version`` in the first of ``wheel_dirs`` that holds one.
    At most ``max_files`` files are diffed, each diff is cut at
    ``max_bytes`` and, once the diffs reach ``max_total`` bytes together,
    the rest are listed without their text. A file whose wheel copy is not
    the one the installed RECORD in ``dist_info`` names (a wheel of another
    build with the same version) is not diffed. ``deadline`` (bounded.Deadline): checked before each file.

    Returns {"wheel": path or None, "files": [{"path", "class", "diff",
    "truncated", "note"}], "bytes": size of the diffs, "not_diffed": files
    left out by max_files or the deadline, "note": why there are no diffs
    at all, or None}. Diff text is printable_block(): terminal escapes,
    other control characters and bytes that were not UTF-8 are shown as
    backslash escapes.
    """
    out = {"wheel": None, "files": [], "bytes": 0, "not_diffed": 0, "note": None}
    installed = installed_record(dist_info)
    wheel, why = find_in_dirs(wheel_dirs, dist_name, version, installed)
    if wheel is None:
        out["note"] = why
        return out
    out["wheel"] = wheel
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        out["note"] = "the wheel %s cannot be opened: %s" % (wheel, exc)
        return out
    with zf:
        for index, item in enumerate(items):
            if len(out["files"]) >= max_files:
                out["not_diffed"] = len(items) - index
                break
            if deadline is not None and deadline.passed():
                out["not_diffed"] = len(items) - index
                out["note"] = deadline.message("the diffs were made (%d of %d made)" % (index, len(items)))
                break
            rel = item["path"]
            entry = {"path": rel, "class": item.get("class", "modified"), "diff": "", "truncated": False, "note": None}
            out["files"].append(entry)
            if not inside(rel):
                entry["note"] = "not a path inside site-packages; no diff"
                continue
            try:
                info = zf.getinfo(rel)
            except KeyError:
                entry["note"] = "not in the wheel %s; no diff" % os.path.basename(wheel)
                continue
            try:
                mismatch = _record_mismatch(zf, info, installed.get(rel))
                if mismatch:
                    entry["note"] = mismatch
                    continue
                made, dummy = _diff_one(zf, rel, os.path.join(site_packages, *rel.split("/")), rel, max_bytes,
                                        lossy=True, label=_one_line(rel))
            except (OSError, zipfile.BadZipFile, RuntimeError, ValueError, EOFError) as exc:
                entry["note"] = "the wheel's copy cannot be read: %s; no diff" % exc
                continue
            text = printable_block(made["diff"])
            size = len(text.encode("utf-8"))
            entry["truncated"] = made["truncated"]
            if made.get("note"):
                entry["note"] = made["note"]
            elif not text:
                entry["note"] = "no difference in the text (line endings or a change a text diff does not show)"
            elif out["bytes"] + size > max_total:
                entry["note"] = ("diff of %d bytes not returned: the diffs of this host reached the bound of %d bytes "
                                 "(diff_max_total)" % (size, max_total))
            else:
                entry["diff"] = text
                out["bytes"] += size
    return out
