# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.serving_check against the fake NVML library: the table of serving configs it passes and refuses.

The module runs as Ansible runs it on a host (its file with the arguments as
JSON), with LD_LIBRARY_PATH at the fake libnvidia-ml.so.1 and FAKE_NVML_STATE
at a state file of the test's own.
"""

import json
import os

import pytest

from helpers import load_source, run_nvml_module

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "serving_check.py")

state = load_source("fakenvml_state_for_serving_check", "tests", "sim", "fakenvml", "state.py")

MOE = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {"n_routed_experts": 384}}
DENSE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192}


@pytest.fixture
def models(tmp_path):
    made = {}
    for name, config in (("moe", MOE), ("dense", DENSE)):
        path = tmp_path / "models" / name
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps(config))
        made[name] = str(path)
    return made


def run(state_file, lib_dir, words, env=None, model=None, check_mode=False, **args):
    argv = ["/opt/vllm/current/bin/vllm", "serve", model or "/shared/model", "--port", "8000"] + list(words)
    args = dict(args, argv=argv, unit_environment=env or {})
    if model:
        args["model"] = model
    return run_nvml_module(MODULE, args, state_file, lib_dir, check_mode=check_mode)


@pytest.mark.parametrize("words, env, model, gpu_count, refused", [
    (["--tensor-parallel-size", "8"], {}, None, None, None),
    (["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"], {}, None, None,
     "tensor parallel 8 x pipeline parallel 2 needs 16 GPUs, but NVML reports 8 GPUs"),
    (["-tp", "8"], {"CUDA_VISIBLE_DEVICES": "0,1"}, None, None,
     "tensor parallel 8 needs 8 GPUs, but CUDA_VISIBLE_DEVICES=0,1 leaves 2 GPUs of the 8 NVML reports"),
    (["-tp", "8"], {}, None, 7, "tensor parallel 8 needs 8 GPUs, but NVML reports 7 GPUs"),
    (["-tp", "8", "--enable-expert-parallel"], {}, "moe", None, None),
    (["-tp", "8", "--enable-expert-parallel"], {}, "dense", None,
     "expert parallel (--enable-expert-parallel) needs a mixture-of-experts model, but "),
    (["-tp", "4", "-dp", "2", "-ep"], {"CUDA_VISIBLE_DEVICES": "7,6,5,4,3,2,1,0"}, "moe", None, None),
])
def test_the_table_of_configs(lib_dir, state_file, models, words, env, model, gpu_count, refused):
    if gpu_count is not None:
        state.update_state(lambda d: d.update({"gpu_count": str(gpu_count)}), state_file)
    rc, res = run(state_file, lib_dir, words, env, models.get(model))
    assert res["changed"] is False
    if refused is None:
        assert rc == 0, res["msg"]
        assert res["problems"] == [] and res["gpu_count"] == 8
    else:
        assert rc == 1
        assert res["msg"].startswith("Refused, nothing was changed: ") and refused in res["msg"], res["msg"]
        assert len(res["problems"]) == 1


def test_a_dense_model_names_its_config_and_what_to_change(lib_dir, state_file, models):
    rc, res = run(state_file, lib_dir, ["-tp", "8", "--enable-expert-parallel"], model=models["dense"],
                  check_mode=True)
    assert rc == 1 and res["experts"] == 0
    assert res["problems"] == [
        "expert parallel (--enable-expert-parallel) needs a mixture-of-experts model, but %s/config.json declares no "
        "experts (none of num_experts, moe_num_experts, n_routed_experts, num_local_experts): this is a dense model; "
        "turn expert parallel off (service_enable_expert_parallel: false)" % models["dense"]]


def test_the_moe_model_passes_and_says_its_layout(lib_dir, state_file, models):
    rc, res = run(state_file, lib_dir, ["-tp", "8", "-ep"], model=models["moe"], check_mode=True)
    assert rc == 0 and res["experts"] == 384
    assert res["serving"]["gpus"] == list(range(8)) and res["serving"]["gpu_memory_utilization"] == 0.9
    assert res["msg"] == ("8 GPUs for tensor x pipeline x data parallel 8 x 1 x 1 of the host's 8; expert parallel "
                          "over 8 GPUs, 384 experts (text_config.n_routed_experts).")


@pytest.mark.parametrize("words, env, message", [
    (["--tensor-parallel-size", "eight"], {}, "--tensor-parallel-size must be a whole number of 1 or more; got 'eight'"),
    (["--gpu-memory-utilization=1.5"], {}, "--gpu-memory-utilization must be more than 0 and at most 1"),
    (["-tp"], {}, "-tp needs a value"),
    ([], {"CUDA_VISIBLE_DEVICES": "0,one"}, "'one' is neither a GPU index (0, 1, ...) nor a GPU UUID"),
])
def test_a_malformed_value_is_a_clear_error(lib_dir, state_file, words, env, message):
    rc, res = run(state_file, lib_dir, words, env)
    assert rc == 1
    assert res["msg"].startswith("The unit's serving arguments cannot be read: ") and message in res["msg"]
    assert res["msg"].endswith(". Nothing was changed.")


def test_without_nvml_only_cuda_visible_devices_bounds_the_fit(lib_dir, state_file):
    # NVML would say 2 GPUs; not asked, the check has only CUDA_VISIBLE_DEVICES
    state.update_state(lambda d: d.update({"gpu_count": "2"}), state_file)
    rc, res = run(state_file, lib_dir, ["-tp", "8"], nvml=False)
    assert rc == 0 and res["gpu_count"] is None
    assert "whether 8 GPUs are there is not checked" in res["msg"]
    rc, res = run(state_file, lib_dir, ["-tp", "8"], {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, nvml=False)
    assert rc == 1 and "CUDA_VISIBLE_DEVICES=0,1,2,3 leaves 4 GPUs: lower" in res["msg"]


def test_nvml_not_readable_and_a_hub_model_are_notes(lib_dir, state_file):
    state.update_state(lambda d: d.update({"init_error": "DRIVER_NOT_LOADED"}), state_file)
    rc, res = run(state_file, lib_dir, ["-tp", "8", "-ep"], model="moonshotai/Kimi-K2.5")
    assert rc == 0 and res["experts"] is None
    assert res["notes"][0].startswith("NVML could not be read, so the GPUs were not counted: ")
    assert "moonshotai/Kimi-K2.5 is not a directory on this host" in res["notes"][1]


def test_uuids_are_checked_against_nvml(lib_dir, state_file):
    rc, res = run(state_file, lib_dir, ["-tp", "1"], {"CUDA_VISIBLE_DEVICES": "GPU-0000-not-here"})
    assert rc == 1
    assert "CUDA_VISIBLE_DEVICES names GPU-0000-not-here, which is not among the 8 GPUs of this host" in res["msg"]
