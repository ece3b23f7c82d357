# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The debug tensor dumps left in /tmp on the reference host (35 files, ~65 MB).

Standard library only; the dirty-host preparation runs it on a test host::

    python3 dumps.py /tmp [--dense] [--tokens N] [--mode 0644]

and it prints a JSON summary (count, bytes, files).  Importable too:
``make_dumps(directory)`` returns the same summary, ``reference_set()`` the
names and sizes without writing anything.

The hand-patched vLLM saved tensors with ``torch.save`` from every tensor
parallel rank (TP=8) of a DeepSeek-V3 class model (hidden 7168, MLA with
kv_lora_rank 512 + rope 64, 64 heads so 8 per rank) for one prompt of
``tokens`` tokens in bfloat16:

* ``embed_debug_tp{0..7}.pt``        hidden states after the embedding
* ``nomla_debug_tp{0..7}.pt``        per-rank q of the non-MLA path
* ``mla_debug_layer{0,1}_tp{0..7}.pt`` and ``mla_debug_layer2_tp{0..2}.pt``
  (the run was stopped while layer 2 was being dumped)

A torch.save file is a zip archive; each file here starts with a small
zip local header (so ``file`` and eyes see a ``.pt``) and is sparse by
default, so 65 MB of dumps take almost no disk.  ``--dense`` writes real
bytes.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import struct
import sys

TP = 8
HIDDEN = 7168
HEADS_PER_RANK = 64 // TP
QK_HEAD_DIM = 128 + 64          # nope + rope
KV_LATENT = 512 + 64            # kv_lora_rank + rope
BF16 = 2
ZIP_OVERHEAD = 1216             # torch.save zip headers, pickle, central directory
DEFAULT_TOKENS = 194

PATTERNS = ('nomla_debug_tp*.pt', 'embed_debug_tp*.pt', 'mla_debug_layer*_tp*.pt')


def reference_set(tokens=DEFAULT_TOKENS):
    """List of (file name, size in bytes): the 35 dumps of the reference host."""
    embed = tokens * HIDDEN * BF16 + ZIP_OVERHEAD
    nomla = tokens * HEADS_PER_RANK * QK_HEAD_DIM * BF16 + ZIP_OVERHEAD
    # latent kv (shared by the heads) + per-rank absorbed q, both in the latent space
    mla = tokens * KV_LATENT * BF16 + tokens * HEADS_PER_RANK * KV_LATENT * BF16 + ZIP_OVERHEAD
    files = []
    files += [('embed_debug_tp%d.pt' % rank, embed) for rank in range(TP)]
    files += [('nomla_debug_tp%d.pt' % rank, nomla) for rank in range(TP)]
    for layer in (0, 1):
        files += [('mla_debug_layer%d_tp%d.pt' % (layer, rank), mla) for rank in range(TP)]
    files += [('mla_debug_layer2_tp%d.pt' % rank, mla) for rank in range(3)]
    return files


def _zip_header(name):
    """A zip local file header, as torch.save's archive starts with one."""
    inner = ('%s/data.pkl' % os.path.splitext(name)[0]).encode('ascii')
    return struct.pack('<4sHHHHHIIIHH', b'PK\x03\x04', 0, 0, 0, 0, 0, 0, 0, 0, len(inner), 0) + inner


def make_dumps(directory, tokens=DEFAULT_TOKENS, dense=False, mode=0o644):
    """Write the reference dumps into directory; return a summary dict."""
    os.makedirs(directory, exist_ok=True)
    written = []
    total = 0
    for name, size in reference_set(tokens):
        path = os.path.join(directory, name)
        header = _zip_header(name)
        with open(path, 'wb') as handle:
            handle.write(header)
            if dense:
                remaining = size - len(header)
                block = b'\x3c' * (1 << 20)
                while remaining > 0:
                    chunk = block[:min(remaining, len(block))]
                    handle.write(chunk)
                    remaining -= len(chunk)
            else:
                handle.truncate(size)
        os.chmod(path, mode)
        written.append({'path': path, 'size': size})
        total += size
    return {'directory': directory, 'count': len(written), 'bytes': total, 'files': written}


def main(argv=None):
    parser = argparse.ArgumentParser(description='Write the reference debug tensor dumps.')
    parser.add_argument('directory', nargs='?', default='/tmp')
    parser.add_argument('--tokens', type=int, default=DEFAULT_TOKENS)
    parser.add_argument('--dense', action='store_true', help='write real bytes instead of sparse files')
    parser.add_argument('--mode', default='0644', help='octal file mode (default 0644)')
    args = parser.parse_args(argv)
    summary = make_dumps(args.directory, tokens=args.tokens, dense=args.dense, mode=int(args.mode, 8))
    sys.stdout.write(json.dumps(summary, indent=2) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
