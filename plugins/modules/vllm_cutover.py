#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_cutover
short_description: Restart a vLLM server onto another environment in one step (stop, GPUs free, switch, start, ready)
version_added: 0.1.0
description:
  - The downtime window of a vLLM host, run on the host without a round trip to the control node between its steps
    (1) C(systemctl stop) the unit;
    (2) wait until every GPU's memory is freed and no process holds a GPU (NVML, as M(gpufleet.vllm.nvml_vram_info));
    (3) point the environment link O(link) at O(link_target) (a new link renamed over the old one, atomic), after
    remembering the old target in O(previous_link);
    (4) C(systemctl start) the unit;
    (5) the readiness gate of M(gpufleet.vllm.vllm_ready) (C(/health) 200, the served model listed, a 1-token
    completion);
    (6) check that the model holds the GPUs' memory.
  - Returns the downtime as the host saw it, from the stop to ready (RV(downtime_seconds)), and how long each step took
    (RV(phases)).
  - Before anything is stopped, the module checks that the unit exists, that O(link_target) is a Python environment,
    that O(link) is a link (or absent) and, with O(vram), that NVML answers with the expected GPU count. Any of these
    failing stops the task with the server still running.
  - On a failure after the stop, the task fails with what was done (RV(stopped), RV(switched), RV(started)), the link's
    old target (RV(link_before)) and the last lines of the unit's journal, so that a rescue can switch back and start
    the previous environment.
  - Like C(state=restarted), the module always restarts the unit (RV(changed=true)); call it when a restart is due.
    Render the unit and run C(daemon-reload) before, while the server still serves (C(daemon-reload) does not restart
    a running service).
  - With O(start=false) it runs steps (1) and (2) only (the stop of the M(gpufleet.vllm.service) role's C(stop) entry
    point). Then RV(changed) and RV(stopped) say whether a running server was stopped, RV(state) is V(stopped), a
    unit systemd does not know has nothing to stop, and NVML is not read before the stop (a host whose GPUs are in
    trouble can still have its server stopped; the wait for free GPUs then fails, the server stopped).
options:
  unit:
    description:
      - The systemd unit that runs the server, for example V(vllm-kimi-k25.service).
    type: str
    required: true
  link:
    description:
      - The environment link the unit starts through (for example V(/opt/vllm/current), as C(ExecStart=) uses it).
        Pointed at O(link_target) while the server is stopped. Without it, the unit is restarted as it is.
      - An existing real directory or file at this path is never replaced; the task fails before the stop.
    type: path
  link_target:
    description:
      - The environment O(link) points at after the cutover (a directory with C(bin/python)). Required with O(link).
    type: path
  previous_link:
    description:
      - A link that keeps the environment O(link) pointed at before, for a rollback. Only changed when O(link) changes.
    type: path
  previous_link_target:
    description:
      - What O(previous_link) points at after the switch, when O(link) does not exist yet (the first switch of a host
        whose server ran from another environment, such as an adopted venv). When O(link) exists, its old target is
        used and this is ignored.
    type: path
  start:
    description:
      - Start the unit again after the stop (the cutover). V(false) stops the unit (and O(stop_units)) and waits until
        the GPUs are free, nothing more; then O(link), O(link_target), O(previous_link), O(previous_link_target),
        O(daemon_reload) and O(serving_from_unit) are refused, and the readiness gate and the loaded check do not
        run.
    type: bool
    default: true
  daemon_reload:
    description:
      - Run C(systemctl daemon-reload) between the stop and the start (for a unit file changed while the server was
        stopped).
    type: bool
    default: false
  ready:
    description:
      - Whether to wait for the readiness gate after the start. Without it, the downtime ends at the start.
    type: bool
    default: true
  stop_units:
    description:
      - A model switch. Other units that hold the same GPUs (another model's server, such as
        V(vllm-kimi-k25.service) when O(unit) is V(vllm-minimax-m25.service)), each stopped right after O(unit) and
        before the wait for free GPUs. RV(others) says which of them ran and were stopped; a rollback starts those
        again. Enabling and disabling units at boot is not this module's work (the service role's C(enable) entry
        point does it once the new unit is proven).
      - One systemd does not know (LoadState C(not-found)) has nothing to stop and is left out of RV(others); one
        that systemctl cannot read fails the task before anything is stopped.
    type: list
    elements: str
    default: []
  stop_others_in:
    description:
      - A model switch, found by the module itself. The directory the service role renders its units into (its
        C(service_unit_dir)); the other units the role rendered there that run or start at boot and may use one of
        O(unit)'s GPUs (what M(gpufleet.vllm.managed_units) returns as C(others)) are added to O(stop_units).
      - Read before anything is stopped; a directory that cannot be read fails the task with nothing stopped.
    type: path
  serving_from_unit:
    description:
      - Take the port and served model name of the readiness gate (its C(--port), C(--served-model-name) or model),
        its API key (C(--api-key) or C(VLLM_API_KEY)) and a C(--host) that is not a wildcard, and the GPUs and share
        of their memory of the loaded check, from O(unit)'s own file (its C(ExecStart=) and C(Environment=) lines)
        instead of O(port), O(served_model_name), O(api_key), O(host) and O(vram)'s C(loaded_*) options. The file
        must be one the M(gpufleet.vllm.service) role rendered; its drop-ins and C(EnvironmentFile=) are not read (a
        warning says so). Not with O(base_url).
      - What the rollback of a model switch uses to start the old model's unit again, whose settings are no longer
        in the inventory.
    type: bool
    default: false
  systemctl_timeout:
    description:
      - The most seconds one C(systemctl stop), C(systemctl start) or C(systemctl daemon-reload) may take. A call
        that takes longer is killed (with whatever it started), and the module fails at that step, saying what was
        already done (for example the unit stopped and the link switched, not started).
      - C(systemctl show) and C(journalctl) only read; each is given at most 30 s, or O(systemctl_timeout) when that
        is less.
      - Leave room for the unit's C(TimeoutStopSec) (90 s by default) for the stop.
    type: int
    default: 300
  timeout:
    description:
      - Seconds to wait, from the start, until the server is ready (the model load). A 1T-parameter model can take 10
        minutes or more.
    type: int
    default: 900
  interval:
    description:
      - Seconds between two readiness polls. Each poll is one local HTTP request; a short interval keeps the downtime
        close to the load time.
    type: float
    default: 1.0
  max_response_bytes:
    description:
      - The most bytes of one answer of the server's HTTP API that the readiness gate reads; a larger answer fails
        the check with an error that names this cap.
    type: int
    default: 4194304
  vram:
    description:
      - The NVML checks around the restart (nvidia-ml-py must be importable by the interpreter that runs the module).
        Left out, the GPUs are not checked.
    type: dict
    suboptions:
      count:
        description: The number of GPUs the host must have.
        type: int
      stopped_max_used_mib:
        description: After the stop, every GPU must use at most this much memory (MiB) and no process may hold a GPU.
        type: int
        default: 1024
      free_timeout:
        description: Seconds to wait after the stop until the GPUs are free.
        type: int
        default: 120
      loaded_min_used_mib:
        description:
          - After ready, every GPU (of O(vram.loaded_gpus)) must use at least this much memory (MiB).
          - Left out, and O(vram.loaded_min_used_fraction) too, the loaded memory is not checked.
        type: int
      loaded_min_used_fraction:
        description:
          - After ready, every GPU (of O(vram.loaded_gpus)) must use at least this fraction of its own NVML total, less
            O(vram.loaded_tolerance), for example V(0.92), the server's C(--gpu-memory-utilization) (what vLLM
            reserves; 0.92 is the default of vLLM 0.32 and 0.33, 0.9 that of older builds); the failure shows the
            arithmetic (C(expected at least 85,553 MiB = 0.92 x 97,887 MiB - 5 %)).
          - More than 0 and at most 1.
        type: float
      loaded_tolerance:
        description:
          - How much less than O(vram.loaded_min_used_fraction) of the total still passes, as a fraction of it (V(0.05)
            is 5 %).
        type: float
        default: 0.05
      loaded_gpus:
        description:
          - The GPUs the server uses (indices or C(GPU-...) UUIDs) that the loaded check applies to; default every GPU.
        type: list
        elements: raw
      loaded_timeout:
        description: Seconds to wait after ready until the GPUs hold the memory the loaded check expects.
        type: int
        default: 60
      interval:
        description: Seconds between two NVML reads while waiting.
        type: float
        default: 0.5
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
  - gpufleet.vllm.vllm_server
attributes:
  check_mode:
    support: full
    details:
      - In check mode the pre-checks run (unit, link, NVML) and the module reports what it would do; nothing is stopped.
  diff_mode:
    support: full
    details:
      - The diff shows the target of O(link) before and after.
notes:
  - The readiness gate has the bounds of M(gpufleet.vllm.vllm_ready). Each HTTP request ends within
    O(request_timeout) seconds in all (not per read), capped by the time left before O(timeout); at most
    O(max_response_bytes) of an answer are read; redirects are followed only within the same scheme, host and port,
    so the O(api_key) never goes elsewhere. O(base_url), O(host) and O(api_key) with spaces, control characters or
    non-ASCII characters are refused before anything is stopped, and so are times that are not a number, infinite
    or longer than a week (604800 s).
  - Every C(systemctl) and C(journalctl) call is bounded (O(systemctl_timeout), 30 s for the reads) and killed with
    its process group at the limit; at most the last 1 MiB of its output is read.
  - The module does not undo a failed restart; a playbook's C(rescue) decides what to do (the C(gpufleet.vllm.rollout)
    playbook switches back to the previous environment and starts it).
  - Run it with the interpreter of the C(gpufleet.vllm.host_tools) venv when O(vram) is given (nvidia-ml-py).
requirements:
  - Python 3.10 or newer on the host, C(systemctl) and C(journalctl).
  - nvidia-ml-py (module C(pynvml)) for O(vram).
seealso:
  - module: gpufleet.vllm.vllm_ready
    description: The readiness gate alone.
  - module: gpufleet.vllm.nvml_vram_info
    description: The GPU checks alone.
  - module: ansible.builtin.systemd_service
    description: Start, stop and restart units.
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Restart vLLM onto the staged environment, downtime measured on the host
  gpufleet.vllm.vllm_cutover:
    unit: vllm-kimi-k25.service
    link: /opt/vllm/current
    link_target: /opt/vllm/envs/vllm-0.33.0-20261202T101500Z
    previous_link: /opt/vllm/previous
    port: 8000
    served_model_name: kimi-k2.5
    timeout: 900
    vram:
      count: 8
      # vLLM 0.33's default --gpu-memory-utilization: 0.92 x 97,887 MiB = 90,056 MiB reserved per GPU, 5 % less passes
      loaded_min_used_fraction: 0.92
      loaded_tolerance: 0.05
  vars:
    ansible_python_interpreter: /opt/gpufleet/tools/bin/python
  register: cutover

- name: Show the downtime
  ansible.builtin.debug:
    msg: "down {{ cutover.downtime_seconds }} s, of which the model load {{ cutover.load_seconds }} s"

- name: Restart without GPU checks or link switch, ready when /health answers
  gpufleet.vllm.vllm_cutover:
    unit: vllm-minimax-m25.service
    port: 8001
    completion: false

- name: Stop vLLM and wait until its GPUs are free (nothing is started)
  gpufleet.vllm.vllm_cutover:
    unit: vllm-kimi-k25.service
    start: false
    vram: {count: 8}
  vars:
    ansible_python_interpreter: /opt/gpufleet/tools/bin/python

- name: A model switch - MiniMax-M2.5 replaces Kimi-K2.5 on the same GPUs (its unit rendered before)
  gpufleet.vllm.vllm_cutover:
    unit: vllm-minimax-m25.service
    stop_units: [vllm-kimi-k25.service]
    port: 8000
    served_model_name: minimax-m2.5
  register: switch

- name: Its rollback - the Kimi unit again, as its own file says, the MiniMax unit stopped
  gpufleet.vllm.vllm_cutover:
    unit: vllm-kimi-k25.service
    stop_units: [vllm-minimax-m25.service]
    serving_from_unit: true
  when: switch is failed and switch.others | selectattr('stopped') | list | length > 0
"""

RETURN = r"""
cutover:
  description: V(true) for a cutover, V(false) with O(start=false); with RV(state), tells the service role's readers
    (the rollout's rescue) that this result is a cutover's, and how far it got.
  returned: always
  type: bool
state:
  description: V(started) when the server was restarted and is ready (in check mode, would be), V(stopped) when it was
    stopped with O(start=false), V(failed) when the cutover failed (see RV(failed_step), RV(stopped), RV(switched)).
  returned: always
  type: str
  sample: started
check_mode:
  description: Whether the module ran in check mode (nothing was stopped).
  returned: always
  type: bool
restarted:
  description: V(true) when a running server was restarted (in check mode, would be).
  returned: success
  type: bool
ready_at:
  description: When the readiness gate passed (UTC, C(YYYY-MM-DDTHH:MM:SSZ)); null in check mode or without the gate.
  returned: success
  type: str
  sample: "2026-12-04T10:15:42Z"
changed:
  description: V(true) when the unit was (or, in check mode, would be) restarted; with O(start=false), when a running
    server, the unit's or one of O(stop_units), was (would be) stopped.
  returned: always
  type: bool
  sample: true
unit:
  description: The unit.
  returned: always
  type: str
  sample: vllm-kimi-k25.service
was_active:
  description: Whether the unit was running before the stop.
  returned: always
  type: bool
  sample: true
stopped:
  description: Whether the unit was stopped (a failed task with V(true) left the server down or restarting); with
    O(start=false), whether a running server was stopped (in check mode, would be).
  returned: always
  type: bool
  sample: true
switched:
  description: Whether O(link) was changed.
  returned: always
  type: bool
  sample: true
started:
  description: Whether C(systemctl start) succeeded.
  returned: always
  type: bool
  sample: true
ready:
  description: Whether the readiness gate passed.
  returned: always
  type: bool
  sample: true
link:
  description: O(link).
  returned: always
  type: str
  sample: /opt/vllm/current
link_before:
  description: The target of O(link) before the cutover (V(null) when it did not exist or no O(link) was given).
  returned: always
  type: str
  sample: /root/ml-env
link_after:
  description: The target of O(link) after the switch (V(null) before it).
  returned: always
  type: str
  sample: /opt/vllm/envs/vllm-0.33.0-20261202T101500Z
previous_link:
  description: O(previous_link).
  returned: always
  type: str
  sample: /opt/vllm/previous
downtime_seconds:
  description: Seconds from the stop to ready, on the host's clock; V(null) when the server did not get ready.
  returned: always
  type: float
  sample: 541.8
load_seconds:
  description: Seconds from the start to ready (the model load).
  returned: always
  type: float
  sample: 538.2
exists:
  description: Whether systemd knows O(unit) (with O(start=false); a unit it does not know has nothing to stop).
  returned: with O(start=false), once the unit was read
  type: bool
  sample: true
stop_began:
  description: When the stop began (seconds since the epoch, the host's clock).
  returned: when the stop ran
  type: float
  sample: 1796284542.125
stopped_at:
  description: When the GPUs were free after the stop (UTC, C(YYYY-MM-DDTHH:MM:SSZ)), with O(start=false); in check
    mode, when the module ran.
  returned: success, with O(start=false)
  type: str
  sample: "2026-12-04T10:06:12Z"
stop_seconds:
  description: Seconds from the stop until the GPUs were free.
  returned: always
  type: float
  sample: 3.1
phases:
  description: Seconds each step took (C(stop), C(vram_freed), C(switch), C(start), C(ready), C(vram_loaded), C(total)).
  returned: always
  type: dict
  sample: {stop: 2.6, vram_freed: 0.5, switch: 0.0, start: 0.01, ready: 538.2, vram_loaded: 0.0, total: 541.8}
readiness:
  description: The readiness gate's result, as M(gpufleet.vllm.vllm_ready) returns it (C(stages), C(version), ...).
  returned: when the gate ran
  type: dict
version:
  description: The server's version from C(GET /version) after the start.
  returned: always
  type: str
  sample: 0.33.0
vram_freed_mib:
  description: Memory used per GPU after the stop.
  returned: always
  type: list
  elements: int
  sample: [0, 0, 0, 0, 0, 0, 0, 0]
gpu_memory_utilization_source:
  description:
    - With O(serving_from_unit) and O(vram), where the loaded check's share of each GPU's memory came from - the unit's
      C(--gpu-memory-utilization), else the default of the build it runs, read from that build's
      C(vllm/config/cache.py) (C(0.92) in vLLM 0.32 and 0.33), else a table by vLLM version, else C(0.9) (the
      default of older builds) and why.
  returned: with serving_from_unit and vram
  type: str
  sample: the command line's --gpu-memory-utilization
vram_used_mib:
  description: Memory used per GPU once loaded (empty without O(vram.loaded_min_used_mib) or
    O(vram.loaded_min_used_fraction)); with O(start=false), after the stop (as RV(vram_freed_mib)).
  returned: always
  type: list
  elements: int
  sample: [88098, 88098, 88098, 88098, 88098, 88098, 88098, 88098]
others:
  description: The units of O(stop_units), in order, with whether each ran before the cutover and whether it was
    stopped; a rollback of a model switch starts again those that ran.
  returned: always
  type: list
  elements: dict
  contains:
    unit:
      description: The unit.
      type: str
    was_active:
      description: Whether it ran before the cutover.
      type: bool
    stopped:
      description: Whether the cutover stopped it.
      type: bool
  sample: [{unit: vllm-kimi-k25.service, was_active: true, stopped: true}]
failed_step:
  description: The step that failed (C(unit), C(link), C(nvml), C(stop), C(stop_others), C(vram_freed), C(switch),
    C(start), C(ready), C(vram_loaded)), V(null) on success.
  returned: always
  type: str
  sample: ready
journal:
  description: The last O(journal_lines) lines of the unit's journal.
  returned: when a step after the stop failed
  type: list
  elements: str
msg:
  description: What happened, in one sentence.
  returned: always
  type: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded, nvml, serving, systemd
from ansible_collections.gpufleet.vllm.plugins.module_utils.cutover import (
    Cutover,
    CutoverFailed,
    check_link_args,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import (
    SERVER_MUTUALLY_EXCLUSIVE,
    VllmClient,
    make_base_url,
    seconds_problem,
    server_argument_spec,
)


def _bad_numbers(params):
    problems = []
    if params["systemctl_timeout"] < 1:
        problems.append("systemctl_timeout=%s must be 1 second or more" % params["systemctl_timeout"])
    problems.append(seconds_problem("systemctl_timeout", params["systemctl_timeout"]))
    for name in ("timeout", "journal_lines"):
        if params[name] < 0:
            problems.append("%s=%s is negative; give 0 or more" % (name, params[name]))
    for name in ("interval", "request_timeout"):
        if params[name] <= 0:
            problems.append("%s=%s must be more than 0 seconds" % (name, params[name]))
    vram = params["vram"] or {}
    for name in ("count", "stopped_max_used_mib", "free_timeout", "loaded_min_used_mib", "loaded_timeout"):
        if vram.get(name) is not None and vram[name] < 0:
            problems.append("vram.%s=%s is negative" % (name, vram[name]))
    if vram.get("loaded_min_used_fraction") is not None:
        problems.append(serving.utilization_problem("vram.loaded_min_used_fraction", vram["loaded_min_used_fraction"]))
    if vram.get("loaded_tolerance") is not None:
        problems.append(serving.tolerance_problem("vram.loaded_tolerance", vram["loaded_tolerance"]))
    problems.extend(nvml.validate_expect({"gpus": vram.get("loaded_gpus")}))
    for name in ("timeout", "interval", "request_timeout"):
        problems.append(seconds_problem(name, params[name]))
    for name in ("free_timeout", "loaded_timeout", "interval"):
        problems.append(seconds_problem("vram." + name, vram.get(name)))
    problems = [problem for problem in problems if problem]
    if params["max_response_bytes"] < 1024:
        problems.append("max_response_bytes=%s is too small; give 1024 or more" % params["max_response_bytes"])
    if vram and vram.get("interval") is not None and vram["interval"] <= 0:
        problems.append("vram.interval=%s must be more than 0 seconds" % vram["interval"])
    return problems


def _stop_only(module, cutover):
    """start=false: the stop and the wait for free GPUs, then exit (check mode: what it would do)."""
    result = cutover.result
    result["exists"] = bool(cutover.exists)
    if module.check_mode:
        # (what the stop would do, as systemctl's own state=stopped says it in check mode)
        result.update(cutover=False, state="stopped", check_mode=True, changed=cutover.stops_anything(),
                      stopped=bool(result["was_active"]),
                      stopped_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      msg="Check mode: would %s." % cutover.describe())
        module.exit_json(**result)
    try:
        result = cutover.run()
    except CutoverFailed as exc:
        module.fail_json(msg=exc.msg, **dict(exc.result, cutover=False, state="failed", check_mode=False,
                                             exists=bool(cutover.exists)))
    result.update(cutover=False, state="stopped", check_mode=False, vram_used_mib=result["vram_freed_mib"],
                  stopped_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    others = [o["unit"] for o in result["others"] if o["stopped"] and o["was_active"]]
    if result["stopped"]:
        result["msg"] = "%s stopped in %s s" % (cutover.unit, result["stop_seconds"])
    elif others:
        result["msg"] = "%s was not running; %s stopped in %s s" % (cutover.unit, ", ".join(others),
                                                                    result["stop_seconds"])
    elif cutover.exists:
        result["msg"] = "%s was not running" % cutover.unit
    else:
        result["msg"] = "systemd does not know %s: nothing to stop" % cutover.unit
    if result["vram_freed_mib"]:
        result["msg"] += "; the GPUs are free (%s MiB used)" % "/".join(str(m) for m in result["vram_freed_mib"])
    module.exit_json(**dict(result, msg=result["msg"] + "."))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            link=dict(type="path"),
            link_target=dict(type="path"),
            previous_link=dict(type="path"),
            previous_link_target=dict(type="path"),
            start=dict(type="bool", default=True),
            daemon_reload=dict(type="bool", default=False),
            ready=dict(type="bool", default=True),
            stop_units=dict(type="list", elements="str", default=[]),
            stop_others_in=dict(type="path"),
            serving_from_unit=dict(type="bool", default=False),
            systemctl_timeout=dict(type="int", default=300),
            timeout=dict(type="int", default=900),
            interval=dict(type="float", default=1.0),
            max_response_bytes=dict(type="int", default=4194304),
            vram=dict(type="dict", options=dict(
                count=dict(type="int"),
                stopped_max_used_mib=dict(type="int", default=1024),
                free_timeout=dict(type="int", default=120),
                loaded_min_used_mib=dict(type="int"),
                loaded_min_used_fraction=dict(type="float"),
                loaded_tolerance=dict(type="float", default=serving.DEFAULT_LOADED_TOLERANCE),
                loaded_gpus=dict(type="list", elements="raw"),
                loaded_timeout=dict(type="int", default=60),
                interval=dict(type="float", default=0.5),
            )),
            **server_argument_spec()
        ),
        mutually_exclusive=SERVER_MUTUALLY_EXCLUSIVE,
        required_by={"previous_link_target": "previous_link"},
        supports_check_mode=True,
    )
    params = module.params
    # every failure before the stop says so, for a rescue that decides whether to roll back
    untouched = dict(changed=False, stopped=False, switched=False, started=False, ready=False)

    def fail(msg, **fields):
        # the service role registers this result as service_result: say that a cutover failed, and how far it got
        fields.setdefault("unit", module.params["unit"])
        fields.update(cutover=module.params["start"], state="failed", check_mode=module.check_mode)
        module.fail_json(msg=msg, **fields)

    unit = params["unit"].strip()
    if not unit:
        fail(msg="unit is empty: give the systemd unit of the server, for example vllm-kimi-k25.service.",
             failed_step="options", **untouched)
    if "." not in unit:
        unit += ".service"
    problems = _bad_numbers(params) + check_link_args(params["link"], params["link_target"], params["previous_link"],
                                                      must_exist=not module.check_mode)
    stop_units = []
    for index, other in enumerate(params["stop_units"]):
        try:
            other = systemd.unit_name(other)
        except ValueError as exc:
            problems.append("stop_units[%d] %s %s" % (index, shown(other), exc))
            continue
        if other == unit:
            problems.append("stop_units[%d] is the unit %s itself" % (index, other))
        elif other not in stop_units:
            stop_units.append(other)
    if not params["start"]:
        given = [name for name in ("link", "link_target", "previous_link", "previous_link_target") if params[name]]
        given += [name for name in ("daemon_reload", "serving_from_unit") if params[name]]
        if given:
            problems.append("start is false (the stop alone): leave out %s" % ", ".join(given))
    if problems:
        fail(msg="Nothing was stopped: %s." % "; ".join(problems), failed_step="options", **untouched)

    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        fail(msg="systemctl is not on this host: the unit %s cannot be %s; nothing was stopped."
             % (unit, "restarted" if params["start"] else "stopped"), failed_step="unit", **untouched)
    limit = params["systemctl_timeout"]
    read_command = bounded.runner(min(limit, bounded.READ_TIMEOUT))
    if params["stop_others_in"]:
        if not params["stop_others_in"].startswith("/"):
            fail(msg="Nothing was stopped: stop_others_in must be an absolute path, got %s."
                 % shown(params["stop_others_in"]), failed_step="options", **untouched)
        try:
            found = systemd.others_to_stop(systemd.managed_units(read_command, systemctl, params["stop_others_in"],
                                                                 keep=unit))
        except systemd.SystemdError as exc:
            fail(msg="The other models' units in %s cannot be read (stop_others_in): %s; nothing was stopped."
                 % (shown(params["stop_others_in"]), exc), failed_step="unit", **untouched)
        stop_units += [other["unit"] for other in found if other["unit"] not in stop_units]
    port, served_model_name, vram = params["port"], params["served_model_name"], params["vram"]
    utilization_source = None
    host, api_key = params["host"], params["api_key"]
    if params["serving_from_unit"]:
        if params["base_url"]:
            fail(msg="Nothing was stopped: serving_from_unit takes the address from the unit's file; leave base_url "
                     "out (give host for where to reach it).", failed_step="options", **untouched)
        try:
            props = systemd.show(read_command, systemctl, unit, ("LoadState", "FragmentPath", "DropInPaths"))
            rendered = systemd.read_rendered_file(props.get("FragmentPath"))
            where = serving.endpoint(rendered["argv"], rendered["environment"])
            config = serving.with_build_default(serving.serving_config(rendered["argv"], rendered["environment"]),
                                                rendered["argv"])
        except (systemd.SystemdError, serving.ServingConfigError) as exc:
            fail(msg="The serving settings of %s cannot be read from its unit (serving_from_unit): %s; nothing was "
                     "stopped." % (unit, exc), failed_step="unit", **untouched)
        if (props.get("DropInPaths") or "").strip() or rendered["environment_files"]:
            module.warn("%s has drop-ins or an EnvironmentFile= (%s) that were not read: the port, served name and "
                        "GPUs are those of its unit file." % (unit, " ".join(
                            [(props.get("DropInPaths") or "").strip()] + rendered["environment_files"]).strip()))
        if serving.unsure_reason(config):
            module.warn("%s: %s; the GPUs and memory the loaded gate expects are those of its command line."
                        % (unit, serving.unsure_reason(config)))
        port, served_model_name = where["port"], where["served_model_name"]
        # (an address it listens on only, not a wildcard: reach it there)
        if where["host"] and where["host"] not in ("0.0.0.0", "::", "[::]"):
            host = where["host"]
        api_key = where["api_key"] or api_key
        if vram:
            utilization_source = config["gpu_memory_utilization_source"]
            vram = dict(vram, loaded_min_used_mib=None, loaded_gpus=config["gpus"],
                        loaded_min_used_fraction=config["gpu_memory_utilization"],
                        loaded_tolerance=serving.DEFAULT_LOADED_TOLERANCE if vram.get("loaded_tolerance") is None
                        else vram["loaded_tolerance"])
    client = None
    if params["ready"] and params["start"]:
        try:
            url = make_base_url(host=host, port=port, base_url=params["base_url"])
            client = VllmClient(url, api_key=api_key, timeout=params["request_timeout"],
                                validate_certs=params["validate_certs"], max_response_bytes=params["max_response_bytes"])
        except ValueError as exc:
            fail(msg="Nothing was stopped: %s." % exc, failed_step="options", **untouched)
    cutover = Cutover(
        bounded.runner(limit), systemctl, module.get_bin_path("journalctl"), unit,
        link=params["link"], link_target=params["link_target"], previous_link=params["previous_link"],
        previous_link_target=params["previous_link_target"], daemon_reload=params["daemon_reload"], client=client,
        ready=dict(served_model_name=served_model_name, timeout=params["timeout"],
                   interval=params["interval"], completion=params["completion"], prompt=params["prompt"]),
        vram=vram, journal_lines=params["journal_lines"], read_command=read_command, stop_units=stop_units,
        start=params["start"])

    try:
        cutover.prepare(check_mode=module.check_mode)
    except CutoverFailed as exc:
        exc.result["changed"] = False
        fail(msg=exc.msg, **exc.result)
    for warning in cutover.warnings:
        module.warn(warning)
    if module.check_mode and params["link"] and not os.path.isdir(params["link_target"]):
        module.warn("link_target %s does not exist (yet): in check mode nothing was staged." % params["link_target"])

    result = cutover.result
    if utilization_source:
        result["gpu_memory_utilization_source"] = utilization_source
    if not params["start"]:
        _stop_only(module, cutover)
    result.update(cutover=True, state="started", check_mode=module.check_mode)
    if module.check_mode:
        result["restarted"] = bool(result.get("was_active"))
    if module._diff and params["link"]:
        result["diff"] = {
            "before_header": params["link"], "after_header": params["link"],
            "before": "%s -> %s\n" % (params["link"], result["link_before"]),
            "after": "%s -> %s\n" % (params["link"], params["link_target"]),
        }
    if module.check_mode:
        result["changed"] = True
        result["msg"] = "Check mode: would %s." % cutover.describe()
        module.exit_json(**result)

    try:
        result = cutover.run()
    except CutoverFailed as exc:
        if utilization_source:
            exc.result["gpu_memory_utilization_source"] = utilization_source
        fail(msg=exc.msg, **exc.result)
    if utilization_source:
        result["gpu_memory_utilization_source"] = utilization_source
    result.update(cutover=True, state="started", check_mode=False, restarted=bool(result.get("was_active")),
                  ready_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if result.get("ready") else None)
    phases = result["phases"]
    result["msg"] = "%s restarted%s: down %s s (stop %s s, load %s s)%s." % (
        unit, (" on %s" % result["link_after"]) if params["link"] else "",
        result["downtime_seconds"], result["stop_seconds"], result["load_seconds"],
        (", vLLM %s ready" % result["version"]) if result["version"] else "")
    if "vram_loaded" in phases:
        result["msg"] += " The GPUs hold %s MiB." % "/".join(str(m) for m in result["vram_used_mib"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
