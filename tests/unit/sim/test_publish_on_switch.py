# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/sim/publish_on_switch.py: publishes once a host's link changes, and only then; bounded by its deadline."""

import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "sim", "publish_on_switch.py")

FAKE_PODMAN = """#!/bin/sh
# podman exec CONTAINER readlink LINK -> the content of $FAKE_LINK (no file: no link)
[ "$1" = exec ] && [ "$3" = readlink ] || exit 125
[ -f "$FAKE_LINK" ] || exit 1
cat "$FAKE_LINK"
"""


@pytest.fixture
def world(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    podman = bin_dir / "podman"
    podman.write_text(FAKE_PODMAN)
    podman.chmod(0o755)
    link = tmp_path / "link"
    link.write_text("/opt/vllm/envs/old\n")
    wheel = tmp_path / "vllm-0.33.1.dev8-py3-none-any.whl"
    wheel.write_bytes(b"PK not really a wheel")
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), FAKE_LINK=str(link),
               GPUFLEET_INDEX_DIR=str(tmp_path / "index"), GPUFLEET_INDEX_ADDR="127.0.0.1")
    env.pop("GPUFLEET_INDEX_URL", None)
    return {"tmp": tmp_path, "link": link, "wheel": wheel, "env": env, "marker": tmp_path / "published.json"}


def start(world, deadline):
    return subprocess.Popen([sys.executable, SCRIPT, "--container", "rollout-2", "--link", "/opt/vllm/current",
                             "--wheel", str(world["wheel"]), "--marker", str(world["marker"]),
                             "--deadline", str(deadline)],
                            env=world["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_it_publishes_only_after_the_link_changed(world):
    proc = start(world, 60)
    time.sleep(1.5)
    # still watching: nothing published while the link stays
    assert proc.poll() is None and not world["marker"].exists()
    assert not (world["tmp"] / "index" / "nightly" / world["wheel"].name).exists()
    switched = time.time()
    world["link"].write_text("/opt/vllm/envs/new\n")
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    marker = json.loads(world["marker"].read_text())
    assert marker["before"] == "/opt/vllm/envs/old" and marker["after"] == "/opt/vllm/envs/new"
    assert switched <= marker["published_at"] <= time.time()
    assert (world["tmp"] / "index" / "nightly" / world["wheel"].name).read_bytes() == world["wheel"].read_bytes()
    assert not os.path.exists(str(world["marker"]) + ".pid")


def test_at_its_deadline_it_publishes_nothing_and_says_so(world):
    started = time.monotonic()
    proc = start(world, 2)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3 and "did not change in 2 s: nothing published" in err
    assert time.monotonic() - started < 15
    assert not world["marker"].exists() and not (world["tmp"] / "index" / "nightly").exists()


@pytest.mark.parametrize("args, words", [
    (["--container", "a;b"], "not a container name"),
    (["--link", "/opt/../etc"], "not an absolute path"),
    (["--deadline", "0"], "1 to 3600"),
])
def test_bad_arguments_are_refused(world, args, words):
    base = {"--container": "rollout-2", "--link": "/opt/vllm/current", "--wheel": str(world["wheel"]),
            "--marker": str(world["marker"]), "--deadline": "5"}
    base[args[0]] = args[1]
    argv = [item for pair in base.items() for item in pair]
    result = subprocess.run([sys.executable, SCRIPT] + argv, env=world["env"], capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 2 and words in result.stderr
