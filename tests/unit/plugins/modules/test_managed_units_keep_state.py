# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.managed_units' keep_state: a unit's state, run as Ansible runs a module on a host.

The module file is executed by Python with its arguments as JSON, with the
fake systemd of tests/unit/fakesystemd.py (or a misbehaving systemctl
script) first on PATH.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys
import time

import pytest

import fakesystemd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "managed_units.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
UNIT = "vllm-kimi-k25.service"


@pytest.fixture
def host(tmp_path):
    state_dir = str(tmp_path / "systemd")
    env = dict(os.environ, **fakesystemd.install(str(tmp_path / "bin"), state_dir))
    env["PYTHONPATH"] = COLLECTIONS
    fakesystemd.write_unit(state_dir, UNIT, [sys.executable, "-c", "import time; time.sleep(600)"])

    def run(args, check=False, path_first=None):
        """The module run with keep=ARGS' unit; its keep_state merged into the result's top level."""
        args = dict(args)
        args["keep"] = args.pop("unit")
        args.setdefault("unit_dir", str(tmp_path / "units"))
        path = tmp_path / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
        run_env = dict(env)
        if path_first:
            run_env["PATH"] = path_first + os.pathsep + run_env["PATH"]
        proc = subprocess.run([sys.executable, MODULE, str(path)], env=run_env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        res = json.loads(proc.stdout)
        return proc.returncode, dict(res, **(res.get("keep_state") or {}))

    def systemctl(*words):
        subprocess.run(["systemctl"] + list(words), env=env, check=True, timeout=30)

    run.systemctl = systemctl
    yield run
    subprocess.run(["systemctl", "stop", "--", UNIT], env=env, check=False, timeout=30)


def test_a_running_unit(host):
    host.systemctl("start", "--", UNIT)
    rc, res = host({"unit": "vllm-kimi-k25"})
    assert rc == 0 and res["changed"] is False
    assert res["unit"] == UNIT
    assert (res["load_state"], res["active_state"], res["sub_state"]) == ("loaded", "active", "running")
    assert (res["exists"], res["loaded"], res["active"], res["running"]) == (True, True, True, True)
    assert res["main_pid"] > 0 and res["properties"]["MainPID"] == res["main_pid"]
    assert res["properties"]["FragmentPath"].endswith(UNIT + ".json")


def test_a_stopped_unit_and_check_mode_read_the_same(host):
    rc, res = host({"unit": UNIT})
    rc_check, res_check = host({"unit": UNIT}, check=True)
    # the same reading; only the check_mode it returns tells the runs apart (the roles decide from it)
    assert (res.pop("check_mode"), res_check.pop("check_mode")) == (False, True)
    assert rc == rc_check == 0 and res == res_check
    assert (res["active_state"], res["active"], res["running"], res["main_pid"]) == ("inactive", False, False, 0)


def test_a_unit_systemd_does_not_know_is_no_failure(host):
    rc, res = host({"unit": "vllm-other.service"})
    assert rc == 0
    assert (res["load_state"], res["exists"], res["loaded"], res["active"]) == ("not-found", False, False, False)


@pytest.mark.parametrize("unit,words", [
    ("../../etc/passwd", "keep '../../etc/passwd' holds characters a unit name cannot have"),
    ("vllm@", "is a template (it ends in @)"),
    ("-H", "starts with - or ."),
    ("vllm\nExecStart=x", "keep 'vllm\\nExecStart=x' holds characters"),
])
def test_a_name_systemd_would_refuse_is_refused_before_systemctl_runs(host, tmp_path, unit, words):
    rc, res = host({"unit": unit})
    assert rc == 1 and words in res["msg"] and "for example vllm-minimax-m25.service" in res["msg"]
    calls = tmp_path / "systemd" / "calls"
    assert not calls.exists() or "show" not in calls.read_text()


def write_systemctl(tmp_path, body):
    bindir = tmp_path / "badbin"
    bindir.mkdir(exist_ok=True)
    path = bindir / "systemctl"
    path.write_text("#!%s\nimport sys, time\n%s\n" % (sys.executable, body))
    path.chmod(0o755)
    return str(bindir)


def test_garbled_answer_fails_with_the_line(host, tmp_path):
    bindir = write_systemctl(tmp_path, "print('LoadState=loaded')\nprint('Welcome to the jump host')")
    rc, res = host({"unit": UNIT}, path_first=bindir)
    assert rc == 1 and res["changed"] is False
    assert res["msg"] == ("Cannot read the state of %s: systemctl show %s printed line 2, 'Welcome to the jump host', "
                          "which is not a Key=Value property: the unit's state cannot be read from it. Nothing was "
                          "changed." % (UNIT, UNIT))


def test_hanging_systemctl_fails_at_the_timeout(host, tmp_path):
    bindir = write_systemctl(tmp_path, "time.sleep(600)")
    started = time.monotonic()
    rc, res = host({"unit": UNIT, "timeout": 1}, path_first=bindir)
    assert time.monotonic() - started < 10
    assert rc == 1
    assert res["msg"] == ("Cannot read the state of %s: systemctl show %s did not answer within 1 s and was killed. "
                          "Nothing was changed." % (UNIT, UNIT))


def test_systemctl_option_and_missing_systemctl(host, tmp_path):
    rc, res = host({"unit": UNIT, "systemctl": str(tmp_path / "bin" / "systemctl")})
    assert rc == 0 and res["loaded"] is True
    rc, res = host({"unit": UNIT, "systemctl": str(tmp_path / "nowhere" / "systemctl")})
    assert rc == 1 and "could not be run: No such file or directory" in res["msg"]


@pytest.mark.parametrize("timeout", [0, 3601])
def test_timeout_out_of_range(host, timeout):
    rc, res = host({"unit": UNIT, "timeout": timeout})
    assert rc == 1 and res["msg"] == "timeout must be from 1 to 3600 seconds (got %d)." % timeout
