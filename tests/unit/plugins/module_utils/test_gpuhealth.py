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
    assert result["healthy"] is False


def test_older_throttle_call_and_unknowns():
    stub = StubNvml()
    stub.nvmlDeviceGetPersistenceMode = lambda handle: 1
    result = gpuhealth.check(DEFAULTS, set(), pynvml=stub)
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
        "hw_thermal_slowdown, hw_power_brake_slowdown, sw_thermal_slowdown): this GPU runs slower, and a "
        "tensor-parallel model runs at the pace of its slowest GPU; check cooling and power"]


def test_hung_driver_gives_nvml_timeout():
    release = threading.Event()
    try:
        result = gpuhealth.check_bounded(DEFAULTS, set(), call_timeout=1, pynvml=StubNvml(hang=release))
    finally:
        release.set()
    assert result["healthy"] is False and result["nvml_available"] is False
    assert result["nvml_error"]["name"] == "NVML_TIMEOUT"
    assert result["summary"].startswith("GPU health unknown: NVML is not usable on this host: NVML_TIMEOUT")
