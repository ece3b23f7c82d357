# SPDX-License-Identifier: GPL-3.0-or-later
"""The reinstall role's decision: what to stage (the environments to reuse and remove: test_venvs_tables.py)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.reinstall import reinstall_plan

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
    # in its PEP 440 form, as package_integrity_info's version option compares it (what staging proved is the target)
    assert reinstall_plan(dict(PRISTINE, version="0.16.0RC2-DEV344+GEA5F903F8"), TARGET)["needed"] is False


@pytest.mark.parametrize("target", ["", None, "  "])
def test_plan_without_a_target_says_what_is_missing(target):
    with pytest.raises(AnsibleFilterError, match="needs the target version .reinstall_target_version from resolve.yml"):
        reinstall_plan(PRISTINE, target)


def test_plan_refuses_a_force_that_is_not_a_bool():
    # 'false' as text would read as true in Python: the role passes reinstall_force | bool
    with pytest.raises(AnsibleFilterError, match="force must be true or false, got 'false'"):
        reinstall_plan(PRISTINE, TARGET, force="false")


THE_LOCK = {"changed": False, "matches": True, "not_pristine": [], "fingerprint": "sha256:" + "a" * 64}
OTHER_SET = dict(THE_LOCK, matches=False, different=[{"name": "lark", "expected": "1.3.1", "found": "1.2.2"}])
DEP_EDITED = dict(THE_LOCK, not_pristine=[{"name": "lark", "version": "1.3.1", "reason": "1 modified"}])

LOCKED_CASES = {
    # name: (current fingerprint, reuse fingerprint) -> (action, env); vLLM itself pristine at the target in both
    "current holds exactly the lock": (THE_LOCK, SKIPPED, "none", CURRENT),
    "current's dependencies differ from the lock, nothing staged": (OTHER_SET, SKIPPED, "build", NEW),
    "current's dependencies differ, the earlier one holds the lock": (OTHER_SET, THE_LOCK, "reuse", EARLIER),
    "current has an edited dependency, the earlier one too": (DEP_EDITED, DEP_EDITED, "build", NEW),
    "no fingerprint of the current environment (skipped)": (SKIPPED, THE_LOCK, "reuse", EARLIER),
    "fingerprints missing altogether": (None, None, "build", NEW),
}


@pytest.mark.parametrize("name", sorted(LOCKED_CASES))
def test_locked_plan_needs_the_whole_environment_to_be_the_lock(name):
    current_fp, reuse_fp, action, env = LOCKED_CASES[name]
    plan = reinstall_plan(PRISTINE, TARGET, current_env=CURRENT, reuse_check=PRISTINE, reuse_env=EARLIER, new_env=NEW,
                          locked=True, current_fingerprint=current_fp, reuse_fingerprint=reuse_fp)
    assert plan == {"action": action, "env": env, "needed": action != "none"}


def test_unlocked_plan_ignores_the_fingerprints():
    assert reinstall_plan(PRISTINE, TARGET, current_fingerprint=OTHER_SET)["action"] == "none"


def test_plan_refuses_a_locked_that_is_not_a_bool():
    with pytest.raises(AnsibleFilterError, match="locked must be true or false"):
        reinstall_plan(PRISTINE, TARGET, locked="yes")


def test_a_dependency_accepted_as_not_pristine_upstream_does_not_force_a_build():
    # pynvvideocodec 2.0.4's RECORD does not match its own .so files: a fleet that accepts it converges
    upstream = dict(THE_LOCK, not_pristine=[{"name": "PyNvVideoCodec", "version": "2.0.4", "reason": "2 modified"}],
                    not_pristine_total=1)
    kwargs = dict(current_env=CURRENT, new_env=NEW, locked=True, current_fingerprint=upstream)
    assert reinstall_plan(PRISTINE, TARGET, **kwargs)["action"] == "build"
    assert reinstall_plan(PRISTINE, TARGET, accepted=["pynvvideocodec"], **kwargs)["action"] == "none"
    # more not pristine than the module listed: not known to be only the accepted ones
    kwargs["current_fingerprint"] = dict(upstream, not_pristine_total=11)
    assert reinstall_plan(PRISTINE, TARGET, accepted=["pynvvideocodec"], **kwargs)["action"] == "build"


def test_unaccepted_names_the_not_pristine_packages_but_the_accepted_ones():
    # (the rule reinstall_plan and vllm_envs decide with; not a filter of its own)
    from ansible_collections.gpufleet.vllm.plugins.module_utils.stageplan import unaccepted as reinstall_unaccepted
    proof = dict(THE_LOCK, not_pristine=[{"name": "PyNvVideoCodec"}, {"name": "lark"}], not_pristine_total=2)
    assert reinstall_unaccepted(proof, ["pynvvideocodec"]) == ["lark"]
    assert reinstall_unaccepted(proof, ["pynvvideocodec", "Lark"]) == []
    assert reinstall_unaccepted(dict(proof, not_pristine_total=5), ["pynvvideocodec", "lark"]) == ["(3 more than listed)"]
    assert reinstall_unaccepted({"skipped": True}) == [] and reinstall_unaccepted(None) == []
    # env_fingerprint_info's unaccepted names every one, beyond max_list: no "more than listed" guess
    complete = dict(proof, not_pristine_total=12, unaccepted=["PyNvVideoCodec", "lark"])
    assert reinstall_unaccepted(complete, ["pynvvideocodec", "lark"]) == []
    assert reinstall_unaccepted(complete, ["pynvvideocodec"]) == ["lark"]
