# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model config edit of one path (a model directory or one JSON file), run as a module's main() for the tests.

module_utils/sm120/modelconfig.py plans and writes the edits that the sm120_config module makes in every model directory
(and that drift_info plans for the audit). This harness drives that code the way such a module does - one
AnsibleModule, a deadline, every file planned before any is written, check and diff mode - so that its tests read
each result and each failure as an operator would, without a module of its own in the collection.
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.jsonedit import MAX_SIZE, plan_file, write_plan
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.modelconfig import (
    ModelConfigError,
    apply_plans,
    entries,
    plan_entries,
    summary,
)

# the clock of the timeout (a name of its own, so that a test can make time pass)
_clock = time.monotonic


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            files=dict(type='list', elements='dict', options=dict(
                name=dict(type='str', required=True),
                absent=dict(type='list', elements='str', required=True),
                required=dict(type='bool', default=False),
            )),
            absent=dict(type='list', elements='str'),
            symlinks=dict(type='str', choices=['refuse', 'copy', 'follow'], default='refuse'),
            max_size=dict(type='int', default=MAX_SIZE),
            backup=dict(type='bool', default=False),
            timeout=dict(type='int', default=300),
        ),
        mutually_exclusive=[('files', 'absent')],
        supports_check_mode=True,
    )
    params = module.params
    if params['max_size'] < 1:
        module.fail_json(msg='max_size must be a positive number of bytes, got %d.' % params['max_size'])
    if not 1 <= params['timeout'] <= 604800:
        module.fail_json(msg='timeout must be from 1 to 604800 seconds, got %d.' % params['timeout'])
    deadline = Deadline(params['timeout'], clock=_clock)
    try:
        # (plan_file and write_plan by their names here, so that a test can slow them down)
        plans = plan_entries(entries(params['path'], params['files'], params['absent']), deadline,
                             symlinks=params['symlinks'], max_size=params['max_size'], planner=plan_file)
        results, diffs = apply_plans(module, plans, deadline, backup=params['backup'], writer=write_plan)
    except ModelConfigError as exc:
        module.fail_json(msg=exc.msg, **exc.details)
    msg, removed_count, changed = summary(results, module.check_mode)
    result = dict(changed=changed, msg=msg, removed_count=removed_count, files=results, check_mode=module.check_mode)
    if module._diff and diffs:
        result['diff'] = diffs
    module.exit_json(**result)
