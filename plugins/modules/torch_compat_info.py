#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: torch_compat_info
short_description: Check that an environment's torch runs on this host's driver and GPUs, before it serves
version_added: 0.1.0
description:
  - Reads what the torch of a (staged) virtual environment was built for from its files, without importing it
    (importing torch loads CUDA and may touch the GPUs the serving build still uses) - the CUDA version in
    C(torch/version.py) and the architecture list compiled into C(torch/lib/libtorch_python.so), the list that
    C(torch.cuda.get_arch_list) returns - and compares it with what NVML says about the host.
  - A problem, and the task fails (O(fail_on_problem)), when the driver's CUDA version is of an older major than the
    build's, when the build is CPU-only, when a GPU's compute capability is in none of the build's architectures, or
    when NVML cannot be read (nothing could be proven).
  - A note, and the task passes, when the driver's CUDA minor is older (CUDA's minor-version compatibility), when a
    GPU runs through PTX compiled at the first start, or when the environment has no torch (nothing to check).
  - The rollout runs it on the staged build while the old build serves, so a host that fails keeps serving.
  - Read-only; it never changes anything on the host.
options:
  venv:
    description: The virtual environment whose torch is checked (its C(lib/pythonX.Y/site-packages)).
    type: path
    required: true
  call_timeout:
    description: Seconds NVML may take to answer; past it NVML counts as unavailable (a problem).
    type: int
    default: 60
  timeout:
    description: Seconds the reading of the torch files may take.
    type: int
    default: 60
  fail_on_problem:
    description: Fail the task when RV(problems) is not empty. With V(false) the result says so and the task passes.
    type: bool
    default: true
extends_documentation_fragment:
  - gpufleet.vllm.nvml_venvs
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - The architecture list is the text C(torch.cuda.get_arch_list) returns, found in C(libtorch_python.so) as a
    string of C(sm_NN) and C(compute_NN) words; a build without one is reported in RV(notes) and its GPUs are not
    checked against it.
  - A binary for C(sm_XY) runs on GPUs of compute capability X.Z with Z >= Y; an architecture-specific C(sm_XYa) only
    on X.Y; PTX for C(compute_XY) on any newer GPU, compiled when the build first starts.
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Check the staged build against the driver and the GPUs (before the downtime window)
  gpufleet.vllm.torch_compat_info:
    venv: "{{ reinstall_staged_env }}"
    nvml_venvs: ["{{ fleet_tools_venv }}"]

- name: Report only
  gpufleet.vllm.torch_compat_info:
    venv: /opt/vllm/current
    nvml_venvs: [/opt/gpufleet/tools]
    fail_on_problem: false
  register: compat
"""

RETURN = r"""
compatible:
  description: True when RV(problems) is empty.
  returned: always
  type: bool
torch:
  description: What the environment's torch was built for.
  returned: always
  type: dict
  contains:
    present:
      description: Whether the environment has torch at all.
      type: bool
    version:
      description: torch's version (C(__version__) of C(torch/version.py)).
      type: str
      sample: 2.14.0+cu130
    cuda:
      description: The CUDA version the build was made for; null for a CPU build.
      type: str
      sample: "13.0"
    arch_list:
      description: The architectures it was compiled for; null when not found.
      type: list
      elements: str
      sample: [sm_75, sm_80, sm_86, sm_90, sm_100, sm_120]
driver_cuda_version:
  description: The newest CUDA version the driver supports, as NVML says; null when unknown.
  returned: always
  type: str
  sample: "13.0"
gpus:
  description: How each GPU runs the build.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML's index.
      type: int
    name:
      description: The GPU's name.
      type: str
    compute_capability:
      description: MAJOR.MINOR.
      type: str
      sample: "12.0"
    runs:
      description: V(binary) (a compiled architecture covers it), V(ptx) (compiled at the first start) or V(no).
      type: str
    arch:
      description: The architecture that covers it, or null.
      type: str
      sample: sm_120
problems:
  description: Why the build cannot run here; empty when it can.
  returned: always
  type: list
  elements: str
notes:
  description: What an operator may want to know although the build runs.
  returned: always
  type: list
  elements: str
msg:
  description: One sentence.
  returned: always
  type: str
check_mode:
  description: Whether the module ran in check mode (it only reads either way).
  returned: always
  type: bool
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.environment import venv_site_dirs
from ansible_collections.gpufleet.vllm.plugins.module_utils.nvml import (
    collect_venvs,
    format_cuda_version,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.torchcompat import CompatError, judge, read_torch


def read_nvml(venvs, call_timeout):
    """(NVML's collect result, or None; the reason it could not be read, or None)."""
    return collect_venvs(venvs, call_timeout)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            nvml_venvs=dict(type="list", elements="path", default=[]),
            call_timeout=dict(type="int", default=60),
            timeout=dict(type="int", default=60),
            fail_on_problem=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for name in ("call_timeout", "timeout"):
        if params[name] < 1:
            module.fail_json(msg="%s must be at least 1 second; got %d." % (name, params[name]), changed=False)
    venv = params["venv"]
    sites = venv_site_dirs(venv)
    if not sites:
        module.fail_json(msg="%s is not a virtual environment (no lib/pythonX.Y/site-packages); nothing was checked."
                         % venv, changed=False)
    end = time.monotonic() + params["timeout"]
    try:
        torch = read_torch(sites, deadline=lambda: time.monotonic() > end)
    except CompatError as exc:
        module.fail_json(msg="The torch of %s could not be read: %s. Nothing was changed." % (venv, exc),
                         changed=False)
    nvml, nvml_problem = (None, None)
    problems, notes, gpus = [], [], []
    if torch["present"]:
        nvml, nvml_problem = read_nvml(params["nvml_venvs"], params["call_timeout"])
    if nvml_problem:
        problems.append("NVML could not be read, so nothing proves torch %s runs here: %s"
                        % (torch["version"], nvml_problem))
    else:
        problems, notes, gpus = judge(torch, (nvml or {}).get("cuda_driver_version"), (nvml or {}).get("gpus") or [])
    result = {
        "changed": False,
        "compatible": not problems,
        "torch": dict((k, torch[k]) for k in ("present", "version", "cuda", "arch_list")),
        "driver_cuda_version": format_cuda_version((nvml or {}).get("cuda_driver_version")),
        "gpus": gpus,
        "problems": problems,
        "notes": notes,
    }
    result["check_mode"] = module.check_mode
    if problems:
        result["msg"] = "The build in %s cannot run on this host: %s." % (venv, "; ".join(problems))
        if params["fail_on_problem"]:
            module.fail_json(**result)
    elif torch["present"]:
        result["msg"] = "torch %s (CUDA %s) runs on this host's driver (CUDA %s) and its %d GPU(s)%s." % (
            torch["version"], torch["cuda"], result["driver_cuda_version"] or "?", len(gpus),
            ("; " + "; ".join(notes)) if notes else "")
    else:
        result["msg"] = "%s has no torch: nothing to check against the driver and the GPUs." % venv
    module.exit_json(**result)


if __name__ == "__main__":
    main()
