#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: remove_artifacts
short_description: Remove debug artifacts (tensor dumps) by file name pattern inside allowed directories
version_added: 0.1.0
description:
  - Removes files whose names match shell-style patterns inside the listed directories, for example the
    C(embed_debug_tp0.pt) ... tensor dumps a hand-patched vLLM leaves in C(/tmp), and reports how many files and
    bytes went.
  - Never follows a symbolic link. Directories are opened one component at a time without following links and every
    file is removed relative to its open directory, so a directory swapped for a link during the run is not entered.
    A link whose name matches a pattern is removed as a link (or skipped, see O(symlinks)); its target is never
    touched.
  - Inputs that could escape are refused before anything is looked at; relative directories, directories containing
    C(..), directories that resolve through a symbolic link, system directories (C(/), C(/etc), C(/usr), C(/bin),
    C(/sbin), C(/lib), C(/lib32), C(/lib64), C(/libx32), C(/boot), C(/dev), C(/proc), C(/sys), C(/run),
    C(/var/lib)) and any directory below C(/etc), C(/usr), C(/bin), C(/sbin), the C(/lib) ones, C(/boot), C(/dev)
    (except C(/dev/shm)), C(/proc), C(/sys), C(/run) or C(/var/lib), judged on the path as given and as resolved; a
    recursive scan does not enter them either (they are listed in RV(skipped)). Patterns that are absolute, contain
    C(/) or C(..), or are not anchored to dump names are refused.
  - A pattern is anchored when it has at least 3 fixed characters outside C(*), C(?) and C([...]), at least 3 of them
    before a file-type ending (C(*.pem), C(*.gguf) or C(x*.tar.gz) name files by their type, not as dumps), and
    matches none of a list of ordinary names (C(passwd), C(config.json), C(a), C(.bashrc), C(model.safetensors),
    C(libfoo.so.1), C(README), C(model.pt), ...). So C(*), C(*[!.]*), C(*.pt) or C(*.json) are refused, and the error
    says why (the ordinary files the pattern matched, or the ending).
  - Names that are not UTF-8 are shown in the result with the odd bytes escaped (C(dump\xff_tp0.pt)).
  - Files held open by a running process are found through C(/proc/<pid>/fd) and reported (see O(in_use)).
options:
  paths:
    description:
      - Absolute directories to look in. A directory that does not exist is reported in RV(skipped), not an error.
    type: list
    elements: path
    default: [/tmp]
  patterns:
    description:
      - Shell-style patterns (C(*), C(?), C([...])) matched, case-sensitively, against file names (not paths).
      - Each must be anchored to dump names (see the description), as the default ones are.
    type: list
    elements: str
    default: [nomla_debug_tp*.pt, embed_debug_tp*.pt, mla_debug_layer*_tp*.pt]
  recursive:
    description:
      - Also look in subdirectories (never through a link to a directory).
    type: bool
    default: false
  max_depth:
    description:
      - With O(recursive=true), how many levels of subdirectories to enter below each path (V(1) means the
        subdirectories of the path but not theirs). Unlimited when not set.
      - Only valid with O(recursive=true).
    type: int
  symlinks:
    description:
      - V(remove_link) removes a matching symbolic link itself; its target is never opened, followed or removed.
      - V(skip) leaves matching links alone and lists them in RV(skipped).
    type: str
    choices: [remove_link, skip]
    default: remove_link
  in_use:
    description:
      - What to do with a matching file that a running process holds open (found in C(/proc/<pid>/fd); processes of
        other users are only visible to root). At most 65536 descriptors are read per process; a process with more
        counts in RV(processes_unreadable).
      - V(report) removes it and lists the processes in RV(removed[].in_use_by). Its space is freed only when the
        process closes it, which RV(bytes_held) counts.
      - V(skip) leaves it and lists it in RV(skipped).
      - V(fail) fails the task before anything is removed.
    type: str
    choices: [report, skip, fail]
    default: report
  min_age:
    description:
      - Only remove files last modified at least this long ago, for example V(10m) or V(2h) (units C(s), C(m), C(h),
        C(d), C(w); a plain number is seconds). Younger files are listed in RV(skipped).
    type: str
  max_entries:
    description:
      - The most directory entries the scan reads, over all O(paths) and their subdirectories together. Past it the
        task fails before anything is removed, naming the directory it had reached.
      - However deep O(recursive=true) goes, the scan enters at most 2000 levels of subdirectories (and O(max_depth)
        can be at most 2000); a deeper tree fails the task the same way, naming the directory.
    type: int
    default: 100000
  timeout:
    description:
      - The most seconds the whole task may take (scan, the search of C(/proc) for processes holding the files,
        removal). When it is reached the task fails; the files already removed are in RV(removed), RV(count) and
        RV(bytes_freed), and the message says how many went.
    type: int
    default: 600
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Lists what would be removed in RV(would_remove), with the same counts, and removes nothing.
  diff_mode:
    support: full
    details: The list of matching files before and after.
notes:
  - Sizes are apparent sizes (C(st_size)); RV(bytes_freed_human) uses decimal units (1 MB = 1,000,000 bytes).
  - A matching link counts with size 0 (removing it frees no data).
  - The lists in the result hold at most 1000 entries each; RV(count) and RV(bytes_freed) always count everything.
  - Processes holding files open are found on Linux only (C(/proc)); elsewhere none are reported.
requirements:
  - Python 3.10 or newer on the managed host (standard library only).
seealso:
  - module: ansible.builtin.find
  - module: ansible.builtin.file
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Remove the debug tensor dumps from /tmp
  gpufleet.vllm.remove_artifacts:
  register: dumps

- name: Say what went
  ansible.builtin.debug:
    msg: "{{ dumps.count }} files, {{ dumps.bytes_freed_human }}"

- name: See what would go, in a drift audit
  gpufleet.vllm.remove_artifacts:
    paths: [/tmp, /var/tmp]
  check_mode: true
  diff: true

- name: Look one level into subdirectories, only files older than 10 minutes, never a dump still in use
  gpufleet.vllm.remove_artifacts:
    paths: [/tmp]
    patterns: ["*_debug_tp*.pt"]
    recursive: true
    max_depth: 1
    min_age: 10m
    in_use: skip
"""

RETURN = r"""
changed:
  description: Whether files were (or, in check mode, would be) removed.
  returned: always
  type: bool
msg:
  description: One-line summary.
  returned: always
  type: str
  sample: removed 35 file(s) (65.3 MB) from /tmp
check_mode:
  description:
    - Whether the module ran in check mode (nothing removed). Also true for a task with C(check_mode=true) in a run
      without C(--check), where the C(ansible_check_mode) variable is false.
  returned: always
  type: bool
  sample: false
count:
  description: Number of files removed (in check mode, that would be removed).
  returned: always
  type: int
  sample: 35
bytes_freed:
  description: Sum of their sizes in bytes.
  returned: always
  type: int
  sample: 65276224
bytes_freed_human:
  description: RV(bytes_freed) in decimal units.
  returned: always
  type: str
  sample: 65.3 MB
bytes_held:
  description: Bytes of removed files still held open by a process; their space is freed when it closes them.
  returned: always
  type: int
  sample: 0
files:
  description: Number of regular files among RV(count).
  returned: always
  type: int
  sample: 35
links:
  description: Number of symbolic links among RV(count) (removed as links; their targets untouched).
  returned: always
  type: int
  sample: 0
paths:
  description: The paths removed (in check mode, that would be removed); the first 1000.
  returned: always
  type: list
  elements: str
in_use:
  description: The entries of RV(paths) that a running process held open (same fields as RV(removed)).
  returned: always
  type: list
  elements: dict
report:
  description:
    - What an operator reads, one line each - RV(msg), in check mode the paths that would go, each dump held open by a
      process (its space is freed when the process closes it), each entry left alone with the reason.
  returned: always
  type: list
  elements: str
  sample: [removed 35 file(s) (65.3 MB) from /tmp]
removed:
  description: The files removed; empty in check mode.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Full path.
      type: str
      returned: always
      sample: /tmp/embed_debug_tp0.pt
    size:
      description: Size in bytes (0 for a link).
      type: int
      returned: always
    type:
      description: V(file) or V(link).
      type: str
      returned: always
    link_target:
      description: Text of the link (for a link); the target was not touched.
      type: str
      returned: when type is link
    in_use_by:
      description: Processes that held the file open, each with C(pid) and C(name).
      type: list
      elements: dict
      returned: always
      sample: [{pid: 4242, name: python3}]
would_remove:
  description: In check mode, the files that would be removed (same fields as RV(removed)).
  returned: in check mode
  type: list
  elements: dict
skipped:
  description: Matching entries left alone, and directories not read or not followed, each with C(path) and C(reason).
  returned: always
  type: list
  elements: dict
  sample: [{path: /tmp/mla_debug_layer0_tp0.pt, reason: "held open by pid 4242 (python3)"}]
truncated:
  description: Whether a list was cut at 1000 entries.
  returned: always
  type: bool
processes_unreadable:
  description: Processes whose open files could not be inspected (other users' processes when not root).
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.artifacts import (
    DEFAULT_PATHS,
    DEFAULT_PATTERNS,
    LIST_LIMIT,
    MAX_ENTRIES,
    ArtifactError,
    Deadline,
    find_holders,
    human_bytes,
    remove,
    safe_result,
    scan,
    validate_options,
)

DEFAULT_TIMEOUT = 600


def _holders_text(cand):
    return ', '.join('pid %d (%s)' % (h['pid'], h['name'] or '?') for h in cand.in_use_by)


def report_lines(result, check_mode):
    """What an operator reads: the summary, the files in check mode, the dumps held open, what was left alone."""
    lines = [result['msg']]
    if check_mode and result['paths']:
        lines.append('would remove: %s' % ', '.join(result['paths']))
    for entry in result['in_use']:
        lines.append('%s was held open by %s; %s, and its space is freed only when the process closes it or exits.' % (
            entry['path'], ', '.join('pid %s (%s)' % (proc.get('pid'), proc.get('name') or '?') for proc in entry['in_use_by']),
            'it would be removed' if check_mode else 'it was removed'))
    lines.extend('left alone: %s: %s' % (entry.get('path'), entry.get('reason')) for entry in result.get('skipped') or [])
    return lines


def _facts(gone, check_mode):
    """What was removed (or, in check mode, would be): the counts and the first LIST_LIMIT entries."""
    bytes_freed = sum(c.size for c in gone)
    listed = [c.as_dict() for c in gone[:LIST_LIMIT]]
    facts = dict(
        changed=bool(gone),
        count=len(gone),
        bytes_freed=bytes_freed,
        bytes_freed_human=human_bytes(bytes_freed),
        bytes_held=sum(c.size for c in gone if c.in_use_by),
        files=len([c for c in gone if c.kind != 'link']),
        links=len([c for c in gone if c.kind == 'link']),
        paths=[entry['path'] for entry in listed],
        in_use=[entry for entry in listed if entry.get('in_use_by')],
        removed=[] if check_mode else listed,
    )
    if check_mode:
        facts['would_remove'] = listed
    return facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type='list', elements='path', default=list(DEFAULT_PATHS)),
            patterns=dict(type='list', elements='str', default=list(DEFAULT_PATTERNS)),
            recursive=dict(type='bool', default=False),
            max_depth=dict(type='int'),
            symlinks=dict(type='str', choices=['remove_link', 'skip'], default='remove_link'),
            in_use=dict(type='str', choices=['report', 'skip', 'fail'], default='report'),
            min_age=dict(type='str'),
            max_entries=dict(type='int', default=MAX_ENTRIES),
            timeout=dict(type='int', default=DEFAULT_TIMEOUT),
        ),
        supports_check_mode=True,
    )
    params = module.params

    def fail(msg, **extra):
        module.fail_json(**safe_result(dict(extra, msg=msg)))

    try:
        paths, min_age = validate_options(params['paths'], params['patterns'], recursive=params['recursive'],
                                          max_depth=params['max_depth'], min_age=params['min_age'],
                                          max_entries=params['max_entries'], timeout=params['timeout'])
    except ArtifactError as exc:
        fail(str(exc), changed=False)

    gone = []
    try:
        result = _run(module, params, paths, min_age, gone)
    except ArtifactError as exc:
        facts = _facts(gone, module.check_mode)
        text = str(exc)
        if gone:
            text += (' %d file(s) (%s) had been removed before it stopped: they are listed in removed.'
                     % (len(gone), human_bytes(facts['bytes_freed'])))
        else:
            text += ' Nothing was removed.'
        fail(text, check_mode=module.check_mode, **facts)
    except Exception as exc:  # pylint: disable=broad-except
        facts = _facts(gone, module.check_mode)
        fail('remove_artifacts stopped on an unexpected error (%s: %s). %s' % (
            type(exc).__name__, exc, ('%d file(s) (%s) had been removed before it: they are listed in removed.'
                                      % (len(gone), human_bytes(facts['bytes_freed']))) if gone
            else 'Nothing was removed.'), check_mode=module.check_mode, **facts)
    if result.get('failed'):
        fail(result.pop('msg'), **result)
    module.exit_json(**safe_result(result))


def _run(module, params, paths, min_age, gone):
    """Scan, look for holders, remove; return the result (with failed: True when some files could not go).

    Every candidate removed is appended to gone as it goes, so that the
    caller can report it when this raises part-way.
    """
    deadline = Deadline(params['timeout'])
    candidates, skipped = scan(paths, params['patterns'], recursive=params['recursive'],
                               max_depth=params['max_depth'], symlinks=params['symlinks'], min_age=min_age,
                               max_entries=params['max_entries'], deadline=deadline)
    dummy, unreadable = find_holders(candidates, deadline=deadline)
    matched = sorted(c.path for c in candidates)

    held = [c for c in candidates if c.in_use_by]
    if held and params['in_use'] == 'fail':
        return dict(
            failed=True,
            msg='%d matching file(s) are held open by running processes: %s. Nothing was removed. Stop those '
                'processes first, or set in_use to report or skip.'
                % (len(held), '; '.join('%s by %s' % (c.path, _holders_text(c)) for c in held[:20])),
            in_use=[c.as_dict() for c in held[:LIST_LIMIT]], changed=False)
    if held and params['in_use'] == 'skip':
        for cand in held:
            skipped.append({'path': cand.path, 'reason': 'held open by %s' % _holders_text(cand)})
        candidates = [c for c in candidates if not c.in_use_by]

    failed = []
    if module.check_mode:
        gone.extend(candidates)
    else:
        dummy, failed, vanished = remove(candidates, deadline=deadline, removed=gone)
        skipped.extend(vanished)

    result = _facts(gone, module.check_mode)
    count = result['count']
    bytes_freed = result['bytes_freed']
    bytes_held = result['bytes_held']
    result.update(
        changed=count > 0,
        skipped=skipped[:LIST_LIMIT],
        truncated=count > LIST_LIMIT or len(skipped) > LIST_LIMIT,
        processes_unreadable=unreadable,
        check_mode=module.check_mode,
    )
    if module._diff:
        gone_paths = set(c.path for c in gone)
        result['diff'] = dict(
            before_header='files matching %s' % ', '.join(params['patterns']),
            after_header='files matching %s' % ', '.join(params['patterns']),
            before=''.join(p + '\n' for p in matched),
            after=''.join(p + '\n' for p in matched if p not in gone_paths),
        )

    where = ', '.join(paths)
    if count:
        result['msg'] = '%s %d file(s)%s (%s) from %s' % (
            'would remove' if module.check_mode else 'removed', result['files'],
            ' and %d link(s)' % result['links'] if result['links'] else '', human_bytes(bytes_freed), where)
    else:
        result['msg'] = 'nothing to remove in %s' % where
    result['report'] = report_lines(result, module.check_mode)
    if bytes_held:
        module.warn('%d removed file(s) (%s) are still held open by running processes; their space is freed '
                    'only when those processes close them or exit.'
                    % (len([c for c in gone if c.in_use_by]), human_bytes(bytes_held)))
    if failed:
        result['failed_paths'] = failed[:LIST_LIMIT]
        result['failed'] = True
        result['msg'] = '%d file(s) could not be removed: %s. %s' % (
            len(failed), '; '.join('%s (%s)' % (f['path'], f['reason']) for f in failed[:10]),
            'The others were removed.' if count else 'Nothing was removed.')
    return result


if __name__ == '__main__':
    main()
