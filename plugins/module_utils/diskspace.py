# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Free space on the filesystem that holds a path (which need not exist yet)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import threading

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import printable_block, valid_text

MIB = 1024 * 1024


class PathCannotExist(ValueError):
    """The path lies below something that is not a directory, so it can never be created."""

    def __init__(self, path, blocker, kind):
        self.path = path
        self.blocker = blocker
        self.kind = kind
        super(PathCannotExist, self).__init__(
            "%s cannot exist: %s is %s, not a directory, so nothing can be created below it"
            % (shown(path), shown(blocker), kind))


class NoAnswer(Exception):
    """The filesystem did not answer in time (a hung network mount)."""

    def __init__(self, path, timeout):
        self.path = path
        self.timeout = timeout
        super(NoAnswer, self).__init__(
            "the filesystem that would hold %s did not answer within %s s (a hung network mount, NFS or FUSE?)"
            % (shown(path), timeout))


def shown(path):
    """PATH as one line of valid text for a message or result: odd bytes, newlines, tabs and every other control
    character as backslash escapes (a path cannot add a line to a message)."""
    return printable_block(valid_text(path)).replace("\n", "\\n").replace("\t", "\\t")


def _kind(path):
    if os.path.isfile(path):
        return "a regular file"
    return "a device, socket or pipe"


def nearest_existing(path):
    """PATH itself, or its nearest ancestor that exists (links are followed, as the filesystem would).

    Raises PathCannotExist when that ancestor is not a directory (a regular
    file, a device...): PATH lies below it and can never be created there.
    """
    path = os.path.abspath(path)
    start = path
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if path != start and not os.path.isdir(path):
        raise PathCannotExist(start, path, _kind(path))
    return path


def mount_point(path):
    """The mount point of the filesystem that holds the existing PATH."""
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_space(path, statvfs=None):
    """Space on the filesystem that would hold PATH, as a dict.

    free_mib is what an unprivileged user may still write (f_bavail, as df
    shows it); total_mib the filesystem's size; checked is the existing path
    that was measured; mount its mount point.
    """
    checked = nearest_existing(path)
    st = (statvfs or os.statvfs)(checked)
    frsize = st.f_frsize or st.f_bsize
    return {
        "path": shown(path),
        "checked": shown(checked),
        "mount": shown(mount_point(checked)),
        "exists": checked == os.path.abspath(path),
        "free_mib": (st.f_bavail * frsize) // MIB,
        "total_mib": (st.f_blocks * frsize) // MIB,
    }


def free_space_bounded(path, timeout, statvfs=None, timeout_shown=None):
    """free_space(PATH) in a daemon thread; NoAnswer when it takes more than TIMEOUT seconds.

    A stat of a hung network mount cannot be interrupted: the thread is left
    behind (it ends with the process).
    """
    box = {}

    def work():
        try:
            box["result"] = free_space(path, statvfs=statvfs)
        except Exception as exc:  # pylint: disable=broad-except
            box["error"] = exc

    worker = threading.Thread(target=work, name="free-space", daemon=True)
    worker.start()
    worker.join(timeout)
    if "error" in box:
        raise box["error"]
    if "result" not in box:
        raise NoAnswer(path, timeout if timeout_shown is None else timeout_shown)
    return box["result"]


def check_paths(entries, timeout, statvfs=None, clock=None):
    """Measure every entry ({path, min_free_mib, purpose}) under one TIMEOUT; return (checks, problems).

    ``checks`` holds each entry's free_space() result with its min_free_mib
    and purpose. The needs of the paths on one filesystem (one mount point)
    add up: 20 GiB of caches and 1 GiB of /tmp on the root filesystem need
    21 GiB free there. ``problems`` has one sentence per filesystem short of
    room, naming each path and what it is for, and one per path that could
    not be measured.
    """
    clock = clock or __import__("time").monotonic
    deadline = clock() + timeout
    checks, problems, mounts, seen = [], [], {}, {}
    for entry in entries:
        path, need = entry["path"], int(entry.get("min_free_mib") or 0)
        purpose = shown(entry.get("purpose") or "this task")
        real = os.path.realpath(os.path.abspath(path))
        if real in seen:
            # the same place named twice: its needs once, the larger
            seen[real]["min_free_mib"] = max(seen[real]["min_free_mib"], need)
            seen[real]["purpose"] += "; " + purpose
            continue
        left = deadline - clock()
        if left <= 0:
            problems.append("%s (for %s) was not measured: the time limit of %s s passed first" % (
                shown(path), purpose, timeout))
            continue
        try:
            result = free_space_bounded(path, left, statvfs=statvfs, timeout_shown=timeout)
        except (NoAnswer, PathCannotExist) as exc:
            problems.append("%s (for %s): %s" % (shown(path), purpose, exc))
            continue
        except (OSError, ValueError) as exc:
            problems.append("%s (for %s) could not be measured: %s" % (shown(path), purpose, shown(str(exc))))
            continue
        result.update(min_free_mib=need, purpose=purpose)
        checks.append(result)
        seen[real] = result
        mounts.setdefault(result["mount"], []).append(result)
    for mount, found in mounts.items():
        needed = sum(check["min_free_mib"] for check in found)
        free = min(check["free_mib"] for check in found)
        if needed and free < needed:
            needs = ["%d MiB for %s (%s)" % (c["min_free_mib"], c["purpose"], c["path"]) for c in found if c["min_free_mib"]]
            problems.append("only %d MiB are free on the filesystem mounted at %s, which needs %d MiB: %s" % (
                free, mount, needed, "; ".join(needs)))
    return checks, problems
