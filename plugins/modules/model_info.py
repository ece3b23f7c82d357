#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_info
short_description: Judge a model directory whole (files, safetensors shards, hashes) and return one fingerprint
version_added: 0.1.0
description:
  - Checks that a model directory holds what vLLM needs to load it, in a few seconds instead of a failed 9-minute
    load. C(config.json) is there; a tokenizer is there (C(tokenizer.json), C(tokenizer.model), C(tiktoken.model),
    or C(vocab.json) with C(merges.txt)); every shard C(model.safetensors.index.json) names is there and no other
    C(*.safetensors) file; without an index, the shards present are checked.
  - Each safetensors shard is checked whole. Its header (an 8-byte length, then JSON) must parse within the
    format's cap of 100,000,000 bytes; every tensor's byte range must lie inside the file, hold exactly what its
    dtype and shape need, and follow the one before it; and the file must be exactly as long as the header says.
    A truncated shard (an interrupted download or copy) is named with the bytes missing, and a Git LFS pointer
    file (a C(git clone) without C(git lfs pull)) is named as such. Each tensor the index puts in a shard must be
    in that shard's header.
  - Links are followed only inside the directory, or in a Hugging Face cache from C(snapshots/<rev>/) into that
    model's own C(blobs/). Any other link is named as a link out of the model directory and never followed.
    FIFOs, sockets and devices are named and never opened, and unreadable files are named.
  - Every file the model needs (the top-level files, less documentation, images, hidden files and the backups
    of config edits) gets a sha256, and RV(fingerprint) is one sha256 over their relative paths, sizes and
    sha256s. Config files count as they are on disk, so hosts under the same SM120 policy share a fingerprint.
    A Hugging Face snapshot and a plain copy of the same files have the same fingerprint. RV(files) lists each
    file's sha256 to show which files differ between hosts.
  - In a Hugging Face cache, an LFS file's blob is named by its content's sha256. With O(mode=full) the content
    is verified against that name. With O(mode=quick) the name is taken as the sha256.
  - A hash cache (O(cache_path)) keeps each file's device, inode, size, mtime and ctime with its sha256 and the
    verdict of its checks. With O(mode=quick), a file whose five values are unchanged is not read again, so a
    second check of an unchanged model reads only metadata. A file rewritten in place changes its ctime and is
    read again. O(mode=full) reads and hashes everything again and refreshes the cache.
  - Hashing runs in O(max_workers) threads with 1 MiB buffers; no file is read whole into memory (a shard's
    header is capped as above). With O(io_nice) the check runs at a lower CPU and I/O priority, so that a host
    keeps serving while it runs.
  - The module only reads the model directory (C(changed=false)). The one file it writes is the hash cache,
    and not in check mode.
options:
  path:
    description:
      - The model directory, as the service is given it; for example C(/shared/kimi-k2.5). A Hugging Face cache
        snapshot (C(.../models--org--name/snapshots/<rev>)) or repository (C(.../models--org--name), whose
        C(refs/main) names the snapshot) is checked as that layout.
      - A path that is, or links to, a system directory (C(/), C(/etc), C(/usr), ...) is refused.
    type: path
    required: true
  mode:
    description:
      - V(quick) checks the structure, sizes and headers, and takes each unchanged file's sha256 from the hash
        cache (and an LFS blob's from its name); it hashes only files the cache does not know. Run it on every
        audit.
      - V(full) reads and hashes every file again and verifies each LFS blob against its name. Run it on demand
        or before a restart when asked.
    type: str
    choices: [quick, full]
    default: quick
  cache_path:
    description:
      - The hash cache file (JSON). It is written atomically (a temporary file beside it, renamed over it), with
        mode C(0600), its directory made with mode C(0700) when missing.
      - It must be an absolute path to a C(.json) file outside the model directory.
      - A cache file that is not a regular file owned by this user and writable only by it, is larger than 64 MiB,
        is not JSON or is for another directory is not used, and is replaced.
      - Default is C(/var/cache/gpufleet/model-hashes/<sha256 of the real path>.json) for root, or
        C(~/.cache/gpufleet/model-hashes/...) for another user.
    type: path
  max_workers:
    description:
      - Threads that hash at once (1 to 64). Default is the smaller of 4 and the number of CPUs this process may
        use.
    type: int
  io_nice:
    description:
      - Run the check at a lower priority, so that a serving host keeps its CPU time and disk for vLLM. The CPU
        nice value becomes at least 10, and the I/O priority becomes best-effort level 7 through C(ionice) where
        that is installed.
    type: bool
    default: true
  timeout:
    description:
      - Seconds the whole check may take. Past it the module fails and says how far it got. What was hashed by
        then is kept in the hash cache (outside check mode), so the next run continues from there.
    type: int
    default: 1800
  max_files:
    description:
      - The most directory entries looked at (1 to 1000000). A directory with more is named as a problem, and
        no fingerprint is given.
    type: int
    default: 10000
  fail_on_problem:
    description:
      - Fail when RV(problems) is not empty. The default returns the problems with RV(ok=false) and leaves the
        decision to the play.
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - Hashing is bounded by the disk and by SHA-256 (about 1.7 GB/s per core with SHA-NI). The first check of a
    400 GB model reads all of it; later O(mode=quick) checks read only metadata while the files are unchanged.
  - Only top-level files count in the fingerprint. vLLM loads those; subdirectories (for example C(original/))
    are listed, down to 3 levels, for links and odd files only.
requirements:
  - Python 3.10 or newer on the managed host (standard library only).
seealso:
  - module: gpufleet.vllm.sm120_config
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Check the model directory (quick, from the hash cache after the first run)
  gpufleet.vllm.model_info:
    path: /shared/kimi-k2.5
  register: model

- name: Show the model's fingerprint and any problem
  ansible.builtin.debug:
    msg: "{{ model.fingerprint }}: {{ model.problems | map(attribute='detail') | list }}"

- name: Re-hash everything before a restart and stop on a broken model
  gpufleet.vllm.model_info:
    path: /root/.cache/huggingface/hub/models--moonshotai--Kimi-K2.5
    mode: full
    fail_on_problem: true
    timeout: 3600
"""

RETURN = r"""
check_mode:
  description: Whether the module ran in check mode (it checks the same; the hash cache is not written).
  returned: always
  type: bool
  sample: false
ok:
  description: Whether the directory has no problem (RV(problems) is empty).
  returned: success
  type: bool
  sample: true
problems:
  description:
    - Each problem found, with the file it is about (relative to the model directory), its kind and a sentence.
    - The kinds are C(missing), C(extra_shard), C(truncated), C(lfs_pointer), C(bad_header), C(bad_offsets),
      C(bad_index), C(index_mismatch), C(bad_json), C(hash_mismatch), C(link_out), C(broken_link), C(odd_type),
      C(unreadable), C(too_many_files), and C(more) (how many more problems were not listed, after the first 200).
  returned: success
  type: list
  elements: dict
  sample: [{"file": "model-00007-of-00064.safetensors", "kind": "truncated",
            "detail": "the header says its data ends at byte 9663676416 of the file, but the file has 4294967296 bytes
                       (5368709120 missing): an interrupted download or copy; fetch the shard again"}]
fingerprint:
  description:
    - C(sha256:) and the sha256 over the sorted lines C(<relative path>\t<size>\t<sha256>\n) of the files the
      model needs.
    - None when a file it needs could not be hashed or the listing was cut short.
  returned: success
  type: str
  sample: sha256:5f0c8f6f7b1e4d2a9c3b0a1e2d3c4b5a69788796a5b4c3d2e1f00112233445566
fingerprint_files:
  description: How many files the fingerprint covers.
  returned: success
  type: int
  sample: 71
files:
  description:
    - The files listed (the first 2000), each with C(path), C(size), C(needed) (whether it counts in the
      fingerprint), C(sha256) (for a needed file), and C(source) (C(hashed), C(cache), or C(blob name)).
    - In a Hugging Face cache, C(blob) is the name of the blob the file links to.
  returned: success
  type: list
  elements: dict
  sample: [{"path": "config.json", "size": 3512, "needed": true, "sha256": "9c1e...", "source": "cache"}]
files_total:
  description: How many regular files were listed.
  returned: success
  type: int
notes:
  description: What was not looked into (hidden directories, deep levels, links to directories), and why the
    hash cache was not used or not written.
  returned: success
  type: list
  elements: str
layout:
  description: C(plain) or C(hf-cache) (a Hugging Face cache snapshot).
  returned: success
  type: str
  sample: plain
directory:
  description: The directory whose files were listed (the real path; in a Hugging Face cache, the snapshot).
  returned: success
  type: str
mode:
  description: O(mode), as asked.
  returned: success
  type: str
bytes_hashed:
  description: Bytes read and hashed by this run (0 when every file came from the cache).
  returned: success
  type: int
  sample: 0
files_hashed:
  description: Files read and hashed by this run.
  returned: success
  type: int
cache_hits:
  description: Files whose sha256 came from the hash cache.
  returned: success
  type: int
  sample: 71
cache_path:
  description: The hash cache file used.
  returned: always
  type: str
cache_written:
  description: Whether the hash cache was written (never in check mode; not when it was up to date already).
  returned: success
  type: bool
seconds:
  description: How long the check took.
  returned: success
  type: float
  sample: 0.04
io_priority:
  description: The priority the check ran at, in words.
  returned: success
  type: str
  sample: nice 10, I/O best-effort level 7
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import DeadlinePassed, run_bounded
from ansible_collections.gpufleet.vllm.plugins.module_utils.modeldir import (
    MAX_WORKERS,
    ModelDirError,
    cache_path_problem,
    check_model_dir,
    default_cache_path,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import one_line

NICE = 10


def default_workers():
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return max(1, min(4, count))


def lower_priority(module):
    """Nice at least NICE and I/O best-effort level 7 for this process (before any hashing thread starts: threads
    inherit both). Returns the priority in words."""
    words = []
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if current < NICE:
            os.setpriority(os.PRIO_PROCESS, 0, NICE)
        words.append("nice %d" % max(current, NICE))
    except OSError as exc:
        words.append("nice unchanged (%s)" % (exc.strerror or exc))
    ionice = module.get_bin_path("ionice")
    if ionice:
        rc, dummy, err = run_bounded([ionice, "-c", "2", "-n", "7", "-p", str(os.getpid())], 10)
        words.append("I/O best-effort level 7" if rc == 0 else "I/O priority unchanged (%s)" % one_line(err.strip()))
    else:
        words.append("I/O priority unchanged (no ionice)")
    return ", ".join(words)


def summary(result):
    where = "%s (%s)" % (result["path"], result["layout"])
    done = "%d files listed, %d hashed (%.1f GB), %d from the cache, %.2f s" % (
        result["files_total"], result["files_hashed"], result["bytes_hashed"] / 1e9, result["cache_hits"],
        result["seconds"])
    if result["ok"]:
        return "The model directory %s is whole: fingerprint %s; %s." % (where, result["fingerprint"], done)
    shown = ["- %s: %s (%s)" % (p["file"], p["detail"], p["kind"]) for p in result["problems"][:10]]
    more = len(result["problems"]) - len(shown)
    return ("The model directory %s has %d problem(s); vLLM would fail to load it or load other bytes than the "
            "fleet:\n%s%s\nFetch the named files again (git lfs pull, or the download again) and run this check "
            "again. %s." % (where, len(result["problems"]), "\n".join(shown),
                            "\n- and %d more" % more if more > 0 else "", done[:1].upper() + done[1:]))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            mode=dict(type="str", choices=["quick", "full"], default="quick"),
            cache_path=dict(type="path"),
            max_workers=dict(type="int"),
            io_nice=dict(type="bool", default=True),
            timeout=dict(type="int", default=1800),
            max_files=dict(type="int", default=10000),
            fail_on_problem=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    bad = []
    if not path.startswith("/"):
        bad.append("path must be absolute, got %s" % one_line(path))
    workers = params["max_workers"] if params["max_workers"] is not None else default_workers()
    if not 1 <= workers <= MAX_WORKERS:
        bad.append("max_workers must be 1 to %d, got %d" % (MAX_WORKERS, workers))
    if params["timeout"] < 1:
        bad.append("timeout must be at least 1 second, got %d" % params["timeout"])
    if not 1 <= params["max_files"] <= 1000000:
        bad.append("max_files must be 1 to 1000000, got %d" % params["max_files"])
    cache_path = params["cache_path"] or default_cache_path(path)
    if not bad:
        problem = cache_path_problem(cache_path, path)
        if problem:
            bad.append(problem)
    if bad:
        module.fail_json(msg="Invalid options for gpufleet.vllm.model_info: %s. Nothing was read." % "; ".join(bad),
                         changed=False, check_mode=module.check_mode, cache_path=cache_path)
    io_priority = lower_priority(module) if params["io_nice"] else "unchanged (io_nice is false)"
    try:
        result = check_model_dir(path, mode=params["mode"], cache_path=cache_path, max_workers=workers,
                                 timeout=params["timeout"], max_files=params["max_files"],
                                 write=not module.check_mode)
    except ModelDirError as exc:
        module.fail_json(msg="Cannot check the model directory: %s. Nothing was changed." % to_native(exc),
                         changed=False, check_mode=module.check_mode, cache_path=cache_path)
    except DeadlinePassed as exc:
        kept = ("" if module.check_mode else
                " What was hashed by then is kept in the hash cache, so the next run continues from there.")
        module.fail_json(msg="The check of the model directory %s did not finish: %s.%s Raise timeout, or look at "
                             "why the disk is this slow (iostat). Nothing was changed."
                             % (one_line(path), to_native(exc), kept),
                         changed=False, check_mode=module.check_mode, cache_path=cache_path)
    result.update(changed=False, check_mode=module.check_mode, cache_path=cache_path, io_priority=io_priority,
                  msg=summary(result))
    # (a result with "path" gets that path's owner and mode added by AnsibleModule, its mode over RV(mode): the
    # directory is RV(directory))
    del result["path"]
    if params["fail_on_problem"] and not result["ok"]:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
