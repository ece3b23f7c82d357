#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: env_fingerprint_info
short_description: Fingerprint a Python environment (every distribution, its source, its files) and compare it with a lock
version_added: 0.1.0
description:
  - Lists every Python distribution installed in an environment (each C(*.dist-info) and C(*.egg-info) entry of its
    site-packages), with its name and version from its C(METADATA), the tool that installed it (C(INSTALLER)) and
    where it came from (C(direct_url.json)), and returns RV(fingerprint), one digest of the set of names and
    versions. The control node computes the same digest for a lock, so a host whose fingerprint equals the lock's
    holds exactly the lock's distributions, whatever the spelling (C(Typing_Extensions) and C(typing-extensions),
    C(1.0-1) and C(1.0.post1) are the same).
  - With O(verify) (the default), every file each distribution's C(RECORD) lists is checked against the size and
    hash its installer recorded, as M(gpufleet.vllm.package_integrity_info) checks one distribution; a distribution is
    pristine when every listed file matches. Scripts in the environment's C(bin/) (their first line names the
    environment's interpreter) and data files the wheel installed below the environment (C(share/), ...) are
    checked against their recorded hashes too. A file two distributions install, which matches the RECORD of the
    one installed last, is reported as overwritten by that one (a clash between the two, not an edit); the other
    one is not pristine. Files RECORD does not list are not looked for; run
    M(gpufleet.vllm.package_integrity_info) on a distribution for that, and for the explanation of a changed file.
  - With O(expected) (a lock's names and versions) or O(expected_fingerprint), RV(matches) says whether the
    environment holds exactly that set, and RV(missing), RV(extra) and RV(different) say how it differs.
  - Anything odd about an installed entry is reported in RV(problems) and makes that distribution not pristine; the
    entry still counts in the fingerprint, because Python sees it. Odd means a metadata directory that is a
    symbolic link (never followed), two metadata directories for one name, a C(METADATA) that cannot be read or
    names another distribution, a C(direct_url.json) that is not valid, an editable install, no C(RECORD) (an
    C(.egg-info) install).
  - The module only reads. It never changes anything (C(changed=false)).
options:
  python:
    description:
      - The Python interpreter of the target environment, for example C(/root/ml-env/bin/python). It may differ
        from the interpreter Ansible runs this module with.
      - It is found as M(gpufleet.vllm.package_integrity_info) finds it, read from the virtual environment's files when
        they leave no doubt and otherwise asked once (without a shell, with C(-I -S), so none of the environment's
        start-up hooks runs), stopped after O(python_timeout) seconds.
      - Exactly one of O(python), O(venv) and O(site_packages) is required.
    type: path
  python_timeout:
    description:
      - Seconds the O(python) interpreter may take to answer before it (and anything it started) is killed and the
        task fails.
    type: int
    default: 30
  venv:
    description:
      - The root of the target virtual environment; its C(lib/python*/site-packages) is used and nothing is run.
    type: path
  site_packages:
    description:
      - The site-packages directory itself. Scripts are looked for in C(<prefix>/bin) when the directory has the
        usual C(<prefix>/lib/pythonX.Y/site-packages) layout.
    type: path
  verify:
    description:
      - Check every file each distribution's RECORD lists against its recorded size and hash. Without it only the
        metadata is read (fast), and each C(pristine) in RV(distributions) is null.
    type: bool
    default: true
  expected:
    description:
      - The distributions the environment should hold, as a dictionary of name to version (for example the
        packages of a lock). Names and versions are compared in their canonical spelling (PEP 503 names, PEP 440
        versions).
      - Give every version as text; an unquoted C(1.10) in YAML is the number C(1.1), and the task fails saying
        so rather than comparing the wrong version.
    type: dict
  expected_fingerprint:
    description:
      - The fingerprint the environment should have (C(sha256:) and 64 hexadecimal digits), for example the lock's.
    type: str
  fail_on_mismatch:
    description:
      - Fail the task when RV(matches) is false. The message names the first differences and the distributions
        that are not pristine. The full result is returned either way.
      - Distributions that are not pristine alone do not fail the task; they are in RV(not_pristine) and in the
        message.
    type: bool
    default: false
  fail_on_not_pristine:
    description:
      - Fail the task when a distribution is not pristine, except those named in O(accept_not_pristine) (a proof that
        the environment is the lock, every package pristine, in one task). The message names them, with why. The full
        result is returned either way.
      - Needs O(verify).
    type: bool
    default: false
  accept_not_pristine:
    description:
      - Distributions that may be not pristine without failing O(fail_on_not_pristine) (names in any spelling; for
        example one whose post-install step rewrites a file its RECORD lists). They are still reported in
        RV(not_pristine).
    type: list
    elements: str
    default: []
  max_list:
    description:
      - The most entries returned in RV(not_pristine) and RV(problems); RV(not_pristine_total) and
        RV(problems_total) hold the full numbers. RV(distributions), RV(missing), RV(extra) and RV(different) are
        always complete.
    type: int
    default: 50
  timeout:
    description:
      - Seconds the whole check may take on the host (not counting O(python_timeout)). When it passes, the task
        fails with a message saying how far the check got (for example how many of the files were hashed);
        nothing is changed either way.
      - A large file being hashed is stopped between 32 MiB stretches, so the task may run a little longer.
    type: int
    default: 600
extends_documentation_fragment:
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
attributes:
  diff_mode:
    support: N/A
    details: Nothing is edited. Differences from the expected set are returned in RV(missing), RV(extra) and RV(different).
notes:
  - The fingerprint is C(sha256:) and the hexadecimal SHA-256 of the sorted lines C(name==version), one per installed
    distribution, each ending in a newline, name and version in their canonical spelling.
  - Files of all distributions are hashed in one thread pool, largest first, through a small buffer per thread, so
    a large C(.so) is never read whole and memory stays low. The size is compared before hashing.
  - "Bounds, so that a hostile or broken environment cannot hang or exhaust the host: at most 10,000 metadata
    entries and 200,000 directory entries per site directory (more fails the task, naming the directory); the
    first 256 KiB of C(METADATA) (its header comes first), 64 KiB of C(direct_url.json), 200 bytes of C(INSTALLER);
    each RECORD up to 64 MiB (a larger one makes that distribution not pristine, with that reason) and 512 MiB of
    RECORD in all; symbolic links are never followed; paths in RECORD that leave the environment are never
    opened; files are hashed in 1 MiB chunks; the whole check stops after O(timeout) seconds."
  - User names, passwords and secret-looking query values (tokens, signatures) are removed from the URLs in
    C(direct_url.json) before they reach the result.
requirements:
  - Python 3.10 or newer on the managed host (standard library only). The target environment's interpreter may be
    any Python 3.
seealso:
  - module: gpufleet.vllm.package_integrity_info
  - name: Recording installed files (RECORD)
    description: The Python Packaging Authority's specification of the RECORD file.
    link: https://packaging.python.org/en/latest/specifications/recording-installed-packages/
  - name: Recording the direct URL origin of installed distributions
    description: The specification of direct_url.json.
    link: https://packaging.python.org/en/latest/specifications/direct-url/
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Fingerprint the serving environment
  gpufleet.vllm.env_fingerprint_info:
    venv: /root/ml-env
  register: vllm_env

- name: Show it
  ansible.builtin.debug:
    msg: "{{ vllm_env.msg }}"

- name: Fail a host whose environment is not exactly the lock
  gpufleet.vllm.env_fingerprint_info:
    python: /root/ml-env/bin/python
    expected: "{{ vllm_lock.packages }}"
    expected_fingerprint: "{{ vllm_lock.fingerprint }}"
    fail_on_mismatch: true

- name: Prove the environment is exactly the lock, every package pristine but one known to edit its own files
  gpufleet.vllm.env_fingerprint_info:
    venv: /opt/vllm/current
    expected: "{{ vllm_lock.packages }}"
    expected_fingerprint: "{{ vllm_lock.fingerprint }}"
    fail_on_mismatch: true
    fail_on_not_pristine: true
    accept_not_pristine: [some-package]

- name: Names and versions only (no hashing), against two pinned versions
  gpufleet.vllm.env_fingerprint_info:
    site_packages: /opt/venvs/serve/lib/python3.12/site-packages
    verify: false
    expected:
      vllm: "0.33.0"
      torch: "2.9.0+cu128"
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (it reads only).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
msg:
  description: One sentence with the count, the fingerprint, the distributions that are not pristine and how the set differs.
  returned: always
  type: str
  sample: "198 distributions in /root/ml-env/lib/python3.12/site-packages, fingerprint sha256:98e97c53df32; all pristine
    (61273 files match their RECORD hashes); it matches the expected set."
fingerprint:
  description: C(sha256:) and 64 hexadecimal digits, the digest of the set of canonical names and versions.
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: str
  sample: sha256:98e97c53df3262aa0b0f6c4bb9d1c1b7df52cbdb7ff8b0e5c2ad1c90b5b5b8b4
count:
  description: The number of metadata entries in the fingerprint (one per installed distribution).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: int
  sample: 198
files_checked:
  description: The number of files hashed or checked against RECORD (0 without O(verify)).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: int
  sample: 61273
verified:
  description: Whether the files were checked (O(verify)).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: bool
distributions:
  description:
    - Every installed distribution, sorted by name, each C(name) and C(version) (canonical spelling), C(source),
      C(installer) (from C(INSTALLER), or null), C(pristine) (null without O(verify)) and C(problem) (or null).
    - C(source) is C(index) (no C(direct_url.json)), C(git+<url>@<commit>) (or another version control system),
      C(dir:<path>), C(editable:<path>), C(url:<url>) (an archive) or C(unknown) (with a problem).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: list
  elements: dict
  sample:
    - name: vllm
      version: 0.33.0
      source: index
      installer: uv
      pristine: true
      problem: null
    - name: gguf
      version: 0.17.1
      source: git+https://github.com/ggml-org/llama.cpp@4c0a8e1b7e3e
      installer: uv
      pristine: true
      problem: null
not_pristine:
  description:
    - The distributions that are not pristine (up to O(max_list)), each C(name), C(version), C(reason) and
      C(overwritten_by) (the distributions, C(name version), whose RECORD the files that differ from this one's
      match).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: list
  elements: dict
  sample:
    - name: vllm
      version: 0.33.0
      reason: "1 size differs (first: vllm/model_executor/models/deepseek_v2.py (size differs))"
      overwritten_by: []
    - name: cuda-bindings
      version: 13.5.0
      reason: "25 files overwritten by cuda-python 12.6.2.post1 (they match its RECORD: both distributions install
        them and the one installed last wins)"
      overwritten_by:
        - cuda-python 12.6.2.post1
unaccepted:
  description:
    - The names of the distributions that are not pristine and not in O(accept_not_pristine), all of them (the ones
      O(fail_on_not_pristine) fails on).
  returned: when the environment was read with O(verify)
  type: list
  elements: str
  sample: [vllm]
not_pristine_total:
  description: The number of distributions that are not pristine.
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: int
problems:
  description:
    - What is odd about installed entries (up to O(max_list)), each C(name), C(path) (the metadata entry) and
      C(problem).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: list
  elements: dict
  sample:
    - name: six
      path: /root/ml-env/lib/python3.12/site-packages/six-1.16.0.dist-info
      problem: "another metadata directory for six is installed (...six-1.17.0.dist-info); Python sees only one of them: remove the stale one"
problems_total:
  description: The number of problems.
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: int
matches:
  description:
    - True when the environment holds exactly O(expected) and has O(expected_fingerprint) (those given), false when
      not, null when neither was given.
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: bool
  sample: true
expected_fingerprint:
  description: O(expected_fingerprint), or null.
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: str
missing:
  description: Expected distributions that are not installed, each C(name) and C(version) (the expected one).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: list
  elements: dict
extra:
  description: Installed distributions that were not expected, each C(name) and C(version).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: list
  elements: dict
different:
  description:
    - Distributions installed in another version than expected, each C(name), C(expected) and C(found) (two
      versions joined with a comma when two metadata directories are installed); also a distribution at the
      expected version that was not installed from an index (its C(direct_url.json) names a file, a directory or a
      git checkout, C(found) is then C(1.2.2 from url:file:///...)), since an expected set is a lock's index wheels.
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: list
  elements: dict
  sample:
    - name: flashinfer-python
      expected: 0.6.4
      found: 0.6.3
environment:
  description: Where the environment was found (C(site_dirs), C(scripts_dir), C(root), C(source)).
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: dict
elapsed:
  description: Seconds the check took on the host.
  returned: when the environment was read (also when O(fail_on_mismatch) fails the task)
  type: float
  sample: 41.2
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.fingerprint import (
    check_environment, mismatch_message, not_pristine_message)
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError, safe_text

_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}\Z")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path"),
            python_timeout=dict(type="int", default=30),
            venv=dict(type="path"),
            site_packages=dict(type="path"),
            verify=dict(type="bool", default=True),
            expected=dict(type="dict"),
            expected_fingerprint=dict(type="str"),
            fail_on_mismatch=dict(type="bool", default=False),
            fail_on_not_pristine=dict(type="bool", default=False),
            accept_not_pristine=dict(type="list", elements="str", default=[]),
            max_list=dict(type="int", default=50),
            timeout=dict(type="int", default=600),
        ),
        mutually_exclusive=[("python", "venv", "site_packages")],
        required_one_of=[("python", "venv", "site_packages")],
        supports_check_mode=True,
    )
    params = module.params
    if params["max_list"] < 1:
        module.fail_json(msg="max_list must be 1 or more (got %d)." % params["max_list"])
    if params["timeout"] < 1:
        module.fail_json(msg="timeout must be 1 or more seconds (got %d)." % params["timeout"])
    if params["fail_on_not_pristine"] and not params["verify"]:
        module.fail_json(msg="fail_on_not_pristine needs verify: without it no file is hashed, so nothing is known "
                             "to be pristine.")
    if params["python_timeout"] < 1:
        module.fail_json(msg="python_timeout must be 1 or more seconds (got %d)." % params["python_timeout"])
    expected_fingerprint = params["expected_fingerprint"]
    if expected_fingerprint is not None:
        expected_fingerprint = expected_fingerprint.strip().lower()
        if not _FINGERPRINT.match(expected_fingerprint):
            module.fail_json(msg=safe_text("expected_fingerprint must be sha256: and 64 hexadecimal digits, as the lock "
                                           "gives it (got %r)." % params["expected_fingerprint"][:100]))
    try:
        result = check_environment(python=params["python"], venv=params["venv"], site_packages=params["site_packages"],
                                   python_timeout=params["python_timeout"], verify=params["verify"],
                                   expected=params["expected"], expected_fingerprint=expected_fingerprint,
                                   accept_not_pristine=params["accept_not_pristine"], max_list=params["max_list"],
                                   timeout=params["timeout"])
    except IntegrityError as exc:
        module.fail_json(msg=safe_text(str(exc)), changed=False)

    result["check_mode"] = module.check_mode
    if params["fail_on_mismatch"] and result["matches"] is False:
        result["msg"] = safe_text(mismatch_message(result)
                                  + " Nothing was changed (fail_on_mismatch is true; set it to false to only report).")
        module.fail_json(**result)
    if params["fail_on_not_pristine"] and result["unaccepted"]:
        result["msg"] = safe_text(not_pristine_message(result, result["unaccepted"])
                                  + " (fail_on_not_pristine is true; accept_not_pristine names those that may be).")
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
