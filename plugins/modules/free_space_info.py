#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: free_space_info
short_description: Free space on the filesystem that would hold a path, with an optional minimum
version_added: 0.1.0
description:
  - Measures the filesystem that holds O(path), or would hold it when it does not exist yet (its nearest existing
    ancestor is measured), with C(statvfs). When that ancestor is not a directory (O(path) lies below a regular
    file, for example), the module fails and names it, since O(path) could never be created.
  - Works for every filesystem type, including overlay, tmpfs, ZFS and NFS, unlike the mount facts of
    M(ansible.builtin.setup), which list only block devices.
  - With O(min_free_mib), fails before anything is written when less space is free, with a message that says where,
    how much and what to do.
  - The module only reads. It never changes anything (C(changed=false)).
  - With O(paths), measures several paths in one task. The needs of the paths on one filesystem add up (20 GiB for
    caches and 1 GiB for C(/tmp) on the root filesystem need 21 GiB free there), and every filesystem short of room
    is named in one failure message.
options:
  path:
    description:
      - An absolute path, for example the directory a new environment will be created in.
      - One of O(path) and O(paths) is required.
    type: path
  paths:
    description:
      - Several paths to measure in one task, each with its own minimum and purpose; O(min_free_mib) and O(purpose)
        are then not used.
    type: list
    elements: dict
    suboptions:
      path:
        description: An absolute path.
        type: path
        required: true
      min_free_mib:
        description: The MiB this path needs free on its filesystem (added to the other paths' on the same one).
        type: int
        default: 0
      purpose:
        description: What the space is for, in words, used in the failure message.
        type: str
        default: this task
  min_free_mib:
    description:
      - Fail when fewer MiB are free for unprivileged users (as C(df) shows them). V(0) never fails.
    type: int
    default: 0
  purpose:
    description: What the space is for, in words, used in the failure message.
    type: str
    default: this task
  timeout:
    description:
      - Seconds the filesystem may take to answer. A hung network mount (NFS, FUSE) would hang the task; past this
        limit the module fails and says so.
      - With O(paths), one limit for all of them, in their order; a hung mount leaves the paths after it not
        measured, each named in RV(problems).
    type: int
    default: 30
extends_documentation_fragment:
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - The space reserved for root (ext4 keeps 5% by default) is not counted as free, as C(df) does not count it.
requirements:
  - Python 3.10 or newer on the managed host (standard library only).
seealso:
  - module: ansible.builtin.setup
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Need 20 GiB where the new vLLM environment goes
  gpufleet.vllm.free_space_info:
    path: /opt/vllm/envs
    min_free_mib: 20480
    purpose: a new vLLM environment

- name: Room for the model, vLLM's caches and /tmp before the stop (needs on one filesystem add up)
  gpufleet.vllm.free_space_info:
    paths:
      - {path: /shared/kimi-k2.5, min_free_mib: 1024, purpose: the model config edits and their backups}
      - {path: /root/.cache, min_free_mib: 20480, purpose: "vLLM's compile and kernel caches"}
      - {path: /tmp, min_free_mib: 1024, purpose: temporary files}
- name: Measure only
  gpufleet.vllm.free_space_info:
    path: /var/lib/models
  register: models_space
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (it measures the same either way). Also true for a task with
      C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode) variable is false, so a role
      can tell from this result whether it runs in check mode.
  returned: always
  type: bool
  sample: false
checks:
  description: With O(paths), each path's measure (the keys of RV(path) to RV(total_mib)) with its C(min_free_mib) and
    C(purpose).
  returned: with O(paths)
  type: list
  elements: dict
problems:
  description: With O(paths), a sentence per filesystem short of room and per path that could not be measured.
  returned: with O(paths)
  type: list
  elements: str
blocker:
  description: On failure because O(path) cannot exist, the existing component that is not a directory.
  returned: when O(path) lies below a regular file or another non-directory
  type: str
  sample: /opt/vllm/envs
path:
  description: The path that was asked about.
  returned: with O(path)
  type: str
  sample: /opt/vllm/envs
checked:
  description: The existing path that was measured (O(path) or its nearest existing ancestor).
  returned: with O(path)
  type: str
  sample: /opt
exists:
  description: Whether O(path) itself exists.
  returned: with O(path)
  type: bool
mount:
  description: The mount point of the measured filesystem.
  returned: with O(path)
  type: str
  sample: /
free_mib:
  description: MiB that unprivileged users may still write.
  returned: with O(path)
  type: int
  sample: 54401
total_mib:
  description: The filesystem's size in MiB.
  returned: with O(path)
  type: int
  sample: 257000
min_free_mib:
  description: O(min_free_mib), as asked.
  returned: with O(path)
  type: int
  sample: 20480
purpose:
  description: O(purpose), as asked.
  returned: with O(path)
  type: str
  sample: a new vLLM environment
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.vllm.plugins.module_utils.diskspace import (
    NoAnswer,
    PathCannotExist,
    check_paths,
    free_space_bounded,
    shown,
)


def several(module):
    """The O(paths) form: every path measured, the needs on one filesystem added up, every shortfall named."""
    entries = module.params["paths"]
    bad = []
    if not entries:
        bad.append("paths is empty: list at least one path")
    for entry in entries:
        if not entry["path"].startswith("/"):
            bad.append("paths: every path must be absolute, got %s" % shown(entry["path"]))
        if entry["min_free_mib"] < 0:
            bad.append("paths: min_free_mib of %s must be 0 or more, got %d" % (shown(entry["path"]), entry["min_free_mib"]))
    if module.params["timeout"] < 1:
        bad.append("timeout must be at least 1 second, got %d" % module.params["timeout"])
    if bad:
        module.fail_json(msg="Invalid options for gpufleet.vllm.free_space_info: %s. Nothing was measured." % "; ".join(bad),
                         changed=False)
    checks, problems = check_paths(entries, module.params["timeout"])
    if problems:
        module.fail_json(msg="Not enough room on this host (nothing was changed):\n" + "\n".join(
            "- %s%s" % (p[:1].upper() + p[1:], "" if p.endswith(".") else ".") for p in problems)
            + "\nFree space there (old compile caches, dumps, unused environments) or point the paths elsewhere.",
            changed=False, check_mode=module.check_mode, checks=checks, problems=problems)
    module.exit_json(changed=False, check_mode=module.check_mode, checks=checks, problems=problems)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            paths=dict(type="list", elements="dict", options=dict(
                path=dict(type="path", required=True),
                min_free_mib=dict(type="int", default=0),
                purpose=dict(type="str", default="this task"),
            )),
            min_free_mib=dict(type="int", default=0),
            purpose=dict(type="str", default="this task"),
            timeout=dict(type="int", default=30),
        ),
        required_one_of=[("path", "paths")],
        mutually_exclusive=[("path", "paths")],
        supports_check_mode=True,
    )
    if module.params["paths"] is not None:
        several(module)
    path = module.params["path"]
    if not path.startswith("/"):
        module.fail_json(msg="path must be absolute, got %r." % (path,))
    if module.params["min_free_mib"] < 0:
        module.fail_json(msg="min_free_mib must be 0 or more, got %d." % module.params["min_free_mib"])
    if module.params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, got %d." % module.params["timeout"])
    try:
        result = free_space_bounded(path, module.params["timeout"])
    except NoAnswer as exc:
        module.fail_json(msg="Could not measure the free space: %s. Check the mount (mount, dmesg). Nothing was changed."
                             % to_native(exc), changed=False, path=shown(path))
    except PathCannotExist as exc:
        module.fail_json(msg="%s. Point path at a directory. Nothing was changed." % to_native(exc),
                         changed=False, path=shown(path), blocker=shown(exc.blocker))
    except OSError as exc:
        module.fail_json(msg="Could not measure the free space for %s: %s. Nothing was changed." % (shown(path), to_native(exc)),
                         changed=False, path=shown(path))
    needed = module.params["min_free_mib"]
    result.update(min_free_mib=needed, purpose=module.params["purpose"])
    if needed and result["free_mib"] < needed:
        module.fail_json(
            msg="Only %d MiB are free for %s (filesystem mounted at %s); %s needs %d MiB. Free space there or "
                "point it at another filesystem. Nothing was changed."
                % (result["free_mib"], shown(path), result["mount"], module.params["purpose"], needed),
            changed=False, check_mode=module.check_mode, **result)
    module.exit_json(changed=False, check_mode=module.check_mode, **result)


if __name__ == "__main__":
    main()
