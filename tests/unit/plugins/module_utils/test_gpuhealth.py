# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils.gpuhealth in pure Python: the judgement as a table, thresholds, the /proc walk, unknown fields."""

import os
import threading

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import gpuhealth

DEFAULTS = gpuhealth.effective_thresholds(None)


def healthy_gpu(**changes):
    gpu = gpuhealth._empty_gpu(3)
    gpu.update(
        pci_bus_id="00000000:5D:00.0", ecc_mode=True, ecc_mode_pending=True, ecc_uncorrected_volatile=0,
        ecc_corrected_volatile=0, ecc_uncorrected_aggregate=0, ecc_corrected_aggregate=0, retired_pages_pending=False,
        remapped_rows_corrected=0, remapped_rows_uncorrected=0, remapped_rows_pending=False,
        remapped_rows_failure=False, clocks_event_reasons=0, clocks_event_reason_names=[], temperature_c=40,
        temperature_slowdown_c=90, power_w=300.0, power_limit_w=600.0, pcie_gen=5, pcie_width=16, pcie_max_gen=5,
        pcie_max_width=16, persistence_mode=True, processes=[])
    gpu.update(changes)
    return gpu


def proc(pid, mib=1000, name="python3"):
    return {"pid": pid, "used_mib": mib, "name": name}


# (readings changed, thresholds changed, allowed PIDs, the problems expected: a fragment each, in order)
CASES = [
    ("healthy", {}, {}, None, []),
    ("ecc volatile", {"ecc_uncorrected_volatile": 1}, {}, None,
     ["1 uncorrected ECC error since the driver loaded (at most 0 allowed)"]),
    ("ecc within limit", {"ecc_uncorrected_volatile": 3}, {"max_uncorrected_ecc_errors": 3}, None, []),
    ("ecc aggregate not judged", {"ecc_uncorrected_aggregate": 50}, {}, None, []),
    ("ecc aggregate judged", {"ecc_uncorrected_aggregate": 50}, {"max_uncorrected_ecc_errors_aggregate": 10}, None,
     ["50 uncorrected ECC errors over the GPU's life (at most 10 allowed)"]),
    ("ecc corrected only", {"ecc_corrected_volatile": 500}, {}, None, []),
    ("retired pages", {"retired_pages_pending": True}, {}, None, ["retired memory page is pending"]),
    ("retired pages allowed", {"retired_pages_pending": True}, {"retired_pages_pending_allowed": True}, None, []),
    ("remap failure", {"remapped_rows_failure": True}, {}, None, ["row remapping failed"]),
    ("remap pending", {"remapped_rows_pending": True}, {}, None, ["row remapping is pending"]),
    ("remap pending allowed", {"remapped_rows_pending": True}, {"remapped_rows_pending_allowed": True}, None, []),
    ("remap failure and pending", {"remapped_rows_failure": True, "remapped_rows_pending": True}, {}, None,
     ["row remapping failed", "row remapping is pending"]),
    ("hw slowdown", {"clocks_event_reason_names": ["hw_slowdown"]}, {}, None, ["clocks held down by HW slowdown ("]),
    ("two reasons", {"clocks_event_reason_names": ["sw_thermal_slowdown", "hw_thermal_slowdown"]}, {}, None,
     ["clocks held down by SW thermal slowdown, HW thermal slowdown ("]),
    ("idle", {"clocks_event_reason_names": ["gpu_idle"]}, {}, None, []),
    ("power cap not counted", {"clocks_event_reason_names": ["sw_power_cap"]}, {}, None, []),
    ("power cap counted", {"clocks_event_reason_names": ["sw_power_cap"]}, {"throttle_reasons": ["sw_power_cap"]},
     None, ["clocks held down by SW power cap (the reasons counted as problems: sw_power_cap)"]),
    ("none counted", {"clocks_event_reason_names": ["hw_slowdown"]}, {"throttle_reasons": []}, None, []),
    ("temperature at limit", {"temperature_c": 85}, {}, None, []),
    ("temperature above", {"temperature_c": 86}, {}, None, ["86 C, above the limit of 85 C (the card slows itself "
                                                            "down at 90 C)"]),
    ("temperature no slowdown known", {"temperature_c": 86, "temperature_slowdown_c": None}, {}, None,
     ["86 C, above the limit of 85 C: check its cooling"]),
    ("pcie gen under load", {"pcie_gen": 4}, {}, None, ["PCIe link Gen4 x16, the card can do Gen5 x16: a degraded "
                                                        "link starves all-reduce over PCIe"]),
    ("pcie gen idle", {"pcie_gen": 1, "clocks_event_reason_names": ["gpu_idle"]}, {}, None, []),
    ("pcie gen idle judged", {"pcie_gen": 1, "clocks_event_reason_names": ["gpu_idle"]},
     {"pcie_gen_below_max_when_idle_is_problem": True}, None, ["PCIe link Gen1 x16"]),
    ("pcie width idle", {"pcie_width": 8, "clocks_event_reason_names": ["gpu_idle"]}, {}, None,
     ["PCIe link Gen5 x8, the card can do Gen5 x16"]),
    ("pcie not judged", {"pcie_width": 8}, {"pcie_below_max_is_problem": False}, None, []),
    ("pcie slot gen4", {"pcie_gen": 4, "pcie_max_gen": 4}, {}, None, []),
    ("persistence off", {"persistence_mode": False}, {}, None, ["persistence mode is off"]),
    ("persistence not required", {"persistence_mode": False}, {"persistence_mode_required": False}, None, []),
    ("foreign process", {"processes": [proc(4242, 2048, "/usr/bin/python3")]}, {}, None,
     ["1 process not of the served model: pid 4242 /usr/bin/python3 (2048 MiB)"]),
    ("allowed process", {"processes": [proc(4242)]}, {}, {4242}, []),
    ("one of two allowed", {"processes": [proc(4242), proc(5000, None, None)]}, {}, {4242},
     ["1 process not of the served model: pid 5000 (name not readable) (? MiB)"]),
    ("two foreign", {"processes": [proc(1), proc(2)]}, {}, set(), ["2 processes not of the served model"]),
    ("processes allowed", {"processes": [proc(4242)]}, {"other_processes_allowed": True}, None, []),
    ("all unknown", dict((k, None) for k in gpuhealth._empty_gpu(0) if k not in ("index", "unknown", "pci_bus_id")),
     {}, None, []),
    ("gpu error", {"error": {"name": "NVML_ERROR_GPU_IS_LOST", "text": "GPU is lost", "message": "x. Reset it."}}, {},
     None, ["NVML cannot query it: NVML_ERROR_GPU_IS_LOST (GPU is lost); a host with a GPU in this state must not "
            "serve. Reset it."]),
]


@pytest.mark.parametrize("changes, thresholds, allowed, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_evaluate_gpu(changes, thresholds, allowed, expected):
    problems, dummy = gpuhealth.evaluate_gpu(healthy_gpu(**changes), gpuhealth.effective_thresholds(thresholds),
                                             allowed)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert problem.startswith("GPU 3 (bus 5D): "), problem
        assert fragment in problem, (fragment, problem)


def test_idle_generation_drop_is_a_note():
    problems, notes = gpuhealth.evaluate_gpu(healthy_gpu(pcie_gen=1, clocks_event_reason_names=["gpu_idle"]),
                                             DEFAULTS)
    assert problems == []
    assert notes == ["GPU 3 (bus 5D): PCIe link Gen1 while the GPU is idle (it can do Gen5): the link slows down to "
                     "save power when idle, so the generation is judged only under load"]


@pytest.mark.parametrize("bus, label", [("00000000:5D:00.0", "GPU 3 (bus 5D)"), ("0000:ab:00.0", "GPU 3 (bus AB)"),
                                        (None, "GPU 3"), ("garbage", "GPU 3")])
def test_gpu_label(bus, label):
    assert gpuhealth.gpu_label({"index": 3, "pci_bus_id": bus}) == label


# ------------------------------------------------------------ thresholds


def test_defaults():
    assert DEFAULTS["max_uncorrected_ecc_errors"] == 0 and DEFAULTS["max_temperature_c"] == 85
    assert DEFAULTS["throttle_reasons"] == ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                                            "sw_thermal_slowdown"]
    assert gpuhealth.validate_thresholds(DEFAULTS) == []
    # the argument spec's defaults are the same
    spec = gpuhealth.thresholds_argument_spec()["options"]
    assert dict((k, v.get("default")) for k, v in spec.items()) == DEFAULTS


def test_effective_thresholds_do_not_share_the_default_list():
    first = gpuhealth.effective_thresholds(None)
    first["throttle_reasons"].append("gpu_idle")
    assert "gpu_idle" not in gpuhealth.effective_thresholds(None)["throttle_reasons"]


@pytest.mark.parametrize("thresholds, pids, parent, fragment", [
    ({"max_uncorrected_ecc_errors": -1}, None, None, "thresholds.max_uncorrected_ecc_errors must be a whole number"),
    ({"max_uncorrected_ecc_errors": True}, None, None, "thresholds.max_uncorrected_ecc_errors must be a whole number"),
    ({"max_uncorrected_ecc_errors_aggregate": "5"}, None, None, "max_uncorrected_ecc_errors_aggregate must be"),
    ({"max_temperature_c": 19}, None, None, "from 20 to 120 (such as 85); got 19"),
    ({"max_temperature_c": 121}, None, None, "from 20 to 120 (such as 85); got 121"),
    ({"throttle_reasons": "hw_slowdown"}, None, None, "thresholds.throttle_reasons must be a list"),
    ({"throttle_reasons": ["hw_slowdown", "HW Slowdown"]}, None, None, "unknown reasons 'HW Slowdown'; known:"),
    ({"persistence_mode_required": "yes"}, None, None, "thresholds.persistence_mode_required must be true or false"),
    ({"max_temp": 80}, None, None, "thresholds has unknown keys max_temp; known keys:"),
    ({}, [1, 0], None, "allowed_pids must be process ids from 1 to 4194304; got 0"),
    ({}, [99999999], None, "got 99999999"),
    ({}, None, -1, "allowed_parent_pid must be a process id from 1 to 4194304"),
    ([], None, None, "thresholds must be a dictionary"),
])
def test_validate_thresholds_refuses(thresholds, pids, parent, fragment):
    problems = gpuhealth.validate_thresholds(thresholds, pids, parent)
    assert len(problems) == 1 and fragment in problems[0], problems


def test_validate_thresholds_accepts_edges():
    assert gpuhealth.validate_thresholds({"max_temperature_c": 20, "throttle_reasons": [],
                                          "max_uncorrected_ecc_errors": 0}, [1, 4194304], 1) == []


# ------------------------------------------------------------ /proc walk


def fake_proc(tmp_path, parents):
    """A /proc with PID -> PPID; comm names with spaces and parentheses, as real ones can be."""
    root = tmp_path / "proc"
    for pid, ppid in parents.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text("%d (vllm (worker) %d) S %d 1 1 0 -1\n" % (pid, pid, ppid))
    (root / "self").mkdir()
    (root / "meminfo").write_text("")
    return str(root)


def test_descendants_walks_the_tree(tmp_path):
    root = fake_proc(tmp_path, {1: 0, 100: 1, 101: 100, 102: 100, 103: 101, 200: 1, 201: 200})
    assert gpuhealth.descendants(100, root) == {100, 101, 102, 103}
    assert gpuhealth.allowed_pids([7], 200, root) == {7, 200, 201}
    assert gpuhealth.allowed_pids([7], None, root) == {7}


def test_descendants_of_a_gone_process(tmp_path):
    root = fake_proc(tmp_path, {1: 0, 101: 100})
    assert gpuhealth.descendants(100, root) == set()


def test_descendants_bounded(tmp_path):
    parents = dict((pid, pid - 1) for pid in range(2, 60))
    parents[1] = 0
    root = fake_proc(tmp_path, parents)
    assert len(gpuhealth.descendants(1, root, max_found=10)) == 10
    # a cycle (a recycled PID read mid-walk) ends too
    root2 = fake_proc(tmp_path / "b", {5: 6, 6: 5})
    assert gpuhealth.descendants(5, root2) == {5, 6}


def test_descendants_bounded_among_siblings(tmp_path):
    parents = dict((pid, 1) for pid in range(2, 30))
    parents[1] = 0
    assert len(gpuhealth.descendants(1, fake_proc(tmp_path, parents), max_found=5)) == 5


def test_descendants_of_this_process_include_itself():
    assert os.getpid() in gpuhealth.descendants(os.getpid())


# ------------------------------------------------------------ reading with a stub pynvml


class StubError(Exception):
    def __init__(self, value):
        super(StubError, self).__init__("stub error %d" % value)
        self.value = value


class StubNvml(object):
    """A pynvml with one GPU, NOT_SUPPORTED for ECC, no remapped-rows call, FUNCTION_NOT_FOUND for event reasons."""

    NVMLError = StubError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15

    def __init__(self, hang=None):
        self.hang = hang

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.hang is not None:
            self.hang.wait(30)
        return index

    def nvmlDeviceGetName(self, handle):
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle):
        return "GPU-1"

    def nvmlDeviceGetPciInfo(self, handle):
        return type("Pci", (), {"busId": "00000000:18:00.0"})()

    def nvmlDeviceGetEccMode(self, handle):
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter):
        raise StubError(3)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        raise StubError(13)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return 0x40

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 50

    def nvmlDeviceGetTemperatureThreshold(self, handle, kind):
        raise StubError(3)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 123456

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700000

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return 16

    def nvmlDeviceGetPersistenceMode(self, handle):
        raise StubError(15)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        return []

    def nvmlSystemGetProcessName(self, pid):
        return "x"


def test_an_error_other_than_not_supported_is_the_gpus_error():
    result = gpuhealth.check(DEFAULTS, set(), pynvml=StubNvml())
    gpu = result["gpus"][0]
    # persistence mode answered GPU_IS_LOST: not "unknown", the GPU is in error
    assert gpu["error"]["name"] == "NVML_ERROR_GPU_IS_LOST"
    assert result["healthy"] is False and result["changed"] is False
    # (its clock event reasons, read before the error, are not read again: a GPU in error is judged by its error)
    assert gpu["clocks_event_reason_samples"] == [0x40] and gpu["clocks_event_reason_window_s"] is None


def test_older_throttle_call_and_unknowns():
    stub = StubNvml()
    stub.nvmlDeviceGetPersistenceMode = lambda handle: 1
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub, sleep=lambda seconds: None)
    gpu = result["gpus"][0]
    assert gpu["error"] is None
    assert gpu["unknown"] == ["ecc_errors", "ecc_errors_aggregate", "remapped_rows", "temperature_slowdown"]
    assert gpu["clocks_event_reason_names"] == ["hw_thermal_slowdown"]
    assert (gpu["power_w"], gpu["power_limit_w"]) == (123.5, 700.0)
    assert gpu["pcie_gpu_max_gen"] is None  # no such call: the link's maximum is enough
    assert result["summary"] == ("1 of 1 GPUs unhealthy (GPU 0); not readable on this card or driver, so not judged: "
                                 "ecc_errors, ecc_errors_aggregate, remapped_rows, temperature_slowdown on GPU 0")
    assert result["problems"] == [
        "GPU 0 (bus 18): clocks held down by HW thermal slowdown (the reasons counted as problems: hw_slowdown, "
        "hw_thermal_slowdown, hw_power_brake_slowdown, sw_thermal_slowdown), held in most readings over 0.0 s (HW "
        "thermal slowdown 3 of 3): this GPU runs slower, and a tensor-parallel model runs at the pace of its slowest "
        "GPU; check cooling and power"]
    # (a transient reason: read again until it held in most of the readings, 3 of the 5 at most)
    assert gpu["clocks_event_reason_samples"] == [0x40, 0x40, 0x40]


def test_hung_driver_gives_nvml_timeout():
    release = threading.Event()
    try:
        result = gpuhealth.check_bounded(DEFAULTS, set(), call_timeout=1, pynvml=StubNvml(hang=release))
    finally:
        release.set()
    assert result["healthy"] is False and result["nvml_available"] is False
    assert result["nvml_error"]["name"] == "NVML_TIMEOUT"
    assert result["summary"].startswith("GPU health unknown: NVML is not usable on this host: NVML_TIMEOUT")


# ------------------------------------------------------------ counts, ECC off, required fields, temperature call


class CountingStub(StubNvml):
    """StubNvml with a settable count, a healthy GPU, and a record of the handles asked for."""

    def __init__(self, count=1, **calls):
        super(CountingStub, self).__init__()
        self.count = count
        self.handles = []
        self.nvmlDeviceGetTotalEccErrors = lambda handle, error_type, counter: 0
        self.nvmlDeviceGetPersistenceMode = lambda handle: 1
        self.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 0
        for name, fn in calls.items():
            setattr(self, name, fn)

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        self.handles.append(index)
        if len(self.handles) > 100:
            raise RuntimeError("walked GPU by GPU")
        return index


@pytest.mark.parametrize("count", [4294967295, 65, -1])
def test_a_gpu_count_no_host_has_is_refused_naming_it(count):
    stub = CountingStub(count)
    result = gpuhealth.check_bounded(DEFAULTS, set(), call_timeout=30, pynvml=stub)
    assert stub.handles == []  # never walked index by index
    assert result["healthy"] is False and result["nvml_available"] is False
    assert result["nvml_error"]["name"] == "NVML_UNEXPECTED"
    assert "NVML reports %d GPUs on this host, which no host has (at most 64 are believed" % count in \
        result["nvml_error"]["text"]
    assert "NVML_TIMEOUT" not in result["summary"] and "%d GPUs" % count in result["summary"]


def test_the_vram_reading_refuses_the_same_count():
    from ansible_collections.gpufleet.vllm.plugins.module_utils import nvml
    stub = CountingStub(4294967295)
    stub.nvmlSystemGetDriverVersion = lambda: "580.95.05"
    result = nvml.collect_bounded(expect={"count": 8}, call_timeout=30, pynvml=stub)
    assert stub.handles == []
    assert result["nvml_available"] is False and result["nvml_error"]["name"] == "NVML_UNEXPECTED"
    assert "4294967295 GPUs" in result["nvml_error"]["message"]
    assert nvml.device_count(CountingStub(64)) == 64
    with pytest.raises(nvml.NvmlUnavailable, match="not a whole number"):
        nvml.device_count(CountingStub("8"))


def test_a_process_list_no_gpu_has_is_the_gpus_error():
    from ansible_collections.gpufleet.vllm.plugins.module_utils import nvml
    procs = [type("P", (), {"pid": 10 + i, "usedGpuMemory": 0})() for i in range(nvml.MAX_PROCESSES + 1)]
    stub = CountingStub(1, nvmlDeviceGetComputeRunningProcesses_v3=lambda handle: procs)
    calls = []
    stub.nvmlSystemGetProcessName = lambda pid: calls.append(pid) or "x"
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub)
    assert calls == []
    assert result["gpus"][0]["error"]["name"] == "NVML_UNEXPECTED"
    assert "NVML lists 4097 compute processes on one GPU" in result["problems"][0]


def test_a_broken_process_count_is_refused_before_pynvml_allocates_for_it():
    # pynvml's list call allocates twice the count of its size query: that count is asked apart and bounded first
    asked, listed = [], []

    def size_query(handle, count, infos):
        asked.append(infos)
        count.contents.value = 2 ** 31
        return 7  # NVML_ERROR_INSUFFICIENT_SIZE

    stub = CountingStub(1, nvmlDeviceGetComputeRunningProcesses_v3=lambda handle: listed.append(handle) or [])
    stub._nvmlGetFunctionPointer = lambda name: size_query
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub)
    assert asked == [None] and listed == []
    assert result["gpus"][0]["error"]["name"] == "NVML_UNEXPECTED"
    assert "NVML lists 2147483648 compute processes on one GPU" in result["problems"][0]
    # a count within the bound: pynvml lists them
    stub._nvmlGetFunctionPointer = lambda name: lambda handle, count, infos: 0
    assert gpuhealth.check(DEFAULTS, set(), pynvml=stub)["healthy"] is True and listed == [0]


def test_a_pynvml_that_cannot_look_the_call_up_lists_as_before():
    def lookup(name):
        raise StubError(13)
    stub = CountingStub(1)
    stub._nvmlGetFunctionPointer = lookup
    assert gpuhealth.check(DEFAULTS, set(), pynvml=stub)["gpus"][0]["processes"] == []


def test_the_expected_gpu_count():
    stub = CountingStub(1)
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub, expected_count=2)
    assert result["healthy"] is False and result["gpus"][0]["healthy"] is True
    assert result["problems"] == [
        "NVML reports 1 GPU where 2 are expected (expected_gpu_count, the count read before): a GPU was lost since; "
        "look for Xid errors in 'dmesg' (Xid 79 means fallen off the bus). A host that lost a GPU cannot serve its "
        "model after a restart: it must not be stopped"]
    assert result["summary"].startswith("1 GPU found where 2 are expected; the GPU healthy; not readable ")
    assert result["expected_gpu_count"] == 2
    assert result["nvml_available"] is True and result["gpu_count"] == 1
    for expected in (1, 0, None):
        result = gpuhealth.check(DEFAULTS, set(), pynvml=CountingStub(1), expected_count=expected)
        assert result["healthy"] is True and result["summary"].startswith("the GPU healthy; "), expected
        assert result["nvml_available"] is True and result["nvml_error"] is None


def test_no_gpu_at_all_is_a_problem():
    result = gpuhealth.check(DEFAULTS, set(), pynvml=CountingStub(0))
    assert result["healthy"] is False and result["summary"] == "no GPU found"
    assert result["problems"] == ["NVML reports no GPU on this host: a host to serve a model needs its GPUs"]


def test_the_count_call_failing_is_nvml_unavailable():
    def fail():
        raise StubError(12)  # NVML_ERROR_LIBRARY_NOT_FOUND
    stub = CountingStub(1)
    stub.nvmlDeviceGetCount = fail
    stub.NVML_ERROR_LIBRARY_NOT_FOUND = 12
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub, required=["ecc"], expected_count=8)
    assert result["nvml_available"] is False and result["nvml_error"]["name"] == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert result["healthy"] is False and result["required"] == ["ecc"] and result["expected_gpu_count"] == 8


def test_an_exception_of_the_reading_is_nvml_unexpected():
    def broken(handle):
        raise KeyError("odd")
    result = gpuhealth.check_bounded(DEFAULTS, set(), call_timeout=30,
                                     pynvml=CountingStub(1, nvmlDeviceGetEccMode=broken))
    assert result["nvml_error"]["name"] == "NVML_UNEXPECTED" and "KeyError" in result["nvml_error"]["text"]
    assert result["healthy"] is False and result["summary"].startswith("GPU health unknown: ")
    assert "waited" in result


@pytest.mark.parametrize("mode, thresholds, expected", [
    ([0, 0], {}, ["ECC is off: the GPU's memory errors are neither corrected nor counted, so an uncorrected error "
                  "goes unseen and corrupts results silently; turn it on ('nvidia-smi -i 0 -e 1', then a GPU reset "
                  "or a reboot), or allow it with thresholds.ecc_off_allowed"]),
    ([0, 1], {}, ["ECC is off: the GPU's memory errors are neither corrected nor counted, so an uncorrected error "
                  "goes unseen and corrupts results silently (it is set to turn on at the next GPU reset or reboot), "
                  "or allow it with thresholds.ecc_off_allowed"]),
    ([0, 0], {"ecc_off_allowed": True}, []),
    ([1, 1], {}, []),
    # on now, off after the next reset
    ([1, 0], {}, ["ECC is on but set to turn off at the next GPU reset or reboot: after it, the GPU's memory errors are "
                  "neither corrected nor counted; keep it on ('nvidia-smi -i 0 -e 1'), or allow it with "
                  "thresholds.ecc_off_allowed"]),
    ([1, 0], {"ecc_off_allowed": True}, []),
])
def test_ecc_off_is_a_finding_of_its_own(mode, thresholds, expected):
    # (with ECC off the counters are not kept: NOT_SUPPORTED, as nvidia-smi's N/A)
    stub = CountingStub(1, nvmlDeviceGetEccMode=lambda handle: mode)
    if not mode[0]:
        stub.nvmlDeviceGetTotalEccErrors = StubNvml.nvmlDeviceGetTotalEccErrors.__get__(stub)
    result = gpuhealth.check(gpuhealth.effective_thresholds(thresholds), set(), pynvml=stub)
    assert [p.split(": ", 1)[1] for p in result["problems"]] == expected
    assert result["healthy"] is (not expected)


@pytest.mark.parametrize("unknown, required, expected", [
    (["ecc_errors"], ["ecc"], ["ecc_errors cannot be read on this card or driver (NVML answers not supported), and ecc "
                               "is required: this GPU's health cannot be proven without it; check the driver "
                               "('nvidia-smi -q'), or leave ecc out of the required fields if this card does not "
                               "have it"]),
    (["ecc_mode", "ecc_errors", "ecc_errors_aggregate"], ["ecc"], ["ecc_mode, ecc_errors cannot be read"]),
    (["ecc_errors_aggregate"], ["ecc"], []),
    (["remapped_rows"], ["ecc", "remapped_rows"], ["remapped_rows cannot be read"]),
    (["remapped_rows", "ecc_mode"], ["ecc", "remapped_rows"], ["ecc_mode cannot be read", "remapped_rows cannot"]),
    (["pcie_gen"], ["pcie"], ["pcie_gen cannot be read"]),
    (["pcie_max_width"], ["pcie"], []),
    (["pcie_max_width"], ["pcie_max"], ["pcie_max_width cannot be read"]),
    (["temperature"], [], []),
    ([], ["ecc", "remapped_rows", "temperature"], []),
])
def test_a_required_field_that_is_unknown_is_a_problem(unknown, required, expected):
    gpu = healthy_gpu(unknown=list(unknown))
    problems, dummy = gpuhealth.evaluate_gpu(gpu, DEFAULTS, required=required)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert problem.startswith("GPU 3 (bus 5D): " + fragment), problem


def test_a_gpu_in_error_is_judged_by_its_error_alone():
    gpu = healthy_gpu(error={"name": "NVML_ERROR_UNKNOWN", "text": "Unknown Error", "message": "no hint here"},
                      unknown=["ecc_errors"], ecc_mode=False)
    problems, dummy = gpuhealth.evaluate_gpu(gpu, DEFAULTS, required=["ecc"])
    assert problems == ["GPU 3 (bus 5D): NVML cannot query it: NVML_ERROR_UNKNOWN (Unknown Error); a host with a GPU "
                        "in this state must not serve. Look for Xid errors in 'dmesg'."]


@pytest.mark.parametrize("required, fragment", [
    ("ecc", "required must be a list of field names"),
    (["ecc", "ECC"], "required has unknown fields 'ECC'; known: clocks_event_reasons, ecc, ecc_errors,"),
])
def test_validate_required(required, fragment):
    problems = gpuhealth.validate_required(required)
    assert len(problems) == 1 and fragment in problems[0], problems


def test_validate_required_accepts_every_field():
    assert gpuhealth.validate_required(None) == []
    assert gpuhealth.validate_required(sorted(gpuhealth.REQUIRABLE)) == []
    assert set(gpuhealth.FIELDS) < set(gpuhealth.REQUIRABLE)


def _temperature_stub(v_call):
    stub = CountingStub(1)
    if v_call is not None:
        stub.nvmlDeviceGetTemperatureV = v_call
    return stub


def _raise(value):
    def call(*args):
        if value == "type":
            raise TypeError("nvmlDeviceGetTemperatureV() takes 1 positional argument")
        raise StubError(value)
    return call


@pytest.mark.parametrize("v_call, source, temp", [
    (lambda handle, sensor: 61, "nvmlDeviceGetTemperatureV", 61),
    (None, "nvmlDeviceGetTemperature", 50),  # a pynvml without the new call
    (_raise(13), "nvmlDeviceGetTemperature", 50),  # a driver without it
    (_raise(25), "nvmlDeviceGetTemperature", 50),  # a driver with another version of its struct
    (_raise("type"), "nvmlDeviceGetTemperature", 50),  # a pynvml whose call takes other arguments
])
def test_the_current_temperature_call_then_the_old_one(v_call, source, temp):
    gpu = gpuhealth.check(DEFAULTS, set(), pynvml=_temperature_stub(v_call))["gpus"][0]
    assert (gpu["temperature_c"], gpu["temperature_source"]) == (temp, source)
    assert "temperature" not in gpu["unknown"]


def test_a_card_without_a_temperature_sensor_and_a_lost_gpu():
    stub = _temperature_stub(_raise(3))
    stub.nvmlDeviceGetTemperature = _raise(3)
    gpu = gpuhealth.check(DEFAULTS, set(), pynvml=stub)["gpus"][0]
    assert gpu["temperature_c"] is None and gpu["temperature_source"] is None and "temperature" in gpu["unknown"]
    gpu = gpuhealth.check(DEFAULTS, set(), pynvml=_temperature_stub(_raise(15)))["gpus"][0]
    assert gpu["error"]["name"] == "NVML_ERROR_GPU_IS_LOST"


# ------------------------------------------------------------ clock event reasons over a window


def _clocks_stub(masks):
    """CountingStub whose clock event reasons answer MASKS in turn (the last one repeated)."""
    seq = list(masks)
    reads = []

    def reasons(handle):
        reads.append(handle)
        return seq[min(len(reads), len(seq)) - 1]
    return CountingStub(1, nvmlDeviceGetCurrentClocksEventReasons=reasons), reads


def _judge(masks, **thresholds):
    stub, reads = _clocks_stub(masks)
    sleeps = []
    result = gpuhealth.check(gpuhealth.effective_thresholds(thresholds), set(), pynvml=stub, sleep=sleeps.append)
    return result, result["gpus"][0], sleeps, reads


def test_a_momentary_power_brake_is_a_note_not_a_problem():
    result, gpu, sleeps, reads = _judge([0x88, 0, 0, 0, 0])
    assert result["healthy"] is True and result["problems"] == []
    # decided after 4 readings: it can no longer hold in 3 of 5
    assert gpu["clocks_event_reason_samples"] == [0x88, 0, 0, 0]
    assert sleeps == [0.5, 0.5, 0.5] and len(reads) == 4
    assert result["notes"] == ["GPU 0 (bus 18): clocks held down for a moment only (HW slowdown 1 of 4, HW power brake "
                               "slowdown 1 of 4 readings over 0.0 s): a reason that comes and goes under load counts "
                               "only when it holds in most readings"]
    # the first reading is kept as it was read
    assert gpu["clocks_event_reasons"] == 0x88 and gpu["clocks_event_reason_names"] == ["hw_slowdown",
                                                                                        "hw_power_brake_slowdown"]


def test_a_transient_reason_held_in_most_readings_is_a_problem():
    result, gpu, dummy, dummy2 = _judge([0x20, 0, 0x20, 0x20, 0])
    assert gpu["clocks_event_reason_samples"] == [0x20, 0, 0x20, 0x20]
    assert result["problems"][0].startswith(
        "GPU 0 (bus 18): clocks held down by SW thermal slowdown (the reasons counted as problems: hw_slowdown, "
        "hw_thermal_slowdown, hw_power_brake_slowdown, sw_thermal_slowdown), held in most readings over 0.0 s (SW "
        "thermal slowdown 3 of 4): this GPU runs slower")


def test_two_of_four_is_not_most():
    result, gpu, dummy, dummy2 = _judge([0x4, 0, 0x4, 0], clock_samples=4, throttle_reasons=["sw_power_cap"])
    assert gpu["clocks_event_reason_samples"] == [0x4, 0, 0x4, 0] and result["healthy"] is True
    assert "SW power cap 2 of 4 readings" in result["notes"][0]


@pytest.mark.parametrize("masks, thresholds, samples", [
    ([0x8, 0, 0], {}, [0x8]),  # HW slowdown without a transient cause: held by the hardware, at once
    ([0x4, 0, 0], {}, [0x4]),  # SW power cap is not counted by default: no window
    ([0x40, 0, 0], {"clock_samples": 1}, [0x40]),  # one reading decides
    ([0x1, 0x40, 0x40], {}, [0x1]),  # idle at the first reading
])
def test_at_once(masks, thresholds, samples):
    result, gpu, sleeps, dummy = _judge(masks, **thresholds)
    assert gpu["clocks_event_reason_samples"] == samples and sleeps == []
    assert gpu["clocks_event_reason_window_s"] is None
    counted = [n for n in gpu["clocks_event_reason_names"] if n in result["thresholds"]["throttle_reasons"]]
    assert result["healthy"] is (not counted)
    assert all("held in most readings" not in p and "):" in p for p in result["problems"])


def test_a_window_of_two_readings():
    result, gpu, sleeps, reads = _judge([0x40, 0], clock_samples=2)
    assert gpu["clocks_event_reason_samples"] == [0x40, 0] and sleeps == [0.5] and len(reads) == 2
    assert result["healthy"] is True and "HW thermal slowdown 1 of 2 readings" in result["notes"][0]


def test_a_reading_that_fails_mid_window_ends_it():
    masks = [0x40, 0x40]

    def reasons(handle):
        if not masks:
            raise StubError(15)
        return masks.pop(0)
    stub = CountingStub(1, nvmlDeviceGetCurrentClocksEventReasons=reasons)
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub, sleep=lambda seconds: None)
    gpu = result["gpus"][0]
    assert gpu["clocks_event_reason_samples"] == [0x40, 0x40] and gpu["error"] is None
    assert "HW thermal slowdown 2 of 2" in result["problems"][0]


def test_the_window_is_bounded_in_real_time():
    stub, reads = _clocks_stub([0x40, 0, 0x40, 0])
    result = gpuhealth.check(gpuhealth.effective_thresholds({"clock_samples": 4, "clock_sample_interval_ms": 50}),
                             set(), pynvml=stub)
    gpu = result["gpus"][0]
    assert gpu["clocks_event_reason_samples"] == [0x40, 0, 0x40, 0]
    assert 0.1 <= gpu["clocks_event_reason_window_s"] < 60
    # (2 of 4 is not most: a note, with the window's real length)
    assert result["notes"] == ["GPU 0 (bus 18): clocks held down for a moment only (HW thermal slowdown 2 of 4 readings "
                               "over %.1f s): a reason that comes and goes under load counts only when it holds in "
                               "most readings" % gpu["clocks_event_reason_window_s"]]


@pytest.mark.parametrize("mask, names", [
    (0x4, ["sw_power_cap"]), (0x8, []), (0x48, ["hw_thermal_slowdown", "hw_slowdown"]),
    (0x88, ["hw_power_brake_slowdown", "hw_slowdown"]), (0x20, ["sw_thermal_slowdown"]), (0x1 | 0x2 | 0x200, []),
])
def test_windowed_reasons(mask, names):
    assert gpuhealth.windowed_reasons(mask) == names


# ------------------------------------------------------------ the PCIe link


@pytest.mark.parametrize("changes, thresholds, expected", [
    # the width is judged when the generation cannot be read, idle or not
    ({"pcie_gen": None, "pcie_max_gen": None, "pcie_width": 8, "clocks_event_reason_names": ["gpu_idle"]}, {},
     ["PCIe link Gen? x8, the card can do Gen? x16"]),
    ({"pcie_gen": None, "pcie_max_gen": None}, {}, []),
    ({"pcie_width": None, "pcie_gen": 3}, {}, ["PCIe link Gen3 x?, the card can do Gen5 x16"]),
    ({"pcie_width": None, "pcie_gen": 3, "clocks_event_reason_names": ["gpu_idle"]}, {}, []),
    ({"pcie_max_width": None, "pcie_width": 1}, {}, []),
    ({"pcie_width": 8, "pcie_gen": 1, "clocks_event_reason_names": ["gpu_idle"]}, {},
     ["PCIe link Gen1 x8, the card can do Gen5 x16"]),
    ({"pcie_width": 8}, {"pcie_below_max_is_problem": False}, []),
])
def test_pcie_width_always_generation_under_load(changes, thresholds, expected):
    problems, dummy = gpuhealth.evaluate_gpu(healthy_gpu(**changes), gpuhealth.effective_thresholds(thresholds))
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected):
        assert fragment in problem, problem


def test_half_a_pcie_link_unknown():
    stub = CountingStub(1, nvmlDeviceGetCurrPcieLinkGeneration=_raise(3), nvmlDeviceGetMaxPcieLinkGeneration=_raise(3),
                        nvmlDeviceGetCurrPcieLinkWidth=lambda handle: 4)
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub)
    gpu = result["gpus"][0]
    assert gpu["unknown"] == ["remapped_rows", "temperature_slowdown", "pcie_gen", "pcie_max_gen"]
    assert (gpu["pcie_gen"], gpu["pcie_width"], gpu["pcie_max_gen"], gpu["pcie_max_width"]) == (None, 4, None, 16)
    assert "PCIe link Gen? x4, the card can do Gen? x16" in result["problems"][0]
    assert result["summary"].endswith("not judged: remapped_rows, temperature_slowdown, pcie_gen, pcie_max_gen on GPU 0")


# ------------------------------------------------------------ thresholds of the window and ECC


@pytest.mark.parametrize("thresholds, fragment", [
    ({"clock_samples": 0}, "thresholds.clock_samples must be a whole number from 1 to 20"),
    ({"clock_samples": 21}, "from 1 to 20 (the readings of a transient clock event reason, such as 5; 1: one reading "
                            "decides); got 21"),
    ({"clock_samples": True}, "thresholds.clock_samples must be"),
    ({"clock_sample_interval_ms": 49}, "thresholds.clock_sample_interval_ms must be a whole number of milliseconds "
                                       "from 50 to 2000 (such as 500); got 49"),
    ({"clock_sample_interval_ms": 2001}, "got 2001"),
    ({"clock_samples": 20, "clock_sample_interval_ms": 600}, "make a window of 11400 ms; at most 10000 ms"),
    ({"clock_sample_interval_ms": 2000, "clock_samples": 7}, "make a window of 12000 ms"),
    ({"ecc_off_allowed": "yes"}, "thresholds.ecc_off_allowed must be true or false"),
    ({"remapped_rows_failure_allowed": 1}, "thresholds.remapped_rows_failure_allowed must be true or false"),
])
def test_validate_window_and_ecc_thresholds(thresholds, fragment):
    problems = gpuhealth.validate_thresholds(thresholds)
    assert len(problems) == 1 and fragment in problems[0], problems


def test_window_edges_accepted():
    for thresholds in ({"clock_samples": 1}, {"clock_samples": 20, "clock_sample_interval_ms": 500},
                       {"clock_samples": 6, "clock_sample_interval_ms": 2000}, {"clock_sample_interval_ms": 50}):
        assert gpuhealth.validate_thresholds(thresholds) == [], thresholds


def test_effective_thresholds_keep_defaults_for_none_and_ignore_unknown_keys():
    t = gpuhealth.effective_thresholds({"max_temperature_c": None, "clock_samples": 3, "bogus": 1})
    assert t["max_temperature_c"] == 85 and t["clock_samples"] == 3 and "bogus" not in t


# ------------------------------------------------------------ branches of the reading and the summary


def test_processes_the_driver_cannot_list_are_unknown():
    stub = CountingStub(1, nvmlDeviceGetComputeRunningProcesses_v3=_raise(3))
    gpu = gpuhealth.check(DEFAULTS, set(), pynvml=stub)["gpus"][0]
    assert gpu["processes"] is None and gpu["unknown"][-1] == "processes"


def test_the_summary_groups_unknown_fields_by_gpus():
    gpus = []
    for index, unknown in enumerate([["ecc_errors", "power"], ["ecc_errors", "power"], ["power"], []]):
        gpu = gpuhealth._empty_gpu(index)
        gpu.update(unknown=unknown, problems=[])
        gpus.append(gpu)
    assert gpuhealth._summary(gpus) == ("all 4 GPUs healthy; not readable on this card or driver, so not judged: "
                                        "ecc_errors on GPUs 0-1; power on GPUs 0-2")
    gpus[2]["problems"] = ["x"]
    assert gpuhealth._summary(gpus).startswith("1 of 4 GPUs unhealthy (GPU 2); ")


def test_proc_walk_edges(tmp_path):
    root = fake_proc(tmp_path, {1: 0, 100: 1, 101: 100})
    (tmp_path / "proc" / "102").mkdir()
    (tmp_path / "proc" / "102" / "stat").write_text("102 (no parent field")  # no ')': unreadable, skipped
    (tmp_path / "proc" / "103").mkdir()  # no stat at all
    assert gpuhealth.descendants(100, root) == {100, 101}
    assert gpuhealth.descendants(100, str(tmp_path / "missing")) == set()
    # the walk reads at most max_entries processes
    assert gpuhealth.descendants(100, root, max_entries=1) in ({100}, {100, 101})
    assert gpuhealth.allowed_pids(None, 0, root) == set()
