#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_ready
short_description: Wait until a vLLM server is ready to serve (health, model listed, one completion)
version_added: 0.1.0
description:
  - The readiness gate after a vLLM server (re)starts. Loading a large model (weights, C(torch.compile), CUDA graphs)
    takes minutes; the server only listens once it is loaded. The module polls, within one deadline of O(timeout)
    seconds, three checks in order, each retried every O(interval) seconds until it passes
    (1) C(GET /health) answers HTTP 200;
    (2) C(GET /v1/models) lists O(served_model_name);
    (3) a completion of C(max_tokens=1) for that model succeeds (left out with O(completion=false)).
  - Returns how many seconds after the start each check passed (RV(stages)), the server's version (C(GET /version))
    and RV(ready=true).
  - When the deadline passes, the task fails with the check that never passed, how long it waited, the last error
    (for example C(connection refused) while the model still loads) and, with O(unit), the last lines of the unit's
    journal.
  - With O(unit), the module also watches the systemd unit between two polls and stops waiting at once when the unit
    failed or stopped (a restart in progress, C(activating/auto-restart), is waited for).
  - Talks HTTP with the Python standard library only; nothing is installed on the host. Does not change anything;
    RV(changed) is always V(false).
options:
  timeout:
    description:
      - Seconds to wait in all, from the first poll, until every check passed. A 1T-parameter model can take 10
        minutes or more to load.
      - V(0) checks once without waiting (and fails if the server is not ready).
    type: int
    default: 900
  interval:
    description:
      - Seconds between two attempts of a check that did not pass.
    type: float
    default: 5.0
  max_response_bytes:
    description:
      - The most bytes of one answer's body that are read. A larger answer fails the check with an error that names
        this cap, so a wrong or hostile server cannot fill the host's memory. C(/v1/models) of a real server is a few
        KiB.
    type: int
    default: 4194304
  unit:
    description:
      - The systemd unit that runs the server, for example V(vllm-kimi-k25.service). When given, the wait stops as
        soon as the unit failed or stopped, the unit's state is returned (RV(unit_state)) and a failure message
        ends with the last O(journal_lines) lines of its journal.
    type: str
  journal_timeout:
    description:
      - The most seconds each C(systemctl show) call (the unit watch, once per poll, and the final RV(unit_state)) and
        the C(journalctl) call of a failure may take. At the limit the call is killed with its process group - a
        C(systemctl) that does not answer leaves the unit unwatched for that poll, a C(journalctl) leaves the failure
        without journal lines; at most the last 1 MiB of output is read.
    type: int
    default: 30
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
  - gpufleet.vllm.vllm_server
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing new was started, so the module does not wait. It checks each stage once and reports
        the result in RV(ready) and RV(msg) without failing.
  diff_mode:
    support: none
notes:
  - Bounds. Each HTTP request ends within O(request_timeout) seconds in all (connect, status line, headers and body,
    not per read; a server that trickles bytes is cut off), capped by the time left before O(timeout), but never
    below 1 s; so the whole wait ends within O(timeout) plus at most one request of 1 s (in check mode, each check
    is one request of at most O(request_timeout)). At most O(max_response_bytes) of an answer are read. Times that
    are not a number, infinite or longer than a week (604800 s) are refused.
  - Redirects are followed only to the same scheme, host and port (at most 5). A redirect to another origin is not
    followed and the check fails with that URL in the error, so the request and the O(api_key) never go there.
  - O(base_url), O(host) and O(api_key) are refused before any request when they hold spaces, control characters
    (a CR/LF would inject headers) or non-ASCII characters; O(base_url) must not hold a user name, query or fragment.
    Answers that are not the JSON vLLM sends (wrong types, too deep, not UTF-8) fail the check with a short error.
  - Run it on the host of the server (the default address is the loopback interface), or delegate it to any host
    that can reach O(base_url).
  - vLLM binds its port at once but only listens when the model is loaded, so during the load the checks fail with
    C(connection refused); that is expected and waited for.
  - A unit with C(Restart=on-failure) that keeps crashing is waited for until O(timeout); its restart count is in
    C(NRestarts) in RV(unit_state).
requirements:
  - Python 3.10 or newer on the host the module runs on (standard library only).
  - C(systemctl) and C(journalctl) when O(unit) is given (each call bounded by O(journal_timeout)).
seealso:
  - name: vLLM OpenAI-compatible server
    description: The HTTP API whose C(/health), C(/version), C(/v1/models) and C(/v1/completions) the module uses.
    link: https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html
  - module: gpufleet.vllm.nvml_vram_info
    description: Check that the model holds the GPUs' memory once the server is ready.
  - module: ansible.builtin.uri
    description: Single HTTP requests.
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Wait up to 15 minutes for vLLM to load the model and answer
  gpufleet.vllm.vllm_ready:
    port: 8000
    served_model_name: kimi-k2.5
    timeout: 900
    interval: 5
    unit: vllm-kimi-k25.service
  register: ready

- name: Show how long the load took
  ansible.builtin.debug:
    msg: "Ready after {{ ready.elapsed }} s, vLLM {{ ready.version }}"

- name: Check a server behind TLS with an API key, without generating
  gpufleet.vllm.vllm_ready:
    base_url: https://vllm.example.internal
    served_model_name: kimi-k2.5
    api_key: "{{ vllm_api_key }}"
    completion: false
    timeout: 60
  delegate_to: localhost

- name: Is it up right now? (one check, no waiting, never fails in check mode)
  gpufleet.vllm.vllm_ready:
    served_model_name: kimi-k2.5
  check_mode: true
  register: probe
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (the server was asked once, without waiting).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
ready:
  description: Whether every check passed.
  returned: always
  type: bool
  sample: true
url:
  description: The base URL that was polled.
  returned: always
  type: str
  sample: http://127.0.0.1:8000
ended_at:
  description:
    - When the wait ended (seconds since the epoch, the host's clock), to measure a downtime against a time the host
      noted, such as M(gpufleet.vllm.vllm_cutover)'s RV(gpufleet.vllm.vllm_cutover#module:stop_began) with
      O(gpufleet.vllm.vllm_cutover#module:start=false).
  returned: always
  type: float
  sample: 1796285084.512
elapsed:
  description: Seconds from the first poll until the server was ready (or the wait ended).
  returned: always
  type: float
  sample: 532.4
stages:
  description: One entry per check, C(health), C(models) and C(completion) (without it when O(completion=false)).
  returned: always
  type: dict
  contains:
    passed:
      description: Whether the check passed.
      type: bool
    elapsed:
      description: Seconds from the first poll until this check passed; V(null) if it never did.
      type: float
    attempts:
      description: How many times the check was tried.
      type: int
    last_error:
      description: The error of the last failed attempt (V(null) when the first attempt passed).
      type: str
  sample:
    health: {passed: true, elapsed: 531.9, attempts: 107, last_error: connection refused}
    models: {passed: true, elapsed: 531.9, attempts: 1, last_error: null}
    completion: {passed: true, elapsed: 532.4, attempts: 1, last_error: null}
failed_stage:
  description: The check that never passed (C(health), C(models) or C(completion)), V(null) when ready.
  returned: always
  type: str
  sample: health
stopped_reason:
  description: Why the wait stopped before the deadline (the unit failed or stopped), else V(null).
  returned: always
  type: str
  sample: "the unit vllm-kimi-k25.service failed (result: exit-code, restarts: 0)"
version:
  description: The server's version from C(GET /version), V(null) when not read.
  returned: always
  type: str
  sample: 0.33.0
models:
  description: The model ids C(GET /v1/models) listed, V(null) when not read.
  returned: always
  type: list
  elements: str
  sample: [kimi-k2.5]
model:
  description: The model that was checked (O(served_model_name), or the first listed one).
  returned: always
  type: str
  sample: kimi-k2.5
completion:
  description: The test completion, V(null) when not made.
  returned: always
  type: dict
  contains:
    text:
      description: The generated text.
      type: str
    finish_reason:
      description: Why generation stopped (C(length) after one token).
      type: str
    completion_tokens:
      description: Tokens generated, from the answer's usage.
      type: int
    usage:
      description: The answer's usage block.
      type: dict
  sample: {text: " hello", finish_reason: length, completion_tokens: 1,
           usage: {prompt_tokens: 1, completion_tokens: 1, total_tokens: 2}}
unit_state:
  description:
    - The unit's C(LoadState), C(ActiveState), C(SubState), C(Result), C(NRestarts), C(MainPID), C(InvocationID),
      C(ExecMainStartTimestampMonotonic) (microseconds) and C(FragmentPath) when the wait ended, read as
      RV(gpufleet.vllm.managed_units#module:keep_state) reads them. Empty when C(systemctl) did not answer.
  returned: when O(unit) is given
  type: dict
  sample: {LoadState: loaded, ActiveState: active, SubState: running, Result: success, NRestarts: 0, MainPID: 4242,
           InvocationID: 3c9d0e51a2b84c7a9d1f0e6b5a4c3d21, ExecMainStartTimestampMonotonic: 81234567890}
ready_after_start:
  description:
    - Seconds from the start of the unit's main process until the server was found ready, that is the model load
      as the host saw it (RV(elapsed) only counts from the first poll). V(null) when systemd has no start time.
  returned: when O(unit) is given and the server is ready
  type: float
  sample: 538.2
journal:
  description: The last O(journal_lines) lines of the unit's journal.
  returned: when O(unit) is given and the server did not get ready
  type: list
  elements: str
msg:
  description: What happened, in one sentence (and, on failure, the journal lines).
  returned: always
  type: str
  sample: "vLLM at http://127.0.0.1:8000 is ready (version 0.33.0): GET /health answers 200 after 531.9 s; ..."
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded
from ansible_collections.gpufleet.vllm.plugins.module_utils.systemd import (
    journal_tail,
    seconds_since_start,
    unit_state,
    unit_stopped_reason,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import (
    SERVER_MUTUALLY_EXCLUSIVE,
    VllmClient,
    failure_message,
    make_base_url,
    seconds_problem,
    server_argument_spec,
    wait_ready,
)


def unit_watch(run, systemctl, unit):
    """A callable for wait_ready: why waiting is pointless (the unit stopped or failed), or None."""
    def watch():
        return unit_stopped_reason(unit, unit_state(run, systemctl, unit))
    return watch


def main():
    module = AnsibleModule(
        argument_spec=dict(
            server_argument_spec(),
            timeout=dict(type="int", default=900),
            interval=dict(type="float", default=5.0),
            max_response_bytes=dict(type="int", default=4194304),
            unit=dict(type="str"),
            journal_timeout=dict(type="int", default=30),
        ),
        mutually_exclusive=SERVER_MUTUALLY_EXCLUSIVE,
        supports_check_mode=True,
    )
    params = module.params
    for name in ("timeout", "journal_lines"):
        if params[name] < 0:
            module.fail_json(msg="%s=%s is negative; give 0 or more." % (name, params[name]))
    for name in ("interval", "request_timeout", "journal_timeout"):
        if params[name] <= 0:
            module.fail_json(msg="%s=%s must be more than 0 seconds." % (name, params[name]))
    for name in ("timeout", "interval", "request_timeout", "journal_timeout"):
        problem = seconds_problem(name, params[name])
        if problem:
            module.fail_json(msg="%s." % problem)
    if params["max_response_bytes"] < 1024:
        module.fail_json(msg="max_response_bytes=%s is too small; give 1024 or more (the default is 4194304)."
                         % params["max_response_bytes"])
    try:
        url = make_base_url(host=params["host"], port=params["port"], base_url=params["base_url"])
        client = VllmClient(url, api_key=params["api_key"], timeout=params["request_timeout"],
                            validate_certs=params["validate_certs"], max_response_bytes=params["max_response_bytes"])
    except ValueError as exc:
        module.fail_json(msg="Cannot poll vLLM: %s." % exc)

    unit = params["unit"]
    systemctl = journalctl = watch = None
    if unit:
        systemctl = module.get_bin_path("systemctl")
        journalctl = module.get_bin_path("journalctl")
        if systemctl is None:
            module.warn("unit=%s was given but systemctl is not on this host: the unit is not watched." % unit)
        else:
            watch = unit_watch(bounded.runner(params["journal_timeout"]), systemctl, unit)

    result = wait_ready(client, served_model_name=params["served_model_name"], timeout=params["timeout"],
                        interval=params["interval"], completion=params["completion"], prompt=params["prompt"],
                        once=module.check_mode, watch=watch)
    result.pop("timeout", None)
    result.pop("once", None)
    result["ended_at"] = round(time.time(), 3)
    result["changed"] = False
    result["check_mode"] = module.check_mode
    if unit and systemctl:
        result["unit_state"] = unit_state(bounded.runner(params["journal_timeout"]), systemctl, unit)
        if result["ready"]:
            result["ready_after_start"] = seconds_since_start(result["unit_state"])

    if result["ready"] or module.check_mode:
        if module.check_mode and not result["ready"]:
            result["msg"] += " Check mode: nothing was waited for and the task does not fail."
        module.exit_json(**result)

    # journalctl bounded: killed at journal_timeout seconds, at most its last MAX_OUTPUT bytes read
    journal = journal_tail(bounded.runner(params["journal_timeout"]), journalctl, unit, params["journal_lines"]) if unit else []
    if unit:
        result["journal"] = journal
    result["msg"] = failure_message(result, unit=unit, journal=journal,
                                    timeout_variable="the timeout (service_load_timeout in the gpufleet.vllm.service role)")
    module.fail_json(**result)


if __name__ == "__main__":
    main()
