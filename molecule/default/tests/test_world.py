# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated fleet is what the other scenarios need: systemd hosts with
8 fake GPUs seen by real pynvml, a dirty vLLM install, and the stand-in
serving through the unit, holding VRAM while it runs and freeing it after.

Runs through testinfra's podman backend (podman exec per command)."""

import json
import time

import probes
import testinfra
from probes import wait_for

VENV = "/root/ml-env"
SITE = VENV + "/lib/python3.11/site-packages"
UNIT = "vllm-kimi-k25"
PORT = 8000


def nvml(host):
    return probes.nvml(host, VENV + "/bin/python")


def http_status(host, path):
    return probes.http(host, path, PORT)["status"]


def http_get(host, path):
    return probes.http(host, path, PORT)["body"]


def test_systemd_is_pid1_and_running(host):
    assert host.process.get(pid=1).comm == "systemd"
    assert host.run("systemctl is-system-running").stdout.strip() == "running"


def test_pynvml_sees_eight_rtx_pro_6000(host):
    state = nvml(host)
    assert len(state["gpus"]) == 8
    for gpu in state["gpus"]:
        assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        assert gpu["total_mib"] == 97887
        assert gpu["cc"] == [12, 0]
    assert len({g["uuid"] for g in state["gpus"]}) == 8


def test_gpu_uuids_differ_between_hosts():
    uuids = []
    for name in ("gpu-node-1", "gpu-node-2"):
        uuids += [g["uuid"] for g in nvml(testinfra.get_host("podman://" + name))["gpus"]]
    assert len(set(uuids)) == 16


def test_vllm_is_installed_with_hard_links_into_uv_cache(host):
    dist = host.file(SITE + "/vllm-0.33.0.dist-info/RECORD")
    assert dist.exists
    deepseek = host.file(SITE + "/vllm/model_executor/models/deepseek_v2.py")
    # the in-place edit reached uv's cache through the hard link
    assert int(host.check_output("stat -c %s %s", "%h", deepseek.path)) > 1
    same_inode = host.run(
        "find /root/.cache/uv -samefile %s -print -quit", deepseek.path
    ).stdout.strip()
    assert same_inode, "uv's cache holds no hard link to deepseek_v2.py"
    assert "_t.save(" in host.file(same_inode).content_string


def test_debug_blocks_hide_from_the_operators_grep(host):
    path = SITE + "/vllm/model_executor/models/deepseek_v2.py"
    text = host.file(path).content_string
    assert "self._nomla_debug += 1" in text
    assert "import torch as _t" in text and "_t.save(" in text
    assert "embed_debug" in text and "_embed_debug_saved" in text
    # the hand procedure's grep finds nothing: the alias hides the saves
    assert host.run("grep -c 'torch.save' %s", path).stdout.strip() == "0"
    loader = SITE + "/vllm/model_executor/model_loader/weight_utils.py"
    assert "_MINIMAX_SKIP_SUFFIXES" in host.file(loader).content_string


def test_model_configs_carry_fp8_kv_cache_keys(host):
    config = json.loads(host.file("/shared/kimi-k2.5-nvfp4/config.json").content_string)
    assert "kv_cache_scheme" in json.dumps(config)
    quant = json.loads(host.file("/shared/kimi-k2.5-nvfp4/hf_quant_config.json").content_string)
    assert quant["quantization"]["kv_cache_quant_algo"] == "FP8"


def test_thirty_five_debug_dumps_in_tmp(host):
    out = host.check_output(
        "find /tmp -maxdepth 1 -type f \\( -name 'nomla_debug_tp*.pt' -o "
        "-name 'embed_debug_tp*.pt' -o -name 'mla_debug_layer*_tp*.pt' \\) -printf '%s\\n'"
    )
    sizes = [int(x) for x in out.split()]
    assert len(sizes) == 35
    assert 60e6 < sum(sizes) < 70e6


def test_standin_serves_then_frees_vram(host):
    assert host.service(UNIT).is_enabled
    assert wait_for(lambda: http_status(host, "/health") == 200, timeout=60), \
        "the stand-in never answered /health"
    models = json.loads(http_get(host, "/v1/models"))
    assert [m["id"] for m in models["data"]] == ["kimi-k2.5"]
    loaded = wait_for(lambda: all(g["used_mib"] >= 88098 for g in nvml(host)["gpus"]), timeout=30)
    assert loaded, nvml(host)
    main_pid = int(host.check_output("systemctl show -p MainPID --value %s", UNIT))
    assert all(main_pid in g["pids"] for g in nvml(host)["gpus"])

    host.check_output("systemctl stop %s", UNIT)
    freed = wait_for(lambda: all(g["used_mib"] < 1024 and not g["pids"] for g in nvml(host)["gpus"]),
                     timeout=30)
    assert freed, nvml(host)
    assert http_status(host, "/health") is None

    # leave the host as the scenario found it: serving
    host.check_output("systemctl start %s", UNIT)
    started = time.monotonic()
    assert http_status(host, "/health") is None, "port open before the load finished"
    assert wait_for(lambda: http_status(host, "/health") == 200, timeout=60)
    assert time.monotonic() - started >= 3, "the stand-in skipped its load delay"


def test_standin_metrics_use_vllm_names(host):
    text = http_get(host, "/metrics")
    assert "vllm:num_requests_running" in text
