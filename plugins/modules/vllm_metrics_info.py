#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_metrics_info
short_description: Read a vLLM server's Prometheus metrics and wait until no request is in flight
version_added: 0.1.0
description:
  - Reads the C(/metrics) page of a vLLM server over HTTP and parses it with C(prometheus_client)'s own parser
    (C(prometheus_client.parser.text_string_to_metric_families)), never with regular expressions.
  - Returns the requests in flight as vLLM counts them, C(vllm:num_requests_running) (in the engine's batches) and
    C(vllm:num_requests_waiting) (queued), each summed over the engines (the C(engine) label, one per data-parallel
    engine) of the model chosen with O(model_name), or of every model; RV(idle) is V(true) when a sample of each reads
    0.
  - "Gauges declared without a sample, or served as a counter, prove nothing: RV(state=unknown), which the drain
    gate does not pass (it waits, then fails at O(timeout) saying why, or goes on with O(on_timeout=continue))."
  - Also returns the finished requests (C(vllm:request_success_total), per C(finished_reason) and in all), the prompt
    and generation token totals, and the count and sum of every C(vllm:) histogram found (time to first token,
    end-to-end latency, inter-token latency, queue time, ...), plus the families it used.
  - With O(wait_idle=true), the drain gate of a rollout, it reads every O(interval) seconds until the server is idle
    or O(timeout) seconds passed; then O(on_timeout) says whether the task fails or goes on with a warning.
  - A server that does not answer, answers with another status than 200, serves something that is not Prometheus text,
    or lacks the two gauges makes the task fail with a sentence that names the URL and what to check.
  - Read-only; RV(changed) is always V(false).
options:
  url:
    description:
      - The metrics page of the vLLM server, an C(http://) or C(https://) URL without user name, password, query or
        fragment.
    type: str
    default: http://127.0.0.1:8000/metrics
  model_name:
    description:
      - Only the series whose C(model_name) label is this (vLLM's C(--served-model-name), its first name) count.
        Left out, every model of the server counts.
      - A name the server does not report makes the task fail, naming the models it reports.
    type: str
  wait_idle:
    description:
      - If V(true), read until RV(running) and RV(waiting) are both 0, at most O(timeout) seconds.
      - If V(false), read once; a busy server is no failure (RV(idle) says so).
    type: bool
    default: false
  timeout:
    description:
      - The drain timeout, seconds to wait for the server to become idle with O(wait_idle=true); from 0 (read once)
        to 3600. The last read may add up to O(request_timeout).
    type: int
    default: 300
  interval:
    description: Seconds between two reads while waiting, from 0.1 to 60.
    type: float
    default: 2.0
  on_timeout:
    description:
      - What to do when O(timeout) passes with work still in flight.
      - V(fail) fails the task, naming the requests running and waiting at the last read and how long it waited.
      - V(continue) returns RV(idle=false) and RV(timed_out=true) with a warning, for a rollout that forces the stop.
    type: str
    choices: [fail, continue]
    default: fail
  request_timeout:
    description: Seconds one read of the page may take in all (connect, headers and body), from 0.1 to 300.
    type: float
    default: 10.0
  max_body_bytes:
    description:
      - The most bytes of the page that are read, from 1024 to 67108864 (64 MiB); a larger page fails the task. A vLLM
        server's page is some hundred KiB.
    type: int
    default: 8388608
  max_families:
    description: The most metric families the page may hold (vLLM serves a few hundred); more fails the task.
    type: int
    default: 2000
  max_samples:
    description: The most samples the page may hold; more fails the task.
    type: int
    default: 200000
  validate_certs:
    description: With an C(https://) O(url), whether the server's certificate must be valid.
    type: bool
    default: true
  tools_venvs:
    description:
      - Virtual environments to load C(prometheus_client) from when the Python that runs the module cannot import it,
        for example the C(host_tools) role's venv (C(fleet_tools_venv)). Only that package is loaded; the venv's
        C(site-packages) is not added to the import path and its C(.pth) files are not run.
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - The page is read as vLLM serves it, in Prometheus text format (the request asks for C(text/plain; version=0.0.4)).
  - vLLM reports its scheduler's gauges per engine; the module sums them. With several models behind one address (a
    router), choose one with O(model_name).
  - A read that fails while waiting fails the task at once; a server that stopped answering is not a drained one.
  - The collection's C(host_tools) role installs C(prometheus_client) (C(prometheus-client) in C(host_tools_packages))
    into the tools venv; run the module with that venv's python (C(ansible_python_interpreter)) or name the venv in
    O(tools_venvs).
requirements:
  - Python 3.10 or newer on the managed host.
  - prometheus_client (the C(prometheus-client) package) on the managed host, in the interpreter or in O(tools_venvs).
seealso:
  - module: gpufleet.vllm.vllm_ready
  - name: vLLM production metrics
    description: The metrics a vLLM server exposes.
    link: https://docs.vllm.ai/en/latest/usage/metrics.html
  - name: Prometheus text exposition format
    description: The format of the page.
    link: https://prometheus.io/docs/instrumenting/exposition_formats/
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Read the server's load
  gpufleet.vllm.vllm_metrics_info:
    url: http://127.0.0.1:8000/metrics
    tools_venvs: ["{{ fleet_tools_venv }}"]
  register: load

- name: Show it
  ansible.builtin.debug:
    msg: >-
      {{ load.running }} running, {{ load.waiting }} waiting,
      {{ load.request_success.total }} finished, mean TTFT
      {{ load.histograms['vllm:time_to_first_token_seconds'].mean }} s

- name: Drain gate before the stop (the host is already out of the load balancer)
  gpufleet.vllm.vllm_metrics_info:
    url: "http://{{ inventory_hostname }}:8000/metrics"
    model_name: kimi-k2.5
    wait_idle: true
    timeout: 600
    interval: 2
    on_timeout: fail
  vars:
    ansible_python_interpreter: "{{ host_tools_interpreter }}"

- name: Wait at most 2 minutes, then stop anyway (the in-flight requests are cut)
  gpufleet.vllm.vllm_metrics_info:
    wait_idle: true
    timeout: 120
    on_timeout: continue
    tools_venvs: ["{{ fleet_tools_venv }}"]
  register: drain

- name: Say what was cut
  ansible.builtin.debug:
    msg: "{{ drain.running + drain.waiting }} request(s) still in flight at the stop"
  when: drain.timed_out
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
check_mode:
  description:
    - Whether the module ran in check mode (it reads the same way). Roles decide from this, not from the
      C(ansible_check_mode) variable.
  returned: always
  type: bool
  sample: false
msg:
  description: One sentence that says what was read (or, on a failure, what went wrong and what to check).
  returned: always
  type: str
  sample: "vLLM at http://127.0.0.1:8000/metrics is idle: 0 request(s) running and 0 waiting (after 3 read(s), 4.1 s)."
url:
  description: The URL read.
  returned: always
  type: str
  sample: http://127.0.0.1:8000/metrics
error_kind:
  description:
    - On a failure, what failed. C(library) (prometheus_client missing), C(refused), C(timeout), C(reset), C(http),
      C(too_large), C(not_prometheus), C(too_many), C(no_gauges), C(no_model), C(invalid) (a gauge that is not a
      count, negative or NaN), C(drain_timeout), C(url) (another network fault), C(options).
  returned: failure
  type: str
  sample: refused
running:
  description:
    - C(vllm:num_requests_running), summed over the engines (of O(model_name) when given); V(null) when no sample of it
      was read (RV(state=unknown)).
  returned: success, and on a drain timeout
  type: int
  sample: 0
waiting:
  description: C(vllm:num_requests_waiting), summed the same way; V(null) when no sample of it was read.
  returned: success, and on a drain timeout
  type: int
  sample: 0
idle:
  description:
    - Whether a sample of each of C(vllm:num_requests_running) and C(vllm:num_requests_waiting) read 0 at the last
      read (RV(running) and RV(waiting) both 0). Gauges declared without a sample, or served as another type (a
      counter), prove nothing; RV(idle=false) and RV(state=unknown).
  returned: success, and on a drain timeout
  type: bool
  sample: true
state:
  description:
    - V(idle), V(busy) (requests running or waiting) or V(unknown) (nothing proves the server idle; RV(unknown_reason)
      says why). The drain gate passes V(idle) only, and waits on V(unknown) as on V(busy).
  returned: success, and on a drain timeout
  type: str
  sample: idle
unknown_reason:
  description: Why the state is V(unknown) (for example C(vllm:num_requests_running is declared but has no sample)),
    V(null) otherwise.
  returned: success, and on a drain timeout
  type: str
  sample: null
timed_out:
  description: Whether O(wait_idle) gave up at O(timeout) with work still in flight.
  returned: success, and on a drain timeout
  type: bool
  sample: false
waited:
  description: Seconds from the first read to the last (on a failed read, to that read).
  returned: always but for invalid options and a missing prometheus_client
  type: float
  sample: 4.02
polls:
  description: How many times the page was read (on a failed read, the good reads before it).
  returned: always but for invalid options and a missing prometheus_client
  type: int
  sample: 3
models:
  description: The C(model_name) label values the server reports on the two gauges.
  returned: success
  type: list
  elements: str
  sample: [kimi-k2.5]
by_engine:
  description: The two gauges per model and engine (of O(model_name) when given).
  returned: success
  type: list
  elements: dict
  sample: [{"model_name": "kimi-k2.5", "engine": "0", "running": 0, "waiting": 0}]
request_success:
  description: C(vllm:request_success_total), in all and per C(finished_reason) (C(stop), C(length), C(abort), ...).
  returned: success
  type: dict
  sample: {"total": 1200, "by_finished_reason": {"abort": 3, "error": 0, "length": 1100, "stop": 97}}
prompt_tokens_total:
  description: C(vllm:prompt_tokens_total), summed.
  returned: success
  type: int
  sample: 481516
generation_tokens_total:
  description: C(vllm:generation_tokens_total), summed.
  returned: success
  type: int
  sample: 2342
histograms:
  description:
    - For each C(vllm:) histogram on the page (at most 64), its C(count), C(sum) and C(mean) (sum / count, V(null)
      when the count is 0), summed over the engines.
  returned: success
  type: dict
  sample: {"vllm:time_to_first_token_seconds": {"count": 1200, "sum": 96.3, "mean": 0.08025}}
families:
  description:
    - The families the figures above come from, each with C(name), C(type), C(help) and C(samples) (C(name),
      C(labels), C(value); histogram buckets left out, at most 64 per family, C(samples_left_out) counts the rest).
  returned: success
  type: list
  elements: dict
families_read:
  description: How many metric families the page held.
  returned: success
  type: int
  sample: 143
samples_read:
  description: How many samples the page held.
  returned: success
  type: int
  sample: 1875
library:
  description: Where C(prometheus_client) was loaded from; V(null) for the interpreter's own.
  returned: success
  type: str
  sample: /opt/gpufleet/tools/lib/python3.12/site-packages/prometheus_client
"""

import urllib.parse

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.hostlib import site_dirs_of
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_metrics import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_FAMILIES,
    DEFAULT_MAX_SAMPLES,
    DEFAULT_URL,
    MAX_BODY_BYTES,
    MAX_TIMEOUT,
    MIN_BODY_BYTES,
    MetricsError,
    busy_phrase,
    load_parser,
    metrics_url,
    read_once,
    timeout_message,
    wait_idle,
)


def _problems(params):
    problems = []
    try:
        metrics_url(params["url"])
    except ValueError as exc:
        problems.append(str(exc))
    if not 0 <= params["timeout"] <= MAX_TIMEOUT:
        problems.append("timeout must be 0 to %d seconds; got %d" % (MAX_TIMEOUT, params["timeout"]))
    if not 0.1 <= params["interval"] <= 60:
        problems.append("interval must be 0.1 to 60 seconds; got %s" % params["interval"])
    if not 0.1 <= params["request_timeout"] <= 300:
        problems.append("request_timeout must be 0.1 to 300 seconds; got %s" % params["request_timeout"])
    if not MIN_BODY_BYTES <= params["max_body_bytes"] <= MAX_BODY_BYTES:
        problems.append("max_body_bytes must be %d to %d; got %d" % (MIN_BODY_BYTES, MAX_BODY_BYTES,
                                                                     params["max_body_bytes"]))
    for name in ("max_families", "max_samples"):
        if params[name] < 1:
            problems.append("%s must be at least 1; got %d" % (name, params[name]))
    if params["model_name"] is not None and not params["model_name"]:
        problems.append("model_name is empty; leave it out to count every model")
    return problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default=DEFAULT_URL),
            model_name=dict(type="str"),
            wait_idle=dict(type="bool", default=False),
            timeout=dict(type="int", default=300),
            interval=dict(type="float", default=2.0),
            on_timeout=dict(type="str", choices=["fail", "continue"], default="fail"),
            request_timeout=dict(type="float", default=10.0),
            max_body_bytes=dict(type="int", default=DEFAULT_MAX_BODY_BYTES),
            max_families=dict(type="int", default=DEFAULT_MAX_FAMILIES),
            max_samples=dict(type="int", default=DEFAULT_MAX_SAMPLES),
            validate_certs=dict(type="bool", default=True),
            tools_venvs=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    # a password (or user name) given in the URL never comes back, not even in the task's invocation
    secret = urllib.parse.urlsplit(params["url"] or "").netloc.rpartition("@")[0]
    for part in (secret, secret.partition(":")[2], secret.partition(":")[0]):
        if len(part) > 1:
            module.no_log_values.add(part)
    problems = _problems(params)
    if problems:
        module.fail_json(msg="Invalid options for gpufleet.vllm.vllm_metrics_info: %s. Nothing was read." % "; ".join(
            problems), changed=False, error_kind="options")
    url = params["url"]
    base = {"changed": False, "url": url}
    base["check_mode"] = module.check_mode

    try:
        parser, where = load_parser(site_dirs_of(params["tools_venvs"]))
    except MetricsError as exc:
        module.fail_json(msg=str(exc), error_kind=exc.kind, **base)

    def read():
        return read_once(url, parser, model_name=params["model_name"], timeout=params["request_timeout"],
                         max_body_bytes=params["max_body_bytes"], max_families=params["max_families"],
                         max_samples=params["max_samples"], validate_certs=params["validate_certs"])

    try:
        result = wait_idle(read, params["timeout"] if params["wait_idle"] else 0, params["interval"])
    except MetricsError as exc:
        module.fail_json(msg=str(exc), error_kind=exc.kind, polls=exc.polls, waited=exc.waited, **base)
    result.update(base)
    result["library"] = where
    if not params["wait_idle"]:
        result["timed_out"] = False
    where_model = (" (model %s)" % params["model_name"]) if params["model_name"] is not None else ""
    if result["timed_out"]:
        message = timeout_message(url, result, params["timeout"], params["model_name"])
        if params["on_timeout"] == "fail":
            result.pop("families", None)
            module.fail_json(msg=message, error_kind="drain_timeout", **result)
        module.warn(message.split(" Its in-flight")[0] + "; going on anyway (on_timeout=continue): those requests "
                    "are cut if the server stops now.")
        result["msg"] = message
    else:
        result["msg"] = "vLLM at %s%s is %s: %s (after %d read(s), %s s)." % (
            url, where_model, result["state"], busy_phrase(result), result["polls"],
            result["waited"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
