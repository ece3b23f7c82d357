# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the small Llama model that the real vLLM engine (the CPU build) serves in the tests.

Nothing comes from a hub: the weights are seeded random numbers, the
tokenizer a fixed vocabulary, and two runs write the same bytes (standard
library only, so any Python writes it). The directory holds:

* ``config.json``: ``LlamaForCausalLM``, 2 layers, hidden size 128, 4 heads
  (2 key/value heads), MLP 256, vocabulary 1,024, 512 positions, bfloat16;
* ``model.safetensors``: every tensor of that model in bfloat16 (about 2.3 MB),
  drawn from ``random.Random(SEED)``: embeddings N(0, 1), projections
  N(0, 1/fan_in), the output head N(0, 0.2^2) (its logits spread enough that
  greedy answers and the log-likelihood of a passage depend on the weights),
  norms 1;
* ``tokenizer.json``: a WordLevel model of 1,024 words (``<unk>`` 0, ``<s>`` 1,
  ``</s>`` 2, ``<pad>`` 3, then the stand-in's common words, digits,
  punctuation and made-up two-syllable words), Whitespace pre-tokenizer, no
  post-processor (a prompt of N words is N tokens), no decoder (ids decode to
  their words joined by single spaces); ``tokenizer_config.json``,
  ``special_tokens_map.json``;
* ``generation_config.json``.

A damaged copy (``--damage TENSOR --scale F``; F 0 zeroes it) has the same
layout and tensor set, one tensor's values multiplied: it still loads, and
answers differently. Usage::

    python make_model.py OUT_DIR [--seed N] [--damage TENSOR] [--scale F]

It prints a JSON summary: the directory, each file's sha256, the damage.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import random
import struct
import sys

SEED = 20261207
VOCAB_SIZE = 1024
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
MAX_POSITIONS = 512
HEAD_STD = 0.2
#: the tensor a damaged copy scales when none is named: the first layer's MLP output
DEFAULT_DAMAGE = "model.layers.0.mlp.down_proj.weight"


def _stand_in_words():
    """tests/sim/model/make_model_dir.py, the stand-in's model directory (standard library only at import)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "model", "make_model_dir.py")
    spec = importlib.util.spec_from_file_location("gpufleet_sim_make_model_dir", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the stand-in's words: its special tokens, common words, digits, punctuation and the letters of its made-up words
_WORDS = _stand_in_words()
SPECIAL_TOKENS, COMMON_WORDS, DIGITS = _WORDS.SPECIAL_TOKENS, _WORDS.COMMON_WORDS, _WORDS.DIGITS
PUNCTUATION, CONSONANTS, VOWELS = _WORDS.PUNCTUATION, _WORDS.CONSONANTS, _WORDS.VOWELS
UNK, BOS, EOS, PAD = SPECIAL_TOKENS


def vocabulary():
    """The 1,024 tokens in id order."""
    tokens = list(SPECIAL_TOKENS) + list(COMMON_WORDS) + list(DIGITS) + list(PUNCTUATION)
    seen = set(tokens)
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    for first in syllables:
        for second in syllables:
            if len(tokens) == VOCAB_SIZE:
                return tokens
            word = first + second
            if word not in seen:
                seen.add(word)
                tokens.append(word)
    raise AssertionError("not enough made-up words for the vocabulary")


def tensor_shapes():
    """(name, shape, standard deviation or None for ones) in the order they are written."""
    shapes = [("model.embed_tokens.weight", (VOCAB_SIZE, HIDDEN), 1.0)]
    for layer in range(LAYERS):
        pre = "model.layers.%d." % layer
        shapes += [
            (pre + "input_layernorm.weight", (HIDDEN,), None),
            (pre + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN), HIDDEN ** -0.5),
            (pre + "self_attn.k_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN), HIDDEN ** -0.5),
            (pre + "self_attn.v_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN), HIDDEN ** -0.5),
            (pre + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM), (HEADS * HEAD_DIM) ** -0.5),
            (pre + "post_attention_layernorm.weight", (HIDDEN,), None),
            (pre + "mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN), HIDDEN ** -0.5),
            (pre + "mlp.up_proj.weight", (INTERMEDIATE, HIDDEN), HIDDEN ** -0.5),
            (pre + "mlp.down_proj.weight", (HIDDEN, INTERMEDIATE), INTERMEDIATE ** -0.5),
        ]
    shapes += [("model.norm.weight", (HIDDEN,), None), ("lm_head.weight", (VOCAB_SIZE, HIDDEN), HEAD_STD)]
    return shapes


def _bf16(values):
    """bfloat16 bytes (little-endian) of floats: the upper half of each float32, rounded to nearest even."""
    out = bytearray()
    for value in values:
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        out += struct.pack("<H", bits & 0xFFFF)
    return bytes(out)


def safetensors_bytes(seed=SEED, damage=None, scale=0.0):
    """The model.safetensors file as bytes; DAMAGE names a tensor whose values are multiplied by SCALE."""
    names = [name for name, dummy_shape, dummy_std in tensor_shapes()]
    if damage is not None and damage not in names:
        raise ValueError("no tensor %r in the model; tensors: %s" % (damage, ", ".join(names)))
    rng = random.Random(seed)
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, shape, std in tensor_shapes():
        count = 1
        for size in shape:
            count *= size
        # every tensor draws its numbers, a damaged one too: the others stay the same bytes
        values = [1.0] * count if std is None else [rng.gauss(0.0, std) for dummy in range(count)]
        if name == damage:
            values = [value * scale for value in values]
        blob = _bf16(values)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def config():
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        "torch_dtype": "bfloat16",
    }


def tokenizer_json():
    tokens = vocabulary()
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": index, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for index, token in enumerate(SPECIAL_TOKENS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {token: index for index, token in enumerate(tokens)},
                  "unk_token": UNK},
    }


def tokenizer_config():
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }


def _dump(data):
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def files(seed=SEED, damage=None, scale=0.0):
    """{file name: bytes} of the model directory."""
    return {
        "config.json": _dump(config()),
        "generation_config.json": _dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}),
        "model.safetensors": safetensors_bytes(seed, damage, scale),
        "special_tokens_map.json": _dump({"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD}),
        "tokenizer.json": _dump(tokenizer_json()),
        "tokenizer_config.json": _dump(tokenizer_config()),
    }


def make_model(out, seed=SEED, damage=None, scale=0.0):
    """Write the model directory OUT (created; its files replaced); return a summary dict."""
    os.makedirs(out, exist_ok=True)
    summary = {"model_dir": os.path.abspath(out), "seed": seed, "damage": None, "files": {}}
    if damage is not None:
        summary["damage"] = {"tensor": damage, "scale": scale}
    for name, data in sorted(files(seed, damage, scale).items()):
        path = os.path.join(out, name)
        with open(path + ".tmp", "wb") as handle:
            handle.write(data)
        os.replace(path + ".tmp", path)
        summary["files"][name] = hashlib.sha256(data).hexdigest()
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out", help="the model directory to write")
    parser.add_argument("--seed", type=int, default=SEED, help="the weights' seed (default %(default)s)")
    parser.add_argument("--damage", nargs="?", const=DEFAULT_DAMAGE, default=None, metavar="TENSOR",
                        help="write a damaged copy: TENSOR's values times --scale (default tensor: %s)"
                        % DEFAULT_DAMAGE)
    parser.add_argument("--scale", type=float, default=0.0, help="the damaged tensor's factor (default 0: zeroed)")
    args = parser.parse_args(argv)
    try:
        summary = make_model(args.out, args.seed, args.damage, args.scale)
    except (ValueError, OSError) as err:
        sys.exit("make_model: %s" % err)
    print(json.dumps(summary, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
