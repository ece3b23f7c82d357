# SPDX-License-Identifier: GPL-3.0-or-later
"""The control-node writers (rollout_summary, report_files, bench_report) run as Ansible runs their action plugins.

``action_runner(name)`` returns ``run(args, check=False, diff=False) -> (rc, result)``: the plugin's ActionModule
built with a real task, play context and local connection, as the task executor builds it, and its result
through JSON as a callback gets it; rc is 1 for a failed result, else 0 (a module's exit code).
"""

import importlib
import json
import os

from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.plugins.loader import connection_loader


def action_runner(name):
    plugin = importlib.import_module("ansible_collections.gpufleet.vllm.plugins.action." + name)

    def _run(args, check=False, diff=False):
        task = Task()
        task.action = "gpufleet.vllm." + name
        task.args = dict(args)
        task.check_mode = check
        task.diff = diff
        play_context = PlayContext()
        connection = connection_loader.get("local", play_context, os.devnull)
        action = plugin.ActionModule(task, connection, play_context, loader=None, templar=None, shared_loader_obj=None)
        result = json.loads(json.dumps(action.run(task_vars={})))
        return (1 if result.get("failed") else 0), result
    return _run
