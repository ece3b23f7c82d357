# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build a simulated model directory with a small, real tokenizer.

A simulated GPU host serves a directory like ``/shared/kimi-k2.5-nvfp4``:
config files (written by ``fixtures.py`` next to this file when it is
there, else a minimal ``config.json``) plus a tokenizer that both
``transformers.AutoTokenizer.from_pretrained(dir)`` (so ``vllm bench serve
--tokenizer dir`` works offline) and the stand-in server
(``tests/sim/standin/vllm_standin.py``, standard library only) read:

* ``tokenizer.json``: a WordLevel model trained with the ``tokenizers``
  library on a generated corpus, Whitespace pre-tokenizer (pieces
  ``\\w+|[^\\w\\s]+``), no normalizer, no post-processor (no BOS/EOS added
  to a prompt, so a prompt of N tokens is N tokens on the server too), no
  decoder (ids decode to their words joined by single spaces);
* ``tokenizer_config.json`` (``PreTrainedTokenizerFast``,
  ``clean_up_tokenization_spaces: false`` so decode/encode round trips keep
  the token count) and ``special_tokens_map.json``;
* four real safetensors shards named as the hub names them
  (``model-00001-of-00004.safetensors`` ...; 8-byte little-endian header
  length, the JSON header padded with spaces to 8 bytes, the tensors'
  bytes: a small DeepseekV3-like model with NVFP4 MLP weights, about
  620 KB in all, every byte a function of the tensor's name) and
  ``model.safetensors.index.json`` naming them, as
  ``gpufleet.vllm.model_info`` checks a model directory.

In the ``hf-cache`` layout every file of the snapshot is a relative link
into ``blobs/``: a shard's blob is named by its content's sha256 (a Git LFS
file), the others by their git blob sha1, as the hub names them.

Vocabulary: 4 special tokens (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<pad>``
3), then lowercase words, digits and punctuation, ordered by their (all
distinct) frequencies in the corpus, so the build is reproducible byte for
byte.

Only the control node needs ``tokenizers``: build the directory here and
copy it to the hosts::

    python make_model_dir.py OUT_DIR [--layout plain|hf-cache] [--quant top|text_config|both|none]

It prints a JSON summary (``model_dir``: the directory to serve).
"""

import argparse
import hashlib
import json
import os
import random
import struct
import sys

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
UNK, BOS, EOS, PAD = SPECIAL_TOKENS

# Real words first (the text the stand-in generates reads like words).
COMMON_WORDS = (
    "hello", "world", "the", "model", "token", "serve", "fleet", "host", "stream", "light",
    "river", "stone", "cloud", "green", "quiet", "north", "paper", "table", "water", "fire",
    "earth", "wind", "gold", "silver", "iron", "glass", "bread", "apple", "tree", "leaf",
    "bird", "fish", "horse", "house", "door", "road", "city", "field", "hill", "lake",
    "sea", "sky", "sun", "moon", "star", "rain", "snow", "day", "night", "time",
    "year", "hand", "eye", "voice", "song", "word", "book", "story", "game", "music",
)
DIGITS = tuple("0123456789")
PUNCTUATION = (".", ",", "?", "!", ":", ";", "-", "(", ")")
VOCAB_WORDS = 400
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


def vocabulary_words(count=VOCAB_WORDS):
    """The corpus words: COMMON_WORDS, then made-up two-syllable words."""
    words = list(COMMON_WORDS)
    seen = set(words)
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    rng = random.Random(20250101)
    while len(words) < count:
        word = rng.choice(syllables) + rng.choice(syllables)
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def corpus(words=None):
    """Sentences in which token k of the ranked list occurs exactly (T - k) times.

    Distinct frequencies make the trained vocabulary's order independent of
    hash-map iteration inside the trainer.
    """
    ranked = list(words or vocabulary_words()) + list(DIGITS) + list(PUNCTUATION)
    total = len(ranked)
    bag = []
    for rank, token in enumerate(ranked):
        bag.extend([token] * (total - rank))
    rng = random.Random(7)
    rng.shuffle(bag)
    return [" ".join(bag[i:i + 16]) for i in range(0, len(bag), 16)]


def build_tokenizer(words=None):
    """Train and return the WordLevel ``tokenizers.Tokenizer``."""
    # Imported here: the rest of this file (and fixtures.py) is stdlib only.
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # pylint: disable=import-outside-toplevel

    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=100000, min_frequency=1, show_progress=False,
                                        special_tokens=list(SPECIAL_TOKENS))
    tokenizer.train_from_iterator(corpus(words), trainer=trainer)
    return tokenizer


def tokenizer_config(model_max_length):
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": ("{% for message in messages %}{{ message['content'] }}"
                          "{% if not loop.last %}\n{% endif %}{% endfor %}"),
    }


def special_tokens_map():
    return {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD}


def minimal_config(vocab_size, max_position_embeddings):
    """config.json when fixtures.py is not at hand: a small DeepseekV3 text model."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": max_position_embeddings,
        "torch_dtype": "bfloat16",
    }


# ---------------------------------------------------------------------------
# weights: real (small) safetensors shards and their index

SHARDS = 4
SHARD_NAME = "model-%05d-of-%05d.safetensors"
INDEX_NAME = "model.safetensors.index.json"
WEIGHT_VOCAB = 512              # embedding rows: the tokenizer's vocabulary rounded up
WEIGHT_HIDDEN = 128
WEIGHT_INTERMEDIATE = 256
WEIGHT_LAYERS = 2
NVFP4_GROUP = 16                # elements per FP8 (E4M3) block scale
DTYPE_BYTES = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def _layer_attention(layer):
    pre = "model.layers.%d." % layer
    tensors = [(pre + "input_layernorm.weight", "BF16", [WEIGHT_HIDDEN])]
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        tensors.append((pre + "self_attn.%s.weight" % proj, "BF16", [WEIGHT_HIDDEN, WEIGHT_HIDDEN]))
    return tensors


def _layer_mlp(layer):
    """A ModelOpt NVFP4 MLP: packed FP4 weights (two per byte), FP8 block scales, FP32 global scales."""
    pre = "model.layers.%d." % layer
    tensors = [(pre + "post_attention_layernorm.weight", "BF16", [WEIGHT_HIDDEN])]
    for proj, rows, cols in (("gate_proj", WEIGHT_INTERMEDIATE, WEIGHT_HIDDEN),
                             ("up_proj", WEIGHT_INTERMEDIATE, WEIGHT_HIDDEN),
                             ("down_proj", WEIGHT_HIDDEN, WEIGHT_INTERMEDIATE)):
        name = pre + "mlp.%s." % proj
        tensors += [(name + "weight", "U8", [rows, cols // 2]),
                    (name + "weight_scale", "F8_E4M3", [rows, cols // NVFP4_GROUP]),
                    (name + "weight_scale_2", "F32", []),
                    (name + "input_scale", "F32", [])]
    return tensors


def weight_shards():
    """[(shard file name, [(tensor name, dtype, shape), ...]), ...]: SHARDS shards, as a checkpoint splits them."""
    groups = [
        [("model.embed_tokens.weight", "BF16", [WEIGHT_VOCAB, WEIGHT_HIDDEN])] + _layer_attention(0),
        _layer_mlp(0) + _layer_attention(1),
        _layer_mlp(1) + [("model.norm.weight", "BF16", [WEIGHT_HIDDEN])],
        [("lm_head.weight", "BF16", [WEIGHT_VOCAB, WEIGHT_HIDDEN])],
    ]
    assert len(groups) == SHARDS
    return [(SHARD_NAME % (number, SHARDS), tensors) for number, tensors in enumerate(groups, 1)]


def tensor_bytes(name, dtype, shape):
    """The tensor's bytes, a function of its name: weights of a plausible size, norms of ones, finite scales."""
    count = 1
    for dim in shape:
        count *= dim
    size = count * DTYPE_BYTES[dtype]
    if dtype == "F32":
        return struct.pack("<f", 0.0025 if name.endswith("input_scale") else 0.000125) * count
    if dtype == "BF16" and name.endswith("norm.weight"):
        return b"\x80\x3f" * count                    # 1.0
    data = bytearray(hashlib.shake_256(("gpufleet.vllm simulated weight\n" + name).encode("utf-8")).digest(size))
    if dtype == "BF16":
        # sign and a small exponent in the high byte: values of magnitude 2**-7 to 2**-5, as trained weights
        data[1::2] = bytes((b & 0x80) | 0x3c | (b & 0x01) for b in data[1::2])
    elif dtype == "F8_E4M3":
        data = bytearray(0x30 | (b & 0x0f) for b in data)     # positive, finite block scales
    return bytes(data)


def safetensors_file(tensors):
    """The bytes of a safetensors file holding TENSORS [(name, dtype, shape)] in that order."""
    header = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name, dtype, shape in tensors:
        data = tensor_bytes(name, dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)                     # the safetensors library pads the header to 8 bytes
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def weight_files():
    """File name -> bytes: the shards and model.safetensors.index.json."""
    files = {}
    weight_map = {}
    total = 0
    for shard, tensors in weight_shards():
        files[shard] = safetensors_file(tensors)
        for name, dtype, shape in tensors:
            weight_map[name] = shard
            total += len(tensor_bytes(name, dtype, shape))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    files[INDEX_NAME] = (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return files


def _write_bytes(path, data):
    """Write a regular file of DATA (bytes); a link there is replaced, what it points to untouched."""
    if os.path.islink(path):
        os.unlink(path)
    tmp = path + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
    return path


def _dump(data):
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _fixtures():
    """tests/sim/model/fixtures.py when it is importable, else None."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        import fixtures  # pylint: disable=import-outside-toplevel,import-error
    except ImportError:
        return None
    needed = ("model_files", "write_plain", "write_hf_cache")
    return fixtures if all(hasattr(fixtures, name) for name in needed) else None


def tokenizer_files(model_max_length=262144, tokenizer=None):
    """File name -> bytes: tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    tokenizer = tokenizer or build_tokenizer()
    texts = {
        "tokenizer.json": tokenizer.to_str(pretty=True) + "\n",
        "tokenizer_config.json": _dump(tokenizer_config(model_max_length)),
        "special_tokens_map.json": _dump(special_tokens_map()),
    }
    return dict((name, text.encode("utf-8")) for name, text in texts.items())


def write_tokenizer(model_dir, model_max_length=262144, tokenizer=None):
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    os.makedirs(model_dir, exist_ok=True)
    files = tokenizer_files(model_max_length, tokenizer)
    return [_write_bytes(os.path.join(model_dir, name), data) for name, data in sorted(files.items())]


def make_model_dir(path, layout="plain", quant="top", max_position_embeddings=262144, use_fixtures=True):
    """Build a simulated model directory under ``path``; return a summary dict.

    With fixtures.py (and use_fixtures) the config files are its Kimi-K2.5
    ones (``quant`` is passed to it) and ``layout`` may be ``hf-cache``:
    ``path`` is then a hub cache whose one snapshot links every file (the
    config files, the tokenizer, the shards and their index) into
    ``blobs/``. Otherwise ``path`` gets a minimal config.json and
    generation_config.json. ``summary['model_dir']`` is the directory to
    serve, ``summary['files']`` its files.
    """
    if layout not in ("plain", "hf-cache", "hf_cache"):
        raise ValueError("layout must be plain or hf-cache, got %r" % (layout,))
    tokenizer = build_tokenizer()
    fixtures = _fixtures() if use_fixtures else None
    if fixtures is None and layout != "plain":
        raise ValueError("layout %r needs tests/sim/model/fixtures.py" % (layout,))
    if fixtures is not None:
        files = fixtures.model_files(quant=quant)
    else:
        files = {
            "config.json": _dump(minimal_config(tokenizer.get_vocab_size(), max_position_embeddings)).encode("utf-8"),
            "generation_config.json": _dump({"bos_token_id": 1, "eos_token_id": 2,
                                             "max_length": max_position_embeddings}).encode("utf-8"),
        }
    # (the tokenizer replaces the fixtures' TikToken tokenizer_config.json: this one loads offline)
    files.update(tokenizer_files(max_position_embeddings, tokenizer))
    weights = weight_files()
    files.update(weights)
    if layout == "plain":
        os.makedirs(path, exist_ok=True)
        written = [_write_bytes(os.path.join(path, name), data) for name, data in sorted(files.items())]
        summary = {"layout": "plain", "model_dir": path, "files": written}
    else:
        shards = [name for name in weights if name.endswith(".safetensors")]
        summary = fixtures.write_hf_cache(path, [files], lfs=shards)
        summary["files"] = list(summary["links"])
    summary["files"] = sorted(summary["files"])
    summary["tokenizer"] = {"vocab_size": tokenizer.get_vocab_size(), "type": "WordLevel"}
    summary["weights"] = {"shards": sorted(n for n in weights if n.endswith(".safetensors")), "index": INDEX_NAME,
                          "bytes": sum(len(data) for name, data in weights.items() if name.endswith(".safetensors"))}
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description="Build a simulated model directory with a small real tokenizer.")
    parser.add_argument("out_dir")
    parser.add_argument("--layout", choices=["plain", "hf-cache"], default="plain")
    parser.add_argument("--quant", choices=["top", "text_config", "both", "none"], default="top",
                        help="where fixtures.py puts the kv_cache_scheme block (none: a clean config)")
    parser.add_argument("--max-position-embeddings", type=int, default=262144)
    parser.add_argument("--no-fixtures", action="store_true", help="write a minimal config.json instead")
    args = parser.parse_args(argv)
    summary = make_model_dir(args.out_dir, layout=args.layout, quant=args.quant,
                             max_position_embeddings=args.max_position_embeddings,
                             use_fixtures=not args.no_fixtures)
    sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
