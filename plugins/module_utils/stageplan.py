# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the reinstall role stages on a host: none, reuse or build.

One implementation of the rule, for the module vllm_envs (which checks the
environments on the host and decides in the same call) and the filter
reinstall_plan (which decides from check results registered by tasks).

Public API:

* :func:`plan` -- the rule: none (the current environment is the pristine
  target, and with a lock exactly the lock, each package pristine but the
  accepted ones), reuse (an environment staged earlier is), build (anything
  else, or force).
* :func:`check_and_plan` -- the checks the rule needs, each only when the
  rule reads it, then the rule; the checks are given as callables (the
  module passes package_integrity_info's and env_fingerprint_info's).
* :func:`unaccepted` -- the not-pristine distributions of an env_fingerprint_info
  result but the accepted ones.
* :class:`PlanError` -- a value the rule cannot decide from (the operator's sentence).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import not_accepted, same_version


class PlanError(ValueError):
    """A value the rule cannot decide from; the message is the operator's sentence."""


def skipped(why):
    """A check that did not run, as Ansible registers a skipped task (never pristine, never the lock)."""
    return {"changed": False, "skipped": True, "skip_reason": why}


def could_not_check(msg):
    """A check that could not run (its module would have failed: no such environment, no package, a bound
    passed), as Ansible registers a failed task under failed_when false: never pristine, never the lock."""
    return {"changed": False, "failed": False, "check_error": True, "msg": msg}


def pristine_at(check, version):
    """A package_integrity_info result says: pristine, at this version (a skipped or missing check says no)."""
    if not isinstance(check, dict) or check.get("skipped"):
        return False
    # (PEP 440 forms, as package_integrity_info's version option compares them)
    return check.get("pristine") is True and same_version(check.get("version"), version)


def unaccepted(fingerprint, accepted=None):
    """The distributions an env_fingerprint_info result names as not pristine, but the ACCEPTED ones
    (fleet_accepted_not_pristine); ['(N more than listed)'] when it did not list them all."""
    if not isinstance(fingerprint, dict):
        return []
    if isinstance(fingerprint.get("unaccepted"), list):
        # (env_fingerprint_info named every one that is not pristine, beyond max_list)
        return not_accepted(fingerprint["unaccepted"], accepted)
    listed = fingerprint.get("not_pristine") or []
    more = (fingerprint.get("not_pristine_total") or 0) - len(listed)
    names = not_accepted([d.get("name") for d in listed], accepted)
    return names + (["(%d more than listed)" % more] if more > 0 else [])


def is_the_lock(fingerprint, accepted=()):
    """An env_fingerprint_info result says: exactly the lock's packages, every one pristine but the ACCEPTED ones (a
    skipped or missing check says no)."""
    if not isinstance(fingerprint, dict) or fingerprint.get("skipped"):
        return False
    return fingerprint.get("matches") is True and not unaccepted(fingerprint, accepted)


def plan(current_check, target_version, force=False, current_env="", reuse_check=None, reuse_env="",
         new_env="", locked=False, current_fingerprint=None, reuse_fingerprint=None, accepted=None):
    """What stage.yml does and which environment it leaves staged: {action, env, needed}.

    none:  the current environment is the pristine target (and force is off)
    reuse: an environment staged earlier is (and force is off)
    build: anything else, into new_env
    With locked, "the pristine target" also means: exactly the lock's packages, each pristine but the ACCEPTED
    ones (CURRENT_FINGERPRINT, REUSE_FINGERPRINT: env_fingerprint_info results against the lock).
    Raises PlanError without a target version, or for a force or locked that is not a bool.
    """
    if target_version is None or str(target_version).strip() == "":
        raise PlanError("reinstall_plan needs the target version (reinstall_target_version from resolve.yml)")
    if not isinstance(force, bool):
        raise PlanError("reinstall_plan: force must be true or false, got %r" % (force,))
    if not isinstance(locked, bool):
        raise PlanError("reinstall_plan: locked must be true or false, got %r" % (locked,))
    if (not force and pristine_at(current_check, target_version)
            and (not locked or is_the_lock(current_fingerprint, accepted))):
        return {"action": "none", "env": current_env or "", "needed": False}
    if (not force and reuse_env and pristine_at(reuse_check, target_version)
            and (not locked or is_the_lock(reuse_fingerprint, accepted))):
        return {"action": "reuse", "env": reuse_env, "needed": True}
    return {"action": "build", "env": new_env or "", "needed": True}


def check_and_plan(target_version, integrity, fingerprint=None, force=False, current_env="", reuse_env="",
                   new_env="", accepted=None):
    """Check what the rule reads, each only when it reads it, then decide (as stage.yml did in five tasks).

    INTEGRITY(venv) -> a package_integrity_info result of the package; FINGERPRINT(venv) -> an env_fingerprint_info result
    against the lock, or None for a run without a lock. Either may return a result without pristine or matches (a
    check that could not run): that environment is not the target.
    Returns plan()'s dict with current_check, current_fingerprint, reuse_check, reuse_fingerprint (a check that
    was not needed: skipped()).
    """
    locked = fingerprint is not None
    # (the argument errors before any check runs)
    plan(None, target_version, force=force, locked=locked)
    current_check = integrity(current_env) if current_env else skipped("there is no current environment")
    current_fingerprint = skipped("no lock" if not locked else "there is no current environment" if not current_env
                                  else "forced" if force else "the current environment's package is not the pristine "
                                  "target")
    # (the lock is compared only when the package is the pristine target already: anything else is built anew)
    if locked and current_env and not force and pristine_at(current_check, target_version):
        current_fingerprint = fingerprint(current_env)
    first = plan(current_check, target_version, force=force, locked=locked, current_fingerprint=current_fingerprint,
                 accepted=accepted)
    reuse_check = skipped("forced" if force else "no environment staged earlier for the target" if not reuse_env
                          else "the current environment is the target")
    if not force and reuse_env and first["needed"]:
        reuse_check = integrity(reuse_env)
    reuse_fingerprint = skipped("no lock" if not locked else "the environment staged earlier is not pristine, or "
                                "was not checked")
    if locked and reuse_check.get("pristine") is True:
        reuse_fingerprint = fingerprint(reuse_env)
    decided = plan(current_check, target_version, force=force, current_env=current_env, reuse_check=reuse_check,
                   reuse_env=reuse_env, new_env=new_env, locked=locked, current_fingerprint=current_fingerprint,
                   reuse_fingerprint=reuse_fingerprint, accepted=accepted)
    decided.update(current_check=current_check, current_fingerprint=current_fingerprint, reuse_check=reuse_check,
                   reuse_fingerprint=reuse_fingerprint)
    return decided


def _why_not(check, fingerprint, locked, version, accepted, which):
    """Why the environment WHICH (its check and fingerprint) is not the target, in a few words."""
    if not isinstance(check, dict) or check.get("skipped"):
        return "%s was not checked" % which
    if check.get("check_error"):
        return "%s could not be checked (%s)" % (which, str(check.get("msg") or "?")[:300])
    if check.get("pristine") is not True:
        return "%s is not pristine" % which
    if not same_version(check.get("version"), version):
        return "%s holds %s" % (which, check.get("version") or "no version")
    if locked and not is_the_lock(fingerprint, accepted):
        return "%s does not hold exactly the lock's packages, each pristine" % which
    return ""


def summary(decided, target_version, locked=False, accepted=None, force=False):
    """One sentence on check_and_plan()'s decision, for the operator."""
    action, env = decided["action"], decided["env"]
    if action == "none":
        return "nothing to stage: the current environment %s is the pristine target %s%s" % (
            env, target_version, " and holds exactly the lock" if locked else "")
    if action == "reuse":
        return "reuse %s, staged earlier: the pristine target %s%s" % (
            env, target_version, " holding exactly the lock" if locked else "")
    if force:
        why = ["forced"]
    else:
        why = [_why_not(decided["current_check"], decided["current_fingerprint"], locked, target_version, accepted,
                        "the current environment")
               if decided["current_check"].get("skipped") is not True else "there is no current environment"]
        if not decided["reuse_check"].get("skipped"):
            why.append(_why_not(decided["reuse_check"], decided["reuse_fingerprint"], locked, target_version,
                                accepted, "the one staged earlier"))
    return "build %s (%s)" % (env, "; ".join(w for w in why if w))
