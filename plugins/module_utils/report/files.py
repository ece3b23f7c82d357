# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Report files on the control node, written whole or not at all.

A reader (a person, a CI job, a dashboard) never sees half a summary or a
report: each file is written to a temporary file beside it and moved over it
in one step (``AnsibleModule.atomic_move``); a failure part-way leaves the
old file, if any, and no temporary file behind.

:func:`write_below` writes a file below a report directory without ever
following a link below it: each directory is opened relative to the one above
it (``O_NOFOLLOW``), so a link swapped in after a check is refused, not
followed.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import binascii
import errno
import os
import stat
import tempfile

_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# what opening a symbolic link with O_NOFOLLOW answers (Linux: ELOOP; the BSDs: EMLINK, or EFTYPE for a file)
_LINK_ERRNOS = (errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", errno.ELOOP))


def write_atomic(module, path, data, mode=0o644):
    """Write DATA (text, as UTF-8, or bytes) to PATH in one step; its directory must exist."""
    if not isinstance(data, bytes):
        data = data.encode("utf-8")
    # a short fixed prefix: any name the file system takes for PATH fits the temporary name too
    handle, tmp = tempfile.mkstemp(prefix=".gpufleet-tmp-", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _open_below(fd, part, here):
    """The directory PART of the opened directory FD, opened without following a link (made when missing)."""
    for attempt in (1, 2):
        try:
            return os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ENOENT and attempt == 1:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                continue
            try:
                link = stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
            except OSError:
                link = exc.errno in _LINK_ERRNOS
            if link:
                raise ValueError("%s is a symbolic link; report files are not written through links" % here)
            if exc.errno == errno.ENOTDIR:
                raise ValueError("%s is there and is not a directory" % here)
            raise
    raise ValueError("%s could not be made (it disappeared again)" % here)


def write_below(base, relative, data):
    """Write DATA (bytes) to BASE/RELATIVE in one step: each directory below BASE opened relative to the one above
    it without following a link (a link swapped in after the check is refused, not followed), made where missing;
    the file written to a temporary file beside it and renamed over it, both relative to its directory. BASE itself
    is the operator's (a link to it is followed). A file that is there keeps its mode and, where allowed, its owner;
    a new one gets 0666 less the umask. Raises ValueError (a link or a file in the way) or OSError."""
    os.makedirs(base, 0o755, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | _DIRECTORY)
    temp = None
    try:
        parts = relative.split("/")
        here = base
        for part in parts[:-1]:
            here = os.path.join(here, part)
            below = _open_below(fd, part, here)
            os.close(fd)
            fd = below
        name = parts[-1]
        temp = ".gpufleet-tmp-%s" % binascii.hexlify(os.urandom(8)).decode("ascii")
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
            try:
                there = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                there = None
            if there is not None and stat.S_ISREG(there.st_mode):
                os.fchmod(out, stat.S_IMODE(there.st_mode))
                try:
                    os.fchown(out, there.st_uid, there.st_gid)
                except OSError:
                    pass  # (another owner's file: it becomes ours, as a copy would)
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(out, 0o666 & ~umask)
        finally:
            os.close(out)
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        temp = None
    finally:
        if temp is not None:
            try:
                os.unlink(temp, dir_fd=fd)
            except OSError:
                pass
        os.close(fd)
