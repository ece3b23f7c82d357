# SPDX-License-Identifier: GPL-3.0-or-later
"""bounded.run_bounded: a hanging command is killed with its children at the limit; output read up to a cap."""

import sys
import time

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!%s\nimport os, sys, time\n%s\n" % (sys.executable, body))
    path.chmod(0o755)
    return str(path)


def test_hanging_command_and_its_child_are_killed_at_the_limit(tmp_path):
    pidfile = tmp_path / "child.pid"
    prog = _script(tmp_path, "systemctl", (
        "import subprocess\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)'])\n"
        "open(%r, 'w').write(str(child.pid))\n"
        "print('partial', flush=True)\n"
        "time.sleep(1000)" % str(pidfile)))
    started = time.monotonic()
    rc, out, err = bounded.run_bounded([prog, "show", "--property=ActiveState", "--", "vllm-kimi-k25.service"], 0.8)
    assert time.monotonic() - started < 5
    assert rc == bounded.TIMEOUT_RC
    assert err == "systemctl show vllm-kimi-k25.service did not answer within 0.8 s and was killed"
    assert out == "partial\n"
    assert bounded.timed_out(rc, err)
    assert bounded.command_failure([prog, "show"], rc, err) == err
    child = int(pidfile.read_text())
    for dummy in range(100):
        try:
            with open("/proc/%d/stat" % child) as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
        except OSError:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the child of the hanging command still runs")


def test_output_read_up_to_the_cap_keeping_the_end(tmp_path):
    prog = _script(tmp_path, "journalctl", "sys.stdout.write('x' * 100000 + 'END\\n'); sys.stderr.write('e' * 50000)")
    rc, out, err = bounded.run_bounded([prog], 5, max_output=1000)
    assert rc == 0
    assert len(out) == 1000 and out.endswith("END\n")
    assert len(err) == 1000


def test_odd_bytes_kept_as_run_command_gives_them(tmp_path):
    prog = _script(tmp_path, "journalctl", "sys.stdout.buffer.write(b'dump\\xff.pt\\n'); sys.exit(3)")
    rc, out, err = bounded.run_bounded([prog], 5)
    assert rc == 3 and out == "dump\udcff.pt\n"
    msg = bounded.command_failure([prog, "stop", "--", "u.service"], rc, "no\udcffpe\n")
    assert msg == "journalctl stop u.service failed (exit 3): no\\xffpe"
    msg.encode("utf-8")


def test_missing_program_and_shell_strings():
    rc, out, err = bounded.run_bounded(["/nonexistent/systemctl", "show"], 5)
    assert rc == 127 and "could not be run" in err
    with pytest.raises(TypeError):
        bounded.run_bounded("systemctl show x", 5)


def test_runner_uses_what_is_left_of_the_deadline(tmp_path):
    now = [0.0]
    deadline = bounded.Deadline(10, clock=lambda: now[0])
    prog = _script(tmp_path, "systemctl", "time.sleep(1000)")
    now[0] = 9.5
    started = time.monotonic()
    rc, out, err = bounded.runner(30, deadline=deadline)([prog, "show"])
    assert time.monotonic() - started < 3
    assert err == "systemctl show did not answer within 0.5 s and was killed"
    now[0] = 10
    with pytest.raises(bounded.DeadlinePassed) as exc:
        deadline.check("the unit was read")
    assert str(exc.value) == "the time limit of 10 s (timeout) passed before the unit was read"


def test_stdin_text_working_directory_and_the_head_of_stdout(tmp_path):
    """What the uv lookup needs: text on stdin, a directory of its own, the first bytes of a flood of stdout."""
    prog = [sys.executable, "-c", "import os, sys; sys.stdout.write(sys.stdin.read() + os.getcwd() + 'x' * 100000)"]
    rc, out, err = bounded.run_bounded(prog, 20, max_output=4096, stdin="vllm==0.33.0\n", cwd=str(tmp_path),
                                       stdout_head=True)
    assert rc == 0 and err == ""
    assert out.startswith("vllm==0.33.0\n" + str(tmp_path)) and len(out) == 4096


def test_a_program_that_cannot_start_is_told_apart_from_its_own_exit_127(tmp_path):
    rc, out, err = bounded.run_bounded([str(tmp_path / "missing")], 5)
    assert bounded.not_started(rc, err) and "could not be run" in err
    rc, out, err = bounded.run_bounded([sys.executable, "-c", "import sys; sys.exit(127)"], 5)
    assert rc == 127 and not bounded.not_started(rc, err)
