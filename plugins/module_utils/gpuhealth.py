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
* :func:`validate_required` -- the fields an operator requires (REQUIRABLE):
  a required field that is unknown is a problem, not left out of the verdict.
* :func:`read_health` -- one snapshot (NVML open) of every GPU's fields; the
  GPU count is nvml.device_count's, bounded (a count no host has is refused).
* :func:`sample_clocks` -- more readings of the clock event reasons where the
  first shows a transient one (TRANSIENT_REASONS), a bounded window.
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
_REASON_BIT = dict((name, bit) for name, bit, dummy in CLOCK_REASONS)

# Clock event reasons that come and go within a second under load (a power
# cap or power brake while the load swings, a thermal slowdown for a
# moment): one reading of them proves nothing, so they are judged over a short
# window of readings (thresholds clock_samples, clock_sample_interval_ms) and
# count only when present in most of them. HW slowdown (0x8) is the summary
# bit the hardware sets with its causes: with HW thermal slowdown or HW power
# brake in the same reading it is judged with them, over the window; alone it
# is held by the hardware and counts at once, as every other reason does.
# The persistent findings (ECC, retired pages, remapped rows, the PCIe link
# width, persistence mode, temperature, foreign processes) count at once.
TRANSIENT_REASONS = ("sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_HW_CAUSES = 0x40 | 0x80

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
    "ecc_off_allowed": False,
    "clock_samples": 5,
    "clock_sample_interval_ms": 500,
}

# the bounds of the window of readings for the transient clock event reasons
MAX_CLOCK_SAMPLES = 20
MAX_CLOCK_WINDOW_MS = 10000

# the most PIDs read from /proc while looking for a process's descendants
MAX_PROC_ENTRIES = 65536
MAX_DESCENDANTS = 4096

# the fields that can be unknown, in the order they are read
FIELDS = ("ecc_mode", "ecc_errors", "ecc_errors_aggregate", "retired_pages", "remapped_rows", "clocks_event_reasons",
          "temperature", "temperature_slowdown", "power", "power_limit", "pcie", "pcie_max", "persistence_mode",
          "processes")
# the names in a GPU's unknown list, in that order: a PCIe link of which only the generation or only the width
# cannot be read has that half unknown (pcie_gen, pcie_width, pcie_max_gen, pcie_max_width)
UNKNOWN_NAMES = FIELDS[:FIELDS.index("pcie")] + ("pcie", "pcie_gen", "pcie_width", "pcie_max", "pcie_max_gen",
                                                 "pcie_max_width") + FIELDS[FIELDS.index("pcie_max") + 1:]
# the fields an operator can require (option required): each name and the unknown names that break it; ecc is
# ECC's mode and its counters since the driver loaded
REQUIRABLE = dict((field, (field,)) for field in FIELDS)
REQUIRABLE.update(pcie=("pcie", "pcie_gen", "pcie_width"), pcie_max=("pcie_max", "pcie_max_gen", "pcie_max_width"),
                  ecc=("ecc_mode", "ecc_errors"))


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
            ecc_off_allowed=dict(type="bool", default=d["ecc_off_allowed"]),
            clock_samples=dict(type="int", default=d["clock_samples"]),
            clock_sample_interval_ms=dict(type="int", default=d["clock_sample_interval_ms"]),
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
    samples, interval = thresholds.get("clock_samples"), thresholds.get("clock_sample_interval_ms")
    if samples is not None and (not _whole(samples) or not 1 <= samples <= MAX_CLOCK_SAMPLES):
        problems.append("thresholds.clock_samples must be a whole number from 1 to %d (the readings of a transient "
                        "clock event reason, such as 5; 1: one reading decides); got %r" % (MAX_CLOCK_SAMPLES, samples))
    elif interval is not None and (not _whole(interval) or not 50 <= interval <= 2000):
        problems.append("thresholds.clock_sample_interval_ms must be a whole number of milliseconds from 50 to 2000 "
                        "(such as 500); got %r" % (interval,))
    else:
        window = (DEFAULT_THRESHOLDS["clock_samples"] if samples is None else samples) - 1
        window *= DEFAULT_THRESHOLDS["clock_sample_interval_ms"] if interval is None else interval
        if window > MAX_CLOCK_WINDOW_MS:
            problems.append("thresholds.clock_samples and clock_sample_interval_ms make a window of %d ms; at most %d "
                            "ms (a few seconds) are waited" % (window, MAX_CLOCK_WINDOW_MS))
    for key in ("retired_pages_pending_allowed", "remapped_rows_pending_allowed", "remapped_rows_failure_allowed",
                "pcie_below_max_is_problem", "pcie_gen_below_max_when_idle_is_problem", "persistence_mode_required",
                "other_processes_allowed", "ecc_off_allowed"):
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


def validate_required(required):
    """Sentences, one per problem of REQUIRED, the fields a GPU must be able to report (empty list when valid)."""
    if required is None:
        return []
    if not isinstance(required, (list, tuple)):
        return ["required must be a list of field names (%s); got %r" % (", ".join(sorted(REQUIRABLE)), required)]
    bad = [name for name in required if name not in REQUIRABLE]
    if bad:
        return ["required has unknown fields %s; known: %s" % (
            ", ".join(repr(n) for n in bad), ", ".join(sorted(REQUIRABLE)))]
    return []


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
        "persistence_mode", "processes", "error", "temperature_source", "clocks_event_reason_window_s"))
    gpu.update(index=index, unknown=[], clocks_event_reason_samples=[])
    return gpu


def _reason_names(mask):
    return [name for name, bit, dummy in CLOCK_REASONS if mask & bit]


def windowed_reasons(mask):
    """The reasons of MASK judged over a window of readings (TRANSIENT_REASONS, and HW slowdown with its cause)."""
    names = [name for name in TRANSIENT_REASONS if mask & _REASON_BIT[name]]
    if mask & _REASON_BIT["hw_slowdown"] and mask & _HW_CAUSES:
        names.append("hw_slowdown")
    return names


def _clocks_mask(pynvml, handle):
    try:
        return int(_field(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", handle))
    except _Unknown:
        return int(_field(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle))


# the current temperature call (a versioned struct) and the one NVML marks for removal, tried in this order
TEMPERATURE_CALLS = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")


def _temperature(pynvml, handle):
    """(degrees Celsius, the call that answered): nvmlDeviceGetTemperatureV where pynvml and the driver have it, else
    nvmlDeviceGetTemperature; _Unknown when the card has no such sensor."""
    sensor = getattr(pynvml, "NVML_TEMPERATURE_GPU", 0)
    mismatch = getattr(pynvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25)
    try:
        return int(_field(pynvml, TEMPERATURE_CALLS[0], handle, sensor)), TEMPERATURE_CALLS[0]
    except _Unknown:
        pass  # an older pynvml or driver without it
    except TypeError:
        pass  # a pynvml whose call takes other arguments
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) != mismatch:
            raise
    return int(_field(pynvml, TEMPERATURE_CALLS[1], handle, sensor)), TEMPERATURE_CALLS[1]


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
        mask = _clocks_mask(pynvml, handle)
        gpu["clocks_event_reasons"] = mask
        gpu["clocks_event_reason_names"] = _reason_names(mask)
        gpu["clocks_event_reason_samples"] = [mask]

    def temperature():
        gpu["temperature_c"], gpu["temperature_source"] = _temperature(pynvml, handle)

    def temperature_slowdown():
        gpu["temperature_slowdown_c"] = int(_field(pynvml, "nvmlDeviceGetTemperatureThreshold", handle, 1))

    def power():
        gpu["power_w"] = round(int(_field(pynvml, "nvmlDeviceGetPowerUsage", handle)) / 1000.0, 1)

    def power_limit():
        gpu["power_limit_w"] = round(int(_field(pynvml, "nvmlDeviceGetEnforcedPowerLimit", handle)) / 1000.0, 1)

    def link(prefix, gen_call, width_call):
        # the generation and the width each on its own: the width is judged even when the generation is unknown
        missing = []
        for key, fname in ((prefix + "_gen", gen_call), (prefix + "_width", width_call)):
            try:
                gpu[key] = int(_field(pynvml, fname, handle))
            except _Unknown:
                missing.append(key)
        if len(missing) == 2:
            raise _Unknown(prefix)
        gpu["unknown"].extend(missing)

    def pcie():
        link("pcie", "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth")

    def pcie_max():
        link("pcie_max", "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth")
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
    count = nvml.device_count(pynvml)  # (bounded: a count no host has is refused, naming it)
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
        except (pynvml.NVMLError, TypeError, ValueError, OverflowError, AttributeError, MemoryError) as exc:
            if isinstance(exc, pynvml.NVMLError):
                err = nvml._unavailable(pynvml, exc, index, count)  # pylint: disable=protected-access
            else:
                err = nvml._unexpected(exc, index, count)  # pylint: disable=protected-access
            gpu["error"] = {"name": err.name, "text": err.text, "message": err.message}
        gpus.append(gpu)
    return gpus


def sample_clocks(pynvml, gpus, thresholds, sleep=time.sleep, clock=time.monotonic):
    """More readings of the clock event reasons, for the GPUs whose first reading shows a transient reason that
    THRESHOLDS count (windowed_reasons): up to clock_samples readings in all, clock_sample_interval_ms apart, ending
    early once each such reason is present in most of them or can no longer be. The readings go to each GPU's
    ``clocks_event_reason_samples`` and the seconds they took to ``clocks_event_reason_window_s``. A reading that fails
    ends that GPU's window (what was read is judged)."""
    samples = thresholds["clock_samples"]
    need = samples // 2 + 1
    pending = {}
    for gpu in gpus:
        first = gpu.get("clocks_event_reasons")
        if gpu.get("error") or first is None or samples < 2:
            continue
        names = [n for n in windowed_reasons(first) if n in thresholds["throttle_reasons"]]
        if names:
            pending[gpu["index"]] = (gpu, names)
    start = clock()
    taken = 1
    while pending and taken < samples:
        sleep(thresholds["clock_sample_interval_ms"] / 1000.0)
        taken += 1
        for index in sorted(pending):
            gpu, names = pending[index]
            try:
                mask = _clocks_mask(pynvml, pynvml.nvmlDeviceGetHandleByIndex(index))
            except (_Unknown, pynvml.NVMLError, TypeError, ValueError, OverflowError, AttributeError):
                del pending[index]
                continue
            gpu["clocks_event_reason_samples"].append(mask)
            left = samples - len(gpu["clocks_event_reason_samples"])
            present = [sum(1 for m in gpu["clocks_event_reason_samples"] if m & _REASON_BIT[n]) for n in names]
            if all(p >= need or p + left < need for p in present):
                del pending[index]
    for gpu in gpus:
        if len(gpu.get("clocks_event_reason_samples") or []) > 1:
            gpu["clocks_event_reason_window_s"] = round(clock() - start, 2)


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


def _clock_findings(gpu, t, label):
    """(problems, notes) of the clock event reasons: at once from the first reading, the transient ones over the
    window of readings (sample_clocks) when there is one."""
    names = gpu.get("clocks_event_reason_names")
    if names is None:
        return [], []
    samples = gpu.get("clocks_event_reason_samples") or []
    windowed = windowed_reasons(samples[0]) if len(samples) > 1 else []
    held, counts, momentary = [], [], []
    for name in names:
        if name not in t["throttle_reasons"]:
            continue
        if name not in windowed:
            held.append(name)
            continue
        present = sum(1 for mask in samples if mask & _REASON_BIT[name])
        if present * 2 > len(samples):
            held.append(name)
            counts.append("%s %d of %d" % (_REASON_TEXT[name], present, len(samples)))
        else:
            momentary.append("%s %d of %d" % (_REASON_TEXT[name], present, len(samples)))
    window = gpu.get("clocks_event_reason_window_s") or 0.0
    problems, notes = [], []
    if held:
        over = ", held in most readings over %.1f s (%s)" % (window, ", ".join(counts)) if counts else ""
        problems.append("%s: clocks held down by %s (the reasons counted as problems: %s)%s: this GPU runs slower, "
                        "and a tensor-parallel model runs at the pace of its slowest GPU; check cooling and "
                        "power" % (label, ", ".join(_REASON_TEXT[n] for n in held), ", ".join(t["throttle_reasons"]),
                                   over))
    if momentary:
        notes.append("%s: clocks held down for a moment only (%s readings over %.1f s): a reason that comes and goes "
                     "under load counts only when it holds in most readings" % (label, ", ".join(momentary), window))
    return problems, notes


def _pcie_findings(gpu, t, label, names):
    """(problems, notes) of the PCIe link: the width always (it does not drop at idle); the generation only from a
    reading while the GPU is not idle (the link slows down to save power), unless the thresholds say otherwise."""
    gen, width = gpu.get("pcie_gen"), gpu.get("pcie_width")
    max_gen, max_width = gpu.get("pcie_max_gen"), gpu.get("pcie_max_width")
    if not t["pcie_below_max_is_problem"]:
        return [], []
    idle = "gpu_idle" in (names or [])
    gen_known = None not in (gen, max_gen)
    width_low = None not in (width, max_width) and width < max_width
    gen_low = gen_known and gen < max_gen and (not idle or t["pcie_gen_below_max_when_idle_is_problem"])
    if gen_low or width_low:
        return ["%s: PCIe link %s x%s, the card can do %s x%s: a degraded link starves all-reduce over PCIe; reseat "
                "the card or check its slot and riser" % (
                    label, "Gen?" if gen is None else "Gen%d" % gen, "?" if width is None else width,
                    "Gen?" if max_gen is None else "Gen%d" % max_gen, "?" if max_width is None else max_width)], []
    if gen_known and gen < max_gen:
        return [], ["%s: PCIe link Gen%d while the GPU is idle (it can do Gen%d): the link slows down to save power "
                    "when idle, so the generation is judged only under load" % (label, gen, max_gen)]
    return [], []


def evaluate_gpu(gpu, thresholds, allowed=None, required=()):
    """(problems, notes) of one GPU's readings: sentences that name the GPU, what was found, the limit and why.

    THRESHOLDS must be effective (see effective_thresholds); ALLOWED is the set of
    PIDs that may use the GPUs.  Unknown fields (None) are not judged, but a
    field of REQUIRED (names of REQUIRABLE) that is unknown is a problem.
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

    for name in required or ():
        missing = [u for u in gpu.get("unknown") or [] if u in REQUIRABLE.get(name, ())]
        if missing:
            problems.append("%s: %s cannot be read on this card or driver (NVML answers not supported), and %s is "
                            "required: this GPU's health cannot be proven without it; check the driver ('nvidia-smi "
                            "-q'), or leave %s out of the required fields if this card does not have it" % (
                                label, ", ".join(missing), name, name))

    if gpu.get("ecc_mode") is False and not t["ecc_off_allowed"]:
        pending = (" (it is set to turn on at the next GPU reset or reboot)" if gpu.get("ecc_mode_pending") else
                   "; turn it on ('nvidia-smi -i %d -e 1', then a GPU reset or a reboot)" % gpu["index"])
        problems.append("%s: ECC is off: the GPU's memory errors are neither corrected nor counted, so an uncorrected "
                        "error goes unseen and corrupts results silently%s, or allow it with "
                        "thresholds.ecc_off_allowed" % (label, pending))
    elif gpu.get("ecc_mode") is True and gpu.get("ecc_mode_pending") is False and not t["ecc_off_allowed"]:
        # (nvmlDeviceGetEccMode: current on, pending off; someone ran 'nvidia-smi -e 0')
        problems.append("%s: ECC is on but set to turn off at the next GPU reset or reboot: after it, the GPU's memory "
                        "errors are neither corrected nor counted; keep it on ('nvidia-smi -i %d -e 1'), or allow it "
                        "with thresholds.ecc_off_allowed" % (label, gpu["index"]))

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
    found, seen = _clock_findings(gpu, t, label)
    problems.extend(found)
    notes.extend(seen)

    temp = gpu.get("temperature_c")
    if temp is not None and temp > t["max_temperature_c"]:
        slowdown = gpu.get("temperature_slowdown_c")
        at = " (the card slows itself down at %d C)" % slowdown if slowdown else ""
        problems.append("%s: %d C, above the limit of %d C%s: check its cooling (fans, airflow, a blocked inlet) "
                        "before loading it" % (label, temp, t["max_temperature_c"], at))

    found, seen = _pcie_findings(gpu, t, label, names)
    problems.extend(found)
    notes.extend(seen)

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


def _summary(gpus, expected_count=None):
    unhealthy = [g["index"] for g in gpus if g["problems"]]
    by_field = {}
    for gpu in gpus:
        for field in gpu["unknown"]:
            by_field.setdefault(field, []).append(gpu["index"])
    groups = {}
    for field in UNKNOWN_NAMES:
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
    if expected_count is not None and len(gpus) < expected_count:
        line = "%s found where %d are expected; %s" % (_plural(len(gpus), "GPU"), expected_count, line)
    if unknown:
        line += "; not readable on this card or driver, so not judged: %s" % "; ".join(unknown)
    return line


def _empty_result(thresholds, required=(), expected_count=None):
    return {"changed": False, "nvml_available": False, "nvml_error": None, "healthy": False, "gpu_count": 0,
            "gpus": [], "problems": [], "notes": [], "summary": "", "thresholds": thresholds,
            "required": list(required or ()), "expected_gpu_count": expected_count}


def unavailable(thresholds, exc):
    """The result when NVML cannot be used at all (EXC, an nvml.NvmlUnavailable): health unknown, not healthy."""
    result = _empty_result(thresholds)
    result["nvml_error"] = exc.to_dict()
    result["summary"] = "GPU health unknown: %s" % exc.message
    return result


def check(thresholds, allowed=None, pynvml=None, required=(), expected_count=None, sleep=time.sleep):
    """Read and judge every GPU; the result dict of the gpu_health_info module (THRESHOLDS effective).

    REQUIRED: field names (REQUIRABLE) that must not be unknown; EXPECTED_COUNT: the GPUs the host had before (fewer
    now is a problem: a GPU lost since); SLEEP: the wait between readings of the clock event reasons.
    """
    result = _empty_result(thresholds, required, expected_count)
    try:
        with nvml.NvmlSession(pynvml) as session:
            gpus = read_health(session.pynvml)
            sample_clocks(session.pynvml, gpus, thresholds, sleep=sleep)
    except nvml.NvmlUnavailable as exc:
        result = unavailable(thresholds, exc)
        result.update(required=list(required or ()), expected_gpu_count=expected_count)
        return result
    for gpu in gpus:
        gpu["problems"], gpu["notes"] = evaluate_gpu(gpu, thresholds, allowed, required)
        gpu["healthy"] = not gpu["problems"]
        result["problems"].extend(gpu["problems"])
        result["notes"].extend(gpu["notes"])
    result.update(nvml_available=True, gpu_count=len(gpus), gpus=gpus, summary=_summary(gpus, expected_count))
    if expected_count is not None and len(gpus) < expected_count:
        result["problems"].insert(0, (
            "NVML reports %s where %d are expected (expected_gpu_count, the count read before): a GPU was lost since; "
            "look for Xid errors in 'dmesg' (Xid 79 means fallen off the bus). A host that lost a GPU cannot serve its "
            "model after a restart: it must not be stopped" % (_plural(len(gpus), "GPU"), expected_count)))
    result["healthy"] = bool(gpus) and not result["problems"]
    if not gpus:
        result["problems"].append("NVML reports no GPU on this host: a host to serve a model needs its GPUs")
    return result


def check_bounded(thresholds, allowed=None, call_timeout=60, pynvml=None, required=(), expected_count=None,
                  sleep=time.sleep):
    """:func:`check` under CALL_TIMEOUT seconds: a hung driver gives NVML_TIMEOUT in the result, never a hang."""
    started = time.monotonic()
    status, value = nvml.call_bounded(lambda: check(thresholds, allowed, pynvml, required, expected_count, sleep),
                                      call_timeout, "gpu-health")
    if status == "result":
        return value
    result = _empty_result(thresholds, required, expected_count)
    if status == "error":
        err = nvml._unexpected(value)  # pylint: disable=protected-access
    else:
        err = nvml.NvmlUnavailable("NVML_TIMEOUT", "NVML did not answer within %s s (call_timeout)" % call_timeout)
    result["nvml_error"] = err.to_dict()
    result["summary"] = "GPU health unknown: %s" % err.message
    result["waited"] = round(time.monotonic() - started, 2)
    return result
