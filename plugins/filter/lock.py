# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet lock on the control node (documented in lock_*.yml next to this file).

A lock's text (lookup gpufleet.vllm.uv_lock) becomes what the roles need:
the target version, the pins every host must hold and their fingerprint
(lock_info); whether a host's interpreter fits it (lock_target_problems);
what a host's environment changes into (lock_dependency_diff); which of its
wheels an in-place install needs, fetched and checked before the stop
(lock_fetch), and what to tell the operator when one of them is not the
lock's (lock_fetch_message). The parsing and the checks are
module_utils/lockfile.py's.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, pkgnames

from ansible_collections.gpufleet.vllm.plugins.module_utils.report import dependencies as dependency_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import printable_block, valid_text


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
    """What a host's environment (an env_fingerprint_info result, or its distributions) changes into when it
    installs the lock of INFO: lockfile.dependency_diff plus ``lines`` (at most LIMIT short lines)."""
    if not isinstance(info, dict) or not info.get("pins"):
        return {}
    return dependency_report.diff(dependency_report.installed(environment), dependency_report.pinned(info["pins"]),
                                  limit)


def _output(result):
    """The text of a command result (its stdout and stderr together), or of text itself."""
    if isinstance(result, dict):
        return "\n".join(str(result.get(key) or "") for key in ("stdout", "stderr"))
    return str(result or "")


def lock_fetch(text, dry_run=None, current=None, reinstall=None):
    """Which wheels of the lock TEXT ``uv pip sync`` installs into an existing environment (lockfile.fetch_names:
    DRY_RUN, the result of its dry run, CURRENT, env_fingerprint_info's result against the lock, REINSTALL, uv's reinstall
    options): {names, count, requirements} (the requirements file of those pins with the lock's hashes)."""
    try:
        parsed = lockfile.parse_lock(text)
    except lockfile.LockError as exc:
        raise AnsibleFilterError("The fleet lock was refused: %s" % exc)
    if reinstall is not None and not isinstance(reinstall, (list, tuple)):
        raise AnsibleFilterError("lock_fetch: reinstall must be the list of uv's reinstall options, got %r"
                                 % (type(reinstall).__name__,))
    names = lockfile.fetch_names(parsed, lockfile.planned_installs(_output(dry_run) if dry_run else ""),
                                 current, reinstall or ())
    return {"names": names, "count": len(names), "requirements": lockfile.requirements_of(parsed, names)}


def _digests(digests):
    """The first digest in full (an operator compares it with sha256sum's), and how many more."""
    if not digests:
        return "not shown"
    return digests[0] + (" or %d more" % (len(digests) - 1) if len(digests) > 1 else "")


def lock_fetch_message(result, host, unit="", env="", source="the index"):
    """The sentence for the operator when fetching a lock's wheels before the stop failed (RESULT: the command's
    result): a wheel whose sha256 is not the lock's (a tampered or overwritten mirror), or what uv said last."""
    where = "on %s" % host
    kept = ("The unit %s was not stopped and %s was not changed." % (unit, env or "the environment") if unit
            else "Nothing was stopped and %s was not changed." % (env or "the environment"))
    found = lockfile.hash_mismatch(_output(result))
    if found:
        version = pkgnames.canonical_version(found["version"]) or found["version"]
        text = ("Refused before the stop %s: %s serves a wheel of %s %s whose sha256 (%s) differs from the lock's "
                "(%s): a tampered or overwritten mirror. %s Compare that wheel on the mirror with the one the lock was "
                "made from, or make a new lock from a mirror you trust."
                % (where, source, found["name"], version, _digests(found["computed"]), _digests(found["expected"]),
                   kept))
        return valid_text(printable_block(text).replace("\n", " "))
    said = [line.strip() for line in _output(result)[-lockfile.MAX_OUTPUT:].splitlines() if line.strip()]
    return valid_text(printable_block(
        "Fetching the lock's wheels before the stop failed %s: %s. %s" % (
            where, " / ".join(said[-6:]).rstrip(".") or "uv said nothing (exit %s)" % (
                result.get("rc") if isinstance(result, dict) else "?"), kept)).replace("\n", " "))


class FilterModule(object):
    """gpufleet.vllm fleet-lock filters."""

    def filters(self):
        return {
            "lock_info": lock_info,
            "lock_target_problems": lock_target_problems,
            "lock_dependency_diff": lock_dependency_diff,
            "lock_target": lock_target,
            "lock_fetch": lock_fetch,
            "lock_fetch_message": lock_fetch_message,
        }
