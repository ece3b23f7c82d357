#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: bench_serve
short_description: Run a concurrency sweep of the real vllm bench serve against a vLLM server
version_added: 0.1.0
description:
  - Waits until the server at O(base_url) lists O(model) in C(/v1/models) (up to O(ready_timeout) seconds), then runs
    C(vllm bench serve) of the given vLLM environment once per level of O(concurrency), in order, with the random
    dataset and the tokenizer of O(tokenizer) (offline), saving each level's result JSON as
    C(<result_dir>/c<level>.json) (C(--save-result)).
  - Stops at the first level that fails, which is reported in RV(failure), not as a failed task, so that the caller
    can keep the results of the levels before it. A level fails when C(vllm bench serve) exits non-zero (or runs
    over O(level_timeout)), leaves no result file, or any of its requests failed (C(vllm bench serve) exits 0 even
    when every request failed; the result's C(failed) field is read).
  - With O(one_process) (the default), every level runs in one Python process of the environment (the interpreter
    the C(#!) line of O(executable) names, or the one its C(/bin/sh) line as uv and pip write it starts), which
    runs what the C(vllm) console script runs, vLLM's CLI C(main), with the level's C(vllm bench serve) command
    line. So vLLM is imported once, not once per level (about 15 seconds each on a CPU core). A level still gets
    O(level_timeout) seconds; the process exits at it. Where that is not possible (an O(executable) that is not a
    Python console script, a vLLM whose CLI cannot be imported that way, or C(VLLM_USE_RUST_BENCH), with which
    C(vllm bench serve) runs a client of its own), each level runs its own C(vllm bench serve); RV(runner) says
    which, RV(runner_note) why.
  - Returns the text of every result file in RV(files) and the parsed figures in RV(levels[].row), so that the whole
    sweep costs one task. Each run is an argument list under coreutils C(timeout), never a shell, in a session of
    its own; should it outlive C(timeout) by 45 seconds, the module kills its whole process group.
  - "Bounds: the whole sweep stops after O(sweep_timeout) seconds (each level gets at most what is left, and the
    levels not run are named in RV(failure)); the output of C(vllm bench serve) goes to temporary files of which only
    the last O(output_tail_kib) KiB of stdout and of stderr are read; a result file larger than O(result_max_mib)
    MiB is not read (the level fails, the file stays on the host)."
  - Refuses values that would break or change the command line before running anything - a control character
    (newline, tab, NUL) in O(model), O(base_url), O(endpoint), O(backend), the paths, O(extra_args) or
    O(metadata); a O(model), path, O(backend) or O(endpoint) that starts with C(-); a O(base_url) that is not
    C(http://) or C(https://) with a host; an O(endpoint) without a leading C(/); a O(metadata) key with C(=); an
    O(environment) name that is not a variable name.
  - Refuses to start when O(result_dir) already holds the result file of a level (results are never overwritten).
  - Used by the M(gpufleet.vllm.benchmark) role, which keeps the results on the control node and gates them.
options:
  executable:
    description: The C(vllm) executable of a vLLM environment installed with its dependencies.
    type: path
    required: true
  base_url:
    description: Base URL of the server (C(--base-url)).
    type: str
    required: true
  api_key:
    description: API key of the server; passed to C(vllm bench serve) as C(OPENAI_API_KEY) and used for the readiness check.
    type: str
  model:
    description: Served model name (C(--model)).
    type: str
    required: true
  tokenizer:
    description: Model directory on the host whose tokenizer C(vllm bench serve) loads (C(--tokenizer)).
    type: path
    required: true
  concurrency:
    description: Levels of the sweep (C(--max-concurrency)), run in this order.
    type: list
    elements: int
    required: true
  num_prompts:
    description: Prompts of each level (C(--num-prompts)), one per item of O(concurrency).
    type: list
    elements: int
    required: true
  input_len:
    description: Prompt length in tokens (C(--random-input-len)).
    type: int
    required: true
  output_len:
    description: Output length in tokens (C(--random-output-len)).
    type: int
    required: true
  result_dir:
    description: Directory for the result files; created when missing.
    type: path
    required: true
  backend:
    description: C(--backend).
    type: str
    default: vllm
  endpoint:
    description: C(--endpoint).
    type: str
    default: /v1/completions
  seed:
    description: C(--seed).
    type: int
    default: 0
  temperature:
    description: C(--temperature); not passed when unset.
    type: float
  ignore_eos:
    description: C(--ignore-eos).
    type: bool
    default: true
  trust_remote_code:
    description: C(--trust-remote-code).
    type: bool
    default: false
  extra_args:
    description: More C(vllm bench serve) arguments, one item per word.
    type: list
    elements: str
    default: []
  metadata:
    description: Key-value pairs recorded in every result file (C(--metadata)).
    type: dict
    default: {}
  environment:
    description: Environment variables of C(vllm bench serve), added to the module's environment.
    type: dict
    default: {}
  one_process:
    description:
      - Run every level in one Python process of the environment (vLLM imported once); V(false) runs one
        C(vllm bench serve) per level.
    type: bool
    default: true
  level_timeout:
    description: Wall-clock limit of one level in seconds.
    type: int
    default: 1800
  ready_timeout:
    description: Seconds to wait for the server to list O(model); V(0) checks once.
    type: int
    default: 60
  sweep_timeout:
    description:
      - Wall-clock limit of the whole sweep in seconds. A level gets at most the time that is left; a level that
        cannot start any more is reported in RV(failure), with the levels that completed kept.
    type: int
    default: 14400
  result_max_mib:
    description: Largest result file that is read and parsed, in MiB; a larger one fails its level.
    type: int
    default: 64
  quantization:
    description:
      - The quantisation of the served checkpoint (V(int4), V(nvfp4), V(fp8), ...), returned in RV(quantization) as
        given (lower case). It keys the model's baselines. Refused unless it is a plain name.
      - Not given, it is read from O(model_dir).
    type: str
  model_dir:
    description:
      - The model directory on the host whose C(hf_quant_config.json) (C(quantization.quant_algo)) and C(config.json)
        (C(quantization_config) C(quant_algo) or C(quant_method); compressed-tensors by its weights, C(int4) or
        C(fp8); else C(torch_dtype)) say its quantisation, read up to 16 MiB each, also in check mode. Not given,
        and without O(quantization), RV(quantization.name) is null.
    type: path
  output_tail_kib:
    description: KiB kept of the end of the stdout and of the stderr of each command (for RV(failure) and C(c<level>.log)).
    type: int
    default: 64
  crosscheck:
    description:
      - Cross-check the client's figures of each level with the server's own. The server's C(/metrics)
        (O(metrics_url)) is read before and after each level; what it counted in between (C(vllm:generation_tokens),
        C(vllm:request_success), the sums of C(vllm:e2e_request_latency_seconds) and of the time per output token,
        C(vllm:request_time_per_output_token_seconds), C(vllm:time_per_output_token_seconds) or
        C(vllm:inter_token_latency_seconds)) gives the rate at which the server generated the level's tokens.
      - A client that read less than C(1 - crosscheck_tolerance) of that rate, or saw a time per output token longer
        by more than the tolerance, was starved (a busy machine), and the level is measured again, up to
        O(crosscheck_retries) times, and its row says so in C(crosscheck) (status C(client_starved)); the
        M(gpufleet.vllm.benchmark) role's gate then calls a shortfall of that level inconclusive, not a regression.
      - Where the server has no such metrics (or other traffic reached it during the level), C(crosscheck) says the
        cross-check was not possible (status C(unavailable), with the reason).
      - The metrics are parsed with C(prometheus_client), from the module's Python or from the environment of
        O(executable) (vLLM depends on it).
    type: bool
    default: true
  crosscheck_tolerance:
    description:
      - How far the client's rate may fall below the server's (a fraction, V(0.10) = 10 %) before the client counts as
        starved.
    type: float
    default: 0.10
  crosscheck_retries:
    description:
      - How many times a level whose client was starved is measured again (0 to 2). Each run keeps its own result
        file, C(c<level>.retry<N>.json); the level's row is the last run's, the earlier ones listed in its
        C(attempts).
    type: int
    default: 1
  metrics_url:
    description: The server's metrics page for the cross-check. Default O(base_url) with C(/metrics).
    type: str
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Checks the server once and returns the command of every level in RV(levels[].argv); runs nothing.
  diff_mode:
    support: none
notes:
  - A benchmark loads the server; run it on purpose, not as part of a drift check.
  - C(VLLM_TARGET_DEVICE=cpu) in O(environment) makes the client use vLLM's CPU platform, so that it neither probes
    the GPUs through NVML nor needs the CUDA libraries (the benchmark client needs no accelerator).
  - Results larger than 8 MB (for example with C(--save-detailed) in O(extra_args)) are left on the host and not
    returned in RV(files).
requirements:
  - Python 3.10 or newer on the managed host (standard library only).
  - vLLM with its dependencies in the environment of O(executable); coreutils C(timeout).
seealso:
  - module: gpufleet.vllm.bench_report
  - module: gpufleet.vllm.vllm_ready
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Sweep single stream to concurrency 64
  gpufleet.vllm.bench_serve:
    executable: /opt/vllm/current/bin/vllm
    base_url: http://127.0.0.1:8000
    model: kimi-k2.5
    tokenizer: /shared/kimi-k2.5-nvfp4
    trust_remote_code: true
    concurrency: [1, 16, 64]
    num_prompts: [8, 32, 128]
    input_len: 1024
    output_len: 256
    result_dir: /var/lib/gpufleet/benchmark/20261202T153000Z
    environment:
      HF_HUB_OFFLINE: "1"
      VLLM_TARGET_DEVICE: cpu
  register: sweep

- name: Stop when a level failed
  ansible.builtin.fail:
    msg: "{{ sweep.failure }}"
  when: sweep.failure
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (the server was checked once, nothing was measured).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
runner:
  description: How the levels ran - C(one process) (O(one_process)) or C(one process per level).
  returned: when the sweep ran
  type: str
  sample: one process
runner_note:
  description: Why the levels ran one process each although O(one_process) asked for one.
  returned: when O(one_process) was not possible
  type: str
  sample: "VLLM_USE_RUST_BENCH is set: vllm bench serve runs the Rust client, a process of its own"
levels:
  description: One entry per level that ran, in order; the last one is the failed level when RV(failure) is set.
  returned: always
  type: list
  elements: dict
  contains:
    concurrency:
      description: C(--max-concurrency).
      type: int
    num_prompts:
      description: C(--num-prompts).
      type: int
    argv:
      description: The command (with O(one_process), the C(vllm bench serve) command that runs the same level on its own).
      type: list
      elements: str
    rc:
      description: Exit status (null in check mode).
      type: int
    seconds:
      description: Wall-clock time of the command (with O(one_process), of the level in the one process, vLLM's import
        not counted).
      type: float
    result_file:
      description: Path of the result file on the host.
      type: str
    row:
      description:
        - The figures of the result (see the gpufleet.vllm.bench_parse filter), or null.
        - With O(crosscheck), C(row.crosscheck) holds the cross-check with the server's own metrics - status
          (C(agree), C(client_starved) or C(unavailable)), reason (a sentence), client_tok_s, server_tok_s,
          client_tpot_ms, server_tpot_ms, ratio, server_requests, server_tokens, tolerance - and, for a level
          measured again, C(row.attempts) lists the earlier runs (result_file, output_tok_s, crosscheck).
      type: dict
    ok:
      description: The level completed every request.
      type: bool
  sample:
    - concurrency: 1
      num_prompts: 4
      rc: 0
      seconds: 38.2
      result_file: /var/lib/gpufleet/benchmark/20261202T153000Z/c1.json
      ok: true
files:
  description:
    - C(c<level>.json) to the text of that level's result file (as C(vllm bench serve) wrote it), and
      C(c<level>.log) to the command, exit status and last lines of output of the failed level.
    - A level measured again (O(crosscheck_retries)) adds C(c<level>.retry<N>.json) (and C(c<level>.retry<N>.log)
      when that run failed).
    - Files larger than 8 MB stay on the host and are left out.
  returned: always
  type: dict
  sample:
    c1.json: '{"date": "20261202-153344", "backend": "vllm", "max_concurrency": 1, "completed": 4, ...}'
failure:
  description: Why the sweep stopped (a sentence), or null when every level completed.
  returned: always
  type: str
  sample: "16 of 24 requests failed at concurrency 8 (8 completed): the server at http://127.0.0.1:8000 stopped ..."
failed_concurrency:
  description: The level that failed, or null.
  returned: always
  type: int
  sample: 8
bench_seconds:
  description: Time spent in C(vllm bench serve), all levels together.
  returned: always
  type: float
  sample: 128.3
quantization:
  description: The quantisation of the served checkpoint (O(quantization), or read from O(model_dir)).
  returned: always
  type: dict
  contains:
    name:
      description: V(int4), V(nvfp4), V(fp8), V(bf16), ... (lower case), or null when unknown.
      type: str
    source:
      description: Where it came from (C(given), or the file and key read), or null.
      type: str
    detail:
      description: The value as written, or why it is unknown.
      type: str
  sample:
    name: nvfp4
    source: hf_quant_config.json quantization.quant_algo
    detail: NVFP4
server:
  description: The readiness check of the server.
  returned: always
  type: dict
  contains:
    ready:
      description: The server listed O(model).
      type: bool
    models:
      description: Models it listed.
      type: list
      elements: str
    version:
      description: The server's vLLM version (C(/version)), when it answered.
      type: str
    msg:
      description: What the check found.
      type: str
  sample:
    ready: true
    models: [kimi-k2.5]
    version: 0.33.0
    msg: ready
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import baseline as bench_baseline
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import crosscheck as bench_crosscheck
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import sweep as bench_sweep
from ansible_collections.gpufleet.vllm.plugins.module_utils import vllm_api
from ansible_collections.gpufleet.vllm.plugins.module_utils import vllm_metrics
from ansible_collections.gpufleet.vllm.plugins.module_utils.hostlib import site_dirs_of

MAX_RETRIES = 2

MAX_RESULT_BYTES = 8 * 1024 * 1024


def check_server(params, once):
    client = vllm_api.VllmClient(params['base_url'], api_key=params['api_key'], timeout=10)
    result = vllm_api.wait_ready(client, served_model_name=params['model'], timeout=params['ready_timeout'],
                                 interval=2.0, completion=False, once=once or params['ready_timeout'] <= 0)
    return {'ready': bool(result.get('ready')), 'models': result.get('models') or [],
            'version': result.get('version'), 'msg': result.get('msg') or ''}


def make_crosscheck(params, metrics_url):
    """(read_metrics, crosscheck) for the sweep: one bounded read of METRICS_URL as (text, error), and the
    cross-check of a level's row with the reads before and after it."""
    venv = os.path.dirname(os.path.dirname(params['executable']))
    try:
        parser = vllm_metrics.load_parser(site_dirs_of([venv]))[0]
        no_parser = None
    except vllm_metrics.MetricsError as exc:
        parser, no_parser = None, to_native(exc)

    def read_metrics():
        try:
            return vllm_metrics.fetch(metrics_url, timeout=10, api_key=params['api_key']), None
        except (vllm_metrics.MetricsError, ValueError) as exc:
            return None, to_native(exc)

    def summary(pair, when):
        text, error = pair if isinstance(pair, tuple) and len(pair) == 2 else (None, 'not read')
        if text is None:
            raise ValueError('the server\'s metrics at %s could not be read %s the level (%s)'
                             % (metrics_url, when, str(error or 'not read').rstrip('.')))
        families = vllm_metrics.parse(text, parser, metrics_url)
        return vllm_metrics.summarize(families, metrics_url, model_name=params['model'])

    def crosscheck(row, before, after):
        if parser is None:
            return bench_crosscheck.unavailable('the server\'s metrics cannot be parsed here: %s' % no_parser)
        try:
            first, second = summary(before, 'before'), summary(after, 'after')
        except (ValueError, vllm_metrics.MetricsError) as exc:
            return bench_crosscheck.unavailable('%s; the client\'s figures were not cross-checked'
                                                % to_native(exc).rstrip('.'))
        return bench_crosscheck.check(row, first, second, tolerance=params['crosscheck_tolerance'])

    return read_metrics, crosscheck


def _attempt(entry):
    row = entry.get('row') or {}
    return {'result_file': entry.get('result_file'), 'output_tok_s': row.get('output_tok_s'),
            'crosscheck': row.get('crosscheck')}


def measure_again(run, settings, sweep, retries, deadline, clock=time.monotonic):
    """Measure again, up to RETRIES times each, the levels of SWEEP whose client was starved (the server's own
    metrics disagree); each run keeps its own result file; the level keeps the last run's row, the earlier
    runs in row['attempts']."""
    for entry in sweep['levels']:
        attempts = []
        for attempt in range(1, retries + 1):
            row = entry.get('row') or {}
            if not entry.get('ok') or (row.get('crosscheck') or {}).get('status') != 'client_starved':
                break
            left = int(deadline - clock())
            if left < 1:
                attempts.append(dict(_attempt(entry), note='not measured again: sweep_timeout used up'))
                break
            again = bench_sweep.run_sweep(run, dict(settings, concurrency=[entry['concurrency']],
                                                    num_prompts=[entry['num_prompts']], attempt=attempt,
                                                    sweep_timeout=left))
            sweep['files'].update(again['files'])
            sweep['bench_seconds'] = round(sweep['bench_seconds'] + again['bench_seconds'], 3)
            redo = again['levels'][0] if again['levels'] else None
            if again['failure'] or redo is None or not redo.get('ok'):
                attempts.append(dict(_attempt(entry), note='measuring again failed: %s'
                                     % (again['failure'] or 'no result')))
                break
            attempts.append(_attempt(entry))
            for key in ('argv', 'rc', 'seconds', 'result_file', 'row'):
                entry[key] = redo[key]
        if attempts:
            entry['row']['attempts'] = attempts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            executable=dict(type='path', required=True),
            base_url=dict(type='str', required=True),
            api_key=dict(type='str', no_log=True),
            model=dict(type='str', required=True),
            tokenizer=dict(type='path', required=True),
            concurrency=dict(type='list', elements='int', required=True),
            num_prompts=dict(type='list', elements='int', required=True),
            input_len=dict(type='int', required=True),
            output_len=dict(type='int', required=True),
            result_dir=dict(type='path', required=True),
            backend=dict(type='str', default='vllm'),
            endpoint=dict(type='str', default='/v1/completions'),
            seed=dict(type='int', default=0),
            temperature=dict(type='float'),
            ignore_eos=dict(type='bool', default=True),
            trust_remote_code=dict(type='bool', default=False),
            extra_args=dict(type='list', elements='str', default=[]),
            metadata=dict(type='dict', default={}),
            environment=dict(type='dict', default={}),
            one_process=dict(type='bool', default=True),
            level_timeout=dict(type='int', default=1800),
            ready_timeout=dict(type='int', default=60),
            sweep_timeout=dict(type='int', default=14400),
            result_max_mib=dict(type='int', default=64),
            output_tail_kib=dict(type='int', default=64),
            quantization=dict(type='str'),
            model_dir=dict(type='path'),
            crosscheck=dict(type='bool', default=True),
            crosscheck_tolerance=dict(type='float', default=bench_crosscheck.DEFAULT_TOLERANCE),
            crosscheck_retries=dict(type='int', default=1),
            metrics_url=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    levels, prompts = params['concurrency'], params['num_prompts']
    if not levels:
        module.fail_json(msg='concurrency is empty: give at least one level, for example [1, 8, 64].')
    if len(prompts) != len(levels):
        module.fail_json(msg='num_prompts has %d items but concurrency has %d levels: give one prompt count per level.'
                             % (len(prompts), len(levels)))
    bad = [value for value in levels + prompts + [params['input_len'], params['output_len']] if value < 1]
    if bad or len(set(levels)) != len(levels):
        module.fail_json(msg='concurrency levels, prompt counts and lengths must be positive and the levels distinct '
                             '(concurrency %s, num_prompts %s).' % (levels, prompts))
    for name in ('level_timeout', 'sweep_timeout', 'result_max_mib', 'output_tail_kib'):
        if params[name] < 1:
            module.fail_json(msg='%s must be at least 1, got %d. Nothing was run.' % (name, params[name]))
    if not 0 <= params['crosscheck_retries'] <= MAX_RETRIES:
        module.fail_json(msg='crosscheck_retries must be 0 to %d, got %d. Nothing was run.'
                             % (MAX_RETRIES, params['crosscheck_retries']))
    if not 0 < params['crosscheck_tolerance'] < 1:
        module.fail_json(msg='crosscheck_tolerance must be a fraction above 0 and below 1 (0.10 = 10 %%), got %s. '
                             'Nothing was run.' % params['crosscheck_tolerance'])
    problems = bench_sweep.argv_problems(params)
    try:
        params['base_url'] = vllm_api.make_base_url(base_url=params['base_url'])
        vllm_api.check_api_key(params['api_key'])
    except ValueError as exc:
        problems.append(to_native(exc))
    quantization = {'name': None, 'source': None, 'detail': 'neither quantization nor model_dir was given'}
    if params['quantization'] is not None:
        try:
            quantization = {'name': bench_baseline.normalize_quantization(params['quantization']), 'source': 'given',
                            'detail': params['quantization']}
        except ValueError as exc:
            problems.append(to_native(exc))
    elif params['model_dir']:
        quantization = bench_baseline.detect_quantization(params['model_dir'])
    metrics_url = params['metrics_url'] or (params['base_url'].rstrip('/') + '/metrics')
    if params['crosscheck']:
        try:
            vllm_metrics.metrics_url(metrics_url)
        except ValueError as exc:
            problems.append('metrics_url: %s' % to_native(exc))
    if problems:
        module.fail_json(msg='Refusing to run vllm bench serve: %s. Nothing was run.' % '; '.join(problems))

    settings = dict(params)
    settings['result_dir'] = params['result_dir'].rstrip('/') or '/'
    existing = [bench_sweep.RESULT_NAME % level for level in levels
                if os.path.exists(os.path.join(settings['result_dir'], bench_sweep.RESULT_NAME % level))]
    if existing:
        module.fail_json(msg='%s already holds %s of an earlier run: results are never overwritten. Use a new '
                             'result directory (a new run id).' % (settings['result_dir'], ', '.join(existing)))

    server = check_server(params, once=module.check_mode)
    result = dict(changed=False, levels=[], files={}, failure=None, failed_concurrency=None, bench_seconds=0.0,
                  server=server, quantization=quantization, check_mode=module.check_mode)
    if module.check_mode:
        result['levels'] = [dict(concurrency=level, num_prompts=count,
                                 argv=bench_sweep.level_argv(settings, level, count), rc=None, seconds=0.0,
                                 result_file=os.path.join(settings['result_dir'], bench_sweep.RESULT_NAME % level),
                                 row=None, ok=False)
                            for level, count in zip(levels, prompts)]
        result['changed'] = True
        module.exit_json(**result)
    if not server['ready']:
        result['failure'] = ('The server at %s is not ready to be benchmarked: %s Start it (gpufleet.vllm.service) or '
                             'set the served model name; nothing was measured.'
                             % (params['base_url'], server['msg'].rstrip('.') + '.'))
        module.exit_json(**result)

    if not os.path.isdir(settings['result_dir']):
        try:
            os.makedirs(settings['result_dir'], 0o755)
        except OSError as exc:
            module.fail_json(msg='Could not create the result directory %s: %s.'
                                 % (settings['result_dir'], to_native(exc)))
    environ = dict((str(key), str(value)) for key, value in params['environment'].items())
    if params['api_key']:
        environ['OPENAI_API_KEY'] = params['api_key']
    timeout_executable = module.get_bin_path('timeout', required=True)
    settings['timeout_executable'] = timeout_executable
    settings['result_max_bytes'] = params['result_max_mib'] * 1024 * 1024
    tail_bytes = params['output_tail_kib'] * 1024

    def run(argv):
        return bench_sweep.run_capped(argv, environ_update=environ, limit=bench_sweep.backstop(argv), tail_bytes=tail_bytes)

    # (one process for every level: the interpreter of the vllm console script, when it is one)
    settings['python'] = bench_sweep.interpreter_of(params['executable']) if params['one_process'] else None
    deadline = time.monotonic() + params['sweep_timeout']
    if params['crosscheck']:
        settings['read_metrics'], settings['crosscheck'] = make_crosscheck(params, metrics_url)
        settings['metrics_url'] = metrics_url
    sweep = bench_sweep.run_sweep(run, settings)
    # (a failed sweep fails the host whatever its levels measured: nothing to measure again)
    if params['crosscheck'] and params['crosscheck_retries'] and not sweep['failure']:
        measure_again(run, settings, sweep, params['crosscheck_retries'], deadline)
    sweep['files'] = dict((name, text) for name, text in sweep['files'].items() if len(text) <= MAX_RESULT_BYTES)
    result.update(sweep)
    result['changed'] = bool(sweep['levels'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
