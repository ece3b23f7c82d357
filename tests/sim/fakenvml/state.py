# SPDX-License-Identifier: GPL-3.0-or-later
"""Read and write the state file of the fake NVML library (libnvidia-ml.so.1).

The fake library (fakenvml.c, next to this file) answers every NVML query
from this file, re-reading it on each call, so a change made here is seen by
the next pynvml call of any process on the host.

Format: one ``key=value`` per line, ``#`` starts a comment line, unknown keys
are ignored, a missing key takes its default. A missing file means "all
defaults" (8 healthy, idle GPUs).

Global keys::

    driver_version=580.95.05       nvmlSystemGetDriverVersion
    cuda_driver_version=13000      nvmlSystemGetCudaDriverVersion(_v2)
    init_error=                    empty, or an NVML error name without the
                                   NVML_ERROR_ prefix (DRIVER_NOT_LOADED,
                                   NO_PERMISSION, LIB_RM_VERSION_MISMATCH,
                                   UNKNOWN, ...): nvmlInit* returns it
    gpu_count=8                    0 to 64
    reported_gpu_count=            what nvmlDeviceGetCount answers instead
                                   of gpu_count (0 to 4294967295): a broken
                                   count; the GPUs are still gpu_count
    hostname=                      seed of the default UUIDs (default: the
                                   host's name, so UUIDs differ per host)
    memory_v2=1                    0: nvmlDeviceGetMemoryInfo_v2 returns
                                   NVML_ERROR_FUNCTION_NOT_FOUND, as an old
                                   driver without the symbol would
    temperature_v=1                0: nvmlDeviceGetTemperatureV returns
                                   NVML_ERROR_FUNCTION_NOT_FOUND (a driver
                                   older than the call); the old
                                   nvmlDeviceGetTemperature still answers
    default.name=NVIDIA RTX PRO 6000 Blackwell Server Edition
    default.total_mib=97887
    default.cc=12.0                compute capability major.minor
    default.base_used_mib=0        memory used with no process on the GPU
    default.reserved_mib=0         memory the driver reserves (NVML v2 reports
                                   it apart; v1 counts it as used)

Per-GPU keys (``i`` from 0 to gpu_count-1) override the defaults::

    gpu.<i>.name=...
    gpu.<i>.uuid=GPU-....          default: default_uuid(hostname, i)
    gpu.<i>.pci_bus_id=00000000:18:00.0
                                   default: buses 18 2A 3A 5D 9A AB BA DB of
                                   PCI domain i // 8
    gpu.<i>.pci_device_id=0x2BB510DE
    gpu.<i>.total_mib=97887
    gpu.<i>.cc=12.0
    gpu.<i>.base_used_mib=0
    gpu.<i>.reserved_mib=0
    gpu.<i>.held_mib=0             memory the driver has not given back yet:
    gpu.<i>.held_until=0           counted as used, with no process listed,
                                   until the Unix time held_until (seconds),
                                   as a slow teardown after a server exits
    gpu.<i>.lost=1                 every query on this GPU's handle returns
                                   NVML_ERROR_GPU_IS_LOST
    gpu.<i>.error=NO_PERMISSION    every query on this GPU's handle returns
                                   this NVML error (name as for init_error)
    gpu.<i>.procs=PID:MIB[,PID:MIB...]
                                   compute processes; an entry whose PID is
                                   not alive is ignored (as the driver frees
                                   a dead process's memory)
    gpu.<i>.reported_procs=N       the count the size query of the compute
                                   processes answers (a broken count; the
                                   list itself stays the real one)

Health keys, per GPU (``gpu.<i>.KEY``) or for all (``default.KEY``); the
defaults are a healthy, idle RTX PRO 6000 Blackwell Server Edition::

    ecc_mode=1                     nvmlDeviceGetEccMode (current and pending);
    ecc_pending_mode=1             with ECC off the error counters answer
                                   NOT_SUPPORTED (nvidia-smi's N/A)
    ecc_uncorrected_volatile=0     nvmlDeviceGetTotalEccErrors: uncorrected
    ecc_uncorrected_aggregate=0    since the driver loaded / over the GPU's
    ecc_corrected_volatile=0       life, and the corrected ones
    ecc_corrected_aggregate=0
    retired_pages_pending=0        nvmlDeviceGetRetiredPagesPendingStatus
    remapped_rows_corrected=0      nvmlDeviceGetRemappedRows: rows remapped
    remapped_rows_uncorrected=0    for corrected / uncorrected errors, a
    remapped_rows_pending=0        remapping waiting for a GPU reset, a
    remapped_rows_failure=0        remapping that failed
    clocks_event_reasons=0x1       nvmlDeviceGetCurrentClocksEventReasons (and
                                   ...ThrottleReasons): the nvmlClocksEventReason
                                   bits, decimal or 0x hex: 0x1 GPU idle, 0x2
                                   applications clocks, 0x4 SW power cap, 0x8 HW
                                   slowdown, 0x20 SW thermal, 0x40 HW thermal,
                                   0x80 HW power brake
    clocks_event_reasons_seq=      comma-separated masks: the n-th reading of
                                   the reasons in a process answers the n-th
                                   (the last one repeated), as a reason that
                                   comes and goes under load; empty: off
    temperature_c=35               nvmlDeviceGetTemperature(V), GPU sensor
    temperature_slowdown_c=90      nvmlDeviceGetTemperatureThreshold: slowdown
    temperature_shutdown_c=95      (and GPU max) / shutdown
    power_mw=32000                 nvmlDeviceGetPowerUsage (milliwatts)
    power_limit_mw=600000          nvmlDeviceGetEnforcedPowerLimit
    pcie_gen=5  pcie_width=16      nvmlDeviceGetCurrPcieLinkGeneration/Width
    pcie_max_gen=5                 nvmlDeviceGetMaxPcieLinkGeneration/Width (the
    pcie_max_width=16              most the GPU and its slot can do)
    pcie_gpu_max_gen=5             nvmlDeviceGetGpuMaxPcieLinkGeneration
    persistence_mode=1             nvmlDeviceGetPersistenceMode
    unsupported=                   comma-separated calls that answer
                                   NVML_ERROR_NOT_SUPPORTED, as on cards
                                   without the feature: ecc, ecc_mode,
                                   retired_pages, remapped_rows,
                                   clocks_event_reasons, temperature,
                                   temperature_threshold, power, power_limit,
                                   pcie, pcie_gen (the generation calls
                                   alone), persistence_mode, or all

A number that cannot be read (or out of range) keeps the default.

Memory used on a GPU = base_used_mib + held_mib (before held_until) + the
MiB of its live processes,
capped at total_mib - reserved_mib; free = total - reserved - used.
nvmlDeviceGetMemoryInfo_v2 returns used and reserved apart,
nvmlDeviceGetMemoryInfo (v1) returns used + reserved as used.  A process
whose PID is not alive or is a zombie counts as gone.

nvmlInit* fails only as init_error says; every other call before nvmlInit
returns NVML_ERROR_UNINITIALIZED.  A handle whose index is no longer below
gpu_count returns GPU_IS_LOST.  An unreadable state file makes every call,
nvmlInit included, return NVML_ERROR_NO_PERMISSION.

The path is ``$FAKE_NVML_STATE`` or ``/var/lib/fake-nvml/state``.

Command line (used by tests and the simulated hosts)::

    state.py show
    state.py set KEY=VALUE [KEY=VALUE ...]
    state.py unset KEY [KEY ...]
    state.py claim --pid PID --mib MIB [--gpus 0,1,...]
    state.py release --pid PID
    state.py hold --mib MIB --seconds N [--gpus 0,1,...]
"""

import argparse
import fcntl
import math
import os
import sys
import tempfile
import time

DEFAULT_PATH = "/var/lib/fake-nvml/state"


def state_path(path=None):
    return path or os.environ.get("FAKE_NVML_STATE") or DEFAULT_PATH


def read_state(path=None):
    """Return the state as an ordered dict of str -> str (no defaults filled)."""
    data = {}
    try:
        with open(state_path(path), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#") or "=" not in line:
                    continue
                key, value = line.split("=", 1)
                data[key.strip()] = value.strip()
    except FileNotFoundError:
        pass
    return data


def _write_state(data, path):
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# fake NVML state; see tests/sim/fakenvml/state.py\n")
            for key, value in data.items():
                f.write("%s=%s\n" % (key, value))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def update_state(mutate, path=None):
    """Read-modify-write the state under an exclusive lock; atomic rename."""
    path = state_path(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_state(path)
        mutate(data)
        _write_state(data, path)
        return data


def _hash64(text):
    """FNV-1a 64 then the splitmix64 finaliser (as hash64 in fakenvml.c)."""
    mask = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        h ^= byte
        h = (h * 0x100000001B3) & mask
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & mask
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & mask
    return h ^ (h >> 31)


def default_uuid(hostname, index):
    """The UUID the fake library gives GPU INDEX on host HOSTNAME when unset."""
    h1 = _hash64("gpufleet-fakenvml:%s:%d" % (hostname, index))
    h2 = _hash64("gpufleet-fakenvml:%s:%d:2" % (hostname, index))
    return "GPU-%08x-%04x-%04x-%04x-%012x" % (
        h1 >> 32,
        (h1 >> 16) & 0xFFFF,
        h1 & 0xFFFF,
        h2 >> 48,
        h2 & 0xFFFFFFFFFFFF,
    )


def gpu_count(data):
    try:
        return int(data.get("gpu_count", "8"))
    except ValueError:
        return 8


def _parse_procs(text):
    procs = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        pid, mib = (item.split(":", 1) + [""])[:2]
        procs.append((int(pid), int(mib or 0)))
    return procs


def _format_procs(procs):
    return ",".join("%d:%d" % (pid, mib) for pid, mib in procs)


def claim(pid, mib, gpus=None, path=None):
    """Record that process PID holds MIB MiB on each listed GPU (default: all)."""

    def mutate(data):
        indices = gpus if gpus is not None else range(gpu_count(data))
        for i in indices:
            key = "gpu.%d.procs" % i
            procs = [p for p in _parse_procs(data.get(key)) if p[0] != pid]
            procs.append((pid, int(mib)))
            data[key] = _format_procs(procs)

    return update_state(mutate, path)


def release(pid, path=None):
    """Remove PID from every GPU's process list."""

    def mutate(data):
        for key in list(data):
            if key.startswith("gpu.") and key.endswith(".procs"):
                procs = [p for p in _parse_procs(data[key]) if p[0] != pid]
                if procs:
                    data[key] = _format_procs(procs)
                else:
                    del data[key]

    return update_state(mutate, path)


def hold(mib, seconds, gpus=None, path=None, now=None):
    """The driver keeps MIB MiB on each listed GPU (default: all) for SECONDS from now, with no process."""
    if not 0 <= mib <= 10 ** 7 or not 0 <= seconds <= 86400:
        raise ValueError("hold: mib must be from 0 to 10000000 and seconds from 0 to 86400")
    until = int(math.ceil((time.time() if now is None else now) + seconds))

    def mutate(data):
        indices = gpus if gpus is not None else range(gpu_count(data))
        for i in indices:
            data["gpu.%d.held_mib" % i] = str(int(mib))
            data["gpu.%d.held_until" % i] = str(until)

    return update_state(mutate, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--state", help="state file (default: $FAKE_NVML_STATE or %s)" % DEFAULT_PATH)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("show")
    p_set = sub.add_parser("set")
    p_set.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    p_unset = sub.add_parser("unset")
    p_unset.add_argument("keys", nargs="+")
    p_claim = sub.add_parser("claim")
    p_claim.add_argument("--pid", type=int, required=True)
    p_claim.add_argument("--mib", type=int, required=True)
    p_claim.add_argument("--gpus", help="comma-separated indices (default: all)")
    p_release = sub.add_parser("release")
    p_release.add_argument("--pid", type=int, required=True)
    p_hold = sub.add_parser("hold")
    p_hold.add_argument("--mib", type=int, required=True)
    p_hold.add_argument("--seconds", type=float, required=True)
    p_hold.add_argument("--gpus", help="comma-separated indices (default: all)")
    args = parser.parse_args(argv)

    if args.cmd == "show":
        for key, value in read_state(args.state).items():
            print("%s=%s" % (key, value))
    elif args.cmd == "set":
        pairs = []
        for pair in args.pairs:
            if "=" not in pair:
                parser.error("expected KEY=VALUE, got %r" % pair)
            pairs.append(pair.split("=", 1))
        update_state(lambda d: d.update(pairs), args.state)
    elif args.cmd == "unset":
        update_state(lambda d: [d.pop(k, None) for k in args.keys], args.state)
    elif args.cmd == "claim":
        gpus = [int(x) for x in args.gpus.split(",")] if args.gpus else None
        claim(args.pid, args.mib, gpus, args.state)
    elif args.cmd == "release":
        release(args.pid, args.state)
    elif args.cmd == "hold":
        if not 0 <= args.mib <= 10 ** 7 or not 0 <= args.seconds <= 86400:
            parser.error("--mib must be from 0 to 10000000 and --seconds from 0 to 86400")
        gpus = None
        if args.gpus:
            try:
                gpus = [int(x) for x in args.gpus.split(",")]
            except ValueError:
                parser.error("--gpus takes GPU indices separated by commas, such as 0,1,2")
            if any(not 0 <= i < 64 for i in gpus):
                parser.error("--gpus: a GPU index is from 0 to 63")
        hold(args.mib, args.seconds, gpus, args.state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
