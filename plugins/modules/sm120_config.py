#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: sm120_config
short_description: Remove the SM120 KV-cache keys from the model configs of a host where the decision says so
version_added: 0.1.0
description:
  - The work of the C(gpufleet.vllm.sm120_config) role in one task. It checks the settings, reads the GPUs through NVML
    when the decision needs them, decides whether the FP8 KV-cache quantization keys must be absent (the decision
    M(gpufleet.vllm.drift_info) shares for the audit), plans the edit of every model directory and then removes the
    keys.
  - The settings (O(files), O(required_files), O(builds)) are checked before anything is read; an error fails the task
    with nothing read or changed.
  - The GPUs are read only when the decision needs them (policy V(auto), a model directory, O(detect), and a build
    that no row of O(builds) already keeps the keys for) and only when O(host_tools_ready) is true. An NVML error is
    quoted in RV(reason) and nothing changes (unless O(force)).
  - Every model directory is planned (every file read and checked) before any file is written, so a malformed JSON
    file, a missing required file or a refused link in any directory fails the task with no file changed anywhere.
  - Only the removed members change in a file. Indentation, key order, number spelling, escapes, non-ASCII text, line
    endings and the trailing newline are kept byte for byte, because the edit is made on the text, not by
    re-serialising the document. A file that has none of the keys is not written at all.
  - Writes are atomic (a temporary file in the same directory renamed over the original), keep mode, owner and
    SELinux context, with an optional backup.
  - Returns the role's result at the top level (RV(action), RV(applied), RV(sm120), RV(forced), RV(reason),
    RV(summary), RV(build), RV(build_row), RV(check_mode), RV(changed), RV(removed_count), RV(dirs)) and RV(lines),
    one line per directory. The role registers it as C(sm120_config_result).
options:
  model_dirs:
    description:
      - The model directories (plain, or Hugging Face cache snapshots), each edited with the files of O(files).
        A directory listed twice, under any spelling (a trailing slash, a link to it), counts once, under its first.
        A directory that does not exist fails the task before anything is written.
    type: list
    elements: path
    default: []
  symlinks:
    description:
      - What to do when a file that needs an edit is a symbolic link (the Hugging Face cache layout, where
        C(snapshots/<rev>/config.json) links into C(blobs/) and one blob is shared by every snapshot with that file).
      - V(refuse) fails with an explanation and changes nothing.
      - V(copy) replaces the link in this directory by an edited regular file (mode and owner taken from the target)
        and leaves the target untouched, so other snapshots sharing the blob keep the original. This is the right
        choice for a Hugging Face cache; C(huggingface_hub) keeps an existing snapshot file and does not put the link
        back on the next download of the same revision. With O(backup), the backup is a link with the same target as
        the replaced one, so renaming it back restores the snapshot exactly.
      - V(follow) edits the link's target in place. It is refused when another link in the cache repo's
        C(snapshots/) resolves to the same blob, or when the target has other hard links. Links outside a Hugging
        Face cache layout cannot all be found; use V(follow) only when you know the target is not shared.
      - A file reached through a directory link that leads outside the model directory counts as a link too.
        V(refuse) and V(copy) refuse to edit it (a copy would be written into the outside directory); V(follow)
        edits the file there, with the same checks.
      - A link whose file needs no edit is never touched, whatever this option says.
    type: str
    choices: [refuse, copy, follow]
    default: refuse
  backup:
    description:
      - Before a file is written, keep a copy next to it named C(<file>.<pid>.<YYYY-MM-DD@HH:MM:SS~>), listed in
        the C(backups) of its entry in RV(dirs).
    type: bool
    default: false
  max_size:
    description:
      - The largest file, in bytes, that is read; a larger one fails the task before anything is written.
    type: int
    default: 16777216
  gpus:
    description:
      - The C(gpufleet_gpus) fact gathered earlier (by M(gpufleet.vllm.nvml_vram_info) with C(register_facts=true)); its
        C(available), C(sm120) and C(compute_capabilities) are read. Used when the GPUs are not read by this task.
      - Left out, the GPUs are unknown until this task reads them.
    type: dict
  host_tools_ready:
    description:
      - Whether the C(gpufleet.vllm.host_tools) venv that reads the GPUs exists. V(false), the GPUs are not read; in
        check mode a host whose GPUs are unknown then gets the action V(preview) instead of V(skip).
    type: bool
    default: false
  timeout:
    description:
      - The most seconds the whole run may take (reading the GPUs, planning and writing). It is checked before the GPUs
        are read, before each file is planned and before each file is written. When it has passed, the task fails
        with a message that names the next file; while planning nothing was changed, while writing the message lists
        the files already written and the backups made.
    type: int
    default: 300
extends_documentation_fragment:
  - gpufleet.vllm.nvml_venvs
  - gpufleet.vllm.sm120_policy
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the GPUs, decides and plans every file, reports what would be removed (and the diff), writes nothing.
  diff_mode:
    support: full
    details:
      - The before and after text of every file that changes, in every model directory; for a very large file, one
        line that says how many keys go.
notes:
  - Never runs a command. NVML is read in a thread given at most 60 seconds (less when O(timeout) leaves less); a hung
    driver reads as an NVML error.
  - Sets the fact C(gpufleet_gpus) (as M(gpufleet.vllm.nvml_vram_info) with C(register_facts=true) does) when it read the
    GPUs.
  - JSON files must be UTF-8. A byte order mark is kept. UTF-16 text, bytes that are not UTF-8 and NUL bytes are
    refused with the line and column. Errors name the file, and for malformed JSON the line and column, what is there
    (a trailing comma, a comment, a single-quoted string, ...) and the line itself; the file is left byte-identical.
  - "Bounds: files larger than O(max_size) are refused unread; objects and arrays nested deeper than 128 levels are
    refused; the search for other links to a Hugging Face cache blob (O(symlinks=follow)) looks at no more than
    100000 entries and 16 directory levels under C(snapshots/), does not follow directory links, and refuses
    V(follow) when it could not look everywhere."
  - Keys with the same name (duplicate keys) are all removed. A key repeated in one object with values of different
    kinds (an object, then a number) is refused when a key to remove lies inside one of them, because a JSON reader
    keeps only the last one; the message names both places.
requirements:
  - Python 3.10 or newer on the managed host.
  - nvidia-ml-py (module C(pynvml)) in the interpreter or in one of O(nvml_venvs), when the GPUs are read.
seealso:
  - module: gpufleet.vllm.drift_info
  - name: Hugging Face cache layout
    description: How snapshots link into blobs.
    link: https://huggingface.co/docs/huggingface_hub/guides/manage-cache
  - module: gpufleet.vllm.nvml_vram_info
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Remove the KV-cache keys where the GPUs are SM120
  gpufleet.vllm.sm120_config:
    model_dirs: [/models/Kimi-K2.5]
    build: 0.17.1
    builds: "{{ fleet_sm120_fp8_kv_cache_builds }}"
    symlinks: copy
    backup: true
    nvml_venvs: [/opt/gpufleet/tools]
    host_tools_ready: true
  register: sm120_config_result

- name: Say what was decided and removed
  ansible.builtin.debug:
    msg: "{{ [sm120_config_result.reason] + sm120_config_result.lines }}"

- name: Preview the edit whatever the GPUs are
  gpufleet.vllm.sm120_config:
    model_dirs: [/models/Kimi-K2.5]
    force: true
  check_mode: true
  diff: true
"""

RETURN = r"""
changed:
  description: Whether a key was (or, in check mode, would be) removed from a file of any directory.
  returned: always
  type: bool
check_mode:
  description:
    - Whether the module ran in check mode (nothing written). Also true for a task with C(check_mode=true) in a run
      without C(--check), where the C(ansible_check_mode) variable is false. Roles decide from this.
  returned: always
  type: bool
  sample: false
action:
  description: V(apply) (remove the keys), V(skip) (change nothing) or V(preview) (check mode, GPUs not readable yet).
  returned: success
  type: str
  sample: apply
applied:
  description: Whether RV(action) is V(apply).
  returned: success
  type: bool
sm120:
  description: Whether a GPU reports compute capability 12.x; null when the GPUs are unknown.
  returned: success
  type: bool
forced:
  description: O(force).
  returned: success
  type: bool
reason:
  description: The decision in words, naming the setting (and the row of O(builds)) to change for another answer.
  returned: success
  type: str
  sample: "The GPUs report compute capability 12.0 (SM120): the FP8 KV-cache quantization keys are removed.
    The vLLM build is unknown, so fleet_sm120_fp8_kv_cache_builds was not read."
summary:
  description: The decision in a few words, for a summary line.
  returned: success
  type: str
  sample: "keys removed: SM120, vLLM build unknown"
build:
  description: O(build), or null when it is empty.
  returned: success
  type: str
build_row:
  description:
    - The row of O(builds) that took O(build) (C(index) from 0, C(versions), C(fp8_kv_cache_on_sm120), C(note)), or
      null when none did.
  returned: success
  type: dict
removed_count:
  description: Key paths removed (or that would be) over every directory; 0 means the keys were already absent.
  returned: success
  type: int
  sample: 2
dirs:
  description:
    - One entry per model directory, empty when RV(action) is V(skip) - C(path), C(changed), C(removed_count),
      C(removed) (C(file), C(key), C(value) of each member removed), C(backups) (the backups made) and
      C(skipped_files) (files of O(files) that are missing and not required).
  returned: success
  type: list
  elements: dict
lines:
  description: One line per directory, what was (or would be) removed.
  returned: success
  type: list
  elements: str
  sample: ["removed 2 key(s) in /models/Kimi-K2.5: quantization_config.kv_cache_scheme, quantization.kv_cache_quant_algo"]
gpus:
  description:
    - What NVML said, as the C(gpufleet_gpus) fact (C(available), C(driver_version), C(count), C(names),
      C(compute_capabilities), C(sm120), C(gpus), ...).
  returned: when the GPUs were read
  type: dict
ansible_facts:
  description: The fact C(gpufleet_gpus), the same as RV(gpus).
  returned: when the GPUs were read
  type: dict
  contains:
    gpufleet_gpus:
      description: RV(gpus).
      type: dict
      returned: when the GPUs were read
model_dir:
  description: The model directory whose planning failed (nothing was written in any directory).
  returned: when planning failed
  type: str
file:
  description: The file the failure is about.
  returned: failure, where a file is concerned
  type: str
line:
  description: The line of malformed JSON in RV(file).
  returned: failure, for malformed JSON
  type: int
column:
  description: The column of malformed JSON in RV(file).
  returned: failure, for malformed JSON
  type: int
files:
  description: When writing failed, the results of the files handled so far (C(written), C(backup_file)).
  returned: failure while writing
  type: list
  elements: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.jsonedit import MAX_SIZE, plan_file, printable, write_plan
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.modelconfig import (
    ModelConfigError,
    apply_plans,
    entries,
    plan_entries,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.nvml import (
    NvmlUnavailable,
    collect_bounded,
    failure_message,
    gpu_facts,
    load_pynvml_venvs,
    unavailable_result,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.policy import (
    DEFAULT_FILES,
    DEFAULT_REQUIRED_FILES,
    builds_problems,
    decide,
    files_problems,
    module_files,
    policy_of,
    read_gpus,
    report_lines,
    summarize,
)

# the clock of the timeout (a name of its own, so that a test can make time pass)
_clock = time.monotonic
# the most seconds one NVML read may take
NVML_CALL_TIMEOUT = 60.0


def _nothing_changed(count):
    """The sentence that ends a failure of the planning: no directory was written."""
    if count == 1:
        return " No file of the model directory was changed."
    return " No file was changed in any of the %d model directories: every one is planned before any is written." % count


def _read_gpus(venvs, deadline):
    """The NVML result (nvml.collect's keys) with pynvml from the interpreter or one of VENVS, bounded in time."""
    if deadline.passed():
        return unavailable_result(NvmlUnavailable("NVML_TIMEOUT", deadline.message("the GPUs were read")))
    try:
        pynvml, dummy = load_pynvml_venvs(venvs)
    except NvmlUnavailable as exc:
        return unavailable_result(exc)
    return collect_bounded(call_timeout=max(0.1, min(NVML_CALL_TIMEOUT, deadline.left())), pynvml=pynvml)


def _plan_all(module, model_dirs, files, deadline):
    """[(directory, its plans)] for every directory, nothing written; fails the task at the first problem."""
    params = module.params
    planned = []
    count = 0
    for path in model_dirs:
        if not os.path.isdir(path):
            module.fail_json(msg="The model directory %s does not exist or is not a directory: list existing model "
                                 "directories in model_dirs (the fleet's fleet_model_dirs).%s" % (
                                     printable(path), _nothing_changed(len(model_dirs))),
                             changed=False, model_dir=printable(path))
        try:
            plans = plan_entries(entries(path, files), deadline, symlinks=params["symlinks"],
                                 max_size=params["max_size"], planner=plan_file, planned=count)
        except ModelConfigError as exc:
            msg = exc.msg if exc.msg.rstrip().endswith(".") else exc.msg.rstrip() + "."
            module.fail_json(msg=msg + _nothing_changed(len(model_dirs)), model_dir=printable(path),
                             **dict(exc.details, changed=False))
        count += len(plans)
        planned.append((path, plans))
    return planned


def _apply_all(module, planned, deadline):
    """[(directory, its public file results)] with the edits written (not in check mode), and the diffs."""
    done = []
    diffs = []
    earlier = []
    for path, plans in planned:
        try:
            results, dir_diffs = apply_plans(module, plans, deadline, backup=module.params["backup"],
                                             writer=write_plan, earlier=earlier)
        except ModelConfigError as exc:
            module.fail_json(msg=exc.msg, model_dir=printable(path), **exc.details)
        earlier.extend(results)
        diffs.extend(dir_diffs)
        done.append((path, results))
    return done, diffs


def _distinct_dirs(paths):
    """PATHS without a directory listed twice: the same directory under two spellings (a trailing slash, a link to
    it) is planned once, under its first, since every directory is planned before any is written (a second plan of
    the same files would see them changed by the first's write)."""
    distinct, seen = [], set()
    for path in paths:
        try:
            st = os.stat(path)
            key = (st.st_dev, st.st_ino)
        except (OSError, ValueError):
            key = ("path", os.path.normpath(path))
        if key not in seen:
            seen.add(key)
            distinct.append(path)
    return distinct


def main():
    module = AnsibleModule(
        argument_spec=dict(
            strip_kv_cache_keys=dict(type="bool", default=True),
            force=dict(type="bool", default=False),
            build=dict(type="str", default=""),
            builds=dict(type="list", elements="dict", default=[]),
            detect=dict(type="bool", default=True),
            model_dirs=dict(type="list", elements="path", default=[]),
            files=dict(type="dict", default=DEFAULT_FILES),
            required_files=dict(type="list", elements="str", default=list(DEFAULT_REQUIRED_FILES)),
            symlinks=dict(type="str", choices=["refuse", "copy", "follow"], default="refuse"),
            backup=dict(type="bool", default=False),
            max_size=dict(type="int", default=MAX_SIZE),
            gpus=dict(type="dict"),
            nvml_venvs=dict(type="list", elements="path", default=[]),
            host_tools_ready=dict(type="bool", default=False),
            timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = files_problems(params["files"], params["required_files"]) + builds_problems(params["builds"])
    if params["max_size"] < 1:
        problems.append("max_size must be a positive number of bytes, got %d." % params["max_size"])
    if not 1 <= params["timeout"] <= 604800:
        problems.append("timeout must be from 1 to 604800 seconds, got %d." % params["timeout"])
    if problems:
        module.fail_json(msg=" ".join(problems) + " Nothing was changed.", changed=False)
    deadline = Deadline(params["timeout"], clock=_clock)

    model_dirs = _distinct_dirs(params["model_dirs"])
    policy = policy_of(params["strip_kv_cache_keys"], params["force"])

    gpus = params["gpus"]
    nvml_error = None
    read = None
    if read_gpus(policy, model_dirs, params["detect"], params["build"], params["builds"]) and params["host_tools_ready"]:
        read = _read_gpus(params["nvml_venvs"], deadline)
        gpus = gpu_facts(read)
        if not read.get("nvml_available"):
            nvml_error = (read.get("nvml_error") or {}).get("message")
            module.warn(failure_message(read))

    decision = decide(policy, model_dirs=model_dirs, gpus=gpus, detect=params["detect"],
                      check_mode=module.check_mode, tools_ready=params["host_tools_ready"], nvml_error=nvml_error,
                      build=params["build"], builds=params["builds"])

    done, diffs = [], []
    if decision["action"] != "skip":
        files = module_files(params["files"], params["required_files"])
        done, diffs = _apply_all(module, _plan_all(module, model_dirs, files, deadline), deadline)

    dir_results = [{"item": path, "changed": any(r["changed"] for r in results), "files": results}
                   for path, results in done]
    result = summarize(decision, params["force"], module.check_mode, plans=dir_results)
    result["lines"] = report_lines(result)
    if read is not None:
        result["gpus"] = gpus
        result["ansible_facts"] = {"gpufleet_gpus": gpus}
    if module._diff and diffs:
        result["diff"] = diffs
    result["check_mode"] = module.check_mode
    module.exit_json(**result)


if __name__ == "__main__":
    main()
