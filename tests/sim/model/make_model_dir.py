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
  the token count) and ``special_tokens_map.json``.

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
import json
import os
import random
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


def _write_file(path, text):
    """Write a regular file; a link there (hub cache snapshot) is replaced, its blob untouched."""
    if os.path.islink(path):
        os.unlink(path)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
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
    return fixtures if hasattr(fixtures, "make_model_dir") else None


def write_tokenizer(model_dir, model_max_length=262144, tokenizer=None):
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    tokenizer = tokenizer or build_tokenizer()
    os.makedirs(model_dir, exist_ok=True)
    return [
        _write_file(os.path.join(model_dir, "tokenizer.json"), tokenizer.to_str(pretty=True) + "\n"),
        _write_file(os.path.join(model_dir, "tokenizer_config.json"), _dump(tokenizer_config(model_max_length))),
        _write_file(os.path.join(model_dir, "special_tokens_map.json"), _dump(special_tokens_map())),
    ]


def make_model_dir(path, layout="plain", quant="top", max_position_embeddings=262144, use_fixtures=True):
    """Build a simulated model directory under ``path``; return a summary dict.

    With fixtures.py (and use_fixtures) the config files are its Kimi-K2.5
    ones (``layout``/``quant`` are passed to it; for ``hf-cache`` the
    tokenizer goes into the newest snapshot). Otherwise ``path`` gets a
    minimal config.json and generation_config.json. ``summary['model_dir']``
    is the directory to serve.
    """
    tokenizer = build_tokenizer()
    fixtures = _fixtures() if use_fixtures else None
    if fixtures is not None:
        summary = fixtures.make_model_dir(path, layout=layout, quant=quant)
        summary.setdefault("files", [])
    else:
        if layout != "plain":
            raise ValueError("layout %r needs tests/sim/model/fixtures.py" % (layout,))
        os.makedirs(path, exist_ok=True)
        summary = {"layout": "plain", "model_dir": path, "files": [
            _write_file(os.path.join(path, "config.json"),
                        _dump(minimal_config(tokenizer.get_vocab_size(), max_position_embeddings))),
            _write_file(os.path.join(path, "generation_config.json"),
                        _dump({"bos_token_id": 1, "eos_token_id": 2, "max_length": max_position_embeddings})),
        ]}
    written = write_tokenizer(summary["model_dir"], max_position_embeddings, tokenizer)
    summary["files"] = sorted(set(summary["files"]) | set(written))
    summary["tokenizer"] = {"vocab_size": tokenizer.get_vocab_size(), "type": "WordLevel"}
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
