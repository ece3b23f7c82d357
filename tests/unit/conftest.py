# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the collection importable as ansible_collections.gpufleet.vllm.

The unit tests import plugins by their collection path. This puts a link
``<repo>/.cache/collections/ansible_collections/gpufleet/vllm -> <repo>``
on sys.path (scripts/bootstrap.sh creates the same link for ansible).
"""

import os
import shutil
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpufleet", "vllm")

if not os.path.islink(LINK) and not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.join("..", "..", "..", ".."), LINK)

if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# tests/unit/helpers.py, importable as ``helpers``
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# (after HERE is on sys.path) no process a test starts outlives the session: leakcheck.py; and the fake systemd's
# units a test started are stopped at its end: fakesystemd.py
from leakcheck import no_process_outlives_the_suite  # noqa: E402,F401 pylint: disable=unused-import,wrong-import-position
import fakesystemd  # noqa: E402 pylint: disable=wrong-import-position


@pytest.fixture(autouse=True)
def fake_systemd_units_end_with_their_test():
    """Stop every unit of a fake systemd a test set up (fakesystemd.install) and started, at the test's end, whatever
    the test's own teardown stopped: a supervisor and its server, its whole process group, bounded."""
    before = set(fakesystemd.STATE_DIRS)
    yield
    for state_dir in sorted(set(fakesystemd.STATE_DIRS) - before):
        fakesystemd.stop_all(state_dir)
        fakesystemd.STATE_DIRS.discard(state_dir)


@pytest.fixture(scope="session")
def lib_dir(tmp_path_factory):
    """The fake NVML library (tests/sim/fakenvml), built once per test run."""
    pytest.importorskip("pynvml")
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        pytest.skip("no C compiler to build the fake NVML library")
    from helpers import load_source
    build = load_source("fakenvml_build_for_tests", "tests", "sim", "fakenvml", "build.py")
    out = tmp_path_factory.mktemp("fakenvml")
    build.build(str(out))
    return str(out)


@pytest.fixture
def state_file(tmp_path):
    """A fake NVML state file path of the test's own (not created)."""
    return str(tmp_path / "nvml" / "state")
