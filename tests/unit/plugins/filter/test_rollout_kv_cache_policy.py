# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout summary and the audit line say which SM120 KV-cache policy applied and why (the build, the row)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_line
from ansible_collections.gpufleet.vllm.plugins.filter.rollout import rollout_line
from ansible_collections.gpufleet.vllm.plugins.module_utils.rollout import summary_row as rollout_row
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import policy as sm120
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.rollout import host_line, markdown

BLACKWELL = {"available": True, "sm120": True, "compute_capabilities": ["12.0"]}
TABLE = [
    {"versions": "<0.19.0", "fp8_kv_cache_on_sm120": False, "note": "no FP8 MLA on SM120"},
    {"versions": ">=0.19.0", "fp8_kv_cache_on_sm120": True, "note": "Triton MLA FP8"},
]
PLAN = {"item": "/m", "changed": False, "check_mode": True, "removed_count": 2,
        "files": [{"path": "/m/config.json", "removed_count": 2, "skipped": None,
                   "removed": [{"key": "quantization_config.kv_cache_scheme", "value": 1},
                               {"key": "quantization_config.kv_cache_quant_algo", "value": "FP8"}]}]}


def facts(build):
    decision = sm120.decide("auto", model_dirs=["/m"], gpus=BLACKWELL, build=build, builds=TABLE)
    plans = [PLAN] if decision["action"] == "apply" else []
    applied = [dict(PLAN, item=PLAN, changed=True, check_mode=False)] if plans else []
    return {"rollout_needs": ["build"], "rollout_batch": ["h"], "rollout_cutover": {"stopped": True},
            "sm120_config_result": sm120.summarize(decision, False, False, plans, applied)}


@pytest.mark.parametrize("build, removed, summary, reason", [
    ("0.33.0", 0, 'keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[1] ">=0.19.0"',
     "vLLM 0.33.0 runs an FP8 KV cache on SM120"),
    ("0.17.1", 2, 'keys removed: SM120, vLLM 0.17.1, fleet_sm120_fp8_kv_cache_builds[0] "<0.19.0"',
     "vLLM 0.17.1 runs no FP8 KV cache on SM120"),
])
def test_the_row_carries_the_decision(build, removed, summary, reason):
    row = rollout_row("gpu-a01", facts(build))
    assert row["config_keys_removed"] == removed
    assert row["config_policy"] == summary
    assert reason in row["config_reason"]
    assert host_line(row) == rollout_line(row)
    assert "%d config keys removed (%s)" % (removed, summary) in host_line(row)


def test_an_untouched_host_says_nothing_of_the_policy():
    row = rollout_row("gpu-a02", dict(facts("0.33.0"), rollout_batch=[]))
    assert row["config_policy"] == "" and row["config_reason"] == ""
    assert "config keys" not in host_line(row)


def test_the_summary_gives_each_reason_once_with_its_hosts():
    rows = [rollout_row("gpu-a01", facts("0.33.0")), rollout_row("gpu-a02", facts("0.17.1")),
            rollout_row("gpu-a03", facts("0.33.0")), rollout_row("gpu-a04", dict(facts("0.17.1"), rollout_batch=[]))]
    text = markdown(rows, [["gpu-a01"], ["gpu-a02", "gpu-a03"]])
    kept = [line for line in text.splitlines() if line.startswith("SM120 KV-cache keys, ")]
    assert len(kept) == 2, text
    assert kept[0].startswith("SM120 KV-cache keys, gpu-a01, gpu-a03: vLLM 0.33.0 runs an FP8 KV cache on SM120 ")
    assert kept[1].startswith("SM120 KV-cache keys, gpu-a02: The GPUs report compute capability 12.0 (SM120)")
    assert "gpu-a04" not in "".join(kept)


def test_a_hostile_reason_stays_one_plain_line():
    row = dict(rollout_row("gpu-a01", facts("0.33.0")), config_reason="a\n**b** [x](javascript:y) | c")
    lines = [line for line in markdown([row], [["gpu-a01"]]).splitlines() if line.startswith("SM120 KV-cache keys")]
    assert len(lines) == 1 and "\\n" in lines[0] and "](" not in lines[0].replace("\\](", "")


def test_the_audit_line_says_why_the_keys_are_drift_or_allowed():
    row = {"host": "gpu-a01", "drift": [], "build": "0.33.0", "integrity": "pristine", "config_keys_present": 2,
           "config_policy": "keep", "config_reason": 'keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[1] ">=0.19.0"'}
    assert ('2 SM120 KV-cache keys present (keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[1] ">=0.19.0")'
            in audit_line(row))
    assert "SM120" not in audit_line(dict(row, config_keys_present=0))
