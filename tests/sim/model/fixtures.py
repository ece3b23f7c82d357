# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Realistic model directories for the model config edit tests and the dirty host.

Standard library only, so the molecule preparation can copy this file to a
test host and run it there::

    python3 fixtures.py DEST [--layout plain|hf-cache] [--indent 2|4|tab|compact]
                             [--quant top|text_config|both|none] [--snapshots N]
                             [--no-hf-quant]

It prints a JSON summary (the model directory to give to the module, the
files written, blobs and links for the cache layout).

The config.json looks like the one of a Kimi-K2.5 checkpoint quantized with
compressed-tensors (DeepseekV3 text model with a vision tower, multimodal
wrapper ``KimiK25ForConditionalGeneration``), carrying the
``kv_cache_scheme`` FP8 block that SM120 GPUs must not see.  The
hf_quant_config.json is the one NVIDIA ModelOpt writes for NVFP4 exports,
carrying ``quantization.kv_cache_quant_algo: FP8``.

Layouts:

``plain``
    DEST/config.json, DEST/hf_quant_config.json, ... (a model copied or
    downloaded with ``--local-dir``).
``hf-cache``
    the Hugging Face hub cache: DEST/models--moonshotai--Kimi-K2.5/ with
    ``blobs/<git blob sha1>`` (``blobs/<sha256>`` for a Git LFS file, the
    ``lfs`` names of :func:`write_hf_cache`), ``refs/main`` and ``snapshots/<rev>/<file>``
    as relative links ``../../blobs/<sha1>``.  With ``snapshots=2`` both
    revisions link to the same blobs for the files they share (the case
    where editing a blob would change another snapshot).
"""

from __future__ import absolute_import, division, print_function

import argparse
import hashlib
import json
import os
import sys

REPO_ID = 'moonshotai/Kimi-K2.5'
REVISIONS = (
    '3f1c6a0e2b9d4c7a8e5f1b2c3d4e5f6a7b8c9d0e',
    '9a8b7c6d5e4f30211f2e3d4c5b6a79880a1b2c3d',
    '0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f6a7b8c9d0',
)

KV_CACHE_SCHEME = {
    'num_bits': 8,
    'type': 'float',
    'strategy': 'tensor',
    'dynamic': False,
    'symmetric': True,
}


def compressed_tensors_quantization_config(kv_cache=True):
    """The quantization_config of an INT4 (W4A16, group 32) compressed-tensors export."""
    config = {
        'config_groups': {
            'group_0': {
                'input_activations': None,
                'output_activations': None,
                'targets': ['Linear'],
                'weights': {
                    'actorder': None,
                    'block_structure': None,
                    'dynamic': False,
                    'group_size': 32,
                    'num_bits': 4,
                    'observer': 'minmax',
                    'observer_kwargs': {},
                    'strategy': 'group',
                    'symmetric': True,
                    'type': 'int',
                },
            },
        },
        'format': 'pack-quantized',
        'global_compression_ratio': None,
        'ignore': [
            'lm_head',
            're:.*self_attn.*',
            're:.*shared_experts.*',
            're:.*mlp\\.(gate|up|gate_up|down)_proj.*',
            're:vision_tower.*',
            're:mm_projector.*',
        ],
        'kv_cache_scheme': dict(KV_CACHE_SCHEME),
        'quant_method': 'compressed-tensors',
        'quantization_status': 'compressed',
        'sparsity_config': {},
        'transform_config': {},
        'version': '0.11.0',
    }
    if not kv_cache:
        del config['kv_cache_scheme']
    return config


def text_config(quantization=False):
    """DeepseekV3 text model of a Kimi K2 class checkpoint (61 layers, 384 experts)."""
    config = {
        'architectures': ['DeepseekV3ForCausalLM'],
        'attention_bias': False,
        'attention_dropout': 0.0,
        'aux_loss_alpha': 0.001,
        'bos_token_id': 163584,
        'eos_token_id': 163585,
        'first_k_dense_replace': 1,
        'hidden_act': 'silu',
        'hidden_size': 7168,
        'initializer_range': 0.02,
        'intermediate_size': 18432,
        'kv_lora_rank': 512,
        'max_position_embeddings': 262144,
        'model_type': 'deepseek_v3',
        'moe_intermediate_size': 2048,
        'moe_layer_freq': 1,
        'n_group': 1,
        'n_routed_experts': 384,
        'n_shared_experts': 1,
        'norm_topk_prob': True,
        'num_attention_heads': 64,
        'num_experts_per_tok': 8,
        'num_hidden_layers': 61,
        'num_key_value_heads': 64,
        'num_nextn_predict_layers': 0,
        'pad_token_id': 163839,
        'pretraining_tp': 1,
        'q_lora_rank': 1536,
        'qk_nope_head_dim': 128,
        'qk_rope_head_dim': 64,
        'rms_norm_eps': 1e-05,
        'rope_scaling': {
            'beta_fast': 1.0,
            'beta_slow': 1.0,
            'factor': 64.0,
            'mscale': 1.0,
            'mscale_all_dim': 1.0,
            'original_max_position_embeddings': 4096,
            'type': 'yarn',
        },
        'rope_theta': 50000.0,
        'routed_scaling_factor': 2.827,
        'scoring_func': 'sigmoid',
        'seq_aux': True,
        'tie_word_embeddings': False,
        'topk_group': 1,
        'topk_method': 'noaux_tc',
        'torch_dtype': 'bfloat16',
        'use_cache': True,
        'v_head_dim': 128,
        'vocab_size': 163840,
    }
    if quantization:
        config['quantization_config'] = compressed_tensors_quantization_config()
    return config


def kimi_k25_config(quant='top'):
    """config.json of a Kimi-K2.5 compressed-tensors checkpoint.

    quant: where quantization_config (with kv_cache_scheme) sits: 'top',
    'text_config', 'both' or 'none' (a clean file, no quantization block).
    """
    if quant not in ('top', 'text_config', 'both', 'none'):
        raise ValueError('quant must be top, text_config, both or none')
    config = {
        'architectures': ['KimiK25ForConditionalGeneration'],
        'auto_map': {
            'AutoConfig': 'configuration_kimi_k25.KimiK25Config',
            'AutoModel': 'modeling_kimi_k25.KimiK25ForConditionalGeneration',
            'AutoModelForCausalLM': 'modeling_kimi_k25.KimiK25ForConditionalGeneration',
        },
        'bos_token_id': 163584,
        'eos_token_id': 163585,
        'ignore_index': -100,
        'media_placeholder_token_id': 163605,
        'model_type': 'kimi_k25',
        'pad_token_id': 163839,
        'text_config': text_config(quantization=quant in ('text_config', 'both')),
        'tie_word_embeddings': False,
        'torch_dtype': 'bfloat16',
        'transformers_version': '4.57.1',
        'use_unified_vision_chunk': True,
        'video_placeholder': '<|kimi_k25_video_placeholder|>',
        'vision_config': {
            'init_pos_emb_height': 64,
            'init_pos_emb_width': 64,
            'merge_kernel_size': [2, 2],
            'mm_hidden_size': 1152,
            'mm_projector_type': 'patchmerger',
            'model_type': 'moonvit',
            'num_attention_heads': 16,
            'num_hidden_layers': 27,
            'patch_size': 14,
            'projection_ln_eps': 1e-05,
            'text_hidden_size': 7168,
        },
    }
    if quant in ('top', 'both'):
        # transformers writes keys sorted; quantization_config lands before text_config
        items = list(config.items())
        position = [k for k, dummy in items].index('text_config')
        items.insert(position, ('quantization_config', compressed_tensors_quantization_config()))
        config = dict(items)
    return config


def modelopt_hf_quant_config(kv_cache=True):
    """hf_quant_config.json as NVIDIA ModelOpt writes it for an NVFP4 export."""
    quantization = {
        'quant_algo': 'NVFP4',
        'kv_cache_quant_algo': 'FP8',
        'group_size': 16,
        'exclude_modules': [
            'lm_head',
            'model.layers.0.mlp',
            'model.layers.*.self_attn*',
            'model.layers.*.mlp.gate',
            'model.layers.*.mlp.shared_experts*',
            'vision_tower*',
            'mm_projector*',
        ],
    }
    if not kv_cache:
        del quantization['kv_cache_quant_algo']
    return {
        'producer': {'name': 'modelopt', 'version': '0.37.0'},
        'quantization': quantization,
    }


def generation_config():
    return {'bos_token_id': 163584, 'eos_token_id': 163586, 'max_length': 262144,
            'temperature': 1.0, 'top_p': 0.95, 'transformers_version': '4.57.1'}


def dumps(data, indent=2, ensure_ascii=True, trailing_newline=True):
    """Serialise like the tool that writes such a file.

    indent: 2 or 4 (spaces), 'tab', or None/'compact' for a single line.
    """
    if indent in (None, 'compact'):
        text = json.dumps(data, separators=(',', ':'), ensure_ascii=ensure_ascii)
    elif indent == 'tab':
        text = json.dumps(data, indent='\t', ensure_ascii=ensure_ascii)
    else:
        text = json.dumps(data, indent=int(indent), ensure_ascii=ensure_ascii)
    return text + ('\n' if trailing_newline else '')


def model_files(quant='top', hf_quant=True, indent=2, hf_quant_indent=4):
    """File name -> bytes of a model directory (small files only, no weights)."""
    files = {
        'config.json': dumps(kimi_k25_config(quant), indent),
        'generation_config.json': dumps(generation_config(), 2),
        'tokenizer_config.json': dumps({'add_bos_token': False, 'model_max_length': 262144,
                                        'tokenizer_class': 'TikTokenTokenizer',
                                        'auto_map': {'AutoTokenizer': ['tokenization_kimi.TikTokenTokenizer', None]}}, 2),
    }
    if hf_quant:
        files['hf_quant_config.json'] = dumps(modelopt_hf_quant_config(kv_cache=quant != 'none'), hf_quant_indent)
    return dict((name, text.encode('utf-8')) for name, text in files.items())


def git_blob_sha1(data):
    """The name the Hugging Face hub gives a small (non-LFS) file's blob."""
    return hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest()


def write_plain(dest, files):
    os.makedirs(dest, exist_ok=True)
    written = []
    for name, data in sorted(files.items()):
        path = os.path.join(dest, name)
        with open(path, 'wb') as handle:
            handle.write(data)
        written.append(path)
    return {'layout': 'plain', 'model_dir': dest, 'files': written}


def write_hf_cache(cache_dir, snapshots, repo_id=REPO_ID, lfs=()):
    """Write a hub cache repo; snapshots is a list of {file name: bytes}.

    Identical contents share one blob, as in a real cache.  The last
    snapshot is what refs/main points at.  The files named in lfs (the
    weights) are Git LFS files: their blob is named by the content's
    sha256, the others' by their git blob sha1.
    """
    repo = os.path.join(cache_dir, 'models--' + repo_id.replace('/', '--'))
    blobs = os.path.join(repo, 'blobs')
    os.makedirs(blobs, exist_ok=True)
    os.makedirs(os.path.join(repo, 'refs'), exist_ok=True)
    summary = {'layout': 'hf-cache', 'repo': repo, 'snapshots': [], 'blobs': {}, 'links': []}
    for index, files in enumerate(snapshots):
        revision = REVISIONS[index % len(REVISIONS)]
        snapshot = os.path.join(repo, 'snapshots', revision)
        os.makedirs(snapshot, exist_ok=True)
        for name, data in sorted(files.items()):
            sha = hashlib.sha256(data).hexdigest() if name in lfs else git_blob_sha1(data)
            blob = os.path.join(blobs, sha)
            if not os.path.exists(blob):
                with open(blob, 'wb') as handle:
                    handle.write(data)
            link = os.path.join(snapshot, name)
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(os.path.join('..', '..', 'blobs', sha), link)
            summary['blobs'].setdefault(name, [])
            if blob not in summary['blobs'][name]:
                summary['blobs'][name].append(blob)
            summary['links'].append(link)
        summary['snapshots'].append(snapshot)
        with open(os.path.join(repo, 'refs', 'main'), 'w') as handle:
            handle.write(revision)
    summary['model_dir'] = summary['snapshots'][-1]
    return summary


def make_model_dir(dest, layout='plain', quant='top', hf_quant=True, indent=2, hf_quant_indent=4,
                   snapshots=1):
    """Write a realistic model directory under dest; return a summary dict.

    layout 'plain': dest is the model directory.  layout 'hf-cache': dest is
    the hub cache directory; ``summary['model_dir']`` is the newest snapshot
    and, with snapshots > 1, every snapshot links to the same config blobs
    (the second one adds a README so the snapshots differ).
    """
    files = model_files(quant=quant, hf_quant=hf_quant, indent=indent, hf_quant_indent=hf_quant_indent)
    if layout == 'plain':
        return write_plain(dest, files)
    if layout in ('hf-cache', 'hf_cache'):
        revisions = []
        for index in range(snapshots):
            revision_files = dict(files)
            if index:
                revision_files['README.md'] = ('# Kimi-K2.5\n\nrevision %d\n' % index).encode('utf-8')
            revisions.append(revision_files)
        return write_hf_cache(dest, revisions)
    raise ValueError('layout must be plain or hf-cache')


def main(argv=None):
    parser = argparse.ArgumentParser(description='Write a realistic (dirty) model directory.')
    parser.add_argument('dest')
    parser.add_argument('--layout', choices=['plain', 'hf-cache'], default='plain')
    parser.add_argument('--quant', choices=['top', 'text_config', 'both', 'none'], default='top')
    parser.add_argument('--indent', choices=['2', '4', 'tab', 'compact'], default='2')
    parser.add_argument('--snapshots', type=int, default=1)
    parser.add_argument('--no-hf-quant', action='store_true')
    args = parser.parse_args(argv)
    indent = args.indent if args.indent in ('tab', 'compact') else int(args.indent)
    summary = make_model_dir(args.dest, layout=args.layout, quant=args.quant, hf_quant=not args.no_hf_quant,
                             indent=indent, snapshots=args.snapshots)
    sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
