#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: sm120_plan
short_description: Decide whether the SM120 KV-cache keys are removed on a host, and why
version_added: 0.1.0
description:
  - The decision of the C(gpufleet.vllm.sm120_config) role, in Python, shared with the audit
    (M(gpufleet.vllm.drift_info)) - whether the FP8 KV-cache quantization keys must be absent from the model configs
    of this host, given the policy switches and what the GPUs report.
  - Checks O(files) and O(required_files) and returns them as the O(gpufleet.vllm.model_config#module:files) option
    of M(gpufleet.vllm.model_config) (RV(files)).
  - Says whether the GPUs have to be read to decide (RV(read_gpus)), and the decision (RV(action), RV(sm120),
    RV(reason), RV(summary)) from the GPUs known so far (O(gpus)) and the vLLM build the configs are for (O(build)).
  - A row of O(builds) that takes O(build) and says it runs an FP8 KV cache on SM120 keeps the keys, whatever the GPUs
    and O(force) say; the GPUs are then not read.
  - With O(plans), also returns the role's result (RV(result)) made from the plan and edit results of
    M(gpufleet.vllm.model_config), and one line per directory (RV(lines)).
  - Reads nothing on the host and changes nothing (C(changed=false)).
options:
  model_dirs:
    description:
      - The model directories to check. Only whether there is one counts for the decision; RV(model_dirs) returns
        them without repeats.
    type: list
    elements: path
    default: []
  gpus:
    description:
      - The C(gpufleet_gpus) fact set by M(gpufleet.vllm.nvml_vram_info) with C(register_facts=true) (its C(available),
        C(sm120) and C(compute_capabilities) are read). Left out, the GPUs are unknown.
    type: dict
  host_tools_ready:
    description:
      - Whether the C(gpufleet.vllm.host_tools) venv that reads the GPUs exists. In check mode, a host without it
        whose GPUs are unknown gets the action V(preview) instead of V(skip).
    type: bool
    default: false
  nvml_error:
    description:
      - NVML's message when reading the GPUs failed, quoted in RV(reason).
    type: str
  plans:
    description:
      - The registered results of the role's plan task (M(gpufleet.vllm.model_config) in check mode, looped over the
        model directories). Given, the module also returns RV(result) and RV(lines).
    type: list
    elements: dict
  applied:
    description:
      - The registered results of the role's edit task, looped over O(plans).
    type: list
    elements: dict
    default: []
extends_documentation_fragment:
  - gpufleet.vllm.sm120_policy
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Decides as in a real run; the action V(preview) exists only in check mode.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
requirements:
  - Python 3.10 or newer on the managed host (standard library only).
seealso:
  - module: gpufleet.vllm.model_config
  - module: gpufleet.vllm.nvml_vram_info
  - module: gpufleet.vllm.drift_info
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Decide from the GPUs read earlier
  gpufleet.vllm.sm120_plan:
    model_dirs: [/models/Kimi-K2.5]
    gpus: "{{ gpufleet_gpus | default(omit) }}"
  register: kv_decision

- name: Remove the keys where the decision says so
  gpufleet.vllm.model_config:
    path: /models/Kimi-K2.5
    files: "{{ kv_decision.files }}"
  when: kv_decision.action == 'apply'
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (it decides only; nothing is written).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
policy:
  description: V(keep), V(strip) (forced) or V(auto) (where a GPU reports compute capability 12.x).
  returned: always
  type: str
  sample: auto
read_gpus:
  description: Whether the GPUs have to be read to decide (policy V(auto), a model directory, O(detect)).
  returned: always
  type: bool
action:
  description: V(apply) (remove the keys), V(skip) (change nothing) or V(preview) (check mode, GPUs not readable yet).
  returned: always
  type: str
  sample: apply
sm120:
  description: Whether a GPU reports compute capability 12.x; null when the GPUs are unknown.
  returned: always
  type: bool
reason:
  description: The decision in words, naming the setting (and the row of O(builds)) to change for another answer.
  returned: always
  type: str
  sample: "The GPUs report compute capability 12.0 (SM120): the FP8 KV-cache quantization keys are removed.
    vLLM 0.17.1 runs no FP8 KV cache on SM120 (fleet_sm120_fp8_kv_cache_builds[0] \"<0.18.0\": ...)."
summary:
  description: The decision in a few words, for a summary line.
  returned: always
  type: str
  sample: 'keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[2] ">=0.19.0"'
build:
  description: O(build), or null when it is empty.
  returned: always
  type: str
build_row:
  description:
    - The row of O(builds) that took O(build) (C(index) from 0, C(versions), C(fp8_kv_cache_on_sm120), C(note)), or
      null when none did.
  returned: always
  type: dict
files:
  description: O(files) and O(required_files) as the O(gpufleet.vllm.model_config#module:files) option.
  returned: always
  type: list
  elements: dict
  sample: [{name: config.json, absent: ["**.kv_cache_scheme"], required: true}]
model_dirs:
  description: O(model_dirs) without repeats, in order.
  returned: always
  type: list
  elements: str
result:
  description:
    - The role's C(sm120_config_result) - C(action), C(applied), C(sm120), C(forced), C(reason), C(check_mode),
      C(changed), C(removed_count), and C(dirs) (per directory C(path), C(changed), C(removed_count), C(removed) as
      C(file)/C(key)/C(value), C(backups), C(skipped_files)).
  returned: when O(plans) is given
  type: dict
lines:
  description: One line per directory, what was (or would be) removed.
  returned: when O(plans) is given
  type: list
  elements: str
  sample: ["removed 2 key(s) in /models/Kimi-K2.5: quantization_config.kv_cache_scheme, quantization.kv_cache_quant_algo"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import (
    DEFAULT_FILES,
    DEFAULT_REQUIRED_FILES,
    builds_problems,
    decide,
    files_problems,
    module_files,
    policy_of,
    read_gpus,
    report_lines,
    summarize,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            strip_kv_cache_keys=dict(type="bool", default=True),
            force=dict(type="bool", default=False),
            build=dict(type="str", default=""),
            builds=dict(type="list", elements="dict", default=[]),
            detect=dict(type="bool", default=True),
            model_dirs=dict(type="list", elements="path", default=[]),
            files=dict(type="dict", default=DEFAULT_FILES),
            required_files=dict(type="list", elements="str", default=list(DEFAULT_REQUIRED_FILES)),
            gpus=dict(type="dict"),
            host_tools_ready=dict(type="bool", default=False),
            nvml_error=dict(type="str"),
            plans=dict(type="list", elements="dict"),
            applied=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = files_problems(params["files"], params["required_files"]) + builds_problems(params["builds"])
    if problems:
        module.fail_json(msg=" ".join(problems) + " Nothing was changed.", changed=False)
    model_dirs = []
    for path in params["model_dirs"]:
        if path not in model_dirs:
            model_dirs.append(path)
    policy = policy_of(params["strip_kv_cache_keys"], params["force"])
    decision = decide(policy, model_dirs=model_dirs, gpus=params["gpus"], detect=params["detect"],
                      check_mode=module.check_mode, tools_ready=params["host_tools_ready"],
                      nvml_error=params["nvml_error"], build=params["build"], builds=params["builds"])
    result = dict(changed=False, policy=policy,
                  read_gpus=read_gpus(policy, model_dirs, params["detect"], params["build"], params["builds"]),
                  files=module_files(params["files"], params["required_files"]), model_dirs=model_dirs, **decision)
    if params["plans"] is not None:
        result["result"] = summarize(decision, params["force"], module.check_mode, params["plans"], params["applied"])
        result["lines"] = report_lines(result["result"])
    result['check_mode'] = module.check_mode
    module.exit_json(**result)


if __name__ == "__main__":
    main()
