# SPDX-License-Identifier: GPL-3.0-or-later
"""venvs.read_envs: the environment to reuse and the ones cleanup removes, as tables.

These are the cases the filters reinstall_newest and reinstall_to_remove were
tested with before the role read the environments with vllm_envs; the same
expectations, now on real directories.
"""
import os

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import venvs

TARGET = "0.16.0rc2.dev344+gea5f903f8"
SAFE = "0.16.0rc2.dev344_gea5f903f8"
CURRENT = "vllm-%s-20260301T101500Z" % SAFE
EARLIER = "vllm-%s-20260228T090000Z" % SAFE
NEW = "vllm-%s-20260302T120000Z" % SAFE

NEWEST_CASES = {
    "newest by the time in the name": ([EARLIER, NEW, CURRENT], None, NEW),
    "the current one is never the candidate": ([EARLIER, NEW], NEW, EARLIER),
    "only the current one": ([CURRENT], CURRENT, ""),
    "nothing staged": ([], CURRENT, ""),
}

# staged environments of several versions: the time in the name orders them, not the version
A = "vllm-0.15.1-20260101T000000Z"
B = "vllm-0.16.0-20260201T000000Z"
C = "vllm-0.15.1-20260215T000000Z"
D = "vllm-0.16.1-20260301T000000Z"

REMOVE_CASES = {
    "keep 2 of 4, oldest removed first": ([B, D, A, C], 2, [], [B, A]),
    "keep 0 removes all but the protected": ([A, B, C, D], 0, [D, B], [C, A]),
    "keep more than there are": ([A, B], 5, [], []),
    "protected ones beyond keep stay": ([A, B, C, D], 1, [A, ""], [C, B]),
    "nothing found": ([], 2, [A], []),
}


def _dirs(tmp_path, names):
    top = tmp_path / "envs"
    top.mkdir()
    for name in names:
        (top / name).mkdir()
    return str(top)


@pytest.mark.parametrize("name", sorted(NEWEST_CASES))
def test_reuse(tmp_path, name):
    names, current, expected = NEWEST_CASES[name]
    top = _dirs(tmp_path, names)
    found = venvs.read_envs(top, "vllm", keep=3, target_version=TARGET,
                            current=os.path.join(top, current) if current else "")
    assert found["reuse"] == (os.path.join(top, expected) if expected else "")


@pytest.mark.parametrize("name", sorted(REMOVE_CASES))
def test_to_remove(tmp_path, name):
    names, keep, protect, expected = REMOVE_CASES[name]
    top = _dirs(tmp_path, names)
    found = venvs.read_envs(top, "vllm", keep=keep, protect=[os.path.join(top, p) if p else "" for p in protect])
    assert [env["name"] for env in found["to_remove"]] == expected


def test_no_envs_dir_is_nothing_to_reuse_or_remove(tmp_path):
    found = venvs.read_envs(str(tmp_path / "missing"), "vllm", keep=0, target_version=TARGET)
    assert (found["state"], found["reuse"], found["to_remove"]) == ("absent", "", [])
