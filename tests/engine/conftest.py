# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine stage's tests: the collection importable as ansible_collections.gpufleet.vllm, the unit tests'
helpers importable as ``helpers``, and the unit suite's leak check (no process a test starts outlives the session)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
UNIT = os.path.join(REPO, "tests", "unit")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpufleet", "vllm")

if not os.path.islink(LINK) and not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.join("..", "..", "..", ".."), LINK)
for path in (COLLECTIONS, UNIT):
    if path not in sys.path:
        sys.path.insert(0, path)

from leakcheck import no_process_outlives_the_suite  # noqa: E402,F401 pylint: disable=unused-import,wrong-import-position
