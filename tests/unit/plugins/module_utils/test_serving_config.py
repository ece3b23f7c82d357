# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/serving.py: the serving config read from a unit's own arguments, the loaded gate's arithmetic and
the parallelism refusals (pure functions; the module and the filter run them in their own tests)."""

import json

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import serving

VLLM = ["/opt/vllm/current/bin/vllm", "serve", "/shared/kimi-k2.5-nvfp4", "--served-model-name", "kimi-k2.5",
        "--host", "0.0.0.0", "--port", "8000"]
MOE = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {"n_routed_experts": 384}}
DENSE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672}


def config(*words, **env):
    return serving.serving_config(VLLM + list(words), env)


# ------------------------------------------------------------------ reading


@pytest.mark.parametrize("words, env, expected", [
    ((), {}, dict(gpu_memory_utilization=0.9, gpu_memory_utilization_given=False, tensor_parallel_size=1,
                  world_size=1, gpus=[0], enable_expert_parallel=False, visible_devices=None)),
    (("--tensor-parallel-size", "8", "--enable-expert-parallel"), {},
     dict(tensor_parallel_size=8, world_size=8, gpus=list(range(8)), enable_expert_parallel=True)),
    (("-tp=4", "-pp", "2"), {}, dict(tensor_parallel_size=4, pipeline_parallel_size=2, world_size=8)),
    (("--gpu-memory-utilization=0.85",), {}, dict(gpu_memory_utilization=0.85, gpu_memory_utilization_given=True)),
    (("--gpu_memory_utilization", "0.7"), {}, dict(gpu_memory_utilization=0.7)),
    (("--device-memory-utilization", "1"), {}, dict(gpu_memory_utilization=1.0)),
    # the last occurrence wins, as with argparse; --no-enable-expert-parallel turns it off again
    (("-tp", "2", "--tensor-parallel-size", "8", "-ep", "--no-enable-expert-parallel"), {},
     dict(tensor_parallel_size=8, enable_expert_parallel=False)),
    (("-tp", "2", "-dp", "4"), {}, dict(data_parallel_size=4, data_parallel_size_local=4, world_size=8)),
    (("-tp", "2", "-dp", "4", "--data-parallel-size-local", "2"), {},
     dict(data_parallel_size=4, data_parallel_size_local=2, world_size=4, gpus=[0, 1, 2, 3])),
    (("-tp", "2",), {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, dict(visible_devices=[4, 5, 6, 7], gpus=[4, 5])),
    (("-tp", "2",), {"CUDA_VISIBLE_DEVICES": " GPU-aa-1 , 3"},
     dict(visible_devices=["GPU-aa-1", 3], gpus=["GPU-aa-1", 3])),
    (("--nnodes", "2", "-tp", "16"), {}, dict(multi_node=True, world_size=16)),
    # other options, and their values, are not mistaken for these
    (("--max-model-len", "8", "--served-model-name", "tp"), {}, dict(tensor_parallel_size=1)),
])
def test_the_config_is_read_from_the_units_words(words, env, expected):
    got = config(*words, **env)
    assert dict((key, got[key]) for key in expected) == expected


@pytest.mark.parametrize("words, env, message", [
    (("--tensor-parallel-size", "eight"), {}, "--tensor-parallel-size must be a whole number of 1 or more; got 'eight'"),
    (("-tp", "0"), {}, "-tp must be a whole number of 1 or more; got 0"),
    (("-pp", "2.5"), {}, "-pp must be a whole number of 1 or more; got '2.5'"),
    (("--gpu-memory-utilization", "1.5"), {}, "--gpu-memory-utilization must be more than 0 and at most 1"),
    (("--gpu-memory-utilization", "0"), {}, "--gpu-memory-utilization must be more than 0 and at most 1"),
    (("--gpu-memory-utilization", "90%"), {}, "--gpu-memory-utilization must be a number such as 0.9; got '90%'"),
    (("--gpu-memory-utilization=inf",), {}, "--gpu-memory-utilization must be a number such as 0.9; got 'inf'"),
    (("-tp",), {}, "-tp needs a value"),
    (("-tp", "--enable-expert-parallel"), {}, "-tp needs a value"),
    ((), {"CUDA_VISIBLE_DEVICES": "0,1,x"}, "CUDA_VISIBLE_DEVICES='0,1,x': 'x' is neither a GPU index"),
    ((), {"CUDA_VISIBLE_DEVICES": "0,1,0"}, "CUDA_VISIBLE_DEVICES='0,1,0' names GPU 0 twice"),
])
def test_a_malformed_value_is_a_clear_error(words, env, message):
    with pytest.raises(serving.ServingConfigError) as err:
        config(*words, **env)
    assert message in str(err.value)


def test_every_malformed_value_is_named_at_once():
    with pytest.raises(serving.ServingConfigError) as err:
        config("-tp", "x", "--gpu-memory-utilization", "2", CUDA_VISIBLE_DEVICES="a")
    for name in ("-tp must be", "--gpu-memory-utilization must be", "CUDA_VISIBLE_DEVICES='a'"):
        assert name in str(err.value)


def test_an_empty_cuda_visible_devices_leaves_no_gpu():
    got = config("-tp", "1", CUDA_VISIBLE_DEVICES="")
    assert got["visible_devices"] == [] and got["gpus"] == []
    problems, dummy = serving.parallel_problems(got, gpu_count=8)
    assert problems == ["tensor parallel 1 needs 1 GPU, but CUDA_VISIBLE_DEVICES= leaves 0 GPUs of the 8 NVML "
                        "reports: lower the parallel sizes (service_tensor_parallel_size, -pp/-dp in "
                        "service_extra_args) or make more GPUs visible"]


# ------------------------------------------------------------- loaded gate


@pytest.mark.parametrize("total, fraction, tolerance, floor, text", [
    (97887, 0.9, 0.05, 83693, "83,693 MiB = 0.9 x 97,887 MiB - 5 %"),
    (97887, 0.9, 0.0, 88098, "88,098 MiB = 0.9 x 97,887 MiB"),
    (81559, 0.9, 0.05, 69732, "69,732 MiB = 0.9 x 81,559 MiB - 5 %"),
    (97887, 0.95, 0.025, 90667, "90,667 MiB = 0.95 x 97,887 MiB - 2.5 %"),
    (1000, 1, 0.1, 900, "900 MiB = 1 x 1,000 MiB - 10 %"),
])
def test_the_loaded_floor_and_its_arithmetic(total, fraction, tolerance, floor, text):
    assert serving.loaded_floor_mib(total, fraction, tolerance) == floor
    assert serving.describe_loaded_floor(total, fraction, tolerance) == text


def test_the_reference_host_passes_the_derived_gate_by_construction():
    # 8 x RTX PRO 6000 (97,887 MiB), vLLM's default 0.9: 88,098 MiB reserved, the gate 5 % below
    reserved = serving.loaded_floor_mib(97887, serving.DEFAULT_GPU_MEMORY_UTILIZATION)
    assert reserved == 88098 > 90000 - 2000
    assert serving.loaded_floor_mib(97887, 0.9, serving.DEFAULT_LOADED_TOLERANCE) == 83693 < reserved


def test_loaded_expect_is_the_fraction_unless_a_fixed_figure_is_given():
    got = config("-tp", "4", "--gpu-memory-utilization", "0.8", CUDA_VISIBLE_DEVICES="4,5,6,7,0,1,2,3")
    assert serving.loaded_expect(got) == {"gpus": [4, 5, 6, 7], "min_used_fraction": 0.8, "min_used_tolerance": 0.05}
    assert serving.loaded_expect(got, min_used_mib=90000) == {"gpus": [4, 5, 6, 7], "min_used_mib": 90000}
    assert serving.loaded_expect(got, min_used_mib="", tolerance=0.1)["min_used_tolerance"] == 0.1


# ------------------------------------------------------------- parallelism


@pytest.mark.parametrize("words, env, gpu_count, model_config, refused", [
    (("-tp", "8"), {}, 8, None, None),
    (("-tp", "8", "-pp", "2"), {}, 8, None,
     "tensor parallel 8 x pipeline parallel 2 needs 16 GPUs, but NVML reports 8 GPUs"),
    (("-tp", "8"), {"CUDA_VISIBLE_DEVICES": "0,1"}, 8, None,
     "tensor parallel 8 needs 8 GPUs, but CUDA_VISIBLE_DEVICES=0,1 leaves 2 GPUs of the 8 NVML reports"),
    (("-tp", "2"), {"CUDA_VISIBLE_DEVICES": "0,1"}, 8, None, None),
    (("-tp", "2", "-dp", "4"), {}, 8, None, None),
    (("-tp", "4", "-dp", "4"), {}, 8, None, "tensor parallel 4 x data parallel 4 needs 16 GPUs"),
    (("-tp", "8"), {}, 7, None, "tensor parallel 8 needs 8 GPUs, but NVML reports 7 GPUs"),
    (("-tp", "1"), {"CUDA_VISIBLE_DEVICES": "6,9"}, 8, None, "CUDA_VISIBLE_DEVICES names 9, which is not among the 8"),
    # CUDA_VISIBLE_DEVICES alone when NVML was not read
    (("-tp", "8"), {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, None, None, "leaves 4 GPUs: lower the parallel sizes"),
    (("-tp", "8", "--enable-expert-parallel"), {}, 8, MOE, None),
    (("-tp", "8", "--enable-expert-parallel"), {}, 8, DENSE,
     "expert parallel (--enable-expert-parallel) needs a mixture-of-experts model, but /m/config.json declares no "
     "experts"),
    (("-tp", "8"), {}, 8, DENSE, None),
    # a multi-node run is not judged against one host
    (("-tp", "8", "-pp", "2", "--nnodes", "2"), {}, 8, None, None),
])
def test_parallelism_against_the_gpus_and_the_model(words, env, gpu_count, model_config, refused):
    problems, dummy = serving.parallel_problems(config(*words, **env), gpu_count=gpu_count,
                                                model_config=model_config, model="/m")
    if refused is None:
        assert problems == []
    else:
        assert len(problems) == 1 and refused in problems[0], problems


def test_uuids_in_cuda_visible_devices_are_resolved_with_nvml():
    got = config("-tp", "2", CUDA_VISIBLE_DEVICES="GPU-aaaa,GPU-cccc")
    problems, dummy = serving.parallel_problems(got, gpu_count=2, gpu_uuids=["GPU-AAAA", "GPU-bbbb"])
    assert problems == ["CUDA_VISIBLE_DEVICES names GPU-cccc, which is not among the 2 GPUs of this host",
                        "tensor parallel 2 needs 2 GPUs, but CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-cccc leaves 1 GPU of "
                        "the 2 NVML reports: lower the parallel sizes (service_tensor_parallel_size, -pp/-dp in "
                        "service_extra_args) or make more GPUs visible"]


def test_what_could_not_be_checked_is_noted():
    dummy, notes = serving.parallel_problems(config("-tp", "8", "-ep"), gpu_count=None, model_config=None)
    assert notes == ["the GPUs were not counted (no NVML): whether 8 GPUs are there is not checked",
                     "expert parallel is on, but the model's config.json was not read, so whether the model has "
                     "experts is not checked"]
    dummy, notes = serving.parallel_problems(config("-tp", "8", "-ep"), gpu_count=8, model_config=MOE)
    assert notes == ["expert parallel over 8 GPUs, 384 experts (text_config.n_routed_experts)"]


@pytest.mark.parametrize("model_config, experts", [
    ({"n_routed_experts": 256}, (256, "n_routed_experts")),
    ({"num_local_experts": 8}, (8, "num_local_experts")),
    ({"num_experts": [64, 64]}, (64, "num_experts")),
    ({"moe_num_experts": 16}, (16, "moe_num_experts")),
    ({"llm_config": {"num_experts": 128}}, (128, "llm_config.num_experts")),
    ({"block_configs": [{"block_type": "moe", "n_routed_experts": 64}, {"block_type": "attention"}]},
     (64, "block_configs[].n_routed_experts")),
    ({"num_experts": 0, "text_config": {}}, (0, None)),
    (DENSE, (0, None)),
    ({"num_experts": True}, (0, None)),
])
def test_experts_are_found_where_vllm_looks(model_config, experts):
    assert serving.model_experts(model_config) == experts


def test_the_model_config_is_read_from_the_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MOE))
    assert serving.read_model_config(str(tmp_path)) == (MOE, None)
    assert "is not a directory on this host" in serving.read_model_config("moonshotai/Kimi-K2.5")[1]
    (tmp_path / "config.json").write_text("{not json")
    assert "config.json is not valid JSON" in serving.read_model_config(str(tmp_path))[1]
    (tmp_path / "config.json").write_text("[]")
    assert "is not a JSON object" in serving.read_model_config(str(tmp_path))[1]
    (tmp_path / "config.json").unlink()
    assert "cannot read" in serving.read_model_config(str(tmp_path))[1]
