# SPDX-License-Identifier: GPL-3.0-or-later
"""The uv_resolve lookup's bounds: a deadline that kills uv's process group, capped output, refused values."""

import os
import stat
import sys
import time

import pytest

from ansible_collections.gpufleet.vllm.plugins.lookup import uv_resolve as ur


def fake_uv(tmp_path, body):
    path = tmp_path / "uv"
    path.write_text("#!%s\nimport os, subprocess, sys, time\n%s" % (sys.executable, body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().split(")")[-1].split()[0] != "Z"


def test_a_hung_uv_is_killed_with_its_children_at_the_timeout(tmp_path):
    pidfile = tmp_path / "child"
    uv = fake_uv(tmp_path, """p = subprocess.Popen(['sleep', '300'])
open(%r, 'w').write(str(p.pid))
sys.stdout.close()
sys.stderr.close()
time.sleep(300)
""" % str(pidfile))
    started = time.monotonic()
    with pytest.raises(ur.ResolveError) as err:
        ur.resolve("vllm", index_url="http://127.0.0.1:9/simple", uv=uv, timeout=1)
    assert time.monotonic() - started < 4
    assert err.value.kind == "unreachable"
    assert "took longer than 1 seconds (timeout), so uv was stopped" in err.value.message
    end = time.monotonic() + 3
    while alive(int(pidfile.read_text())) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(int(pidfile.read_text()))


def test_a_flood_of_output_is_read_only_up_to_the_caps(tmp_path):
    uv = fake_uv(tmp_path, """sys.stdin.read()
sys.stdout.write('vllm==0.33.0\\n' + '#' * (5 * 1024 * 1024))
sys.stderr.write('warning: x\\n' * 500000 + 'error: the last words\\n')
""")
    rc, stdout, stderr = ur._run([uv], "vllm\n", dict(os.environ), 20)
    assert rc == 0
    assert len(stdout) == ur.STDOUT_CAP and stdout.startswith("vllm==0.33.0\n")
    assert len(stderr) <= ur.STDERR_TAIL and stderr.endswith("error: the last words\n")
    assert ur.resolve("vllm", uv=uv, timeout=20) == "0.33.0"


def never(*args):
    raise AssertionError("uv must not run")


@pytest.mark.parametrize("kwargs,words", [
    ({"index_url": "--no-index"}, "index_url '--no-index' starts with '-' and would be read as an option of uv"),
    ({"extra_index_urls": ["https://ok/simple", "-x"]}, "extra_index_urls item '-x' starts with '-'"),
    ({"find_links": ["/wheels\n--no-index"]}, "find_links item '/wheels\\n--no-index' holds a control character"),
    ({"python_version": "3.12 --foo"}, "python_version '3.12 --foo' is not a Python version such as 3.12"),
    ({"python_platform": "-linux"}, "python_platform '-linux' starts with '-'"),
    ({"python_platform": "linux x"}, "python_platform 'linux x' is not a platform"),
    ({"timeout": 0}, "timeout 0 is not a whole number of seconds of at least 1"),
    ({"environment": {"BAD NAME": "1"}}, "environment variable name 'BAD NAME' is not a name"),
    ({"environment": {"UV_X": "a\x00b"}}, "environment variable UV_X holds a NUL character"),
    ({"uv": "--version"}, "uv '--version' starts with '-'"),
])
def test_values_that_would_become_options_are_refused_before_uv_runs(kwargs, words):
    with pytest.raises(ur.ResolveError) as err:
        ur.resolve("vllm", runner=never, **kwargs)
    assert err.value.kind == "bad_input"
    assert words in err.value.message and err.value.message.endswith("nothing was run.")
