# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's tag selections (`--tags PHASE`, `--skip-tags PHASE`) never separate the stop from the balancer.

Ansible's own selection decides (ansible-playbook --list-tasks on playbooks/rollout.yml): whenever the cutover
(the stop) runs, the take-out before it and the put-back after it run too, and the put-back runs whenever the
take-out does. `--skip-tags balancer` once ran the cutover without the take-out: a host stopped while the load
balancer still sent it requests.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLLOUT = os.path.join(REPO, "playbooks", "rollout.yml")
TAKE_OUT = "Take the host out of rotation and drain it before its stop"
CUTOVER = "Restart onto the staged build in one step"
PUT_BACK = "Put the host back in rotation"


def listed(selection):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "--list-tasks"] + selection + [ROLLOUT],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    names = [line.strip().split("\t")[0] for line in proc.stdout.splitlines()]
    return {TAKE_OUT: TAKE_OUT in names, CUTOVER: any(name.startswith(CUTOVER) for name in names),
            PUT_BACK: PUT_BACK in names}


TAGS = ("balancer", "service", "reinstall", "integrity")
SELECTIONS = [[]] + [[how, tag] for how in ("--tags", "--skip-tags") for tag in TAGS]


@pytest.mark.parametrize("selection", SELECTIONS)
def test_the_stop_never_runs_without_the_take_out_and_the_put_back(selection):
    runs = listed(selection)
    if not selection:
        assert all(runs.values()), runs
    if runs[CUTOVER]:
        assert runs[TAKE_OUT] and runs[PUT_BACK], (selection, runs)
    assert runs[TAKE_OUT] == runs[PUT_BACK], (selection, runs)
