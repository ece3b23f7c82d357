#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: unit_info
short_description: The state of a systemd unit (loaded, active, running, main PID), read with one bounded call
version_added: 0.1.0
description:
  - Reads a unit's state with one C(systemctl show) call and returns it as words (RV(load_state),
    RV(active_state), RV(sub_state)), a number (RV(main_pid)) and the answers the roles ask (RV(exists),
    RV(loaded), RV(active), RV(running)).
  - The same code reads the unit in M(gpufleet.vllm.vllm_cutover), M(gpufleet.vllm.vllm_ready) and
    M(gpufleet.vllm.drift_info), so a role and a module never disagree about a unit.
  - A unit that systemd does not know is no failure; it reads RV(load_state=not-found) and RV(exists=false).
  - The answer is read strictly. An empty answer, a line that is not C(Key=Value), a property that was not asked
    for, or an answer larger than 64 KiB fails the task with a message that says so, rather than guessing a state.
  - The module only reads. It never changes anything (C(changed=false)).
options:
  unit:
    description:
      - The unit's name, for example V(vllm-kimi-k25.service) or V(vllm-kimi-k25). A name without a unit type
        suffix is a service, as for C(systemctl).
      - "Only letters, digits and C(: - _ . @ \\) are allowed, as systemd allows them. A template without an
        instance (ending in C(@)) is refused."
    type: str
    required: true
  systemctl:
    description:
      - The path of C(systemctl). Default is the one found on the host's E(PATH).
    type: path
  timeout:
    description:
      - Seconds C(systemctl show) may take. A C(systemctl) that does not answer (a wedged D-Bus) is killed with its
        process group at this limit and the task fails, naming the limit.
    type: int
    default: 30
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode returns the same result.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
notes:
  - At most the last 1 MiB of the answer is read. An answer of more than 64 KiB is refused.
  - RV(active) is what a start would not change (V(active), V(activating), V(reloading)); RV(running) adds
    V(deactivating), that is whether a stop has something to end.
requirements:
  - Python 3.10 or newer on the managed host (standard library only), and C(systemctl).
seealso:
  - module: ansible.builtin.systemd_service
  - module: ansible.builtin.service_facts
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: Read the state of the vLLM unit
  gpufleet.vllm.unit_info:
    unit: vllm-kimi-k25.service
  register: vllm_unit

- name: Stop it only when it exists
  ansible.builtin.systemd_service:
    name: vllm-kimi-k25.service
    state: stopped
  when: vllm_unit.exists

- name: A host whose systemd answers slowly
  gpufleet.vllm.unit_info:
    unit: vllm-kimi-k25
    systemctl: /usr/bin/systemctl
    timeout: 60
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (it reads only, in check mode as in a real run).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
unit:
  description: The full name of the unit that was read (with its type suffix).
  returned: always
  type: str
  sample: vllm-kimi-k25.service
load_state:
  description: The unit's C(LoadState); V(not-found) for a unit systemd does not know.
  returned: success
  type: str
  sample: loaded
active_state:
  description: The unit's C(ActiveState) (V(active), V(inactive), V(failed), V(activating), ...).
  returned: success
  type: str
  sample: active
sub_state:
  description: The unit's C(SubState) (V(running), V(dead), V(auto-restart), ...).
  returned: success
  type: str
  sample: running
main_pid:
  description: The unit's main process; V(0) when none runs.
  returned: success
  type: int
  sample: 41235
exists:
  description: Whether systemd knows the unit (RV(load_state) is not V(not-found)).
  returned: success
  type: bool
  sample: true
loaded:
  description: Whether the unit file is read (RV(load_state=loaded)).
  returned: success
  type: bool
  sample: true
active:
  description: Whether the unit is up or coming up (RV(active_state) is V(active), V(activating) or V(reloading)).
  returned: success
  type: bool
  sample: true
running:
  description: Whether a stop has something to end (RV(active) or RV(active_state=deactivating)).
  returned: success
  type: bool
  sample: true
properties:
  description:
    - The properties as read (C(LoadState), C(ActiveState), C(SubState), C(Result), C(NRestarts), C(MainPID),
      C(InvocationID), C(ExecMainStartTimestampMonotonic), C(FragmentPath)); the numbers as integers, an empty
      number as V(null).
  returned: success
  type: dict
  sample: {LoadState: loaded, ActiveState: active, SubState: running, Result: success, NRestarts: 0, MainPID: 41235,
           InvocationID: 3c9d0e51a2b84c7a9d1f0e6b5a4c3d21, ExecMainStartTimestampMonotonic: 81234567890,
           FragmentPath: /etc/systemd/system/vllm-kimi-k25.service}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown
from ansible_collections.gpufleet.vllm.plugins.module_utils.systemd import (
    SystemdError,
    read_state,
    reader,
    unit_name,
)

MAX_TIMEOUT = 3600


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            systemctl=dict(type="path"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        unit = unit_name(params["unit"])
    except ValueError as exc:
        module.fail_json(msg="unit %s %s: give the unit's name, for example vllm-kimi-k25.service." % (
            shown(params["unit"]), exc), changed=False)
    if not 1 <= params["timeout"] <= MAX_TIMEOUT:
        module.fail_json(msg="timeout must be from 1 to %d seconds (got %d)." % (MAX_TIMEOUT, params["timeout"]),
                         changed=False, unit=unit)
    systemctl = params["systemctl"] or module.get_bin_path("systemctl")
    if not systemctl:
        module.fail_json(msg="systemctl is not on this host's PATH, so the state of %s cannot be read: this host "
                             "does not look like a systemd host (or give the option systemctl)." % unit,
                         changed=False, unit=unit)
    try:
        state = read_state(reader(params["timeout"]), systemctl, unit)
    except SystemdError as exc:
        module.fail_json(msg="Cannot read the state of %s: %s. Nothing was changed." % (unit, exc),
                         changed=False, unit=unit)
    module.exit_json(changed=False, check_mode=module.check_mode, **state.as_result())


if __name__ == "__main__":
    main()
