# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Decisions of the reinstall role (documented in reinstall_*.yml next to this file).

What to stage, which staged environment is the newest, which ones cleanup
removes: decided here, in Python with a table of cases, instead of in
multi-line Jinja inside the role's task files.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

# staged environments are named <package>-<version>-<UTC time>
_STAMP = re.compile(r"-([0-9]{8}T[0-9]{6}Z)$")


def _pristine_at(check, version):
    """A package_integrity result says: pristine, at this version (a skipped or missing check says no)."""
    if not isinstance(check, dict) or check.get("skipped"):
        return False
    return check.get("pristine") is True and str(check.get("version") or "") == str(version)


def _paths(paths, name):
    if paths is None:
        return []
    if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__"):
        raise AnsibleFilterError("%s expects a list of environment paths, got %s" % (name, type(paths).__name__))
    return [str(path) for path in paths]


def _newest_first(paths):
    """Paths sorted by the UTC time in their name, newest first (equal times: by path, descending)."""
    def key(path):
        match = _STAMP.search(path)
        return (match.group(1) if match else "", path)
    return sorted(paths, key=key, reverse=True)


def reinstall_plan(current_check, target_version, force=False, current_env="", reuse_check=None, reuse_env="",
                   new_env=""):
    """What stage.yml does and which environment it leaves staged (see reinstall_plan.yml).

    none:  the current environment is the pristine target (and force is off)
    reuse: an environment staged earlier is (and force is off)
    build: anything else, into new_env
    """
    if target_version is None or str(target_version).strip() == "":
        raise AnsibleFilterError("reinstall_plan needs the target version (reinstall_target_version from resolve.yml)")
    if not isinstance(force, bool):
        raise AnsibleFilterError("reinstall_plan: force must be true or false, got %r" % (force,))
    if not force and _pristine_at(current_check, target_version):
        return {"action": "none", "env": current_env or "", "needed": False}
    if not force and reuse_env and _pristine_at(reuse_check, target_version):
        return {"action": "reuse", "env": reuse_env, "needed": True}
    return {"action": "build", "env": new_env or "", "needed": True}


def reinstall_newest(paths, exclude=()):
    """The newest staged environment of PATHS that is not in EXCLUDE, or '' (see reinstall_newest.yml)."""
    skip = set(_paths(exclude, "reinstall_newest (exclude)"))
    for path in _newest_first(_paths(paths, "reinstall_newest")):
        if path not in skip:
            return path
    return ""


def reinstall_to_remove(paths, keep, protect=()):
    """The staged environments beyond the KEEP newest, never one in PROTECT (see reinstall_to_remove.yml)."""
    try:
        keep = int(keep)
    except (TypeError, ValueError, OverflowError):
        raise AnsibleFilterError("reinstall_to_remove: reinstall_keep must be a whole number, got %r" % (keep,))
    if keep < 0:
        raise AnsibleFilterError("reinstall_to_remove: reinstall_keep must be 0 or more, got %d" % keep)
    protected = set(path for path in _paths(protect, "reinstall_to_remove (protect)") if path)
    return [path for path in _newest_first(_paths(paths, "reinstall_to_remove"))[keep:] if path not in protected]


class FilterModule(object):
    """gpufleet.vllm reinstall filters."""

    def filters(self):
        return {
            "reinstall_plan": reinstall_plan,
            "reinstall_newest": reinstall_newest,
            "reinstall_to_remove": reinstall_to_remove,
        }
