#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_config
short_description: Keep keys absent from the JSON config files of a model directory
version_added: 0.1.0
description:
  - Makes sure that keys are absent from JSON files of a model directory, for example the KV-cache quantization keys
    (C(kv_cache_scheme) in C(config.json), C(quantization.kv_cache_quant_algo) in C(hf_quant_config.json)) that vLLM
    must not see on SM120 GPUs.
  - Only the removed members change in the file. Indentation, key order, number spelling, escapes, non-ASCII text, line
    endings and the trailing newline are kept byte for byte, because the edit is made on the text, not by
    re-serialising the document.
  - A file that has none of the keys is not written at all (C(changed=false), same bytes, same modification time).
  - Every file is read and checked before any file is written; a malformed file fails the task and no file changes.
  - Writes are atomic (a temporary file in the same directory renamed over the original) and keep mode, owner and
    SELinux context.
  - "Hugging Face cache layouts: C(snapshots/<rev>/config.json) is a symbolic link into C(blobs/), and one blob is
    shared by every snapshot that has the same file. The O(symlinks) option decides what happens when such a link
    needs an edit; by default the module refuses and explains."
options:
  path:
    description:
      - A model directory (the files of O(files) are looked up in it), or one JSON file (then O(absent) lists the keys).
      - A directory may itself be a link, for example to a Hugging Face cache snapshot. Below it, every directory of a
        file name is checked too; a file reached through a directory link that leads outside the model directory is
        treated as a link (see O(symlinks)).
    type: path
    required: true
  files:
    description:
      - The files to edit when O(path) is a directory, with the keys to remove from each.
      - When O(path) is a directory and neither O(files) nor O(absent) is given, the default is C(config.json) with
        C(**.kv_cache_scheme) and C(hf_quant_config.json) with C(quantization.kv_cache_quant_algo), both not
        required.
      - Mutually exclusive with O(absent).
    type: list
    elements: dict
    suboptions:
      name:
        description:
          - File name relative to O(path), for example C(config.json). Absolute names and names with C(..) are refused.
        type: str
        required: true
      absent:
        description:
          - Key paths that must be absent from this file, in the syntax described at O(absent).
        type: list
        elements: str
        required: true
      required:
        description:
          - If V(true), a missing file fails the task. If V(false), a missing file is skipped and reported.
        type: bool
        default: false
  absent:
    description:
      - Key paths that must be absent, when O(path) is a single JSON file.
      - A key path is a dotted string. Each segment is matched against object keys with shell-style wildcards
        (case-sensitive); C(*) matches any key at one level, C(**) matches any number of levels including none, so
        C(**.kv_cache_scheme) means "wherever it sits". A backslash escapes a dot that is part of a key
        (C(a\.b)). Array elements are levels too (keys C(0), C(1), ...), but only object members are removed.
      - Mutually exclusive with O(files).
    type: list
    elements: str
  state:
    description:
      - V(absent) removes the keys. It is the only state for now.
    type: str
    choices: [absent]
    default: absent
  symlinks:
    description:
      - What to do when a file that needs an edit is a symbolic link (the Hugging Face cache layout).
      - V(refuse) fails with an explanation and changes nothing.
      - V(copy) replaces the link in this directory by an edited regular file (mode and owner taken from the target)
        and leaves the target untouched, so other snapshots sharing the blob keep the original. This is the right
        choice for a Hugging Face cache; C(huggingface_hub) keeps an existing snapshot file and does not put the link
        back on the next download of the same revision.
      - V(follow) edits the link's target in place. It is refused when another link in the cache repo's
        C(snapshots/) resolves to the same blob, or when the target has other hard links. Links outside a Hugging
        Face cache layout cannot all be found; use V(follow) only when you know the target is not shared.
      - A file reached through a directory link that leads outside the model directory (C(sub) a link to
        C(/elsewhere), file C(sub/config.json)) counts as a link too. V(refuse) and V(copy) refuse to edit it (a copy
        would be written into the outside directory); V(follow) edits the file there, with the same checks.
      - A link whose file needs no edit is never touched, whatever this option says.
    type: str
    choices: [refuse, copy, follow]
    default: refuse
  max_size:
    description:
      - The largest file, in bytes, that is read. A larger file fails the task before it is read (the message names its
        size and this cap) and nothing is changed. A model config is a few kilobytes; the default is 16 MiB.
      - The edit itself costs time and memory in proportion to the size of the file (one parse, one scan, one
        check), whatever the number of keys removed - about 65 bytes of memory per byte of a file made of many small
        keys (about 1 GB at the default cap), far less for an ordinary config.
    type: int
    default: 16777216
  backup:
    description:
      - Before a file is written, keep a copy next to it named C(<file>.<pid>.<YYYY-MM-DD@HH:MM:SS~>) and return its
        name in RV(files[].backup_file).
      - With O(symlinks=copy), the backup is a symbolic link with the same target as the replaced link, so renaming it
        back restores the snapshot exactly.
    type: bool
    default: false
  timeout:
    description:
      - The most seconds the whole run may take. It is checked before each file is planned and before each file is
        written. When it has passed, the task fails with a message that names the next file. If the time runs out while
        planning, nothing was changed. While writing, the message and RV(files) list the files already written and
        the backups made. A file being written is always finished.
    type: int
    default: 300
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads and plans every file, reports what would be removed (and the diff), writes nothing.
  diff_mode:
    support: full
    details:
      - The before and after text of every file that changes; for a file whose before and after text together are
        over 1 MiB characters, one line that says how many keys go and why no diff is shown.
  platform:
    support: full
    platforms: posix
notes:
  - JSON files must be UTF-8. A byte order mark is kept. UTF-16 text, bytes that are not UTF-8 and NUL bytes are
    refused with the line and column.
  - Errors name the file, and for malformed JSON the line and column, what is there (a trailing comma, a comment,
    a single-quoted string, ...) and the line itself; the file is left byte-identical.
  - "Bounds: files larger than O(max_size) are refused unread; objects and arrays nested deeper than 128 levels are
    refused; the search for other links to a Hugging Face cache blob (O(symlinks=follow)) looks at no more than
    100000 entries and 16 directory levels under C(snapshots/), does not follow directory links, and refuses
    V(follow) when it could not look everywhere."
  - When writing a file fails after other files were written, the failure result lists in RV(files) the files
    already written (RV(files[].written)) and the backups made (RV(files[].backup_file)), the failing one included.
  - Keys with the same name (duplicate keys) are all removed. A key repeated in one object with values of different
    kinds (an object, then a number) is refused when a key to remove lies inside one of them, because a JSON reader
    keeps only the last one; the message names both places.
requirements:
  - Python 3.10 or newer on the managed host (standard library only).
seealso:
  - name: Hugging Face cache layout
    description: How snapshots link into blobs.
    link: https://huggingface.co/docs/huggingface_hub/guides/manage-cache
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Strip the KV-cache quantization keys (config.json and hf_quant_config.json defaults)
  gpufleet.vllm.model_config:
    path: /models/Kimi-K2.5
    backup: true

- name: Same for a model in the Hugging Face cache, editing only this snapshot
  gpufleet.vllm.model_config:
    path: /data/hf/hub/models--moonshotai--Kimi-K2.5/snapshots/3f1c6a0e2b9d4c7a8e5f1b2c3d4e5f6a7b8c9d0e
    symlinks: copy

- name: Explicit files and key paths; config.json must exist
  gpufleet.vllm.model_config:
    path: /models/Kimi-K2.5
    files:
      - name: config.json
        absent:
          - quantization_config.kv_cache_scheme
          - text_config.quantization_config.kv_cache_scheme
        required: true
      - name: hf_quant_config.json
        absent:
          - quantization.kv_cache_quant_algo

- name: One file
  gpufleet.vllm.model_config:
    path: /models/Kimi-K2.5/config.json
    absent:
      - "**.kv_cache_scheme"
  check_mode: true
  diff: true
  register: kv_keys

- name: Show what would be removed
  ansible.builtin.debug:
    msg: "{{ kv_keys.files | map(attribute='removed') | flatten | map(attribute='key') | list }}"
"""

RETURN = r"""
changed:
  description: Whether a key was (or, in check mode, would be) removed from any file.
  returned: always
  type: bool
msg:
  description: A one-line summary.
  returned: always
  type: str
  sample: removed 2 key(s) from 2 file(s)
check_mode:
  description:
    - Whether the module ran in check mode (nothing written). Also true for a task with C(check_mode=true) in a run
      without C(--check), where the C(ansible_check_mode) variable is false.
  returned: always
  type: bool
  sample: false
removed_count:
  description: Number of key paths removed over all files; 0 means the keys were already absent.
  returned: always
  type: int
  sample: 2
files:
  description: One entry per file considered, in order.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file (the link, for a link).
      returned: always
      type: str
      sample: /models/Kimi-K2.5/config.json
    exists:
      description: Whether the file exists.
      returned: always
      type: bool
    changed:
      description: Whether keys were (or would be) removed from this file.
      returned: always
      type: bool
    skipped:
      description: Why the file was skipped (a missing, not required file), else null.
      returned: always
      type: str
      sample: file does not exist
    removed:
      description:
        - The removed members, in document order, each with its concrete key path and its old value; at most the first
          1000 (RV(files[].removed_count) counts them all).
      returned: always
      type: list
      elements: dict
      sample:
        - key: quantization_config.kv_cache_scheme
          value: {num_bits: 8, type: float, strategy: tensor, dynamic: false, symmetric: true}
    removed_count:
      description: How many members were (or would be) removed from this file.
      returned: always
      type: int
    removed_truncated:
      description: Whether RV(files[].removed) lists only the first 1000 of them.
      returned: always
      type: bool
    symlink:
      description:
        - Null for a regular file. For a link, C(link) (the link text), C(target) (resolved), C(action)
          (V(copy), V(follow), or null when nothing was written) and C(shared_with) (other links in the Hugging Face
          cache repo that resolve to the same blob).
        - For a file reached through a directory link leading outside the model directory, also C(through) (that
          directory link); C(link) is then its link text.
      returned: always
      type: dict
    written:
      description: The path actually written (the link's target with O(symlinks=follow)); absent when not written.
      returned: when the file was written
      type: str
    backup_file:
      description: Name of the backup made before writing.
      returned: when O(backup=true) and the file was written
      type: str
      sample: /models/Kimi-K2.5/config.json.4242.2025-06-01@12:00:00~
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline
from ansible_collections.gpufleet.vllm.plugins.module_utils.jsonedit import MAX_SIZE, plan_file, write_plan
from ansible_collections.gpufleet.vllm.plugins.module_utils.modelconfig import (
    ModelConfigError,
    apply_plans,
    entries,
    plan_entries,
    summary,
)


# the clock of the timeout (a name of its own, so that a test can make time pass)
_clock = time.monotonic


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            files=dict(type='list', elements='dict', options=dict(
                name=dict(type='str', required=True),
                absent=dict(type='list', elements='str', required=True),
                required=dict(type='bool', default=False),
            )),
            absent=dict(type='list', elements='str'),
            state=dict(type='str', choices=['absent'], default='absent'),
            symlinks=dict(type='str', choices=['refuse', 'copy', 'follow'], default='refuse'),
            max_size=dict(type='int', default=MAX_SIZE),
            backup=dict(type='bool', default=False),
            timeout=dict(type='int', default=300),
        ),
        mutually_exclusive=[('files', 'absent')],
        supports_check_mode=True,
    )

    params = module.params
    if params['max_size'] < 1:
        module.fail_json(msg='max_size must be a positive number of bytes, got %d.' % params['max_size'])
    if not 1 <= params['timeout'] <= 604800:
        module.fail_json(msg='timeout must be from 1 to 604800 seconds, got %d.' % params['timeout'])
    deadline = Deadline(params['timeout'], clock=_clock)
    try:
        # (plan_file and write_plan by their names here, so that a test can slow them down)
        plans = plan_entries(entries(params['path'], params['files'], params['absent']), deadline,
                             symlinks=params['symlinks'], max_size=params['max_size'], planner=plan_file)
        results, diffs = apply_plans(module, plans, deadline, backup=params['backup'], writer=write_plan)
    except ModelConfigError as exc:
        module.fail_json(msg=exc.msg, **exc.details)

    msg, removed_count, changed = summary(results, module.check_mode)
    result = dict(changed=changed, msg=msg, removed_count=removed_count, files=results,
                  check_mode=module.check_mode)
    if module._diff and diffs:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
