# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.nvml_vram_info against the fake NVML library.

The module runs as Ansible runs it on a host: its file executed by Python
with the module arguments as JSON, here with LD_LIBRARY_PATH at the fake
libnvidia-ml.so.1 and FAKE_NVML_STATE at a temporary state file, so the real
pynvml code path runs unchanged.  A few pure functions of the module_utils
are tested directly at the end.
"""

import json
import os
import subprocess
import sys

import pytest

from helpers import load_source, run_nvml_module

from ansible_collections.gpufleet.vllm.plugins.module_utils import nvml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "nvml_vram_info.py")
FAKENVML = os.path.join(REPO, "tests", "sim", "fakenvml")
DEFAULT_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


state = load_source("fakenvml_state_for_module", "tests", "sim", "fakenvml", "state.py")


# lib_dir and state_file: fixtures of tests/unit/conftest.py


def run_module(args, state_file, lib_dir, check_mode=False, pythonpath_extra=None, when_nvml_loaded=None):
    """Run the module file like Ansible does; return (exit code, result dict)."""
    return run_nvml_module(MODULE, args, state_file, lib_dir, check_mode=check_mode, pythonpath_extra=pythonpath_extra,
                           when_nvml_loaded=when_nvml_loaded)


def set_state(state_file, **pairs):
    state.update_state(lambda d: d.update(dict((k.replace("__", "."), str(v)) for k, v in pairs.items())), state_file)


def spawn_holder():
    """A live process that stands in for the vLLM server holding VRAM."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


# ------------------------------------------------------------- healthy host


def test_eight_healthy_gpus_meet_the_expectation(lib_dir, state_file):
    rc, res = run_module({"expect": {"count": 8, "name": "RTX PRO 6000", "compute_capability": "12.0",
                                     "min_total_mib": 97000, "max_used_mib": 1024, "no_processes": True}},
                         state_file, lib_dir)
    assert rc == 0, res
    assert not res.get("failed")
    assert res["changed"] is False
    assert res["nvml_available"] is True and res["nvml_error"] is None
    assert res["expectation_met"] is True and res["mismatches"] == []
    assert res["attempts"] == 1
    assert res["driver_version"] == "580.95.05"
    assert res["cuda_driver_version"] == 13000 and res["cuda_version"] == "13.0"
    assert res["gpu_count"] == 8
    assert [g["index"] for g in res["gpus"]] == list(range(8))
    for gpu in res["gpus"]:
        assert gpu["name"] == DEFAULT_NAME
        assert gpu["compute_capability"] == "12.0"
        assert (gpu["compute_capability_major"], gpu["compute_capability_minor"]) == (12, 0)
        assert (gpu["memory_total_mib"], gpu["memory_used_mib"], gpu["memory_free_mib"]) == (97887, 0, 97887)
        assert gpu["memory_source"] == "v2" and gpu["memory_reserved_mib"] == 0
        assert gpu["processes"] == [] and gpu["error"] is None
        assert gpu["uuid"].startswith("GPU-") and gpu["pci_bus_id"].startswith("00000000:")
    assert len(set(g["uuid"] for g in res["gpus"])) == 8
    assert res["summary"]["sm120"] is True
    assert res["summary"]["compute_capabilities"] == ["12.0"]
    assert res["summary"]["memory_total_mib"] == 8 * 97887
    assert "ansible_facts" not in res


def test_facts_only_with_register_facts(lib_dir, state_file):
    rc, res = run_module({"register_facts": True}, state_file, lib_dir)
    assert rc == 0
    facts = res["ansible_facts"]["gpufleet_gpus"]
    assert facts["available"] is True
    assert facts["count"] == 8 and len(facts["gpus"]) == 8
    assert facts["sm120"] is True and facts["compute_capabilities"] == ["12.0"]
    assert facts["names"] == [DEFAULT_NAME]
    assert facts["driver_version"] == "580.95.05"


def test_check_mode_reads_the_same(lib_dir, state_file):
    rc, res = run_module({"expect": {"count": 8}}, state_file, lib_dir, check_mode=True)
    assert rc == 0 and res["changed"] is False and res["gpu_count"] == 8 and res["expectation_met"] is True


def test_h200_host_is_not_sm120(lib_dir, state_file):
    set_state(state_file, gpu_count=1, default__name="NVIDIA H200", default__cc="9.0", default__total_mib=143771)
    rc, res = run_module({"expect": {"count": 1, "compute_capability": "9.0"}, "register_facts": True},
                         state_file, lib_dir)
    assert rc == 0, res["msg"] if "msg" in res else res
    assert res["summary"]["sm120"] is False
    assert res["ansible_facts"]["gpufleet_gpus"]["compute_capabilities"] == ["9.0"]


# ----------------------------------------------------------- model loaded


def test_model_loaded_fills_every_gpu(lib_dir, state_file):
    holder = spawn_holder()
    try:
        state.claim(holder.pid, 90000, None, state_file)
        rc, res = run_module({"expect": {"count": 8, "min_used_mib": 90000}}, state_file, lib_dir)
        assert rc == 0, res.get("msg")
        for gpu in res["gpus"]:
            assert gpu["memory_used_mib"] == 90000 and gpu["memory_free_mib"] == 7887
            assert [(p["pid"], p["used_mib"]) for p in gpu["processes"]] == [(holder.pid, 90000)]
            assert gpu["processes"][0]["name"] == sys.executable
        assert res["summary"]["process_pids"] == [holder.pid]

        rc, res = run_module({"expect": {"max_used_mib": 1024, "no_processes": True}}, state_file, lib_dir)
        assert rc == 1 and res["failed"] is True
        assert res["expectation_met"] is False
        assert len(res["mismatches"]) == 8  # one line per GPU
        for gpu, line in zip(res["gpus"], res["mismatches"]):
            assert line.startswith("GPU %d (%s, %s): " % (gpu["index"], gpu["uuid"], gpu["pci_bus_id"]))
            assert "memory used expected at most 1024 MiB, found 90000 MiB" in line
            assert "compute processes expected none, found 1: pid %d" % holder.pid in line
        assert res["msg"].splitlines()[0] == "GPU expectation not met:"
        # the message says it once for the 8 GPUs alike; mismatches keeps each GPU's line
        assert res["msg"].splitlines()[1:] == [
            "GPUs 0-7: " + res["mismatches"][0].split(": ", 1)[1]]
    finally:
        holder.kill()
        holder.wait()


def test_wait_until_vram_is_released(lib_dir, state_file):
    holder = spawn_holder()
    state.claim(holder.pid, 90000, None, state_file)
    try:
        # released 1 s after the module opened NVML, however long it took to start
        rc, res = run_module({"expect": {"max_used_mib": 1024, "no_processes": True}, "timeout": 10,
                              "interval": 0.2}, state_file, lib_dir,
                             when_nvml_loaded=lambda: state.release(holder.pid, state_file))
    finally:
        holder.kill()
        holder.wait()
    assert rc == 0, res.get("msg")
    assert res["expectation_met"] is True
    assert res["attempts"] >= 2  # the first check saw the VRAM in use
    assert 0 < res["waited"] < 10
    assert all(g["memory_used_mib"] == 0 and g["processes"] == [] for g in res["gpus"])


def test_wait_until_the_holding_process_dies(lib_dir, state_file):
    # the stand-in stops without releasing: a dead PID frees its memory
    holder = spawn_holder()
    state.claim(holder.pid, 90000, None, state_file)

    def stop():
        holder.kill()
        holder.wait()

    try:
        rc, res = run_module({"expect": {"max_used_mib": 1024}, "timeout": 10, "interval": 0.2},
                             state_file, lib_dir, when_nvml_loaded=stop)
    finally:
        if holder.poll() is None:
            stop()
    assert rc == 0, res.get("msg")
    assert res["attempts"] >= 2 and res["waited"] < 10
    assert state.read_state(state_file)["gpu.0.procs"] == "%d:90000" % holder.pid  # never released


def test_wait_gives_up_at_the_timeout(lib_dir, state_file):
    state.claim(os.getpid(), 50000, [2], state_file)
    rc, res = run_module({"expect": {"max_used_mib": 1024}, "timeout": 1, "interval": 0.25}, state_file, lib_dir)
    assert rc == 1
    assert res["attempts"] >= 2
    assert res["waited"] >= 1
    assert res["mismatches"] == ["GPU 2 (%s, %s): memory used expected at most 1024 MiB, found 50000 MiB"
                                 % (res["gpus"][2]["uuid"], res["gpus"][2]["pci_bus_id"])]
    assert res["msg"].startswith("GPU expectation not met after waiting ")
    assert "(timeout 1 s, %d checks):" % res["attempts"] in res["msg"]


def test_memory_the_driver_still_holds_is_said_so_and_the_wait_sees_it_freed(lib_dir, state_file):
    # a server that exited a moment ago: no process, its memory not given back yet (for 3 s)
    state.hold(60000, 3, [5], state_file)
    rc, res = run_module({"expect": {"max_used_mib": 1024, "no_processes": True}, "timeout": 1, "interval": 0.25},
                         state_file, lib_dir)
    assert rc == 1
    assert res["mismatches"] == ["GPU 5 (%s, %s): memory used expected at most 1024 MiB, found 60000 MiB with no "
                                 "compute process listed (not given back yet after a process exited, or held by a "
                                 "process NVML cannot list here)"
                                 % (res["gpus"][5]["uuid"], res["gpus"][5]["pci_bus_id"])]
    rc, res = run_module({"expect": {"max_used_mib": 1024, "no_processes": True}, "timeout": 10, "interval": 0.25},
                         state_file, lib_dir)
    assert rc == 0, res.get("msg")
    assert res["attempts"] >= 2


# ------------------------------------------------------------- mismatches


@pytest.mark.parametrize("lines,expected", [
    ([], []),
    (["GPU count: expected 8, found 7"], ["GPU count: expected 8, found 7"]),
    # one GPU keeps its line, UUID and bus included
    (["GPU 3 (GPU-a, 00000000:5D:00.0): lost"], ["GPU 3 (GPU-a, 00000000:5D:00.0): lost"]),
    (["GPU count: expected 8, found 7"] + ["GPU %d (GPU-%d, bus): too full" % (i, i) for i in (0, 1, 2, 4, 6, 7)]
     + ["GPU 5 (GPU-5, bus): lost"],
     ["GPU count: expected 8, found 7", "GPUs 0-2, 4, 6-7: too full", "GPU 5 (GPU-5, bus): lost"]),
    (["GPU 9 (x): a", "GPU 8 (y): a"], ["GPUs 8-9: a"]),
    # GPUs that cannot be queried have no UUID or bus in their label
    (["GPU %d: GPU is lost" % i for i in range(8)], ["GPUs 0-7: GPU is lost"]),
    # a GPU of expect.gpus that is not there keeps its line, even named twice
    (["GPU 9 (from expect.gpus): not found", "GPU 9 (from expect.gpus): not found"],
     ["GPU 9 (from expect.gpus): not found", "GPU 9 (from expect.gpus): not found"]),
    (["GPU 1 (a): x", "GPU 1 (a): x", "GPU 2 (b): x"], ["GPUs 1-2: x"]),
])
def test_failure_message_puts_gpus_alike_on_one_line(lines, expected):
    assert nvml.compact_mismatches(lines) == expected
    message = nvml.failure_message({"nvml_available": True, "mismatches": lines})
    assert message.splitlines() == ["GPU expectation not met:"] + expected


def test_seven_gpus_where_eight_were_expected(lib_dir, state_file):
    set_state(state_file, gpu_count=7)
    rc, res = run_module({"expect": {"count": 8, "compute_capability": "12.0"}}, state_file, lib_dir)
    assert rc == 1
    assert res["nvml_available"] is True
    assert res["gpu_count"] == 7 and len(res["gpus"]) == 7
    assert res["mismatches"] == ["GPU count: expected 8, found 7"]


def test_other_product_name(lib_dir, state_file):
    set_state(state_file, gpu__5__name="NVIDIA H200", gpu__5__cc="9.0")
    rc, res = run_module({"expect": {"name": "RTX PRO 6000", "compute_capability": "12.x"}}, state_file, lib_dir)
    assert rc == 1
    gpu = res["gpus"][5]
    assert res["mismatches"] == [
        "GPU 5 (%s, %s): name expected to match 'RTX PRO 6000', found 'NVIDIA H200'; "
        "compute capability expected 12.x, found 9.0" % (gpu["uuid"], gpu["pci_bus_id"])
    ]
    assert res["summary"]["names"] == ["NVIDIA H200", DEFAULT_NAME]
    assert res["summary"]["sm120"] is True


def test_subset_by_index_and_uuid(lib_dir, state_file):
    set_state(state_file, gpu__6__name="NVIDIA H200")
    rc, res = run_module({}, state_file, lib_dir)
    uuid1 = res["gpus"][1]["uuid"]
    rc, res = run_module({"expect": {"name": "RTX PRO 6000", "gpus": [0, uuid1.upper(), "2"]}}, state_file, lib_dir)
    assert rc == 0, res.get("msg")
    rc, res = run_module({"expect": {"name": "RTX PRO 6000", "gpus": [6, "GPU-missing", 8]}}, state_file, lib_dir)
    assert rc == 1
    assert res["mismatches"][:2] == [
        "GPU GPU-missing (from expect.gpus): expected to be present, not found among the 8 GPUs of the host",
        "GPU 8 (from expect.gpus): expected to be present, not found among the 8 GPUs of the host",
    ]
    assert res["mismatches"][2].startswith("GPU 6 (")
    assert len(res["mismatches"]) == 3


def test_memory_falls_back_to_v1(lib_dir, state_file):
    set_state(state_file, memory_v2=0, default__reserved_mib=512)
    rc, res = run_module({"expect": {"max_used_mib": 1024}}, state_file, lib_dir)
    assert rc == 0, res.get("msg")
    gpu = res["gpus"][0]
    assert gpu["memory_source"] == "v1"
    assert gpu["memory_reserved_mib"] is None
    assert (gpu["memory_used_mib"], gpu["memory_free_mib"]) == (512, 97887 - 512)


def test_v2_keeps_reserved_memory_apart(lib_dir, state_file):
    set_state(state_file, default__reserved_mib=512)
    rc, res = run_module({"expect": {"max_used_mib": 0}}, state_file, lib_dir)
    assert rc == 0, res.get("msg")
    gpu = res["gpus"][0]
    assert (gpu["memory_source"], gpu["memory_reserved_mib"], gpu["memory_used_mib"]) == ("v2", 512, 0)
    assert gpu["memory_free_mib"] == 97887 - 512


# ------------------------------------------------------------------ faults


def test_lost_gpu_fails_at_once(lib_dir, state_file):
    set_state(state_file, gpu__3__lost=1)
    rc, res = run_module({"expect": {"count": 8}, "timeout": 30, "interval": 0.2}, state_file, lib_dir)
    assert rc == 1
    assert res["nvml_available"] is False
    assert res["attempts"] == 1  # waiting does not bring a lost GPU back
    err = res["nvml_error"]
    assert (err["name"], err["text"], err["gpu_index"]) == ("NVML_ERROR_GPU_IS_LOST", "GPU is lost", 3)
    assert res["msg"].startswith("NVML cannot query GPU 3 of 8: NVML_ERROR_GPU_IS_LOST (GPU is lost). ")
    assert "Xid" in res["msg"]
    assert res["gpus"][3]["error"] == {"name": "NVML_ERROR_GPU_IS_LOST", "text": "GPU is lost"}
    assert res["gpus"][3]["name"] is None
    assert [g["name"] for i, g in enumerate(res["gpus"]) if i != 3] == [DEFAULT_NAME] * 7


def test_an_absurd_gpu_count_is_refused_naming_it(lib_dir, state_file):
    # NVML answering -1 as an unsigned count: refused at once, never walked index by index until the call timeout
    set_state(state_file, reported_gpu_count=4294967295)
    rc, res = run_module({"expect": {"count": 8}, "call_timeout": 30}, state_file, lib_dir)
    assert rc == 1 and res["nvml_available"] is False and res["gpus"] == [] and res["attempts"] == 1
    assert res["nvml_error"]["name"] == "NVML_UNEXPECTED"
    assert res["msg"].startswith("NVML is not usable on this host: NVML_UNEXPECTED (NVML reports 4294967295 GPUs on "
                                 "this host, which no host has (at most 64 are believed; the NVIDIA driver manages at "
                                 "most 32)")
    assert "NVML_TIMEOUT" not in res["msg"]


def test_a_broken_process_count_is_the_gpus_error(lib_dir, state_file):
    set_state(state_file, gpu__5__reported_procs=100000)
    rc, res = run_module({"expect": {"no_processes": True}}, state_file, lib_dir)
    assert rc == 1 and res["nvml_error"]["name"] == "NVML_UNEXPECTED" and res["nvml_error"]["gpu_index"] == 5
    assert "NVML lists 100000 compute processes on one GPU" in res["msg"]


def test_lost_gpu_outside_the_subset_still_fails(lib_dir, state_file):
    set_state(state_file, gpu__7__lost=1)
    rc, res = run_module({"expect": {"gpus": [0], "max_used_mib": 1024}}, state_file, lib_dir)
    assert rc == 1 and res["nvml_error"]["gpu_index"] == 7


@pytest.mark.parametrize("error, name, text, hint", [
    ("DRIVER_NOT_LOADED", "NVML_ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded", "modprobe nvidia"),
    ("NO_PERMISSION", "NVML_ERROR_NO_PERMISSION", "Insufficient Permissions", "become: true"),
    ("LIB_RM_VERSION_MISMATCH", "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
     "RM has detected an NVML/RM version mismatch.", "reboot"),
])
def test_init_failure_fails_with_name_and_text(lib_dir, state_file, error, name, text, hint):
    set_state(state_file, init_error=error)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 1
    assert res["nvml_available"] is False and res["expectation_met"] is False
    assert (res["nvml_error"]["name"], res["nvml_error"]["text"]) == (name, text)
    assert res["nvml_error"]["gpu_index"] is None
    assert res["msg"].startswith("NVML is not usable on this host: %s (%s). " % (name, text))
    assert hint in res["msg"]
    assert res["gpus"] == [] and res["gpu_count"] == 0


def test_unavailable_returns_when_allowed(lib_dir, state_file):
    set_state(state_file, init_error="DRIVER_NOT_LOADED")
    rc, res = run_module({"fail_when_unavailable": False, "register_facts": True}, state_file, lib_dir)
    assert rc == 0
    assert res.get("failed", False) is False
    assert res["nvml_available"] is False
    assert res["nvml_error"]["name"] == "NVML_ERROR_DRIVER_NOT_LOADED"
    assert res["ansible_facts"]["gpufleet_gpus"]["available"] is False
    assert res["ansible_facts"]["gpufleet_gpus"]["sm120"] is False
    assert "Driver Not Loaded" in json.dumps(res["warnings"])  # a plain or (2.19) structured warning


def test_unavailable_with_expectation_always_fails(lib_dir, state_file):
    set_state(state_file, init_error="DRIVER_NOT_LOADED")
    rc, res = run_module({"fail_when_unavailable": False, "expect": {"count": 8}}, state_file, lib_dir)
    assert rc == 1 and res["nvml_error"]["name"] == "NVML_ERROR_DRIVER_NOT_LOADED"


def test_library_absent(tmp_path, state_file):
    pytest.importorskip("pynvml")
    empty = tmp_path / "empty"
    empty.mkdir()
    code = "import ctypes\ntry:\n    ctypes.CDLL('libnvidia-ml.so.1')\nexcept OSError:\n    print('absent')\n"
    check = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ, LD_LIBRARY_PATH=str(empty)), check=False)
    if "absent" not in check.stdout:
        pytest.skip("this machine has a real libnvidia-ml.so.1")
    rc, res = run_module({}, state_file, str(empty))
    assert rc == 1
    assert res["nvml_error"]["name"] == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert res["nvml_error"]["text"] == "NVML Shared Library Not Found"
    assert "libnvidia-ml.so.1 could not be loaded" in res["msg"]


def test_pynvml_missing(lib_dir, state_file, tmp_path):
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "pynvml.py").write_text("raise ImportError(\"No module named 'pynvml'\")\n")
    rc, res = run_module({}, state_file, lib_dir, pythonpath_extra=str(stub))
    assert rc == 1
    assert res["nvml_error"]["name"] == "PYNVML_NOT_INSTALLED"
    assert "install nvidia-ml-py on the host" in res["msg"]


# ------------------------------------------------------------- bad input


@pytest.mark.parametrize("args, words", [
    ({"expect": {"compute_capability": "twelve"}}, ["expect.compute_capability must be MAJOR.MINOR", "'twelve'"]),
    ({"expect": {"compute_capability": "12.0.1"}}, ["expect.compute_capability", "'12.0.1'"]),
    ({"expect": {"name": "RTX (PRO"}}, ["expect.name must be a regular expression"]),
    ({"expect": {"min_used_mib": 90000, "max_used_mib": 1024}}, ["no GPU can satisfy both"]),
    ({"expect": {"count": -1}}, ["expect.count must be a whole number"]),
    ({"expect": {"gpus": [True]}}, ["expect.gpus entries must be GPU indices"]),
    ({"expect": {"gpus": [{"a": 1}]}}, ["expect.gpus entries must be GPU indices"]),
    ({"interval": 0}, ["interval must be a positive number"]),
    ({"timeout": -5}, ["timeout must be 0"]),
])
def test_bad_options_are_refused_before_nvml(lib_dir, state_file, args, words):
    # NVML would fail too; the argument error must come first
    set_state(state_file, init_error="DRIVER_NOT_LOADED")
    rc, res = run_module(args, state_file, lib_dir)
    assert rc == 1
    assert res["msg"].startswith("Invalid options for gpufleet.vllm.nvml_vram_info: ")
    for word in words:
        assert word in res["msg"]
    assert "nvml_error" not in res


def test_unknown_option_is_refused_by_ansible(lib_dir, state_file):
    rc, res = run_module({"expect": {"min_free_mib": 1}}, state_file, lib_dir)
    assert rc == 1 and "min_free_mib" in res["msg"]


# ------------------------------------------------------ module_utils alone


@pytest.mark.parametrize("text, parsed", [
    ("12.0", (12, 0)), ("9.0", (9, 0)), ("12.x", (12, None)), ("12", (12, None)), ("10.3", (10, 3)),
])
def test_parse_compute_capability(text, parsed):
    assert nvml.parse_compute_capability(text) == parsed


@pytest.mark.parametrize("text", ["twelve", "", "12.", ".0", "12.0.0", "sm_120", None])
def test_parse_compute_capability_refuses(text):
    with pytest.raises(ValueError) as info:
        nvml.parse_compute_capability(text)
    assert "MAJOR.MINOR" in str(info.value)


def test_format_cuda_version():
    assert [nvml.format_cuda_version(v) for v in (13000, 12080, 12020, None)] == ["13.0", "12.8", "12.2", None]


class FakeClock(object):
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_collect_polls_until_the_deadline_without_real_sleeping():
    # the polling arithmetic, with a scripted pynvml stand-in and a fake clock
    class Err(Exception):
        def __init__(self, value):
            super(Err, self).__init__(value)
            self.value = value

    class Mem(object):
        def __init__(self, used):
            self.total, self.used, self.free, self.reserved = 1024 * nvml.MIB, used, 1024 * nvml.MIB - used, 0

    class Scripted(object):
        NVMLError = Err
        NVML_ERROR_FUNCTION_NOT_FOUND = 13
        NVML_ERROR_NOT_SUPPORTED = 3
        nvmlMemory_v2 = 0x02000028

        def __init__(self, used):
            self.used = list(used)
            self.calls = 0

        def nvmlInit(self):
            return None

        def nvmlShutdown(self):
            return None

        def nvmlSystemGetDriverVersion(self):
            return "580.95.05"

        def nvmlDeviceGetCount(self):
            return 1

        def nvmlDeviceGetHandleByIndex(self, index):
            return index

        def nvmlDeviceGetName(self, handle):
            return "NVIDIA RTX PRO 6000 Blackwell Server Edition"

        def nvmlDeviceGetUUID(self, handle):
            return "GPU-x"

        def nvmlDeviceGetPciInfo(self, handle):
            return type("Pci", (), {"busId": "00000000:18:00.0"})()

        def nvmlDeviceGetCudaComputeCapability(self, handle):
            return (12, 0)

        def nvmlDeviceGetMemoryInfo(self, handle, version=None):
            self.calls += 1
            return Mem(self.used.pop(0) if len(self.used) > 1 else self.used[0])

        def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
            return []

    clock = FakeClock()
    fake = Scripted([900 * nvml.MIB, 900 * nvml.MIB, 10 * nvml.MIB])
    res = nvml.collect({"max_used_mib": 100}, timeout=10, interval=2, pynvml=fake, clock=clock, sleep=clock.sleep)
    assert res["expectation_met"] is True
    assert res["attempts"] == 3 and clock.sleeps == [2, 2] and res["waited"] == 4
    assert res["nvml_version"] is None  # the stand-in has no nvmlSystemGetNVMLVersion

    clock = FakeClock()
    fake = Scripted([900 * nvml.MIB])
    res = nvml.collect({"max_used_mib": 100}, timeout=5, interval=2, pynvml=fake, clock=clock, sleep=clock.sleep)
    assert res["expectation_met"] is False
    assert clock.sleeps == [2, 2, 1]  # the last sleep is cut to the deadline
    assert res["attempts"] == 4 and res["waited"] == 5
    assert res["mismatches"] == ["GPU 0 (GPU-x, 00000000:18:00.0): memory used expected at most 100 MiB, found 900 MiB"
                                 " with no compute process listed (not given back yet after a process exited, or held by a process NVML cannot list here)"]


# ------------------------------------------ loaded: a fraction of each total


def test_min_used_fraction_passes_what_vllm_reserves_and_fails_with_the_arithmetic(lib_dir, state_file):
    holder = spawn_holder()
    try:
        # vLLM at --gpu-memory-utilization 0.9: floor(0.9 x 97,887) = 88,098 MiB per GPU
        state.claim(holder.pid, 88098, None, state_file)
        expect = {"count": 8, "min_used_fraction": 0.9, "min_used_tolerance": 0.05}
        rc, res = run_module({"expect": expect}, state_file, lib_dir)
        assert rc == 0, res.get("msg")
        # the gate is 83,693 MiB: one MiB less fails
        state.claim(holder.pid, 83692, None, state_file)
        rc, res = run_module({"expect": expect}, state_file, lib_dir)
        assert rc == 1 and len(res["mismatches"]) == 8
        assert res["msg"].splitlines()[1:] == [
            "GPUs 0-7: memory used expected at least 83,693 MiB = 0.9 x 97,887 MiB - 5 %, found 83,692 MiB"]
        state.claim(holder.pid, 83693, None, state_file)
        assert run_module({"expect": expect}, state_file, lib_dir)[0] == 0
    finally:
        holder.kill()
        holder.wait()


def test_min_used_fraction_of_each_gpus_own_total_and_only_the_gpus_listed(lib_dir, state_file):
    holder = spawn_holder()
    try:
        # a smaller GPU 1 (an 80 GB card): its own total counts; GPUs 2-7 are not the server's
        set_state(state_file, gpu__1__total_mib=81559)
        state.claim(holder.pid, 12000, [0, 1], state_file)
        rc, res = run_module({"expect": {"min_used_fraction": 0.9, "gpus": [0, 1]}}, state_file, lib_dir)
        assert rc == 1
        assert res["msg"].splitlines()[1:] == [
            res["mismatches"][0], res["mismatches"][1]]
        assert res["mismatches"][0].endswith(": memory used expected at least 88,098 MiB = 0.9 x 97,887 MiB, "
                                             "found 12,000 MiB")
        assert res["mismatches"][1].endswith(": memory used expected at least 73,403 MiB = 0.9 x 81,559 MiB, "
                                             "found 12,000 MiB")
        state.claim(holder.pid, 73403, [1], state_file)
        rc, res = run_module({"expect": {"min_used_fraction": 0.9, "gpus": [1]}}, state_file, lib_dir)
        assert rc == 0, res.get("msg")
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("expect, words", [
    ({"min_used_fraction": 0}, "expect.min_used_fraction must be more than 0 and at most 1"),
    ({"min_used_fraction": 1.2}, "expect.min_used_fraction must be more than 0 and at most 1"),
    ({"min_used_fraction": 0.9, "min_used_tolerance": -0.1}, "expect.min_used_tolerance must be 0 or more"),
    ({"min_used_tolerance": 0.05}, "expect.min_used_tolerance applies to expect.min_used_fraction, which is not given"),
])
def test_a_bad_fraction_is_refused_before_nvml_is_read(lib_dir, state_file, expect, words):
    set_state(state_file, init_error="DRIVER_NOT_LOADED")
    rc, res = run_module({"expect": expect}, state_file, lib_dir)
    assert rc == 1 and res["msg"].startswith("Invalid options for gpufleet.vllm.nvml_vram_info: ")
    assert words in res["msg"], res["msg"]
