#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_stage
short_description: Build a vLLM environment with uv in a new venv, prove it pristine, or remove it
version_added: 0.1.0
description:
  - Stages one build of O(package) in the new venv O(env), beside the environment that serves, in one run on the
    host. First it checks the room on the filesystem of O(env) (O(min_free_mib)), removes O(package) from uv's cache
    and prunes the cache (O(cache_clean); an edit an operator made in a file uv had hard-linked into its cache must
    not come back), and makes the venv with C(uv venv) and O(python).
  - With O(lock), the new interpreter's Python version, machine and C library checked against the lock's target, the
    lock written into the new environment as C(gpufleet.lock), then C(uv pip sync --require-hashes) of exactly the
    lock (every package at its pinned version, every wheel against the lock's sha256 hashes). Without O(lock),
    C(uv pip install) of O(package)C(==)O(version) and O(extra_packages). Always with copies, never links into
    uv's cache (C(--link-mode copy)), and never a Python downloaded by uv.
  - Then O(package) is checked against its C(RECORD) at O(version) (as M(gpufleet.vllm.package_integrity_info) checks it;
    O(verify)), and with O(lock) the environment against the lock, each package pristine but those of
    O(accept_not_pristine) (as M(gpufleet.vllm.env_fingerprint_info) checks it).
  - Any failure from C(uv venv) on removes O(env) and says at which step, what uv or the check said, and that the
    serving environment O(current_env) was not touched. A hash that is not the lock's is named as such (a tampered
    mirror, or a nightly build overwritten since the lock was made).
  - Refused before anything runs, with every reason, when a value would reach uv's command line as an option of its
    own (it starts with C(-)) or holds a control character, when O(env) exists already or is O(current_env), when
    O(lock) is not a lock of this collection for O(package)C(==)O(version), and when uv is not an executable file.
  - The role P(gpufleet.vllm.reinstall#role) runs it when M(gpufleet.vllm.vllm_envs) decided V(build).
options:
  env:
    description:
      - The absolute path of the new environment. It must not exist; its directory is created (mode C(0755)) when
        missing.
    type: path
    required: true
  package:
    description: The distribution to stage; a distribution name (letters, digits, C(.), C(_), C(-)).
    type: str
    default: vllm
  version:
    description: The exact version of O(package) to stage, for example C(0.33.0). With O(lock), the lock's.
    type: str
    required: true
  lock:
    description:
      - The text of the lock to sync exactly (a lock this collection made, for example the lookup
        P(gpufleet.vllm.uv_lock#lookup)'s C(lock)). Unset, O(package) is resolved on the host.
    type: str
  extra_packages:
    description: More requirements installed with O(package) without O(lock).
    type: list
    elements: str
    default: []
  python:
    description: The interpreter C(uv venv) makes the environment with (a path, or a version uv finds installed).
    type: str
    default: /usr/bin/python3
  uv:
    description: The uv executable on the host, an absolute path or a name looked up on C(PATH).
    type: str
    required: true
  cache_dir:
    description:
      - uv's cache directory (C(--cache-dir)), also where the RECORD check looks for files linked into the cache.
        Empty for uv's default.
    type: path
    default: ""
  cache_clean:
    description: Remove O(package) from uv's cache and prune the cache before the install.
    type: bool
    default: true
  index_url:
    description: The package index (C(--index-url)); empty for uv's default.
    type: str
    default: ""
  extra_index_urls:
    description: More package indexes (C(--extra-index-url)).
    type: list
    elements: str
    default: []
  find_links:
    description: Wheel directories or pages (C(--find-links)).
    type: list
    elements: str
    default: []
  no_index:
    description: Use no index, only O(find_links).
    type: bool
    default: false
  prerelease:
    description: uv's pre-release rule without O(lock); empty for uv's default.
    type: str
    default: ""
  torch_backend:
    description: uv's PyTorch backend (C(--torch-backend)), such as C(cu130); empty for none.
    type: str
    default: ""
  no_deps:
    description: Install O(package) without its dependencies (not with O(lock)).
    type: bool
    default: false
  environment:
    description:
      - Environment variables for uv (C(UV_HTTP_TIMEOUT), a proxy, an index's credentials); names are letters, digits
        and C(_). Kept out of the logs (no_log).
    type: dict
    default: {}
  min_free_mib:
    description: The MiB that must be free on the filesystem of O(env) before anything is written; 0 to not check.
    type: int
    default: 0
  room_purpose:
    description: What O(min_free_mib) is named in the message when the room is short (the setting that gives it).
    type: str
    default: ""
  verify:
    description: Check O(package) in the new environment against its C(RECORD) at O(version).
    type: bool
    default: true
  accept_not_pristine:
    description:
      - With O(lock), the distributions (any spelling) that may be not pristine in the new environment (a package
        whose own C(RECORD) does not match its files upstream).
    type: list
    elements: str
    default: []
  current_env:
    description:
      - The environment that serves now. Never touched; O(env) may not be it, and the messages name it.
    type: path
    default: ""
  host_name:
    description: How the messages name this host, such as its inventory name. Empty for C(this host).
    type: str
    default: ""
  timeout:
    description: The seconds each run of uv may take (the install of a vLLM build downloads gigabytes).
    type: int
    default: 3600
  check_timeout:
    description: The seconds each check of the new environment (RECORD, the lock) may take.
    type: int
    default: 600
  max_list:
    description: The most entries returned in each list of each check's result (their totals are complete).
    type: int
    default: 10
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Checks the options, the lock, the path and the room, and returns the commands it would run in RV(commands);
        runs none of them.
  diff_mode:
    support: none
requirements:
  - Python 3.10 or newer on the managed host (standard library only), and uv 0.2 or newer (C(uv venv --allow-existing)).
notes:
  - The module makes the directory O(env) itself, right before C(uv venv) fills it, with a file C(.gpufleet-staging)
    that marks it as this run's until the proofs passed (made under a hidden name beside O(env), marked, then
    renamed, so that no unmarked directory is ever under that name before the proofs). A failure removes O(env) only while it is still that
    directory with that mark; a directory someone else put there is left alone, and the message says so.
  - The mark names the staging's process and the host's boot. A run killed before the proofs passed (SIGKILL, a host
    that went down) cannot remove O(env) and leaves it marked, unfinished although it may look complete;
    M(gpufleet.vllm.vllm_envs) never reuses a marked directory, and its next run that decides or prunes removes it
    once no process builds it any more, and says so.
  - Each run of uv is bounded by O(timeout) and killed whole (with what it started) when it passes; the output read
    is capped. The checks read the new environment's files, hashed in 1 MiB chunks, each bounded by
    O(check_timeout).
seealso:
  - module: gpufleet.vllm.vllm_envs
  - module: gpufleet.vllm.package_integrity_info
  - module: gpufleet.vllm.env_fingerprint_info
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Stage exactly the fleet lock in a new environment
  gpufleet.vllm.vllm_stage:
    env: /opt/vllm/envs/vllm-0.33.0-20261204T101500Z
    version: 0.33.0
    lock: "{{ lookup('ansible.builtin.file', 'fleet.lock') }}"
    uv: /opt/gpufleet/tools/bin/uv
    index_url: https://pypi.example.org/simple
    torch_backend: cu130
    min_free_mib: 20480
    current_env: /opt/vllm/envs/vllm-0.32.1-20261101T090000Z
    host_name: "{{ inventory_hostname }}"

- name: Stage a release resolved on the host, from a wheel directory only
  gpufleet.vllm.vllm_stage:
    env: /opt/vllm/envs/vllm-0.33.0-20261204T101500Z
    version: 0.33.0
    uv: /usr/local/bin/uv
    no_index: true
    find_links: [/srv/wheels]
"""

RETURN = r"""
changed:
  description: Whether the environment was (or, in check mode, would be) built, or uv's cache was cleaned.
  returned: always
  type: bool
msg:
  description: One line for the operator.
  returned: always
  type: str
  sample: staged vllm 0.33.0 in /opt/vllm/envs/vllm-0.33.0-20261204T101500Z (exactly the lock, 153 packages), proved pristine
env:
  description: O(env).
  returned: always
  type: str
check_mode:
  description: Whether the module ran in check mode.
  returned: always
  type: bool
steps:
  description:
    - The steps that ran, in order; each with C(step) (C(room), C(cache), C(venv), C(probe), C(lock), C(install),
      C(record), C(fingerprint)), C(name) (in words) and C(seconds); a command's with its exit status C(rc).
  returned: always
  type: list
  elements: dict
  sample: [{"step": "venv", "name": "create the venv", "seconds": 0.4, "rc": 0}]
commands:
  description: The commands run (or, in check mode, to run), each as its words.
  returned: unless refused before the plan
  type: list
  elements: list
created:
  description: Whether the new environment was created (on a failure it was removed again, see RV(removed)).
  returned: always
  type: bool
removed:
  description: Whether a failure removed the incomplete new environment.
  returned: always
  type: bool
cache_removed:
  description: Whether uv said it removed entries from its cache.
  returned: always
  type: bool
lock:
  description:
    - With O(lock), what it holds, in the keys C(package), C(count), C(fingerprint), C(python_version) and
      C(python_platform); else null.
  returned: always
  type: dict
check:
  description:
    - The M(gpufleet.vllm.package_integrity_info) result of O(package) in the new environment (the keys C(pristine),
      C(version), C(counts), C(files) and the rest); null when it did not run.
  returned: always
  type: dict
fingerprint:
  description:
    - With O(lock), the M(gpufleet.vllm.env_fingerprint_info) result of the new environment against the lock (the keys
      C(matches), C(fingerprint), C(not_pristine), C(unaccepted) and the rest); null when it did not run.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.stagebuild import StageFailed, build, check_options


def main():
    module = AnsibleModule(
        argument_spec=dict(
            env=dict(type="path", required=True),
            package=dict(type="str", default="vllm"),
            version=dict(type="str", required=True),
            lock=dict(type="str", no_log=False),
            extra_packages=dict(type="list", elements="str", default=[]),
            python=dict(type="str", default="/usr/bin/python3"),
            uv=dict(type="str", required=True),
            cache_dir=dict(type="path", default=""),
            cache_clean=dict(type="bool", default=True),
            index_url=dict(type="str", default=""),
            extra_index_urls=dict(type="list", elements="str", default=[]),
            find_links=dict(type="list", elements="str", default=[]),
            no_index=dict(type="bool", default=False),
            prerelease=dict(type="str", default=""),
            torch_backend=dict(type="str", default=""),
            no_deps=dict(type="bool", default=False),
            environment=dict(type="dict", default={}, no_log=True),
            min_free_mib=dict(type="int", default=0),
            room_purpose=dict(type="str", default=""),
            verify=dict(type="bool", default=True),
            accept_not_pristine=dict(type="list", elements="str", default=[]),
            current_env=dict(type="path", default=""),
            host_name=dict(type="str", default=""),
            timeout=dict(type="int", default=3600),
            check_timeout=dict(type="int", default=600),
            max_list=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for key in ("cache_dir", "current_env"):
        p[key] = p[key] or ""
    problems = check_options(p)
    if problems:
        module.fail_json(msg=valid_text("Refused, nothing was changed: %s." % "; ".join(problems)), changed=False,
                         check_mode=module.check_mode, env=p["env"], steps=[], created=False, removed=False,
                         cache_removed=False, lock=None, check=None, fingerprint=None)
    try:
        result = build(p, check_mode=module.check_mode)
    except StageFailed as exc:
        module.fail_json(msg=valid_text(exc.msg), check_mode=module.check_mode, **exc.result)
    module.exit_json(check_mode=module.check_mode, **result)


if __name__ == "__main__":
    main()
