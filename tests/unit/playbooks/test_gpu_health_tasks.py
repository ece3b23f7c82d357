# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU health tasks of the rollout and the audit pass what the fleet decided.

The check just before the stop passes the plan's GPU count (a GPU lost since
fails the host there, still serving) and the fields the fleet requires; the
audit's and the plan's drift_info gets the required fields too.  The count's
expression is rendered with Ansible's own templar.
"""

import os

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def tasks(path):
    with open(os.path.join(REPO, path)) as handle:
        return yaml.safe_load(handle)


def the_task(path, module):
    found = [t for t in tasks(path) if module in t]
    assert len(found) == 1, found
    return found[0]


def test_the_check_before_the_stop_passes_the_plans_gpu_count_and_the_required_fields():
    task = the_task("playbooks/tasks/rollout_host.yml", "gpufleet.vllm.gpu_health_info")
    args = task["gpufleet.vllm.gpu_health_info"]
    assert args["required"] == "{{ fleet_gpu_health_required }}"
    assert args["thresholds"] == "{{ fleet_gpu_health_thresholds }}"
    assert "rollout_plan_gpu_count" in args["expected_gpu_count"]


@pytest.mark.parametrize("plan, expected", [
    ({"gpus": {"gpu_count": 8, "nvml_available": True}}, 8),
    ({"gpus": {"gpu_count": 0, "nvml_available": False}}, "omitted"),
    ({"gpus": None}, "omitted"),
    (None, "omitted"),  # no plan read (a run that skipped it): nothing to compare with
])
def test_the_plans_gpu_count_rendered(plan, expected):
    task = the_task("playbooks/tasks/rollout_host.yml", "gpufleet.vllm.gpu_health_info")
    variables = {"omit": "omitted", "rollout_plan_gpu_count": trust_as_template(task["vars"]["rollout_plan_gpu_count"])}
    if plan is not None:
        variables["rollout_plan"] = plan
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(trust_as_template(task["gpufleet.vllm.gpu_health_info"]["expected_gpu_count"])) == expected


def test_the_drift_read_passes_the_required_fields():
    args = the_task("playbooks/tasks/drift.yml", "gpufleet.vllm.drift_info")["gpufleet.vllm.drift_info"]
    assert args["health_required"] == "{{ fleet_gpu_health_required }}"
    with open(os.path.join(REPO, "roles", "fleet", "defaults", "main.yml")) as handle:
        assert yaml.safe_load(handle)["fleet_gpu_health_required"] == []
