# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Time and memory of a model config edit (module_utils/sm120/jsonedit.py, as sm120_config runs it) on a large config.

    python benchmarks/bench_model_config.py [--mb 10] [--keys 9600] [--also-mb 20,40] [--strict]

Builds, in a temporary directory, a config.json of about --mb megabytes with
--keys layers that each hold a "kv_cache_scheme" member, then removes
"**.kv_cache_scheme" the way sm120_config does (jsonedit.plan_file, then the
edited bytes written).  Each edit runs in a fresh child process, so that its
peak resident memory (VmHWM, else ru_maxrss) is the edit's own plus the
interpreter's.
Printed beside the figures measured before the fix (the text was rescanned
once per match, so the cost grew with the square of the input):

    10 MB, 9,600 keys      before: 58 s, 1.6 GB
    200 MB                 before: more than 300 s, 16.7 GB

--also-mb repeats the edit at other sizes (same density of keys) to show
that time and memory now grow linearly.  --strict exits 1 when the 10 MB case
takes more than 10 s or 500 MB.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
LIMIT_SECONDS = 10
LIMIT_MB = 500

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import jsonedit


def peak_kb():
    # VmHWM starts afresh at exec; ru_maxrss would carry the parent's peak over
    try:
        with open('/proc/self/status') as handle:
            for line in handle:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


path = sys.argv[2]
base_kb = peak_kb()
start = time.perf_counter()
plan = jsonedit.plan_file(path, ['**.kv_cache_scheme'], max_size=1 << 40)
with open(path + '.new', 'wb') as handle:
    handle.write(plan['_raw_after'])
os.replace(path + '.new', path)
took = time.perf_counter() - start
print(json.dumps({'seconds': took, 'maxrss_kb': peak_kb(),
                  'base_kb': base_kb, 'removed': len(plan['removed']), 'bytes_after': len(plan['_raw_after'])}))
"""


def build(path, megabytes, keys):
    """A config.json of about `megabytes` MB with `keys` kv_cache_scheme members."""
    target = int(megabytes * 1000 * 1000)
    probe = json.dumps(_layer(0, ''), indent=2)
    pad = max(0, target // keys - len(probe) - 8)
    layers = [_layer(i, 'w' * pad) for i in range(keys)]
    text = json.dumps({'architectures': ['KimiK25ForCausalLM'], 'model_type': 'kimi_k25', 'layers': layers},
                      indent=2) + '\n'
    with open(path, 'w') as handle:
        handle.write(text)
    return len(text.encode())


def _layer(index, padding):
    return {'index': index, 'name': 'model.layers.%d.self_attn' % index,
            'kv_cache_scheme': {'num_bits': 8, 'type': 'float', 'strategy': 'tensor', 'dynamic': False,
                                'symmetric': True},
            'weights': padding}


def edit(path):
    out = subprocess.run([sys.executable, '-c', CHILD, COLLECTIONS, path], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--mb', type=float, default=10)
    parser.add_argument('--keys', type=int, default=9600)
    parser.add_argument('--also-mb', default='', help='comma-separated other sizes, same density of keys')
    parser.add_argument('--strict', action='store_true')
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(COLLECTIONS, 'ansible_collections', 'gpufleet', 'vllm')):
        sys.exit('run scripts/bootstrap.sh (or the unit tests) first: %s is missing' % COLLECTIONS)

    sizes = [args.mb] + [float(s) for s in args.also_mb.split(',') if s.strip()]
    tmp = tempfile.mkdtemp(prefix='bench-model-config-')
    rows = []
    try:
        for megabytes in sizes:
            keys = int(round(args.keys * megabytes / args.mb))
            path = os.path.join(tmp, 'config.json')
            size = build(path, megabytes, keys)
            result = edit(path)
            if result['removed'] != keys:
                sys.exit('expected %d removed keys, got %d' % (keys, result['removed']))
            with open(path) as handle:
                json.load(handle)   # the edited file is valid JSON
            rows.append((size, keys, result))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print('model config edit of "**.kv_cache_scheme" (jsonedit.plan_file + write), one fresh process each')
    print('%10s %8s %10s %14s %16s' % ('file', 'keys', 'seconds', 'peak RSS', 'RSS over start'))
    for size, keys, result in rows:
        print('%7.1f MB %8d %10.2f %11.0f MB %13.0f MB' % (
            size / 1e6, keys, result['seconds'], result['maxrss_kb'] / 1024.0,
            (result['maxrss_kb'] - result['base_kb']) / 1024.0))
    size, keys, first = rows[0]
    print('reference, before the fix: 10 MB, 9,600 keys: 58 s, 1.6 GB; 200 MB: more than 300 s, 16.7 GB')
    print('now:                       %.0f MB, %d keys: %.2f s, %.0f MB peak RSS'
          % (size / 1e6, keys, first['seconds'], first['maxrss_kb'] / 1024.0))
    if args.strict and (first['seconds'] > LIMIT_SECONDS or first['maxrss_kb'] / 1024.0 > LIMIT_MB):
        sys.exit(1)


if __name__ == '__main__':
    main()
