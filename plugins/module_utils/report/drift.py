# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drift report's diffs, on the control node: file names under the report directory and the Markdown excerpts.

Pure functions (the filters gpufleet.vllm.drift_diff_files and
drift_diff_markdown); the playbooks write what they return. Input is what
drift_info returned for each host (its ``diffs``), read again as untrusted:
host names and file paths become file names only when they are plain
(letters, digits, ``._-+@=,~``; no ``..``, no empty part); any other name
gets a file named after its hash, so nothing is written outside
``diffs/<host>/``. Every text shown goes through safetext.printable_block(),
and a host's text in the Markdown (notes, classes, paths) is escaped or in a
code span: it cannot make a heading, HTML, a link or an image of its own.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import re

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import markdown_inline, printable_block
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import one_line as safe_one_line

DIFFS_DIR = "diffs"
#: Lines of each diff shown in the report (from its first hunk).
EXCERPT_LINES = 12

_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\Z")
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+@=,~-]{0,199}\Z")
_PATH_MAX = 1000
_RENAMED = "_renamed"


def one_line(value):
    """VALUE on one line, every control character, invisible character and odd byte as a visible escape
    (safetext.one_line)."""
    return safe_one_line(value)


def md_text(value, block_start=False):
    """VALUE (a host's note, a class name) as Markdown text on one line that shows exactly VALUE: no heading, HTML,
    link or emphasis of its own (safetext.markdown_inline)."""
    return markdown_inline(one_line(value), block_start)


def _hashed(value, prefix):
    return "%s%s" % (prefix, hashlib.sha256(one_line(value).encode("utf-8")).hexdigest()[:16])


def host_dir(host):
    """The directory of HOST's diffs, relative to the report directory: diffs/<host>, or diffs/_host-<hash> when the
    name is not plain."""
    host = host if isinstance(host, str) else str(host)
    return "%s/%s" % (DIFFS_DIR, host if _HOST.match(host) and ".." not in host else _hashed(host, "_host-"))


def plain_path(path):
    """Whether PATH (relative, / separated) can be a file name under a host's directory as it is."""
    if not isinstance(path, str) or not path or len(path) > _PATH_MAX:
        return False
    parts = path.split("/")
    if parts[0] == _RENAMED:
        return False  # the directory of the hashed names: a host's own _renamed/<hash> would take another's name
    return all(_PART.match(part) and part not in (".", "..") for part in parts)


def diff_entries(hosts):
    """The diff files of the report: [{"host", "path", "file", "content"}] in host order, then path order.

    HOSTS: [(host, drift_info's ``diffs``)]. Only diffs with text get a file;
    ``file`` is relative to the report directory. A name that is not plain
    (see plain_path) is written as <host dir>/_renamed/<hash>.diff, and the
    file's first line names the path, escaped. Two names that would clash
    (a file where another needs a directory) get the hashed name too; a
    path under ``_renamed/`` is not plain, and a name taken already gets a
    counter (``<hash>-2.diff``), so every file name is unique per host.
    """
    entries = []
    for host, diffs in hosts:
        if not isinstance(diffs, dict):
            continue
        base = host_dir(host)
        for item in diffs.get("files") or []:
            if not isinstance(item, dict) or not item.get("diff"):
                continue
            path = item.get("path") if isinstance(item.get("path"), str) else str(item.get("path"))
            text = printable_block(item["diff"])
            if plain_path(path):
                name, header = "%s/%s.diff" % (base, path), ""
            else:
                name = "%s/_renamed/%s.diff" % (base, _hashed(path, ""))
                header = "# the diff of %s (its name is not a plain file name)\n" % one_line(path)
            entries.append({"host": host, "path": path, "file": name, "content": header + text})
    # a file where another entry needs a directory: give it the hashed name
    dirs = set()
    for entry in entries:
        parts = entry["file"].split("/")
        dirs.update("/".join(parts[:n]) for n in range(1, len(parts)))
    seen = set()
    for entry in entries:
        if entry["file"] in dirs or entry["file"] in seen:
            entry["file"] = "%s/_renamed/%s.diff" % (host_dir(entry["host"]), _hashed(entry["path"], ""))
            if not entry["content"].startswith("# the diff of "):
                entry["content"] = "# the diff of %s\n" % one_line(entry["path"]) + entry["content"]
        if entry["file"] in seen:
            # the same path twice (or two paths of one hash): a counter keeps every diff, none overwrites another
            stem = entry["file"][:-len(".diff")]
            number = 2
            while "%s-%d.diff" % (stem, number) in seen:  # at most len(entries) tries
                number += 1
            entry["file"] = "%s-%d.diff" % (stem, number)
        seen.add(entry["file"])
    return entries


def excerpt(diff, lines=EXCERPT_LINES):
    """(the first LINES lines of DIFF from its first hunk on, how many lines of the diff were left out)."""
    all_lines = printable_block(diff).splitlines()
    start = 0
    for index, line in enumerate(all_lines):
        if line.startswith("@@"):
            start = index
            break
    shown = all_lines[start:start + max(1, lines)]
    return shown, len(all_lines) - start - len(shown)


def fence(text):
    """A code fence longer than any run of backticks in TEXT (so the text cannot close it)."""
    runs = [len(run) for run in re.findall("`+", text)]
    return "`" * max(3, max(runs or [0]) + 1)


def code(text):
    """TEXT as a Markdown code span, one line, whatever backticks it holds."""
    text = one_line(text)
    ticks = "`" * (max([len(run) for run in re.findall("`+", text)] or [0]) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return "%s%s%s%s%s" % (ticks, pad, text, pad, ticks)


def _count(value):
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


_CLASS_WORDS = {"modified": "modified", "size_differs": "of another size than RECORD says"}


def markdown(hosts, lines=EXCERPT_LINES, setting="fleet_wheel_dirs"):
    """The report's section on what drifted: per host with changed files, per file the first LINES lines of its diff
    in a fenced block and a link to the whole diff. HOSTS as for diff_entries. Empty when no host has changed files."""
    files = dict(((e["host"], e["path"]), e["file"]) for e in diff_entries(hosts))
    out = []
    for host, diffs in hosts:
        if not isinstance(diffs, dict) or not (diffs.get("files") or diffs.get("note") or diffs.get("not_diffed")):
            continue
        wheel = diffs.get("wheel")
        against = " against %s" % code(str(wheel).rsplit("/", 1)[-1]) if wheel else ""
        out.extend(["", "### %s: what changed in its vLLM files%s" % (md_text(host), against), ""])
        if diffs.get("note"):
            note = md_text(diffs["note"], block_start=True)
            if not diffs.get("wheel_dirs") and not wheel and "(wheel_dirs)" in note:
                note = ("No diffs: %s names no directory of wheels on the host. Set it to the directories that hold the "
                        "wheels of the builds the fleet runs (the mirror the hosts install from), and the report shows "
                        "what changed in each modified file." % setting)
            out.extend(["%s" % note, ""])
        for item in diffs.get("files") or []:
            if not isinstance(item, dict):
                continue
            path = item.get("path") if isinstance(item.get("path"), str) else str(item.get("path"))
            what = _CLASS_WORDS.get(item.get("class"), md_text(item.get("class") or "changed"))
            full = files.get((host, path))
            if full:
                shown, left = excerpt(item["diff"], lines)
                block = "\n".join(shown)
                mark = fence(block)
                more = ("the first %d lines; %d more in the whole diff" % (len(shown), left) if left > 0
                        else "the whole diff")
                if item.get("truncated"):
                    more += ", which was cut at the diff_max_bytes bound"
                out.extend(["%s (%s), %s: [%s](<%s>)" % (code(path), what, more, full, full), "",
                            "%sdiff" % mark, block, mark, ""])
            else:
                why = md_text(item.get("note") or "no text difference")
                out.extend(["%s (%s): no diff: %s" % (code(path), what, why), ""])
        left = _count(diffs.get("not_diffed"))
        if left and diffs.get("files"):
            out.extend(["%d more changed file%s not diffed (the bounds diff_max_files and max_list of drift_info, or "
                        "its time limit)." % (left, "" if left == 1 else "s"), ""])
    return "\n".join(out).strip("\n") + "\n" if out else ""
