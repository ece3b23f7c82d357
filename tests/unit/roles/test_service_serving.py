# SPDX-License-Identifier: GPL-3.0-or-later
"""The service role's serving config, run by real Ansible: the parallelism check of tasks/unit.yml (refused before
anything is written, in check mode too: the rollout's pre-flight) and the VRAM "loaded" gate derived from the unit's
own arguments (vars/main.yml), as the tasks and the cutover module receive it.

One ansible-playbook run (local connection) with the fake systemd of tests/unit/fakesystemd.py first on PATH and no
NVML (service_vram_check: false): the GPUs are bounded by CUDA_VISIBLE_DEVICES here; the module's own tests count
them with the fake NVML library.
"""

import json
import os

import pytest

import fakesystemd
from helpers import run_plays

CASES = {
    # name: (variables, check mode)
    "moe_tp8": ({"service_model": "{models}/moe"}, True),
    "moe_tp8_written": ({"service_model": "{models}/moe"}, False),
    "visible_two_tp8": ({"service_model": "{models}/moe", "service_environment": {"CUDA_VISIBLE_DEVICES": "0,1"}},
                        True),
    "visible_two_tp8_written": ({"service_model": "{models}/moe",
                                 "service_environment": {"CUDA_VISIBLE_DEVICES": "0,1"}}, False),
    "dense_ep": ({"service_model": "{models}/dense"}, True),
    "dense_no_ep": ({"service_model": "{models}/dense", "service_enable_expert_parallel": False}, True),
    "bad_utilization": ({"service_model": "{models}/moe", "service_extra_args": ["--gpu-memory-utilization", "90"]},
                        True),
}

PLAY = """
- name: Case {name}
  hosts: localhost
  gather_facts: false
  environment:
    PATH: "{bindir}:{{{{ ansible_env.PATH | default(lookup('env', 'PATH')) }}}}"
    FAKE_SYSTEMD_DIR: "{state}"
  vars: {vars}
  tasks:
    - name: Role defaults and vars (a static import whose tasks are all skipped)
      ansible.builtin.import_role:
        name: gpufleet.vllm.service
      when: false
    - name: Render the unit
      block:
        - name: Through the role
          ansible.builtin.include_role:
            name: gpufleet.vllm.service
            tasks_from: unit.yml
            apply:
              check_mode: {check}
        - name: Keep what the check said
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}.passed': __service_serving.msg}}) }}}}"
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}': {{'task': ansible_failed_task.name,
                                                                        'msg': ansible_failed_result.msg}}}}) }}}}"
"""

GATE_PLAY = """
- name: The loaded gate
  hosts: localhost
  gather_facts: false
  vars:
    service_model: /models/kimi-k2.5
  tasks:
    - name: Role defaults and vars
      ansible.builtin.import_role:
        name: gpufleet.vllm.service
      when: false
    - name: The gate of the defaults, as start.yml and the cutover get it
      ansible.builtin.set_fact:
        errors: "{{ errors | default({}) | combine({'gate.defaults': __service_vram_loaded_expect,
                                                    'gate.cutover': __service_cutover_vram}) }}"
    - name: A fixed figure
      ansible.builtin.set_fact:
        errors: "{{ errors | combine({'gate.fixed': __service_vram_loaded_expect,
                                      'gate.fixed_cutover': __service_cutover_vram}) }}"
      vars:
        service_min_used_mib: 90000
    - name: A narrower unit
      ansible.builtin.set_fact:
        errors: "{{ errors | combine({'gate.narrow': __service_vram_loaded_expect}) }}"
      vars:
        service_tensor_parallel_size: 2
        service_extra_args: [--gpu-memory-utilization=0.8]
        service_environment: {CUDA_VISIBLE_DEVICES: "6,7"}
        service_vram_loaded_tolerance: 0.1
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    out = tmp_path_factory.mktemp("serving")
    state = str(out / "systemd")
    bindir = str(out / "bin")
    fakesystemd.install(bindir, state)
    models = out / "models"
    for name, config in (("moe", {"text_config": {"n_routed_experts": 384}}), ("dense", {"hidden_size": 8192})):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps(config))
    plays = []
    for name, (case, check) in CASES.items():
        case = dict(case, service_model=case["service_model"].format(models=str(models)),
                    service_unit_dir=str(out / "units" / name), fleet_unit_name="vllm-" + name.replace("_", "-"),
                    service_vram_check=False)
        os.makedirs(case["service_unit_dir"])
        plays.append(PLAY.format(name=name, bindir=bindir, state=state, vars=json.dumps(case),
                                 check="true" if check else "false"))
    plays.append(GATE_PLAY)
    result = run_plays("".join(plays), str(out))
    result["units"] = dict((name, os.listdir(str(out / "units" / name))) for name in CASES)
    return result


def test_a_config_that_fits_passes_and_the_unit_is_written(seen):
    assert "moe_tp8" not in seen and "moe_tp8_written" not in seen
    assert seen["moe_tp8.passed"] == ("8 GPUs for tensor x pipeline x data parallel 8 x 1 x 1; the GPUs were not "
                                      "counted (no NVML): whether 8 GPUs are there is not checked; expert parallel "
                                      "over 8 GPUs, 384 experts (text_config.n_routed_experts).")
    assert seen["units"]["moe_tp8_written"] == ["vllm-moe-tp8-written.service"]


@pytest.mark.parametrize("name", ["visible_two_tp8", "visible_two_tp8_written"])
def test_more_parallelism_than_visible_gpus_is_refused_before_anything_is_written(seen, name):
    assert seen[name]["task"] == "Check the parallel sizes against the GPUs and the model"
    assert seen[name]["msg"] == (
        "Refused, nothing was changed: tensor parallel 8 needs 8 GPUs, but CUDA_VISIBLE_DEVICES=0,1 leaves 2 GPUs: "
        "lower the parallel sizes (service_tensor_parallel_size, -pp/-dp in service_extra_args) or make more GPUs "
        "visible.")
    assert seen["units"][name] == []


def test_expert_parallel_on_a_dense_model_is_refused(seen):
    assert "needs a mixture-of-experts model" in seen["dense_ep"]["msg"]
    assert "turn expert parallel off (service_enable_expert_parallel: false)" in seen["dense_ep"]["msg"]
    assert "dense_no_ep" not in seen


def test_a_malformed_utilization_is_named(seen):
    assert seen["bad_utilization"]["msg"] == (
        "The unit's serving arguments cannot be read: --gpu-memory-utilization must be more than 0 and at most 1 "
        "(a fraction of each GPU's memory, such as 0.9); got 90. Nothing was changed.")


def test_the_loaded_gate_is_derived_from_the_units_arguments(seen):
    assert seen["gate.defaults"] == {"gpus": [0, 1, 2, 3, 4, 5, 6, 7], "min_used_fraction": 0.9,
                                     "min_used_tolerance": 0.05}
    assert seen["gate.narrow"] == {"gpus": [6, 7], "min_used_fraction": 0.8, "min_used_tolerance": 0.1}


def test_a_fixed_figure_overrides_it(seen):
    assert seen["gate.fixed"] == {"gpus": [0, 1, 2, 3, 4, 5, 6, 7], "min_used_mib": 90000}
    assert seen["gate.fixed_cutover"]["loaded_min_used_mib"] == 90000
    # (no null keys: vllm_cutover refuses a null number, "loaded_tolerance is of type NoneType")
    assert "loaded_min_used_fraction" not in seen["gate.fixed_cutover"]
    assert "loaded_tolerance" not in seen["gate.fixed_cutover"]


def test_the_cutover_gets_the_derived_gate_with_its_types(seen):
    assert seen["gate.cutover"] == {
        "count": 8, "stopped_max_used_mib": 1024, "free_timeout": 120,
        "loaded_min_used_fraction": 0.9, "loaded_tolerance": 0.05, "loaded_gpus": [0, 1, 2, 3, 4, 5, 6, 7],
        "loaded_timeout": 60}
