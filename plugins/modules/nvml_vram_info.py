#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvml_vram_info
short_description: Read the GPUs of a host through NVML and check count, model, compute capability and VRAM
version_added: 0.1.0
description:
  - Reads every GPU of the host through NVML with nvidia-ml-py (C(pynvml)), never by parsing C(nvidia-smi) output.
    For each GPU it returns the index, name, UUID, PCI bus id, compute capability, memory total, used and free in MiB,
    and the running compute processes (PID, memory, process name when readable); for the host the driver version, the
    CUDA driver version and the GPU count.
  - Optionally checks an expectation (O(expect)) such as "8 GPUs named like RTX PRO 6000, compute capability 12.0,
    at least 90000 MiB used on each" after a model load, or "at most 1024 MiB used and no process" after the service
    stopped. On a mismatch the task fails with a line per problem that says what was expected and what is there;
    GPUs with the same problem share one line (such as C(GPUs 0-7 ...)), and RV(mismatches) keeps a line per GPU.
  - With O(timeout), the check is repeated every O(interval) seconds until it holds (freed memory can take seconds
    to show after a stop, a large model loads for minutes); RV(waited) says how long it took.
  - Memory comes from the NVML v2 memory call where the driver has it (then RV(gpus[].memory_used_mib) excludes the
    memory the driver reserves for itself, reported as RV(gpus[].memory_reserved_mib)), else from the v1 call (used
    includes the reserved memory). RV(gpus[].memory_source) says which.
  - Read-only; RV(changed) is always V(false).
options:
  timeout:
    description:
      - Seconds to keep checking until O(expect) holds. V(0) checks once.
      - NVML faults (driver not loaded, a lost GPU, ...) fail at once; waiting does not repair them.
    type: int
    default: 0
  interval:
    description:
      - Seconds between two checks while waiting.
    type: float
    default: 2.0
  call_timeout:
    description:
      - Seconds NVML may take to answer, on top of O(timeout). NVML calls cannot be interrupted, so a hung driver
        (a GPU fallen off the bus) would hang the task; past this limit the module stops waiting and reports
        RV(nvml_error.name=NVML_TIMEOUT) as NVML being unavailable (see O(fail_when_unavailable)).
    type: int
    default: 60
  fail_when_unavailable:
    description:
      - What to do when NVML cannot be used (nvidia-ml-py missing, C(libnvidia-ml.so.1) missing, driver not loaded,
        permission denied, a GPU lost).
      - If V(true), the task fails with RV(nvml_available=false) and the NVML error's name and text.
      - If V(false) and O(expect) is empty, the task succeeds with RV(nvml_available=false) and the same error, so a
        play can gather facts on a mixed fleet. With a non-empty O(expect) the task always fails, since nothing
        could be checked.
    type: bool
    default: true
  register_facts:
    description:
      - If V(true), also return the result as the host fact C(gpufleet_gpus) (see RV(ansible_facts)) so later tasks and
        roles (for example C(sm120_config), which asks whether any GPU has compute capability 12.x) can use it without
        C(register).
      - Off by default so that a check step does not replace facts gathered earlier.
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.vllm.nvml_expect
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - Needs the NVIDIA driver (its C(libnvidia-ml.so.1)) and the Python package nvidia-ml-py on the managed host; the
    collection's roles install nvidia-ml-py where they need it (from a wheelhouse on air-gapped fleets).
  - A GPU that NVML cannot query (for example C(NVML_ERROR_GPU_IS_LOST)) makes the whole host unavailable, even when
    it is not in O(expect.gpus), because a host with a lost GPU must not be put back into service.
  - Processes whose name cannot be read (another user's process without become) have RV(gpus[].processes[].name)
    V(null).
  - Text from NVML (GPU and process names, versions) that is not valid UTF-8 or holds control characters is returned
    with those bytes as backslash escapes (C(\xff)), never as an error.
requirements:
  - Python 3.10 or newer on the managed host.
  - nvidia-ml-py (the C(pynvml) module) on the managed host.
  - The NVIDIA driver with C(libnvidia-ml.so.1).
seealso:
  - name: NVML API reference
    description: The NVIDIA Management Library calls this module makes.
    link: https://docs.nvidia.com/deploy/nvml-api/
  - name: nvidia-ml-py on PyPI
    description: The Python bindings for NVML.
    link: https://pypi.org/project/nvidia-ml-py/
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Read the GPUs (facts only)
  gpufleet.vllm.nvml_vram_info:
  register: gpus

- name: Expect 8 RTX PRO 6000 Blackwell GPUs (SM120) with about 96 GiB each
  gpufleet.vllm.nvml_vram_info:
    expect:
      count: 8
      name: RTX PRO 6000
      compute_capability: "12.0"
      min_total_mib: 97000

- name: Wait up to 15 minutes for the model to fill every GPU
  gpufleet.vllm.nvml_vram_info:
    expect:
      count: 8
      min_used_mib: 90000
    timeout: 900
    interval: 10

- name: After stopping the service, wait until the VRAM is free and no process holds a GPU
  gpufleet.vllm.nvml_vram_info:
    expect:
      max_used_mib: 1024
      no_processes: true
    timeout: 60
    interval: 1

- name: Check two GPUs by index and UUID only
  gpufleet.vllm.nvml_vram_info:
    expect:
      gpus: [0, GPU-5a1d3c2e-8f4b-4e6a-9c7d-1b2e3f4a5b6c]
      max_used_mib: 1024

- name: Gather GPU facts on a mixed fleet without failing where NVML is missing
  gpufleet.vllm.nvml_vram_info:
    fail_when_unavailable: false
    register_facts: true

- name: Use the facts
  ansible.builtin.debug:
    msg: "SM120 host: {{ gpufleet_gpus.sm120 }}, GPUs: {{ gpufleet_gpus.count }}"
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (it reads only).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
nvml_available:
  description: Whether NVML answered for the host and for every GPU.
  returned: always
  type: bool
  sample: true
nvml_error:
  description: The NVML fault when RV(nvml_available) is V(false), else V(null).
  returned: always
  type: dict
  sample: {"name": "NVML_ERROR_GPU_IS_LOST", "text": "GPU is lost", "gpu_index": 3,
           "message": "NVML cannot query GPU 3 of 8: NVML_ERROR_GPU_IS_LOST (GPU is lost). The GPU fell off ..."}
  contains:
    name:
      description:
        - The NVML error constant, for example C(NVML_ERROR_DRIVER_NOT_LOADED) or C(NVML_ERROR_LIBRARY_NOT_FOUND), or
          C(PYNVML_NOT_INSTALLED) when nvidia-ml-py is missing, C(NVML_TIMEOUT) when NVML did not answer within
          O(timeout) + O(call_timeout) seconds, C(NVML_UNEXPECTED) when pynvml answered with something that cannot be
          read (such as a GPU count above 64, which no host has - the NVIDIA driver manages at most 32 - or more than
          4096 compute processes on one GPU; neither is read item by item).
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
driver_version:
  description: The NVIDIA driver version.
  returned: when NVML could be initialised
  type: str
  sample: "580.95.05"
cuda_driver_version:
  description: The CUDA version the driver supports, as NVML encodes it (1000 * major + 10 * minor).
  returned: when NVML could be initialised
  type: int
  sample: 13000
cuda_version:
  description: RV(cuda_driver_version) as C(MAJOR.MINOR).
  returned: when NVML could be initialised
  type: str
  sample: "13.0"
nvml_version:
  description: The NVML library version.
  returned: when NVML could be initialised
  type: str
  sample: "13.580.95.05"
gpu_count:
  description: The number of GPUs NVML reports (V(0) when NVML is unavailable).
  returned: always
  type: int
  sample: 8
gpus:
  description: One entry per GPU, by index. A GPU that NVML cannot query has only RV(gpus[].index) and RV(gpus[].error).
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: The NVML index.
      type: int
      sample: 0
    name:
      description: The product name.
      type: str
      sample: NVIDIA RTX PRO 6000 Blackwell Server Edition
    uuid:
      description: The GPU UUID.
      type: str
      sample: GPU-5a1d3c2e-8f4b-4e6a-9c7d-1b2e3f4a5b6c
    pci_bus_id:
      description: The PCI bus id.
      type: str
      sample: "00000000:18:00.0"
    compute_capability:
      description: The CUDA compute capability as C(MAJOR.MINOR).
      type: str
      sample: "12.0"
    compute_capability_major:
      description: The major part of RV(gpus[].compute_capability).
      type: int
      sample: 12
    compute_capability_minor:
      description: The minor part of RV(gpus[].compute_capability).
      type: int
      sample: 0
    memory_total_mib:
      description: Total memory in MiB.
      type: int
      sample: 97887
    memory_used_mib:
      description: Used memory in MiB (without the driver's reserved memory when RV(gpus[].memory_source=v2)).
      type: int
      sample: 90112
    memory_free_mib:
      description: Free memory in MiB.
      type: int
      sample: 7775
    memory_reserved_mib:
      description: Memory the driver reserves, in MiB; V(null) with the v1 call.
      type: int
      sample: 0
    memory_source:
      description: V(v2) or V(v1), the NVML memory call that gave the figures.
      type: str
      sample: v2
    processes:
      description: The compute processes on this GPU; V(null) when the driver cannot list them.
      type: list
      elements: dict
      contains:
        pid:
          description: The process id.
          type: int
        used_mib:
          description: The memory the process uses on this GPU in MiB, V(null) when not available.
          type: int
        name:
          description: The process name (as NVML gives it), V(null) when not readable.
          type: str
    error:
      description: The NVML error for this GPU (C(name), C(text)), else V(null).
      type: dict
summary:
  description: Figures over all GPUs that NVML could query.
  returned: always
  type: dict
  contains:
    count:
      description: Same as RV(gpu_count).
      type: int
    names:
      description: The distinct product names.
      type: list
      elements: str
    compute_capabilities:
      description: The distinct compute capabilities, for example V(["12.0"]).
      type: list
      elements: str
    sm120:
      description: Whether any GPU has compute capability major 12 (Blackwell RTX PRO, SM120).
      type: bool
    memory_total_mib:
      description: Sum of RV(gpus[].memory_total_mib).
      type: int
    memory_used_mib:
      description: Sum of RV(gpus[].memory_used_mib).
      type: int
    memory_free_mib:
      description: Sum of RV(gpus[].memory_free_mib).
      type: int
    process_pids:
      description: The distinct PIDs of the compute processes.
      type: list
      elements: int
expectation_met:
  description: Whether NVML answered and every expectation holds (V(true) with an empty O(expect) and NVML available).
  returned: always
  type: bool
  sample: true
mismatches:
  description: What does not match, the GPU count first, then one line per GPU.
  returned: always
  type: list
  elements: str
  sample:
    - "GPU count: expected 8, found 7"
    - "GPU 2 (GPU-5a1d3c2e-8f4b-4e6a-9c7d-1b2e3f4a5b6c, 00000000:3A:00.0): memory used expected at most 1024 MiB, found 90000 MiB"
waited:
  description: Seconds the module spent reading, checking and waiting.
  returned: always
  type: float
  sample: 4.02
attempts:
  description: How many times the GPUs were read.
  returned: always
  type: int
  sample: 3
ansible_facts:
  description: Only with O(register_facts=true).
  returned: when O(register_facts=true)
  type: dict
  contains:
    gpufleet_gpus:
      description:
        - C(available), C(driver_version), C(cuda_driver_version), C(cuda_version), C(count), C(names),
          C(compute_capabilities), C(sm120) and C(gpus) (as RV(gpus)).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.nvml import (
    collect_bounded,
    expect_argument_spec,
    expectation_given,
    failure_message,
    gpu_facts,
    validate_expect,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            expect=expect_argument_spec(),
            timeout=dict(type="int", default=0),
            interval=dict(type="float", default=2.0),
            call_timeout=dict(type="int", default=60),
            fail_when_unavailable=dict(type="bool", default=True),
            register_facts=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    expect = params["expect"] or {}

    problems = validate_expect(expect)
    if params["timeout"] < 0:
        problems.append("timeout must be 0 (check once) or a number of seconds; got %d" % params["timeout"])
    if params["call_timeout"] < 1:
        problems.append("call_timeout must be at least 1 second; got %d" % params["call_timeout"])
    if params["interval"] <= 0:
        problems.append("interval must be a positive number of seconds; got %s" % params["interval"])
    if problems:
        module.fail_json(msg="Invalid options for gpufleet.vllm.nvml_vram_info: " + " ".join(
            p if p.endswith(".") else p + "." for p in problems), changed=False)

    result = collect_bounded(expect=expect, timeout=params["timeout"], interval=params["interval"],
                             call_timeout=params["call_timeout"])
    result["check_mode"] = module.check_mode
    if params["register_facts"]:
        result["ansible_facts"] = {"gpufleet_gpus": gpu_facts(result)}

    if not result["nvml_available"]:
        if params["fail_when_unavailable"] or expectation_given(expect):
            module.fail_json(msg=failure_message(result), **result)
        module.warn(failure_message(result))
        module.exit_json(**result)
    if result["mismatches"]:
        module.fail_json(msg=failure_message(result, params["timeout"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
