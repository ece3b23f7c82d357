# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Decision of the reinstall role (documented in reinstall_plan.yml next to this file).

What to stage: decided here, in Python with a table of cases, instead of in
multi-line Jinja inside the role's task files. Which staged environment to
reuse and which ones cleanup removes are read on the host by the module
vllm_envs (module_utils/venvs.py).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import not_accepted, same_version


def _pristine_at(check, version):
    """A package_integrity result says: pristine, at this version (a skipped or missing check says no)."""
    if not isinstance(check, dict) or check.get("skipped"):
        return False
    # (PEP 440 forms, as package_integrity's version option compares them)
    return check.get("pristine") is True and same_version(check.get("version"), version)


def reinstall_unaccepted(fingerprint, accepted=None):
    """The distributions an env_fingerprint result names as not pristine, but the ACCEPTED ones
    (fleet_accepted_not_pristine); ['(N more than listed)'] when it did not list them all."""
    if not isinstance(fingerprint, dict):
        return []
    if isinstance(fingerprint.get("unaccepted"), list):
        # (env_fingerprint named every one that is not pristine, beyond max_list)
        return not_accepted(fingerprint["unaccepted"], accepted)
    listed = fingerprint.get("not_pristine") or []
    more = (fingerprint.get("not_pristine_total") or 0) - len(listed)
    names = not_accepted([d.get("name") for d in listed], accepted)
    return names + (["(%d more than listed)" % more] if more > 0 else [])


def _is_the_lock(fingerprint, accepted=()):
    """An env_fingerprint result says: exactly the lock's packages, every one pristine but the ACCEPTED ones (a
    skipped or missing check says no)."""
    if not isinstance(fingerprint, dict) or fingerprint.get("skipped"):
        return False
    return fingerprint.get("matches") is True and not reinstall_unaccepted(fingerprint, accepted)


def reinstall_plan(current_check, target_version, force=False, current_env="", reuse_check=None, reuse_env="",
                   new_env="", locked=False, current_fingerprint=None, reuse_fingerprint=None, accepted=None):
    """What stage.yml does and which environment it leaves staged (see reinstall_plan.yml).

    none:  the current environment is the pristine target (and force is off)
    reuse: an environment staged earlier is (and force is off)
    build: anything else, into new_env
    With locked, "the pristine target" also means: exactly the lock's packages, each pristine
    (CURRENT_FINGERPRINT, REUSE_FINGERPRINT: env_fingerprint results against the lock).
    """
    if target_version is None or str(target_version).strip() == "":
        raise AnsibleFilterError("reinstall_plan needs the target version (reinstall_target_version from resolve.yml)")
    if not isinstance(force, bool):
        raise AnsibleFilterError("reinstall_plan: force must be true or false, got %r" % (force,))
    if not isinstance(locked, bool):
        raise AnsibleFilterError("reinstall_plan: locked must be true or false, got %r" % (locked,))
    if (not force and _pristine_at(current_check, target_version)
            and (not locked or _is_the_lock(current_fingerprint, accepted))):
        return {"action": "none", "env": current_env or "", "needed": False}
    if (not force and reuse_env and _pristine_at(reuse_check, target_version)
            and (not locked or _is_the_lock(reuse_fingerprint, accepted))):
        return {"action": "reuse", "env": reuse_env, "needed": True}
    return {"action": "build", "env": new_env or "", "needed": True}


class FilterModule(object):
    """gpufleet.vllm reinstall filters."""

    def filters(self):
        return {
            "reinstall_plan": reinstall_plan,
            "reinstall_unaccepted": reinstall_unaccepted,
        }
