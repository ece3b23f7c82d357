# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in answers the quality gate as a model does: the same model directory the same, another one not.

The stand-in (tests/sim/standin/vllm_standin.py) runs as a subprocess on a free loopback port; the module
gpufleet.vllm.vllm_quality_info records a reference from one start and gates later starts against it: a second start
of the same directory passes, a damaged directory and a build hit by the fault ``incoherent_venv`` fail.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import quality
from ansible_collections.gpufleet.vllm.plugins.modules import vllm_quality_info
from helpers import module_runner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")
WORDS = sorted({w for text in quality.DEFAULT_PROMPTS + [quality.DEFAULT_PASSAGE]
                for w in re.findall(r"\w+|[^\w\s]+", text)} | {"alpha", "beta", "gamma", "delta"})


def write_model(path, extra=""):
    """A model directory: config.json and a WordLevel tokenizer.json (Whitespace pre-tokenizer) of WORDS."""
    path.mkdir(parents=True, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    (path / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "added_tokens": [{"id": 0, "content": "<unk>", "special": True}],
        "pre_tokenizer": {"type": "Whitespace"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}))
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 4096}))
    if extra:
        (path / "model.safetensors").write_text(extra)
    return str(path)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Standin(object):
    def __init__(self, tmp_path, model, venv, faults=""):
        self.port = free_port()
        faults_file = tmp_path / ("faults-%d" % self.port)
        faults_file.write_text(faults)
        os.makedirs(venv, exist_ok=True)
        env = dict(os.environ, FAKE_NVML_STATE=str(tmp_path / "nvml-state"), VLLM_STANDIN_LOAD_SECONDS="0",
                   VLLM_STANDIN_TTFT_SECONDS="0", VLLM_STANDIN_RELEASE_SECONDS="0", VLLM_STANDIN_VRAM_MIB="0",
                   VLLM_STANDIN_TOKENS_PER_SECOND="100000", VLLM_STANDIN_MAX_TOKENS_PER_SECOND="0",
                   VLLM_STANDIN_FAULTS_FILE=str(faults_file), VLLM_STANDIN_VENV=venv)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        self.log = open(str(tmp_path / ("standin-%d.log" % self.port)), "w")
        self.proc = subprocess.Popen([sys.executable, STANDIN, "serve", model, "--host", "127.0.0.1", "--port",
                                      str(self.port), "--served-model-name", "sim"], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.url = "http://127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.1)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@pytest.fixture
def standin(tmp_path):
    started = []

    def start(model, venv="/opt/vllm/envs/old", faults=""):
        server = Standin(tmp_path, model, str(tmp_path / venv.lstrip("/")), faults)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def run(capsys):
    return module_runner(vllm_quality_info.main, capsys)


def record(run, server, model_dir):
    code, result = run(dict(mode="record", base_url=server.url, served_model_name="sim", model_dir=model_dir))
    assert code == 0, result["msg"]
    return {"sim": {"": result["entry"]}}


def gate(run, server, model_dir, references):
    return run(dict(base_url=server.url, served_model_name="sim", model_dir=model_dir, references=references))


def test_two_starts_of_the_same_model_agree_and_a_damaged_model_fails(run, standin, tmp_path):
    model_dir = write_model(tmp_path / "model")
    first = standin(model_dir)
    references = record(run, first, model_dir)
    entry = references["sim"][""]
    assert entry["build"] == "0.33.0" and len(entry["prompts"]) == 8 and entry["prompts"][0]["token_ids"]
    assert 0.3 < entry["passage"]["nll"] < 2.3 and entry["passage"]["tokens"] > 100
    first.close()
    code, result = gate(run, standin(model_dir), model_dir, references)
    assert code == 0 and result["verdict"] == "passed", result["msg"]
    assert result["passage"]["relative_difference"] == 0.0 and result["answers"]["matched"] == 8

    damaged = write_model(tmp_path / "damaged", extra="one tensor scaled")
    code, result = gate(run, standin(damaged), model_dir, references)
    assert code == 1 and result["verdict"] == "failed"
    assert result["answers"]["matched"] <= 1, result["msg"]


def test_answers_follow_the_weights_and_the_tokenizer_not_the_config_a_policy_edits(run, standin, tmp_path):
    model_dir = write_model(tmp_path / "model", extra="weights")
    references = record(run, standin(model_dir), model_dir)
    with open(os.path.join(model_dir, "config.json"), "w") as handle:
        json.dump({"model_type": "llama", "max_position_embeddings": 4096, "edited": "by the SM120 policy"}, handle)
    with open(os.path.join(model_dir, "config.json.628.2026-12-07@16:29:01~"), "w") as handle:
        handle.write("the backup the edit left")
    code, result = gate(run, standin(model_dir), model_dir, references)
    assert code == 0 and result["verdict"] == "passed", result["msg"]


def test_the_incoherent_fault_hits_its_build_only(run, standin, tmp_path):
    model_dir = write_model(tmp_path / "model")
    faults = "incoherent_venv=%s\n" % (tmp_path / "opt" / "vllm" / "envs" / "new*")
    references = record(run, standin(model_dir, "/opt/vllm/envs/old", faults), model_dir)
    code, result = gate(run, standin(model_dir, "/opt/vllm/envs/new-0.34", faults), model_dir, references)
    assert code == 1 and result["verdict"] == "failed"
    assert result["answers"]["matched"] <= 1 and result["passage"]["relative_difference"] > 0.5, result["msg"]
    assert result["msg"].startswith("Quality of sim at %s failed: the greedy answers match the reference for "
                                    % result["url"])
    code, result = gate(run, standin(model_dir, "/opt/vllm/envs/old", faults), model_dir, references)
    assert code == 0 and result["verdict"] == "passed", result["msg"]


def test_prompt_logprobs_are_refused_with_a_stream_as_vllm_refuses_them(standin, tmp_path):
    server = standin(write_model(tmp_path / "model"))
    request = urllib.request.Request(server.url + "/v1/completions", data=json.dumps({
        "model": "sim", "prompt": "alpha beta", "max_tokens": 2, "stream": True, "prompt_logprobs": 1}).encode(),
        headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(request, timeout=30)
    assert exc.value.code == 400
    assert "not available when `stream=True`" in exc.value.read().decode()


def test_the_simulated_fleets_recorded_reference_still_passes_on_the_simulated_model(run, standin, tmp_path):
    # tests/sim/inventory keeps the reference recorded on the demo fleet; the demo and the rollout scenario gate on
    # it. A change of the stand-in's answers or of the simulated model directory must come with a new recording.
    pytest.importorskip("tokenizers")
    import yaml
    from helpers import load_source
    make_model_dir = load_source("gpufleet_sim_make_model_dir_q", "tests", "sim", "model", "make_model_dir.py")
    with open(os.path.join(REPO, "tests", "sim", "inventory", "group_vars", "vllm_fleet.yml")) as handle:
        references = yaml.safe_load(handle)["quality_references"]
    model_dir = make_model_dir.make_model_dir(str(tmp_path / "kimi-k2.5-nvfp4"))["model_dir"]
    server = standin(model_dir, "/opt/vllm/envs/vllm-0.33.1.dev7")
    code, result = run(dict(base_url=server.url, served_model_name="sim", model="kimi-k2.5", model_dir=model_dir,
                            references=references))
    assert code == 0 and result["verdict"] == "passed" and result["quantization"] == "nvfp4", result["msg"]
    assert result["answers"]["matched"] == 8 and result["passage"]["relative_difference"] == 0.0, result["msg"]
