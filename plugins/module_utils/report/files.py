# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Report files on the control node, written whole or not at all.

A reader (a person, a CI job, a dashboard) never sees half a summary or a
report: each file is written to a temporary file beside it and moved over it
in one step (``AnsibleModule.atomic_move``); a failure part-way leaves the
old file, if any, and no temporary file behind.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import tempfile


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
