# SPDX-License-Identifier: GPL-3.0-or-later
"""The reinstall role's decisions: what to stage, the newest staged environment, what cleanup removes."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.reinstall import (
    reinstall_newest, reinstall_plan, reinstall_to_remove)

TARGET = "0.16.0rc2.dev344+gea5f903f8"
ENVS = "/opt/vllm/envs"
CURRENT = ENVS + "/vllm-0.16.0rc2.dev344_gea5f903f8-20260301T101500Z"
EARLIER = ENVS + "/vllm-0.16.0rc2.dev344_gea5f903f8-20260228T090000Z"
NEW = ENVS + "/vllm-0.16.0rc2.dev344_gea5f903f8-20260302T120000Z"
PRISTINE = {"changed": False, "pristine": True, "version": TARGET}
MODIFIED = {"changed": False, "pristine": False, "version": TARGET}
OLDER = {"changed": False, "pristine": True, "version": "0.15.1"}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}

PLAN_CASES = {
    # name: (current check, reuse check, reuse env, force) -> (action, env)
    "current pristine at the target": (PRISTINE, SKIPPED, "", False, "none", CURRENT),
    "current pristine, forced": (PRISTINE, SKIPPED, "", True, "build", NEW),
    "current modified, nothing staged earlier": (MODIFIED, SKIPPED, "", False, "build", NEW),
    "current modified, a pristine one staged earlier": (MODIFIED, PRISTINE, EARLIER, False, "reuse", EARLIER),
    "current modified, the one staged earlier modified too": (MODIFIED, MODIFIED, EARLIER, False, "build", NEW),
    "current on another version, earlier one on the target": (OLDER, PRISTINE, EARLIER, False, "reuse", EARLIER),
    "earlier one pristine but on another version": (MODIFIED, OLDER, EARLIER, False, "build", NEW),
    "earlier one pristine, forced": (MODIFIED, PRISTINE, EARLIER, True, "build", NEW),
    "no current environment (check skipped)": (SKIPPED, SKIPPED, "", False, "build", NEW),
    "a check that failed to run": ({"failed": True, "msg": "no such venv"}, None, "", False, "build", NEW),
    "a pristine check without a reuse path is not reused": (MODIFIED, PRISTINE, "", False, "build", NEW),
}


@pytest.mark.parametrize("name", sorted(PLAN_CASES))
def test_plan(name):
    current, reuse, reuse_env, force, action, env = PLAN_CASES[name]
    plan = reinstall_plan(current, TARGET, force=force, current_env=CURRENT, reuse_check=reuse, reuse_env=reuse_env,
                          new_env=NEW)
    assert plan == {"action": action, "env": env, "needed": action != "none"}


def test_plan_compares_the_version_exactly():
    # a local version is not the same build as its public part
    assert reinstall_plan(dict(PRISTINE, version="0.16.0rc2.dev344"), TARGET)["action"] == "build"
    assert reinstall_plan(PRISTINE, TARGET)["needed"] is False


@pytest.mark.parametrize("target", ["", None, "  "])
def test_plan_without_a_target_says_what_is_missing(target):
    with pytest.raises(AnsibleFilterError, match="needs the target version .reinstall_target_version from resolve.yml"):
        reinstall_plan(PRISTINE, target)


def test_plan_refuses_a_force_that_is_not_a_bool():
    # 'false' as text would read as true in Python: the role passes reinstall_force | bool
    with pytest.raises(AnsibleFilterError, match="force must be true or false, got 'false'"):
        reinstall_plan(PRISTINE, TARGET, force="false")


NEWEST_CASES = {
    "newest by the time in the name": ([EARLIER, NEW, CURRENT], [], NEW),
    "the current one is never the candidate": ([EARLIER, NEW], [NEW], EARLIER),
    "only the current one": ([CURRENT], [CURRENT], ""),
    "nothing staged": ([], [CURRENT], ""),
    "no find result": (None, [CURRENT], ""),
}


@pytest.mark.parametrize("name", sorted(NEWEST_CASES))
def test_newest(name):
    paths, exclude, expected = NEWEST_CASES[name]
    assert reinstall_newest(paths, exclude=exclude) == expected


def _env(version, stamp):
    return "%s/vllm-%s-%s" % (ENVS, version, stamp)


# staged environments of several versions: the time in the name orders them, not the version
A = _env("0.15.1", "20260101T000000Z")
B = _env("0.16.0", "20260201T000000Z")
C = _env("0.15.1", "20260215T000000Z")
D = _env("0.16.1", "20260301T000000Z")

REMOVE_CASES = {
    "keep 2 of 4, oldest removed first": ([B, D, A, C], 2, [], [B, A]),
    "keep 0 removes all but the protected": ([A, B, C, D], 0, [D, B], [C, A]),
    "keep more than there are": ([A, B], 5, [], []),
    "protected ones beyond keep stay": ([A, B, C, D], 1, [A, "", None], [C, B]),
    "keep as text (from the inventory)": ([A, B, C, D], "3", [], [A]),
    "nothing found": ([], 2, [A], []),
    "no find result": (None, 2, [], []),
}


@pytest.mark.parametrize("name", sorted(REMOVE_CASES))
def test_to_remove(name):
    paths, keep, protect, expected = REMOVE_CASES[name]
    assert reinstall_to_remove(paths, keep, protect=[p for p in protect if p is not None]) == expected


@pytest.mark.parametrize("keep, message", [(-1, "must be 0 or more, got -1"), ("two", "must be a whole number, got 'two'")])
def test_to_remove_refuses_a_keep_that_is_not_a_count(keep, message):
    with pytest.raises(AnsibleFilterError, match="reinstall_keep " + message):
        reinstall_to_remove([A, B], keep)


def test_a_path_list_is_required():
    with pytest.raises(AnsibleFilterError, match="expects a list of environment paths, got str"):
        reinstall_to_remove(A, 1)
