# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Overhead of the benchmark role per host: everything except `vllm bench serve` itself.

    python benchmarks/bench_benchmark_role.py [--host benchmark-1] [--levels 1,16,64] [--strict]

Needs a simulated host with vLLM installed with its dependencies and the
stand-in serving, as `molecule converge -s benchmark` leaves it (podman
container benchmark-1; the default) or any host reachable by the given
--connection. Runs, with scripts/lib.sh's environment:

1. a play with one no-op task on the host (ansible-playbook's own start,
   inventory, connection): the floor of any role;
2. the benchmark role with a fresh run id over --levels (a small random
   dataset: 2 prompts per stream, 128 tokens in, 32 out).

The role's overhead is the role play's wall time minus the time spent
inside `vllm bench serve` (the role records it per level from the command's
own start/end: `bench_seconds` in summary.json), printed with and without
ansible-playbook's start, next to the target of the issue:

    role overhead per host (excluding vllm bench serve)   < 15 s

--strict exits 1 when the target is missed.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_SECONDS = 15.0

NOOP = """
- name: No-op
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping the host
      ansible.builtin.ping:
"""

ROLE = """
- name: Benchmark overhead
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.vllm.benchmark
"""


def run_playbook(playbook, inventory, extra, env):
    start = time.monotonic()
    result = subprocess.run([os.path.join(REPO, '.venv', 'bin', 'ansible-playbook'), '-i', inventory,
                             playbook, '-e', json.dumps(extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, check=False)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.stderr.write(result.stdout.decode(errors='replace')[-4000:])
        sys.exit('ansible-playbook failed (exit status %d)' % result.returncode)
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--host', default='benchmark-1')
    parser.add_argument('--connection', default='gpufleet_sim.hosts.podman')
    parser.add_argument('--levels', default='1,16,64')
    parser.add_argument('--venv', default='/opt/vllm/bench-env')
    parser.add_argument('--tokenizer', default='/shared/kimi-k2.5-nvfp4')
    parser.add_argument('--model', default='kimi-k2.5')
    parser.add_argument('--strict', action='store_true')
    args = parser.parse_args()

    env = dict(os.environ)
    env.update({
        'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
        'ANSIBLE_COLLECTIONS_PATH': os.pathsep.join([os.path.join(REPO, '.cache', 'collections'),
                                                     os.path.join(REPO, 'tests', 'sim', 'collections')]),
        'CONTAINERS_CONF': env.get('CONTAINERS_CONF', os.path.join(REPO, 'tests', 'sim', 'containers.conf')),
        'NO_COLOR': '1',
    })
    work = tempfile.mkdtemp(prefix='bench-role-')
    try:
        inventory = os.path.join(work, 'hosts.yml')
        with open(inventory, 'w') as handle:
            json.dump({'all': {'hosts': {args.host: {'ansible_connection': args.connection,
                                                     'ansible_python_interpreter': '/usr/bin/python3'}}}}, handle)
        noop, role = os.path.join(work, 'noop.yml'), os.path.join(work, 'role.yml')
        with open(noop, 'w') as handle:
            handle.write(NOOP)
        with open(role, 'w') as handle:
            handle.write(ROLE)
        levels = [int(level) for level in args.levels.split(',')]
        run_id = 'overhead-%d' % int(time.time())
        results = os.path.join(work, 'results')
        extra = {'benchmark_venv': args.venv, 'benchmark_tokenizer': args.tokenizer, 'benchmark_model': args.model,
                 'benchmark_concurrency': levels, 'benchmark_input_len': 128, 'benchmark_output_len': 32,
                 'benchmark_prompts_min': 2, 'benchmark_prompts_per_concurrency': 2,
                 'benchmark_local_results_dir': results, 'benchmark_run_id': run_id,
                 'benchmark_on_regression': 'warn'}

        floor = run_playbook(noop, inventory, {}, env)
        wall = run_playbook(role, inventory, extra, env)
        with open(os.path.join(results, run_id, args.host, 'summary.json')) as handle:
            summary = json.load(handle)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    bench = summary['bench_seconds']
    overhead = wall - bench
    print('benchmark role on %s, %d levels %s' % (args.host, len(levels), levels))
    print('  ansible-playbook wall time               %7.1f s' % wall)
    print('  inside vllm bench serve (%d runs)         %7.1f s' % (len(levels), bench))
    print('  ansible-playbook start + one task        %7.1f s' % floor)
    print('')
    print('  %-52s %8s %8s' % ('', 'measured', 'target'))
    print('  %-52s %7.1fs %7.0fs' % ('role overhead per host (excluding vllm bench serve)', overhead, TARGET_SECONDS))
    print('  %-52s %7.1fs' % ('  of which ansible-playbook start + one task', floor))
    print('  %-52s %7.1fs' % ('  per level (after the start)', (overhead - floor) / len(levels)))
    if args.strict and overhead >= TARGET_SECONDS:
        sys.exit(1)


if __name__ == '__main__':
    main()
