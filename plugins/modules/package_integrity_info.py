#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: package_integrity_info
short_description: Verify an installed Python distribution (vLLM) against the hashes its installer recorded
version_added: 0.1.0
description:
  - Checks every file of an installed distribution (by default C(vllm)) against the size and hash in the C(RECORD)
    file its installer (uv, pip) wrote into the C(.dist-info) directory, and reports each file as C(ok),
    C(modified), C(size_differs), C(missing), C(unreadable), C(unhashed) (listed without a hash), C(outside) (a
    path that leaves site-packages and is not one of the environment's C(bin/) scripts; never opened) or
    C(malformed) (a RECORD row that cannot be understood).
  - Files under the distribution's own top-level directories that RECORD does not list (C(__pycache__) ignored, files
    of other installed distributions not counted), and C(.pth), C(sitecustomize) and C(usercustomize) start-up hooks
    in site-packages that no installed distribution owns, are reported as C(unowned).
  - The verdict comes only from the hashes. String patterns explain a changed file; they never turn a file whose
    hash matches into a failure. A pristine upstream C(deepseek_v2.py) mentions C(kv_b_proj) and still passes.
  - "Every modified or unowned file is explained: a syntax-tree scan that follows aliases (C(import torch as _t),
    C(from torch import save as dump), reassignment, C(getattr) with a constant name) reports tensor and object dumps
    (C(torch.save), C(torch.serialization.save), C(safetensors.torch.save_file), C(numpy.save), C(numpy.savez),
    C(pickle.dump)), debugger leftovers (C(breakpoint), C(pdb.set_trace)) and debug switches gated on an
    environment variable; and every line holding one of O(patterns) is listed as file, line and text."
  - With O(wheel), each modified text file is also compared with its copy in the pristine wheel (a bounded unified
    diff), findings on changed lines are marked, and the installed RECORD's hashes are checked against the wheel's
    RECORD, so a rewritten RECORD cannot hide an edit.
  - uv installs by hard-linking files from its cache. When a modified file shares its inode with a file in uv's
    cache, the edit is in the cache too and a plain C(uv pip install --reinstall) can put it back; the module
    reports this as RV(uv_cache_tainted) and says to clean the package from the cache first.
  - An editable install, an install without RECORD (C(.egg-info)) and an ambiguous one (two metadata directories)
    cannot be verified; the result says why (RV(reason)) and is never pristine.
  - With O(expected_packages), the whole environment is also checked in the same run, as
    M(gpufleet.vllm.env_fingerprint_info) checks it (RV(environment_check)). It must hold exactly those distributions at
    those versions (and, with O(expected_fingerprint), have that fingerprint), each pristine by its own C(RECORD)
    but those of O(accept_not_pristine). A fleet's lock proved with its package in one task.
  - The module only reads. It never changes anything (C(changed=false)).
options:
  name:
    description:
      - The distribution to verify, as installed (its name is normalised, so C(My_Pkg) and C(my-pkg) are the same).
    type: str
    default: vllm
  python:
    description:
      - The Python interpreter of the target environment, for example C(/root/ml-env/bin/python). It may differ
        from the interpreter Ansible runs this module with.
      - When it is the interpreter of a virtual environment whose files leave no doubt, its site-packages and
        scripts directories are read from them and nothing is run. No doubt means a C(pyvenv.cfg) beside it or one
        directory up that gives one version X.Y, the interpreter (links resolved) a file named C(pythonX.Y), and in
        the environment one C(lib/pythonX.Y/site-packages) directory and no other C(lib*/python*) one.
      - Otherwise it is run once (without a shell) to ask for them, with C(-I -S), so none of the environment's
        start-up hooks (C(.pth) files, C(sitecustomize), C(usercustomize)) runs as the user of the module; a
        virtual environment is recognised by its C(pyvenv.cfg). It is stopped after O(python_timeout) seconds and
        the task fails saying so.
      - Exactly one of O(python), O(venv) and O(site_packages) is required.
    type: path
  python_timeout:
    description:
      - Seconds the O(python) interpreter may take to answer before it (and anything it started) is killed and the
        task fails. At most 1 MiB of its output is read.
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
  wheel:
    description:
      - A wheel file, or a directory (wheelhouse) holding the wheel of the installed name and version, to diff
        changed text files against and to compare the installed RECORD with. Of several wheels of that version
        in a directory, the one whose own RECORD carries the installed RECORD's hashes is used (never the last
        name); when none does, RV(wheel_error) names them.
      - A wheel that cannot be found or read is reported in RV(wheel_error); it does not fail the task.
    type: path
  patterns:
    description:
      - Literal strings (not regular expressions, case-sensitive) to look for in modified and unowned files.
        Each hit is reported in RV(findings) with the file, line number and line. Patterns never change the
        verdict.
      - The default is the list the operators used on the reference host.
    type: list
    elements: str
    default: ['torch.save', '_t2.save', '_t.save', 'NOMLA_SAVE', 'embed_debug', '_nomla_debug', '_embed_debug_saved',
              '_nomla_class_saved']
  uv_cache_dir:
    description:
      - uv cache directories to look in for files sharing an inode with a modified file.
      - By default C($UV_CACHE_DIR), C($XDG_CACHE_HOME/uv) and C(~/.cache/uv) of the user the module runs as, where
        they exist. Give C([]) to skip the check.
    type: list
    elements: path
  version:
    description:
      - The version the distribution must be, for example the one just installed. Another installed version fails the
        task (with O(fail_on_drift) or not), saying both; versions are compared in their PEP 440 form (C(1.0-1) is
        C(1.0.post1)). Unset, any version is verified.
    type: str
  expected_packages:
    description:
      - The distributions the environment must hold, name to version, and no others (the pins of a fleet lock). With
        it, RV(environment_check) is the environment against them, and O(fail_on_drift) also fails the task when
        the environment is not exactly them or a distribution is not pristine (but those of O(accept_not_pristine)).
    type: dict
  expected_fingerprint:
    description:
      - With O(expected_packages), the fingerprint the environment must have, C(sha256:) and 64 hexadecimal digits
        (a lock's C(fingerprint)).
    type: str
  accept_not_pristine:
    description:
      - With O(expected_packages), the distributions (any spelling) that may be not pristine (a package whose own
        C(RECORD) does not match its files upstream).
    type: list
    elements: str
    default: []
  fail_on_drift:
    description:
      - Fail the task when the distribution is not pristine (drift found, or it cannot be verified). The message
        names the first few offending files. The full result is returned either way.
      - With O(expected_packages), also when the environment is not exactly those packages, or holds one that is not
        pristine but those of O(accept_not_pristine); the message names the first differences.
    type: bool
    default: true
  max_list:
    description:
      - The most entries returned in each list (files per class, findings, diffs, uv cache entries). RV(counts) and
        RV(findings_total) always hold the full numbers; RV(truncated) says whether anything was left out.
    type: int
    default: 50
  diff_max_bytes:
    description:
      - The most bytes of unified diff returned per file; a longer diff is cut at a line end and marked.
    type: int
    default: 16384
  timeout:
    description:
      - Seconds the whole check may take on the host (not counting O(python_timeout)). When it passes, the task
        fails with a message saying how far the check got (for example how many of the RECORD files were hashed);
        nothing is changed either way.
      - A large file being hashed is stopped between 32 MiB stretches, so the task may run a little longer.
      - With O(expected_packages), the check of the environment has a time limit of its own, as long (it runs once
        the package's check passed).
    type: int
    default: 600
extends_documentation_fragment:
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
attributes:
  diff_mode:
    support: N/A
    details: Nothing is edited. Differences from the wheel are returned in RV(diffs).
notes:
  - Files are hashed in a thread pool, largest first, through a small buffer per thread, so a large C(.so) is never
    read whole and memory stays low. The size is compared before hashing; a file whose size differs is not hashed.
  - Symbolic links are never followed inside site-packages; a file replaced by a link is reported as C(modified).
  - RECORD is read with the C(csv) module rather than C(importlib.metadata), which on Python 3.12 and newer drops the
    entries of missing files.
  - A reinstall with C(uv pip install --reinstall) removes only the files RECORD lists; C(unowned) files stay.
  - "Bounds, so that a hostile or broken tree cannot hang or exhaust the host: RECORD is read up to 64 MiB (a larger
    one makes the install not verifiable, with that reason); a RECORD size must be ASCII digits (at most 20); paths
    in RECORD that leave site-packages are never opened (only the environment's C(bin/) scripts are); the walk for
    unowned files is iterative, at most 64 directories deep (a deeper directory is reported as C(unowned), not
    walked) and at most 1,000,000 entries (more fails the task, naming the directory); a directory that cannot be
    listed is reported as C(unreadable); files are hashed in 1 MiB chunks; only files up to 4 MiB are scanned or
    diffed (a larger changed file gets a C(not_scanned) finding); the whole check stops after O(timeout) seconds."
  - File names and RECORD text that are not valid UTF-8 are shown with backslash escapes (for example C(\\xff)).
requirements:
  - Python 3.10 or newer on the managed host (standard library only). The target environment's interpreter may be
    any Python 3.
seealso:
  - name: Recording installed files (RECORD)
    description: The Python Packaging Authority's specification of the RECORD file.
    link: https://packaging.python.org/en/latest/specifications/recording-installed-packages/
  - name: uv cache
    description: How uv caches and links installed files, and how to clean a package from the cache.
    link: https://docs.astral.sh/uv/concepts/cache/
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Verify vLLM in the serving environment, fail on any drift
  gpufleet.vllm.package_integrity_info:
    python: /root/ml-env/bin/python

- name: Audit without failing, diff against the wheel from the local wheelhouse
  gpufleet.vllm.package_integrity_info:
    venv: /root/ml-env
    wheel: /srv/wheelhouse
    fail_on_drift: false
  register: vllm_integrity

- name: Prove vLLM pristine and its environment exactly the fleet's lock, in one run
  gpufleet.vllm.package_integrity_info:
    venv: /opt/vllm/current
    expected_packages: "{{ lock.pins }}"
    expected_fingerprint: "{{ lock.fingerprint }}"
    accept_not_pristine: [pynvvideocodec]

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ vllm_integrity.msg }}"
  when: not vllm_integrity.pristine

- name: Check another distribution with the operator's own patterns
  gpufleet.vllm.package_integrity_info:
    site_packages: /opt/venvs/serve/lib/python3.12/site-packages
    name: flashinfer-python
    patterns:
      - DEBUG_DUMP
      - torch.save
    uv_cache_dir:
      - /var/cache/uv
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
pristine:
  description: True when every RECORD entry matched and nothing unowned, outside or malformed was found.
  returned: always
  type: bool
  sample: false
verifiable:
  description: False for an editable install, an install without RECORD, or two metadata directories.
  returned: always
  type: bool
  sample: true
reason:
  description: Why the distribution cannot be verified (null when it can).
  returned: always
  type: str
  sample: null
msg:
  description: One sentence with the verdict, the counts, the first offending files and the uv cache advice.
  returned: always
  type: str
  sample: "vllm 0.33.0 in /root/ml-env/lib/python3.12/site-packages is not pristine: 2 size differs. First: ..."
distribution:
  description: The name that was asked for.
  returned: always
  type: str
  sample: vllm
version:
  description: The installed version (from METADATA).
  returned: always
  type: str
  sample: 0.33.0
version_matches:
  description: Whether RV(version) is O(version); null without O(version).
  returned: when the distribution was read
  type: bool
  sample: true
installer:
  description: The installer that wrote RECORD (the INSTALLER file), for example C(uv) or C(pip).
  returned: always
  type: str
  sample: uv
site_packages:
  description: The site-packages directory holding the distribution.
  returned: always
  type: str
  sample: /root/ml-env/lib/python3.12/site-packages
dist_info:
  description: The distribution's metadata directory.
  returned: always
  type: str
  sample: /root/ml-env/lib/python3.12/site-packages/vllm-0.33.0.dist-info
environment:
  description: Where the environment was found (C(site_dirs), C(scripts_dir), C(root), C(source)).
  returned: always
  type: dict
counts:
  description: Number of files per class (complete, never cut by O(max_list)).
  returned: always
  type: dict
  sample:
    ok: 5805
    modified: 0
    size_differs: 2
    missing: 0
    unreadable: 0
    unhashed: 0
    unowned: 1
    outside: 0
    malformed: 0
files:
  description:
    - Per class (all but C(ok)), up to O(max_list) entries, each a dict with C(path) (relative to site-packages, or
      as RECORD spells it for scripts) and what is known.
    - C(modified) entries have C(hash) and C(expected_hash), or a C(reason) (symbolic link, RECORD rewritten);
      C(size_differs) have C(size) and C(expected_size); C(unreadable), C(outside), C(unowned) may have a C(reason);
      C(malformed) have C(line) and C(reason).
  returned: always
  type: dict
  sample:
    size_differs:
      - path: vllm/model_executor/models/deepseek_v2.py
        size: 79954
        expected_size: 78888
    unowned:
      - path: evil.pth
        reason: start-up hook owned by no installed distribution
offenders:
  description: The first offending files in order, each C(path) and C(class).
  returned: always
  type: list
  elements: dict
truncated:
  description: True when a list was cut at O(max_list).
  returned: always
  type: bool
findings:
  description:
    - Explanations for modified and unowned files, up to O(max_list), sorted by file and line. Each has C(path),
      C(line), C(kind) (C(tensor_dump), C(object_dump), C(debugger), C(env_debug_switch), C(pattern),
      C(pth_exec), C(syntax_error), C(not_scanned) for a file too large (over 4 MiB) or too deeply nested for the
      scan), C(what) (the canonical call, variable or pattern) and C(text) (the line).
    - C(via) is the spelling in the file when a call was made through an alias (for example C(_t.save)).
    - C(changed_line) (with O(wheel) only) tells whether the line differs from the wheel's copy.
  returned: always
  type: list
  elements: dict
  sample:
    - path: vllm/model_executor/models/deepseek_v2.py
      line: 1254
      kind: tensor_dump
      what: torch.save
      via: _t.save
      text: _t.save(q.detach().cpu(), f"/tmp/nomla_debug_tp{_rank}.pt")
      changed_line: true
findings_total:
  description: The number of findings before the list was cut.
  returned: always
  type: int
diffs:
  description:
    - With O(wheel), one entry per modified or size-differing file in site-packages (up to O(max_list)) with
      C(path), C(diff) (unified diff, wheel copy first, at most O(diff_max_bytes)), C(truncated) and, when no text
      diff could be made (binary file, not in the wheel), C(note).
  returned: always
  type: list
  elements: dict
wheel:
  description: The wheel file that was compared with, or null.
  returned: always
  type: str
wheel_error:
  description: Why O(wheel) could not be used, or null.
  returned: always
  type: str
uv_cache_tainted:
  description: True when a modified file shares its inode with a file in a uv cache (the edit is in the cache too).
  returned: always
  type: bool
uv_cache_taint:
  description: The tainted files, each C(path), C(cache_file), C(cache_entry) and C(links) (link count).
  returned: always
  type: list
  elements: dict
uv_cache_dirs:
  description: The uv cache directories that were searched.
  returned: always
  type: list
  elements: str
hardlinked_elsewhere:
  description: Modified files with more than one link whose other links were not found in the searched uv caches.
  returned: always
  type: list
  elements: dict
shadowed:
  description:
    - Metadata directories of the same distribution in later site directories of the interpreter; Python imports
      the first one, which is the one verified.
  returned: always
  type: list
  elements: str
environment_check:
  description:
    - With O(expected_packages), the M(gpufleet.vllm.env_fingerprint_info) result of the environment against them (the
      keys C(matches), C(fingerprint), C(expected_fingerprint), C(different), C(missing), C(extra), C(not_pristine),
      C(not_pristine_total), C(unaccepted) and the rest); null without it.
  returned: always
  type: dict
elapsed:
  description: Seconds the check took on the host.
  returned: always
  type: float
  sample: 0.27
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.fingerprint import (
    check_environment, mismatch_message, not_pristine_message)
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import check_installed
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import same_version
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError, safe_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.scanpatterns import DEFAULT_PATTERNS


_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}\Z")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default="vllm"),
            python=dict(type="path"),
            python_timeout=dict(type="int", default=30),
            venv=dict(type="path"),
            site_packages=dict(type="path"),
            wheel=dict(type="path"),
            patterns=dict(type="list", elements="str", default=list(DEFAULT_PATTERNS)),
            uv_cache_dir=dict(type="list", elements="path"),
            version=dict(type="str"),
            expected_packages=dict(type="dict"),
            expected_fingerprint=dict(type="str"),
            accept_not_pristine=dict(type="list", elements="str", default=[]),
            fail_on_drift=dict(type="bool", default=True),
            max_list=dict(type="int", default=50),
            diff_max_bytes=dict(type="int", default=16384),
            timeout=dict(type="int", default=600),
        ),
        mutually_exclusive=[("python", "venv", "site_packages")],
        required_one_of=[("python", "venv", "site_packages")],
        supports_check_mode=True,
    )
    params = module.params
    if params["max_list"] < 1:
        module.fail_json(msg="max_list must be 1 or more (got %d)." % params["max_list"])
    if params["diff_max_bytes"] < 256:
        module.fail_json(msg="diff_max_bytes must be 256 or more (got %d)." % params["diff_max_bytes"])

    if params["timeout"] < 1:
        module.fail_json(msg="timeout must be 1 or more seconds (got %d)." % params["timeout"])
    if params["python_timeout"] < 1:
        module.fail_json(msg="python_timeout must be 1 or more seconds (got %d)." % params["python_timeout"])
    expected_fingerprint = params["expected_fingerprint"]
    if expected_fingerprint is not None:
        if params["expected_packages"] is None:
            module.fail_json(msg="expected_fingerprint goes with expected_packages (the packages it is the fingerprint of).")
        expected_fingerprint = expected_fingerprint.strip().lower()
        if not _FINGERPRINT.match(expected_fingerprint):
            module.fail_json(msg=safe_text("expected_fingerprint must be sha256: and 64 hexadecimal digits, as a lock "
                                           "gives it (got %r)." % params["expected_fingerprint"][:100]))

    try:
        result = check_installed(dist_name=params["name"], python=params["python"], venv=params["venv"],
                                 site_packages=params["site_packages"], python_timeout=params["python_timeout"],
                                 timeout=params["timeout"], wheel=params["wheel"], patterns=params["patterns"],
                                 uv_cache_dirs=params["uv_cache_dir"], max_list=params["max_list"],
                                 diff_max_bytes=params["diff_max_bytes"])
    except IntegrityError as exc:
        module.fail_json(msg=safe_text(str(exc)), changed=False)

    result["check_mode"] = module.check_mode
    result["environment_check"] = None
    if params["version"] is not None:
        wanted = params["version"].strip()
        found = str(result.get("version") or "")
        result["version_matches"] = same_version(found, wanted)
        if not result["version_matches"]:
            result["msg"] = safe_text("%s is version %s, not the expected %s: %s" % (
                params["name"], found or "(none)", wanted, result["msg"]))
            module.fail_json(**result)
    if params["fail_on_drift"] and not result["pristine"]:
        # (the package's own verdict first: the environment's check hashes every other package, not needed now)
        result["msg"] += " (fail_on_drift is true; set it to false to only report.)"
        module.fail_json(**result)
    if params["expected_packages"] is not None:
        try:
            result["environment_check"] = check_environment(
                python=params["python"], venv=params["venv"], site_packages=params["site_packages"],
                python_timeout=params["python_timeout"], expected=params["expected_packages"],
                expected_fingerprint=expected_fingerprint, accept_not_pristine=params["accept_not_pristine"],
                max_list=params["max_list"], timeout=params["timeout"])
        except IntegrityError as exc:
            result["msg"] = safe_text("%s; the check of the environment against expected_packages could not run: %s"
                                      % (result["msg"].rstrip("."), exc))
            module.fail_json(**result)
    environment = result["environment_check"]
    if params["fail_on_drift"] and environment is not None and (environment["matches"] is False
                                                                or environment["unaccepted"]):
        why = mismatch_message(environment) if environment["matches"] is False else \
            not_pristine_message(environment, environment["unaccepted"]) + "."
        result["msg"] = safe_text("%s %s is pristine, but %s (fail_on_drift is true; set it to false to only report.)"
                                  % (params["name"], result.get("version") or "", why[:1].lower() + why[1:]))
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
