# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the control-node writers share: their failure, and the file move report.files.write_atomic calls."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import shutil


class WriterFailed(Exception):
    """The task fails with MSG; RESULT holds the other keys of its result (what was written before, the lines)."""

    def __init__(self, msg, **result):
        super(WriterFailed, self).__init__(msg)
        self.msg = msg
        self.result = result


class ControllerFiles(object):
    """The ``atomic_move`` of report.files.write_atomic on the control node, as AnsibleModule.atomic_move does it.

    The temporary file lies beside the target (same directory, same file system), so one rename replaces the
    target. A file that is there keeps its mode and, where allowed, its owner; a new one gets 0666 less the umask.
    """

    @staticmethod
    def atomic_move(src, dest):
        creating = not os.path.lexists(dest)
        if not creating and not os.path.islink(dest):
            shutil.copymode(dest, src)
            there = os.stat(dest)
            try:
                os.chown(src, there.st_uid, there.st_gid)
            except OSError:
                pass  # (another owner's file: it becomes ours, as a copy would)
        os.rename(src, dest)
        if creating:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(dest, 0o666 & ~umask)


class Mode(object):
    """How the task runs: check mode, diff mode, and where its warnings go (``warnings``, shown by Ansible)."""

    def __init__(self, check_mode=False, diff=False):
        self.check_mode = bool(check_mode)
        self.diff = bool(diff)
        self.warnings = []

    def warn(self, message):
        self.warnings.append(message)
