#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_health_info
short_description: Judge the health of a host's GPUs through NVML before the host is touched
version_added: 0.1.0
description:
  - Reads every GPU of the host through NVML with nvidia-ml-py (C(pynvml)), never by parsing C(nvidia-smi) output,
    and judges it against O(thresholds) - uncorrected ECC errors, retired pages pending, memory row remapping pending
    or failed, clock event (throttle) reasons, temperature, PCIe link generation and width below the card's maximum,
    persistence mode, and compute processes other than the allowed ones.
  - Each problem is a sentence that names the GPU (index and PCI bus), what was found, the limit and why it matters;
    for example GPU 3 (bus 5D) with a PCIe link at Gen3 x16 where the card can do Gen5 x16 is a degraded link, and
    a degraded link starves all-reduce over PCIe.
  - Each field is read on its own. A field the card or driver does not have (NVML answers C(NOT_SUPPORTED) or the call
    does not exist, as for ECC on a card without it) is V(null), listed in RV(gpus[].unknown) and not judged (it is
    unknown); it fails the task only when O(required) names it.
  - ECC turned off on a card that has it is a problem of its own (its memory errors are then neither corrected nor
    counted, so the ECC counters prove nothing), unless O(thresholds.ecc_off_allowed=true). So is ECC on but set to
    turn off at the next GPU reset or reboot (its pending mode off), with the same threshold.
  - The PCIe link width is judged on every reading (it does not drop at idle), also when the generation cannot be
    read. The generation is judged from one reading, and only while the GPU is busy (its clock event reasons do not
    include V(gpu_idle)). An idle link slows down to save power, so a generation below the maximum on an idle GPU is
    only a note, unless O(thresholds.pcie_gen_below_max_when_idle_is_problem=true). A check on an idle host therefore
    does not prove the generation; the rollout's check just before the stop runs under the host's load and does.
  - Clock event reasons are of two kinds. Transient ones come and go within a second under load - V(sw_power_cap),
    V(sw_thermal_slowdown), V(hw_thermal_slowdown), V(hw_power_brake_slowdown), and V(hw_slowdown) when the same
    reading names one of those two hardware causes; when the first reading shows one that counts, the reasons are
    read again, up to O(thresholds.clock_samples) readings O(thresholds.clock_sample_interval_ms) apart (a few
    seconds at most), and it counts only when present in most of them (a note otherwise). Every other reason (such
    as V(hw_slowdown) alone, held by the hardware) counts at once, as do the persistent findings (ECC, retired pages,
    remapped rows, the link width, persistence mode, temperature, foreign processes).
  - Temperature is read with C(nvmlDeviceGetTemperatureV) where nvidia-ml-py and the driver have it, else with the
    older C(nvmlDeviceGetTemperature), which NVML marks for removal; RV(gpus[].temperature_source) says which.
  - A GPU count above 64 (the NVIDIA driver manages at most 32 GPUs in a system) is a broken answer from NVML; the
    task says so, naming the count, and reads no GPU.
  - Read-only; RV(changed) is always V(false).
options:
  thresholds:
    description:
      - The limits. Every key is optional; one not given keeps its default.
    type: dict
    suboptions:
      max_uncorrected_ecc_errors:
        description:
          - The most uncorrected ECC errors since the driver loaded (volatile counter) a GPU may have.
        type: int
        default: 0
      max_uncorrected_ecc_errors_aggregate:
        description:
          - The most uncorrected ECC errors over the GPU's life (aggregate counter); not judged when unset.
        type: int
      retired_pages_pending_allowed:
        description:
          - Whether a retired memory page waiting for a GPU reset is acceptable.
        type: bool
        default: false
      remapped_rows_pending_allowed:
        description:
          - Whether a memory row remapping waiting for a GPU reset is acceptable.
        type: bool
        default: false
      remapped_rows_failure_allowed:
        description:
          - Whether a failed memory row remapping (no spare row left) is acceptable.
        type: bool
        default: false
      throttle_reasons:
        description:
          - The clock event reasons that count as a problem, from V(gpu_idle), V(applications_clocks_setting),
            V(sw_power_cap), V(hw_slowdown), V(sync_boost), V(sw_thermal_slowdown), V(hw_thermal_slowdown),
            V(hw_power_brake_slowdown), V(display_clock_setting), V(board_limit) and V(reliability).
          - The default leaves out V(gpu_idle) and V(applications_clocks_setting) (normal) and V(sw_power_cap)
            (normal under full load); add it to catch a power cap set too low.
        type: list
        elements: str
        default: [hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, sw_thermal_slowdown]
      max_temperature_c:
        description:
          - The highest GPU temperature in degrees Celsius, from 20 to 120.
        type: int
        default: 85
      pcie_below_max_is_problem:
        description:
          - Whether a PCIe link below the card's maximum generation or width is a problem.
        type: bool
        default: true
      pcie_gen_below_max_when_idle_is_problem:
        description:
          - Whether a generation below the maximum counts while the GPU is idle (clock event reason V(gpu_idle)), when
            the link slows down to save power.
        type: bool
        default: false
      persistence_mode_required:
        description:
          - Whether persistence mode off is a problem.
        type: bool
        default: true
      other_processes_allowed:
        description:
          - Whether compute processes other than O(allowed_pids) and the family of O(allowed_parent_pid) may be on
            the GPUs.
        type: bool
        default: false
      ecc_off_allowed:
        description:
          - Whether ECC turned off (on a card that has it), or set to turn off at the next GPU reset or reboot, is
            acceptable. With ECC off, uncorrected memory errors are neither corrected nor counted.
        type: bool
        default: false
      clock_samples:
        description:
          - The most readings of the clock event reasons when the first shows a transient reason that counts, from
            1 (the first reading decides) to 20; a transient reason counts when present in more than half of them.
        type: int
        default: 5
      clock_sample_interval_ms:
        description:
          - Milliseconds between those readings, from 50 to 2000; (O(thresholds.clock_samples) - 1) x this is at most
            10000.
        type: int
        default: 500
  required:
    description:
      - Fields every GPU must be able to report. A field named here that the card or driver cannot report
        (RV(gpus[].unknown)) is a problem, where it is otherwise left out of the verdict.
      - V(ecc) (ECC's mode and its counters since the driver loaded), V(ecc_mode), V(ecc_errors),
        V(ecc_errors_aggregate), V(retired_pages), V(remapped_rows), V(clocks_event_reasons), V(temperature),
        V(temperature_slowdown), V(power), V(power_limit), V(pcie) (generation and width), V(pcie_max),
        V(persistence_mode) or V(processes); for example V([ecc, remapped_rows]) for a fleet of data-center cards.
    type: list
    elements: str
    default: []
  expected_gpu_count:
    description:
      - The number of GPUs the host had when it was read before (the rollout passes its pre-flight's count). Fewer
        now is a problem (a GPU lost since), whatever the GPUs read; more is not judged.
    type: int
  allowed_pids:
    description:
      - Process ids that may use the GPUs.
    type: list
    elements: int
    default: []
  allowed_parent_pid:
    description:
      - A process id, such as the C(MainPID) of the vLLM unit, that may use the GPUs together with all its descendants
        (vLLM's workers are its children), read from C(/proc) in one bounded walk. V(0) or unset - none.
    type: int
  allowed_parent_pids:
    description:
      - More process ids like O(allowed_parent_pid), each with its descendants; for example the C(MainPID) of another
        model's unit that a model switch stops next. V(0) entries are ignored.
    type: list
    elements: int
    default: []
  allowed_unit:
    description:
      - A systemd unit, such as the vLLM unit, whose main process may use the GPUs together with all its descendants,
        as with O(allowed_parent_pid). Its C(MainPID) is read here, just before the GPUs, so it is never a stale one.
        A unit that is not loaded or does not run allows nothing.
      - The name as C(systemctl) takes it (C(vllm-kimi-k25) is C(vllm-kimi-k25.service)).
    type: str
  allowed_unit_dir:
    description:
      - A directory of units the M(gpufleet.vllm.managed_units) way (the files the service role rendered there). The
        servers of those units that run or start at boot and may share a GPU with O(allowed_unit) (any of them
        without it) may use the GPUs too, with their descendants, for example another model's server that a model
        switch stops next. The units are read as M(gpufleet.vllm.managed_units) reads them.
      - A directory that does not exist allows nothing more. A unit, or a directory, that C(systemctl) cannot read
        fails the task, saying which, whatever O(fail_when_unhealthy) says (the GPUs are not judged).
    type: path
  fail_when_unhealthy:
    description:
      - If V(true), the task fails when any GPU has a problem or NVML cannot be used, with every problem in the
        message (GPUs with the same problem on one line, such as C(GPUs 0-7); RV(problems) keeps a line per GPU).
      - If V(false), it succeeds and RV(healthy) says the verdict (for the audit, or to skip a host).
    type: bool
    default: true
  call_timeout:
    description:
      - Seconds NVML may take to answer. NVML calls cannot be interrupted, so a hung driver would hang the task; past
        this limit the module stops waiting and reports RV(nvml_error.name=NVML_TIMEOUT).
    type: int
    default: 60
  register_facts:
    description:
      - If V(true), also return the result as the host fact C(gpufleet_gpu_health) (see RV(ansible_facts)).
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - Needs the NVIDIA driver (its C(libnvidia-ml.so.1)) and the Python package nvidia-ml-py on the managed host.
  - Reading other users' processes (their names, and C(/proc) for O(allowed_parent_pid)) needs C(become).
requirements:
  - Python 3.10 or newer on the managed host.
  - nvidia-ml-py (the C(pynvml) module) on the managed host.
  - The NVIDIA driver with C(libnvidia-ml.so.1).
seealso:
  - module: gpufleet.vllm.nvml_vram_info
  - name: NVML API reference
    description: The NVIDIA Management Library calls this module makes.
    link: https://docs.nvidia.com/deploy/nvml-api/
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Refuse to touch a host with an unhealthy GPU
  gpufleet.vllm.gpu_health_info:

- name: Judge the GPUs while vLLM runs (its processes allowed), without failing, for the audit
  gpufleet.vllm.gpu_health_info:
    allowed_parent_pid: "{{ vllm_unit.status.MainPID | int }}"
    fail_when_unhealthy: false
    register_facts: true
  register: health

- name: Before the stop - the vLLM unit's processes and another model's server on the same GPUs are allowed
  gpufleet.vllm.gpu_health_info:
    allowed_unit: vllm-kimi-k25.service
    allowed_unit_dir: /etc/systemd/system

- name: Stricter limits - 80 C, and a power cap counts as a problem
  gpufleet.vllm.gpu_health_info:
    thresholds:
      max_temperature_c: 80
      throttle_reasons: [hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, sw_thermal_slowdown, sw_power_cap]

- name: A fleet of data-center cards - ECC and remapped rows must be readable, and no GPU lost since the plan
  gpufleet.vllm.gpu_health_info:
    required: [ecc, remapped_rows]
    expected_gpu_count: 8

- name: Skip the host when unhealthy
  ansible.builtin.meta: end_host
  when: not health.healthy
"""

RETURN = r"""
check_mode:
  description: Whether the module ran in check mode (it reads only).
  returned: always
  type: bool
  sample: false
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
healthy:
  description: Whether NVML answered, found at least one GPU, and no GPU has a problem.
  returned: always
  type: bool
  sample: true
summary:
  description: One line for the operator.
  returned: always
  type: str
  sample: "1 of 8 GPUs unhealthy (GPU 3)"
problems:
  description: Every problem of every GPU, one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["GPU 3 (bus 5D): PCIe link Gen3 x16, the card can do Gen5 x16: a degraded link starves all-reduce over
           PCIe; reseat the card or check its slot and riser"]
notes:
  description: What was seen and is not a problem (a PCIe generation below the maximum while idle).
  returned: always
  type: list
  elements: str
nvml_available:
  description: Whether NVML could be opened.
  returned: always
  type: bool
nvml_error:
  description: The NVML fault when NVML cannot be used, else V(null).
  returned: always
  type: dict
  contains:
    name:
      description:
        - The NVML error constant, for example C(NVML_ERROR_DRIVER_NOT_LOADED), or C(PYNVML_NOT_INSTALLED) when
          nvidia-ml-py is missing, C(NVML_TIMEOUT) when NVML did not answer within O(call_timeout) seconds.
      type: str
    text:
      description: The error text NVML gives for it, for example C(Driver Not Loaded).
      type: str
    gpu_index:
      description: The GPU the error came from, or V(null) for a host-wide error.
      type: int
    message:
      description: A sentence that says what is wrong and what to do.
      type: str
gpu_count:
  description: The number of GPUs NVML reports.
  returned: always
  type: int
  sample: 8
thresholds:
  description: The thresholds applied, defaults filled in.
  returned: always
  type: dict
required:
  description: The fields required (O(required)).
  returned: always
  type: list
  elements: str
expected_gpu_count:
  description: O(expected_gpu_count), or V(null).
  returned: always
  type: int
gpus:
  description: One entry per GPU with its readings (V(null) where unknown), problems and notes.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: The NVML index.
      type: int
    name:
      description: The product name.
      type: str
    uuid:
      description: The GPU UUID.
      type: str
    pci_bus_id:
      description: The PCI bus id.
      type: str
    ecc_mode:
      description: Whether ECC is on (V(null) when unknown); C(ecc_mode_pending) is the mode after the next reset.
      type: bool
    ecc_uncorrected_volatile:
      description: Uncorrected ECC errors since the driver loaded; C(ecc_corrected_volatile), C(ecc_uncorrected_aggregate)
        and C(ecc_corrected_aggregate) are the other counters.
      type: int
    retired_pages_pending:
      description: Whether a retired page waits for a reset.
      type: bool
    remapped_rows_pending:
      description: Whether a row remapping waits for a reset; C(remapped_rows_failure), C(remapped_rows_corrected) and
        C(remapped_rows_uncorrected) are the other remapping figures.
      type: bool
    clocks_event_reasons:
      description: The NVML clock event reasons bit mask; C(clocks_event_reason_names) lists them by name.
      type: int
    temperature_c:
      description: The GPU temperature in degrees Celsius; C(temperature_slowdown_c) is where the card slows down.
      type: int
    temperature_source:
      description: The NVML call that read the temperature, C(nvmlDeviceGetTemperatureV) or the older
        C(nvmlDeviceGetTemperature); V(null) when it could not be read.
      type: str
      sample: nvmlDeviceGetTemperatureV
    clocks_event_reason_samples:
      description: Every reading of the clock event reasons bit mask, the first one first (more than one when a
        transient reason was judged over a window); C(clocks_event_reason_window_s) is the seconds they took.
      type: list
      elements: int
    power_w:
      description: The power draw in watts; C(power_limit_w) is the enforced limit.
      type: float
    pcie_gen:
      description: The current PCIe link generation; C(pcie_width), C(pcie_max_gen), C(pcie_max_width) and
        C(pcie_gpu_max_gen) are the width and the maximums.
      type: int
    persistence_mode:
      description: Whether persistence mode is on.
      type: bool
    processes:
      description: The compute processes (C(pid), C(used_mib), C(name)); V(null) when the driver cannot list them.
      type: list
      elements: dict
    unknown:
      description: The fields this card or driver cannot report (not judged, unless O(required)); C(pcie_gen),
        C(pcie_width), C(pcie_max_gen) or C(pcie_max_width) when only that half of a PCIe link cannot be read.
      type: list
      elements: str
      sample: [ecc_errors, remapped_rows]
    error:
      description: The NVML error that kept this GPU from being read (C(name), C(text), C(message)), else V(null).
      type: dict
    problems:
      description: This GPU's problems.
      type: list
      elements: str
    notes:
      description: This GPU's notes.
      type: list
      elements: str
    healthy:
      description: Whether this GPU has no problem.
      type: bool
ansible_facts:
  description: Only with O(register_facts=true).
  returned: when O(register_facts=true)
  type: dict
  contains:
    gpufleet_gpu_health:
      description: C(healthy), C(summary), C(problems), C(notes), C(gpu_count) and C(gpus) (as RV(gpus)).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.gpuhealth import (
    allowed_pids,
    check_bounded,
    effective_thresholds,
    thresholds_argument_spec,
    validate_required,
    validate_thresholds,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.nvml import compact_mismatches
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown
from ansible_collections.gpufleet.vllm.plugins.module_utils.systemd import (
    SystemdError,
    managed_units,
    others_to_stop,
    reader,
    show,
    unit_name,
)

UNIT_READ_TIMEOUT = 30


def unit_parents(module, unit, unit_dir):
    """The MainPIDs (above 0) of UNIT and of the managed units in UNIT_DIR that may share its GPUs, read now."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        module.fail_json(msg="systemctl is not on this host's PATH, so the units whose processes may use the GPUs "
                             "(allowed_unit, allowed_unit_dir) cannot be read; the GPUs were not judged.", changed=False)
    run = reader(UNIT_READ_TIMEOUT)
    pids = []
    try:
        if unit:
            pid = show(run, systemctl, unit).get("MainPID") or 0
            if pid > 0:
                pids.append(pid)
        if unit_dir:
            for other in others_to_stop(managed_units(run, systemctl, unit_dir, keep=unit or None)):
                if isinstance(other["main_pid"], int) and other["main_pid"] > 0 and other["main_pid"] not in pids:
                    pids.append(other["main_pid"])
    except SystemdError as exc:
        module.fail_json(msg="The units whose processes may use the GPUs cannot be read (%s): %s. The GPUs were not "
                             "judged; nothing was changed." % (
                                 ", ".join(shown(v) for v in (unit, unit_dir) if v), exc), changed=False)
    return pids


def main():
    module = AnsibleModule(
        argument_spec=dict(
            thresholds=thresholds_argument_spec(),
            required=dict(type="list", elements="str", default=[]),
            expected_gpu_count=dict(type="int"),
            allowed_pids=dict(type="list", elements="int", default=[]),
            allowed_parent_pid=dict(type="int"),
            allowed_parent_pids=dict(type="list", elements="int", default=[]),
            allowed_unit=dict(type="str"),
            allowed_unit_dir=dict(type="path"),
            fail_when_unhealthy=dict(type="bool", default=True),
            call_timeout=dict(type="int", default=60),
            register_facts=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    thresholds = dict((k, v) for k, v in (params["thresholds"] or {}).items() if v is not None)
    problems = validate_thresholds(thresholds, params["allowed_pids"], params["allowed_parent_pid"] or None)
    parents = [params["allowed_parent_pid"]] if params["allowed_parent_pid"] else []
    for index, pid in enumerate(params["allowed_parent_pids"]):
        if pid and not 1 <= pid <= 4194304:
            problems.append("allowed_parent_pids[%d] must be a process id from 1 to 4194304 (such as the MainPID of "
                            "a vLLM unit), or 0 for none; got %r" % (index, pid))
        elif pid and pid not in parents:
            parents.append(pid)
    unit = ""
    if params["allowed_unit"]:
        try:
            unit = unit_name(params["allowed_unit"])
        except ValueError as exc:
            problems.append("allowed_unit %s %s: give the unit's name, for example vllm-kimi-k25.service" % (
                shown(params["allowed_unit"]), exc))
    if params["allowed_unit_dir"] and not params["allowed_unit_dir"].startswith("/"):
        problems.append("allowed_unit_dir must be an absolute path, got %s" % shown(params["allowed_unit_dir"]))
    problems.extend(validate_required(params["required"]))
    if params["expected_gpu_count"] is not None and not 0 <= params["expected_gpu_count"] <= 64:
        problems.append("expected_gpu_count must be a number of GPUs from 0 to 64 (such as 8, the count read before), "
                        "or unset; got %d" % params["expected_gpu_count"])
    if params["call_timeout"] < 1:
        problems.append("call_timeout must be at least 1 second; got %d" % params["call_timeout"])
    if problems:
        module.fail_json(msg="Invalid options for gpufleet.vllm.gpu_health_info: " + " ".join(
            p if p.endswith(".") else p + "." for p in problems), changed=False)

    from_units = []
    if unit or params["allowed_unit_dir"]:
        from_units = [pid for pid in unit_parents(module, unit, params["allowed_unit_dir"]) if pid not in parents]
        parents.extend(from_units)
    effective = effective_thresholds(thresholds)
    allowed = set(allowed_pids(params["allowed_pids"], None))
    for parent in parents:
        allowed |= allowed_pids([], parent)
    result = check_bounded(effective, allowed, params["call_timeout"], required=params["required"],
                           expected_count=params["expected_gpu_count"])
    for parent in parents:
        if parent not in allowed:
            result["notes"].append("%s %d is not a running process (a stale MainPID?): no process was allowed "
                                   "through it" % ("allowed_parent_pid" if parent == params["allowed_parent_pid"]
                                                   else "the MainPID of a unit read just before"
                                                   if parent in from_units else "allowed_parent_pids entry", parent))
    result["check_mode"] = module.check_mode
    if params["register_facts"]:
        result["ansible_facts"] = {"gpufleet_gpu_health": dict(
            (k, result[k]) for k in ("healthy", "summary", "problems", "notes", "gpu_count", "gpus"))}

    if not result["healthy"] and params["fail_when_unhealthy"]:
        if not result["nvml_available"]:
            msg = "GPU health cannot be judged: %s" % (result["nvml_error"] or {}).get("message", "NVML is not usable")
        else:
            msg = "\n".join(["GPU health: %s:" % result["summary"]] + compact_mismatches(result["problems"]))
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
