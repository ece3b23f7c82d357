# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake NVML library, driven by the real pynvml (nvidia-ml-py).

Every probe runs in a fresh Python process with LD_LIBRARY_PATH at the built
libnvidia-ml.so.1 and FAKE_NVML_STATE at a temporary state file, so pynvml
loads the fake library exactly as it would load the driver's.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import load_source

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
FAKENVML = os.path.join(REPO, "tests", "sim", "fakenvml")

MIB = 1024 * 1024
DEFAULT_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
DEFAULT_BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]

pytest.importorskip("pynvml")


state = load_source("fakenvml_state", "tests", "sim", "fakenvml", "state.py")
build = load_source("fakenvml_build", "tests", "sim", "fakenvml", "build.py")


# lib_dir and state_file: fixtures of tests/unit/conftest.py


PRELUDE = """
import ctypes, json, os, sys
sys.path.insert(0, %(fakenvml)r)
import state
import pynvml as n
STATE = os.environ["FAKE_NVML_STATE"]
out = {}

def err(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except n.NVMLError as exc:
        return [type(exc).__name__, exc.value, str(exc)]
    return None

def h(i):
    return n.nvmlDeviceGetHandleByIndex(i)

def text(value):
    return value.decode() if isinstance(value, bytes) else value

def mem(i):
    v1 = n.nvmlDeviceGetMemoryInfo(h(i))
    v2 = n.nvmlDeviceGetMemoryInfo(h(i), version=n.nvmlMemory_v2)
    return {"v1": [v1.total, v1.used, v1.free], "v2": [v2.total, v2.reserved, v2.used, v2.free]}

def procs(i):
    return [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId]
            for p in n.nvmlDeviceGetComputeRunningProcesses(h(i))]
"""


def probe(lib_dir, state_file, body):
    """Run BODY after PRELUDE in a fresh interpreter; return its ``out`` dict."""
    code = PRELUDE % {"fakenvml": FAKENVML} + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir, FAKE_NVML_STATE=state_file)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def set_state(state_file, **pairs):
    state.update_state(lambda d: d.update(dict((k.replace("__", "."), str(v)) for k, v in pairs.items())), state_file)


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# ------------------------------------------------------------------ defaults


def test_defaults_without_state_file(lib_dir, state_file):
    assert not os.path.exists(state_file)
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["driver"] = n.nvmlSystemGetDriverVersion()
        out["cuda"] = [n.nvmlSystemGetCudaDriverVersion(), n.nvmlSystemGetCudaDriverVersion_v2()]
        out["nvml"] = n.nvmlSystemGetNVMLVersion()
        out["count"] = n.nvmlDeviceGetCount()
        out["gpus"] = []
        for i in range(out["count"]):
            pci = n.nvmlDeviceGetPciInfo(h(i))
            uuid = n.nvmlDeviceGetUUID(h(i))
            out["gpus"].append({
                "name": n.nvmlDeviceGetName(h(i)),
                "uuid": uuid,
                "bus_id": text(pci.busId),
                "bus_id_legacy": text(pci.busIdLegacy),
                "bus": pci.bus,
                "cc": list(n.nvmlDeviceGetCudaComputeCapability(h(i))),
                "mem": mem(i),
                "procs": procs(i),
                "index": n.nvmlDeviceGetIndex(h(i)),
                "by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(uuid)),
                "by_pci": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(pci.busId)),
            })
        out["hostname"] = __import__("socket").gethostname()
        n.nvmlShutdown()
    """)
    assert out["driver"] == "580.95.05"
    assert out["cuda"] == [13000, 13000]
    assert out["nvml"] == "13.580.95.05"
    assert out["count"] == 8
    total = 97887 * MIB
    for i, gpu in enumerate(out["gpus"]):
        assert gpu["name"] == DEFAULT_NAME
        assert gpu["cc"] == [12, 0]
        assert gpu["mem"] == {"v1": [total, 0, total], "v2": [total, 0, 0, total]}
        assert gpu["procs"] == []
        assert gpu["uuid"] == state.default_uuid(out["hostname"], i)
        assert gpu["bus_id"] == "00000000:%s:00.0" % DEFAULT_BUSES[i]
        assert gpu["bus_id_legacy"] == "0000:%s:00.0" % DEFAULT_BUSES[i]
        assert gpu["bus"] == int(DEFAULT_BUSES[i], 16)
        assert gpu["index"] == gpu["by_uuid"] == gpu["by_pci"] == i
    uuids = [g["uuid"] for g in out["gpus"]]
    assert len(set(uuids)) == 8
    assert all(len(u) == 40 and u.startswith("GPU-") for u in uuids)


def test_uuids_differ_per_host(lib_dir, tmp_path):
    seen = {}
    for host in ("gpu-node-01", "gpu-node-02"):
        path = str(tmp_path / host / "state")
        set_state(path, hostname=host)
        out = probe(lib_dir, path, """
            n.nvmlInit()
            out["uuids"] = [n.nvmlDeviceGetUUID(h(i)) for i in range(n.nvmlDeviceGetCount())]
        """)
        assert out["uuids"] == [state.default_uuid(host, i) for i in range(8)]
        seen[host] = set(out["uuids"])
    assert not seen["gpu-node-01"] & seen["gpu-node-02"]


def test_per_gpu_keys_override_defaults(lib_dir, state_file):
    set_state(
        state_file,
        driver_version="570.86.15",
        cuda_driver_version="12080",
        default__total_mib="81559",
        gpu__2__name="NVIDIA H200",
        gpu__2__cc="9.0",
        gpu__2__total_mib="143771",
        gpu__2__uuid="GPU-00000000-1111-2222-3333-444444444444",
        gpu__2__pci_bus_id="0000:c1:00.0",
    )
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["driver"] = n.nvmlSystemGetDriverVersion()
        out["cuda"] = n.nvmlSystemGetCudaDriverVersion_v2()
        out["nvml"] = n.nvmlSystemGetNVMLVersion()
        out["names"] = [n.nvmlDeviceGetName(h(i)) for i in range(8)]
        out["cc"] = [list(n.nvmlDeviceGetCudaComputeCapability(h(i))) for i in range(8)]
        out["total"] = [mem(i)["v2"][0] // (1024 * 1024) for i in range(8)]
        out["uuid2"] = n.nvmlDeviceGetUUID(h(2))
        out["bus2"] = text(n.nvmlDeviceGetPciInfo(h(2)).busId)
        out["by_uuid"] = n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID("GPU-00000000-1111-2222-3333-444444444444"))
        out["unknown_uuid"] = err(n.nvmlDeviceGetHandleByUUID, "GPU-nope")
    """)
    assert out["driver"] == "570.86.15"
    assert out["cuda"] == 12080
    assert out["nvml"] == "12.570.86.15"
    assert out["names"] == [DEFAULT_NAME] * 2 + ["NVIDIA H200"] + [DEFAULT_NAME] * 5
    assert out["cc"] == [[12, 0]] * 2 + [[9, 0]] + [[12, 0]] * 5
    assert out["total"] == [81559] * 2 + [143771] + [81559] * 5
    assert out["uuid2"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert out["bus2"] == "00000000:C1:00.0"
    assert out["by_uuid"] == 2
    assert out["unknown_uuid"][:2] == ["NVMLError_NotFound", 6]


def test_seven_gpus(lib_dir, state_file):
    set_state(state_file, gpu_count=7)
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["count"] = n.nvmlDeviceGetCount()
        out["last"] = n.nvmlDeviceGetName(h(6))
        out["eighth"] = err(n.nvmlDeviceGetHandleByIndex, 7)
    """)
    assert out["count"] == 7
    assert out["last"] == DEFAULT_NAME
    assert out["eighth"][:2] == ["NVMLError_InvalidArgument", 2]


def test_gpu_that_disappears_after_its_handle_was_taken_is_lost(lib_dir, state_file):
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        handle = h(7)
        out["before"] = n.nvmlDeviceGetName(handle)
        state.update_state(lambda d: d.update({"gpu_count": "7"}), STATE)
        out["after"] = err(n.nvmlDeviceGetName, handle)
    """)
    assert out["before"] == DEFAULT_NAME
    assert out["after"][:3] == ["NVMLError_GpuIsLost", 15, "GPU is lost"]


# ----------------------------------------------------------------- processes


def test_processes_appear_and_disappear_with_claim_and_release(lib_dir, state_file):
    # one process: the state changes between calls and every call sees it
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        pid = os.getpid()
        out["pid"] = pid
        out["idle"] = [procs(0), mem(0)]
        state.claim(pid, 90000, [0, 1], STATE)
        out["loaded"] = [procs(0), procs(1), procs(2), mem(0), mem(2)]
        out["name"] = n.nvmlSystemGetProcessName(pid)
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            out["argv0"] = f.read().split(b"\\0")[0].decode()
        state.release(pid, STATE)
        out["released"] = [procs(0), mem(0)]
        out["v2procs"] = [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses_v2(h(0))]
    """)
    total = 97887 * MIB
    pid = out["pid"]
    assert out["idle"] == [[], {"v1": [total, 0, total], "v2": [total, 0, 0, total]}]
    procs0, procs1, procs2, mem0, mem2 = out["loaded"]
    assert procs0 == procs1 == [[pid, 90000 * MIB, 0xFFFFFFFF, 0xFFFFFFFF]]
    assert procs2 == []
    assert mem0 == {"v1": [total, 90000 * MIB, 7887 * MIB], "v2": [total, 0, 90000 * MIB, 7887 * MIB]}
    assert mem2["v2"][2] == 0
    assert out["name"] == out["argv0"] and out["name"]
    assert out["released"] == [[], {"v1": [total, 0, total], "v2": [total, 0, 0, total]}]
    assert out["v2procs"] == []


def test_dead_pid_is_ignored(lib_dir, state_file):
    gone = dead_pid()
    state.claim(gone, 50000, [0], state_file)
    state.claim(os.getpid(), 1000, [0], state_file)
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["procs"] = procs(0)
        out["used"] = mem(0)["v2"][2]
        out["name_of_dead"] = err(n.nvmlSystemGetProcessName, %d)
    """ % gone)
    assert [p[:2] for p in out["procs"]] == [[os.getpid(), 1000 * MIB]]
    assert out["used"] == 1000 * MIB
    assert out["name_of_dead"][:2] == ["NVMLError_NotFound", 6]


def test_zombie_process_is_ignored(lib_dir, state_file):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while True:  # wait until the child has exited but is not reaped yet
            with open("/proc/%d/stat" % child.pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            assert time.monotonic() < deadline, "child did not exit"
            time.sleep(0.05)
        state.claim(child.pid, 40000, None, state_file)
        out = probe(lib_dir, state_file, """
            n.nvmlInit()
            out["procs"] = [procs(i) for i in range(8)]
            out["used"] = [mem(i)["v2"][2] for i in range(8)]
        """)
    finally:
        child.wait()
    assert out["procs"] == [[]] * 8
    assert out["used"] == [0] * 8


def test_memory_held_by_the_driver_counts_until_its_time_with_no_process(lib_dir, state_file):
    # a teardown that takes time: the server is gone, the driver has not given its memory back yet
    state.hold(60000, 3, [1, 2], state_file)
    set_state(state_file, gpu__2__held_until=int(time.time()) - 1)  # this one has run out already
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["held"] = [[mem(i)["v2"][2], mem(i)["v1"][1], procs(i)] for i in range(3)]
        import time
        time.sleep(4.2)
        out["after"] = [mem(i)["v2"][2] for i in range(3)]
    """)
    assert out["held"] == [[0, 0, []], [60000 * MIB, 60000 * MIB, []], [0, 0, []]]
    assert out["after"] == [0, 0, 0]


def test_state_cli_hold_writes_the_time_it_ends(state_file):
    before = time.time()
    assert state.main(["--state", state_file, "hold", "--mib", "5000", "--seconds", "2.5", "--gpus", "0,3"]) == 0
    data = state.read_state(state_file)
    assert data["gpu.0.held_mib"] == data["gpu.3.held_mib"] == "5000"
    assert before + 2.5 <= int(data["gpu.3.held_until"]) <= time.time() + 3.5
    assert "gpu.1.held_mib" not in data
    for bad in (["--mib", "-1", "--seconds", "2"], ["--mib", "1", "--seconds", "nan"],
                ["--mib", "1", "--seconds", "2", "--gpus", "0,,1"], ["--mib", "1", "--seconds", "2", "--gpus", "64"]):
        with pytest.raises(SystemExit):
            state.main(["--state", state_file, "hold"] + bad)
    with pytest.raises(ValueError):
        state.hold(1, -1, None, state_file)


def test_held_until_out_of_range_is_held_forever_or_never(lib_dir, state_file):
    set_state(state_file, gpu__0__held_mib=70000, gpu__0__held_until="99999999999999999999",
              gpu__1__held_mib=70000, gpu__1__held_until=-5, gpu__2__held_mib="18446744073709551615",
              gpu__2__held_until="99999999999", gpu__2__base_used_mib=1)
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["used"] = [mem(i)["v2"][2] for i in range(3)]
    """)
    assert out["used"] == [70000 * MIB, 0, 97887 * MIB]  # (capped at the total, never wrapped round)


def test_v1_process_struct_and_unversioned_pci_info(lib_dir, state_file):
    state.claim(os.getpid(), 2048, [3], state_file)
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        lib = n.nvmlLib

        class ProcV1(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

        class PciV1(ctypes.Structure):
            _fields_ = [("busId", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                        ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint)]

        count = ctypes.c_uint(0)
        out["first"] = lib.nvmlDeviceGetComputeRunningProcesses(h(3), ctypes.byref(count), None)
        out["count"] = count.value
        arr = (ProcV1 * 4)()
        count = ctypes.c_uint(4)
        out["second"] = lib.nvmlDeviceGetComputeRunningProcesses(h(3), ctypes.byref(count), arr)
        out["procs"] = [[arr[i].pid, arr[i].usedGpuMemory] for i in range(count.value)]
        pci = PciV1()
        out["pci_rc"] = lib.nvmlDeviceGetPciInfo(h(3), ctypes.byref(pci))
        out["pci"] = [text(pci.busId), pci.bus, pci.pciDeviceId]
        lib.nvmlErrorString.restype = ctypes.c_char_p
        out["strings"] = [lib.nvmlErrorString(c).decode() for c in (0, 4, 9, 15, 25, 999, 12345)]
    """)
    assert out["first"] == 7 and out["count"] == 1  # NVML_ERROR_INSUFFICIENT_SIZE and the size needed
    assert out["second"] == 0
    assert out["procs"] == [[os.getpid(), 2048 * MIB]]
    assert out["pci_rc"] == 0
    assert out["pci"] == ["0000:5D:00.0", 0x5D, 0x2BB510DE]
    assert out["strings"] == [
        "Success", "Insufficient Permissions", "Driver Not Loaded", "GPU is lost", "Argument version mismatch",
        "Unknown Error", "Unknown Error",
    ]


# -------------------------------------------------------------------- memory


def test_memory_v1_counts_reserved_as_used_and_v2_apart(lib_dir, state_file):
    set_state(state_file, default__reserved_mib=512, default__base_used_mib=100, gpu__1__total_mib=4096)
    state.claim(os.getpid(), 1000, [0], state_file)
    state.claim(os.getpid(), 10000, [1], state_file)
    out = probe(lib_dir, state_file, "n.nvmlInit()\nout['m'] = [mem(0), mem(1), mem(2)]\n")
    total = 97887 * MIB
    assert out["m"][0]["v2"] == [total, 512 * MIB, 1100 * MIB, total - 1612 * MIB]
    assert out["m"][0]["v1"] == [total, 1612 * MIB, total - 1612 * MIB]
    # used is capped at what is left after the reservation
    assert out["m"][1]["v2"] == [4096 * MIB, 512 * MIB, 3584 * MIB, 0]
    assert out["m"][1]["v1"] == [4096 * MIB, 4096 * MIB, 0]
    assert out["m"][2]["v2"] == [total, 512 * MIB, 100 * MIB, total - 612 * MIB]


def test_memory_v2_checks_version_and_can_be_absent(lib_dir, state_file):
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["wrong_version"] = err(n.nvmlDeviceGetMemoryInfo, h(0), version=0x01000028)
        state.update_state(lambda d: d.update({"memory_v2": "0"}), STATE)
        out["absent"] = err(n.nvmlDeviceGetMemoryInfo, h(0), version=n.nvmlMemory_v2)
        out["v1"] = n.nvmlDeviceGetMemoryInfo(h(0)).total
    """)
    assert out["wrong_version"][:2] == ["NVMLError_ArgumentVersionMismatch", 25]
    assert out["absent"][:2] == ["NVMLError_FunctionNotFound", 13]
    assert out["v1"] == 97887 * MIB


# -------------------------------------------------------------------- faults


def test_lost_gpu(lib_dir, state_file):
    set_state(state_file, gpu__3__lost=1)
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["count"] = n.nvmlDeviceGetCount()
        lost = h(3)
        out["errors"] = [err(f, lost) for f in (n.nvmlDeviceGetName, n.nvmlDeviceGetUUID, n.nvmlDeviceGetPciInfo,
                                                n.nvmlDeviceGetMemoryInfo, n.nvmlDeviceGetCudaComputeCapability,
                                                n.nvmlDeviceGetComputeRunningProcesses)]
        out["neighbour"] = n.nvmlDeviceGetName(h(4))
    """)
    assert out["count"] == 8
    assert out["errors"] == [["NVMLError_GpuIsLost", 15, "GPU is lost"]] * 6
    assert out["neighbour"] == DEFAULT_NAME


def test_per_gpu_error_no_permission(lib_dir, state_file):
    set_state(state_file, gpu__1__error="NO_PERMISSION")
    out = probe(lib_dir, state_file, """
        n.nvmlInit()
        out["one"] = err(n.nvmlDeviceGetMemoryInfo, h(1))
        out["zero"] = n.nvmlDeviceGetName(h(0))
    """)
    assert out["one"][:3] == ["NVMLError_NoPermission", 4, "Insufficient Permissions"]
    assert out["zero"] == DEFAULT_NAME


@pytest.mark.parametrize(
    "name, cls, code, text",
    [
        ("DRIVER_NOT_LOADED", "NVMLError_DriverNotLoaded", 9, "Driver Not Loaded"),
        ("NO_PERMISSION", "NVMLError_NoPermission", 4, "Insufficient Permissions"),
        ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "NVMLError_LibRmVersionMismatch", 18,
         "RM has detected an NVML/RM version mismatch."),
    ],
)
def test_init_error(lib_dir, state_file, name, cls, code, text):
    set_state(state_file, init_error=name)
    out = probe(lib_dir, state_file, """
        out["init"] = err(n.nvmlInit)
        out["count"] = err(n.nvmlDeviceGetCount)
    """)
    assert out["init"] == [cls, code, text]
    assert out["count"][:2] == ["NVMLError_Uninitialized", 1]


def test_init_refcount_and_shutdown(lib_dir, state_file):
    out = probe(lib_dir, state_file, """
        out["shutdown_first"] = err(n.nvmlShutdown)
        out["count_first"] = err(n.nvmlDeviceGetCount)
        n.nvmlInit()
        n.nvmlInit()
        n.nvmlShutdown()
        out["after_one_shutdown"] = n.nvmlDeviceGetCount()
        n.nvmlShutdown()
        out["after_two"] = err(n.nvmlDeviceGetCount)
        out["v2"] = n.nvmlLib.nvmlInit_v2()
        out["v1"] = n.nvmlLib.nvmlInit()
    """)
    assert out["shutdown_first"][:2] == ["NVMLError_Uninitialized", 1]
    assert out["count_first"][:2] == ["NVMLError_Uninitialized", 1]
    assert out["after_one_shutdown"] == 8
    assert out["after_two"][:2] == ["NVMLError_Uninitialized", 1]
    assert out["v2"] == 0 and out["v1"] == 0


def test_library_missing_gives_library_not_found(tmp_path, state_file):
    empty = tmp_path / "empty"
    empty.mkdir()
    probe_code = "import ctypes\ntry:\n    ctypes.CDLL('libnvidia-ml.so.1')\nexcept OSError:\n    print('absent')\n"
    check = subprocess.run([sys.executable, "-c", probe_code], capture_output=True, text=True,
                           env=dict(os.environ, LD_LIBRARY_PATH=str(empty)), check=False)
    if "absent" not in check.stdout:
        pytest.skip("this machine has a real libnvidia-ml.so.1")
    out = probe(str(empty), state_file, "out['init'] = err(n.nvmlInit)\n")
    assert out["init"][:2] == ["NVMLError_LibraryNotFound", 12]


# --------------------------------------------------------------------- build


def test_build_only_when_source_is_newer(tmp_path):
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fakenvml.c"
    shutil.copy(os.path.join(FAKENVML, "fakenvml.c"), str(src))
    old = time.time() - 3600
    os.utime(str(src), (old, old))
    out = tmp_path / "lib"
    lib = build.build(str(out), source=str(src))
    assert lib == str(out / "libnvidia-ml.so.1")
    assert os.readlink(str(out / "libnvidia-ml.so")) == "libnvidia-ml.so.1"
    first = os.stat(lib).st_mtime_ns
    # up to date: the same file, not recompiled
    assert build.build(str(out), source=str(src)) == lib
    assert os.stat(lib).st_mtime_ns == first
    # source newer than the library: rebuilt
    newer = time.time() + 5
    os.utime(str(src), (newer, newer))
    build.build(str(out), source=str(src))
    assert os.stat(lib).st_mtime_ns != first
    # the soname is what the loader looks for
    readelf = shutil.which("readelf")
    if readelf:
        dyn = subprocess.run([readelf, "-d", lib], capture_output=True, text=True, check=True).stdout
        assert "[libnvidia-ml.so.1]" in dyn


def test_build_error_is_reported(tmp_path):
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "broken.c"
    src.write_text("this is not C\n")
    with pytest.raises(build.BuildError) as info:
        build.build(str(tmp_path / "lib"), source=str(src))
    assert "building" in str(info.value) and "broken.c" in str(info.value)
    assert not (tmp_path / "lib" / "libnvidia-ml.so.1").exists()
    assert [p for p in os.listdir(str(tmp_path / "lib")) if p.startswith(".")] == []


def test_build_cli_prints_the_library_path(tmp_path):
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler")
    proc = subprocess.run([sys.executable, os.path.join(FAKENVML, "build.py"), str(tmp_path / "out")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "out" / "libnvidia-ml.so.1")
    assert os.path.isfile(proc.stdout.strip())
