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
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils import dependency_report, lockfile, pkgnames


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


def _probe(value):
    """The dict of one interpreter's probe (its JSON line, a command result or the dict itself), or None."""
    if isinstance(value, dict) and "stdout" in value:
        value = value.get("stdout")
    if isinstance(value, dict):
        return value
    try:
        found = json.loads(str(value or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return found if isinstance(found, dict) else None


def _probes(hosts, hostvars, key):
    """host -> its registered KEY (the probe), for the HOSTS that ran it (not skipped)."""
    found = {}
    for host in hosts or ():
        try:
            value = hostvars[host][key]
        except Exception:  # a host without it: not asked  # pylint: disable=broad-exception-caught
            continue
        if isinstance(value, dict) and value.get("skipped"):
            continue
        found[host] = value
    return found


def lock_target(hosts, hostvars, python_version="", python_platform="", probe="reinstall_host_probe"):
    """The Python (X.Y) and the platform (uv's --python-platform) a fleet lock is made for: PYTHON_VERSION and
    PYTHON_PLATFORM when given, else what the HOSTS' interpreters said (their registered PROBE in HOSTVARS): they
    must agree on the Python and the machine; the C library level is the lowest of them."""
    python_version, python_platform = str(python_version or "").strip(), str(python_platform or "").strip()
    if python_version and python_platform:
        return {"python_version": python_version, "python_platform": python_platform, "from_hosts": []}
    read = {}
    for host, value in sorted(_probes(hosts, hostvars, probe).items()):
        probe = _probe(value)
        if probe is None:
            raise AnsibleFilterError(
                "The fleet lock is made for the hosts' Python and platform, but %s did not say them (its reinstall_python "
                "did not answer); set reinstall_resolve_python_version (such as 3.12) and reinstall_resolve_python_platform "
                "(such as x86_64-manylinux_2_35) instead. Nothing was changed." % host)
        read[host] = probe
    if not read:
        raise AnsibleFilterError(
            "The fleet lock is made for the hosts' Python and platform: set reinstall_resolve_python_version (such as "
            "3.12) and reinstall_resolve_python_platform (such as x86_64-manylinux_2_35), or give reinstall_python as an "
            "absolute path so that the hosts can be asked. Nothing was changed.")

    def grouped(key):
        groups = {}
        for host, probe in read.items():
            groups.setdefault(str(probe.get(key) or "?"), []).append(host)
        return groups

    if not python_version:
        versions = grouped("python")
        if len(versions) != 1:
            raise AnsibleFilterError(
                "A fleet lock is for one Python, and the hosts run several: %s. Give every host the same interpreter "
                "(reinstall_python), or roll them out in separate runs. Nothing was changed."
                % "; ".join("%s on %s" % (v, ", ".join(h)) for v, h in sorted(versions.items())))
        python_version = list(versions)[0]
    if not python_platform:
        machines = grouped("machine")
        if len(machines) != 1:
            raise AnsibleFilterError(
                "A fleet lock is for one machine type, and the hosts are several: %s. Roll them out in separate runs. "
                "Nothing was changed." % "; ".join("%s on %s" % (m, ", ".join(h)) for m, h in sorted(machines.items())))
        levels = []
        for host, probe in read.items():
            match = re.match(r"glibc ([0-9]{1,3})\.([0-9]{1,3})", str(probe.get("libc") or ""))
            if not match:
                raise AnsibleFilterError(
                    "%s's C library is not glibc (%r): set reinstall_resolve_python_platform for it. Nothing was changed."
                    % (host, probe.get("libc")))
            levels.append((int(match.group(1)), int(match.group(2))))
        low = min(levels)
        python_platform = "%s-manylinux_%d_%d" % (list(machines)[0], low[0], low[1])
    return {"python_version": python_version, "python_platform": python_platform, "from_hosts": sorted(read)}


def lock_dependency_diff(environment, info, limit=20):
    """What a host's environment (an env_fingerprint result, or its distributions) changes into when it
    installs the lock of INFO: lockfile.dependency_diff plus ``lines`` (at most LIMIT short lines)."""
    if not isinstance(info, dict) or not info.get("pins"):
        return {}
    return dependency_report.diff(dependency_report.installed(environment), dependency_report.pinned(info["pins"]),
                                  limit)


class FilterModule(object):
    """gpufleet.vllm fleet-lock filters."""

    def filters(self):
        return {
            "lock_info": lock_info,
            "lock_target_problems": lock_target_problems,
            "lock_dependency_diff": lock_dependency_diff,
            "lock_target": lock_target,
        }
