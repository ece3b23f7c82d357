# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.gpu_health_info against the fake NVML library, one test per health fault.

The module runs as Ansible runs it on a host (its file executed by Python with
the arguments as JSON), with LD_LIBRARY_PATH at the fake libnvidia-ml.so.1 and
FAKE_NVML_STATE at a temporary state file: the real pynvml code path.
"""

import os
import subprocess
import sys
import time

import pytest

import fakesystemd
from helpers import load_source, run_nvml_module

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "gpu_health_info.py")

state = load_source("fakenvml_state_for_gpu_health", "tests", "sim", "fakenvml", "state.py")


# lib_dir and state_file: fixtures of tests/unit/conftest.py


def run_module(args, state_file, lib_dir, check_mode=False, pythonpath_extra=None):
    """Run the module file like Ansible does; return (exit code, result dict)."""
    return run_nvml_module(MODULE, args, state_file, lib_dir, check_mode=check_mode, pythonpath_extra=pythonpath_extra)


def set_state(state_file, **pairs):
    state.update_state(lambda d: d.update(dict((k.replace("__", "."), str(v)) for k, v in pairs.items())), state_file)


def unhealthy(state_file, lib_dir, args=None, **pairs):
    """Set PAIRS, run the module; assert it failed for GPU 3 alone; return (result, GPU 3's problem)."""
    set_state(state_file, **pairs)
    rc, res = run_module(args or {}, state_file, lib_dir)
    assert rc == 1 and res["failed"] is True, res
    assert res["healthy"] is False and res["nvml_available"] is True
    assert [g["index"] for g in res["gpus"] if not g["healthy"]] == [3], res["problems"]
    assert res["summary"].startswith("1 of 8 GPUs unhealthy (GPU 3)")
    assert len(res["gpus"][3]["problems"]) == 1, res["gpus"][3]["problems"]
    problem = res["gpus"][3]["problems"][0]
    assert problem.startswith("GPU 3 (bus 5D): ")
    assert res["problems"] == [problem]
    assert problem in res["msg"] and res["msg"].startswith("GPU health: 1 of 8 GPUs unhealthy (GPU 3)")
    return res, problem


def spawn_holder():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


# ------------------------------------------------------------- healthy host


def test_healthy_default_host_passes(lib_dir, state_file):
    rc, res = run_module({"register_facts": True}, state_file, lib_dir)
    assert rc == 0, res.get("msg")
    assert res["healthy"] is True and res["changed"] is False and res["problems"] == []
    assert res["summary"] == "all 8 GPUs healthy"
    assert res["gpu_count"] == 8 and len(res["gpus"]) == 8
    gpu = res["gpus"][0]
    assert gpu["ecc_mode"] is True and gpu["ecc_uncorrected_volatile"] == 0
    assert gpu["retired_pages_pending"] is False
    assert (gpu["remapped_rows_pending"], gpu["remapped_rows_failure"]) == (False, False)
    assert gpu["clocks_event_reason_names"] == ["gpu_idle"]
    assert (gpu["temperature_c"], gpu["temperature_slowdown_c"]) == (35, 90)
    assert (gpu["power_w"], gpu["power_limit_w"]) == (32.0, 600.0)
    assert (gpu["pcie_gen"], gpu["pcie_width"], gpu["pcie_max_gen"], gpu["pcie_max_width"]) == (5, 16, 5, 16)
    assert gpu["persistence_mode"] is True and gpu["processes"] == [] and gpu["unknown"] == []
    facts = res["ansible_facts"]["gpufleet_gpu_health"]
    assert facts["healthy"] is True and facts["summary"] == res["summary"] and len(facts["gpus"]) == 8
    assert res["thresholds"]["max_temperature_c"] == 85


def test_check_mode_reads_the_same(lib_dir, state_file):
    set_state(state_file, gpu__3__temperature_c=95)
    rc, res = run_module({"fail_when_unhealthy": False}, state_file, lib_dir, check_mode=True)
    assert rc == 0 and res["check_mode"] is True and res["changed"] is False
    assert res["healthy"] is False and res["gpus"][3]["temperature_c"] == 95


def test_unhealthy_without_failing_for_the_audit(lib_dir, state_file):
    set_state(state_file, gpu__3__persistence_mode=0)
    rc, res = run_module({"fail_when_unhealthy": False}, state_file, lib_dir)
    assert rc == 0 and not res.get("failed")
    assert res["healthy"] is False and len(res["problems"]) == 1


# ------------------------------------------------------- one test per fault


def test_uncorrected_ecc_errors(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__ecc_uncorrected_volatile=2)
    assert "2 uncorrected ECC errors since the driver loaded (at most 0 allowed)" in problem
    assert res["gpus"][3]["ecc_uncorrected_volatile"] == 2


def test_uncorrected_ecc_errors_within_the_threshold(lib_dir, state_file):
    set_state(state_file, gpu__3__ecc_uncorrected_volatile=2)
    rc, res = run_module({"thresholds": {"max_uncorrected_ecc_errors": 2}}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True


def test_aggregate_ecc_errors_only_when_asked(lib_dir, state_file):
    set_state(state_file, gpu__3__ecc_uncorrected_aggregate=7)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 0 and res["gpus"][3]["ecc_uncorrected_aggregate"] == 7
    res, problem = unhealthy(state_file, lib_dir, {"thresholds": {"max_uncorrected_ecc_errors_aggregate": 5}})
    assert "7 uncorrected ECC errors over the GPU's life (at most 5 allowed)" in problem


def test_retired_pages_pending(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__retired_pages_pending=1)
    assert "retired memory page is pending" in problem and "reset" in problem


def test_remapped_rows_failure(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__remapped_rows_failure=1)
    assert "row remapping failed" in problem and "RMA" in problem
    assert res["gpus"][3]["remapped_rows_failure"] is True


def test_remapped_rows_pending(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__remapped_rows_pending=1, gpu__3__remapped_rows_uncorrected=1)
    assert "row remapping is pending" in problem
    assert res["gpus"][3]["remapped_rows_uncorrected"] == 1


@pytest.mark.parametrize("mask, text", [
    ("0x8", "HW slowdown"),
    ("0x40", "HW thermal slowdown"),
    ("0x80", "HW power brake slowdown"),
    ("0x20", "SW thermal slowdown"),
])
def test_throttle_reason_counted(lib_dir, state_file, mask, text):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__clocks_event_reasons=mask)
    assert "clocks held down by %s (" % text in problem and "slowest GPU" in problem


@pytest.mark.parametrize("mask", ["0x1", "0x2", "0x4", "0x0"])
def test_throttle_reason_not_counted_by_default(lib_dir, state_file, mask):
    set_state(state_file, gpu__3__clocks_event_reasons=mask)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True, res.get("msg")


def test_sw_power_cap_counted_when_asked(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, {"thresholds": {"throttle_reasons": ["sw_power_cap"]}},
                             gpu__3__clocks_event_reasons="0x4")
    assert "clocks held down by SW power cap (the reasons counted as problems: sw_power_cap)" in problem


def test_temperature_above_the_limit(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__temperature_c=88)
    assert "88 C, above the limit of 85 C (the card slows itself down at 90 C)" in problem


def test_temperature_limit_is_a_threshold(lib_dir, state_file):
    set_state(state_file, gpu__3__temperature_c=88)
    rc, res = run_module({"thresholds": {"max_temperature_c": 90}}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True


def test_pcie_generation_below_max_under_load(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__pcie_gen=3, gpu__3__clocks_event_reasons=0)
    assert problem == ("GPU 3 (bus 5D): PCIe link Gen3 x16, the card can do Gen5 x16: a degraded link starves "
                       "all-reduce over PCIe; reseat the card or check its slot and riser")


def test_pcie_generation_below_max_while_idle_is_a_note(lib_dir, state_file):
    set_state(state_file, gpu__3__pcie_gen=1)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True
    assert res["notes"] == ["GPU 3 (bus 5D): PCIe link Gen1 while the GPU is idle (it can do Gen5): the link slows "
                            "down to save power when idle, so the generation is judged only under load"]
    res, problem = unhealthy(state_file, lib_dir, {"thresholds": {"pcie_gen_below_max_when_idle_is_problem": True}})
    assert "PCIe link Gen1 x16, the card can do Gen5 x16" in problem


def test_pcie_width_below_max(lib_dir, state_file):
    # idle or not, a narrow link is a fault (the width does not drop to save power)
    res, problem = unhealthy(state_file, lib_dir, gpu__3__pcie_width=8)
    assert "PCIe link Gen5 x8, the card can do Gen5 x16: a degraded link starves all-reduce" in problem


def test_pcie_not_judged_when_asked(lib_dir, state_file):
    set_state(state_file, gpu__3__pcie_width=8)
    rc, res = run_module({"thresholds": {"pcie_below_max_is_problem": False}}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True


def test_persistence_mode_off(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__persistence_mode=0)
    assert "persistence mode is off" in problem and "nvidia-persistenced" in problem


def test_foreign_process(lib_dir, state_file):
    holder = spawn_holder()
    try:
        state.claim(holder.pid, 2048, [3], state_file)
        res, problem = unhealthy(state_file, lib_dir)
        assert "1 process not of the served model: pid %d %s (2048 MiB)" % (holder.pid, sys.executable) in problem
        rc, res = run_module({"allowed_pids": [holder.pid]}, state_file, lib_dir)
        assert rc == 0 and res["healthy"] is True
    finally:
        holder.kill()
        holder.wait()


def test_descendants_of_the_allowed_parent_are_allowed(lib_dir, state_file):
    holder = spawn_holder()  # a child of this test process
    other = spawn_holder()
    try:
        state.claim(holder.pid, 90000, [3], state_file)
        rc, res = run_module({"allowed_parent_pid": os.getpid()}, state_file, lib_dir)
        assert rc == 0 and res["healthy"] is True, res.get("msg")
        # the holder is no descendant of the other process
        res, problem = unhealthy(state_file, lib_dir, {"allowed_parent_pid": other.pid})
        assert "pid %d" % holder.pid in problem
        assert res["notes"] == []
    finally:
        for proc in (holder, other):
            proc.kill()
            proc.wait()


def test_more_allowed_parents_each_allow_their_family(lib_dir, state_file):
    # a model switch: the unit's MainPID and the other model's, stopped next
    holder = spawn_holder()
    other = spawn_holder()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        state.claim(holder.pid, 90000, [3], state_file)
        state.claim(other.pid, 90000, [4], state_file)
        rc, res = run_module({"allowed_parent_pid": holder.pid}, state_file, lib_dir)
        problems = " ".join(res["problems"])
        assert rc == 1 and "pid %d" % other.pid in problems and "pid %d" % holder.pid not in problems
        rc, res = run_module({"allowed_parent_pid": holder.pid, "allowed_parent_pids": [other.pid, 0, gone.pid]},
                             state_file, lib_dir)
        assert rc == 0 and res["healthy"] is True, res.get("msg")
        assert res["notes"] == ["allowed_parent_pids entry %d is not a running process (a stale MainPID?): no "
                                "process was allowed through it" % gone.pid]
    finally:
        for proc in (holder, other):
            proc.kill()
            proc.wait()


MARKED = "# Ansible managed\n# vLLM server for %s, rendered by the gpufleet.vllm.service role.\n[Unit]\nDescription=vLLM\n"
SERVER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"


def _server_pid(path, deadline=30.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read())
        time.sleep(0.05)
    raise AssertionError("the unit's server did not start: %s" % path)


def test_the_units_servers_are_allowed_their_main_pids_read_by_the_task(lib_dir, state_file, tmp_path, monkeypatch):
    # the rollout's check before the stop: the vLLM unit's server (a child of its MainPID, as vLLM's workers are),
    # and after a model switch the other model's server on the same GPUs, stopped next
    systemd_dir = str(tmp_path / "systemd")
    for key, value in fakesystemd.install(str(tmp_path / "bin"), systemd_dir).items():
        monkeypatch.setenv(key, value)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    names = ("vllm-kimi-k25.service", "vllm-minimax-m25.service")
    servers = {}
    try:
        for name in names:
            (unit_dir / name).write_text(MARKED % name)
            fakesystemd.write_unit(systemd_dir, name, [sys.executable, "-c", SERVER, str(tmp_path / (name + ".pid"))])
            subprocess.run(["systemctl", "start", name], check=True, timeout=60)
            servers[name] = _server_pid(str(tmp_path / (name + ".pid")))
        state.claim(servers[names[0]], 90000, [3], state_file)
        state.claim(servers[names[1]], 90000, [4], state_file)
        # the unit alone: the other model's server is a stranger on GPU 4
        rc, res = run_module({"allowed_unit": "vllm-kimi-k25"}, state_file, lib_dir)
        problems = " ".join(res["problems"])
        assert rc == 1 and "pid %d" % servers[names[1]] in problems and "pid %d" % servers[names[0]] not in problems
        # the directory of the units the service role rendered: both servers
        rc, res = run_module({"allowed_unit": "vllm-kimi-k25", "allowed_unit_dir": str(unit_dir)}, state_file, lib_dir)
        assert rc == 0 and res["healthy"] is True and res["notes"] == [], res.get("msg")
        # a unit that no longer runs allows nothing: its MainPID is read by the task, never a stale one
        subprocess.run(["systemctl", "stop", names[1]], check=True, timeout=60)
        holder = spawn_holder()
        try:
            state.claim(holder.pid, 2048, [4], state_file)
            rc, res = run_module({"allowed_unit": "vllm-kimi-k25", "allowed_unit_dir": str(unit_dir)}, state_file,
                                 lib_dir)
            assert rc == 1 and "pid %d" % holder.pid in " ".join(res["problems"])
            # (the stopped server's MainPID is not allowed as a stale one either: systemd says 0, nothing noted)
            assert res["notes"] == []
        finally:
            holder.kill()
            holder.wait()
    finally:
        for name in names:
            subprocess.run(["systemctl", "stop", name], check=False, timeout=60)


def test_units_that_cannot_be_read_fail_without_judging(lib_dir, state_file, tmp_path, monkeypatch):
    systemd_dir = str(tmp_path / "systemd")
    for key, value in fakesystemd.install(str(tmp_path / "bin"), systemd_dir).items():
        monkeypatch.setenv(key, value)
    # (systemctl show itself fails)
    with open(str(tmp_path / "bin" / "systemctl"), "w") as handle:
        handle.write("#!/bin/sh\necho 'Failed to connect to bus: No such file or directory' >&2\nexit 1\n")
    rc, res = run_module({"allowed_unit": "vllm-kimi-k25"}, state_file, lib_dir)
    assert rc == 1 and "gpus" not in res, res
    assert res["msg"].startswith("The units whose processes may use the GPUs cannot be read ('vllm-kimi-k25.service'): ")
    assert "Failed to connect to bus" in res["msg"] and res["msg"].endswith("The GPUs were not judged; nothing was changed.")


def test_allowed_parent_not_running_is_noted(lib_dir, state_file):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    holder = spawn_holder()
    try:
        state.claim(holder.pid, 90000, [3], state_file)
        res, problem = unhealthy(state_file, lib_dir, {"allowed_parent_pid": gone.pid})
        assert res["notes"] == ["allowed_parent_pid %d is not a running process (a stale MainPID?): no process was "
                                "allowed through it" % gone.pid]
    finally:
        holder.kill()
        holder.wait()


def test_not_supported_fields_are_unknown_not_failing(lib_dir, state_file):
    set_state(state_file, gpu__3__unsupported="ecc,ecc_mode,retired_pages,remapped_rows,pcie,persistence_mode",
              gpu__3__ecc_uncorrected_volatile=5, gpu__3__remapped_rows_failure=1, gpu__3__pcie_width=4)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True, res.get("msg")
    gpu = res["gpus"][3]
    assert gpu["unknown"] == ["ecc_mode", "ecc_errors", "ecc_errors_aggregate", "retired_pages", "remapped_rows", "pcie",
                              "pcie_max", "persistence_mode"]
    assert gpu["ecc_uncorrected_volatile"] is None and gpu["remapped_rows_failure"] is None
    assert gpu["pcie_width"] is None and gpu["persistence_mode"] is None
    assert gpu["temperature_c"] == 35  # the other fields are still read
    assert res["summary"] == ("all 8 GPUs healthy; not readable on this card or driver, so not judged: ecc_mode, "
                              "ecc_errors, ecc_errors_aggregate, retired_pages, remapped_rows, pcie, pcie_max, "
                              "persistence_mode on GPU 3")


def test_ecc_off_leaves_the_counters_unknown(lib_dir, state_file):
    set_state(state_file, default__ecc_mode=0)
    rc, res = run_module({"thresholds": {"ecc_off_allowed": True}}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True
    assert all(g["ecc_mode"] is False and "ecc_errors" in g["unknown"] for g in res["gpus"])
    assert "ecc_errors, ecc_errors_aggregate on GPUs 0-7" in res["summary"]


# ------------------------------------------------------- GPU health as real cards report it


def test_ecc_off_is_a_problem_of_its_own(lib_dir, state_file):
    # uncorrected errors with ECC off are not counted (the counters answer NOT_SUPPORTED): not "healthy"
    res, problem = unhealthy(state_file, lib_dir, gpu__3__ecc_mode=0, gpu__3__ecc_uncorrected_volatile=5)
    assert problem == ("GPU 3 (bus 5D): ECC is off: the GPU's memory errors are neither corrected nor counted, so an "
                       "uncorrected error goes unseen and corrupts results silently; turn it on ('nvidia-smi -i 3 -e "
                       "1', then a GPU reset or a reboot), or allow it with thresholds.ecc_off_allowed")
    assert res["gpus"][3]["ecc_uncorrected_volatile"] is None and "ecc_errors" in res["gpus"][3]["unknown"]
    # turned on for the next reset: said so
    res, problem = unhealthy(state_file, lib_dir, gpu__3__ecc_pending_mode=1)
    assert "(it is set to turn on at the next GPU reset or reboot)" in problem


def test_ecc_on_now_but_off_after_the_next_reset_is_a_problem(lib_dir, state_file):
    # (nvmlDeviceGetEccMode answers current on, pending off: after the next reset the card runs without ECC)
    res, problem = unhealthy(state_file, lib_dir, gpu__3__ecc_pending_mode=0)
    assert res["gpus"][3]["ecc_mode"] is True and res["gpus"][3]["ecc_mode_pending"] is False
    assert problem == ("GPU 3 (bus 5D): ECC is on but set to turn off at the next GPU reset or reboot: after it, the "
                       "GPU's memory errors are neither corrected nor counted; keep it on ('nvidia-smi -i 3 -e 1'), or "
                       "allow it with thresholds.ecc_off_allowed")
    rc, res = run_module({"thresholds": {"ecc_off_allowed": True}}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True, res.get("msg")


def test_required_fields_the_card_cannot_report(lib_dir, state_file):
    set_state(state_file, gpu__3__unsupported="ecc,remapped_rows")
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True and res["required"] == []  # unknown: out of the verdict by default
    rc, res = run_module({"required": ["ecc", "remapped_rows"]}, state_file, lib_dir)
    assert rc == 1 and res["healthy"] is False and res["required"] == ["ecc", "remapped_rows"]
    assert res["summary"].startswith("1 of 8 GPUs unhealthy (GPU 3); not readable on this card or driver")
    assert [p.split(" cannot be read", 1)[0] for p in res["problems"]] == [
        "GPU 3 (bus 5D): ecc_errors", "GPU 3 (bus 5D): remapped_rows"]
    assert "and ecc is required: this GPU's health cannot be proven without it" in res["problems"][0]
    # a field every GPU reports is no problem when required
    rc, res = run_module({"required": ["temperature", "pcie"]}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True


def test_required_names_are_checked(lib_dir, state_file):
    rc, res = run_module({"required": ["ecc", "ECC"]}, state_file, lib_dir)
    assert rc == 1 and "gpus" not in res
    assert "required has unknown fields 'ECC'; known: clocks_event_reasons, ecc, " in res["msg"]


def test_temperature_through_the_current_call(lib_dir, state_file):
    set_state(state_file, gpu__3__temperature_c=91)
    dummy, res = run_module({"fail_when_unhealthy": False}, state_file, lib_dir)
    assert [g["temperature_source"] for g in res["gpus"]] == ["nvmlDeviceGetTemperatureV"] * 8
    assert res["gpus"][3]["temperature_c"] == 91 and "91 C, above the limit of 85 C" in res["problems"][0]


def test_temperature_falls_back_to_the_old_call(lib_dir, state_file):
    # a driver without nvmlDeviceGetTemperatureV (pynvml raises FunctionNotFound)
    set_state(state_file, temperature_v=0, gpu__3__temperature_c=91)
    dummy, res = run_module({"fail_when_unhealthy": False}, state_file, lib_dir)
    assert [g["temperature_source"] for g in res["gpus"]] == ["nvmlDeviceGetTemperature"] * 8
    assert res["gpus"][3]["temperature_c"] == 91 and "91 C, above the limit of 85 C" in res["problems"][0]
    assert all("temperature" not in g["unknown"] for g in res["gpus"])


def test_a_gpu_lost_since_the_count_before(lib_dir, state_file):
    rc, res = run_module({"expected_gpu_count": 8}, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True and res["expected_gpu_count"] == 8
    set_state(state_file, gpu_count=7)
    rc, res = run_module({"expected_gpu_count": 8}, state_file, lib_dir)
    assert rc == 1 and res["healthy"] is False and res["gpu_count"] == 7
    assert res["summary"] == "7 GPUs found where 8 are expected; all 7 GPUs healthy"
    assert res["msg"].splitlines()[1].startswith("NVML reports 7 GPUs where 8 are expected (expected_gpu_count, the "
                                                 "count read before): a GPU was lost since")


def test_an_absurd_gpu_count_is_refused_naming_it(lib_dir, state_file):
    set_state(state_file, reported_gpu_count=4294967295)
    rc, res = run_module({"call_timeout": 30}, state_file, lib_dir)
    assert rc == 1 and res["nvml_available"] is False and res["gpus"] == []
    assert res["nvml_error"]["name"] == "NVML_UNEXPECTED"
    assert res["msg"].startswith("GPU health cannot be judged: NVML is not usable on this host: NVML_UNEXPECTED (NVML "
                                 "reports 4294967295 GPUs on this host, which no host has (at most 64 are believed")
    assert "NVML_TIMEOUT" not in res["msg"]


def test_a_broken_process_count_is_the_gpus_error(lib_dir, state_file):
    set_state(state_file, gpu__3__reported_procs=100000)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 1 and res["summary"] == "1 of 8 GPUs unhealthy (GPU 3)"
    assert res["gpus"][3]["error"]["name"] == "NVML_UNEXPECTED"
    assert "NVML lists 100000 compute processes on one GPU, more than any GPU runs (at most 4096 are believed)" in \
        res["problems"][0]


def test_a_momentary_clock_event_reason_is_not_counted(lib_dir, state_file):
    # a power brake in one reading of five (under load, before the drain): a note, not a skipped host
    window = {"thresholds": {"clock_sample_interval_ms": 50}}
    set_state(state_file, gpu__3__clocks_event_reasons_seq="0x88,0,0,0,0")
    rc, res = run_module(window, state_file, lib_dir)
    assert rc == 0 and res["healthy"] is True, res.get("msg")
    assert res["gpus"][3]["clocks_event_reason_samples"] == [0x88, 0, 0, 0]
    assert res["notes"][0].startswith("GPU 3 (bus 5D): clocks held down for a moment only (HW slowdown 1 of 4, HW power "
                                      "brake slowdown 1 of 4 readings over ")
    assert res["gpus"][0]["clocks_event_reason_samples"] == [0x1]  # idle: read once
    # held in most readings: a problem
    set_state(state_file, gpu__3__clocks_event_reasons_seq="0x88,0,0x88,0x88")
    res, problem = unhealthy(state_file, lib_dir, window)
    assert res["gpus"][3]["clocks_event_reason_samples"] == [0x88, 0, 0x88, 0x88]
    assert "clocks held down by HW slowdown, HW power brake slowdown (the reasons counted as problems: " in problem
    assert "held in most readings over " in problem and "(HW slowdown 3 of 4, HW power brake slowdown 3 of 4)" in problem


def test_hw_slowdown_alone_counts_at_once(lib_dir, state_file):
    set_state(state_file, gpu__3__clocks_event_reasons_seq="0x8,0,0,0,0")
    res, problem = unhealthy(state_file, lib_dir)
    assert res["gpus"][3]["clocks_event_reason_samples"] == [0x8]
    assert "clocks held down by HW slowdown (the reasons counted as problems: " in problem


def test_pcie_width_judged_when_the_generation_cannot_be_read(lib_dir, state_file):
    res, problem = unhealthy(state_file, lib_dir, gpu__3__unsupported="pcie_gen", gpu__3__pcie_width=8)
    assert "PCIe link Gen? x8, the card can do Gen? x16: a degraded link" in problem
    assert res["gpus"][3]["unknown"] == ["pcie_gen", "pcie_max_gen"]
    assert (res["gpus"][3]["pcie_width"], res["gpus"][3]["pcie_max_width"]) == (8, 16)


def test_lost_gpu_is_a_problem(lib_dir, state_file):
    set_state(state_file, gpu__3__lost=1)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 1 and res["healthy"] is False and res["summary"] == "1 of 8 GPUs unhealthy (GPU 3)"
    # its bus cannot be read either
    assert res["problems"] == [
        "GPU 3: NVML cannot query it: NVML_ERROR_GPU_IS_LOST (GPU is lost); a host with a GPU in this state must not "
        "serve. The GPU fell off the bus or stopped responding: look for Xid errors in 'dmesg' (Xid 79 means fallen "
        "off the bus); the GPU needs a reset or the host a reboot before it can serve again."]
    assert res["gpus"][3]["error"]["name"] == "NVML_ERROR_GPU_IS_LOST"


def test_driver_not_loaded(lib_dir, state_file):
    set_state(state_file, init_error="DRIVER_NOT_LOADED")
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 1 and res["healthy"] is False and res["nvml_available"] is False
    assert res["msg"].startswith("GPU health cannot be judged: NVML is not usable on this host: "
                                 "NVML_ERROR_DRIVER_NOT_LOADED")


def test_several_faults_on_several_gpus(lib_dir, state_file):
    set_state(state_file, gpu__1__temperature_c=99, gpu__6__pcie_width=4, gpu__6__persistence_mode=0)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 1 and res["summary"] == "2 of 8 GPUs unhealthy (GPUs 1, 6)"
    assert len(res["gpus"][6]["problems"]) == 2 and len(res["problems"]) == 3
    assert res["msg"].splitlines()[0] == "GPU health: 2 of 8 GPUs unhealthy (GPUs 1, 6):"
    assert all(line.startswith(("GPU 1 (bus 2A): ", "GPU 6 (bus BA): ")) for line in res["msg"].splitlines()[1:])


def test_same_problem_on_every_gpu_is_one_line(lib_dir, state_file):
    set_state(state_file, default__persistence_mode=0)
    rc, res = run_module({}, state_file, lib_dir)
    assert rc == 1 and res["summary"] == "8 of 8 GPUs unhealthy (GPUs 0-7)"
    assert len(res["problems"]) == 8
    assert res["msg"] == ("GPU health: 8 of 8 GPUs unhealthy (GPUs 0-7):\nGPUs 0-7: persistence mode is off: the "
                          "driver tears the GPU down whenever no process holds it, which slows every start and loses "
                          "its state; enable it (nvidia-persistenced)")


# ------------------------------------------------------------ bad options


@pytest.mark.parametrize("args, text", [
    ({"thresholds": {"max_temperature_c": 500}}, "thresholds.max_temperature_c must be a whole number of degrees "
                                                 "Celsius from 20 to 120 (such as 85); got 500"),
    ({"thresholds": {"max_uncorrected_ecc_errors": -1}}, "thresholds.max_uncorrected_ecc_errors must be a whole "
                                                         "number of 0 or more"),
    ({"thresholds": {"throttle_reasons": ["hw_slowdwn"]}}, "thresholds.throttle_reasons has unknown reasons "
                                                           "'hw_slowdwn'; known: gpu_idle,"),
    ({"allowed_pids": [0]}, "allowed_pids must be process ids from 1 to 4194304; got 0"),
    ({"allowed_parent_pid": -4}, "allowed_parent_pid must be a process id from 1 to 4194304"),
    ({"allowed_parent_pids": [5, -4]}, "allowed_parent_pids[1] must be a process id from 1 to 4194304"),
    ({"call_timeout": 0}, "call_timeout must be at least 1 second; got 0"),
    ({"allowed_unit": "vllm/../x"}, "allowed_unit 'vllm/../x' holds characters a unit name cannot have"),
    ({"allowed_unit_dir": "units"}, "allowed_unit_dir must be an absolute path, got 'units'"),
    ({"expected_gpu_count": 65}, "expected_gpu_count must be a number of GPUs from 0 to 64"),
    ({"thresholds": {"clock_samples": 30}}, "thresholds.clock_samples must be a whole number from 1 to 20"),
])
def test_bad_options_are_refused(lib_dir, state_file, args, text):
    rc, res = run_module(args, state_file, lib_dir)
    assert rc == 1 and res["failed"] is True
    assert res["msg"].startswith("Invalid options for gpufleet.vllm.gpu_health_info: ")
    assert text in res["msg"], res["msg"]
    assert "gpus" not in res  # refused before NVML was read


def test_unknown_threshold_key_is_refused_by_ansible(lib_dir, state_file):
    rc, res = run_module({"thresholds": {"max_temp": 80}}, state_file, lib_dir)
    assert rc == 1 and "max_temp" in res["msg"]
