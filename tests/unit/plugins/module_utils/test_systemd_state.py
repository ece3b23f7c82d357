# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/systemd.py: the one reader of ``systemctl show``, as tables of cases.

The parser is fed text; show() and run_verb() run real programs (small
scripts standing in for systemctl, and tests/unit/fakesystemd.py) through
bounded.run_bounded, as the modules do.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import sys
import time

import pytest

import fakesystemd
from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded, systemd

UNIT = "vllm-kimi-k25.service"
RUNNING = ("LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nNRestarts=0\nMainPID=41235\n"
           "InvocationID=3c9d0e51a2b84c7a9d1f0e6b5a4c3d21\nExecMainStartTimestampMonotonic=81234567890\n"
           "FragmentPath=/etc/systemd/system/vllm-kimi-k25.service\n")
NOT_FOUND = ("LoadState=not-found\nActiveState=inactive\nSubState=dead\nResult=success\nNRestarts=0\nMainPID=0\n"
             "InvocationID=\nExecMainStartTimestampMonotonic=0\nFragmentPath=\n")

# name: (text systemctl show printed, the dict parse_show gives)
PARSED = {
    "running unit": (RUNNING, {
        "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": 0,
        "MainPID": 41235, "InvocationID": "3c9d0e51a2b84c7a9d1f0e6b5a4c3d21",
        "ExecMainStartTimestampMonotonic": 81234567890,
        "FragmentPath": "/etc/systemd/system/vllm-kimi-k25.service"}),
    "unit systemd does not know": (NOT_FOUND, {
        "LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": 0,
        "MainPID": 0, "InvocationID": "", "ExecMainStartTimestampMonotonic": 0, "FragmentPath": ""}),
    "value holding '='": ("LoadState=loaded\nFragmentPath=/etc/systemd/system/a=b.service\n",
                          {"LoadState": "loaded", "FragmentPath": "/etc/systemd/system/a=b.service"}),
    "value that is only '='": ("LoadState==\n", {"LoadState": "="}),
    "blank lines and CRLF": ("\nLoadState=loaded\r\n\nActiveState=failed\n",
                             {"LoadState": "loaded", "ActiveState": "failed"}),
    "empty number": ("LoadState=loaded\nMainPID=\n", {"LoadState": "loaded", "MainPID": None}),
    "some properties only": ("ActiveState=active\nNRestarts=2\n", {"ActiveState": "active", "NRestarts": 2}),
}

# name: (text, words the SystemdError says)
REFUSED = {
    "empty answer": ("", ["systemctl show %s printed nothing" % UNIT]),
    "only blank lines": ("\n\n  \n", ["printed nothing"]),
    "line without '='": ("LoadState=loaded\nFailed to get properties: Access denied\n",
                         ["line 2", "'Failed to get properties: Access denied'", "not a Key=Value property"]),
    "key with a space": ("Load State=loaded\n", ["line 1", "not a Key=Value property"]),
    "empty key": ("=loaded\n", ["line 1", "not a Key=Value property"]),
    "property not asked for": ("LoadState=loaded\nUser=root\n", ["the property User, which was not asked for",
                                                                 "line 2"]),
    "property twice": ("LoadState=loaded\nLoadState=masked\n", ["the property LoadState twice (line 2)"]),
    "number that is not one": ("MainPID=4x2\n", ["MainPID='4x2', which is not a number"]),
    "negative number": ("NRestarts=-1\n", ["NRestarts='-1', which is not a number"]),
    "control characters shown escaped": ("\x1b[31mred\x00\n", ["'\\x1b[31mred\\x00'", "line 1"]),
    "larger than a unit's state": ("LoadState=loaded\n" + "x" * (systemd.MAX_SHOW_CHARS + 1),
                                   ["printed at least 65554 characters, more than the 64 KiB", "was not read"]),
}


@pytest.mark.parametrize("name", sorted(PARSED))
def test_parse_show_reads_the_properties(name):
    text, expected = PARSED[name]
    assert systemd.parse_show(text, UNIT) == expected


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_parse_show_refuses_what_is_not_a_units_state(name):
    text, words = REFUSED[name]
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.parse_show(text, UNIT)
    for word in words:
        assert word in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value)


# ActiveState, LoadState: (exists, loaded, active, running)
STATES = {
    ("active", "loaded"): (True, True, True, True),
    ("activating", "loaded"): (True, True, True, True),
    ("reloading", "loaded"): (True, True, True, True),
    ("deactivating", "loaded"): (True, True, False, True),
    ("inactive", "loaded"): (True, True, False, False),
    ("failed", "loaded"): (True, True, False, False),
    ("inactive", "not-found"): (False, False, False, False),
    ("inactive", "masked"): (True, False, False, False),
    ("inactive", "error"): (True, False, False, False),
}


@pytest.mark.parametrize("active_state,load_state", sorted(STATES))
def test_unit_state_answers(active_state, load_state):
    state = systemd.UnitState(UNIT, {"LoadState": load_state, "ActiveState": active_state})
    assert (state.exists, state.loaded, state.active, state.running) == STATES[(active_state, load_state)]
    assert state.main_pid == 0


def test_as_result_carries_words_answers_and_properties():
    state = systemd.UnitState(UNIT, systemd.parse_show(RUNNING, UNIT))
    result = state.as_result()
    assert result == {
        "unit": UNIT, "load_state": "loaded", "active_state": "active", "sub_state": "running", "main_pid": 41235,
        "exists": True, "loaded": True, "active": True, "running": True, "properties": PARSED["running unit"][1]}


# ------------------------------------------------------------ show(): real programs through run_bounded


def fake_systemctl(tmp_path, body):
    path = tmp_path / "systemctl"
    path.write_text("#!%s\nimport sys, time\n%s\n" % (sys.executable, body))
    path.chmod(0o755)
    return str(path)


def test_show_asks_for_every_property_of_one_unit_after_double_dash(tmp_path):
    args = tmp_path / "args"
    systemctl = fake_systemctl(tmp_path, "open(%r, 'w').write('\\n'.join(sys.argv[1:]))\nsys.stdout.write(%r)"
                               % (str(args), RUNNING))
    state = systemd.read_state(systemd.reader(10), systemctl, UNIT)
    assert state.active and state.main_pid == 41235
    assert args.read_text().split("\n") == ["show", "--property=" + ",".join(systemd.UNIT_PROPERTIES), "--", UNIT]


@pytest.mark.parametrize("name,body,words", [
    ("exit status", "sys.stderr.write('Failed to connect to bus: No such file or directory\\n'); sys.exit(1)",
     ["systemctl show %s failed (exit 1): Failed to connect to bus: No such file or directory" % UNIT]),
    ("garbled", "print('LoadState=loaded'); print('<html>proxy error</html>')",
     ["line 2, '<html>proxy error</html>', which is not a Key=Value property"]),
    ("nothing", "pass", ["systemctl show %s printed nothing" % UNIT]),
    ("no LoadState", "print('ActiveState=active')", ["systemctl show %s did not say the unit's LoadState" % UNIT]),
])
def test_read_state_says_why_it_cannot_tell(tmp_path, name, body, words):
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.read_state(systemd.reader(10), fake_systemctl(tmp_path, body), UNIT)
    for word in words:
        assert word in str(exc.value)


def test_a_huge_answer_is_capped_and_refused(tmp_path):
    """50 MB of output: at most the last MiB is read (bounded), and that is refused, not parsed."""
    systemctl = fake_systemctl(tmp_path, "line = 'LoadState=loaded' * 1000 + '\\n'\n"
                               "for i in range(3000):\n    sys.stdout.write(line)")
    started = time.monotonic()
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.show(systemd.reader(20), systemctl, UNIT)
    assert time.monotonic() - started < 10
    assert "more than the 64 KiB a unit's state takes" in str(exc.value)
    assert "printed at least %d characters" % bounded.MAX_OUTPUT in str(exc.value)


def test_a_hanging_systemctl_is_killed_at_the_timeout(tmp_path):
    systemctl = fake_systemctl(tmp_path, "time.sleep(600)")
    started = time.monotonic()
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.read_state(systemd.reader(1), systemctl, UNIT)
    assert time.monotonic() - started < 5
    assert str(exc.value) == "systemctl show %s did not answer within 1 s and was killed" % UNIT
    assert systemd.unit_state(systemd.reader(1), systemctl, UNIT) == {}


def test_a_missing_systemctl_is_named(tmp_path):
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.read_state(systemd.reader(5), str(tmp_path / "no-such" / "systemctl"), UNIT)
    assert str(exc.value) == "systemctl show %s could not be run: No such file or directory" % UNIT
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.read_state(systemd.reader(5), None, UNIT)
    assert str(exc.value) == "systemctl was not found: this host does not look like a systemd host"


def test_fakesystemd_units_read_as_systemd_shows_them(tmp_path):
    env = fakesystemd.install(str(tmp_path / "bin"), str(tmp_path / "state"))
    os.environ["FAKE_SYSTEMD_DIR"] = env["FAKE_SYSTEMD_DIR"]
    try:
        systemctl = str(tmp_path / "bin" / "systemctl")
        fakesystemd.write_unit(env["FAKE_SYSTEMD_DIR"], UNIT, [sys.executable, "-c", "import time; time.sleep(60)"])
        stopped = systemd.read_state(systemd.reader(10), systemctl, UNIT)
        assert (stopped.loaded, stopped.active, stopped.active_state, stopped.main_pid) == (True, False, "inactive", 0)
        systemd.run_verb(systemd.reader(10), systemctl, "start", UNIT)
        started = systemd.read_state(systemd.reader(10), systemctl, UNIT)
        assert started.active and started.sub_state == "running" and started.main_pid > 0
        systemd.run_verb(systemd.reader(10), systemctl, "stop", UNIT)
        assert not systemd.read_state(systemd.reader(10), systemctl, UNIT).running
        other = systemd.read_state(systemd.reader(10), systemctl, "vllm-other.service")
        assert (other.exists, other.load_state) == (False, "not-found")
    finally:
        os.environ.pop("FAKE_SYSTEMD_DIR", None)


# ------------------------------------------------------------ run_verb()


def test_run_verb_failure_and_start_timeout_sentences(tmp_path):
    failing = fake_systemctl(tmp_path, "sys.stderr.write('Job for %s failed.\\n'); sys.exit(1)" % UNIT)
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.run_verb(systemd.reader(5), failing, "start", UNIT)
    assert str(exc.value) == "systemctl start %s failed (exit 1): Job for %s failed." % (UNIT, UNIT)
    hanging = fake_systemctl(tmp_path, "time.sleep(600)")
    with pytest.raises(systemd.SystemdError) as exc:
        systemd.run_verb(systemd.reader(1), hanging, "start", UNIT)
    assert str(exc.value) == ("systemctl start %s did not answer within 1 s and was killed (systemd may still be "
                              "starting it: see 'systemctl status %s')" % (UNIT, UNIT))
    calls = []
    systemd.run_verb(lambda argv: calls.append(argv) or (0, "", ""), "/bin/systemctl", "daemon-reload")
    assert calls == [["/bin/systemctl", "daemon-reload"]]
    with pytest.raises(ValueError):
        systemd.run_verb(lambda argv: (0, "", ""), "/bin/systemctl", "kill", UNIT)


# ------------------------------------------------------------ unit names

@pytest.mark.parametrize("given,full", [
    ("vllm-kimi-k25", "vllm-kimi-k25.service"), ("vllm-kimi-k25.service", "vllm-kimi-k25.service"),
    ("vllm@kimi", "vllm@kimi.service"), ("multi-user.target", "multi-user.target"),
    ("vllm.kimi", "vllm.kimi.service"), ("dev-disk-by\\x2dlabel.device", "dev-disk-by\\x2dlabel.device"),
])
def test_unit_names_systemd_accepts(given, full):
    assert systemd.unit_name(given) == full


@pytest.mark.parametrize("given,words", [
    ("", "is empty"), (".service", "is empty"), ("../../tmp/evil", "holds characters"),
    ("vllm kimi", "holds characters"), ("-vllm", "starts with -"), ("vllm..x", "holds '..'"),
    ("vllm@", "is a template"), ("v" * 250, "longer than the 255"), ("vllm\nx", "holds characters"),
])
def test_unit_names_systemd_refuses(given, words):
    with pytest.raises(ValueError) as exc:
        systemd.unit_name(given)
    assert words in str(exc.value)


def test_unit_stopped_reason_waits_through_auto_restart():
    assert systemd.unit_stopped_reason("u", {"ActiveState": "activating", "SubState": "auto-restart"}) is None
    assert systemd.unit_stopped_reason("u", {"ActiveState": "active", "SubState": "running"}) is None
    assert systemd.unit_stopped_reason("u", {}) is None
    assert systemd.unit_stopped_reason("u", {"LoadState": "not-found", "ActiveState": "inactive"}) == \
        "the unit u does not exist"
    assert systemd.unit_stopped_reason("u", {"ActiveState": "inactive", "Result": "success"}) == \
        "the unit u is not running (inactive, result: success)"


def test_seconds_since_start():
    assert systemd.seconds_since_start({"ExecMainStartTimestampMonotonic": 100000000}, now=160.5) == 60.5
    assert systemd.seconds_since_start({"ExecMainStartTimestampMonotonic": 0}, now=160.5) is None
    assert systemd.seconds_since_start({}, now=1.0) is None


def test_unit_state_parses_systemctl_show():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "ActiveState=active\nNRestarts=2\nMainPID=77\nInvocationID=ab\nExecMainStartTimestampMonotonic=9\n", ""

    state = systemd.unit_state(run, "/bin/systemctl", "v.service")
    assert state == {"ActiveState": "active", "NRestarts": 2, "MainPID": 77, "InvocationID": "ab",
                     "ExecMainStartTimestampMonotonic": 9}
    assert calls[0][:2] == ["/bin/systemctl", "show"] and calls[0][-2:] == ["--", "v.service"]
    assert systemd.unit_state(lambda argv: (1, "", "no bus"), "/bin/systemctl", "v.service") == {}
