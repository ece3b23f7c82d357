# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet lock on the control node (documented in lock_*.yml next to this file).

A lock's text (lookup gpufleet.vllm.uv_lock) becomes what the roles need:
the target version, the pins every host must hold and their fingerprint
(lock_info); whether a host's interpreter fits it (lock_target_problems);
and what a host's environment changes into (lock_dependency_diff). The
parsing and the checks are module_utils/lockfile.py's.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, pkgnames


def lock_info(text, package):
    """What the roles read of a lock: {package, version, fingerprint, short, pins, count, python_version,
    python_platform, excluded, sources, resolved_at}; AnsibleFilterError when it is not a lock of PACKAGE."""
    try:
        parsed = lockfile.parse_lock(text)
    except lockfile.LockError as exc:
        raise AnsibleFilterError("The fleet lock was refused: %s" % exc)
    name = pkgnames.canonical_name(str(package or ""))
    if parsed["package"]["name"] != name:
        raise AnsibleFilterError("The fleet lock is a lock of %s, not of %s (fleet_package); nothing was changed."
                                 % (parsed["package"]["name"], name))
    meta = parsed["meta"]
    return {
        "package": name,
        "version": parsed["package"]["version"],
        "fingerprint": parsed["fingerprint"],
        "short": pkgnames.short_fingerprint(parsed["fingerprint"]),
        "pins": lockfile.versions(parsed),
        "count": len(parsed["packages"]),
        "python_version": meta.get("python_version"),
        "python_platform": meta.get("python_platform"),
        "excluded": meta.get("excluded"),
        "sources": meta.get("sources"),
        "resolved_at": meta.get("resolved_at"),
    }


def lock_target_problems(info, probe):
    """Why the lock of INFO (lock_info) does not fit an interpreter, from PROBE: the JSON text (or dict) of
    {python, machine, libc} the role's probe prints. A list of sentences, empty when it fits."""
    if not isinstance(info, dict) or not info:
        return []
    if not isinstance(probe, dict):
        try:
            probe = json.loads(str(probe or "").strip().splitlines()[-1])
        except (ValueError, IndexError):
            probe = None
    if not isinstance(probe, dict):
        return ["the new environment's interpreter did not say its Python version and platform"]
    meta = {"python_version": info.get("python_version"), "python_platform": info.get("python_platform")}
    return lockfile.check_target(meta, probe.get("python"), probe.get("machine"), probe.get("libc"))


def _installed(environment):
    """{name: {version, source}} of an env_fingerprint result (its distributions) or of such a dict."""
    if isinstance(environment, dict) and "distributions" in environment:
        environment = environment.get("distributions")
    if isinstance(environment, dict):
        return environment
    found = {}
    for dist in environment or ():
        if isinstance(dist, dict) and dist.get("name"):
            found[dist["name"]] = {"version": dist.get("version") or "", "source": dist.get("source") or "index"}
    return found


def lock_dependency_diff(environment, info, limit=20):
    """What a host's environment (an env_fingerprint result, or its distributions) changes into when it
    installs the lock of INFO: lockfile.dependency_diff plus ``lines`` (at most LIMIT short lines)."""
    if not isinstance(info, dict) or not info.get("pins"):
        return {}
    after = dict((name, {"version": version, "source": "index"}) for name, version in info["pins"].items())
    diff = lockfile.dependency_diff(_installed(environment), after)
    diff["lines"] = lockfile.diff_lines(diff, limit)
    return diff


class FilterModule(object):
    """gpufleet.vllm fleet-lock filters."""

    def filters(self):
        return {
            "lock_info": lock_info,
            "lock_target_problems": lock_target_problems,
            "lock_dependency_diff": lock_dependency_diff,
        }
