# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A fact fixed once for the run (run_once set_fact: the report directory named by the time, the fleet lock)
needs the linear strategy: under `strategy = free` in an operator's ansible.cfg, ansible-core ignores run_once and
every host would set its own value (a report directory per second, the log moved from one to the next). Each play
of the collection's playbooks with such a task says `strategy: linear` itself."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOKS = sorted(glob.glob(os.path.join(REPO, "playbooks", "*.yml")))


def tasks_of(tasks, run_once=False):
    """(task, run_once) of every task, blocks walked, a block's run_once passed down."""
    for task in tasks or []:
        once = run_once or bool(task.get("run_once"))
        yield task, once
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from tasks_of(task[key], once)


def plays_with_run_once_facts():
    for path in PLAYBOOKS:
        with open(path) as handle:
            plays = yaml.safe_load(handle) or []
        for play in plays:
            if "hosts" not in play:
                continue
            tasks = (play.get("pre_tasks") or []) + (play.get("tasks") or []) + (play.get("post_tasks") or [])
            names = [task.get("name") for task, once in tasks_of(tasks) if once and "ansible.builtin.set_fact" in task]
            if names:
                yield os.path.basename(path), play, names


def test_the_playbooks_have_run_once_facts_at_all():
    assert len(list(plays_with_run_once_facts())) >= 2


@pytest.mark.parametrize("playbook, play, names", list(plays_with_run_once_facts()),
                         ids=lambda value: value if isinstance(value, str) else None)
def test_a_play_that_fixes_a_fact_once_runs_linear(playbook, play, names):
    assert play.get("strategy") == "linear", (
        "%s: play %r sets %s with run_once but does not say strategy: linear" % (playbook, play["name"], names))
