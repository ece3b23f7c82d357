# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A set of report files below a report directory in one task: the action gpufleet.vllm.report_files."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import files as reportfile
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import control_character, shown, valid_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.writers.common import WriterFailed

ARGUMENT_SPEC = dict(
    path=dict(type='path', required=True),
    files=dict(type='list', elements='dict', required=True),
    max_files=dict(type='int', default=10000),
    max_bytes=dict(type='int', default=268435456),
)


def path_problem(relative):
    """Why RELATIVE cannot be written below the report directory, or None."""
    if not isinstance(relative, str) or not relative:
        return "the path is empty or not text"
    if control_character(relative) is not None:
        return "the path holds a control character"
    if relative.startswith("/"):
        return "the path is absolute"
    for part in relative.split("/"):
        if part in ("", ".", ".."):
            return "the path has an empty, '.' or '..' part"
        if len(valid_text(part).encode("utf-8")) > 255:
            return "a part of the path is longer than 255 bytes"
    return None


def tree_problem(base, relative, planned_dirs, planned_files):
    """Why RELATIVE cannot be written below BASE as it is now, given the files before it in this run, or None."""
    parts = relative.split("/")
    here = base
    for depth, part in enumerate(parts[:-1]):
        here = os.path.join(here, part)
        prefix = "/".join(parts[:depth + 1])
        if prefix in planned_files:
            return "%s is another file of this run" % prefix
        if os.path.islink(here):
            return "%s is a symbolic link; report files are not written through links" % here
        if os.path.lexists(here) and not os.path.isdir(here):
            return "%s is there and is not a directory" % here
    target = os.path.join(base, relative)
    if relative in planned_files:
        return "another file of this run has the same path"
    if relative in planned_dirs:
        return "another file of this run needs it as a directory"
    if os.path.isdir(target) and not os.path.islink(target):
        return "a directory of that name is there"
    return None


def run(params, mode):
    """Check every path, then write the files below params['path'] (nothing in check mode); the task's result."""
    base, files = params['path'], params['files']
    if len(files) > params['max_files']:
        raise WriterFailed('%d report files were given, more than max_files (%d); nothing was written.'
                           % (len(files), params['max_files']))
    planned, total = [], 0
    planned_dirs, planned_files = set(), set()
    for index, entry in enumerate(files):
        relative, content = entry.get('file'), entry.get('content')
        problem = path_problem(relative)
        if problem is None and not isinstance(content, str):
            problem = "its content is not text"
        if problem is None:
            problem = tree_problem(base, relative, planned_dirs, planned_files)
        if problem:
            raise WriterFailed('Report file %d (%s) cannot be written below %s: %s; nothing was written.'
                               % (index + 1, shown(valid_text(relative)), base, problem))
        data = valid_text(content).encode('utf-8')
        total += len(data)
        planned.append((relative, data))
        planned_files.add(relative)
        parts = relative.split("/")
        planned_dirs.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
    if total > params['max_bytes']:
        raise WriterFailed('The report files hold %d bytes, more than max_bytes (%d); nothing was written.'
                           % (total, params['max_bytes']))
    if mode.check_mode:
        return dict(changed=False, files=[relative for relative, dummy in planned], bytes=total, check_mode=True)
    written = []
    for relative, data in planned:
        try:
            # checked again: the tree may have changed since the plan (another run writing the same directory)
            problem = tree_problem(base, relative, set(), set())
            if problem:
                raise ValueError(problem)
            reportfile.write_below(base, relative, data)
        except (OSError, IOError, ValueError) as exc:
            raise WriterFailed('Could not write the report file %s below %s: %s. Written before it: %d of %d.'
                               % (shown(relative), base, to_native(exc), len(written), len(planned)),
                               files=written, bytes=total, check_mode=False)
        written.append(relative)
    # report files are new files on the control node each run, not a change to the fleet
    return dict(changed=False, files=written, bytes=total, check_mode=False)
