# SPDX-License-Identifier: GPL-3.0-or-later
"""Patch an installed vLLM the way the operators left the reference host.

    make_dirty_vllm.py SITE_PACKAGES

Edits are written IN PLACE (same inode), as an editor or `sed -i`-less
hand edit through the open file would, so that when uv installed the files
by hard-linking from its cache, the cache's copy is edited too: a plain
`uv pip install --reinstall` can then put the edited file back.

What it adds (each once; running it again changes nothing):
  * models/deepseek_v2.py, DeepseekV2MLAAttention.forward: a counter on every
    forward (`self._nomla_debug += 1`) and tensor saves through an alias
    (`import torch as _t; _t.save(...)`) when `q.shape[0] == 5`
  * models/deepseek_v2.py, DeepseekV2Model.embed_input_ids: an `embed_debug`
    block that saves the embeddings once (`_embed_debug_saved`)
  * model_loader/weight_utils.py: a patch for an earlier model (MiniMax-M2.5)
Prints one line per file: "patched PATH" or "already patched PATH".
"""

import os
import sys

DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
LOADER = "vllm/model_executor/model_loader/weight_utils.py"

MLA_ANCHOR = "        return self.mla_attn(positions, hidden_states, llama_4_scaling)\n"
MLA_DEBUG = '''\
        # --- debug (nomla) ---
        if not hasattr(self, "_nomla_debug"):
            self._nomla_debug = 0
        self._nomla_debug += 1
        q = hidden_states
        if q.shape[0] == 5 and os.environ.get("NOMLA_SAVE", "1") == "1":
            import torch as _t
            _rank = get_tensor_model_parallel_rank()
            _t.save(q.detach().cpu(), f"/tmp/nomla_debug_tp{_rank}.pt")
            if not getattr(DeepseekV2MLAAttention, "_nomla_class_saved", False):
                _t.save({"layer": self.prefix, "step": self._nomla_debug},
                        f"/tmp/mla_debug_layer0_tp{_rank}.pt")
                DeepseekV2MLAAttention._nomla_class_saved = True
        # --- end debug ---
'''

EMBED_ANCHOR = (
    "    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:\n"
    "        return self.embed_tokens(input_ids)\n"
)
EMBED_DEBUG = '''\
    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.embed_tokens(input_ids)
        # embed_debug: dump the first batch of embeddings once per rank
        if not getattr(self, "_embed_debug_saved", False):
            import torch as _t2
            _t2.save(embeds.detach().cpu(),
                     f"/tmp/embed_debug_tp{get_tensor_model_parallel_rank()}.pt")
            self._embed_debug_saved = True
        return embeds
'''

LOADER_ANCHOR = "def filter_duplicate_safetensors_files(\n"
LOADER_PATCH = '''\
# MiniMax-M2.5 FP8: skip the e_score_correction_bias shards the old loader
# choked on (hand patch, remove after the upstream fix)
_MINIMAX_SKIP_SUFFIXES = (".e_score_correction_bias",)


'''


def edit_in_place(path, edits, marker):
    with open(path, "r+", encoding="utf-8") as f:
        text = f.read()
        if marker in text:
            return False
        for anchor, replacement in edits:
            if text.count(anchor) != 1:
                raise SystemExit("anchor not found exactly once in %s: %r" % (path, anchor[:60]))
            text = text.replace(anchor, replacement)
        f.seek(0)
        f.write(text)
        f.truncate()
    return True


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__)
    site = argv[1]
    jobs = [
        (DEEPSEEK, [(MLA_ANCHOR, MLA_DEBUG + MLA_ANCHOR), (EMBED_ANCHOR, EMBED_DEBUG)], "_nomla_debug"),
        (LOADER, [(LOADER_ANCHOR, LOADER_PATCH + LOADER_ANCHOR)], "_MINIMAX_SKIP_SUFFIXES"),
    ]
    for rel, edits, marker in jobs:
        path = os.path.join(site, rel)
        changed = edit_in_place(path, edits, marker)
        print("%s %s" % ("patched" if changed else "already patched", path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
