# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU health through NVML: read the fields, judge them against thresholds.

The reading goes through pynvml as in :mod:`nvml` (its session, its error
names and hints, its bounded call); every field is read on its own: a call
the card or driver does not have (``NVML_ERROR_NOT_SUPPORTED``,
``NVML_ERROR_FUNCTION_NOT_FOUND``) leaves that field ``None`` and its name in
the GPU's ``unknown`` list, never a failure.  Any other NVML error on a GPU
(lost, no permission) makes that GPU's ``error``, which is a problem.

Public API (used by the ``gpu_health_info`` module):

* :func:`thresholds_argument_spec`, :data:`DEFAULT_THRESHOLDS`,
  :func:`validate_thresholds` (sentences, empty when valid) and
  :func:`effective_thresholds` (defaults filled in).
* :func:`read_health` -- one snapshot (NVML open) of every GPU's fields.
* :func:`evaluate_gpu` -- the problems (sentences) and notes of one GPU's
  readings against thresholds and the PIDs allowed on the GPUs.
* :func:`allowed_pids` -- the allowed PIDs: the listed ones plus a process
  and its descendants read from ``/proc`` (bounded walk).
* :func:`check_bounded` -- all of it in one call under a time limit,
  returning the result dict of the module.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils import nvml

# nvmlClocksEventReason* bits (nvml.h), by the name the thresholds use
CLOCK_REASONS = (
    ("gpu_idle", 0x1, "GPU idle"),
    ("applications_clocks_setting", 0x2, "applications clocks setting"),
    ("sw_power_cap", 0x4, "SW power cap"),
    ("hw_slowdown", 0x8, "HW slowdown"),
    ("sync_boost", 0x10, "sync boost"),
    ("sw_thermal_slowdown", 0x20, "SW thermal slowdown"),
    ("hw_thermal_slowdown", 0x40, "HW thermal slowdown"),
    ("hw_power_brake_slowdown", 0x80, "HW power brake slowdown"),
    ("display_clock_setting", 0x100, "display clock setting"),
    ("board_limit", 0x200, "board limit"),
    ("reliability", 0x400, "reliability"),
)
REASON_NAMES = tuple(name for name, dummy, dummy2 in CLOCK_REASONS)
_REASON_TEXT = dict((name, text) for name, dummy, text in CLOCK_REASONS)

DEFAULT_THRESHOLDS = {
    "max_uncorrected_ecc_errors": 0,
    "max_uncorrected_ecc_errors_aggregate": None,
    "retired_pages_pending_allowed": False,
    "remapped_rows_pending_allowed": False,
    "remapped_rows_failure_allowed": False,
    "throttle_reasons": ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"],
    "max_temperature_c": 85,
    "pcie_below_max_is_problem": True,
    "pcie_gen_below_max_when_idle_is_problem": False,
    "persistence_mode_required": True,
    "other_processes_allowed": False,
}

# the most PIDs read from /proc while looking for a process's descendants
MAX_PROC_ENTRIES = 65536
MAX_DESCENDANTS = 4096

# the fields that can be unknown, in the order they are read
FIELDS = ("ecc_mode", "ecc_errors", "ecc_errors_aggregate", "retired_pages", "remapped_rows", "clocks_event_reasons",
          "temperature", "temperature_slowdown", "power", "power_limit", "pcie", "pcie_max", "persistence_mode",
          "processes")


def thresholds_argument_spec():
    """The ``thresholds`` option of the gpu_health_info module (its defaults: DEFAULT_THRESHOLDS)."""
    d = DEFAULT_THRESHOLDS
    return dict(
        type="dict",
        apply_defaults=True,
        options=dict(
            max_uncorrected_ecc_errors=dict(type="int", default=d["max_uncorrected_ecc_errors"]),
            max_uncorrected_ecc_errors_aggregate=dict(type="int"),
            retired_pages_pending_allowed=dict(type="bool", default=d["retired_pages_pending_allowed"]),
            remapped_rows_pending_allowed=dict(type="bool", default=d["remapped_rows_pending_allowed"]),
            remapped_rows_failure_allowed=dict(type="bool", default=d["remapped_rows_failure_allowed"]),
            throttle_reasons=dict(type="list", elements="str", default=list(d["throttle_reasons"])),
            max_temperature_c=dict(type="int", default=d["max_temperature_c"]),
            pcie_below_max_is_problem=dict(type="bool", default=d["pcie_below_max_is_problem"]),
            pcie_gen_below_max_when_idle_is_problem=dict(
                type="bool", default=d["pcie_gen_below_max_when_idle_is_problem"]),
            persistence_mode_required=dict(type="bool", default=d["persistence_mode_required"]),
            other_processes_allowed=dict(type="bool", default=d["other_processes_allowed"]),
        ),
    )


def effective_thresholds(thresholds):
    """THRESHOLDS with every key not given (or None) at its default."""
    out = dict((k, list(v) if isinstance(v, list) else v) for k, v in DEFAULT_THRESHOLDS.items())
    for key, value in (thresholds or {}).items():
        if key in out and value is not None:
            out[key] = value
    return out


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def validate_thresholds(thresholds, pids=None, parent_pid=None):
    """Sentences, one per problem of THRESHOLDS and the allowed PIDs (empty list when valid)."""
    problems = []
    if thresholds is None:
        thresholds = {}
    if not isinstance(thresholds, dict):
        return ["thresholds must be a dictionary such as {max_temperature_c: 85}; got %r" % (thresholds,)]
    unknown = sorted(set(thresholds) - set(DEFAULT_THRESHOLDS))
    if unknown:
        problems.append("thresholds has unknown keys %s; known keys: %s" % (
            ", ".join(unknown), ", ".join(sorted(DEFAULT_THRESHOLDS))))
    for key in ("max_uncorrected_ecc_errors", "max_uncorrected_ecc_errors_aggregate"):
        value = thresholds.get(key)
        if value is not None and (not _whole(value) or value < 0):
            problems.append("thresholds.%s must be a whole number of 0 or more (0: any uncorrected ECC error is a "
                            "problem); got %r" % (key, value))
    value = thresholds.get("max_temperature_c")
    if value is not None and (not _whole(value) or not 20 <= value <= 120):
        problems.append("thresholds.max_temperature_c must be a whole number of degrees Celsius from 20 to 120 "
                        "(such as 85); got %r" % (value,))
    reasons = thresholds.get("throttle_reasons")
    if reasons is not None:
        if not isinstance(reasons, (list, tuple)):
            problems.append("thresholds.throttle_reasons must be a list of clock event reasons (%s); got %r" % (
                ", ".join(REASON_NAMES), reasons))
        else:
            bad = [r for r in reasons if r not in REASON_NAMES]
            if bad:
                problems.append("thresholds.throttle_reasons has unknown reasons %s; known: %s" % (
                    ", ".join(repr(r) for r in bad), ", ".join(REASON_NAMES)))
    for key in ("retired_pages_pending_allowed", "remapped_rows_pending_allowed", "remapped_rows_failure_allowed",
                "pcie_below_max_is_problem", "pcie_gen_below_max_when_idle_is_problem", "persistence_mode_required",
                "other_processes_allowed"):
        value = thresholds.get(key)
        if value is not None and not isinstance(value, bool):
            problems.append("thresholds.%s must be true or false; got %r" % (key, value))
    for pid in pids or []:
        if not _whole(pid) or not 1 <= pid <= 4194304:
            problems.append("allowed_pids must be process ids from 1 to 4194304; got %r" % (pid,))
    if parent_pid is not None and (not _whole(parent_pid) or not 1 <= parent_pid <= 4194304):
        problems.append("allowed_parent_pid must be a process id from 1 to 4194304 (such as the MainPID of the "
                        "vLLM unit), or unset; got %r" % (parent_pid,))
    return problems


# ---------------------------------------------------------------- allowed processes


def _ppid(proc_root, pid):
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as f:
            data = f.read(4096)
    except (IOError, OSError):
        return None
    end = data.rfind(b")")
    fields = data[end + 2:].split() if end >= 0 else []
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def descendants(root_pid, proc_root="/proc", max_entries=MAX_PROC_ENTRIES, max_found=MAX_DESCENDANTS):
    """ROOT_PID and its descendants, from one bounded read of PROC_ROOT/*/stat (a set; empty when ROOT_PID is gone)."""
    try:
        names = os.listdir(proc_root)
    except OSError:
        return set()
    children = {}
    seen = 0
    for name in names:
        if not name.isdigit():
            continue
        seen += 1
        if seen > max_entries:
            break
        parent = _ppid(proc_root, int(name))
        if parent is not None:
            children.setdefault(parent, []).append(int(name))
    if not os.path.isdir(os.path.join(proc_root, str(root_pid))):
        return set()
    found = set([root_pid])
    todo = [root_pid]
    while todo and len(found) < max_found:
        for child in children.get(todo.pop(), []):
            if child not in found and len(found) < max_found:
                found.add(child)
                todo.append(child)
    return found


def allowed_pids(pids=None, parent_pid=None, proc_root="/proc"):
    """The PIDs allowed on the GPUs: PIDS, plus PARENT_PID and its descendants."""
    allowed = set(pids or [])
    if parent_pid:
        allowed |= descendants(parent_pid, proc_root)
    return allowed


# ---------------------------------------------------------------- reading


class _Unknown(Exception):
    """The field cannot be read on this card or driver."""


def _field(pynvml, fname, *args):
    """FNAME(*args), or raise _Unknown for a call the card or driver does not have."""
    fn = getattr(pynvml, fname, None)
    if fn is None:
        raise _Unknown(fname)
    unknown = (getattr(pynvml, "NVML_ERROR_NOT_SUPPORTED", 3), getattr(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13))
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) in unknown:
            raise _Unknown(fname)
        raise


def _empty_gpu(index):
    gpu = dict((key, None) for key in (
        "name", "uuid", "pci_bus_id", "ecc_mode", "ecc_mode_pending", "ecc_uncorrected_volatile",
        "ecc_corrected_volatile", "ecc_uncorrected_aggregate", "ecc_corrected_aggregate", "retired_pages_pending",
        "remapped_rows_corrected", "remapped_rows_uncorrected", "remapped_rows_pending", "remapped_rows_failure",
        "clocks_event_reasons", "clocks_event_reason_names", "temperature_c", "temperature_slowdown_c", "power_w",
        "power_limit_w", "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "pcie_gpu_max_gen",
        "persistence_mode", "processes", "error"))
    gpu.update(index=index, unknown=[])
    return gpu


def _reason_names(mask):
    return [name for name, bit, dummy in CLOCK_REASONS if mask & bit]


def _read_fields(pynvml, handle, gpu, names):
    """Fill GPU's fields one by one; a field the card does not have goes to gpu['unknown']."""
    def read(field, fill):
        try:
            fill()
        except _Unknown:
            gpu["unknown"].append(field)

    def ecc_mode():
        current, pending = _field(pynvml, "nvmlDeviceGetEccMode", handle)
        gpu["ecc_mode"], gpu["ecc_mode_pending"] = bool(current), bool(pending)

    def ecc_errors():
        gpu["ecc_uncorrected_volatile"] = int(_field(pynvml, "nvmlDeviceGetTotalEccErrors", handle, 1, 0))
        gpu["ecc_corrected_volatile"] = int(_field(pynvml, "nvmlDeviceGetTotalEccErrors", handle, 0, 0))

    def ecc_errors_aggregate():
        gpu["ecc_uncorrected_aggregate"] = int(_field(pynvml, "nvmlDeviceGetTotalEccErrors", handle, 1, 1))
        gpu["ecc_corrected_aggregate"] = int(_field(pynvml, "nvmlDeviceGetTotalEccErrors", handle, 0, 1))

    def retired_pages():
        gpu["retired_pages_pending"] = bool(_field(pynvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle))

    def remapped_rows():
        corr, unc, pending, failure = _field(pynvml, "nvmlDeviceGetRemappedRows", handle)
        gpu.update(remapped_rows_corrected=int(corr), remapped_rows_uncorrected=int(unc),
                   remapped_rows_pending=bool(pending), remapped_rows_failure=bool(failure))

    def clocks():
        try:
            mask = _field(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        except _Unknown:
            mask = _field(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        gpu["clocks_event_reasons"] = int(mask)
        gpu["clocks_event_reason_names"] = _reason_names(int(mask))

    def temperature():
        gpu["temperature_c"] = int(_field(pynvml, "nvmlDeviceGetTemperature", handle, 0))

    def temperature_slowdown():
        gpu["temperature_slowdown_c"] = int(_field(pynvml, "nvmlDeviceGetTemperatureThreshold", handle, 1))

    def power():
        gpu["power_w"] = round(int(_field(pynvml, "nvmlDeviceGetPowerUsage", handle)) / 1000.0, 1)

    def power_limit():
        gpu["power_limit_w"] = round(int(_field(pynvml, "nvmlDeviceGetEnforcedPowerLimit", handle)) / 1000.0, 1)

    def pcie():
        gpu["pcie_gen"] = int(_field(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle))
        gpu["pcie_width"] = int(_field(pynvml, "nvmlDeviceGetCurrPcieLinkWidth", handle))

    def pcie_max():
        gpu["pcie_max_gen"] = int(_field(pynvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle))
        gpu["pcie_max_width"] = int(_field(pynvml, "nvmlDeviceGetMaxPcieLinkWidth", handle))
        try:
            gpu["pcie_gpu_max_gen"] = int(_field(pynvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle))
        except _Unknown:
            pass  # an older driver: the link's maximum is enough

    def persistence():
        gpu["persistence_mode"] = bool(_field(pynvml, "nvmlDeviceGetPersistenceMode", handle))

    def processes():
        procs = nvml._compute_processes(pynvml, handle)  # pylint: disable=protected-access
        if procs is None:
            raise _Unknown("processes")
        gpu["processes"] = [
            {"pid": pid, "used_mib": None if used is None else int(used) // nvml.MIB,
             "name": nvml._process_name(pynvml, pid, names)}  # pylint: disable=protected-access
            for pid, used in sorted(procs, key=lambda p: p[0])]

    for field, fill in zip(FIELDS, (ecc_mode, ecc_errors, ecc_errors_aggregate, retired_pages, remapped_rows, clocks,
                                    temperature, temperature_slowdown, power, power_limit, pcie, pcie_max, persistence,
                                    processes)):
        read(field, fill)


def read_health(pynvml):
    """Every GPU's health fields (NVML initialised): a list of dicts (see _empty_gpu); raises NvmlUnavailable
    when the host-wide count cannot be read."""
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        raise nvml._unavailable(pynvml, exc)  # pylint: disable=protected-access
    gpus = []
    names = {}
    for index in range(count):
        gpu = _empty_gpu(index)
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu["name"] = nvml._query_text(pynvml.nvmlDeviceGetName, handle)  # pylint: disable=protected-access
            gpu["uuid"] = nvml._query_text(pynvml.nvmlDeviceGetUUID, handle)  # pylint: disable=protected-access
            pci = pynvml.nvmlDeviceGetPciInfo(handle)
            gpu["pci_bus_id"] = nvml._text(  # pylint: disable=protected-access
                getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None))
            _read_fields(pynvml, handle, gpu, names)
        except (pynvml.NVMLError, TypeError, ValueError, OverflowError, AttributeError) as exc:
            if isinstance(exc, pynvml.NVMLError):
                err = nvml._unavailable(pynvml, exc, index, count)  # pylint: disable=protected-access
            else:
                err = nvml._unexpected(exc, index, count)  # pylint: disable=protected-access
            gpu["error"] = {"name": err.name, "text": err.text, "message": err.message}
        gpus.append(gpu)
    return gpus


# ---------------------------------------------------------------- judging


def gpu_label(gpu):
    """'GPU 3 (bus 5D)' from the PCI bus id 00000000:5D:00.0, else 'GPU 3'."""
    bus = gpu.get("pci_bus_id") or ""
    parts = bus.split(":")
    if len(parts) >= 3 and parts[-2]:
        return "GPU %d (bus %s)" % (gpu["index"], parts[-2].upper())
    return "GPU %d" % gpu["index"]


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def evaluate_gpu(gpu, thresholds, allowed=None):
    """(problems, notes) of one GPU's readings: sentences that name the GPU, what was found, the limit and why.

    THRESHOLDS must be effective (see effective_thresholds); ALLOWED is the set of
    PIDs that may use the GPUs.  Unknown fields (None) are not judged.
    """
    t = thresholds
    label = gpu_label(gpu)
    problems, notes = [], []
    if gpu.get("error"):
        err = gpu["error"]
        message = err.get("message") or ""
        hint = message.split(". ", 1)[1] if ". " in message else "Look for Xid errors in 'dmesg'."
        problems.append("%s: NVML cannot query it: %s (%s); a host with a GPU in this state must not serve. %s" % (
            label, err.get("name"), err.get("text"), hint))
        return problems, notes

    unc = gpu.get("ecc_uncorrected_volatile")
    if unc is not None and unc > t["max_uncorrected_ecc_errors"]:
        problems.append("%s: %s since the driver loaded (at most %d allowed): its memory returned wrong data; reset the "
                        "GPU and read 'nvidia-smi -q -d ECC' before it serves again" % (
                            label, _plural(unc, "uncorrected ECC error"), t["max_uncorrected_ecc_errors"]))
    agg = gpu.get("ecc_uncorrected_aggregate")
    if t["max_uncorrected_ecc_errors_aggregate"] is not None and agg is not None and \
            agg > t["max_uncorrected_ecc_errors_aggregate"]:
        problems.append("%s: %s over the GPU's life (at most %d allowed): its memory keeps failing; plan to service "
                        "the card" % (label, _plural(agg, "uncorrected ECC error"),
                                      t["max_uncorrected_ecc_errors_aggregate"]))
    if gpu.get("retired_pages_pending") and not t["retired_pages_pending_allowed"]:
        problems.append("%s: a retired memory page is pending: it takes effect only after a GPU reset or a reboot, and "
                        "until then the bad page can still be used; reset the GPU before it serves" % label)
    if gpu.get("remapped_rows_failure") and not t["remapped_rows_failure_allowed"]:
        problems.append("%s: a memory row remapping failed: the GPU has no spare row left for a bad one and can "
                        "corrupt data; take it out of service (RMA)" % label)
    if gpu.get("remapped_rows_pending") and not t["remapped_rows_pending_allowed"]:
        problems.append("%s: a memory row remapping is pending: it takes effect only after a GPU reset or a reboot, "
                        "and until then the bad row is still used; reset the GPU before it serves" % label)

    names = gpu.get("clocks_event_reason_names")
    if names is not None:
        bad = [n for n in names if n in t["throttle_reasons"]]
        if bad:
            problems.append("%s: clocks held down by %s (the reasons counted as problems: %s): this GPU runs slower, "
                            "and a tensor-parallel model runs at the pace of its slowest GPU; check cooling and "
                            "power" % (label, ", ".join(_REASON_TEXT[n] for n in bad),
                                       ", ".join(t["throttle_reasons"])))

    temp = gpu.get("temperature_c")
    if temp is not None and temp > t["max_temperature_c"]:
        slowdown = gpu.get("temperature_slowdown_c")
        at = " (the card slows itself down at %d C)" % slowdown if slowdown else ""
        problems.append("%s: %d C, above the limit of %d C%s: check its cooling (fans, airflow, a blocked inlet) "
                        "before loading it" % (label, temp, t["max_temperature_c"], at))

    gen, width = gpu.get("pcie_gen"), gpu.get("pcie_width")
    max_gen, max_width = gpu.get("pcie_max_gen"), gpu.get("pcie_max_width")
    if t["pcie_below_max_is_problem"] and None not in (gen, width, max_gen, max_width):
        idle = "gpu_idle" in (names or [])
        gen_low = gen < max_gen and (not idle or t["pcie_gen_below_max_when_idle_is_problem"])
        if gen_low or width < max_width:
            problems.append("%s: PCIe link Gen%d x%d, the card can do Gen%d x%d: a degraded link starves all-reduce "
                            "over PCIe; reseat the card or check its slot and riser" % (
                                label, gen, width, max_gen, max_width))
        elif gen < max_gen:
            notes.append("%s: PCIe link Gen%d while the GPU is idle (it can do Gen%d): the link slows down to save "
                         "power when idle, so the generation is judged only under load" % (label, gen, max_gen))

    if gpu.get("persistence_mode") is False and t["persistence_mode_required"]:
        problems.append("%s: persistence mode is off: the driver tears the GPU down whenever no process holds it, "
                        "which slows every start and loses its state; enable it (nvidia-persistenced)" % label)

    procs = gpu.get("processes")
    if procs and not t["other_processes_allowed"]:
        others = [p for p in procs if p["pid"] not in (allowed or set())]
        if others:
            items = ", ".join("pid %d %s (%s)" % (
                p["pid"], p.get("name") or "(name not readable)",
                "? MiB" if p.get("used_mib") is None else "%d MiB" % p["used_mib"]) for p in others)
            problems.append("%s: %s not of the served model: %s; it takes memory and compute the model needs: find "
                            "out what it is before the host is touched" % (
                                label, "1 process" if len(others) == 1 else "%d processes" % len(others), items))
    return problems, notes


def _summary(gpus):
    unhealthy = [g["index"] for g in gpus if g["problems"]]
    by_field = {}
    for gpu in gpus:
        for field in gpu["unknown"]:
            by_field.setdefault(field, []).append(gpu["index"])
    groups = {}
    for field in FIELDS:
        if field in by_field:
            groups.setdefault(tuple(by_field[field]), []).append(field)
    unknown = ["%s on GPU%s %s" % (", ".join(fields), "" if len(indices) == 1 else "s",
                                   nvml._ranges(list(indices)))  # pylint: disable=protected-access
               for indices, fields in sorted(groups.items())]
    if not gpus:
        line = "no GPU found"
    elif unhealthy:
        line = "%d of %d GPUs unhealthy (GPU%s %s)" % (
            len(unhealthy), len(gpus), "" if len(unhealthy) == 1 else "s",
            nvml._ranges(unhealthy))  # pylint: disable=protected-access
    else:
        line = "%s healthy" % ("all %d GPUs" % len(gpus) if len(gpus) > 1 else "the GPU")
    if unknown:
        line += "; not readable on this card or driver, so not judged: %s" % "; ".join(unknown)
    return line


def _empty_result(thresholds):
    return {"changed": False, "nvml_available": False, "nvml_error": None, "healthy": False, "gpu_count": 0,
            "gpus": [], "problems": [], "notes": [], "summary": "", "thresholds": thresholds}


def unavailable(thresholds, exc):
    """The result when NVML cannot be used at all (EXC, an nvml.NvmlUnavailable): health unknown, not healthy."""
    result = _empty_result(thresholds)
    result["nvml_error"] = exc.to_dict()
    result["summary"] = "GPU health unknown: %s" % exc.message
    return result


def check(thresholds, allowed=None, pynvml=None):
    """Read and judge every GPU; the result dict of the gpu_health_info module (THRESHOLDS effective)."""
    result = _empty_result(thresholds)
    try:
        with nvml.NvmlSession(pynvml) as session:
            gpus = read_health(session.pynvml)
    except nvml.NvmlUnavailable as exc:
        return unavailable(thresholds, exc)
    for gpu in gpus:
        gpu["problems"], gpu["notes"] = evaluate_gpu(gpu, thresholds, allowed)
        gpu["healthy"] = not gpu["problems"]
        result["problems"].extend(gpu["problems"])
        result["notes"].extend(gpu["notes"])
    result.update(nvml_available=True, gpu_count=len(gpus), gpus=gpus, summary=_summary(gpus))
    result["healthy"] = bool(gpus) and not result["problems"]
    if not gpus:
        result["problems"].append("NVML reports no GPU on this host: a host to serve a model needs its GPUs")
    return result


def check_bounded(thresholds, allowed=None, call_timeout=60, pynvml=None):
    """:func:`check` under CALL_TIMEOUT seconds: a hung driver gives NVML_TIMEOUT in the result, never a hang."""
    started = time.monotonic()
    status, value = nvml.call_bounded(lambda: check(thresholds, allowed, pynvml), call_timeout, "gpu-health")
    if status == "result":
        return value
    result = _empty_result(thresholds)
    if status == "error":
        err = nvml._unexpected(value)  # pylint: disable=protected-access
    else:
        err = nvml.NvmlUnavailable("NVML_TIMEOUT", "NVML did not answer within %s s (call_timeout)" % call_timeout)
    result["nvml_error"] = err.to_dict()
    result["summary"] = "GPU health unknown: %s" % err.message
    result["waited"] = round(time.monotonic() - started, 2)
    return result
