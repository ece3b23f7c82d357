# SPDX-License-Identifier: GPL-3.0-or-later
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.rollout import rollout_line


def test_full_row():
    row = {"host": "gpu-a01", "status": "updated", "build_before": "0.33.0", "build_after": "0.34.0",
           "pristine_before": False,
           "downtime_s": 541.23, "artifacts_removed": 35, "artifacts_bytes": "65.3 MB",
           "config_keys_removed": 2, "pristine": True, "single_stream_tok_s": 81.96, "peak_tok_s": 2275.6}
    assert rollout_line(row) == (
        "gpu-a01: updated, vllm 0.33.0 -> 0.34.0, was NOT pristine, downtime 541.2 s, 35 dumps removed (65.3 MB), "
        "2 config keys removed, pristine, 82.0 tok/s single stream, 2276 tok/s peak")


def test_failed_row_names_the_failure_and_leaves_out_missing_figures():
    row = {"host": "gpu-a02", "status": "FAILED, rolled back", "build_before": "0.33.0",
           "build_after": "0.33.0", "pristine": None, "downtime_s": None,
           "failure": "Readiness gate: /health never answered 200 within 900 s"}
    assert rollout_line(row) == (
        "gpu-a02: FAILED, rolled back, vllm 0.33.0 -- Readiness gate: /health never answered 200 within 900 s")


def test_benchmark_status_is_named_unless_ok():
    row = {"host": "gpu-a04", "status": "updated", "single_stream_tok_s": 61.0, "peak_tok_s": 1900.0}
    assert rollout_line(dict(row, benchmark="ok")) == "gpu-a04: updated, 61.0 tok/s single stream, 1900 tok/s peak"
    assert rollout_line(dict(row, benchmark="regressed")) == (
        "gpu-a04: updated, 61.0 tok/s single stream, 1900 tok/s peak, benchmark regressed")
    assert rollout_line(dict(row, benchmark=None)) == rollout_line(row)


def test_untouched_row():
    assert rollout_line({"host": "gpu-a03", "status": "untouched"}) == "gpu-a03: untouched"


def test_untouched_row_says_what_the_plan_found():
    row = {"host": "gpu-a03", "status": "untouched", "needed": ["build 0.34.0 (build)", "dumps (35)"]}
    assert rollout_line(row) == "gpu-a03: untouched (needs: build 0.34.0 (build), dumps (35))"
    # what an updated host needed is not repeated: its row says what was done
    assert "needs" not in rollout_line(dict(row, status="updated"))


def test_not_a_dict():
    with pytest.raises(AnsibleFilterError, match="summary row"):
        rollout_line("gpu-a01")


def test_audit_line_names_every_drift_class():
    from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_line
    row = {"host": "gpu-a01", "drift": ["integrity", "config", "dumps"], "build": "0.33.0",
           "integrity": "2 files modified", "config_keys_present": 2, "dumps": 35, "dumps_bytes": "65.3 MB",
           "unit": "vllm-kimi-k25.service", "unit_state": "active"}
    assert audit_line(row) == (
        "gpu-a01: DRIFT: integrity, config, dumps, vllm 0.33.0, 2 files modified, "
        "2 SM120 KV-cache keys present, 35 debug dumps (65.3 MB), vllm-kimi-k25.service active")
    clean = dict(row, drift=[], integrity="pristine", config_keys_present=0, dumps=0)
    assert audit_line(clean) == "gpu-a01: no drift, vllm 0.33.0, pristine, vllm-kimi-k25.service active"


def test_audit_line_says_every_config_and_gpu_problem_whole():
    from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_line
    row = {"host": "gpu-a02", "drift": ["config", "gpus"], "build": "0.33.0", "integrity": "pristine",
           "unit": "vllm-kimi-k25.service", "unit_state": "active",
           "config_errors": ["/models/k/config.json: invalid JSON at line 3, column 1", "second"],
           "gpu_problems": ["GPU 5: compute capability 9.0, expected 12.0 " + "x" * 200]}
    line = audit_line(row)
    assert line == ("gpu-a02: DRIFT: config, gpus, vllm 0.33.0, pristine, vllm-kimi-k25.service active, "
                    "/models/k/config.json: invalid JSON at line 3, column 1, second, "
                    "GPU 5: compute capability 9.0, expected 12.0 " + "x" * 200)


def test_audit_line_of_a_host_that_was_not_audited():
    from ansible_collections.gpufleet.vllm.plugins.filter.audit import audit_line
    assert audit_line({"host": "gpu-a03", "reason": "Failed to connect to the host via ssh"}) == (
        "gpu-a03: not audited: Failed to connect to the host via ssh")
