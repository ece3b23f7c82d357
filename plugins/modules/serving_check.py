#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: serving_check
short_description: Refuse a vLLM serving config whose parallelism does not fit the host's GPUs or the model
version_added: 0.1.0
description:
  - Reads the serving config from the unit's own command line (O(argv), the C(ExecStart=) words) and environment
    (O(unit_environment)) - C(--tensor-parallel-size)/C(-tp), C(--pipeline-parallel-size)/C(-pp),
    C(--data-parallel-size)/C(-dp), C(--data-parallel-size-local)/C(-dpl), C(--enable-expert-parallel)/C(-ep),
    C(--gpu-memory-utilization), each as C(--name value) or C(--name=value), and C(CUDA_VISIBLE_DEVICES) - and fails
    when the server could not start on this host, before anything is stopped.
  - "Refused: a malformed value (C(-tp eight), C(--gpu-memory-utilization 1.5), a C(CUDA_VISIBLE_DEVICES) entry that is
    neither an index nor a C(GPU-...) UUID); tensor x pipeline x (local) data parallel sizes larger than the GPUs the
    unit can use (NVML's count, narrowed by C(CUDA_VISIBLE_DEVICES)); a C(CUDA_VISIBLE_DEVICES) entry the host does not
    have; expert parallel for a model whose C(config.json) declares no experts (none of C(n_routed_experts),
    C(num_experts), C(num_local_experts), C(moe_num_experts), also looked up in C(text_config) and the like)."
  - "Noted, and the task passes: what could not be checked (NVML not readable, a model that is a Hugging Face id
    rather than a directory on the host, a multi-node run)."
  - The service role runs it before it renders the unit, so the rollout's pre-flight (which renders the unit in check
    mode) refuses a host with such a config while the whole fleet is still untouched.
  - Read-only; it never changes anything on the host.
options:
  argv:
    description:
      - The words of the unit's command line, as the service role builds them (C(vllm serve MODEL --option value
        ...)). Only the options above are read; the others are ignored.
    type: list
    elements: str
    required: true
  unit_environment:
    description: The unit's environment (C(Environment=) of the unit); only C(CUDA_VISIBLE_DEVICES) is read.
    type: dict
    default: {}
  model:
    description:
      - The model directory whose C(config.json) says whether the model has experts.
      - Not a directory on the host (a Hugging Face id, say), expert parallel is not judged, and RV(notes) says so.
    type: str
  nvml:
    description:
      - If V(true), count the host's GPUs with NVML (nvidia-ml-py of this interpreter or of O(nvml_venvs)); NVML not
        readable is a note, not a failure (the VRAM checks say more).
      - If V(false), the fit is checked against C(CUDA_VISIBLE_DEVICES) alone, when it is set.
    type: bool
    default: true
  call_timeout:
    description: Seconds NVML may take to answer before the GPUs count as not read.
    type: int
    default: 60
extends_documentation_fragment:
  - gpufleet.vllm.nvml_venvs
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
  - gpufleet.vllm.internal.module
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - vLLM runs one worker per GPU, tensor x pipeline x (local) data parallel of them, on the first GPUs of
    C(CUDA_VISIBLE_DEVICES) (all the host's GPUs when it is not set).
  - C(CUDA_VISIBLE_DEVICES) indices are compared with NVML's; CUDA numbers GPUs fastest first and NVML by PCI bus, the
    same order on a host of identical GPUs.
  - A C(--config) YAML file and abbreviated option names are not read.
seealso:
  - module: gpufleet.vllm.nvml_vram_info
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Check the parallel sizes against the GPUs and the model
  gpufleet.vllm.serving_check:
    argv: [/opt/vllm/current/bin/vllm, serve, /shared/kimi-k2.5-nvfp4, --tensor-parallel-size, "8",
           --enable-expert-parallel]
    unit_environment:
      CUDA_VISIBLE_DEVICES: "0,1,2,3,4,5,6,7"
    model: /shared/kimi-k2.5-nvfp4
    nvml_venvs: [/opt/gpufleet/tools]
"""

RETURN = r"""
check_mode:
  description: Whether the module ran in check mode (it reads the same either way).
  returned: always
  type: bool
  sample: false
serving:
  description: The serving config read from the command line and the environment.
  returned: always
  type: dict
  contains:
    gpu_memory_utilization:
      description:
        - The fraction of each GPU's memory vLLM reserves. When the command line does not give it, the default of the
          build the unit runs (C(0.92) in vLLM 0.32 and 0.33), read from that build's C(vllm/config/cache.py) (found
          from the program of O(argv), C(<venv>/bin/vllm)), else from a table by vLLM version, else C(0.9) (the
          default of older builds); RV(serving.gpu_memory_utilization_source) says which.
      type: float
      sample: 0.92
    gpu_memory_utilization_given:
      description: Whether the command line gives C(--gpu-memory-utilization).
      type: bool
      sample: false
    gpu_memory_utilization_source:
      description: Where RV(serving.gpu_memory_utilization) came from (the command line, the build's file, the table
        by version, or the fallback and why).
      type: str
      sample: the build's /opt/vllm/current/lib/python3.12/site-packages/vllm/config/cache.py
    multi_node:
      description: Whether it is a multi-node run (C(--nnodes) above 1, C(--headless)); the fit is then not checked.
      type: bool
      sample: false
    tensor_parallel_size:
      description: C(--tensor-parallel-size).
      type: int
      sample: 8
    pipeline_parallel_size:
      description: C(--pipeline-parallel-size).
      type: int
      sample: 1
    data_parallel_size:
      description: C(--data-parallel-size).
      type: int
      sample: 1
    data_parallel_size_local:
      description: The data parallel ranks on this host.
      type: int
      sample: 1
    enable_expert_parallel:
      description: Whether expert parallel is on.
      type: bool
      sample: true
    visible_devices:
      description: C(CUDA_VISIBLE_DEVICES) as indices and UUIDs, V(null) when it is not set.
      type: list
      elements: raw
      sample: null
    world_size:
      description: The workers, one GPU each, the server runs on this host.
      type: int
      sample: 8
    gpus:
      description: The GPUs those workers take (indices or UUIDs).
      type: list
      elements: raw
      sample: [0, 1, 2, 3, 4, 5, 6, 7]
    config_files:
      description:
        - The C(--config) YAML files of the command line. They are not read, so the sizes and GPUs above may not be
          what the server uses (RV(notes) says so).
      type: list
      elements: str
      sample: []
  sample: {gpu_memory_utilization: 0.92, gpu_memory_utilization_given: false, multi_node: false,
           tensor_parallel_size: 8, pipeline_parallel_size: 1, data_parallel_size: 1, data_parallel_size_local: 1,
           enable_expert_parallel: true, visible_devices: null, world_size: 8, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}
gpu_count:
  description: The GPUs NVML reports, V(null) when it was not read.
  returned: always
  type: int
  sample: 8
experts:
  description: The model's routed experts (0 for a dense model), V(null) when its C(config.json) was not read.
  returned: always
  type: int
  sample: 384
problems:
  description: Why the config cannot serve on this host (the task fails when there is one).
  returned: always
  type: list
  elements: str
  sample: []
notes:
  description: What could not be checked, and the expert parallel layout.
  returned: always
  type: list
  elements: str
  sample: ["expert parallel over 8 GPUs, 384 experts (text_config.n_routed_experts)"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils import serving
from ansible_collections.gpufleet.vllm.plugins.module_utils.nvml import (
    collect_venvs,
)


def read_gpus(venvs, call_timeout):
    """(GPU count, UUIDs by index) from NVML, or (None, None, why not)."""
    result, why = collect_venvs(venvs, call_timeout)
    if result is None:
        return None, None, why
    gpus = result.get("gpus") or []
    return result.get("gpu_count"), [g.get("uuid") or "" for g in gpus], None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            argv=dict(type="list", elements="str", required=True),
            unit_environment=dict(type="dict", default={}),
            model=dict(type="str"),
            nvml=dict(type="bool", default=True),
            nvml_venvs=dict(type="list", elements="path", default=[]),
            call_timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["call_timeout"] < 1:
        module.fail_json(msg="call_timeout must be at least 1 second; got %d." % params["call_timeout"], changed=False)
    environment = dict((str(k), "" if v is None else str(v)) for k, v in (params["unit_environment"] or {}).items())
    try:
        config = serving.serving_config(params["argv"], environment)
    except serving.ServingConfigError as exc:
        module.fail_json(msg="The unit's serving arguments cannot be read: %s. Nothing was changed." % exc,
                         changed=False, check_mode=module.check_mode, problems=[str(exc)], notes=[], serving=None,
                         gpu_count=None, experts=None)
    config = serving.with_build_default(config, params["argv"])
    notes = []
    if serving.unsure_reason(config):
        notes.append(serving.unsure_reason(config))
    gpu_count, uuids = None, None
    if params["nvml"] and not config["multi_node"]:
        gpu_count, uuids, why = read_gpus(params["nvml_venvs"], params["call_timeout"])
        if why:
            notes.append("NVML could not be read, so the GPUs were not counted: %s" % why)
    model_config, experts = None, None
    if config["enable_expert_parallel"]:
        model_config, why = serving.read_model_config(params["model"])
        if why:
            notes.append(why)
        else:
            experts = serving.model_experts(model_config)[0]
    problems, more = serving.parallel_problems(config, gpu_count=gpu_count, gpu_uuids=uuids,
                                               model_config=model_config, model=params["model"])
    notes.extend(more)
    result = dict(changed=False, check_mode=module.check_mode, serving=config, gpu_count=gpu_count, experts=experts,
                  problems=problems, notes=notes)
    if problems:
        module.fail_json(msg="Refused, nothing was changed: %s." % "; ".join(problems), **result)
    result["msg"] = "%d GPU%s for tensor x pipeline x data parallel %d x %d x %d%s%s." % (
        config["world_size"], "" if config["world_size"] == 1 else "s", config["tensor_parallel_size"],
        config["pipeline_parallel_size"], config["data_parallel_size_local"],
        "" if gpu_count is None else " of the host's %d" % gpu_count, ("; " + "; ".join(notes)) if notes else "")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
