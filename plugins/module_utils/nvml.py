# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read the GPUs of a host through NVML (nvidia-ml-py) and check expectations.

Everything goes through the ``pynvml`` module of the nvidia-ml-py package,
never through ``nvidia-smi`` output.  ``pynvml`` is imported only when NVML is
first used (:func:`import_pynvml`), so the modules that import this file load
on hosts without it and fail with a sentence that says what to install.

Public API (used by the ``nvml_vram_info`` module and by roles through it):

* :func:`collect` -- one call that opens NVML, reads every GPU, checks an
  expectation (polling until it holds or a timeout passes) and returns a
  result dict (``nvml_available``, ``nvml_error``, ``gpus``, ``summary``,
  ``mismatches``, ``expectation_met``, ``waited``, ...).  Never raises for
  NVML faults: they come back as ``nvml_available: false`` plus
  ``nvml_error`` (``name``, ``text``, ``gpu_index``, ``message``).
* :func:`collect_bounded` -- :func:`collect` in a worker thread with a
  deadline: when NVML does not answer (a hung driver), the result says so
  (``nvml_error.name`` ``NVML_TIMEOUT``) instead of the task hanging.
* :func:`call_bounded` -- any NVML work in a worker thread with a deadline
  (the GPU health check uses it too).
* :func:`load_pynvml` -- pynvml from this interpreter or from the
  nvidia-ml-py of another venv's site-packages (the audit runs with the
  host's own Python).
* :class:`NvmlSession` and :func:`read_snapshot` -- the lower level: open
  NVML once, read a snapshot of the host as often as needed.
* :func:`expect_argument_spec` -- the ``expect`` option's argument spec.
* :func:`validate_expect` -- the problems of an expectation dict, as
  sentences (empty list when it is valid).
* :func:`check_expectations` -- mismatch lines (one per GPU) of a snapshot.
* :func:`summarize` and :func:`gpu_facts` -- the summary (count, compute
  capabilities, ``sm120``) and the ``gpufleet_gpus`` fact.
* :func:`parse_compute_capability` -- ``"12.0"`` -> ``(12, 0)``,
  ``"12.x"``/``"12"`` -> ``(12, None)``.

Memory figures are MiB (bytes // 1048576).  The v2 memory call is used where
the driver has it (``used`` then excludes the memory the driver reserves,
returned as ``memory_reserved_mib``), else v1 (``used`` includes it,
``memory_reserved_mib`` is None); ``memory_source`` says which.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ctypes
import re
import sys
import threading
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils import hostlib, serving
from ansible_collections.gpufleet.vllm.plugins.module_utils.environment import venv_site_dirs
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text

MIB = 1024 * 1024

# The most GPUs a host's NVML is believed: the NVIDIA kernel driver manages at
# most 32 GPUs in one system (NV_MAX_DEVICES in its nvlimits.h), and the
# largest servers hold 8 to 20; twice the driver's limit leaves room for a
# future driver. A count above it is a broken answer (a driver or library
# fault), never read GPU by GPU: 4,294,967,295 (-1 as an unsigned int) would
# otherwise be walked index by index.
MAX_GPUS = 64

# The most compute processes one GPU is believed to list: each CUDA context
# holds a few hundred MiB of the GPU's memory and MPS serves at most 48 to 60
# clients per GPU; a longer list is a broken answer, not read process by
# process (each one's name is another NVML call).
MAX_PROCESSES = 4096

PYNVML_MISSING = "PYNVML_NOT_INSTALLED"
PYNVML_MODULE = "pynvml"

EXPECT_KEYS = (
    "count",
    "name",
    "compute_capability",
    "min_total_mib",
    "min_used_mib",
    "min_used_fraction",
    "min_used_tolerance",
    "max_used_mib",
    "gpus",
    "no_processes",
)


def expect_argument_spec():
    """The ``expect`` option of the modules that read NVML (doc fragment gpufleet.vllm.nvml_expect)."""
    return dict(
        type="dict",
        options=dict(
            count=dict(type="int"),
            name=dict(type="str"),
            compute_capability=dict(type="str"),
            min_total_mib=dict(type="int"),
            min_used_mib=dict(type="int"),
            min_used_fraction=dict(type="float"),
            min_used_tolerance=dict(type="float"),
            max_used_mib=dict(type="int"),
            gpus=dict(type="list", elements="raw"),
            no_processes=dict(type="bool"),
        ),
    )


_CC_RE = re.compile(r"^(\d{1,2})(?:\.(\d{1,2}|x|X|\*))?\Z")

_HINTS = {
    PYNVML_MISSING: (
        "The Python package nvidia-ml-py (module pynvml) cannot be imported by {python}: install nvidia-ml-py "
        "on the host (the roles install it from the wheelhouse), or point ansible_python_interpreter at the "
        "Python environment that has it."
    ),
    "NVML_ERROR_LIBRARY_NOT_FOUND": (
        "libnvidia-ml.so.1 could not be loaded: install the NVIDIA driver's user-space libraries on the host "
        "(the package that ships libnvidia-ml.so.1), or add their directory to the library search path."
    ),
    "NVML_ERROR_DRIVER_NOT_LOADED": (
        "The NVIDIA kernel driver is not loaded: check 'lsmod | grep nvidia' and 'dmesg', then load it "
        "('modprobe nvidia') or reboot after a driver installation."
    ),
    "NVML_ERROR_NO_PERMISSION": (
        "The user running the task may not access the GPUs (/dev/nvidia*): run the task with become: true, "
        "or give that user access to the devices."
    ),
    "NVML_ERROR_GPU_IS_LOST": (
        "The GPU fell off the bus or stopped responding: look for Xid errors in 'dmesg' (Xid 79 means fallen "
        "off the bus); the GPU needs a reset or the host a reboot before it can serve again."
    ),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
        "The NVML library and the loaded kernel driver are different versions, usually after a driver upgrade "
        "without a reboot: reboot the host (or reload the nvidia kernel modules)."
    ),
    "NVML_ERROR_UNINITIALIZED": "NVML was used before it was initialised; this is a bug, please report it.",
}

_HINTS["NVML_TIMEOUT"] = (
    "The NVIDIA driver did not answer in time: a GPU may have fallen off the bus or the driver be stuck; look for "
    "Xid errors in 'dmesg' and try 'nvidia-smi' (if it hangs too, the host needs a GPU reset or a reboot). Nothing "
    "was changed."
)
_HINTS["NVML_UNEXPECTED"] = (
    "pynvml answered with something this collection cannot read (an unusual driver or nvidia-ml-py version): "
    "check 'nvidia-smi' and the nvidia-ml-py version on the host, and report it."
)

_DEFAULT_HINT = "Check the NVIDIA driver on the host ('nvidia-smi', 'dmesg')."


class NvmlUnavailable(Exception):
    """NVML (or one GPU) cannot be queried; carries the NVML error's name and text."""

    def __init__(self, name, text, gpu_index=None, gpu_count=None):
        self.name = name
        self.text = text
        self.gpu_index = gpu_index
        self.gpu_count = gpu_count
        super(NvmlUnavailable, self).__init__(self.message)

    @property
    def message(self):
        hint = _HINTS.get(self.name, _DEFAULT_HINT).format(python=sys.executable)
        if self.name == PYNVML_MISSING:
            return "NVML is not usable on this host: %s. %s" % (self.text, hint)
        if self.gpu_index is None:
            where = "NVML is not usable on this host"
        elif self.gpu_count is not None:
            where = "NVML cannot query GPU %d of %d" % (self.gpu_index, self.gpu_count)
        else:
            where = "NVML cannot query GPU %d" % self.gpu_index
        return "%s: %s (%s). %s" % (where, self.name, self.text, hint)

    def to_dict(self):
        return {"name": self.name, "text": self.text, "gpu_index": self.gpu_index, "message": self.message}


def import_pynvml():
    """Return the pynvml module, or raise NvmlUnavailable saying to install nvidia-ml-py."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise NvmlUnavailable(PYNVML_MISSING, "cannot import pynvml (%s)" % exc)
    return pynvml


def load_pynvml(site_dirs=()):
    """pynvml from this interpreter, else the ``pynvml.py`` of nvidia-ml-py in one of ``site_dirs``.

    Returns (module, where): ``where`` is None for this interpreter's own
    pynvml, else the file loaded.  Only that one file is executed (it is the
    whole of nvidia-ml-py, pure Python over ctypes): the directory is not
    added to ``sys.path`` and its ``.pth`` files are not run (the loading is
    :func:`hostlib.load`'s, shared with the other libraries the modules need
    from the tools venv).  Raises the import's NvmlUnavailable
    (PYNVML_NOT_INSTALLED) when none has it.
    """
    try:
        return import_pynvml(), None
    except NvmlUnavailable as exc:
        first = exc
    # (this interpreter was tried above, with the message of its own: the directories only here)
    try:
        found = hostlib.load_from(PYNVML_MODULE, site_dirs, package=False)
    except hostlib.LibraryMissing as exc:
        raise NvmlUnavailable(PYNVML_MISSING, exc.text)
    if found is None:
        raise first
    return found


def load_pynvml_venvs(venvs=()):
    """(pynvml, where) from this interpreter or the site-packages of one of VENVS (load_pynvml); the
    NvmlUnavailable of a missing pynvml names the venvs that were tried too."""
    try:
        return load_pynvml([site for venv in venvs or () for site in venv_site_dirs(venv)])
    except NvmlUnavailable as exc:
        if venvs and exc.name == PYNVML_MISSING and exc.text.startswith("cannot import"):
            raise NvmlUnavailable(PYNVML_MISSING, "%s, and none of %s has nvidia-ml-py's pynvml.py" % (
                exc.text, ", ".join(venvs)))
        raise


def collect_venvs(venvs=(), call_timeout=60, expect=None):
    """collect_bounded() with the pynvml of load_pynvml_venvs(VENVS): (the result, None), or (None, why NVML could
    not be read, in a few words)."""
    try:
        pynvml, dummy = load_pynvml_venvs(venvs)
    except NvmlUnavailable as exc:
        return None, exc.text
    result = collect_bounded(expect=expect, call_timeout=call_timeout, pynvml=pynvml)
    if not result.get("nvml_available"):
        error = result.get("nvml_error") or {}
        return None, "%s: %s" % (error.get("name") or "NVML", error.get("text") or "unavailable")
    return result, None


def error_name(pynvml, exc):
    """'NVML_ERROR_GPU_IS_LOST' for an NVMLError with value 15, and so on."""
    value = getattr(exc, "value", None)
    for attr in dir(pynvml):
        if attr.startswith("NVML_ERROR_") and getattr(pynvml, attr) == value:
            return attr
    return "NVML_ERROR_%s" % value


def error_text(exc):
    try:
        text = str(exc)
    except Exception:  # pylint: disable=broad-except
        text = ""
    return text or "NVML error %s" % getattr(exc, "value", "?")


def _unavailable(pynvml, exc, gpu_index=None, gpu_count=None):
    return NvmlUnavailable(error_name(pynvml, exc), error_text(exc), gpu_index, gpu_count)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _text(value):
    """A string from NVML as valid one-line text: odd bytes and control characters as backslash escapes."""
    if value is None:
        return None
    value = valid_text(value)
    return _CONTROL.sub(lambda match: "\\x%02x" % ord(match.group()) if ord(match.group()) < 0x100
                        else "\\u%04x" % ord(match.group()), value)


def _query_text(fn, *args):
    """The text FN returns; pynvml decodes bytes as strict UTF-8, so a name with odd bytes is read from the error."""
    try:
        value = fn(*args)
    except UnicodeDecodeError as exc:
        value = bytes(exc.object)
    return _text(value)


def _unexpected(exc, gpu_index=None, gpu_count=None):
    return NvmlUnavailable("NVML_UNEXPECTED", "%s: %s" % (type(exc).__name__, _text(str(exc))), gpu_index, gpu_count)


def device_count(pynvml):
    """nvmlDeviceGetCount() as an int from 0 to MAX_GPUS; NvmlUnavailable for an NVML error, and NVML_UNEXPECTED
    naming the count for one no host can have (never walked GPU by GPU)."""
    try:
        value = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        raise _unavailable(pynvml, exc)
    if isinstance(value, bool) or not isinstance(value, int):
        raise NvmlUnavailable("NVML_UNEXPECTED", "NVML answered the GPU count with %s, not a whole number" % _text(
            repr(value)[:80]))
    if not 0 <= value <= MAX_GPUS:
        raise NvmlUnavailable("NVML_UNEXPECTED", "NVML reports %d GPUs on this host, which no host has (at most %d "
                                                 "are believed; the NVIDIA driver manages at most 32): the answer is "
                                                 "broken, so no GPU was read" % (value, MAX_GPUS))
    return value


def _error_value(pynvml, name, default):
    return getattr(pynvml, name, default)


def format_cuda_version(value):
    """13000 -> '13.0', 12080 -> '12.8' (NVML's CUDA driver version encoding)."""
    if value is None:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


# ---------------------------------------------------------------- reading


class NvmlSession(object):
    """Context manager: nvmlInit on entry, nvmlShutdown on exit.

    Raises NvmlUnavailable on entry when pynvml is missing, the library cannot
    be loaded or nvmlInit fails.  ``read()`` returns a snapshot.
    """

    def __init__(self, pynvml=None):
        self.pynvml = pynvml
        self._open = False

    def __enter__(self):
        if self.pynvml is None:
            self.pynvml = import_pynvml()
        try:
            self.pynvml.nvmlInit()
        except self.pynvml.NVMLError as exc:
            raise _unavailable(self.pynvml, exc)
        self._open = True
        return self

    def __exit__(self, exc_type, exc_value, tb):
        if self._open:
            self._open = False
            try:
                self.pynvml.nvmlShutdown()
            except self.pynvml.NVMLError:
                pass
        return False

    def read(self):
        return read_snapshot(self.pynvml)


def _memory(pynvml, handle):
    """(total, used, free, reserved or None, 'v2' or 'v1') in MiB."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        fallback = (
            _error_value(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
            _error_value(pynvml, "NVML_ERROR_NOT_SUPPORTED", 3),
            _error_value(pynvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
        )
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return (mem.total // MIB, mem.used // MIB, mem.free // MIB, mem.reserved // MIB, "v2")
        except TypeError:
            pass  # a pynvml without the version argument
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) not in fallback:
                raise
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return (mem.total // MIB, mem.used // MIB, mem.free // MIB, None, "v1")


def _too_many_processes(count):
    return ValueError("NVML lists %d compute processes on one GPU, more than any GPU runs (at most %d are believed): "
                      "the answer is broken" % (count, MAX_PROCESSES))


def _process_count(pynvml, fname, handle):
    """The count of FNAME's size query (its first call, as pynvml makes it), or None where it cannot be asked apart.

    pynvml allocates twice that count of entries before it reads the list, so a broken count is refused here, before
    pynvml is called (its _nvmlGetFunctionPointer is the library's own symbol lookup; a pynvml without it is not
    asked apart)."""
    lookup = getattr(pynvml, "_nvmlGetFunctionPointer", None)
    if lookup is None:
        return None
    try:
        fn = lookup(fname)
    except pynvml.NVMLError:
        return None  # (the pynvml call says the same, with its own error)
    count = ctypes.c_uint(0)
    fn(handle, ctypes.pointer(count), None)
    return count.value


def _compute_processes(pynvml, handle):
    """List of (pid, used bytes or None), or None when the driver cannot list them; ValueError for a count no GPU
    has (MAX_PROCESSES)."""
    not_found = _error_value(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
    not_supported = _error_value(pynvml, "NVML_ERROR_NOT_SUPPORTED", 3)
    for fname in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
        fn = getattr(pynvml, fname, None)
        if fn is None:
            continue
        try:
            count = _process_count(pynvml, fname, handle)
            if count is not None and count > MAX_PROCESSES:
                raise _too_many_processes(count)
            procs = fn(handle)
        except pynvml.NVMLError as exc:
            value = getattr(exc, "value", None)
            if value == not_found:
                continue
            if value == not_supported:
                return None
            raise
        if len(procs) > MAX_PROCESSES:
            raise _too_many_processes(len(procs))
        return [(int(p.pid), getattr(p, "usedGpuMemory", None)) for p in procs]
    return None


def _process_name(pynvml, pid, cache):
    if pid not in cache:
        try:
            cache[pid] = _query_text(pynvml.nvmlSystemGetProcessName, pid) or None
        except pynvml.NVMLError:
            cache[pid] = None
    return cache[pid]


def _empty_gpu(index):
    return {
        "index": index,
        "name": None,
        "uuid": None,
        "pci_bus_id": None,
        "compute_capability": None,
        "compute_capability_major": None,
        "compute_capability_minor": None,
        "memory_total_mib": None,
        "memory_used_mib": None,
        "memory_free_mib": None,
        "memory_reserved_mib": None,
        "memory_source": None,
        "processes": None,
        "error": None,
    }


def _read_gpu(pynvml, index, names):
    gpu = _empty_gpu(index)
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    gpu["name"] = _query_text(pynvml.nvmlDeviceGetName, handle)
    gpu["uuid"] = _query_text(pynvml.nvmlDeviceGetUUID, handle)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    gpu["pci_bus_id"] = _text(getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None))
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    gpu["compute_capability_major"] = int(major)
    gpu["compute_capability_minor"] = int(minor)
    gpu["compute_capability"] = "%d.%d" % (major, minor)
    total, used, free, reserved, source = _memory(pynvml, handle)
    gpu.update(
        memory_total_mib=total,
        memory_used_mib=used,
        memory_free_mib=free,
        memory_reserved_mib=reserved,
        memory_source=source,
    )
    procs = _compute_processes(pynvml, handle)
    if procs is not None:
        gpu["processes"] = [
            {
                "pid": pid,
                "used_mib": None if used_bytes is None else int(used_bytes) // MIB,
                "name": _process_name(pynvml, pid, names),
            }
            for pid, used_bytes in sorted(procs, key=lambda p: p[0])
        ]
    return gpu


def read_snapshot(pynvml):
    """Read the host once (NVML must be initialised).

    Returns a dict: driver_version, cuda_driver_version (int, e.g. 13000),
    cuda_version ('13.0'), nvml_version, gpu_count, gpus (one dict per GPU,
    see _empty_gpu for the keys) and errors (one NvmlUnavailable per GPU that
    could not be read; that GPU's dict has ``error`` set).  Raises
    NvmlUnavailable when the host-wide queries fail.
    """
    try:
        driver = _query_text(pynvml.nvmlSystemGetDriverVersion)
        count = device_count(pynvml)
    except pynvml.NVMLError as exc:
        raise _unavailable(pynvml, exc)
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise _unexpected(exc)
    cuda = None
    for fname in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        fn = getattr(pynvml, fname, None)
        if fn is None:
            continue
        try:
            cuda = int(fn())
            break
        except (pynvml.NVMLError, TypeError, ValueError, OverflowError):
            continue
    try:
        nvml_version = _query_text(pynvml.nvmlSystemGetNVMLVersion)
    except (pynvml.NVMLError, AttributeError):
        nvml_version = None
    gpus = []
    errors = []
    names = {}
    for index in range(count):
        try:
            gpus.append(_read_gpu(pynvml, index, names))
        except (pynvml.NVMLError, TypeError, ValueError, OverflowError, AttributeError, MemoryError) as exc:
            if isinstance(exc, pynvml.NVMLError):
                err = _unavailable(pynvml, exc, index, count)
            else:
                err = _unexpected(exc, index, count)
            gpu = _empty_gpu(index)
            gpu["error"] = {"name": err.name, "text": err.text}
            gpus.append(gpu)
            errors.append(err)
    return {
        "driver_version": driver,
        "cuda_driver_version": cuda,
        "cuda_version": format_cuda_version(cuda),
        "nvml_version": nvml_version,
        "gpu_count": count,
        "gpus": gpus,
        "errors": errors,
    }


# ------------------------------------------------------------ expectations


def parse_compute_capability(value):
    """'12.0' -> (12, 0); '12', '12.x' -> (12, None).  ValueError with a clear message otherwise."""
    text = str(value).strip() if value is not None else ""
    match = _CC_RE.match(text)
    if not match:
        raise ValueError(
            "expect.compute_capability must be MAJOR.MINOR such as \"12.0\" (RTX PRO 6000 Blackwell) or \"9.0\" "
            "(H100/H200), or MAJOR.x such as \"12.x\" for any minor version; got %r" % (value,)
        )
    minor = match.group(2)
    return int(match.group(1)), (int(minor) if minor and minor.isdigit() else None)


def _is_set(expect, key):
    if not expect:
        return False
    value = expect.get(key)
    if key == "no_processes":
        return bool(value)  # false means "do not check"
    return value is not None


def expectation_given(expect):
    """True when EXPECT asks for anything at all."""
    return any(_is_set(expect, key) for key in EXPECT_KEYS)


def validate_expect(expect):
    """Return a list of sentences, one per problem of EXPECT (empty when valid)."""
    problems = []
    if not expect:
        return problems
    unknown = sorted(set(expect) - set(EXPECT_KEYS))
    if unknown:
        problems.append("expect has unknown keys %s; known keys: %s" % (", ".join(unknown), ", ".join(EXPECT_KEYS)))
    if expect.get("compute_capability") is not None:
        try:
            parse_compute_capability(expect["compute_capability"])
        except ValueError as exc:
            problems.append(str(exc))
    if expect.get("name") is not None:
        try:
            re.compile(expect["name"])
        except (re.error, TypeError) as exc:
            problems.append("expect.name must be a regular expression such as 'RTX PRO 6000'; %r is not: %s" % (
                expect["name"], exc))
    for key in ("count", "min_total_mib", "min_used_mib", "max_used_mib"):
        value = expect.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append("expect.%s must be a whole number of 0 or more; got %r" % (key, value))
    if expect.get("min_used_fraction") is not None:
        problems.append(serving.utilization_problem("expect.min_used_fraction", expect["min_used_fraction"]))
    if expect.get("min_used_tolerance") is not None:
        problems.append(serving.tolerance_problem("expect.min_used_tolerance", expect["min_used_tolerance"]))
        if expect.get("min_used_fraction") is None:
            problems.append("expect.min_used_tolerance applies to expect.min_used_fraction, which is not given")
    problems[:] = [problem for problem in problems if problem]
    low, high = expect.get("min_used_mib"), expect.get("max_used_mib")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        problems.append(
            "expect.min_used_mib (%d) is larger than expect.max_used_mib (%d): no GPU can satisfy both" % (low, high)
        )
    gpus = expect.get("gpus")
    if gpus is not None:
        if not isinstance(gpus, (list, tuple)):
            problems.append("expect.gpus must be a list of GPU indices (0, 1, ...) or UUIDs (GPU-...); got %r" % (gpus,))
        else:
            for item in gpus:
                if isinstance(item, bool) or not isinstance(item, (int, str)) or (isinstance(item, int) and item < 0):
                    problems.append("expect.gpus entries must be GPU indices (0, 1, ...) or UUIDs (GPU-...); "
                                    "got %r" % (item,))
                elif isinstance(item, str) and not item.strip():
                    problems.append("expect.gpus has an empty entry")
    return problems


def _resolve(gpus, selectors):
    """Indices selected by SELECTORS (indices or UUIDs) and the selectors that match nothing."""
    if selectors is None:
        return [g["index"] for g in gpus], []
    by_uuid = dict(((g.get("uuid") or "").lower(), g["index"]) for g in gpus if g.get("uuid"))
    indices = set(g["index"] for g in gpus)
    chosen = []
    missing = []
    for sel in selectors:
        idx = None
        if isinstance(sel, int):
            idx = sel if sel in indices else None
        else:
            text = sel.strip()
            if text.isdigit():
                idx = int(text) if int(text) in indices else None
            else:
                idx = by_uuid.get(text.lower())
        if idx is None:
            missing.append(sel)
        elif idx not in chosen:
            chosen.append(idx)
    return sorted(chosen), missing


def _gpu_label(gpu):
    parts = [p for p in (gpu.get("uuid"), gpu.get("pci_bus_id")) if p]
    return "GPU %d (%s)" % (gpu["index"], ", ".join(parts)) if parts else "GPU %d" % gpu["index"]


def _describe_processes(procs):
    items = []
    for proc in procs:
        used = "? MiB" if proc.get("used_mib") is None else "%d MiB" % proc["used_mib"]
        items.append("pid %d %s %s" % (proc["pid"], proc.get("name") or "(name not readable)", used))
    return ", ".join(items)


def _check_gpu(gpu, expect, cc_expected, name_re):
    problems = []
    if name_re is not None and not name_re.search(gpu.get("name") or ""):
        problems.append("name expected to match %r, found %r" % (expect["name"], gpu.get("name")))
    if cc_expected is not None:
        major, minor = cc_expected
        want = "%d.%s" % (major, "x" if minor is None else minor)
        have_major, have_minor = gpu.get("compute_capability_major"), gpu.get("compute_capability_minor")
        if have_major != major or (minor is not None and have_minor != minor):
            problems.append("compute capability expected %s, found %s" % (want, gpu.get("compute_capability")))
    total, used = gpu.get("memory_total_mib"), gpu.get("memory_used_mib")
    if expect.get("min_total_mib") is not None and (total is None or total < expect["min_total_mib"]):
        problems.append("memory total expected at least %d MiB, found %s MiB" % (expect["min_total_mib"], total))
    if expect.get("min_used_mib") is not None and (used is None or used < expect["min_used_mib"]):
        problems.append("memory used expected at least %d MiB, found %s MiB" % (expect["min_used_mib"], used))
    if expect.get("min_used_fraction") is not None:
        fraction, tolerance = expect["min_used_fraction"], expect.get("min_used_tolerance") or 0.0
        if total is None:
            problems.append("memory used expected at least %s x the GPU's total, but NVML gives no total" % fraction)
        elif used is None or used < serving.loaded_floor_mib(total, fraction, tolerance):
            problems.append("memory used expected at least %s, found %s MiB" % (
                serving.describe_loaded_floor(total, fraction, tolerance),
                "?" if used is None else "{0:,}".format(used)))
    if expect.get("max_used_mib") is not None and (used is None or used > expect["max_used_mib"]):
        held = (" with no compute process listed (not given back yet after a process exited, or held by a process"
                " NVML cannot list here)") if (
            used is not None and gpu.get("processes") == []) else ""
        problems.append("memory used expected at most %d MiB, found %s MiB%s" % (expect["max_used_mib"], used, held))
    if expect.get("no_processes"):
        procs = gpu.get("processes")
        if procs is None:
            problems.append("compute processes expected none, but the driver cannot list them")
        elif procs:
            problems.append("compute processes expected none, found %d: %s" % (len(procs), _describe_processes(procs)))
    return problems


def check_expectations(snapshot, expect):
    """Mismatch lines of SNAPSHOT against EXPECT: the GPU count first, then one line per GPU.

    EXPECT must have passed validate_expect.  An empty list means every
    expectation holds.
    """
    if not expectation_given(expect):
        return []
    lines = []
    gpus = snapshot.get("gpus") or []
    if expect.get("count") is not None and snapshot.get("gpu_count") != expect["count"]:
        lines.append("GPU count: expected %d, found %s" % (expect["count"], snapshot.get("gpu_count")))
    chosen, missing = _resolve(gpus, expect.get("gpus"))
    for sel in missing:
        lines.append("GPU %s (from expect.gpus): expected to be present, not found among the %d GPUs of the host"
                     % (sel, len(gpus)))
    cc_expected = None
    if expect.get("compute_capability") is not None:
        cc_expected = parse_compute_capability(expect["compute_capability"])
    name_re = re.compile(expect["name"]) if expect.get("name") is not None else None
    by_index = dict((g["index"], g) for g in gpus)
    for idx in chosen:
        gpu = by_index[idx]
        problems = _check_gpu(gpu, expect, cc_expected, name_re)
        if problems:
            lines.append("%s: %s" % (_gpu_label(gpu), "; ".join(problems)))
    return lines


# ---------------------------------------------------------------- results


def summarize(snapshot):
    """Count, names, compute capabilities, sm120 (any GPU of major 12) and memory sums."""
    gpus = [g for g in snapshot.get("gpus") or [] if not g.get("error")]
    ccs = sorted(set(g["compute_capability"] for g in gpus if g.get("compute_capability")),
                 key=lambda cc: tuple(int(x) for x in cc.split(".")))
    pids = set()
    for gpu in gpus:
        for proc in gpu.get("processes") or []:
            pids.add(proc["pid"])
    return {
        "count": snapshot.get("gpu_count") or 0,
        "names": sorted(set(g["name"] for g in gpus if g.get("name"))),
        "compute_capabilities": ccs,
        "sm120": any(g.get("compute_capability_major") == 12 for g in gpus),
        "memory_total_mib": sum(g.get("memory_total_mib") or 0 for g in gpus),
        "memory_used_mib": sum(g.get("memory_used_mib") or 0 for g in gpus),
        "memory_free_mib": sum(g.get("memory_free_mib") or 0 for g in gpus),
        "process_pids": sorted(pids),
    }


def gpu_facts(result):
    """The value of the ``gpufleet_gpus`` fact for a result of :func:`collect`."""
    summary = result.get("summary") or summarize(result)
    return {
        "available": result.get("nvml_available", False),
        "driver_version": result.get("driver_version"),
        "cuda_driver_version": result.get("cuda_driver_version"),
        "cuda_version": result.get("cuda_version"),
        "count": summary["count"],
        "names": summary["names"],
        "compute_capabilities": summary["compute_capabilities"],
        "sm120": summary["sm120"],
        "gpus": result.get("gpus") or [],
    }


def _empty_result():
    return {
        "changed": False,
        "nvml_available": False,
        "nvml_error": None,
        "driver_version": None,
        "cuda_driver_version": None,
        "cuda_version": None,
        "nvml_version": None,
        "gpu_count": 0,
        "gpus": [],
        "summary": summarize({}),
        "expectation_met": False,
        "mismatches": [],
        "waited": 0.0,
        "attempts": 0,
    }


def unavailable_result(exc):
    """The result of :func:`collect` for an NvmlUnavailable raised before NVML could be opened."""
    result = _empty_result()
    result["nvml_error"] = exc.to_dict()
    return result


def collect(expect=None, timeout=0, interval=2.0, pynvml=None, clock=time.monotonic, sleep=time.sleep):
    """Read the GPUs and check EXPECT, polling every INTERVAL s for up to TIMEOUT s.

    Returns the result dict (see _empty_result for the keys).  Polling stops
    at the first snapshot that meets the expectation, and at once when NVML
    or a GPU cannot be queried (waiting does not bring a lost GPU back).
    ``expectation_met`` is True only when NVML answered for every GPU and no
    mismatch is left; ``waited`` is the seconds spent, ``attempts`` the
    number of snapshots.
    """
    result = _empty_result()
    start = clock()
    deadline = start + max(0.0, float(timeout or 0))
    try:
        with NvmlSession(pynvml) as session:
            while True:
                result["attempts"] += 1
                snap = session.read()
                for key in ("driver_version", "cuda_driver_version", "cuda_version", "nvml_version", "gpu_count",
                            "gpus"):
                    result[key] = snap[key]
                result["summary"] = summarize(snap)
                if snap["errors"]:
                    result["nvml_available"] = False
                    result["nvml_error"] = snap["errors"][0].to_dict()
                    result["mismatches"] = []
                    break
                result["nvml_available"] = True
                result["mismatches"] = check_expectations(snap, expect)
                if not result["mismatches"]:
                    break
                remaining = deadline - clock()
                if remaining <= 0:
                    break
                sleep(min(max(float(interval), 0.01), remaining))
    except NvmlUnavailable as exc:
        result["nvml_available"] = False
        result["nvml_error"] = exc.to_dict()
    result["expectation_met"] = bool(result["nvml_available"] and not result["mismatches"])
    result["waited"] = round(clock() - start, 2)
    return result


def call_bounded(work, limit, name="nvml-read"):
    """WORK() in a daemon thread, waited for LIMIT seconds at most.

    Returns ("result", its value), ("error", the exception it raised) or
    ("timeout", None).  NVML calls cannot be interrupted: on a timeout the
    thread is left behind (it ends with the process).
    """
    box = {}

    def run():
        try:
            box["result"] = work()
        except Exception as exc:  # pylint: disable=broad-except
            box["error"] = exc

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(limit)
    if "result" in box:
        return "result", box["result"]
    if "error" in box:
        return "error", box["error"]
    return "timeout", None


def collect_bounded(expect=None, timeout=0, interval=2.0, call_timeout=60, pynvml=None, clock=time.monotonic,
                    sleep=time.sleep):
    """:func:`collect` in a daemon thread, given TIMEOUT + CALL_TIMEOUT seconds in all.

    NVML calls cannot be interrupted; when they do not return in time (a hung
    driver), the thread is left behind (it ends with the process) and the
    result says NVML_TIMEOUT. Any exception of the reading becomes an
    NVML_UNEXPECTED error in the result, never a traceback.
    """
    limit = max(0.0, float(timeout or 0)) + float(call_timeout)
    started = time.monotonic()
    status, value = call_bounded(
        lambda: collect(expect=expect, timeout=timeout, interval=interval, pynvml=pynvml, clock=clock, sleep=sleep),
        limit)
    if status == "result":
        return value
    result = _empty_result()
    if status == "error":
        result["nvml_error"] = _unexpected(value).to_dict()
    else:
        err = NvmlUnavailable("NVML_TIMEOUT", "NVML did not answer within %s s (call_timeout %s s after timeout %s s)"
                              % (round(limit, 1), call_timeout, timeout or 0))
        result["nvml_error"] = err.to_dict()
    result["waited"] = round(time.monotonic() - started, 2)
    return result


# "GPU 3 (GPU-..., 00000000:5D:00.0): ..." or "GPU 3: ..." (_gpu_label), not "GPU 9 (from expect.gpus): ..."
_GPU_LINE = re.compile(r"GPU (\d+)(?: \((?!from expect)[^()]*\))?: (.*)\Z", re.S)


def _ranges(indices):
    """Sorted 0,1,2,3,5 -> '0-3, 5'."""
    out, i = [], 0
    while i < len(indices):
        j = i
        while j + 1 < len(indices) and indices[j + 1] == indices[j] + 1:
            j += 1
        out.append(str(indices[i]) if i == j else "%d-%d" % (indices[i], indices[j]))
        i = j + 1
    return ", ".join(out)


def compact_mismatches(lines):
    """The mismatch lines with GPUs of the same problems on one line ("GPUs 0-7: ...").

    A problem only one GPU has keeps its line, UUID and PCI bus included;
    other lines (the GPU count, a GPU of expect.gpus not found) stay as they are.
    """
    groups, order = {}, []
    for line in lines:
        match = _GPU_LINE.match(line)
        key = match.group(2) if match else None
        if key is None or key not in groups:
            order.append((key, line))
            if key is not None:
                groups[key] = []
        if key is not None:
            groups[key].append((int(match.group(1)), line))
    out = []
    for key, line in order:
        if key is None or len(groups[key]) == 1:
            out.append(line if key is None else groups[key][0][1])
        else:
            out.append("GPUs %s: %s" % (_ranges(sorted(set(index for index, dummy in groups[key]))), key))
    return out


def failure_message(result, timeout=0):
    """The one message for a failed result: the NVML fault, or the mismatch lines (GPUs alike on one line)."""
    if not result.get("nvml_available"):
        err = result.get("nvml_error") or {}
        return err.get("message") or "NVML is not usable on this host."
    lines = compact_mismatches(result.get("mismatches") or [])
    if timeout:
        head = "GPU expectation not met after waiting %.1f s (timeout %s s, %d checks):" % (
            result.get("waited", 0.0), timeout, result.get("attempts", 0))
    else:
        head = "GPU expectation not met:"
    return "\n".join([head] + lines)
