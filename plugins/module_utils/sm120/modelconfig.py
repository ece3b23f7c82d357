# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The model config edit of a module: which files, plan them all, write them, sum up.

Used by the ``sm120_config`` module (every model directory of the fleet,
all planned before any is written); the audit (drift_info) plans with
:mod:`jsonedit` directly. The text edit itself is :mod:`jsonedit`'s; this file
holds the steps around it:

- :func:`entries`: the files to consider for a ``path`` and its ``files`` or
  ``absent`` option;
- :func:`plan_entries`: every file read and checked under a deadline, nothing
  written (a failure says how many files were planned);
- :func:`apply_plans`: the planned edits written (not in check mode) under
  the same deadline, with their diffs; a failure names the files already
  written and the backups made;
- :func:`summary`: the one-line message, the count and ``changed``.

Every failure is a :class:`ModelConfigError` whose ``msg`` is a sentence for
the operator and whose ``details`` go into the module's failure result.
The planner, the writer and the clock are arguments, so a module (and its
tests) decide which ones run.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.jsonedit import (
    MAX_SIZE,
    JSONEditError,
    diff_of,
    directory_entries,
    plan_file,
    printable,
    public_result,
    write_plan,
)


class ModelConfigError(Exception):
    """An edit step that failed: ``msg`` for the operator, ``details`` (file, line, column, changed, files) for the
    failure result."""

    def __init__(self, msg, **details):
        super(ModelConfigError, self).__init__(msg)
        self.msg = msg
        self.details = details


def entries(path, files=None, absent=None):
    """(file path, key paths, required, base directory) for each file to consider under PATH.

    PATH is a model directory (FILES, or jsonedit's defaults when FILES and
    ABSENT are both None) or one JSON file (ABSENT lists its key paths).
    Raises ModelConfigError with the sentence to show.
    """
    if not os.path.exists(path):
        raise ModelConfigError('%s does not exist. Give an existing model directory or JSON file.' % path)
    if os.path.isdir(path):
        if absent is not None:
            raise ModelConfigError('%s is a directory: list the files and their keys in "files", or give the path '
                                   'of one JSON file together with "absent".' % path)
        try:
            return [entry + (path,) for entry in directory_entries(path, files)]
        except JSONEditError as exc:
            raise ModelConfigError(exc.msg)
    if files is not None:
        raise ModelConfigError('%s is a file: give its keys in "absent" ("files" is for a model directory).' % path)
    if not absent:
        raise ModelConfigError('%s is a file: "absent" must list at least one key path.' % path)
    return [(path, absent, True, None)]


def late(deadline, path):
    """'The time limit of N s (timeout) passed before PATH' (PATH printable)."""
    text = deadline.message(printable(path))
    return text[:1].upper() + text[1:]


def written_so_far(results):
    """A sentence naming the files already written and the backups made (RESULTS: public file results)."""
    written = [r['written'] for r in results if r.get('written')]
    backups = [r['backup_file'] for r in results if r.get('backup_file')]
    if not written and not backups:
        return ' No other file was written.'
    text = ''
    if written:
        text += ' Already written before this failure: %s.' % ', '.join(written)
    if backups:
        text += ' Backups made: %s.' % ', '.join(backups)
    return text


def plan_entries(file_entries, deadline, symlinks='refuse', max_size=MAX_SIZE, planner=plan_file, planned=0):
    """The plan of every entry of :func:`entries`, in order; nothing is written.

    DEADLINE is checked before each file. PLANNED: files already planned
    elsewhere (another directory of the same run), counted in the message
    when the time runs out. Raises ModelConfigError (``changed=False``, the
    ``file``, and the ``line`` and ``column`` of malformed JSON).
    """
    plans = []
    for path, keys, required, base in file_entries:
        if deadline.passed():
            raise ModelConfigError('%s was planned. Nothing was changed (%d file(s) planned, none written).' % (
                late(deadline, path), planned + len(plans)), changed=False, file=printable(path))
        try:
            plans.append(planner(path, keys, required=required, symlinks=symlinks, base=base, max_size=max_size))
        except JSONEditError as exc:
            details = dict((k, v) for k, v in (('file', exc.path), ('line', exc.line), ('column', exc.column))
                           if v is not None)
            raise ModelConfigError(exc.msg, changed=False, **details)
        except (OSError, ValueError, RecursionError, MemoryError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else '%s: %s' % (type(exc).__name__, exc)
            raise ModelConfigError('cannot plan the edit of %s: %s. Nothing was changed.' % (
                printable(path), printable(reason)), changed=False, file=printable(path))
    return plans


def apply_plans(module, plans, deadline, backup=False, writer=write_plan, earlier=()):
    """Write the changed plans (not in check mode): (public file results, diffs).

    DEADLINE is checked before each write. EARLIER: the public results of
    files handled before these (another directory of the same run), named in
    a failure's message and listed in its ``files``. Raises
    ModelConfigError (``file``, ``changed`` and ``files``: the results so
    far, the failing file's last).
    """
    earlier = list(earlier)
    written_any = any(r.get('written') or r.get('backup_file') for r in earlier)
    results = []
    diffs = []
    for plan in plans:
        public = public_result(plan)
        if plan['changed']:
            diffs.append(diff_of(plan))
            if not module.check_mode:
                if deadline.passed():
                    raise ModelConfigError('%s was written.%s' % (late(deadline, plan['_write_path']),
                                                                  written_so_far(earlier + results)),
                                           file=printable(plan['_write_path']), changed=written_any,
                                           files=earlier + results)
                try:
                    backup_file = writer(module, plan, backup=backup)
                except JSONEditError as exc:
                    if exc.backup_file:
                        public['backup_file'] = printable(exc.backup_file)
                    raise ModelConfigError(exc.msg + written_so_far(earlier + results), file=exc.path,
                                           changed=written_any or bool(exc.backup_file),
                                           files=earlier + results + [public])
                written_any = True
                public['written'] = printable(plan['_write_path'])
                if backup_file:
                    public['backup_file'] = printable(backup_file)
        results.append(public)
    return results, diffs


def summary(results, check_mode):
    """(msg, removed_count, changed) of the public file results of a run."""
    removed_count = sum(r['removed_count'] for r in results)
    changed_files = sum(1 for r in results if r['changed'])
    if removed_count:
        verb = 'would remove' if check_mode else 'removed'
        msg = '%s %d key(s) from %d file(s)' % (verb, removed_count, changed_files)
    else:
        msg = 'nothing to remove: the keys are already absent'
    return msg, removed_count, bool(removed_count)
