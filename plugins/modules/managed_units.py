#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: managed_units
short_description: The vLLM units the collection's service role rendered on a host, with their state
version_added: 0.1.0
description:
  - Lists the C(.service) files in O(unit_dir) that the M(gpufleet.vllm.service) role rendered (its template writes
    the line C(rendered by the gpufleet.vllm.service role) into every unit), and reads each one's state with
    C(systemctl show), never through a shell.
  - A host that switches models (Kimi-K2.5 to MiniMax-M2.5) has the old model's unit still there. RV(others) lists
    the managed units other than O(keep) that are running or enabled at boot and may use a GPU O(keep)'s server
    takes. They hold those GPUs (or would at the next boot), so the service role stops them before its own unit
    starts and disables them once it is proven, and the audit lists them.
  - The GPUs of each unit come from its own C(ExecStart=), C(Environment=) and C(UnsetEnvironment=) lines (the first
    tensor x pipeline x data parallel entries of C(CUDA_VISIBLE_DEVICES), or GPUs 0, 1, ...). Two models side by side
    on different GPUs are not others of each other; a unit whose GPUs cannot be known (its file edited beyond what the
    role writes, drop-ins, an C(EnvironmentFile=), C(PassEnvironment=CUDA_VISIBLE_DEVICES), a C(--config) YAML file
    that may set the parallel sizes, O(keep) not rendered here, GPUs named by index in one and by UUID in the other)
    counts as sharing them, and RV(units[].gpus_unknown) says why.
  - Only vLLM's own command is read, C(<dir>/vllm serve), C(<dir>/python3 -m vllm.entrypoints.openai.api_server) or
    C(-m vllm.entrypoints.cli.main serve), maybe behind C(env NAME=value ...) (its assignments applied). A shell, any
    other wrapper, C(env) with an option, the C(@) prefix, an abbreviated option (vLLM takes an unambiguous prefix such
    as C(--tensor-parallel)), a one-letter option with its value attached (C(-n2)) or an option that changes the GPUs
    and is not read (C(--device-ids), C(-pcp), the data parallel rank options, C(--node-rank), an executor other than
    C(mp) or C(uni)) makes its GPUs unknown (RV(units[].gpus_unknown) begins with C(unsure)).
  - Only regular files are read (a link is never followed), only their first 64 KiB, and at most 4096 directory
    entries; a unit directory with more is refused rather than half read.
  - RV(keep_state) is O(keep)'s own state (exists, loaded, active, running, main PID), read with one bounded
    C(systemctl show) whether or not the role rendered it yet; a unit systemd does not know is no failure.
  - Without O(enabled) the module only reads and never changes anything (C(changed=false)).
  - With O(enabled), it also sets the boot state of O(keep) once that unit is proven (the service role's C(enable) step)
    and makes the RV(others) that start at boot not start any more (C(systemctl enable) and C(systemctl disable), no
    shell), in one step. Until then a reboot brings back the model that served before.
options:
  unit_dir:
    description: The directory the service role renders its units into (its C(service_unit_dir)).
    type: path
    default: /etc/systemd/system
  keep:
    description:
      - The unit that stays, for example V(vllm-minimax-m25.service) or V(vllm-minimax-m25). It is listed in RV(units)
        but never in RV(others).
      - Left out, every managed unit that runs or is enabled is in RV(others). Required with O(enabled).
    type: str
  enabled:
    description:
      - Whether O(keep) starts at boot. Left out, nothing is changed.
      - Given, O(keep) is enabled (V(true)) or disabled (V(false)) when it is not so already, and every one of
        RV(others) that starts at boot is disabled (also with V(false)); RV(changed_units) lists what changed.
      - In check mode nothing is changed and RV(changed_units) says what would be, also for a O(keep) not rendered yet.
        Outside check mode systemd must know O(keep) (the role renders it into O(unit_dir) first).
    type: bool
  disable_others:
    description:
      - With O(enabled), whether the RV(others) that start at boot are disabled. V(false) sets the boot state of
        O(keep) alone.
    type: bool
    default: true
  systemctl:
    description: The path of C(systemctl). Default is the one found on the host's E(PATH).
    type: path
  timeout:
    description:
      - Seconds each C(systemctl show) may take. One that does not answer is killed with its process group at this
        limit and the task fails, naming the limit.
    type: int
    default: 30
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Without O(enabled) the module only reads. With it, check mode changes nothing and says what it would.
  diff_mode:
    support: none
requirements:
  - Python 3.10 or newer on the managed host (standard library only), and C(systemctl).
seealso:
  - module: ansible.builtin.systemd_service
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Find the other models' units on this host
  gpufleet.vllm.managed_units:
    keep: vllm-minimax-m25.service
  register: vllm_units

- name: Stop the vLLM unit only when it runs
  ansible.builtin.systemd_service:
    name: vllm-minimax-m25.service
    state: stopped
  when: vllm_units.keep_state.running

- name: Make vllm-minimax-m25 the unit that starts at boot, and not the other models' units on its GPUs
  gpufleet.vllm.managed_units:
    keep: vllm-minimax-m25.service
    enabled: true

- name: Stop and disable them before the new model starts
  ansible.builtin.systemd_service:
    name: "{{ item.unit }}"
    state: stopped
    enabled: false
  loop: "{{ vllm_units.others }}"
  loop_control:
    label: "{{ item.unit }}"
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (it reads the same either way). Also true for a task with
      C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode) variable is false.
  returned: always
  type: bool
  sample: false
keep:
  description: O(keep) as a full unit name, or an empty string.
  returned: always
  type: str
  sample: vllm-minimax-m25.service
units:
  description: Every unit the service role rendered in O(unit_dir), by name.
  returned: always
  type: list
  elements: dict
  contains:
    unit:
      description: The unit's name.
      type: str
      sample: vllm-kimi-k25.service
    active_state:
      description: Its C(ActiveState).
      type: str
      sample: active
    sub_state:
      description: Its C(SubState).
      type: str
      sample: running
    unit_file_state:
      description: Its C(UnitFileState) (V(enabled), V(disabled), ...).
      type: str
      sample: enabled
    main_pid:
      description: Its C(MainPID) (0 when it does not run).
      type: int
      sample: 4242
    active:
      description: Whether it runs (C(active), C(activating), C(reloading) or C(deactivating)).
      type: bool
    enabled:
      description:
        - Whether it starts at boot (C(enabled), C(linked) or an alias). The C(-runtime) forms are gone after a reboot
          and C(systemctl disable) does not remove them, so they do not count.
      type: bool
    gpus:
      description: The GPUs (indices or UUIDs) its server takes, read from its file; V(null) when they cannot be known.
      type: list
      elements: raw
      sample: [0, 1, 2, 3, 4, 5, 6, 7]
    gpus_unknown:
      description: Why RV(units[].gpus) is V(null).
      type: str
      returned: when RV(units[].gpus) is null
    shares_gpus:
      description: Whether its GPUs may overlap those of O(keep) (always V(true) for O(keep) itself).
      type: bool
    other:
      description: Whether it is not O(keep).
      type: bool
keep_state:
  description:
    - The state of O(keep) itself, read whether or not the role rendered it in O(unit_dir) (V({}) without O(keep));
      a unit systemd does not know reads RV(keep_state.load_state=not-found) and RV(keep_state.exists=false).
    - The service role reads whether its server runs from it before it renders the unit.
  returned: always
  type: dict
  sample: {unit: vllm-minimax-m25.service, load_state: loaded, active_state: active, sub_state: running,
           main_pid: 41235, exists: true, loaded: true, active: true, running: true}
  contains:
    unit:
      description: The full name of the unit (with its type suffix).
      type: str
    load_state:
      description: Its C(LoadState); V(not-found) for a unit systemd does not know.
      type: str
    active_state:
      description: Its C(ActiveState).
      type: str
    sub_state:
      description: Its C(SubState).
      type: str
    main_pid:
      description: Its main process; V(0) when none runs.
      type: int
    exists:
      description: Whether systemd knows the unit (RV(keep_state.load_state) is not V(not-found)).
      type: bool
    loaded:
      description: Whether its unit file is read (RV(keep_state.load_state=loaded)).
      type: bool
    active:
      description: Whether it is up or coming up (C(active), C(activating) or C(reloading)).
      type: bool
    running:
      description: Whether a stop has something to end (RV(keep_state.active) or C(deactivating)).
      type: bool
    properties:
      description: The properties as read (C(LoadState), C(ActiveState), C(SubState), C(MainPID), ...).
      type: dict
changed_units:
  description:
    - With O(enabled), the units whose boot state was set (in check mode, would be), each as C(unit) and C(enabled)
      (the new state). Empty without O(enabled).
  returned: always
  type: list
  elements: dict
  sample: [{unit: vllm-minimax-m25.service, enabled: true}, {unit: vllm-kimi-k25.service, enabled: false}]
others:
  description: The RV(units) other than O(keep) that run or are enabled and may share a GPU with O(keep), what a model
    switch stops and disables (read before any change O(enabled) makes).
  returned: always
  type: list
  elements: dict
  sample: [{unit: vllm-kimi-k25.service, active_state: active, sub_state: running, unit_file_state: enabled,
            main_pid: 4242, active: true, enabled: true, gpus: [0, 1, 2, 3, 4, 5, 6, 7], other: true,
            shares_gpus: true}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown
from ansible_collections.gpufleet.vllm.plugins.module_utils.systemd import (
    ENABLED_STATES,
    SystemdError,
    managed_units,
    others_to_stop,
    read_state,
    reader,
    run_verb,
    show,
    unit_name,
)

MAX_TIMEOUT = 3600


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            keep=dict(type="str"),
            enabled=dict(type="bool"),
            disable_others=dict(type="bool", default=True),
            systemctl=dict(type="path"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    keep = ""
    if params["enabled"] is not None and not params["keep"]:
        module.fail_json(msg="enabled sets the boot state of the unit keep names: give keep, for example "
                             "vllm-minimax-m25.service. Nothing was changed.", changed=False)
    if params["keep"]:
        try:
            keep = unit_name(params["keep"])
        except ValueError as exc:
            module.fail_json(msg="keep %s %s: give the unit's name, for example vllm-minimax-m25.service." % (
                shown(params["keep"]), exc), changed=False)
    if not params["unit_dir"].startswith("/"):
        module.fail_json(msg="unit_dir must be an absolute path, got %s." % shown(params["unit_dir"]), changed=False)
    if not 1 <= params["timeout"] <= MAX_TIMEOUT:
        module.fail_json(msg="timeout must be from 1 to %d seconds (got %d)." % (MAX_TIMEOUT, params["timeout"]),
                         changed=False)
    systemctl = params["systemctl"] or module.get_bin_path("systemctl")
    if not systemctl:
        module.fail_json(msg="systemctl is not on this host's PATH, so the vLLM units cannot be read: this host does "
                             "not look like a systemd host (or give the option systemctl).", changed=False)
    try:
        units = managed_units(reader(params["timeout"]), systemctl, params["unit_dir"], keep=keep or None)
    except SystemdError as exc:
        module.fail_json(msg="Cannot list the vLLM units in %s: %s. Nothing was changed." % (
            shown(params["unit_dir"]), exc), changed=False, keep=keep)
    keep_state = {}
    if keep:
        try:
            keep_state = read_state(reader(params["timeout"]), systemctl, keep).as_result()
        except SystemdError as exc:
            module.fail_json(msg="Cannot read the state of %s: %s. Nothing was changed." % (keep, exc),
                             changed=False, keep=keep, units=units)
    others = others_to_stop(units)
    changes = []
    if params["enabled"] is not None:
        changes = boot_changes(module, systemctl, keep, params["enabled"], units, others if params["disable_others"] else [])
        for done, change in enumerate(changes):
            if module.check_mode:
                break
            try:
                run_verb(reader(params["timeout"]), systemctl, "enable" if change["enabled"] else "disable", change["unit"])
            except SystemdError as exc:
                module.fail_json(msg="Could not %s %s at boot: %s. %s" % (
                    "enable" if change["enabled"] else "disable", change["unit"], exc,
                    ("Changed before it: %s." % ", ".join(c["unit"] for c in changes[:done])) if done else "Nothing was changed."),
                    changed=done > 0, keep=keep, keep_state=keep_state, units=units, others=others,
                    changed_units=changes[:done])
    module.exit_json(changed=bool(changes), check_mode=module.check_mode, keep=keep, keep_state=keep_state, units=units,
                     others=others, changed_units=changes)


def boot_changes(module, systemctl, keep, enabled, units, others):
    """What enabled=ENABLED changes: KEEP's boot state when it differs, then each of OTHERS that starts at boot."""
    mine = [u for u in units if u["unit"] == keep]
    if mine:
        is_enabled = mine[0]["enabled"]
    else:
        # (a unit systemd knows from elsewhere than unit_dir: its own state)
        try:
            props = show(reader(module.params["timeout"]), systemctl, keep, ("LoadState", "UnitFileState"))
        except SystemdError as exc:
            module.fail_json(msg="Cannot read %s: %s. Nothing was changed." % (keep, exc), changed=False, keep=keep,
                             units=units, others=others)
        if props.get("LoadState") == "not-found" and not module.check_mode:
            module.fail_json(msg="systemd does not know %s, so its boot state cannot be set: render it first (the "
                                 "service role's unit step). Nothing was changed." % keep,
                             changed=False, keep=keep, units=units, others=others)
        # (check mode before the unit is rendered: a unit systemd does not know does not start at boot, so only
        # enabled=true would change it once it is)
        is_enabled = (props.get("UnitFileState") or "") in ENABLED_STATES
    changes = [] if is_enabled == enabled else [{"unit": keep, "enabled": enabled}]
    changes.extend({"unit": u["unit"], "enabled": False} for u in others if u["enabled"])
    return changes


if __name__ == "__main__":
    main()
