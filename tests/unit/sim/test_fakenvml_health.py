# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake NVML library's health calls, driven by the real pynvml (nvidia-ml-py).

As test_fakenvml.py: every probe is a fresh Python process with
LD_LIBRARY_PATH at the built libnvidia-ml.so.1 and FAKE_NVML_STATE at a
temporary state file.  One test per fault key, the defaults, NOT_SUPPORTED.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import load_source

pytest.importorskip("pynvml")

state = load_source("fakenvml_state_for_health", "tests", "sim", "fakenvml", "state.py")

# every health reading of GPU i, or the NVML error's value in its place
PRELUDE = """
import json
import pynvml as n
out = {}

def read(fn, *args):
    try:
        value = fn(*args)
    except n.NVMLError as exc:
        return "error %d" % exc.value
    return list(value) if isinstance(value, (list, tuple)) else value

def health(i):
    h = n.nvmlDeviceGetHandleByIndex(i)
    return {
        "ecc_mode": read(n.nvmlDeviceGetEccMode, h),
        "ecc_unc_vol": read(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                            n.NVML_VOLATILE_ECC),
        "ecc_unc_agg": read(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                            n.NVML_AGGREGATE_ECC),
        "ecc_cor_vol": read(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
        "ecc_cor_agg": read(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_AGGREGATE_ECC),
        "retired": read(n.nvmlDeviceGetRetiredPagesPendingStatus, h),
        "remapped": read(n.nvmlDeviceGetRemappedRows, h),
        "events": read(n.nvmlDeviceGetCurrentClocksEventReasons, h),
        "throttle": read(n.nvmlDeviceGetCurrentClocksThrottleReasons, h),
        "temp": read(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        "temp_v": read(n.nvmlDeviceGetTemperatureV, h, n.NVML_TEMPERATURE_GPU),
        "slowdown": read(n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "shutdown": read(n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        "power": read(n.nvmlDeviceGetPowerUsage, h),
        "power_limit": read(n.nvmlDeviceGetEnforcedPowerLimit, h),
        "pcie": [read(n.nvmlDeviceGetCurrPcieLinkGeneration, h), read(n.nvmlDeviceGetCurrPcieLinkWidth, h)],
        "pcie_max": [read(n.nvmlDeviceGetMaxPcieLinkGeneration, h), read(n.nvmlDeviceGetMaxPcieLinkWidth, h)],
        "pcie_gpu_max_gen": read(n.nvmlDeviceGetGpuMaxPcieLinkGeneration, h),
        "persistence": read(n.nvmlDeviceGetPersistenceMode, h),
    }

n.nvmlInit()
"""

HEALTHY = {
    "ecc_mode": [1, 1], "ecc_unc_vol": 0, "ecc_unc_agg": 0, "ecc_cor_vol": 0, "ecc_cor_agg": 0,
    "retired": 0, "remapped": [0, 0, 0, 0], "events": 1, "throttle": 1, "temp": 35, "temp_v": 35,
    "slowdown": 90, "shutdown": 95, "power": 32000, "power_limit": 600000, "pcie": [5, 16], "pcie_max": [5, 16],
    "pcie_gpu_max_gen": 5, "persistence": 1,
}
NOT_SUPPORTED = "error 3"


def probe(lib_dir, state_file, body="out['gpus'] = [health(i) for i in range(n.nvmlDeviceGetCount())]"):
    code = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir, FAKE_NVML_STATE=state_file)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def set_state(state_file, **pairs):
    state.update_state(lambda d: d.update(dict((k.replace("__", "."), str(v)) for k, v in pairs.items())), state_file)


def only_gpu3_differs(out, **changed):
    """GPU 3 reads HEALTHY with CHANGED applied, every other GPU reads HEALTHY."""
    for i, gpu in enumerate(out["gpus"]):
        want = dict(HEALTHY, **changed) if i == 3 else HEALTHY
        assert gpu == want, (i, gpu)


def test_healthy_defaults(lib_dir, state_file):
    out = probe(lib_dir, state_file)
    assert out["gpus"] == [HEALTHY] * 8


@pytest.mark.parametrize("pairs, changed", [
    ({"gpu__3__ecc_uncorrected_volatile": 2, "gpu__3__ecc_uncorrected_aggregate": 9},
     {"ecc_unc_vol": 2, "ecc_unc_agg": 9}),
    ({"gpu__3__ecc_corrected_volatile": 40, "gpu__3__ecc_corrected_aggregate": 1000},
     {"ecc_cor_vol": 40, "ecc_cor_agg": 1000}),
    ({"gpu__3__retired_pages_pending": 1}, {"retired": 1}),
    ({"gpu__3__remapped_rows_failure": 1}, {"remapped": [0, 0, 0, 1]}),
    ({"gpu__3__remapped_rows_pending": "true", "gpu__3__remapped_rows_uncorrected": 2,
      "gpu__3__remapped_rows_corrected": 1}, {"remapped": [1, 2, 1, 0]}),
    ({"gpu__3__clocks_event_reasons": "0x48"}, {"events": 0x48, "throttle": 0x48}),
    ({"gpu__3__clocks_event_reasons": "128"}, {"events": 0x80, "throttle": 0x80}),
    ({"gpu__3__temperature_c": 91, "gpu__3__temperature_slowdown_c": 87}, {"temp": 91, "temp_v": 91, "slowdown": 87}),
    ({"gpu__3__power_mw": 598000, "gpu__3__power_limit_mw": 450000}, {"power": 598000, "power_limit": 450000}),
    ({"gpu__3__pcie_gen": 3}, {"pcie": [3, 16]}),
    ({"gpu__3__pcie_width": 8}, {"pcie": [5, 8]}),
    ({"gpu__3__pcie_max_gen": 4, "gpu__3__pcie_gen": 4}, {"pcie": [4, 16], "pcie_max": [4, 16]}),
    ({"gpu__3__persistence_mode": 0}, {"persistence": 0}),
    ({"gpu__3__ecc_pending_mode": 0}, {"ecc_mode": [1, 0]}),
], ids=["ecc-uncorrected", "ecc-corrected", "retired-pages", "remap-failure", "remap-pending", "throttle-hex",
        "throttle-decimal", "temperature", "power", "pcie-gen", "pcie-width", "pcie-slot-gen4", "persistence",
        "ecc-pending-off"])
def test_fault_on_one_gpu(lib_dir, state_file, pairs, changed):
    set_state(state_file, **pairs)
    only_gpu3_differs(probe(lib_dir, state_file), **changed)


def test_default_keys_apply_to_every_gpu(lib_dir, state_file):
    set_state(state_file, default__temperature_c=70, gpu__3__temperature_c=40)
    out = probe(lib_dir, state_file)
    assert [g["temp"] for g in out["gpus"]] == [70, 70, 70, 40, 70, 70, 70, 70]


def test_ecc_off_counters_not_supported(lib_dir, state_file):
    set_state(state_file, gpu__3__ecc_mode=0, gpu__3__ecc_uncorrected_volatile=5)
    only_gpu3_differs(probe(lib_dir, state_file), ecc_mode=[0, 0], ecc_unc_vol=NOT_SUPPORTED,
                      ecc_unc_agg=NOT_SUPPORTED, ecc_cor_vol=NOT_SUPPORTED, ecc_cor_agg=NOT_SUPPORTED)


def test_unsupported_fields_answer_not_supported(lib_dir, state_file):
    set_state(state_file, gpu__3__unsupported="ecc, remapped_rows,pcie,nonsense")
    only_gpu3_differs(probe(lib_dir, state_file), ecc_unc_vol=NOT_SUPPORTED, ecc_unc_agg=NOT_SUPPORTED,
                      ecc_cor_vol=NOT_SUPPORTED, ecc_cor_agg=NOT_SUPPORTED, remapped=NOT_SUPPORTED,
                      pcie=[NOT_SUPPORTED] * 2, pcie_max=[NOT_SUPPORTED] * 2, pcie_gpu_max_gen=NOT_SUPPORTED)


def test_unsupported_all(lib_dir, state_file):
    set_state(state_file, default__unsupported="all")
    out = probe(lib_dir, state_file)
    for gpu in out["gpus"]:
        flat = [v for value in gpu.values() for v in (value if isinstance(value, list) else [value])]
        assert set(flat) == {NOT_SUPPORTED}, gpu


def test_lost_gpu_answers_gpu_is_lost(lib_dir, state_file):
    set_state(state_file, gpu__3__lost=1)
    out = probe(lib_dir, state_file)
    assert set(v for value in out["gpus"][3].values()
               for v in (value if isinstance(value, list) else [value])) == {"error 15"}


def test_bad_values_keep_the_default(lib_dir, state_file):
    set_state(state_file, gpu__3__temperature_c="hot", gpu__3__clocks_event_reasons="-1",
              gpu__3__pcie_width="99999999999", gpu__3__power_mw="")
    only_gpu3_differs(probe(lib_dir, state_file))


def test_each_call_rereads_the_state(lib_dir, state_file):
    out = probe(lib_dir, state_file, """
        import subprocess, sys
        h = n.nvmlDeviceGetHandleByIndex(3)
        out["before"] = n.nvmlDeviceGetCurrPcieLinkWidth(h)
        subprocess.run([sys.executable, %r, "set", "gpu.3.pcie_width=4"], check=True)
        out["after"] = n.nvmlDeviceGetCurrPcieLinkWidth(h)
    """ % os.path.join(os.path.dirname(state.__file__), "state.py"))
    assert (out["before"], out["after"]) == (16, 4)


def test_other_sensors_and_thresholds(lib_dir, state_file):
    out = probe(lib_dir, state_file, """
        h = n.nvmlDeviceGetHandleByIndex(0)
        out["gpu_max"] = read(n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)
        out["acoustic"] = read(n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX)
        out["ecc_bad_type"] = read(n.nvmlDeviceGetTotalEccErrors, h, 2, 0)
    """)
    assert out == {"gpu_max": 90, "acoustic": NOT_SUPPORTED, "ecc_bad_type": "error 2"}


def test_before_init_uninitialized(lib_dir, state_file):
    out = probe(lib_dir, state_file, """
        h = n.nvmlDeviceGetHandleByIndex(0)
        n.nvmlShutdown()
        out["temp"] = read(n.nvmlDeviceGetTemperature, h, 0)
        out["pcie"] = read(n.nvmlDeviceGetCurrPcieLinkGeneration, h)
    """)
    assert out == {"temp": "error 1", "pcie": "error 1"}


def test_temperature_v_off_answers_function_not_found(lib_dir, state_file):
    # a driver older than nvmlDeviceGetTemperatureV: pynvml raises FunctionNotFound (13), the old call still answers
    set_state(state_file, temperature_v=0)
    out = probe(lib_dir, state_file)
    assert out["gpus"] == [dict(HEALTHY, temp_v="error 13")] * 8


def test_a_reported_gpu_count_no_host_has(lib_dir, state_file):
    set_state(state_file, reported_gpu_count=4294967295)
    out = probe(lib_dir, state_file, """
        out["count"] = n.nvmlDeviceGetCount()
        out["handle_8"] = read(n.nvmlDeviceGetHandleByIndex, 8)
        out["gpu_0"] = health(0)
    """)
    assert out == {"count": 4294967295, "handle_8": "error 2", "gpu_0": HEALTHY}


def test_unsupported_pcie_gen_leaves_the_width(lib_dir, state_file):
    set_state(state_file, gpu__3__unsupported="pcie_gen", gpu__3__pcie_width=8)
    only_gpu3_differs(probe(lib_dir, state_file), pcie=[NOT_SUPPORTED, 8], pcie_max=[NOT_SUPPORTED, 16],
                      pcie_gpu_max_gen=NOT_SUPPORTED)


def test_clocks_event_reasons_seq_answers_in_turn(lib_dir, state_file):
    set_state(state_file, gpu__3__clocks_event_reasons_seq="0x88, 0,4", gpu__2__clocks_event_reasons_seq="0x4,-1,8")
    out = probe(lib_dir, state_file, """
        h3, h2 = n.nvmlDeviceGetHandleByIndex(3), n.nvmlDeviceGetHandleByIndex(2)
        out["gpu3"] = [n.nvmlDeviceGetCurrentClocksEventReasons(h3) for i in range(5)]
        out["gpu2"] = [n.nvmlDeviceGetCurrentClocksThrottleReasons(h2) for i in range(2)]
        out["gpu0"] = n.nvmlDeviceGetCurrentClocksEventReasons(n.nvmlDeviceGetHandleByIndex(0))
    """)
    # (a bad item ends the list: GPU 2's is 0x4 alone)
    assert out == {"gpu3": [0x88, 0, 4, 4, 4], "gpu2": [4, 4], "gpu0": 1}


def test_reported_procs_answers_the_size_query(lib_dir, state_file):
    set_state(state_file, gpu__3__reported_procs=100000)
    out = probe(lib_dir, state_file, """
        import ctypes
        fn = n._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
        for i in (3, 2):
            count = ctypes.c_uint(0)
            out["gpu%d" % i] = [fn(n.nvmlDeviceGetHandleByIndex(i), ctypes.byref(count), None), count.value]
        out["listed"] = len(n.nvmlDeviceGetComputeRunningProcesses_v3(n.nvmlDeviceGetHandleByIndex(3)))
    """)
    # (NVML_SUCCESS with 0: no process; the list itself is the real one)
    assert out == {"gpu3": [7, 100000], "gpu2": [0, 0], "listed": 0}
