# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SM120 decision (module_utils/sm120/policy.py) as a table of cases (the sm120_config module runs it: its own tests)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import policy as sm120

DIRS = ["/shared/kimi-k2.5-nvfp4"]
BLACKWELL = {"available": True, "sm120": True, "compute_capabilities": ["12.0"]}
H100 = {"available": True, "sm120": False, "compute_capabilities": ["9.0"]}
MIXED = {"available": True, "sm120": True, "compute_capabilities": ["9.0", "12.0"]}
NO_GPU = {"available": True, "sm120": False, "compute_capabilities": []}
UNREADABLE = {"available": False, "sm120": False, "compute_capabilities": []}


# ------------------------------------------------------------------ the policy of the role's switches


@pytest.mark.parametrize("strip, force, policy", [
    (True, False, "auto"),
    (True, True, "strip"),
    (False, False, "keep"),
    (False, True, "keep"),  # the policy switch wins over force
])
def test_policy_of_the_switches(strip, force, policy):
    assert sm120.policy_of(strip, force) == policy


@pytest.mark.parametrize("policy, dirs, detect, needed", [
    ("auto", DIRS, True, True),
    ("auto", DIRS, False, False),
    ("auto", [], True, False),
    ("strip", DIRS, True, False),
    ("keep", DIRS, True, False),
])
def test_gpus_are_read_only_when_the_decision_needs_them(policy, dirs, detect, needed):
    assert sm120.read_gpus(policy, dirs, detect) is needed


# ------------------------------------------------------------------ every branch of the decision

CASES = [
    # (case, decide() keyword arguments, action, sm120, words of the reason)
    ("policy off", dict(policy="keep", gpus=BLACKWELL), "skip", True,
     "fleet_strip_kv_cache_keys is false: the KV-cache quantization keys are kept (for vLLM builds that run "
     "an FP8 KV cache on SM120 through the Triton MLA backend)."),
    ("policy off, GPUs unknown", dict(policy="keep"), "skip", None, "fleet_strip_kv_cache_keys is false"),
    ("no directory", dict(policy="auto", model_dirs=[], gpus=H100), "skip", False,
     "fleet_model_dirs is empty: no model directory to check."),
    ("forced on H100", dict(policy="strip", gpus=H100), "apply", False,
     "fleet_strip_kv_cache_keys_force is true: the KV-cache quantization keys are removed whatever the GPUs report."),
    ("forced, GPUs unknown", dict(policy="strip", detect=False), "apply", None, "fleet_strip_kv_cache_keys_force is true"),
    ("SM120", dict(policy="auto", gpus=BLACKWELL), "apply", True,
     "The GPUs report compute capability 12.0 (SM120): the FP8 KV-cache quantization keys are removed."),
    ("one SM120 among others", dict(policy="auto", gpus=MIXED), "apply", True,
     "The GPUs report compute capability 9.0, 12.0 (SM120)"),
    ("H100", dict(policy="auto", gpus=H100), "skip", False,
     "No GPU reports compute capability 12.x (found: 9.0): the model configs are left as they are. "
     "Set fleet_strip_kv_cache_keys_force: true to remove the keys anyway."),
    ("NVML answers, no GPU", dict(policy="auto", gpus=NO_GPU), "skip", False, "(found: no GPU)"),
    ("check mode before the host tools", dict(policy="auto", check_mode=True, tools_ready=False), "preview", None,
     "Check mode on a host without the host tools venv: the GPUs cannot be read yet, so this shows what would change "
     "if they are SM120 (a real run installs the tools and reads the GPUs first)."),
    ("check mode with the host tools, NVML failed", dict(policy="auto", gpus=UNREADABLE, check_mode=True,
                                                         tools_ready=True, nvml_error="Driver Not Loaded"),
     "skip", None, "The GPUs could not be read through NVML (Driver Not Loaded)"),
    ("NVML failed", dict(policy="auto", gpus=UNREADABLE, tools_ready=True, nvml_error="Driver Not Loaded"), "skip",
     None, "The GPUs could not be read through NVML (Driver Not Loaded): the model configs are left as they are. "
           "Fix NVML, or set fleet_strip_kv_cache_keys_force: true to remove the keys without detection."),
    ("host tools missing, real run", dict(policy="auto"), "skip", None,
     "The GPUs could not be read through NVML (no answer)"),
    ("no detection, no fact", dict(policy="auto", detect=False), "skip", None,
     "sm120_config_detect is false and no gpufleet_gpus fact was gathered: the model configs are left as they are. "
     "Set fleet_strip_kv_cache_keys_force: true to remove the keys without detection."),
    ("no detection, fact from earlier", dict(policy="auto", detect=False, gpus=BLACKWELL), "apply", True, "12.0"),
    ("no detection in check mode previews nothing", dict(policy="auto", detect=False, check_mode=True), "skip", None,
     "sm120_config_detect is false"),
]


@pytest.mark.parametrize("case, kwargs, action, is_sm120, words", CASES, ids=[c[0] for c in CASES])
def test_decision(case, kwargs, action, is_sm120, words):
    kwargs = dict(kwargs)
    decision = sm120.decide(kwargs.pop("policy"), **dict(dict(model_dirs=DIRS), **kwargs))
    assert decision["action"] == action, decision
    assert decision["sm120"] is is_sm120
    assert words in decision["reason"]


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="policy must be one of auto, strip, keep"):
        sm120.decide("sometimes")


@pytest.mark.parametrize("policy, gpus, drift", [
    ("auto", BLACKWELL, True),
    ("auto", H100, False),
    ("auto", UNREADABLE, False),
    ("strip", H100, True),
    ("keep", BLACKWELL, False),
])
def test_the_audit_asks_the_same_decision(policy, gpus, drift):
    assert sm120.strips(policy, gpus) is drift


# ------------------------------------------------------------------ the table of vLLM builds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def _yaml(*path):
    with open(os.path.join(REPO, *path)) as handle:
        return yaml.safe_load(handle)


DEFAULT_BUILDS = _yaml("roles", "fleet", "defaults", "main.yml")["fleet_sm120_fp8_kv_cache_builds"]
SIM_BUILDS = _yaml("tests", "sim", "inventory", "group_vars", "vllm_fleet.yml")["fleet_sm120_fp8_kv_cache_builds"]
TABLE = [
    {"versions": "<0.19.0", "fp8_kv_cache_on_sm120": False, "note": "no FP8 MLA on SM120"},
    {"versions": ">=0.19.0", "fp8_kv_cache_on_sm120": True, "note": "Triton MLA FP8"},
]

BUILD_CASES = [
    # (case, decide() keyword arguments, action, build_row index, words of the reason, summary)
    ("a build that runs FP8 KV on SM120 keeps the keys", dict(gpus=BLACKWELL, build="0.33.0"), "skip", 1,
     'vLLM 0.33.0 runs an FP8 KV cache on SM120 (fleet_sm120_fp8_kv_cache_builds[1] ">=0.19.0": Triton MLA FP8): '
     "the KV-cache quantization keys are kept.",
     'keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[1] ">=0.19.0"'),
    ("a nightly after the release", dict(gpus=BLACKWELL, build="0.33.1.dev7+g1a2b3c4.cu130"), "skip", 1,
     "vLLM 0.33.1.dev7+g1a2b3c4.cu130 runs an FP8 KV cache on SM120", None),
    ("kept even when forced", dict(policy="strip", gpus=H100, build="0.19.0"), "skip", 1, "keys are kept", None),
    ("kept with the GPUs unknown", dict(build="0.19.0"), "skip", 1, "keys are kept", None),
    ("an older build on SM120: removed, naming the row", dict(gpus=BLACKWELL, build="0.17.1"), "apply", 0,
     "The GPUs report compute capability 12.0 (SM120): the FP8 KV-cache quantization keys are removed. vLLM 0.17.1 "
     'runs no FP8 KV cache on SM120 (fleet_sm120_fp8_kv_cache_builds[0] "<0.19.0": no FP8 MLA on SM120).',
     'keys removed: SM120, vLLM 0.17.1, fleet_sm120_fp8_kv_cache_builds[0] "<0.19.0"'),
    ("a pre-release of the first good build is in no row", dict(gpus=BLACKWELL, build="0.19.0rc1"), "apply", None,
     "vLLM 0.19.0rc1: no row of fleet_sm120_fp8_kv_cache_builds takes it.", "keys removed: SM120, vLLM 0.19.0rc1 in no row"),
    ("an older build forced", dict(policy="strip", gpus=H100, build="0.17.1"), "apply", 0,
     "fleet_strip_kv_cache_keys_force is true", 'keys removed: forced, vLLM 0.17.1, fleet_sm120_fp8_kv_cache_builds[0]'),
    ("an older build on H100", dict(gpus=H100, build="0.17.1"), "skip", 0, "No GPU reports compute capability 12.x",
     "keys left as they are: no SM120 GPU"),
    ("build unknown", dict(gpus=BLACKWELL), "apply", None,
     "The vLLM build is unknown, so fleet_sm120_fp8_kv_cache_builds was not read.",
     "keys removed: SM120, vLLM build unknown"),
    ("a build that is no version", dict(gpus=BLACKWELL, build="nightly"), "apply", None,
     "vLLM 'nightly' is not a PEP 440 version", None),
    ("the policy switch wins over the table", dict(policy="keep", gpus=BLACKWELL, build="0.17.1"), "skip", 0,
     "fleet_strip_kv_cache_keys is false", "keys kept: fleet_strip_kv_cache_keys is false"),
    ("check mode previews for an older build", dict(check_mode=True, build="0.17.1"), "preview", 0,
     'runs no FP8 KV cache on SM120 (fleet_sm120_fp8_kv_cache_builds[0]', None),
    ("no table", dict(gpus=BLACKWELL, build="0.33.0", builds=[]), "apply", None,
     "vLLM 0.33.0: no row of fleet_sm120_fp8_kv_cache_builds takes it.", None),
]


@pytest.mark.parametrize("case, kwargs, action, index, words, summary", BUILD_CASES, ids=[c[0] for c in BUILD_CASES])
def test_decision_by_build(case, kwargs, action, index, words, summary):
    kwargs = dict(dict(policy="auto", model_dirs=DIRS, builds=TABLE), **kwargs)
    decision = sm120.decide(kwargs.pop("policy"), **kwargs)
    assert decision["action"] == action, decision
    assert (decision["build_row"] or {}).get("index") == index
    assert words in decision["reason"], decision["reason"]
    if summary:
        assert decision["summary"].startswith(summary), decision["summary"]


@pytest.mark.parametrize("build, needed", [("0.33.0", False), ("0.17.1", True), ("", True), (None, True)])
def test_the_gpus_are_not_read_for_a_build_that_keeps_the_keys(build, needed):
    assert sm120.read_gpus("auto", DIRS, True, build, TABLE) is needed


# the default table (roles/fleet/defaults/main.yml), from vLLM's record: PR 34597 released in 0.18.0, the MLA FP8
# KV-scale fix PR 37054 in 0.19.0
@pytest.mark.parametrize("build, index, kept", [
    ("0.16.0", 0, False),
    ("0.17.1", 0, False),
    ("0.18.0", 1, False),
    ("0.18.1", 1, False),
    ("0.19.0rc1", None, False),  # a pre-release of 0.19.0 is in no row: removed, the safe side
    ("0.19.0", 2, True),
    ("0.33.0", 2, True),
    ("0.33.1.dev7", 2, True),
])
def test_the_default_table(build, index, kept):
    assert sm120.builds_problems(DEFAULT_BUILDS) == []
    decision = sm120.decide("auto", model_dirs=DIRS, gpus=BLACKWELL, build=build, builds=DEFAULT_BUILDS)
    assert (decision["build_row"] or {}).get("index") == index
    assert decision["action"] == ("skip" if kept else "apply")


@pytest.mark.parametrize("build", ["0.33.0", "0.33.1.dev7"])
def test_the_simulated_fleet_keeps_removing_the_keys(build):
    """The simulated fleet runs 0.33.0 and the nightly 0.33.1.dev7, which the default table keeps the keys for; its
    inventory sets a table of its own so the molecule scenarios still see the keys removed on SM120 and audited as
    drift (both outcomes, by one build, with the two tables)."""
    assert sm120.builds_problems(SIM_BUILDS) == []
    kept = sm120.decide("auto", model_dirs=DIRS, gpus=BLACKWELL, build=build, builds=DEFAULT_BUILDS)
    removed = sm120.decide("auto", model_dirs=DIRS, gpus=BLACKWELL, build=build, builds=SIM_BUILDS)
    assert kept["action"] == "skip" and removed["action"] == "apply"
    assert "fleet_sm120_fp8_kv_cache_builds[0]" in removed["reason"]
    assert sm120.strips("auto", BLACKWELL, build, SIM_BUILDS) is True
    assert sm120.strips("auto", BLACKWELL, build, DEFAULT_BUILDS) is False


@pytest.mark.parametrize("builds, words", [
    ("all", "must be a list of rows"),
    ([{"versions": ">=0.19", "fp8_kv_cache_on_sm120": True}] * 65, "65 rows; at most 64"),
    (["row"], "fleet_sm120_fp8_kv_cache_builds[0] must be a mapping"),
    ([{"versions": "0.19", "fp8_kv_cache_on_sm120": True}], "[0].versions must be a PEP 440 version specifier"),
    ([{"fp8_kv_cache_on_sm120": True}], "[0].versions must be a PEP 440 version specifier"),
    ([{"versions": ">=0.19", "fp8_kv_cache_on_sm120": "yes"}], "[0].fp8_kv_cache_on_sm120 must be true or false"),
    ([{"versions": ">=0.19", "fp8_kv_cache_on_sm120": True, "note": "two\nlines"}], "[0].note must be one line"),
    ([{"versions": ">=0.19", "fp8_kv_cache_on_sm120": True, "note": "x" * 241}], "at most 240 characters"),
    ([{"versions": ">=0.19", "fp8_kv_cache_on_sm120": True, "version": "0.19"}], "unknown keys: version"),
])
def test_bad_tables_are_named(builds, words):
    problems = sm120.builds_problems(builds)
    assert any(words in p for p in problems), problems


def test_a_good_table_has_no_problem():
    assert sm120.builds_problems(TABLE) == [] and sm120.builds_problems([]) == []


# ------------------------------------------------------------------ the files and their keys


def test_the_role_defaults_become_the_model_config_files_option():
    assert sm120.files_problems(sm120.DEFAULT_FILES, sm120.DEFAULT_REQUIRED_FILES) == []
    assert sm120.module_files(sm120.DEFAULT_FILES, sm120.DEFAULT_REQUIRED_FILES) == [
        {"name": "config.json", "absent": ["**.kv_cache_scheme", "**.kv_cache_quant_algo"], "required": True},
        {"name": "hf_quant_config.json", "absent": ["quantization.kv_cache_quant_algo", "quantization.kv_cache_scheme"],
         "required": False},
    ]


@pytest.mark.parametrize("files, required, words", [
    ({}, [], "fleet_config_files must map file names relative to the model directory to lists of key paths such as "
             '"**.kv_cache_scheme"; it is empty.'),
    ({"/etc/passwd": ["root"]}, [], '"/etc/passwd" (an absolute name)'),
    ({"../other/config.json": ["**.kv_cache_scheme"]}, [], '"../other/config.json" (a name with "..")'),
    ({"sub/../../config.json": ["a"]}, [], 'a name with ".."'),
    ({"": ["a"]}, [], '"" (a file name must be a non-empty string)'),
    ({"config.json": []}, [], '"config.json" (an empty list of key paths)'),
    ({"config.json": "**.kv_cache_scheme"}, [], '"config.json" (the key paths must be a list)'),
    ({"config.json": ["**.kv_cache_scheme", ""]}, [], '"config.json" (key paths must be non-empty strings)'),
    ({"config.json": [7]}, [], "key paths must be non-empty strings"),
    ({"config.json": ["a"]}, ["config.json", "tokenizer.json"],
     'fleet_config_required_files may only name files of fleet_config_files; unknown: "tokenizer.json".'),
])
def test_bad_files_are_named(files, required, words):
    problems = sm120.files_problems(files, required)
    assert problems and words in " ".join(problems), problems


def test_every_bad_entry_is_named_at_once():
    problems = sm120.files_problems({"config.json": ["a"], "../x.json": ["a"], "y.json": []}, ["z.json"])
    assert len(problems) == 2
    assert problems[0].endswith('entries in error: "../x.json" (a name with ".."), "y.json" (an empty list of key '
                                'paths).')
    assert 'unknown: "z.json".' in problems[1]


def test_names_of_other_settings_in_the_messages():
    problems = sm120.files_problems({"../x.json": ["a"]}, ["q.json"], names=("model_keys", "model_required_files"))
    assert problems[0].startswith("model_keys must map") and problems[1].startswith("model_required_files may")


# ------------------------------------------------------------------ the role's result


def _plan(path, files, skipped=False):
    if skipped:
        return {"item": path, "skipped": True}
    return {"item": path, "changed": False, "check_mode": True, "files": files,
            "removed_count": sum(f["removed_count"] for f in files)}


CONFIG_REMOVED = {"path": "/m/a/config.json", "removed_count": 1, "skipped": None,
                  "removed": [{"key": "quantization_config.kv_cache_scheme", "value": {"num_bits": 8}}]}
HF_MISSING = {"path": "/m/a/hf_quant_config.json", "removed_count": 0, "skipped": "file does not exist",
              "removed": []}
CLEAN = {"path": "/m/b/config.json", "removed_count": 0, "skipped": None, "removed": []}
APPLY = {"action": "apply", "sm120": True, "reason": "The GPUs report compute capability 12.0 (SM120): ..."}


def test_summary_takes_the_edit_where_one_was_made_and_the_plan_elsewhere():
    plan_a = _plan("/m/a", [CONFIG_REMOVED, HF_MISSING])
    plan_b = _plan("/m/b", [CLEAN])
    edited = dict(plan_a, check_mode=False, changed=True,
                  files=[dict(CONFIG_REMOVED, backup_file="/m/a/config.json.41.2025-06-01@12:00:00~"), HF_MISSING])
    applied = [dict(edited, item=plan_a), {"item": plan_b, "skipped": True}]
    result = sm120.summarize(APPLY, False, False, [plan_a, plan_b], applied)
    assert result == {
        "action": "apply", "applied": True, "sm120": True, "forced": False, "reason": APPLY["reason"],
        "build": None, "build_row": None, "summary": "", "check_mode": False, "changed": True, "removed_count": 1,
        "dirs": [
            {"path": "/m/a", "changed": True, "removed_count": 1,
             "removed": [{"file": "/m/a/config.json", "key": "quantization_config.kv_cache_scheme",
                          "value": {"num_bits": 8}}],
             "backups": ["/m/a/config.json.41.2025-06-01@12:00:00~"], "skipped_files": ["/m/a/hf_quant_config.json"]},
            {"path": "/m/b", "changed": False, "removed_count": 0, "removed": [], "backups": [], "skipped_files": []},
        ]}
    assert sm120.report_lines(result) == [
        "removed 1 key(s) in /m/a: quantization_config.kv_cache_scheme",
        "removed 0 key(s) in /m/b: keys already absent",
    ]


def test_summary_in_check_mode_says_would_remove():
    plan_a = _plan("/m/a", [CONFIG_REMOVED])
    applied = [dict(plan_a, item=plan_a, changed=True, check_mode=True)]
    result = sm120.summarize(dict(APPLY, action="preview", sm120=None), False, False, [plan_a], applied)
    assert result["check_mode"] is True and result["changed"] is True and result["applied"] is False
    assert sm120.report_lines(result) == ["would remove 1 key(s) in /m/a: quantization_config.kv_cache_scheme"]


def test_summary_of_a_skip_has_no_directory():
    skip = {"action": "skip", "sm120": False, "reason": "No GPU reports compute capability 12.x (found: 9.0): ..."}
    result = sm120.summarize(skip, True, True, [_plan("/m/a", [], skipped=True)], [])
    assert result["dirs"] == [] and result["changed"] is False and result["removed_count"] == 0
    assert result["forced"] is True and result["check_mode"] is True and result["action"] == "skip"
    assert sm120.report_lines(result) == []
