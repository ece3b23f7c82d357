# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The base of the action plugins that write reports on the control node (rollout_summary, report_files, bench_report).

Such an action runs in the controller's own Python, whatever host the task is for: no module is sent anywhere, no
connection is opened and no C(delegate_to) is needed. Its options are checked against the writer's
``ARGUMENT_SPEC`` as a module's would be; it honours check mode and diff mode of the task; a failure is
``{'failed': True, 'msg': ...}`` with the writer's own words and what it had written before.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.json import Direction, get_module_encoder
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.vllm.plugins.module_utils.writers.common import Mode, WriterFailed

# the values as a module would receive them: plain text, numbers, lists and dicts (ansible-core 2.19, which
# meta/runtime.yml requires)
_ENCODER = get_module_encoder('legacy', Direction.CONTROLLER_TO_MODULE)


class WriterAction(ActionBase):
    """Runs WRITER (a module of module_utils/writers) with the task's options, on the control node."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    WRITER = None

    def run(self, tmp=None, task_vars=None):
        result = super(WriterAction, self).run(tmp, task_vars)
        del tmp  # (no temporary directory: nothing goes to a host)
        args = json.loads(json.dumps(dict(self._task.args), cls=_ENCODER))
        validation = ArgumentSpecValidator(self.WRITER.ARGUMENT_SPEC).validate(args)
        if validation.error_messages:
            msg = validation.errors.msg
            if isinstance(validation.errors[0], UnsupportedError):
                msg = 'Unsupported parameters for (%s) module: %s' % (self._task.action, msg)
            result.update(failed=True, msg=msg)
            return result
        mode = Mode(check_mode=self._task.check_mode, diff=self._task.diff)
        try:
            result.update(self.WRITER.run(validation.validated_parameters, mode))
        except WriterFailed as exc:
            result.update(exc.result)
            result.update(failed=True, msg=exc.msg)
        if mode.warnings:
            result['warnings'] = list(result.get('warnings') or []) + mode.warnings
        return result
