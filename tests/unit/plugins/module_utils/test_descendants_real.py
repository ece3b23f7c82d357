# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuhealth.descendants against a real process tree: a child that spawned a grandchild, both running a python whose
name holds spaces and parentheses (``/proc/<pid>/stat`` writes the name in parentheses before the fields, so a name
with ``) b (`` in it is where a parse that takes the wrong parenthesis or the wrong field goes astray)."""

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import gpuhealth

NAME = "a) b (c"
CHILD = """
import subprocess, sys
grandchild = subprocess.Popen([sys.argv[1], "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
print(grandchild.pid, flush=True)
sys.stdin.read()
grandchild.stdin.close()
grandchild.wait(30)
"""


@pytest.fixture
def tree(tmp_path):
    """(child pid, grandchild pid) of a real tree, both named NAME; both end when the test does."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc")
    python = tmp_path / NAME
    os.symlink(os.path.realpath(sys.executable), str(python))
    child = subprocess.Popen([str(python), "-c", CHILD, str(python)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    grandchild = None
    try:
        grandchild = int(child.stdout.readline())
        yield child.pid, grandchild
    finally:
        child.stdin.close()
        child.wait(30)
        child.stdout.close()
        if grandchild is not None:
            # (the child ends it; a grandchild still there after the child's wait would be a leak: end it and say so)
            deadline = time.monotonic() + 10
            while os.path.exists("/proc/%d" % grandchild) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not os.path.exists("/proc/%d/cmdline" % grandchild) or not open(
                "/proc/%d/cmdline" % grandchild, "rb").read(), "the grandchild outlived the test"


def test_the_descendants_of_a_real_tree_whose_name_holds_parentheses(tree):
    child, grandchild = tree
    for pid in (child, grandchild):
        with open("/proc/%d/stat" % pid, "rb") as handle:
            assert handle.read().startswith(b"%d (%s) " % (pid, NAME.encode())), "the name is not the one wanted"
    assert gpuhealth.descendants(child) == {child, grandchild}
    assert gpuhealth.descendants(grandchild) == {grandchild}
    mine = gpuhealth.descendants(os.getpid())
    assert {os.getpid(), child, grandchild} <= mine
    assert gpuhealth.allowed_pids(pids=[7], parent_pid=child) == {7, child, grandchild}
