# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.managed_units: the units the service role rendered, with their state (fake systemctl)."""

import json
import os
import subprocess
import sys

import pytest

import fakesystemd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "managed_units.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
MARKED = ("# Ansible managed\n# vLLM server for %s, rendered by the gpufleet.vllm.service role.\n[Unit]\n"
          "Description=vLLM\n")


class World:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.unit_dir = tmp_path / "units"
        self.unit_dir.mkdir()
        self.state = str(tmp_path / "systemd")
        self.env = fakesystemd.install(str(tmp_path / "bin"), self.state)
        self.started = []

    def unit(self, name, marked=True, running=False, enabled=False):
        (self.unit_dir / name).write_text(MARKED % name if marked else "[Unit]\nDescription=someone else's\n")
        fakesystemd.write_unit(self.state, name, [sys.executable, "-c", "import time; time.sleep(600)"])
        if running:
            self.systemctl("start", name)
            self.started.append(name)
        if enabled:
            self.systemctl("enable", name)

    def systemctl(self, *words):
        return subprocess.run(["systemctl"] + list(words), env=dict(os.environ, **self.env), capture_output=True,
                              text=True, check=False, timeout=60)

    def run(self, **args):
        path = self.tmp / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict({"unit_dir": str(self.unit_dir)}, **args)}))
        env = dict(os.environ, **self.env)
        env["PYTHONPATH"] = COLLECTIONS
        proc = subprocess.run([sys.executable, MODULE, str(path)], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    def stop_all(self):
        # (only what this world started: one systemctl per file would cost minutes in a directory of thousands)
        for name in self.started:
            self.systemctl("stop", name)


@pytest.fixture
def world(tmp_path):
    made = World(tmp_path)
    yield made
    made.stop_all()


def test_the_other_models_unit_that_runs_or_is_enabled_is_listed(world):
    world.unit("vllm-kimi-k25.service", running=True, enabled=True)
    world.unit("vllm-minimax-m25.service")
    world.unit("vllm-old.service", enabled=True)
    world.unit("vllm-spare.service")
    world.unit("nginx.service", marked=False, running=True, enabled=True)
    rc, res = world.run(keep="vllm-minimax-m25")
    assert rc == 0, res
    assert res["changed"] is False and res["keep"] == "vllm-minimax-m25.service"
    assert [u["unit"] for u in res["units"]] == [
        "vllm-kimi-k25.service", "vllm-minimax-m25.service", "vllm-old.service", "vllm-spare.service"]
    assert [(u["unit"], u["active"], u["enabled"]) for u in res["others"]] == [
        ("vllm-kimi-k25.service", True, True), ("vllm-old.service", False, True)]
    kimi = res["others"][0]
    assert kimi["active_state"] == "active" and kimi["unit_file_state"] == "enabled" and kimi["main_pid"] > 0


def test_the_kept_unit_is_never_an_other_even_when_it_runs(world):
    world.unit("vllm-kimi-k25.service", running=True, enabled=True)
    rc, res = world.run(keep="vllm-kimi-k25.service", _ansible_check_mode=True)
    assert rc == 0 and res["others"] == [] and res["check_mode"] is True
    assert res["units"][0]["other"] is False


def test_links_and_odd_names_are_not_read(world, tmp_path):
    outside = tmp_path / "outside.service"
    outside.write_text(MARKED % "outside")
    os.symlink(str(outside), str(world.unit_dir / "vllm-link.service"))
    (world.unit_dir / "bad name.service").write_text(MARKED % "bad")
    (world.unit_dir / "vllm-dir.service").mkdir()
    rc, res = world.run()
    assert rc == 0, res
    assert res["units"] == [] and res["others"] == []


def test_a_missing_unit_directory_has_no_units(world, tmp_path):
    rc, res = world.run(unit_dir=str(tmp_path / "nowhere"))
    assert rc == 0 and res["units"] == []


@pytest.mark.parametrize("args, words", [
    ({"keep": "vllm@"}, "keep 'vllm@' is a template"),
    ({"keep": "a/b"}, "holds characters a unit name cannot have"),
    ({"unit_dir": "relative"}, "unit_dir must be an absolute path"),
    ({"timeout": 0}, "timeout must be from 1"),
])
def test_bad_options_are_refused(world, args, words):
    rc, res = world.run(**args)
    assert rc == 1 and words in res["msg"], res["msg"]


def test_a_directory_too_large_is_refused_not_half_read(world, monkeypatch):
    for n in range(4100):
        (world.unit_dir / ("x%d.conf" % n)).write_text("")
    rc, res = world.run()
    assert rc == 1
    assert "has more than 4096 entries: not read (is it the systemd unit directory?)" in res["msg"]


def test_the_marker_counts_only_as_the_templates_own_comment_line(world):
    # a unit that greps for the phrase, one that quotes it in a comment, one with it after [Unit]
    (world.unit_dir / "unit-audit.service").write_text(
        "[Unit]\nDescription=audit\n[Service]\nExecStart=/bin/grep 'rendered by the gpufleet.vllm.service role' /x\n")
    (world.unit_dir / "embed-server.service").write_text(
        "# copied from the unit rendered by the gpufleet.vllm.service role, then edited\n[Unit]\n")
    (world.unit_dir / "late.service").write_text(
        "[Unit]\n# vLLM server for x, rendered by the gpufleet.vllm.service role.\n")
    world.unit("vllm-kimi-k25.service")
    rc, res = world.run()
    assert rc == 0, res
    assert [u["unit"] for u in res["units"]] == ["vllm-kimi-k25.service"]


def rendered(name, gpus=None, tp=4):
    env = '' if gpus is None else 'Environment="CUDA_VISIBLE_DEVICES=%s"\n' % gpus
    return (MARKED % name + '[Service]\nType=exec\n' + env
            + 'ExecStart="/opt/vllm/current/bin/vllm" \\\n    "serve" \\\n    "/models/%s" \\\n'
              '    "--tensor-parallel-size" \\\n    "%d"\n' % (name, tp))


def test_two_models_side_by_side_on_other_gpus_are_not_each_others_switch(world):
    world.unit("vllm-kimi-k25.service", running=True, enabled=True)
    world.unit("vllm-minimax-m25.service")
    world.unit("vllm-small.service", running=True, enabled=True)
    (world.unit_dir / "vllm-kimi-k25.service").write_text(rendered("kimi", "0,1,2,3"))
    (world.unit_dir / "vllm-minimax-m25.service").write_text(rendered("minimax", "4,5,6,7"))
    (world.unit_dir / "vllm-small.service").write_text(rendered("small", "3", tp=1))
    rc, res = world.run(keep="vllm-minimax-m25")
    assert rc == 0, res
    by_name = dict((u["unit"], u) for u in res["units"])
    assert by_name["vllm-kimi-k25.service"]["gpus"] == [0, 1, 2, 3]
    assert by_name["vllm-kimi-k25.service"]["shares_gpus"] is False
    assert by_name["vllm-minimax-m25.service"]["shares_gpus"] is True
    assert res["others"] == []
    # the same host switching the GPUs 0-3 model: the other one on GPU 3 shares one, the one on 4-7 does not
    rc, res = world.run(keep="vllm-kimi-k25")
    assert [u["unit"] for u in res["others"]] == ["vllm-small.service"]


def test_a_unit_whose_gpus_cannot_be_known_counts_as_sharing(world):
    world.unit("vllm-kimi-k25.service", running=True)
    world.unit("vllm-minimax-m25.service")
    (world.unit_dir / "vllm-kimi-k25.service").write_text(
        rendered("kimi", "0,1,2,3").replace('"serve"', '"serve" "%n"'))
    (world.unit_dir / "vllm-minimax-m25.service").write_text(rendered("minimax", "4,5,6,7"))
    rc, res = world.run(keep="vllm-minimax-m25")
    assert rc == 0, res
    kimi = res["others"][0]
    assert kimi["unit"] == "vllm-kimi-k25.service" and kimi["gpus"] is None and kimi["shares_gpus"] is True
    assert "the specifier %n" in kimi["gpus_unknown"]


def test_a_unit_with_drop_ins_counts_as_sharing_the_gpus(world):
    # (systemctl edit: an override may change its command line or CUDA_VISIBLE_DEVICES)
    world.unit("vllm-kimi-k25.service", running=True)
    world.unit("vllm-minimax-m25.service")
    (world.unit_dir / "vllm-kimi-k25.service").write_text(rendered("kimi", "0,1,2,3"))
    (world.unit_dir / "vllm-minimax-m25.service").write_text(rendered("minimax", "4,5,6,7"))
    with open(os.path.join(world.state, "vllm-kimi-k25.service.dropins"), "w") as f:
        f.write("/etc/systemd/system/vllm-kimi-k25.service.d/override.conf")
    rc, res = world.run(keep="vllm-minimax-m25")
    assert rc == 0, res
    kimi = res["others"][0]
    assert kimi["unit"] == "vllm-kimi-k25.service" and kimi["gpus"] is None
    assert "drop-ins /etc/systemd/system/vllm-kimi-k25.service.d/override.conf" in kimi["gpus_unknown"]


def test_enabled_sets_keep_at_boot_and_disables_the_others_on_its_gpus_in_one_step(world):
    world.unit("vllm-kimi.service", running=True, enabled=True)
    world.unit("vllm-minimax.service")
    world.unit("someone-else.service", marked=False, enabled=True)
    rc, result = world.run(keep="vllm-minimax", enabled=True)
    assert rc == 0 and result["changed"] is True, result
    assert result["changed_units"] == [{"unit": "vllm-minimax.service", "enabled": True},
                                       {"unit": "vllm-kimi.service", "enabled": False}]
    assert "enabled" in world.systemctl("is-enabled", "vllm-minimax.service").stdout
    assert "disabled" in world.systemctl("is-enabled", "vllm-kimi.service").stdout
    # (a unit the role did not render is never touched)
    assert "enabled" in world.systemctl("is-enabled", "someone-else.service").stdout
    rc, again = world.run(keep="vllm-minimax", enabled=True)
    assert rc == 0 and again["changed"] is False and again["changed_units"] == []


def test_enabled_in_check_mode_changes_nothing_and_says_what_it_would(world):
    world.unit("vllm-kimi.service", enabled=True)
    world.unit("vllm-minimax.service")
    rc, result = world.run(keep="vllm-minimax", enabled=True, _ansible_check_mode=True)
    assert rc == 0 and result["changed"] is True and [c["unit"] for c in result["changed_units"]] == [
        "vllm-minimax.service", "vllm-kimi.service"]
    assert "disabled" in world.systemctl("is-enabled", "vllm-minimax.service").stdout
    assert "enabled" in world.systemctl("is-enabled", "vllm-kimi.service").stdout
    # (check mode before the unit is rendered: not looked up, said as what would be set)
    rc, result = world.run(keep="vllm-new", enabled=True, _ansible_check_mode=True)
    assert rc == 0 and result["changed_units"][0] == {"unit": "vllm-new.service", "enabled": True}


def test_enabled_false_and_disable_others_false(world):
    world.unit("vllm-kimi.service", enabled=True)
    world.unit("vllm-minimax.service", enabled=True)
    rc, result = world.run(keep="vllm-minimax", enabled=False, disable_others=False)
    assert rc == 0 and result["changed_units"] == [{"unit": "vllm-minimax.service", "enabled": False}]
    assert "enabled" in world.systemctl("is-enabled", "vllm-kimi.service").stdout


def test_enabled_refuses_a_unit_systemd_does_not_know_and_changes_nothing(world):
    world.unit("vllm-kimi.service", enabled=True)
    rc, result = world.run(keep="vllm-missing", enabled=True)
    assert rc == 1 and result["changed"] is False
    assert result["msg"].startswith("systemd does not know vllm-missing.service, so its boot state cannot be set")
    assert "enabled" in world.systemctl("is-enabled", "vllm-kimi.service").stdout


def test_enabled_sets_a_unit_systemd_knows_from_elsewhere(world):
    # (a unit file that is not in unit_dir: set by its own state)
    world.unit("vllm-elsewhere.service", marked=False)
    rc, result = world.run(keep="vllm-elsewhere", enabled=True)
    assert rc == 0 and result["changed_units"] == [{"unit": "vllm-elsewhere.service", "enabled": True}]
    assert "enabled" in world.systemctl("is-enabled", "vllm-elsewhere.service").stdout


def test_a_failed_disable_says_what_was_changed_before_it(world, tmp_path):
    world.unit("vllm-kimi.service", enabled=True)
    world.unit("vllm-minimax.service")
    # a systemctl that enables, then fails every disable
    real = world.env["PATH"].split(os.pathsep)[0]
    wrapper = tmp_path / "failing-systemctl"
    wrapper.write_text('#!/bin/sh\nif [ "$1" = disable ]; then echo "Access denied" >&2; exit 1; fi\n'
                       'exec "%s/systemctl" "$@"\n' % real)
    wrapper.chmod(0o755)
    rc, result = world.run(keep="vllm-minimax", enabled=True, systemctl=str(wrapper))
    assert rc == 1 and result["changed"] is True
    assert result["changed_units"] == [{"unit": "vllm-minimax.service", "enabled": True}]
    assert "Could not disable vllm-kimi.service at boot" in result["msg"]
    assert "Changed before it: vllm-minimax.service." in result["msg"]


def test_enabled_false_in_check_mode_for_a_unit_not_rendered_yet_changes_nothing(world):
    # (a unit systemd does not know does not start at boot: nothing to disable, as the real run would find)
    rc, result = world.run(keep="vllm-new", enabled=False, _ansible_check_mode=True)
    assert rc == 0 and result["changed"] is False and result["changed_units"] == []


@pytest.mark.parametrize("keep", [None, ""])
def test_enabled_without_a_unit_to_keep_is_refused(world, keep):
    world.unit("vllm-kimi.service", enabled=True)
    args = {"enabled": True} if keep is None else {"enabled": True, "keep": keep}
    rc, result = world.run(**args)
    assert rc == 1 and result["changed"] is False
    assert result["msg"].startswith("enabled sets the boot state of the unit keep names: give keep")
    assert "enabled" in world.systemctl("is-enabled", "vllm-kimi.service").stdout


def test_unset_environment_removes_the_gpus_set_before_it(world):
    # kimi's file pins GPUs 4-7, then unsets the variable (as an override would): its server takes GPUs 0-3, those of
    # the model switched to, so it is one of the others to stop
    world.unit("vllm-kimi-k25.service", running=True, enabled=True)
    world.unit("vllm-minimax-m25.service")
    (world.unit_dir / "vllm-kimi-k25.service").write_text(
        rendered("kimi", "4,5,6,7").replace("Type=exec\n", "Type=exec\nUnsetEnvironment=CUDA_VISIBLE_DEVICES\n"))
    (world.unit_dir / "vllm-minimax-m25.service").write_text(rendered("minimax", "0,1,2,3"))
    rc, res = world.run(keep="vllm-minimax-m25")
    assert rc == 0, res
    kimi = dict((u["unit"], u) for u in res["units"])["vllm-kimi-k25.service"]
    assert kimi["gpus"] == [0, 1, 2, 3] and kimi["shares_gpus"] is True
    assert [u["unit"] for u in res["others"]] == ["vllm-kimi-k25.service"]


def test_a_unit_whose_sizes_come_from_a_config_file_counts_as_sharing(world, tmp_path):
    # --config gives vLLM options (tensor-parallel-size: 8 here) that the unit's own words do not show
    config = tmp_path / "kimi.yaml"
    config.write_text("tensor-parallel-size: 8\n")
    world.unit("vllm-kimi-k25.service", running=True)
    world.unit("vllm-minimax-m25.service")
    (world.unit_dir / "vllm-kimi-k25.service").write_text(
        rendered("kimi", tp=4).replace('"serve"', '"serve" "--config" "%s"' % config))
    (world.unit_dir / "vllm-minimax-m25.service").write_text(rendered("minimax", "4,5,6,7"))
    rc, res = world.run(keep="vllm-minimax-m25")
    assert rc == 0, res
    kimi = res["others"][0]
    assert kimi["unit"] == "vllm-kimi-k25.service" and kimi["gpus"] is None and kimi["shares_gpus"] is True
    assert kimi["gpus_unknown"].startswith("unsure: --config %s not read" % config)


@pytest.mark.parametrize("keep", ["vllm-minimax-m25\n", "vllm-minimax-m25.service\n"])
def test_a_unit_name_ending_in_a_line_break_is_refused(world, keep):
    rc, res = world.run(keep=keep)
    assert rc == 1 and "holds characters a unit name cannot have" in res["msg"], res


def _switch_from(world, old_service):
    """The others of a switch to the GPUs 4-7 model, the old unit's [Service] being OLD_SERVICE."""
    world.unit("vllm-old.service", enabled=True)
    world.unit("vllm-new.service")
    (world.unit_dir / "vllm-old.service").write_text(MARKED % "old" + "[Service]\n" + old_service)
    (world.unit_dir / "vllm-new.service").write_text(rendered("new", "4,5,6,7"))
    rc, res = world.run(keep="vllm-new")
    assert rc == 0, res
    return dict((u["unit"], u) for u in res["units"])["vllm-old.service"], [u["unit"] for u in res["others"]]


def test_env_assignments_in_front_of_vllm_are_applied(world):
    old, others = _switch_from(world, "ExecStart=/usr/bin/env CUDA_VISIBLE_DEVICES=4,5,6,7 /opt/vllm/bin/vllm serve old "
                                      "-tp 4\n")
    assert old["gpus"] == [4, 5, 6, 7] and old["shares_gpus"] is True
    assert others == ["vllm-old.service"]


@pytest.mark.parametrize("service, why", [
    ("ExecStart=/bin/sh -c 'CUDA_VISIBLE_DEVICES=4,5,6,7 exec /opt/vllm/bin/vllm serve old -tp 4'\n",
     "is not vLLM's own"),
    ("ExecStart=/usr/local/bin/launch /opt/vllm/bin/vllm serve old -tp 4\n", "is not vLLM's own"),
    ("ExecStart=/usr/bin/env -u CUDA_VISIBLE_DEVICES /opt/vllm/bin/vllm serve old -tp 4\n", "runs env with the option -u"),
    ("ExecStart=@/opt/vllm/bin/vllm vllm serve old -tp 4\n", "the @ prefix"),
    ("Environment=CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7\nExecStart=/opt/vllm/bin/vllm serve old --tensor-parallel 8\n",
     "abbreviates --tensor-parallel-size"),
    ("Environment=CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7\nExecStart=/opt/vllm/bin/vllm serve old --tensor_par=8\n",
     "abbreviates --tensor-parallel-size"),
    ("ExecStart=/opt/vllm/bin/vllm serve old -tp 4 --device-ids 4,5,6,7\n", "--device-ids changes the GPUs"),
    ("ExecStart=/opt/vllm/bin/vllm serve old -tp 4 -pcp 2\n", "-pcp changes the GPUs"),
    ("ExecStart=/opt/vllm/bin/vllm serve old -tp 4 --distributed-executor-backend ray\n", "--distributed-executor"),
    ("ExecStart=/opt/vllm/bin/vllm serve old -tp 4 -n2\n", "-n with its value attached"),
])
def test_a_command_that_is_not_plainly_vllm_serve_counts_as_sharing(world, service, why):
    # (each of these old units would be read as GPUs 0-3 from its words: its real GPUs are not known)
    old, others = _switch_from(world, service)
    assert old["gpus"] is None and old["shares_gpus"] is True, old
    assert why in old["gpus_unknown"] and old["gpus_unknown"].startswith("unsure: "), old
    assert others == ["vllm-old.service"]


@pytest.mark.parametrize("service", [
    "ExecStart=/opt/vllm/bin/python3 -m vllm.entrypoints.openai.api_server --model old -tp 4\n",
    "ExecStart=/opt/vllm/bin/python3.12 -m vllm.entrypoints.cli.main serve old -tp 4 --distributed-executor-backend mp\n",
    "ExecStart=/opt/vllm/bin/vllm serve old --tensor-parallel-size=4 --data-parallel-size 1 --seed -1\n",
])
def test_vllms_own_commands_are_read(world, service):
    old, others = _switch_from(world, service)
    assert old["gpus"] == [0, 1, 2, 3] and old["shares_gpus"] is False, old
    assert others == []
