# SPDX-License-Identifier: GPL-3.0-or-later
"""The sm120_config role run by real Ansible (local connection) on model directories of a temporary tree.

One ansible-playbook run, one play per case, each keeping what the role
registered (sm120_config_result, or the failure it stopped on) in a JSON
file. The GPUs are never read here: the cases force the edit, switch the
policy off, give a gpufleet_gpus fact with detection off, or run in check
mode on a host whose host tools are not ready.
"""

import hashlib
import json
import os

import pytest

from helpers import load_source, run_plays

fixtures = load_source("gpufleet_model_fixtures_role", "tests", "sim", "model", "fixtures.py")

# the role's one task on the host (the settings, the GPUs, the decision, the plan of every directory, the edit)
TASK = "Decide and remove the KV-cache quantization keys from the model configs"

H100 = {"available": True, "sm120": False, "compute_capabilities": ["9.0"], "count": 8, "names": ["NVIDIA H100"]}

# (case, play variables, play keywords); {root} is the test's directory
CASES = [
    ("forced", {"fleet_model_dirs": ["{root}/forced/dirty", "{root}/forced/clean"],
                "fleet_strip_kv_cache_keys_force": True}, {}),
    ("forced_again", {"fleet_model_dirs": ["{root}/forced/dirty", "{root}/forced/clean"],
                      "fleet_strip_kv_cache_keys_force": True}, {}),
    ("policy_off", {"fleet_model_dirs": ["{root}/kept"], "fleet_strip_kv_cache_keys": False,
                    "fleet_strip_kv_cache_keys_force": True}, {}),
    ("preview", {"fleet_model_dirs": ["{root}/preview"], "host_tools_interpreter": "/nonexistent/python3",
                 "host_tools_ready": False}, {"check_mode": True}),
    ("h100_fact", {"fleet_model_dirs": ["{root}/h100"], "sm120_config_detect": False, "gpufleet_gpus": H100},
     {}),
    ("bad_files", {"fleet_model_dirs": ["{root}/kept"], "fleet_strip_kv_cache_keys_force": True,
                   "fleet_config_files": {"../config.json": ["**.kv_cache_scheme"]}}, {}),
    ("malformed", {"fleet_model_dirs": ["{root}/side/dirty", "{root}/side/broken"],
                   "fleet_strip_kv_cache_keys_force": True}, {}),
    # the table of builds (the fleet role's default): the rollout's target build keeps the keys, even when forced
    ("build_keeps", {"fleet_model_dirs": ["{root}/newer"], "fleet_strip_kv_cache_keys_force": True,
                     "reinstall_target_version": "0.33.1.dev7"}, {}),
    # sm120_config_build wins over the target build; an older build loses both keys in both files
    ("build_older", {"fleet_model_dirs": ["{root}/older"], "fleet_strip_kv_cache_keys_force": True,
                     "sm120_config_build": "0.17.1", "reinstall_target_version": "0.33.0"}, {}),
    ("bad_builds", {"fleet_model_dirs": ["{root}/newer"], "fleet_strip_kv_cache_keys_force": True,
                    "fleet_sm120_fp8_kv_cache_builds": [{"versions": "0.19", "fp8_kv_cache_on_sm120": True}]}, {}),
]


def both_keys_in_both_files():
    """A model directory whose config.json and hf_quant_config.json each carry both KV-cache keys."""
    config = fixtures.kimi_k25_config()
    config["quantization_config"]["kv_cache_quant_algo"] = "FP8"
    hf_quant = fixtures.modelopt_hf_quant_config()
    hf_quant["quantization"]["kv_cache_scheme"] = dict(fixtures.KV_CACHE_SCHEME)
    return {"config.json": json.dumps(config, indent=2).encode(), "hf_quant_config.json": json.dumps(hf_quant).encode()}


PLAY = """
- name: Case {name}
  hosts: localhost
  gather_facts: false
  vars: {vars}
{keywords}  tasks:
    - name: Run the role
      block:
        - name: Apply sm120_config
          ansible.builtin.include_role:
            name: gpufleet.vllm.sm120_config
        - name: Keep the result
          ansible.builtin.copy:
            content: "{{{{ sm120_config_result | to_json }}}}"
            dest: "{root}/{name}.json"
            mode: "0600"
          check_mode: false
      rescue:
        - name: Keep the failure
          ansible.builtin.copy:
            content: "{{{{ {{'task': ansible_failed_task.name, 'result': ansible_failed_result}} | to_json }}}}"
            dest: "{root}/{name}.failed.json"
            mode: "0600"
          check_mode: false
"""

BROKEN = '{\n  "architectures": ["DeepseekV3ForCausalLM"],\n  "quantization_config": {\n    "quant_method": "fp8",\n  }\n}\n'


def _tree(root):
    """path -> sha256 of every file under root."""
    found = {}
    for base, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as handle:
                found[path] = hashlib.sha256(handle.read()).hexdigest()
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("sm120"))
    for name in ("forced/dirty", "kept", "preview", "h100", "side/dirty"):
        fixtures.make_model_dir(os.path.join(root, name))
    fixtures.write_plain(os.path.join(root, "forced", "clean"), {"config.json": b'{"architectures": []}\n'})
    fixtures.write_plain(os.path.join(root, "side", "broken"), {"config.json": BROKEN.encode()})
    for name in ("newer", "older"):
        fixtures.write_plain(os.path.join(root, name), both_keys_in_both_files())
    before = _tree(root)
    plays = []
    for name, variables, keywords in CASES:
        variables = json.loads(json.dumps(variables).replace("{root}", root))
        plays.append(PLAY.format(name=name, vars=json.dumps(variables), root=root, keywords="".join(
            "  %s: %s\n" % (k, json.dumps(v)) for k, v in keywords.items())))
    run_plays("".join(plays), root)
    results = {}
    for name, _variables, _keywords in CASES:
        for suffix in (".json", ".failed.json"):
            path = os.path.join(root, name + suffix)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    results[name + suffix] = json.load(handle)
    return root, before, results


def _unchanged(runs, subdir):
    root, before, _results = runs
    prefix = os.path.join(root, subdir) + os.sep
    now = _tree(os.path.join(root, subdir))
    return now == dict((p, h) for p, h in before.items() if p.startswith(prefix))


def test_forced_run_removes_the_keys_and_reports_each_directory(runs):
    root, _before, results = runs
    result = results["forced.json"]
    assert (result["action"], result["applied"], result["forced"], result["sm120"]) == ("apply", True, True, None)
    assert result["reason"] == ("fleet_strip_kv_cache_keys_force is true: the KV-cache quantization keys are removed whatever the "
                                "GPUs report. The vLLM build is unknown, so fleet_sm120_fp8_kv_cache_builds was not read.")
    assert result["summary"] == "keys removed: forced, vLLM build unknown" and result["build"] is None
    assert result["changed"] is True and result["removed_count"] == 2 and result["check_mode"] is False
    dirty, clean = result["dirs"]
    assert dirty["path"] == root + "/forced/dirty" and dirty["changed"] is True
    assert sorted((os.path.basename(r["file"]), r["key"]) for r in dirty["removed"]) == [
        ("config.json", "quantization_config.kv_cache_scheme"), ("hf_quant_config.json", "quantization.kv_cache_quant_algo")]
    assert len(dirty["backups"]) == 2 and all(os.path.exists(b) for b in dirty["backups"])
    assert clean == {"path": root + "/forced/clean", "changed": False, "removed_count": 0, "removed": [],
                     "backups": [], "skipped_files": [root + "/forced/clean/hf_quant_config.json"]}
    with open(os.path.join(root, "forced", "dirty", "config.json"), encoding="utf-8") as handle:
        assert "kv_cache_scheme" not in handle.read()


def test_second_forced_run_changes_nothing(runs):
    result = runs[2]["forced_again.json"]
    assert result["action"] == "apply" and result["changed"] is False and result["removed_count"] == 0
    assert [d["removed_count"] for d in result["dirs"]] == [0, 0]


def test_policy_off_keeps_the_keys_even_when_forced(runs):
    result = runs[2]["policy_off.json"]
    assert result["action"] == "skip" and result["applied"] is False and result["forced"] is True
    assert result["reason"].startswith("fleet_strip_kv_cache_keys is false: the KV-cache quantization keys "
                                       "are kept")
    assert result["dirs"] == [] and result["changed"] is False
    assert _unchanged(runs, "kept")


def test_check_mode_without_host_tools_previews_and_writes_nothing(runs):
    result = runs[2]["preview.json"]
    assert result["action"] == "preview" and result["sm120"] is None and result["applied"] is False
    assert result["reason"].startswith("Check mode on a host without the host tools venv")
    assert result["check_mode"] is True and result["changed"] is True and result["removed_count"] == 2
    assert _unchanged(runs, "preview")


def test_gpus_that_are_not_sm120_change_nothing_and_say_why(runs):
    result = runs[2]["h100_fact.json"]
    assert result["action"] == "skip" and result["sm120"] is False and result["dirs"] == []
    assert "(found: 9.0)" in result["reason"] and "fleet_strip_kv_cache_keys_force" in result["reason"]
    assert _unchanged(runs, "h100")


def test_bad_file_names_fail_before_anything_is_read(runs):
    failure = runs[2]["bad_files.failed.json"]
    assert failure["task"] == TASK
    assert '"../config.json" (a name with "..")' in failure["result"]["msg"]
    assert "bad_files.json" not in runs[2]


def test_malformed_config_fails_the_plan_naming_line_and_column_and_nothing_is_written(runs):
    root = runs[0]
    failure = runs[2]["malformed.failed.json"]
    # one task plans every directory before writing any: the failure names the directory, file, line and column
    assert failure["task"] == TASK
    failed = failure["result"]
    assert failed["failed"] is True and failed["changed"] is False
    assert failed["model_dir"] == root + "/side/broken"
    assert failed["line"] == 5 and failed["column"] == 3, failed["msg"]
    assert root + "/side/broken/config.json" in failed["msg"]
    assert "No file was changed in any of the 2 model directories" in failed["msg"]
    assert _unchanged(runs, "side")


def test_a_target_build_that_runs_fp8_kv_cache_on_sm120_keeps_the_keys_even_when_forced(runs):
    result = runs[2]["build_keeps.json"]
    assert result["action"] == "skip" and result["applied"] is False and result["forced"] is True
    assert result["build"] == "0.33.1.dev7" and result["build_row"]["index"] == 2
    assert result["reason"].startswith('vLLM 0.33.1.dev7 runs an FP8 KV cache on SM120 (fleet_sm120_fp8_kv_cache_builds[2] '
                                       '">=0.19.0": Triton MLA FP8 KV cache (vLLM PR 34597')
    assert result["reason"].endswith("): the KV-cache quantization keys are kept.")
    assert result["summary"] == 'keys kept: vLLM 0.33.1.dev7, fleet_sm120_fp8_kv_cache_builds[2] ">=0.19.0"'
    assert result["dirs"] == [] and result["changed"] is False
    assert _unchanged(runs, "newer")


def test_an_older_build_loses_both_keys_in_both_files_naming_its_row(runs):
    root = runs[0]
    result = runs[2]["build_older.json"]
    assert result["action"] == "apply" and result["build"] == "0.17.1" and result["build_row"]["index"] == 0
    assert 'vLLM 0.17.1 runs no FP8 KV cache on SM120 (fleet_sm120_fp8_kv_cache_builds[0] "<0.18.0"' in result["reason"]
    assert result["removed_count"] == 4
    assert sorted((os.path.basename(r["file"]), r["key"]) for r in result["dirs"][0]["removed"]) == [
        ("config.json", "quantization_config.kv_cache_quant_algo"), ("config.json", "quantization_config.kv_cache_scheme"),
        ("hf_quant_config.json", "quantization.kv_cache_quant_algo"), ("hf_quant_config.json", "quantization.kv_cache_scheme")]
    for name in ("config.json", "hf_quant_config.json"):
        with open(os.path.join(root, "older", name), encoding="utf-8") as handle:
            text = handle.read()
        assert "kv_cache_scheme" not in text and "kv_cache_quant_algo" not in text


def test_a_bad_table_of_builds_fails_before_anything_is_read(runs):
    failure = runs[2]["bad_builds.failed.json"]
    assert failure["task"] == TASK
    assert "fleet_sm120_fp8_kv_cache_builds[0].versions must be a PEP 440 version specifier" in failure["result"]["msg"]
    assert "bad_builds.json" not in runs[2]
    assert _unchanged(runs, "newer")
