# SPDX-License-Identifier: GPL-3.0-or-later
"""State left by the service role on the simulated hosts (after converge,
the idempotence run and side_effect), and what side_effect saw on the way
(/var/lib/gpufleet-molecule/*.json, written by the plays).

Runs through testinfra's podman backend (podman exec per command)."""

import json

import probes
import pytest
from probes import http

UNIT = "vllm-kimi-k25.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT
EVIDENCE = "/var/lib/gpufleet-molecule/"
TOOLS_PYTHON = "/opt/gpufleet/tools/bin/python"
LOAD_SECONDS = 3  # VLLM_STANDIN_LOAD_SECONDS of the scenario
# what the stand-in claims per GPU, like vLLM: 0.9 (--gpu-memory-utilization's default) x 97,887 MiB
LOADED_MIB = 88098

EXPECTED_ARGV = [
    "/opt/vllm-standin/bin/vllm", "serve", "/shared/kimi-k2.5-nvfp4",
    "--served-model-name", "kimi-k2.5",
    "--host", "0.0.0.0",
    "--port", "8000",
    "--tensor-parallel-size", "8",
    "--enable-expert-parallel",
    "--trust-remote-code",
    "--override-generation-config", '{"temperature": 0.6, "note": "100% $HOME"}',
]


def nvml(host):
    return probes.nvml(host, TOOLS_PYTHON)["gpus"]


def evidence(host, name):
    return json.loads(host.file(EVIDENCE + name).content_string)


def main_pid(host):
    return int(host.check_output("systemctl show --property=MainPID --value %s", UNIT))


def proc_list(host, pid, what):
    raw = host.check_output("tr '\\0' '\\n' < /proc/%s/%s", str(pid), what)
    return raw.split("\n")


def name(host):
    return host.backend.get_hostname()


# ------------------------------------------------------------ the unit


def test_unit_file_is_the_roles_not_the_hand_written_one(host):
    unit = host.file(UNIT_PATH)
    assert unit.exists and unit.user == "root" and unit.mode == 0o644
    text = unit.content_string
    assert "rendered by the gpufleet.vllm.service role" in text
    assert "hand-written" not in text
    for line in ("Type=exec", "User=root", "Restart=on-failure", "RestartSec=30", "TimeoutStartSec=1800",
                 "TimeoutStopSec=120", "WantedBy=multi-user.target",
                 'Environment="PYTHONUNBUFFERED=1"', 'Environment="VLLM_STANDIN_VENV=/root/ml-env"',
                 # % doubled for systemd's specifiers, quotes and backslash escaped
                 'Environment="GPUFLEET_QUOTING_PROBE=100%% \\"$HOME\\" a\\\\b"'):
        assert line in text.splitlines(), line
    # ExecStart: one quoted word per line; $ doubled so systemd does not expand it
    assert '"{\\"temperature\\": 0.6, \\"note\\": \\"100%% $$HOME\\"}"' in text


def test_server_runs_with_exactly_the_configured_words(host):
    argv = proc_list(host, main_pid(host), "cmdline")
    # the stand-in is a Python script: the kernel puts its interpreter first
    assert argv[0] == "/usr/bin/python3"
    assert argv[1:] == EXPECTED_ARGV


def test_server_environment_reaches_the_process_unchanged(host):
    env = dict(line.split("=", 1) for line in proc_list(host, main_pid(host), "environ") if "=" in line)
    assert env["GPUFLEET_QUOTING_PROBE"] == '100% "$HOME" a\\b'
    assert env["VLLM_STANDIN_LOAD_SECONDS"] == str(LOAD_SECONDS)
    assert env["VLLM_STANDIN_VENV"] == "/root/ml-env"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_unit_is_active_enabled_and_never_crashed(host):
    service = host.service(UNIT)
    assert service.is_running and service.is_enabled
    assert host.check_output("systemctl show --property=NRestarts --value %s", UNIT) == "0"


def test_server_answers_and_serves_the_model(host):
    assert http(host, "/health")["status"] == 200
    models = json.loads(http(host, "/v1/models")["body"])
    assert [m["id"] for m in models["data"]] == ["kimi-k2.5"]
    assert json.loads(http(host, "/version")["body"])["version"] == "0.33.0"


def test_server_holds_the_memory_of_eight_gpus(host):
    gpus = nvml(host)
    pid = main_pid(host)
    assert len(gpus) == 8
    for gpu in gpus:
        # like vLLM: --gpu-memory-utilization's default 0.9 of each GPU's 97,887 MiB
        assert gpu["used_mib"] == LOADED_MIB
        assert pid in gpu["pids"]


# ------------------------------------------------- what the plays reported


def test_first_converge_took_over_the_running_hand_written_unit(host):
    result = evidence(host, "converge.json")
    assert result["unit"] == UNIT and result["state"] == "started"
    assert result["unit_changed"] is True
    assert result["restarted"] is True and result["started"] is True
    assert result["ready"] is True and result["version"] == "0.33.0"
    assert result["stopped_at"] and result["ready_at"]
    # the gate waited through the load, and the downtime covers stop + load
    assert result["load_seconds"] >= LOAD_SECONDS
    assert result["downtime_seconds"] >= result["load_seconds"]
    assert len(result["vram_used_mib"]) == 8 and min(result["vram_used_mib"]) == LOADED_MIB


def test_idempotence_run_did_not_restart_the_server(host):
    seen = evidence(host, "idempotence.json")
    assert len(seen["converge"]) == 32
    assert seen["after_idempotence"] == seen["converge"]


def test_stop_through_the_role_freed_every_gpu(host):
    seen = evidence(host, "stop.json")
    assert seen["active"] == "inactive"
    assert len(seen["gpus"]) == 8
    for gpu in seen["gpus"]:
        assert gpu["memory_used_mib"] <= 1024
        assert gpu["processes"] == []
    result = seen["service_result"]
    assert result["state"] == "stopped" and result["stopped"] is True and result["was_active"] is True
    assert max(result["vram_used_mib"]) <= 1024 and len(result["vram_used_mib"]) == 8


def test_start_after_the_stop_reports_the_downtime(host):
    result = evidence(host, "start.json")
    assert result["unit_changed"] is False
    assert result["started"] is True and result["restarted"] is True and result["ready"] is True
    assert result["stopped_at"] is not None
    assert result["load_seconds"] >= LOAD_SECONDS
    assert result["downtime_seconds"] >= result["load_seconds"]


def test_never_ready_server_fails_the_gate_with_its_journal(host):
    if name(host) != "service-1":
        pytest.skip("the failure path runs on service-1")
    failure = evidence(host, "failure.json")
    assert failure["task"] == "Wait until the server is ready (health, model listed, one completion)"
    assert failure["failed_stage"] == "health"
    msg = failure["msg"]
    assert "did not get ready within 8 s" in msg
    assert "last error: connection refused" in msg
    assert "service_load_timeout" in msg
    assert "Last %d lines of the journal of %s:" % (len(failure["journal"]), UNIT) in msg
    assert any("the model load will never finish" in line for line in failure["journal"])
    assert msg.endswith(failure["journal"][-1])
    restored = evidence(host, "restore.json")
    assert restored["unit_changed"] is True and restored["restarted"] is True and restored["ready"] is True


def test_state_absent_removed_the_second_unit(host):
    if name(host) != "service-2":
        pytest.skip("the absent path runs on service-2")
    seen = evidence(host, "absent.json")
    assert seen["started"]["unit"] == "vllm-absent-probe.service" and seen["started"]["ready"] is True
    assert seen["absent"]["state"] == "absent" and seen["absent"]["unit_removed"] is True
    assert seen["absent"]["stopped"] is True
    assert not host.file("/etc/systemd/system/vllm-absent-probe.service").exists
    assert host.check_output("systemctl show --property=LoadState --value vllm-absent-probe.service") == "not-found"
    assert http(host, "/health", port=8101)["status"] is None


def test_a_model_switch_left_only_the_new_unit_running_then_the_old_again(host):
    if host.backend.get_hostname() != "service-1":
        pytest.skip("the model switch runs on service-1")
    seen = evidence(host, "switch.json")
    assert seen["switch"]["unit"] == "vllm-switch-probe.service" and seen["switch"]["ready"] is True
    old, new = seen["after_switch"]
    # the old model's unit stopped and disabled, the new one running and enabled
    assert old.split() == ["ActiveState=inactive", "UnitFileState=disabled"], old
    assert new.split() == ["ActiveState=active", "UnitFileState=enabled"], new
    # and back: the probe stopped and disabled before the scenario's unit started again
    assert seen["after_back"].split() == ["ActiveState=inactive", "UnitFileState=disabled"], seen["after_back"]
    assert not host.file("/etc/systemd/system/vllm-switch-probe.service").exists


def test_check_mode_on_a_fresh_unit_changed_nothing(host):
    seen = evidence(host, "check.json")
    assert seen["ansible_check_mode"] is True
    assert seen["host_tools_ready"] is False
    result = seen["service_result"]
    assert result["check_mode"] is True
    assert result["unit"] == "vllm-fresh-check.service"
    assert result["unit_changed"] is True  # would be written
    assert result["started"] is False and result["ready"] is False
    assert not host.file("/etc/systemd/system/vllm-fresh-check.service").exists
    assert http(host, "/health", port=8102)["status"] is None


def test_check_mode_with_a_changed_unit_restarts_nothing(host):
    seen = evidence(host, "check-changed.json")
    result = seen["service_result"]
    assert result["check_mode"] is True
    assert result["unit_changed"] is True and result["restart_pending"] is True
    assert result["restarted"] is False and result["started"] is False
    # the gate probed the running server once
    assert result["ready"] is True and result["version"] == "0.33.0"
    assert seen["before"] == seen["after"] and len(seen["before"]) == 32
    assert "TimeoutStopSec=120" in host.file(UNIT_PATH).content_string.splitlines()


def test_cutover_restarted_onto_the_other_environment_in_one_task(host):
    if name(host) != "service-2":
        pytest.skip("the cutover runs on service-2")
    seen = evidence(host, "cutover.json")
    there, back = seen["cutover"], seen["back"]
    # the unit entry point rendered the new unit without restarting the server
    assert seen["unit_step"] == {"changed": True, "active": True}
    assert seen["pids"][0] == seen["pids"][1] != "0"
    assert there["cutover"] is True and there["restarted"] is True and there["ready"] is True
    # the stand-in reports the vLLM version of the environment the link points at
    assert there["version"] == "9.9.9" and back["version"] == "0.33.0"
    assert there["switched"] is True and there["link_before"] is None
    assert seen["links"] == ["/opt/vllm/envs/vllm-9.9.9-probe", "/root/ml-env"]
    # downtime measured on the host: the stop, then the stand-in's load
    assert there["load_seconds"] >= LOAD_SECONDS
    assert there["downtime_seconds"] >= there["load_seconds"] + there["phases"]["stop"]
    assert min(there["vram_used_mib"]) == LOADED_MIB and len(there["vram_used_mib"]) == 8
    # the restart back, without a link, switched nothing
    assert back["restarted"] is True and back["switched"] is False and back["link_before"] is None


def test_a_failed_model_switch_was_rolled_back_to_the_old_model(host):
    if host.backend.get_hostname() != "service-1":
        pytest.skip("the failed model switch runs on service-1")
    seen = evidence(host, "bad-switch.json")
    switch, back = seen["switch"], seen["rollback"]
    # the new model's server never got ready; the cutover had stopped the old model's unit in its window
    assert switch["failed_step"] == "ready" and switch["unit"] == "vllm-switch-bad.service", switch.get("msg")
    assert switch["others"] == [{"unit": "vllm-kimi-k25.service", "was_active": True, "was_enabled": True,
                                 "stopped": True}]
    # the rollback started the old model's unit again, gated on its own port and name (read from its file)
    assert back["unit"] == "vllm-kimi-k25.service" and back["state"] == "started" and back["ready"] is True
    assert back["readiness"]["url"].endswith(":8000") and back["readiness"]["model"] == "kimi-k2.5"
    assert back["others"] == [{"unit": "vllm-switch-bad.service", "was_active": True, "was_enabled": False,
                               "stopped": True}]
    kimi, bad = [dict(line.split("=", 1) for line in text.split()) for text in seen["after"]]
    assert kimi["ActiveState"] == "active" and kimi["UnitFileState"] == "enabled"
    assert kimi["MainPID"] != seen["pid_before"]
    # the failed unit stopped, never enabled; then removed
    assert bad["ActiveState"] == "inactive" and bad["UnitFileState"] == "disabled"
    assert not host.file("/etc/systemd/system/vllm-switch-bad.service").exists
    assert http(host, "/health")["status"] == 200
