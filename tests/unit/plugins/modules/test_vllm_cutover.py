# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.vllm_cutover: a real stand-in server restarted through a small systemd.

The module runs as Ansible runs it on a host (its file executed by Python
with the arguments as JSON), with the fake NVML library under the real
pynvml, and ``systemctl``/``journalctl`` from tests/unit/fakesystemd.py,
which run the vLLM stand-in (tests/sim/standin) as the unit's process: the
stand-in claims VRAM in the fake NVML state while it runs and frees it when
stopped, and reports the vLLM version of the environment its link points at.
"""

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

import fakesystemd
from helpers import load_source

from ansible_collections.gpufleet.vllm.plugins.module_utils import cutover

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "vllm_cutover.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
STANDIN = os.path.join(REPO, "tests", "sim", "standin", "vllm_standin.py")
UNIT = "vllm-sim.service"

nvml_state = load_source("fakenvml_state_for_cutover", "tests", "sim", "fakenvml", "state.py")


def free_port():
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_env(path, version):
    """A directory that looks like a vLLM venv of VERSION (what the stand-in reads)."""
    os.makedirs(os.path.join(path, "bin"))
    os.symlink(sys.executable, os.path.join(path, "bin", "python"))
    dist = os.path.join(path, "lib", "python3", "site-packages", "vllm-%s.dist-info" % version)
    os.makedirs(dist)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: vllm\nVersion: %s\n" % version)
    return path


class Host:
    """One simulated host: envs A and B, the link, the fake NVML state, the unit."""

    def __init__(self, tmp_path, lib_dir, load_seconds="0.3", extra_env=None):
        self.tmp = tmp_path
        self.state_dir = str(tmp_path / "systemd")
        self.env = fakesystemd.install(str(tmp_path / "bin"), self.state_dir)
        self.nvml = str(tmp_path / "nvml" / "state")
        self.env.update(LD_LIBRARY_PATH=lib_dir, FAKE_NVML_STATE=self.nvml, PYTHONPATH=COLLECTIONS)
        self.env_a = make_env(str(tmp_path / "envs" / "vllm-0.32.0"), "0.32.0")
        self.env_b = make_env(str(tmp_path / "envs" / "vllm-0.33.0"), "0.33.0")
        self.link = str(tmp_path / "current")
        self.previous = str(tmp_path / "previous")
        os.symlink(self.env_a, self.link)
        self.model = tmp_path / "model"
        self.model.mkdir()
        self.port = free_port()
        server_env = {
            "FAKE_NVML_STATE": self.nvml, "VLLM_STANDIN_LOAD_SECONDS": load_seconds,
            "VLLM_STANDIN_RELEASE_SECONDS": "0", "VLLM_STANDIN_TTFT_SECONDS": "0.01",
            "VLLM_STANDIN_VRAM_MIB": "95000", "VLLM_STANDIN_VENV": self.link,
        }
        server_env.update(extra_env or {})
        fakesystemd.write_unit(self.state_dir, UNIT, [
            sys.executable, STANDIN, "serve", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
            "--served-model-name", "kimi-k2.5", "--tensor-parallel-size", "8"], server_env)

    def systemctl(self, *words):
        return subprocess.run(["systemctl"] + list(words), env=dict(os.environ, **self.env), capture_output=True,
                              text=True, check=False)

    def show(self):
        out = self.systemctl("show", "--", UNIT).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def start_serving(self):
        """Start the unit and wait until the stand-in answers (the host before the cutover)."""
        assert self.systemctl("start", "--", UNIT).returncode == 0
        import urllib.request
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=1) as answer:
                    if answer.status == 200:
                        return int(self.show()["MainPID"])
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the stand-in did not come up: %s" % self.journal())

    def journal(self):
        return fakesystemd._read(os.path.join(self.state_dir, UNIT + ".log"), "")

    def calls(self):
        text = fakesystemd._read(os.path.join(self.state_dir, "calls"), "")
        return [line for line in text.splitlines() if not line.startswith("show")]

    def args(self, **extra):
        args = {"unit": UNIT, "link": self.link, "link_target": self.env_b, "previous_link": self.previous,
                "port": self.port, "served_model_name": "kimi-k2.5", "timeout": 30, "interval": 0.1,
                "vram": {"count": 8, "loaded_min_used_mib": 90000, "free_timeout": 10, "interval": 0.1}}
        args.update(extra)
        return args

    def run(self, args, check=False, diff=False):
        args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
        path = self.tmp / ("args-%d.json" % time.monotonic_ns())
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        proc = subprocess.run([sys.executable, MODULE, str(path)], env=dict(os.environ, **self.env),
                              capture_output=True, text=True, timeout=120, check=False)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    def close(self):
        self.systemctl("stop", "--", UNIT)


@pytest.fixture
def host(tmp_path, lib_dir):
    made = []

    def make(**kwargs):
        made.append(Host(tmp_path, lib_dir, **kwargs))
        return made[-1]

    yield make
    for item in made:
        item.close()


@contextlib.contextmanager
def holding_gpu(h, index, mib=40000):
    """Another process holds MIB on GPU INDEX of H's fake NVML state while the block runs (killed after it)."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        nvml_state.claim(holder.pid, mib, [index], h.nvml)
        yield holder
    finally:
        holder.kill()
        holder.wait()


def vram_used(state_file):
    """MiB per GPU that live processes hold in the fake NVML state."""
    data = nvml_state.read_state(state_file)
    used = []
    for index in range(8):
        procs = data.get("gpu.%d.procs" % index, "")
        used.append(sum(int(entry.split(":")[1]) for entry in procs.split(",") if entry
                        and fakesystemd._alive(int(entry.split(":")[0]))))
    return used


# ------------------------------------------------------------------ cutover


def test_cutover_restarts_onto_the_new_environment(host):
    h = host(load_seconds="0.8")
    old_pid = h.start_serving()
    assert vram_used(h.nvml) == [95000] * 8

    rc, res = h.run(h.args(), diff=True)
    assert rc == 0, res["msg"]
    # the service role registers this result as service_result (the rollout reads cutover, state, restarted)
    assert res["cutover"] is True and res["state"] == "started" and res["restarted"] is True and res["ready_at"]
    assert res["changed"] is True and res["failed_step"] is None
    assert res["was_active"] and res["stopped"] and res["switched"] and res["started"] and res["ready"]
    # the link moved, the previous link keeps the old environment for a rollback
    assert os.readlink(h.link) == h.env_b and os.readlink(h.previous) == h.env_a
    assert res["link_before"] == h.env_a and res["link_after"] == h.env_b
    # a new process serves the new build and holds the GPUs again
    new_pid = int(h.show()["MainPID"])
    assert new_pid not in (0, old_pid)
    assert res["version"] == "0.33.0"
    assert res["vram_freed_mib"] == [0] * 8
    assert res["vram_used_mib"] == [95000] * 8 and vram_used(h.nvml) == [95000] * 8
    # the downtime is the stop plus the load, measured on the host
    assert res["load_seconds"] >= 0.8
    assert res["downtime_seconds"] >= res["load_seconds"] + res["phases"]["stop"]
    assert res["downtime_seconds"] < res["load_seconds"] + 5
    assert set(res["phases"]) >= {"stop", "vram_freed", "switch", "start", "ready", "vram_loaded", "total"}
    assert [c.split()[0] for c in h.calls()] == ["start", "stop", "start"]
    assert res["readiness"]["stages"]["completion"]["passed"] is True
    assert res["diff"]["before"] == "%s -> %s\n" % (h.link, h.env_a)
    assert res["diff"]["after"] == "%s -> %s\n" % (h.link, h.env_b)
    assert "down" in res["msg"] and "0.33.0" in res["msg"]


def test_check_mode_stops_nothing(host):
    h = host()
    pid = h.start_serving()
    rc, res = h.run(h.args(), check=True, diff=True)
    assert rc == 0, res["msg"]
    assert res["changed"] is True and not res["stopped"] and not res["switched"]
    assert "Check mode: would stop %s" % UNIT in res["msg"]
    assert "point %s at %s" % (h.link, h.env_b) in res["msg"]
    assert int(h.show()["MainPID"]) == pid and os.readlink(h.link) == h.env_a
    assert not os.path.lexists(h.previous)
    assert [c.split()[0] for c in h.calls()] == ["start"]
    assert res["diff"]["after"] == "%s -> %s\n" % (h.link, h.env_b)


def test_check_mode_on_a_host_without_the_unit_or_the_staged_env(host, tmp_path):
    h = host()
    os.unlink(os.path.join(h.state_dir, UNIT + ".json"))
    rc, res = h.run(h.args(link_target=str(tmp_path / "envs" / "not-staged")), check=True)
    assert rc == 0, res["msg"]
    assert res["changed"] is True
    warnings = json.dumps(res.get("warnings"))  # ansible-core 2.19 returns them as structured events
    assert "The unit %s does not exist yet" % UNIT in warnings
    assert "nothing was staged" in warnings


def test_a_build_that_never_gets_ready_fails_with_what_was_done(host):
    h = host(extra_env={"VLLM_STANDIN_NEVER_READY_VENV": "*vllm-0.33.0*"})
    h.start_serving()
    rc, res = h.run(h.args(timeout=2))
    assert rc == 1
    assert res["failed_step"] == "ready"
    assert res["stopped"] and res["switched"] and res["started"] and not res["ready"]
    # the service role registers this as service_result: a rollback reads how far the cutover got
    assert res["cutover"] is True and res["state"] == "failed" and res["unit"] == UNIT
    assert res["link_before"] == h.env_a and os.readlink(h.previous) == h.env_a
    assert res["downtime_seconds"] is None
    assert "did not get ready after the cutover (timeout 2 s)" in res["msg"]
    assert "GET /health" in res["msg"]
    # the advice once, not twice (the readiness result's msg is not built on itself)
    assert res["msg"].count("The server never answered /health") == 1, res["msg"]
    assert res["readiness"]["msg"].count("The server never answered /health") == 1
    assert "Now: %s is stopped; %s points at %s." % (UNIT, h.link, h.env_b) in res["msg"]
    assert res["journal"] and "Last" in res["msg"]


def test_a_server_that_dies_while_loading_ends_the_wait_at_once(host):
    h = host(load_seconds="0.2")
    h.start_serving()
    # the new start fails at once: its model directory is gone
    os.rmdir(str(h.model))
    started = time.monotonic()
    rc, res = h.run(h.args(timeout=60))
    assert rc == 1
    assert res["failed_step"] == "ready"
    assert time.monotonic() - started < 30
    assert res["readiness"]["stopped_reason"].startswith("the unit %s failed" % UNIT)


def test_gpus_still_held_after_the_stop_fail_before_the_switch(host):
    h = host()
    h.start_serving()
    with holding_gpu(h, 3) as holder:
        rc, res = h.run(h.args(vram={"count": 8, "free_timeout": 1, "interval": 0.1}))
    assert rc == 1
    assert res["failed_step"] == "vram_freed"
    assert res["stopped"] and not res["switched"] and not res["started"]
    assert os.readlink(h.link) == h.env_a and not os.path.lexists(h.previous)
    assert "did not get free after the stop" in res["msg"]
    assert "GPU 3" in res["msg"] and "%d" % holder.pid in res["msg"]
    assert "points at %s" % h.env_a in res["msg"]


def test_vram_the_driver_keeps_after_the_stop_fails_before_the_switch_and_the_way_back_waits(host, tmp_path):
    faults = tmp_path / "faults"
    h = host(extra_env={"VLLM_STANDIN_FAULTS_FILE": str(faults)})
    h.start_serving()
    # (the stand-in's fault, read at its stop: the driver keeps its VRAM 5 s after it exits)
    faults.write_text("vram_held_venv=%s*\nvram_held_seconds=5\n" % h.env_a)
    vram = {"count": 8, "loaded_min_used_mib": 90000, "free_timeout": 1, "interval": 0.1}
    rc, res = h.run(h.args(vram=vram))
    assert rc == 1
    assert res["failed_step"] == "vram_freed"
    assert res["stopped"] and not res["switched"] and not res["started"]
    assert os.readlink(h.link) == h.env_a and not os.path.lexists(h.previous)
    assert "did not get free after the stop" in res["msg"]
    assert "GPUs 0-7: memory used expected at most 1024 MiB, found 95000 MiB with no compute process listed" in res["msg"]
    # the rollback's cutover (no link to move) waits until the driver has given it back, then starts the old build
    rc, res = h.run(h.args(link=None, link_target=None, previous_link=None, vram=dict(vram, free_timeout=20)))
    assert rc == 0, res["msg"]
    assert res["phases"]["vram_freed"] >= 1 and res["version"] == "0.32.0"


def test_a_previous_link_blocked_during_the_stop_fails_the_switch_and_says_which(host, tmp_path):
    faults = tmp_path / "faults"
    h = host(extra_env={"VLLM_STANDIN_FAULTS_FILE": str(faults)})
    os.symlink(h.env_b, h.previous)
    h.start_serving()
    # (the stand-in's fault, read at its stop: a real directory takes the place of the previous link)
    faults.write_text("block_link_venv=%s*\nblock_link=%s\n" % (h.env_a, h.previous))
    rc, res = h.run(h.args())
    assert rc == 1
    assert res["failed_step"] == "switch"
    assert res["stopped"] and not res["switched"] and not res["started"]
    assert os.readlink(h.link) == h.env_a and os.path.isdir(h.previous) and not os.path.islink(h.previous)
    assert ("Cannot point the previous link %s at %s: %s is a real directory, not a symbolic link."
            % (h.previous, h.env_a, h.previous)) in res["msg"]
    assert "Now: %s is stopped; %s points at %s." % (UNIT, h.link, h.env_a) in res["msg"]
    # the rollback's cutover (the link never moved) starts the old build again
    rc, res = h.run(h.args(link=None, link_target=None, previous_link=None))
    assert rc == 0, res["msg"]
    assert res["version"] == "0.32.0"


def test_a_failed_start_fails_with_the_journal(host):
    h = host()
    h.start_serving()
    with open(os.path.join(h.state_dir, UNIT + ".fail-start"), "w") as f:
        f.write("Job for vllm-sim.service failed because the control process exited with error code.")
    rc, res = h.run(h.args())
    assert rc == 1
    assert res["failed_step"] == "start"
    assert res["stopped"] and res["switched"] and not res["started"]
    assert "systemctl start %s failed (exit 1)" % UNIT in res["msg"] and "control process" in res["msg"]
    assert "journal" in res


def test_an_inactive_unit_is_started(host):
    h = host()
    rc, res = h.run(h.args(link=None, link_target=None, previous_link=None))
    assert rc == 0, res["msg"]
    assert res["was_active"] is False and res["started"] and res["ready"]
    assert res["switched"] is False and res["link_before"] is None
    assert res["version"] == "0.32.0"  # the unit's link was not touched


def test_first_switch_remembers_the_adopted_environment(host, tmp_path):
    h = host()
    os.unlink(h.link)  # the server ran from env A directly, before this collection managed it
    rc, res = h.run(h.args(previous_link_target=h.env_a))
    assert rc == 0, res["msg"]
    assert res["link_before"] is None and res["switched"] is True
    assert os.readlink(h.link) == h.env_b and os.readlink(h.previous) == h.env_a


def test_no_vram_checks_without_vram(host):
    h = host()
    h.start_serving()
    h.env["FAKE_NVML_STATE"] = "/nonexistent/state"  # NVML would fail: it is not used
    rc, res = h.run(h.args(vram=None, completion=False))
    assert rc == 0, res["msg"]
    assert "vram_freed" not in res["phases"] and res["vram_used_mib"] == []


# --------------------------------------------------- refused before the stop


def refused_before_stop(h, res, rc, words):
    assert rc == 1
    assert res["changed"] is False and not res["stopped"]
    assert words in res["msg"], res["msg"]
    assert [c.split()[0] for c in h.calls()] == ["start"]
    assert os.readlink(h.link) == h.env_a


def test_missing_staged_environment_is_refused_before_the_stop(host, tmp_path):
    h = host()
    h.start_serving()
    rc, res = h.run(h.args(link_target=str(tmp_path / "envs" / "vllm-0.34.0")))
    refused_before_stop(h, res, rc, "is not a directory on this host (was the environment staged?)")
    assert res["msg"].startswith("Nothing was stopped")


def test_link_that_is_a_real_directory_is_refused(host, tmp_path):
    h = host()
    h.start_serving()
    os.makedirs(str(tmp_path / "realdir"))
    rc, res = h.run(h.args(previous_link=str(tmp_path / "realdir")))
    refused_before_stop(h, res, rc, "is a real directory, not a symbolic link")


def test_unknown_unit_is_refused(host):
    h = host()
    h.start_serving()
    rc, res = h.run(h.args(unit="vllm-typo"))
    refused_before_stop(h, res, rc, "The unit vllm-typo.service is not-found")


def test_nvml_down_is_refused_before_the_stop(host):
    h = host()
    h.start_serving()
    nvml_state.update_state(lambda d: d.update({"init_error": "DRIVER_NOT_LOADED"}), h.nvml)
    rc, res = h.run(h.args())
    refused_before_stop(h, res, rc, "NVML cannot be read")
    assert "kernel driver is not loaded" in res["msg"]


def test_wrong_gpu_count_is_refused_before_the_stop(host):
    h = host()
    h.start_serving()
    rc, res = h.run(h.args(vram={"count": 4}))
    refused_before_stop(h, res, rc, "The host has 8 GPUs where 4 are expected")


@pytest.mark.parametrize("extra, words", [
    ({"timeout": -1}, "timeout=-1 is negative"),
    ({"interval": 0}, "interval=0.0 must be more than 0 seconds"),
    ({"link": "relative/current"}, "link=relative/current is not an absolute path"),
    ({"link_target": None}, "needs link_target"),
    ({"vram": {"free_timeout": -5}}, "vram.free_timeout=-5 is negative"),
    ({"base_url": "ftp://x"}, "is not an http:// or https:// URL"),
])
def test_bad_options_are_refused(host, extra, words):
    h = host()
    args = h.args(**extra)
    if "base_url" in extra:
        args.pop("port")
    rc, res = h.run(args)
    assert rc == 1
    assert words in res["msg"], res["msg"]
    assert res["changed"] is False
    assert h.calls() == []


def test_previous_link_target_needs_previous_link(host):
    h = host()
    rc, res = h.run(h.args(previous_link=None, previous_link_target=h.env_a))
    assert rc == 1 and "previous_link" in res["msg"]


# ------------------------------------------------------------ link helpers


def test_point_link_is_atomic_and_idempotent(tmp_path):
    link = str(tmp_path / "current")
    assert cutover.point_link(link, "/a") is True
    assert cutover.point_link(link, "/a") is False
    assert cutover.point_link(link, "/b") is True
    assert os.readlink(link) == "/b"
    assert sorted(os.listdir(str(tmp_path))) == ["current"]  # no temporary link left


def test_point_link_never_replaces_a_directory(tmp_path):
    path = tmp_path / "current"
    path.mkdir()
    (path / "keep").write_text("x")
    with pytest.raises(ValueError):
        cutover.point_link(str(path), "/a")
    assert (path / "keep").read_text() == "x"


def test_check_link_args_without_disk_checks_in_check_mode(tmp_path):
    assert cutover.check_link_args("/opt/vllm/current", "/opt/vllm/envs/x", None, must_exist=False) == []
    problems = cutover.check_link_args("/opt/vllm/current", "/opt/vllm/envs/x", None)
    assert problems and "is not a directory" in problems[0]
    assert cutover.check_link_args(None, None, None) == []
    assert "same path" in cutover.check_link_args("/l", "/t", "/l", must_exist=False)[0]


# ------------------------------------------- the loaded gate from the fraction


def test_the_loaded_gate_from_the_utilization_passes_what_vllm_reserves(host):
    # the stand-in like vLLM: 0.9 x 97,887 MiB = 88,098 MiB on each GPU; the gate 83,693 MiB (5 % less)
    h = host(extra_env={"VLLM_STANDIN_VRAM_MIB": ""})
    h.start_serving()
    vram = {"count": 8, "loaded_min_used_fraction": 0.9, "loaded_tolerance": 0.05,
            "loaded_gpus": list(range(8)), "free_timeout": 10, "interval": 0.1}
    rc, res = h.run(h.args(vram=vram))
    assert rc == 0, res["msg"]
    assert res["vram_used_mib"] == [88098] * 8 and "vram_loaded" in res["phases"]


def test_the_loaded_gate_from_the_utilization_fails_with_its_arithmetic(host):
    h = host(extra_env={"VLLM_STANDIN_VRAM_MIB": "12000"})
    h.start_serving()
    vram = {"count": 8, "loaded_min_used_fraction": 0.9, "loaded_timeout": 1, "free_timeout": 10, "interval": 0.1}
    rc, res = h.run(h.args(vram=vram))
    assert rc == 1
    assert res["failed_step"] == "vram_loaded" and res["started"] and res["ready"]
    assert "did not get loaded after the start" in res["msg"]
    # (the module's default tolerance, 5 %)
    assert "GPUs 0-7: memory used expected at least 83,693 MiB = 0.9 x 97,887 MiB - 5 %, found 12,000 MiB" in res["msg"]


@pytest.mark.parametrize("vram, words", [
    ({"loaded_min_used_fraction": 1.5}, "vram.loaded_min_used_fraction must be more than 0 and at most 1"),
    ({"loaded_min_used_fraction": 0.9, "loaded_tolerance": 1.0}, "vram.loaded_tolerance must be 0 or more and less"),
    ({"loaded_gpus": [" "]}, "expect.gpus has an empty entry"),
])
def test_a_bad_loaded_gate_is_refused_before_the_stop(host, vram, words):
    h = host()
    h.start_serving()
    rc, res = h.run(h.args(vram=dict({"count": 8}, **vram)))
    assert rc == 1 and res["failed_step"] == "options" and not res["stopped"]
    assert res["msg"].startswith("Nothing was stopped: ") and words in res["msg"], res["msg"]


# ------------------------------------------------------------- a model switch

OLD = "vllm-old-model.service"


def rendered_unit(argv, env):
    """A unit file as the service role's template writes it (the marker line, the real quoting filters)."""
    from ansible_collections.gpufleet.vllm.plugins.filter.systemd import systemd_environment, systemd_exec_args
    return "\n".join(
        ["# Ansible managed", "# vLLM server for old-model, rendered by the gpufleet.vllm.service role.",
         "[Unit]", "Description=vLLM", "", "[Service]", "Type=exec"]
        + systemd_environment(env)
        + ["ExecStart=" + systemd_exec_args(argv, wrap=True), "", "[Install]", "WantedBy=multi-user.target", ""])


def old_model(h, vram_mib="", port=None, fragment=True):
    """Another model's unit on the same GPUs (its own port and name), from a unit file the role rendered; running."""
    port = port or free_port()
    argv = [sys.executable, STANDIN, "serve", str(h.model), "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", "old-model", "--gpu-memory-utilization", "0.5", "--tensor-parallel-size", "8"]
    env = {"FAKE_NVML_STATE": h.nvml, "VLLM_STANDIN_LOAD_SECONDS": "0.2", "VLLM_STANDIN_RELEASE_SECONDS": "0",
           "VLLM_STANDIN_VRAM_MIB": vram_mib, "VLLM_STANDIN_VENV": h.link, "VLLM_STANDIN_TTFT_SECONDS": "0.01"}
    path = h.tmp / "units" / OLD
    path.parent.mkdir(exist_ok=True)
    path.write_text(rendered_unit(argv, env))
    fakesystemd.write_unit(h.state_dir, OLD, argv, env, fragment=str(path) if fragment else None)
    return port


def wait_health(port):
    import urllib.request
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the old model's stand-in did not come up")


def test_a_model_switch_stops_the_other_model_inside_the_window_and_its_rollback_starts_it_again(host):
    h = host()
    old_port = old_model(h)
    assert h.systemctl("start", OLD).returncode == 0
    wait_health(old_port)
    old_pid = int(h.systemctl("show", "--property=MainPID", OLD).stdout.split("=")[1])
    # the old model holds the GPUs (0.5 x 97,887 MiB); the new unit does not run yet
    assert vram_used(h.nvml) == [48943] * 8

    rc, res = h.run(h.args(stop_units=[OLD]))
    assert rc == 0, res["msg"]
    assert res["others"] == [{"unit": OLD, "was_active": True, "was_enabled": False, "stopped": True}]
    assert "stop_others" in res["phases"] and res["vram_freed_mib"] == [0] * 8
    assert not fakesystemd._alive(old_pid)
    # stop the new unit, then the old model, then start the new one: only the new model serves
    assert [c.split()[0] + " " + c.split()[-1] for c in h.calls()] == [
        "start " + OLD, "stop " + UNIT, "stop " + OLD, "start " + UNIT]
    assert vram_used(h.nvml) == [95000] * 8

    # the way back: the old model's unit again, its port, name and loaded gate from its own file
    rc, back = h.run({"unit": OLD, "stop_units": [UNIT], "serving_from_unit": True, "link": h.link,
                      "link_target": h.env_a, "timeout": 30, "interval": 0.1,
                      "vram": {"count": 8, "free_timeout": 10, "interval": 0.1, "loaded_tolerance": 0.05}})
    assert rc == 0, back["msg"]
    assert back["others"] == [{"unit": UNIT, "was_active": True, "was_enabled": False, "stopped": True}]
    assert back["ready"] is True and back["readiness"]["stages"]["completion"]["passed"] is True
    assert back["readiness"]["url"] == "http://127.0.0.1:%d" % old_port and back["readiness"]["model"] == "old-model"
    assert back["version"] == "0.32.0" and "vram_loaded" in back["phases"]
    assert vram_used(h.nvml) == [48943] * 8 and os.readlink(h.link) == h.env_a
    assert h.show()["ActiveState"] == "inactive"


def test_a_switch_check_mode_names_the_other_model_and_stops_nothing(host):
    h = host()
    old_model(h)
    assert h.systemctl("start", OLD).returncode == 0
    rc, res = h.run(h.args(stop_units=[OLD]), check=True)
    assert rc == 0, res["msg"]
    assert "stop the other model's %s" % OLD in res["msg"]
    assert res["others"] == [{"unit": OLD, "was_active": True, "was_enabled": False, "stopped": False}]
    assert [c.split()[0] for c in h.calls()] == ["start"]


def test_serving_from_a_unit_the_role_did_not_render_is_refused_before_the_stop(host):
    h = host()
    pid = h.start_serving()
    rc, res = h.run(h.args(serving_from_unit=True))
    assert rc == 1 and res["failed_step"] == "unit" and not res["stopped"]
    assert "cannot be read from its unit (serving_from_unit)" in res["msg"]
    assert "was not rendered by the gpufleet.vllm.service role" in res["msg"]
    assert int(h.show()["MainPID"]) == pid


@pytest.mark.parametrize("units, words", [
    ([UNIT], "stop_units[0] is the unit %s itself" % UNIT),
    (["a/b"], "stop_units[0] 'a/b'"),
    (["vllm@"], "stop_units[0] 'vllm@'"),
])
def test_bad_stop_units_are_refused_before_the_stop(host, units, words):
    h = host()
    h.start_serving()
    rc, res = h.run(h.args(stop_units=units))
    assert rc == 1 and res["failed_step"] == "options" and not res["stopped"]
    assert words in res["msg"], res["msg"]


def test_an_other_unit_systemd_does_not_know_is_left_out_not_stopped(host):
    # (removed between the listing and the cutover: systemctl stop would fail on it inside the window)
    h = host()
    pid = h.start_serving()
    rc, res = h.run(h.args(stop_units=["vllm-nowhere.service"]))
    assert rc == 0, res["msg"]
    assert res["others"] == []
    assert not any("vllm-nowhere" in call for call in h.calls())
    assert int(h.show()["MainPID"]) != pid


def test_the_other_model_that_does_not_stop_fails_the_window_and_says_what_is_down(host):
    h = host()
    old_model(h)
    assert h.systemctl("start", OLD).returncode == 0
    h.start_serving()
    # (the fake systemctl fails a stop of a unit that has a .fail-stop file)
    with open(os.path.join(h.state_dir, OLD + ".fail-stop"), "w") as f:
        f.write("Job for %s failed." % OLD)
    rc, res = h.run(h.args(stop_units=[OLD]))
    assert rc == 1 and res["failed_step"] == "stop_others", res["msg"]
    assert res["stopped"] is True and res["others"] == [
        {"unit": OLD, "was_active": True, "was_enabled": False, "stopped": False}]
    assert "The other model's unit %s did not stop" % OLD in res["msg"]
    assert "Now: %s is stopped" % UNIT in res["msg"]


def test_a_model_beside_on_other_gpus_keeps_its_memory_and_the_window_waits_only_for_the_units_gpus(host):
    # the old model serves on GPUs 0-3 (CUDA_VISIBLE_DEVICES, tp 4); the unit restarts on GPUs 4-7
    h = host(extra_env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    port = free_port()
    argv = [sys.executable, STANDIN, "serve", str(h.model), "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", "beside", "--tensor-parallel-size", "4"]
    fakesystemd.write_unit(h.state_dir, OLD, argv, {
        "FAKE_NVML_STATE": h.nvml, "VLLM_STANDIN_LOAD_SECONDS": "0", "VLLM_STANDIN_RELEASE_SECONDS": "0",
        "VLLM_STANDIN_VRAM_MIB": "60000", "VLLM_STANDIN_VENV": h.link, "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert h.systemctl("start", OLD).returncode == 0
    wait_health(port)
    rc, res = h.run(h.args(vram={"count": 8, "loaded_min_used_mib": 90000, "loaded_gpus": [4, 5, 6, 7],
                                 "free_timeout": 3, "interval": 0.1}))
    assert rc == 0, res["msg"]
    assert vram_used(h.nvml)[:4] == [60000] * 4
    # before: a host-wide wait for free GPUs, which the model beside never gives
    assert res["phases"]["vram_freed"] < 3


def test_the_rollback_of_a_switch_keeps_a_tolerance_when_the_forward_gate_was_a_fixed_figure(host):
    # service_min_used_mib set: the role gives loaded_min_used_mib and no tolerance; the old unit's own fraction
    # then gets the module's default 5 %, not 0 (48,943 MiB held against 0.5 x 97,887 = 48,943.5 exactly)
    # (the role leaves the empty tolerance out: the module refuses a null number)
    h = host()
    old_port = old_model(h)
    rc, back = h.run({"unit": OLD, "serving_from_unit": True, "timeout": 30, "interval": 0.1,
                      "vram": {"count": 8, "free_timeout": 10, "interval": 0.1, "loaded_min_used_mib": 90000}})
    assert rc == 0, back["msg"]
    assert back["readiness"]["url"] == "http://127.0.0.1:%d" % old_port


def test_serving_from_unit_takes_the_api_key_and_warns_of_drop_ins_it_did_not_read(host):
    h = host()
    old_port = old_model(h)
    with open(os.path.join(h.state_dir, OLD + ".dropins"), "w") as f:
        f.write("/etc/systemd/system/%s.d/override.conf" % OLD)
    rc, back = h.run({"unit": OLD, "serving_from_unit": True, "timeout": 30, "interval": 0.1,
                      "api_key": "the-new-models-key"})
    assert rc == 0, back["msg"]
    assert "has drop-ins or an EnvironmentFile= (/etc/systemd/system/%s.d/override.conf)" % OLD in json.dumps(
        back.get("warnings")), back.get("warnings")
    rc, res = h.run({"unit": OLD, "serving_from_unit": True, "base_url": "http://127.0.0.1:%d" % old_port})
    assert rc == 1 and res["failed_step"] == "options" and "leave base_url out" in res["msg"]


# ------------------------------------------------------------- start=false (the service role's stop)

def stop_args(h, **extra):
    args = {"unit": UNIT, "start": False, "vram": {"count": 8, "free_timeout": 10, "interval": 0.1}}
    args.update(extra)
    return args


def test_the_stop_alone_stops_waits_for_free_gpus_and_starts_nothing(host):
    h = host()
    h.start_serving()
    before = time.time()
    rc, res = h.run(stop_args(h))
    assert rc == 0, res["msg"]
    assert res["state"] == "stopped" and res["cutover"] is False and res["check_mode"] is False
    assert res["changed"] is True and res["was_active"] is True and res["stopped"] is True
    assert not res["started"] and not res["switched"] and not res["ready"]
    assert h.show()["ActiveState"] == "inactive" and vram_used(h.nvml) == [0] * 8
    assert res["vram_used_mib"] == res["vram_freed_mib"] == [0] * 8
    # what the service role's start reads to measure the downtime of a restart
    assert before <= res["stop_began"] <= time.time()
    assert res["stop_seconds"] is not None and res["stopped_at"].endswith("Z")
    assert [c.split()[0] for c in h.calls()] == ["start", "stop"]
    assert res["msg"].startswith("%s stopped in" % UNIT) and "the GPUs are free (0/0/0/0/0/0/0/0 MiB used)" in res["msg"]
    # again: nothing runs, nothing changes (idempotent)
    rc, again = h.run(stop_args(h))
    assert rc == 0 and again["changed"] is False and again["stopped"] is False and again["was_active"] is False
    assert again["msg"].startswith("%s was not running" % UNIT)
    # (no systemctl stop of a unit that does not run: one whose file systemd cannot load would fail it)
    assert [c.split()[0] for c in h.calls()] == ["start", "stop"]


def test_the_stop_alone_of_a_unit_systemd_does_not_know_has_nothing_to_stop(host):
    h = host()
    rc, res = h.run(stop_args(h, unit="vllm-never-rendered"))
    assert rc == 0, res["msg"]
    assert res["changed"] is False and res["stopped"] is False and res["state"] == "stopped"
    assert "systemd does not know vllm-never-rendered.service: nothing to stop" in res["msg"]
    assert h.calls() == []


def test_the_stop_alone_in_check_mode_stops_nothing(host):
    h = host()
    pid = h.start_serving()
    rc, res = h.run(stop_args(h), check=True)
    assert rc == 0, res["msg"]
    assert res["changed"] is True and res["state"] == "stopped" and res["check_mode"] is True
    # (what it would stop, as the service role's result said it in check mode before)
    assert res["stopped"] is True and res["stopped_at"].endswith("Z")
    assert res["msg"] == "Check mode: would stop %s, wait until the GPUs are free." % UNIT
    assert int(h.show()["MainPID"]) == pid and [c.split()[0] for c in h.calls()] == ["start"]


def test_the_stop_alone_fails_when_the_gpus_stay_held_and_says_the_server_is_stopped(host):
    h = host()
    h.start_serving()
    with holding_gpu(h, 3):
        rc, res = h.run(stop_args(h, vram={"count": 8, "free_timeout": 1, "interval": 0.1}))
    assert rc == 1
    assert res["failed_step"] == "vram_freed" and res["state"] == "failed" and res["cutover"] is False
    assert res["stopped"] is True and not res["started"]
    assert "did not get free after the stop" in res["msg"] and "GPU 3" in res["msg"]
    assert "Now: %s is stopped." % UNIT in res["msg"]


@pytest.mark.parametrize("extra, words", [
    ({"link": "/opt/vllm/current", "link_target": "/opt/vllm/envs/x"}, "leave out link, link_target"),
    ({"daemon_reload": True}, "leave out daemon_reload"),
    ({"serving_from_unit": True}, "leave out serving_from_unit"),
])
def test_the_stop_alone_refuses_what_only_a_start_uses(host, extra, words):
    h = host()
    h.start_serving()
    rc, res = h.run(stop_args(h, **extra))
    assert rc == 1 and "start is false (the stop alone): %s" % words in res["msg"], res["msg"]
    assert res["changed"] is False and res["stopped"] is False
    assert [c.split()[0] for c in h.calls()] == ["start"]


def test_the_stop_alone_stops_even_when_nvml_is_down_then_fails_the_wait(host):
    """An operator stopping the server of a host whose GPUs are in trouble gets it down: NVML is not a
    precondition of the stop alone (it is of a cutover); the wait for free GPUs fails after the stop, saying so."""
    h = host()
    h.start_serving()
    nvml_state.update_state(lambda d: d.update({"init_error": "DRIVER_NOT_LOADED"}), h.nvml)
    rc, res = h.run(stop_args(h, vram={"count": 8, "free_timeout": 1, "interval": 0.1}))
    assert rc == 1 and res["failed_step"] == "vram_freed"
    assert res["stopped"] is True and h.show()["ActiveState"] == "inactive"
    assert "Now: %s is stopped." % UNIT in res["msg"]


def test_the_stop_alone_in_check_mode_says_when_nothing_runs(host):
    h = host()
    rc, res = h.run(stop_args(h), check=True)
    assert rc == 0 and res["changed"] is False and res["stopped"] is False
    assert res["msg"] == "Check mode: would stop nothing of %s (not running), wait until the GPUs are free." % UNIT


def test_the_stop_alone_of_a_unit_that_does_not_run_still_stops_the_other_units(host):
    h = host()
    old_model(h)
    assert h.systemctl("start", OLD).returncode == 0
    rc, res = h.run(stop_args(h, stop_units=[OLD]), check=True)
    assert rc == 0 and res["changed"] is True and res["stopped"] is False
    assert res["msg"] == ("Check mode: would stop nothing of %s (not running), stop the other model's %s, wait until "
                          "the GPUs are free." % (UNIT, OLD))
    rc, res = h.run(stop_args(h, stop_units=[OLD]))
    assert rc == 0, res["msg"]
    assert res["changed"] is True and res["stopped"] is False
    assert res["others"] == [{"unit": OLD, "was_active": True, "was_enabled": False, "stopped": True}]
    assert res["msg"].startswith("%s was not running; %s stopped in" % (UNIT, OLD))
    assert vram_used(h.nvml) == [0] * 8


def test_stop_others_in_finds_the_other_model_itself_and_stops_it_inside_the_window(host):
    h = host()
    old_port = old_model(h)
    assert h.systemctl("start", OLD).returncode == 0
    wait_health(old_port)
    # (no stop_units: the module reads the role's units in the directory, the old model's shares the GPUs)
    rc, res = h.run(h.args(stop_others_in=str(h.tmp / "units")))
    assert rc == 0, res["msg"]
    assert res["others"] == [{"unit": OLD, "was_active": True, "was_enabled": False, "stopped": True}]
    assert [c.split()[0] + " " + c.split()[-1] for c in h.calls()] == [
        "start " + OLD, "stop " + UNIT, "stop " + OLD, "start " + UNIT]


@pytest.mark.parametrize("where,words", [
    ("units", "stop_others_in must be an absolute path"),
    # (a file where the directory should be)
    ("{tmp}/a-file", "cannot be read (stop_others_in)"),
])
def test_stop_others_in_that_cannot_be_read_stops_nothing(host, where, words):
    h = host()
    (h.tmp / "a-file").write_text("not a directory\n")
    pid = h.start_serving()
    rc, res = h.run(h.args(stop_others_in=where.format(tmp=h.tmp)))
    assert rc == 1 and words in res["msg"] and not res["stopped"], res["msg"]
    assert fakesystemd._alive(pid)
