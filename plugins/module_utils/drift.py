# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One host's drift row, read in one pass (the ``drift_info`` module).

The audit playbook asks every host the same questions: which environment
does the service run, is its vLLM pristine against RECORD, which build is it,
are the SM120 KV-cache keys still in the model configs, are debug dumps
lying around, is the unit active, what do the GPUs say.  Asked as one task
each, that is ten module runs per host; :func:`gather` answers them all from
one, with the same code the modules that fix each thing use
(``integrity.verify``, ``jsonedit.plan_file``, ``artifacts.scan``,
``nvml.collect``), so the audit and the rollout can never disagree about
what counts as drift.  With the fleet's wheel directories it also shows
what drifted: each modified file diffed against the pristine wheel of the
installed version (``wheeldiff.diff_modified``, bounded).

Nothing here writes: the JSON edits are only planned, the artifacts only
scanned, NVML only read.

Public API: :func:`resolve_environment`, :func:`read_unit`,
:func:`check_configs`, :func:`scan_dumps`, :func:`read_gpus`,
:func:`wheel_diffs`, :func:`judge`, :func:`gather`.  ``DRIFT_CLASSES`` lists the drift names in
the order rows give them.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible_collections.gpufleet.vllm.plugins.module_utils.artifacts import (
    MAX_ENTRIES,
    ArtifactError,
    Deadline,
    human_bytes,
    safe_text,
    scan,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import READ_TIMEOUT, runner
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline as OverallDeadline
from ansible_collections.gpufleet.vllm.plugins.module_utils.environment import locate_environment
from ansible_collections.gpufleet.vllm.plugins.module_utils import gpuhealth
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.fingerprint import fingerprint_environment
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import canonical_name
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import DRIFT_CLASSES as INTEGRITY_CLASSES
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import verify
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.jsonedit import (
    JSONEditError,
    directory_entries,
    plan_file,
    public_result,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.nvml import (
    NvmlUnavailable,
    collect_bounded,
    compact_mismatches,
    expectation_given,
    gpu_facts,
    load_pynvml_venvs,
    unavailable_result,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.policy import decide as sm120_decide
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.wheeldiff import (
    DIFF_MAX_BYTES,
    DIFF_MAX_FILES,
    DIFF_MAX_TOTAL,
    diff_modified,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.systemd import (
    SystemdError,
    managed_units,
    others_to_stop,
    show,
)

DRIFT_CLASSES = ("integrity", "build", "packages", "config", "dumps", "unit", "gpus", "health")
# the properties of the unit a drift row keeps (module_utils/systemd.py reads them)
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "FragmentPath")
LIST_MAX = 20


def _clip(text, limit=None):
    """The text on one line (white space folded), cut to ``limit`` characters unless it is None."""
    text = " ".join(str(text).split())
    return text if limit is None or len(text) <= limit else text[:limit - 3] + "..."


def resolve_environment(link=None, venv=None):
    """The environment the service runs: (path, problem).

    ``link`` (the reinstall role's current link) wins when it is a symbolic
    link; its target is returned with every link resolved, as the roles see
    it.  While it does not exist, ``venv`` (the adopted environment) is the
    answer.  A real file or directory at ``link`` is a problem: the roles
    refuse to switch it, and the audit says why instead of guessing.
    """
    if link:
        if os.path.islink(link):
            return os.path.realpath(link), None
        if os.path.lexists(link):
            return "", ("%s exists but is not a symbolic link: the rollout cannot switch it (move that environment "
                        "elsewhere and name it in fleet_adopt_venv)" % link)
    if venv:
        return venv, None
    if link:
        return "", "no vLLM environment found: %s does not exist and no adopted venv is named" % link
    return "", "no vLLM environment named"


def check_integrity(env, dist_name="vllm", max_list=10, run_command=None, timeout=None):
    """(verify() result, problem): the RECORD verdict of ``dist_name`` in ``env``, within ``timeout`` seconds."""
    if not env:
        return None, None
    if not os.path.isdir(env):
        return None, "the vLLM environment %s does not exist" % env
    try:
        environment = locate_environment(venv=env, run_command=run_command)
        return verify(dist_name=dist_name, environment=environment, max_list=max_list, timeout=timeout), None
    except IntegrityError as exc:
        return None, str(exc)


def check_packages(env, dist_name="vllm", expected=None, expected_fingerprint=None, max_list=10, timeout=None):
    """(the environment's fingerprint, problem): every distribution in ``env`` (name, version, source,
    pristine by its RECORD), their fingerprint, and the comparison with ``expected`` (a lock's pins)."""
    if not env or not os.path.isdir(env):
        return None, None
    try:
        environment = locate_environment(venv=env)
        result = fingerprint_environment(environment, verify=True, expected=expected or None,
                                         expected_fingerprint=expected_fingerprint or None, max_list=max_list,
                                         timeout=timeout)
    except (IntegrityError, ValueError) as exc:
        return None, str(exc)
    return result, None


def packages_cells(packages, dist_name, problem=None, accepted=()):
    """The row's package cells: fingerprint (12 hex), packages (count), packages_not_pristine (the names of the
    distributions other than ``dist_name`` that are not pristine), lock ('' without one, 'same' or what
    differs)."""
    if not packages:
        return {"fingerprint": "", "packages": None, "packages_not_pristine": [],
                "lock": ("not read: %s" % _clip(problem, 200)) if problem else ""}
    skip = set([canonical_name(dist_name)] + [canonical_name(a) for a in accepted or ()])
    dirty = [d["name"] for d in packages.get("not_pristine") or [] if canonical_name(d.get("name") or "") not in skip]
    more = (packages.get("not_pristine_total") or 0) - len(packages.get("not_pristine") or [])
    lock = ""
    if packages.get("matches") is True:
        lock = "same"
    elif packages.get("matches") is False:
        parts = []
        for key, word in (("different", "other version"), ("missing", "missing"), ("extra", "not in the lock")):
            items = packages.get(key) or []
            if items:
                parts.append("%d %s" % (len(items), word))
        lock = "differs: " + (", ".join(parts) or "other fingerprint")
    return {"fingerprint": (packages.get("fingerprint") or "").split(":", 1)[-1][:12],
            "packages": packages.get("count"),
            "packages_not_pristine": dirty + (["and %d more" % more] if more > 0 else []),
            "lock": lock}


# what each RECORD drift class means, for a person reading the drift report
INTEGRITY_WORDS = {
    "modified": "modified",
    "size_differs": "of another size than RECORD says",
    "missing": "missing",
    "unreadable": "unreadable",
    "unowned": "not in RECORD",
    "outside": "outside the environment",
    "malformed": "with a malformed RECORD line",
}
INTEGRITY_FILES_SHOWN = 3


def _files(count, words):
    return "%d file%s %s" % (count, "" if count == 1 else "s", words)


def integrity_text(result, problem=None):
    """The integrity cell of a row: "pristine", or the verdict in words, whole.

    Up to INTEGRITY_FILES_SHOWN offending files are named with their whole
    paths, and how many more there are; nothing is cut in the middle.
    """
    if not result:
        return _clip(problem or "no vLLM environment found")
    if result.get("pristine"):
        return "pristine"
    if not result.get("verifiable"):
        return _clip("cannot be verified: %s" % (result.get("reason") or "unknown reason"))
    counts = result.get("counts") or {}
    parts = ", ".join(_files(counts[c], INTEGRITY_WORDS.get(c, c.replace("_", " ")))
                      for c in INTEGRITY_CLASSES if counts.get(c))
    offenders = [o["path"] for o in (result.get("offenders") or [])]
    text = "not pristine: %s" % (parts or "drift")
    if result.get("uv_cache_tainted"):
        text += "; the edit is also in uv's cache"
    if offenders:
        named = offenders[:INTEGRITY_FILES_SHOWN]
        more = sum(counts.get(c, 0) for c in INTEGRITY_CLASSES) - len(named)
        label = "file" if len(named) == 1 else "files"
        text += "; %s: %s%s" % (label, ", ".join(named), " and %d more" % more if more > 0 else "")
    return text


def other_units(run_command, systemctl, unit_dir, unit, deadline=None):
    """The units the service role rendered in UNIT_DIR, other than UNIT, that run or are enabled and may share a GPU
    with UNIT: (one line each,
    "vllm-kimi-k25.service (active, enabled)", or the one sentence of why they could not be read; the MainPIDs of
    those that run: their processes on the GPUs are the old model's, not a stranger's)."""
    if deadline is not None and deadline.passed():
        return ["other units not read: %s" % deadline.message("the other units were read")], []
    try:
        found = managed_units(run_command, systemctl, unit_dir, keep=unit)
    except SystemdError as exc:
        return ["other units not read: %s" % _clip(str(exc), 600)], []
    others = others_to_stop(found)[:LIST_MAX]
    return (["%s (%s, %s)" % (u["unit"], u["active_state"] or "?", u["unit_file_state"] or "?") for u in others],
            [u["main_pid"] for u in others if isinstance(u["main_pid"], int) and u["main_pid"] > 0])


def read_unit(run_command, systemctl, unit):
    """The unit's state from ``systemctl show`` (module_utils/systemd.py): a dict with ``unit`` and the
    UNIT_PROPERTIES read (MainPID a number), or ``unit`` and ``error``, the sentence of why it was not read."""
    state = {"unit": unit}
    if not unit:
        return state
    try:
        properties = show(run_command, systemctl, unit)
    except SystemdError as exc:
        state["error"] = _clip(str(exc), 600)
        return state
    state.update((key, value) for key, value in properties.items() if key in UNIT_PROPERTIES)
    return state


def check_configs(model_dirs, files=None, symlinks="copy", deadline=None):
    """Plan the SM120 edits of every model directory without writing.

    Returns (keys present, per-file results, errors).  A missing directory,
    a malformed file, a missing required file or a link that the policy
    refuses to edit is an error (a sentence naming the file): the sm120_config
    role would stop on it.  So is a directory not planned because
    ``deadline`` (a bounded.Deadline) passed first.
    """
    present = 0
    results = []
    errors = []
    seen = []
    for model_dir in model_dirs or ():
        if model_dir in seen:
            continue
        seen.append(model_dir)
        if deadline is not None and deadline.passed():
            errors.append("%s not planned: %s" % (model_dir, deadline.message("its configs were read")))
            continue
        if not os.path.isdir(model_dir):
            errors.append("%s is not a directory (the model directory is missing)" % model_dir)
            continue
        try:
            plans = [plan_file(path, keys, required=required, symlinks=symlinks, base=model_dir)
                     for path, keys, required in directory_entries(model_dir, files)]
        except JSONEditError as exc:
            errors.append(exc.msg)
            continue
        for plan in plans:
            public = public_result(plan)
            present += len(public.get("removed") or [])
            results.append(public)
    return present, results, errors


def scan_dumps(paths, patterns, recursive=False, max_depth=None, symlinks="remove_link", min_age=None,
               max_entries=MAX_ENTRIES, timeout=None):
    """What the debug_artifacts role would remove: count, bytes and the first files.

    A scan stopped by one of its bounds (max_entries, the depth bound, the
    timeout in seconds) gives count 0 and ``error``, the reason: the dumps
    could not be counted, which judge() reports as drift.
    """
    try:
        candidates, skipped = scan(paths or [], patterns or [], recursive=recursive, max_depth=max_depth,
                                   symlinks=symlinks, min_age=min_age, max_entries=max_entries,
                                   deadline=Deadline(timeout) if timeout else None)
    except ArtifactError as exc:
        return {"count": 0, "bytes": 0, "bytes_human": "not counted: %s" % exc, "files": [], "skipped": [],
                "error": str(exc)}
    found = sorted(candidates, key=lambda c: c.path)
    total = sum(c.size for c in found)
    return {
        "count": len(found),
        "bytes": total,
        "bytes_human": human_bytes(total),
        "files": [safe_text(c.path) for c in found[:LIST_MAX]],
        "skipped": skipped[:LIST_MAX],
    }


def read_gpus(expect=None, venvs=(), call_timeout=60):
    """nvml.collect() with pynvml from this interpreter or one of ``venvs``, given ``call_timeout`` seconds;
    adds ``pynvml_from``."""
    try:
        pynvml, where = load_pynvml_venvs(venvs)
    except NvmlUnavailable as exc:
        result = unavailable_result(exc)
        result["pynvml_from"] = None
        return result
    result = collect_bounded(expect=expect, call_timeout=call_timeout, pynvml=pynvml)
    result["pynvml_from"] = where
    return result


# the most problem lines of the health check a row keeps (GPUs alike already share a line)
HEALTH_LINES = 12


def read_health(thresholds=None, main_pids=(), venvs=(), call_timeout=60, proc_root="/proc", required=()):
    """The GPUs' health (gpuhealth.check_bounded) with THRESHOLDS (defaults filled in), the MAIN_PIDS (the units'
    MainPIDs) and their descendants allowed on the GPUs; the same pynvml as read_gpus. Adds ``pynvml_from``; ``problems`` as the
    gpu_health_info module has them (a line per GPU), ``lines`` with GPUs alike on one line (at most HEALTH_LINES)."""
    effective = gpuhealth.effective_thresholds(dict((k, v) for k, v in (thresholds or {}).items() if v is not None))
    try:
        pynvml, where = load_pynvml_venvs(venvs)
    except NvmlUnavailable as exc:
        result = gpuhealth.unavailable(effective, exc)
        result["pynvml_from"] = None
    else:
        allowed = set()
        for pid in main_pids or ():
            allowed |= gpuhealth.allowed_pids([], pid, proc_root=proc_root)
        result = gpuhealth.check_bounded(effective, allowed, call_timeout, pynvml=pynvml, required=required)
        result["pynvml_from"] = where
    lines = compact_mismatches(result.get("problems") or [])
    if not result.get("nvml_available"):
        lines = [_clip(result.get("summary") or "GPU health unknown", 600)]
    if len(lines) > HEALTH_LINES:
        lines = lines[:HEALTH_LINES - 1] + ["and %d more (see the gpu_health_info module's result)" % (
            len(lines) - HEALTH_LINES + 1)]
    result["lines"] = [_clip(line, 600) for line in lines]
    return result


# the classes of files whose content changed: the ones a diff against the wheel shows
CHANGED_CLASSES = ("modified", "size_differs")


def changed_files(integrity):
    """(the changed files verify() listed, in path order, one per path; how many changed files it counted)."""
    if not integrity:
        return [], 0
    seen = {}
    for cls in CHANGED_CLASSES:
        for item in (integrity.get("files") or {}).get(cls) or ():
            path = item.get("path")
            if isinstance(path, str) and path and path not in seen:
                seen[path] = dict(item, **{"class": cls})
    counted = sum((integrity.get("counts") or {}).get(cls, 0) for cls in CHANGED_CLASSES)
    return [seen[path] for path in sorted(seen)], max(counted, len(seen))


def no_diffs(note=None):
    return {"wheel": None, "wheel_dirs": [], "files": [], "bytes": 0, "not_diffed": 0, "note": note}


def wheel_diffs(integrity, dist_name="vllm", wheel_dirs=(), max_files=DIFF_MAX_FILES, max_bytes=DIFF_MAX_BYTES,
                max_total=DIFF_MAX_TOTAL, deadline=None):
    """What changed in each modified file of ``integrity`` (a verify() result), against the wheel of the
    installed version found in one of ``wheel_dirs`` (directories on this host).

    Returns wheeldiff.diff_modified()'s dict plus ``wheel_dirs``; ``note``
    says why there are no diffs (no wheel directory given, no wheel of this
    version, the time limit), and is None when no file changed.
    ``not_diffed`` also counts the changed files verify() did not list
    (its max_list).
    """
    changed, counted = changed_files(integrity)
    if not changed:
        return no_diffs()
    wheel_dirs = list(wheel_dirs or ())
    if not wheel_dirs:
        result = no_diffs("no diffs: no directory of wheels on the host was given (wheel_dirs)")
        result["not_diffed"] = counted
        return result
    if deadline is not None and deadline.passed():
        result = no_diffs(deadline.message("the diffs against the wheel were made"))
        result["not_diffed"] = counted
        result["wheel_dirs"] = wheel_dirs
        return result
    result = diff_modified(wheel_dirs, dist_name, integrity.get("version"), integrity.get("site_packages"), changed,
                           max_files=max_files, max_bytes=max_bytes, max_total=max_total, deadline=deadline,
                           dist_info=integrity.get("dist_info"))
    result["not_diffed"] += counted - len(changed)
    if result["wheel"] is None:
        result["not_diffed"] = counted
    result["wheel_dirs"] = wheel_dirs
    return result


def judge(integrity, configs_present, config_errors, strip, dumps, unit, gpus, expect,
          expected_version=None, packages=None, health=None):
    """The drift classes of a host, in DRIFT_CLASSES order. ``packages``: the row's package cells
    (packages_cells()); drift when another distribution is not pristine or the set is not the lock's. ``health``:
    read_health()'s result (None: not checked); drift when it is not healthy, unknown included."""
    drift = []
    if not (integrity or {}).get("pristine"):
        drift.append("integrity")
    if expected_version and (integrity or {}).get("version") != expected_version:
        drift.append("build")
    if packages and (packages.get("packages_not_pristine") or packages.get("lock", "").startswith(("differs", "not read"))):
        drift.append("packages")
    if (strip and configs_present) or config_errors:
        drift.append("config")
    if dumps["count"] or dumps.get("error"):
        drift.append("dumps")
    if unit.get("unit") and unit.get("ActiveState") != "active" or unit.get("others"):
        drift.append("unit")
    if not gpus.get("nvml_available") or (expectation_given(expect or {}) and gpus.get("mismatches")):
        drift.append("gpus")
    # (unknown health is drift too, but not a second time when NVML is not usable at all: that is "gpus")
    if health is not None and not health.get("healthy") and (health.get("nvml_available") or gpus.get("nvml_available")):
        drift.append("health")
    return drift


def _packages_detail(packages):
    """What the result keeps of the fingerprint: the comparison and each distribution's name, version and source
    (the dependency diff of the rollout's plan reads them)."""
    if not packages:
        return None
    detail = dict((k, packages.get(k)) for k in ("fingerprint", "count", "matches", "missing", "extra", "different",
                                                 "not_pristine", "not_pristine_total", "msg"))
    detail["distributions"] = [dict((k, d.get(k)) for k in ("name", "version", "source", "pristine"))
                               for d in packages.get("distributions") or []]
    return detail


def _not_done(part, why):
    return "%s: %s" % (part, why)


def gather(run_command, systemctl, link=None, venv=None, dist_name="vllm", max_list=10, model_dirs=(),
           model_files=None, symlinks="copy", config_policy="auto", dumps=None, unit=None, expect=None,
           nvml_venvs=(), expected_version=None, deadline=None, diffs=None, expected_packages=None,
           expected_fingerprint=None, accept_not_pristine=(), health=None, config_builds=None, config_build=None,
           unit_dir=None, health_required=()):
    """Everything the audit reports for one host; returns the module's result (``row`` plus the details).

    ``dumps``: dict of scan_dumps() keyword arguments (paths and patterns
    already validated).  ``config_policy``: ``auto`` (the keys are drift
    where a GPU is SM120), ``strip`` (always drift), ``keep`` (never), decided
    by sm120.decide(), the sm120_config role's own decision, for the build
    ``config_build`` (None: the installed one) looked up in the checked table
    ``config_builds`` (fleet_sm120_fp8_kv_cache_builds).
    ``deadline``: a bounded.Deadline for the whole run (None: 600 s).  Each
    part gets what is left of it; a part it leaves no time for is not done,
    and its cell of the row says so (and counts as drift); ``not_done``
    lists those parts.  ``run_command`` runs systemctl show (None: bounded,
    READ_TIMEOUT seconds or what is left).  ``diffs``: dict of
    wheel_diffs() keyword arguments (``wheel_dirs`` and the bounds); the
    diffs of the changed files are made last, with what is left of the
    time, and are no drift class of their own.  ``health``: the GPU health
    thresholds (gpuhealth's, a dict; None: health not checked), judged with
    the unit's MainPID and its descendants allowed on the GPUs.  ``unit_dir``:
    where the service role renders its units; the others it rendered there
    that run or are enabled (another model's, after a switch) are drift
    ``unit`` (row ``other_units``).
    """
    deadline = deadline or OverallDeadline(600)
    if run_command is None:
        run_command = runner(READ_TIMEOUT, deadline=deadline)
    not_done = []
    env, env_problem = resolve_environment(link, venv)
    if env and deadline.passed():
        integrity, integrity_problem = None, "not checked: %s" % deadline.message("the integrity check")
        not_done.append(_not_done("integrity", integrity_problem))
    else:
        integrity, integrity_problem = check_integrity(env, dist_name, max_list, run_command,
                                                       timeout=max(0.001, deadline.left()))
        if integrity is None and integrity_problem and deadline.passed():
            integrity_problem = "not checked: %s" % deadline.message("the integrity check finished")
            not_done.append(_not_done("integrity", integrity_problem))
    integrity_problem = integrity_problem or env_problem
    if env and deadline.passed():
        packages, packages_problem = None, "not checked: %s" % deadline.message("the packages were read")
        not_done.append(_not_done("packages", packages_problem))
    else:
        packages, packages_problem = check_packages(env, dist_name, expected_packages, expected_fingerprint,
                                                    max_list, timeout=max(0.001, deadline.left()))
    package_cells = packages_cells(packages, dist_name, packages_problem, accept_not_pristine)
    present, config_files, config_errors = check_configs(model_dirs, model_files, symlinks, deadline=deadline)
    not_done.extend(_not_done("config", e) for e in config_errors if " not planned: the time limit " in e)
    dumps = dict(dumps or {})
    if deadline.passed():
        why = deadline.message("the dump scan")
        dump_scan = {"count": 0, "bytes": 0, "bytes_human": "not counted: %s" % why, "files": [], "skipped": [],
                     "error": why}
        not_done.append(_not_done("dumps", why))
    else:
        left = deadline.left()
        if not dumps.get("timeout") or left < dumps["timeout"]:
            dumps["timeout"] = left
        dump_scan = scan_dumps(**dumps)
        if dump_scan.get("error") and deadline.passed():
            not_done.append(_not_done("dumps", dump_scan["error"]))
    if unit and systemctl and deadline.passed():
        unit_state = {"unit": unit, "error": "not read: %s" % deadline.message("systemctl show %s" % unit)}
        not_done.append(_not_done("unit", unit_state["error"]))
    else:
        unit_state = read_unit(run_command, systemctl, unit)
    other_pids = []
    if unit_dir and systemctl:
        unit_state["others"], other_pids = other_units(run_command, systemctl, unit_dir, unit, deadline)
    venvs = [v for v in [env] + list(nvml_venvs or ()) if v]
    if deadline.passed():
        why = "NVML not read: %s" % deadline.message("the GPUs were read")
        gpus = unavailable_result(NvmlUnavailable("NVML_TIMEOUT", why))
        gpus["pynvml_from"] = None
        not_done.append(_not_done("gpus", why))
    else:
        gpus = read_gpus(expect, venvs, call_timeout=max(0.1, min(60.0, deadline.left())))
    health_result = None
    if health is not None:
        if deadline.passed():
            why = "GPU health not read: %s" % deadline.message("the GPUs' health was read")
            health_result = gpuhealth.unavailable(
                gpuhealth.effective_thresholds(dict((k, v) for k, v in health.items() if v is not None)),
                NvmlUnavailable("NVML_TIMEOUT", why))
            # (the time limit, not the driver: no NVML hint about Xid errors or resets)
            health_result.update(pynvml_from=None, lines=[why], summary=why)
            not_done.append(_not_done("health", why))
        else:
            main_pid = unit_state.get("MainPID") if isinstance(unit_state.get("MainPID"), int) else 0
            # (the unit's processes, and those of the other models' units a switch will stop)
            health_result = read_health(health, [pid for pid in [main_pid] + other_pids if pid > 0], venvs,
                                        call_timeout=max(0.1, min(60.0, deadline.left())), required=health_required)
            if not health_result.get("nvml_available") and not gpus.get("nvml_available"):
                # NVML is not usable at all: the row's gpu_problems say it once (drift class gpus)
                health_result["lines"] = []
    diffs = dict(diffs or {})
    wheel_diff = wheel_diffs(integrity, dist_name, deadline=deadline, **diffs)
    if wheel_diff["note"] and deadline.passed() and wheel_diff["note"].startswith("the time limit "):
        not_done.append(_not_done("diffs", wheel_diff["note"]))
    summary = gpus.get("summary") or {}
    config_build = config_build or (integrity or {}).get("version") or None
    decision = sm120_decide(config_policy, model_dirs=True, gpus=gpu_facts(gpus), build=config_build,
                            builds=config_builds)
    strip = decision["action"] == "apply"
    drift = judge(integrity, present, config_errors, strip, dump_scan, unit_state, gpus, expect,
                  expected_version, package_cells, health_result)

    nvml_error = (gpus.get("nvml_error") or {}).get("message") if not gpus.get("nvml_available") else None
    row = {
        "build": (integrity or {}).get("version") or "",
        "environment": env,
        "pristine": bool((integrity or {}).get("pristine")),
        "integrity": integrity_text(integrity, integrity_problem),
        "fingerprint": package_cells["fingerprint"],
        "packages": package_cells["packages"],
        "packages_not_pristine": package_cells["packages_not_pristine"],
        "lock": package_cells["lock"],
        "config_keys_present": present,
        "config_policy": "strip" if strip else "keep",
        "config_reason": decision["summary"],
        "config_errors": config_errors,
        "dumps": dump_scan["count"],
        "dumps_bytes": dump_scan["bytes_human"],
        "unit": unit or "",
        "other_units": list(unit_state.get("others") or []),
        "unit_state": unit_state.get("ActiveState") or (
            "unknown (%s)" % unit_state["error"] if " did not answer within " in unit_state.get("error", "")
            or unit_state.get("error", "").startswith("not read: ") else "unknown"),
        "gpus": gpus.get("gpu_count") if gpus.get("nvml_available") else None,
        "vram_used_mib": summary.get("memory_used_mib") if gpus.get("nvml_available") else None,
        "gpu_problems": ([_clip(nvml_error, 600)] if nvml_error else []) + list(gpus.get("mismatches") or []),
        "gpu_health": health_result["summary"] if health_result else "",
        "health_problems": list(health_result["lines"]) if health_result and not health_result["healthy"] else [],
        "drift": drift,
    }
    integrity_detail = None
    if integrity:
        integrity_detail = dict((k, integrity.get(k)) for k in (
            "distribution", "version", "pristine", "verifiable", "site_packages", "counts", "offenders",
            "uv_cache_tainted", "msg"))
    return {
        "changed": False,
        "not_done": not_done,
        "row": row,
        "drift": drift,
        "environment": env,
        "integrity": integrity_detail,
        "packages": _packages_detail(packages),
        "configs": {"keys_present": present, "policy": row["config_policy"], "reason": decision["reason"],
                    "build": config_build, "build_row": decision["build_row"], "files": config_files,
                    "errors": config_errors},
        "dumps": dump_scan,
        "unit": unit_state,
        "diffs": wheel_diff,
        "gpus": dict((k, gpus.get(k)) for k in (
            "nvml_available", "nvml_error", "driver_version", "cuda_driver_version", "gpu_count", "gpus",
            "summary", "mismatches", "expectation_met", "pynvml_from")),
        "health": dict((k, health_result.get(k)) for k in (
            "healthy", "summary", "problems", "notes", "nvml_available", "nvml_error", "gpu_count", "gpus", "thresholds"))
        if health_result else None,
    }
