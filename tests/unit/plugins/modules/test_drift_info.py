# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.drift_info: one host's drift row, read in one module run.

The module runs as Ansible runs it on a host (its file executed by Python
with the arguments as JSON), against a host made in the test: a venv with a
wheel installed from a RECORD, a model directory, a dump directory, the
fake NVML library (real pynvml) and the fake systemd of
tests/unit/fakesystemd.py running a sleeping process as the unit.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest

import fakesystemd
from helpers import load_source

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "drift_info.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
UNIT = "vllm-kimi-k25.service"

integrity = load_source("gpufleet_integrity_helpers_drift", "tests", "unit", "plugins", "module_utils",
                        "test_integrity.py")
nvml_state = load_source("fakenvml_state_for_drift", "tests", "sim", "fakenvml", "state.py")

CONFIG = ('{\n  "architectures": ["DeepseekV3ForCausalLM"],\n  "quantization_config": {\n'
          '    "quant_method": "compressed-tensors",\n'
          '    "kv_cache_scheme": {"num_bits": 8, "type": "float"}\n  }\n}\n')
HF_QUANT = '{"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}\n'


class Host:
    """A host as the audit finds it: serving environment, model, dumps, GPUs, unit."""

    def __init__(self, tmp_path, lib_dir):
        self.tmp = tmp_path
        wheel = integrity.make_wheel(tmp_path, name="vllm", version="0.33.0")
        self.envs = tmp_path / "opt" / "envs"
        self.env = str(self.envs / "vllm-0.33.0")
        self.site = integrity.install_wheel(wheel, self.env)
        self.link = str(tmp_path / "opt" / "current")
        os.symlink(self.env, self.link)
        self.model = tmp_path / "model"
        self.model.mkdir()
        (self.model / "config.json").write_text(CONFIG)
        (self.model / "hf_quant_config.json").write_text(HF_QUANT)
        self.dumps = tmp_path / "dumps"
        self.dumps.mkdir()
        for i in range(3):
            (self.dumps / ("embed_debug_tp%d.pt" % i)).write_bytes(b"\0" * 1000)
        (self.dumps / "keep.pt").write_bytes(b"\0" * 10)
        self.state_dir = str(tmp_path / "systemd")
        self.run_env = fakesystemd.install(str(tmp_path / "bin"), self.state_dir)
        fakesystemd.write_unit(self.state_dir, UNIT, [sys.executable, "-c", "import time; time.sleep(600)"])
        self.nvml = str(tmp_path / "nvml" / "state")
        os.makedirs(os.path.dirname(self.nvml))
        self.run_env.update(LD_LIBRARY_PATH=lib_dir, FAKE_NVML_STATE=self.nvml, PYTHONPATH=COLLECTIONS)

    def systemctl(self, *words):
        return subprocess.run(["systemctl"] + list(words), env=dict(os.environ, **self.run_env),
                              capture_output=True, text=True, check=False)

    def args(self, **extra):
        args = {"venv_link": self.link, "model_dirs": [str(self.model)], "artifact_paths": [str(self.dumps)],
                "unit": UNIT}
        args.update(extra)
        return args

    def run(self, args, check=False, pythonpath_first=None):
        args = dict(args, _ansible_check_mode=check)
        path = self.tmp / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        env = dict(os.environ, **self.run_env)
        if pythonpath_first:
            env["PYTHONPATH"] = os.pathsep.join([pythonpath_first, COLLECTIONS])
        proc = subprocess.run([sys.executable, MODULE, str(path)], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    def snapshot(self):
        """Every file of the host with its bytes and modification time."""
        found = {}
        for top in (self.model, self.dumps, self.envs):
            for root, dummy, files in os.walk(str(top)):
                for name in files:
                    full = os.path.join(root, name)
                    with open(full, "rb") as handle:
                        found[full] = (handle.read(), os.stat(full).st_mtime_ns)
        return found


@pytest.fixture
def host(tmp_path, lib_dir):
    made = Host(tmp_path, lib_dir)
    assert made.systemctl("start", "--", UNIT).returncode == 0
    yield made
    made.systemctl("stop", "--", UNIT)


def pynvml_hidden(tmp_path):
    """A directory that, first on PYTHONPATH, makes `import pynvml` fail as on a host without it."""
    stub = tmp_path / "no-pynvml"
    stub.mkdir(exist_ok=True)
    (stub / "pynvml.py").write_text("raise ImportError(\"No module named 'pynvml'\")\n")
    return str(stub)


# ------------------------------------------------------------------ verdicts


def test_dirty_host_reports_every_drift_and_changes_nothing(host):
    integrity.edit_in_place(os.path.join(host.site, "demo", "core.py"), b"return x", b"return 0")
    before = host.snapshot()
    rc, res = host.run(host.args())
    assert rc == 0, res
    assert res["changed"] is False
    row = res["row"]
    assert row["drift"] == ["integrity", "config", "dumps"] == res["drift"]
    assert row["build"] == "0.33.0"
    assert row["environment"] == os.path.realpath(host.env)
    assert row["pristine"] is False
    assert row["integrity"] == "not pristine: 1 file modified; file: demo/core.py", row["integrity"]
    assert row["config_keys_present"] == 2 and row["config_policy"] == "strip"
    assert row["dumps"] == 3 and row["dumps_bytes"] == "3.0 kB"
    assert row["unit"] == UNIT and row["unit_state"] == "active"
    assert row["gpus"] == 8 and row["gpu_problems"] == []
    assert res["integrity"]["offenders"][0]["path"] == "demo/core.py"
    assert sorted(os.path.basename(p) for p in res["dumps"]["files"]) == [
        "embed_debug_tp0.pt", "embed_debug_tp1.pt", "embed_debug_tp2.pt"]
    assert sorted(k["key"] for f in res["configs"]["files"] for k in f["removed"]) == [
        "quantization.kv_cache_quant_algo", "quantization_config.kv_cache_scheme"]
    assert host.snapshot() == before


def test_converged_host_has_no_drift(host):
    (host.model / "config.json").write_text('{"architectures": ["DeepseekV3ForCausalLM"]}\n')
    (host.model / "hf_quant_config.json").write_text('{"quantization": {"quant_algo": "NVFP4"}}\n')
    shutil.rmtree(str(host.dumps))
    host.dumps.mkdir()
    rc, res = host.run(host.args(expected_version="0.33.0", expect={"count": 8, "compute_capability": "12.0"}))
    assert rc == 0, res
    assert res["row"]["drift"] == []
    assert res["row"]["integrity"] == "pristine" and res["row"]["pristine"] is True
    assert res["row"]["config_keys_present"] == 0 and res["row"]["dumps"] == 0
    assert res["gpus"]["expectation_met"] is True


def test_check_mode_gives_the_same_row(host):
    rc, res = host.run(host.args())
    rc_check, res_check = host.run(host.args(), check=True)
    assert rc == rc_check == 0
    assert res_check["row"] == res["row"]


def test_other_build_is_build_drift(host):
    rc, res = host.run(host.args(expected_version="0.34.0"))
    assert rc == 0
    assert "build" in res["row"]["drift"]
    assert res["row"]["build"] == "0.33.0"


@pytest.mark.parametrize("cc, policy, drift", [
    ("12.0", "auto", True),
    ("9.0", "auto", False),
    ("9.0", "strip", True),
    ("12.0", "keep", False),
])
def test_kv_cache_keys_are_drift_by_policy_and_gpus(host, cc, policy, drift):
    nvml_state.update_state(lambda d: d.update({"default.cc": cc}), host.nvml)
    rc, res = host.run(host.args(config_policy=policy))
    assert rc == 0, res
    assert res["row"]["config_keys_present"] == 2  # counted whatever the policy
    assert ("config" in res["row"]["drift"]) is drift
    assert res["row"]["config_policy"] == ("strip" if drift else "keep")


BUILDS = [
    {"versions": "<0.19.0", "fp8_kv_cache_on_sm120": False, "note": "no FP8 MLA on SM120"},
    {"versions": ">=0.19.0", "fp8_kv_cache_on_sm120": True, "note": "Triton MLA FP8"},
]


@pytest.mark.parametrize("config_build, drift, index, reason", [
    # the installed build (0.33.0) runs an FP8 KV cache on SM120: the keys are allowed
    (None, False, 1, 'keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[1] ">=0.19.0"'),
    # the rollout's plan judges for its target build
    ("0.17.1", True, 0, 'keys removed: SM120, vLLM 0.17.1, fleet_sm120_fp8_kv_cache_builds[0] "<0.19.0"'),
    ("0.33.1.dev7", False, 1, "keys kept: vLLM 0.33.1.dev7"),
])
def test_kv_cache_keys_are_drift_by_the_build_and_its_row(host, config_build, drift, index, reason):
    nvml_state.update_state(lambda d: d.update({"default.cc": "12.0"}), host.nvml)
    args = host.args(config_builds=BUILDS)
    if config_build:
        args["config_build"] = config_build
    rc, res = host.run(args)
    assert rc == 0, res
    assert res["row"]["config_keys_present"] == 2
    assert ("config" in res["row"]["drift"]) is drift
    assert res["row"]["config_policy"] == ("strip" if drift else "keep")
    assert res["row"]["config_reason"].startswith(reason), res["row"]["config_reason"]
    assert res["configs"]["build"] == (config_build or "0.33.0") and res["configs"]["build_row"]["index"] == index
    assert ("vLLM %s" % (config_build or "0.33.0")) in res["configs"]["reason"]


def test_a_bad_table_of_builds_is_refused_naming_the_row(host):
    rc, res = host.run(host.args(config_builds=[{"versions": ">=0.19", "fp8_kv_cache_on_sm120": "yes"}]))
    assert rc == 1 and res["changed"] is False
    assert "config_builds[0].fp8_kv_cache_on_sm120 must be true or false" in res["msg"]


def test_malformed_config_is_config_drift_naming_the_file(host):
    (host.model / "config.json").write_text('{"architectures": [}\n')
    rc, res = host.run(host.args(config_policy="keep"))
    assert rc == 0, res
    assert "config" in res["row"]["drift"]
    assert "config.json" in res["row"]["config_errors"][0] and "line 1" in res["row"]["config_errors"][0]
    assert (host.model / "config.json").read_text() == '{"architectures": [}\n'


def test_missing_model_directory_is_config_drift(host):
    rc, res = host.run(host.args(model_dirs=[str(host.tmp / "gone")]))
    assert rc == 0
    assert res["row"]["config_errors"] == ["%s is not a directory (the model directory is missing)" % (
        host.tmp / "gone")]
    assert "config" in res["row"]["drift"]


def test_refused_link_policy_is_config_drift(host):
    blob = host.tmp / "blob.json"
    blob.write_text(CONFIG)
    os.unlink(str(host.model / "config.json"))
    os.symlink(str(blob), str(host.model / "config.json"))
    rc, res = host.run(host.args(model_symlinks="refuse"))
    assert rc == 0
    assert "config" in res["row"]["drift"] and "link" in res["row"]["config_errors"][0]


def test_required_file_missing_is_config_drift(host):
    os.unlink(str(host.model / "config.json"))
    rc, res = host.run(host.args(config_policy="keep", model_files=[
        {"name": "config.json", "absent": ["**.kv_cache_scheme"], "required": True}]))
    assert rc == 0
    assert "config" in res["row"]["drift"] and "config.json" in res["row"]["config_errors"][0]


def test_role_shaped_keys_are_read_as_the_role_reads_them(host):
    # the sm120_config role's fleet_config_files / fleet_config_required_files, passed as they are
    keys = {"config.json": ["**.kv_cache_scheme"], "hf_quant_config.json": ["quantization.kv_cache_quant_algo"]}
    rc, res = host.run(host.args(model_keys=keys, model_required_files=["config.json"]))
    assert rc == 0, res
    assert res["row"]["config_keys_present"] == 2 and "config" in res["row"]["drift"]
    os.unlink(str(host.model / "config.json"))
    rc, res = host.run(host.args(config_policy="keep", model_keys=keys, model_required_files=["config.json"]))
    assert rc == 0
    assert "config" in res["row"]["drift"] and "config.json" in res["row"]["config_errors"][0]
    rc, res = host.run(host.args(config_policy="keep", model_keys=keys))
    assert rc == 0 and res["row"]["config_errors"] == [] and "config" not in res["row"]["drift"]


def test_model_files_and_model_keys_are_exclusive(host):
    rc, res = host.run(host.args(model_keys={"config.json": ["a"]},
                                 model_files=[{"name": "config.json", "absent": ["a"]}]))
    assert rc == 1 and "mutually exclusive" in res["msg"]


def test_stopped_unit_is_unit_drift(host):
    host.systemctl("stop", "--", UNIT)
    rc, res = host.run(host.args())
    assert rc == 0
    assert "unit" in res["row"]["drift"]
    assert res["row"]["unit_state"] == "inactive"


def test_unknown_unit_is_unit_drift_and_no_unit_is_not_judged(host):
    rc, res = host.run(host.args(unit="vllm-other.service"))
    assert "unit" in res["row"]["drift"] and res["unit"]["LoadState"] == "not-found"
    rc, res = host.run(host.args(unit=None))
    assert rc == 0
    assert "unit" not in res["row"]["drift"] and res["unit"] == {"unit": None}


# ----------------------------------------------------------------- environment


def test_adopted_venv_while_the_link_does_not_exist(host):
    os.unlink(host.link)
    rc, res = host.run(host.args(venv=host.env))
    assert rc == 0
    assert res["row"]["environment"] == host.env and res["row"]["build"] == "0.33.0"


def test_directory_at_the_link_is_integrity_drift_with_the_reason(host):
    os.unlink(host.link)
    os.makedirs(host.link)
    rc, res = host.run(host.args(venv=host.env))
    assert rc == 0
    assert res["row"]["drift"][0] == "integrity"
    assert "exists but is not a symbolic link" in res["row"]["integrity"]
    assert res["integrity"] is None and res["row"]["environment"] == ""


def test_no_environment_at_all(host):
    os.unlink(host.link)
    rc, res = host.run(host.args())
    assert rc == 0
    assert "does not exist and no adopted venv is named" in res["row"]["integrity"]
    assert res["row"]["build"] == ""


def test_environment_without_vllm(host):
    rc, res = host.run(host.args(name="vllm-other"))
    assert rc == 0
    assert "integrity" in res["row"]["drift"] and "is not installed" in res["row"]["integrity"]


# ----------------------------------------------------------------------- GPUs


def test_pynvml_from_another_venv_when_the_interpreter_lacks_it(host, tmp_path):
    import pynvml
    tools = tmp_path / "tools"
    site = tools / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    shutil.copy(pynvml.__file__, str(site / "pynvml.py"))
    # a startup hook in that venv must not run: only pynvml.py is loaded
    (site / "evil.pth").write_text("import os; os.makedirs(%r)\n" % str(tmp_path / "pth-ran"))
    rc, res = host.run(host.args(nvml_venvs=[str(tools)]), pythonpath_first=pynvml_hidden(tmp_path))
    assert rc == 0, res
    assert res["gpus"]["nvml_available"] is True and res["row"]["gpus"] == 8
    assert res["gpus"]["pynvml_from"] == str(site / "pynvml.py")
    assert "gpus" not in res["row"]["drift"]
    assert not (tmp_path / "pth-ran").exists()


def test_no_pynvml_anywhere_is_gpu_drift_that_says_what_to_install(host, tmp_path):
    rc, res = host.run(host.args(nvml_venvs=[str(tmp_path / "nothing")]), pythonpath_first=pynvml_hidden(tmp_path))
    assert rc == 0
    assert "gpus" in res["row"]["drift"] and res["row"]["gpus"] is None
    assert "install nvidia-ml-py" in res["row"]["gpu_problems"][0]
    # the serving environment first, then nvml_venvs
    assert res["gpus"]["nvml_error"]["text"].endswith(", and none of %s, %s has nvidia-ml-py's pynvml.py" % (
        os.path.realpath(host.env), tmp_path / "nothing"))
    # without the GPUs, auto cannot say SM120: the keys are counted, not judged
    assert res["row"]["config_policy"] == "keep"


def test_gpu_expectation_not_met_is_gpu_drift(host):
    nvml_state.update_state(lambda d: d.update({"gpu_count": "7"}), host.nvml)
    rc, res = host.run(host.args(expect={"count": 8}))
    assert rc == 0
    assert "gpus" in res["row"]["drift"]
    assert any("7" in line for line in res["row"]["gpu_problems"])


def test_driver_not_loaded_is_gpu_drift(host):
    nvml_state.update_state(lambda d: d.update({"init_error": "DRIVER_NOT_LOADED"}), host.nvml)
    rc, res = host.run(host.args())
    assert rc == 0
    assert "gpus" in res["row"]["drift"] and "driver is not loaded" in res["row"]["gpu_problems"][0]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("extra, words", [
    ({"artifact_paths": ["tmp"]}, "is relative"),
    ({"artifact_paths": ["/"]}, "is refused"),
    ({"artifact_patterns": ["*"]}, "matches every file"),
    ({"artifact_max_depth": 2}, "max_depth only applies with recursive: true"),
    ({"artifact_min_age": "soon"}, "min_age 'soon' is not understood"),
    ({"model_files": [{"name": "../config.json", "absent": ["a"]}]}, 'must not contain ".."'),
    ({"model_keys": {"../config.json": ["a"]}}, 'model_keys must map file names relative to the model directory'),
    ({"model_keys": {"config.json": ["a"]}, "model_required_files": ["tokenizer.json"]},
     'model_required_files may only name files of model_keys; unknown: "tokenizer.json".'),
    ({"model_required_files": ["config.json"]}, "model_required_files goes with model_keys"),
    ({"expect": {"compute_capability": "twelve"}}, "expect.compute_capability"),
    ({"max_list": 0}, "max_list must be 1 or more"),
])
def test_bad_options_fail_before_reading_anything(host, extra, words):
    rc, res = host.run(host.args(**extra))
    assert rc == 1 and res["failed"] is True
    assert res["msg"].startswith("Invalid options for gpufleet.vllm.drift_info: ")
    assert words in res["msg"]
    assert "row" not in res


def test_neither_link_nor_venv_is_refused(host):
    rc, res = host.run({"unit": UNIT})
    assert rc == 1
    assert "venv_link" in res["msg"] and "venv" in res["msg"]


def test_integrity_text_names_files_whole_and_counts_the_rest():
    from ansible_collections.gpufleet.vllm.plugins.module_utils.drift import integrity_text
    deep = "vllm/model_executor/models/" + "x" * 150 + "/deepseek_v2.py"
    result = {"pristine": False, "verifiable": True, "uv_cache_tainted": True,
              "counts": {"size_differs": 2, "missing": 3},
              "offenders": [{"path": deep}, {"path": "vllm/a.py"}, {"path": "vllm/b.py"}, {"path": "vllm/c.py"}]}
    assert integrity_text(result) == (
        "not pristine: 2 files of another size than RECORD says, 3 files missing; the edit is also in uv's cache; "
        "files: %s, vllm/a.py, vllm/b.py and 2 more" % deep)
    assert integrity_text({"pristine": True}) == "pristine"
    assert integrity_text(None, "no  vLLM\nenvironment") == "no vLLM environment"


def test_config_behind_a_directory_link_outside_the_model_dir_is_config_drift(host, tmp_path):
    """The audit judges a directory link as sm120_config does (resolved per component, not only the file)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "config.json").write_text('{"quantization_config": {"kv_cache_scheme": {"num_bits": 8}}}')
    os.symlink(str(outside), str(host.model / "sub"))
    rc, res = host.run(host.args(config_policy="keep", model_symlinks="refuse", model_files=[
        {"name": "sub/config.json", "absent": ["**.kv_cache_scheme"]}]))
    assert rc == 0
    assert "config" in res["row"]["drift"]
    assert "outside the model directory" in res["row"]["config_errors"][0]


# ------------------------------------------------------------------ GPU health (health: true)


def main_pid(host):
    shown = host.systemctl("show", "--property=MainPID", "--", UNIT).stdout
    return int(shown.strip().split("=", 1)[1])


def test_health_of_a_healthy_host_is_no_drift_and_allows_the_units_process(host):
    # the unit's own process on every GPU, as vLLM's is on a serving host
    nvml_state.claim(main_pid(host), 88098, path=host.nvml)
    rc, res = host.run(host.args(health=True))
    assert rc == 0, res
    assert "health" not in res["row"]["drift"]
    assert res["row"]["gpu_health"] == "all 8 GPUs healthy"
    assert res["row"]["health_problems"] == []
    assert res["health"]["healthy"] is True and res["health"]["gpu_count"] == 8
    assert res["health"]["thresholds"]["max_temperature_c"] == 85


def test_without_health_nothing_is_judged(host):
    nvml_state.update_state(lambda d: d.update({"gpu.3.pcie_width": "8"}), host.nvml)
    rc, res = host.run(host.args())
    assert rc == 0, res
    assert "health" not in res["row"]["drift"]
    assert res["row"]["gpu_health"] == "" and res["row"]["health_problems"] == [] and res["health"] is None


def test_degraded_pcie_link_is_health_drift_naming_the_gpu(host):
    nvml_state.update_state(lambda d: d.update({"gpu.3.pcie_width": "8"}), host.nvml)
    rc, res = host.run(host.args(health=True))
    assert rc == 0, res
    assert res["row"]["drift"][-1] == "health"
    assert res["row"]["gpu_health"].startswith("1 of 8 GPUs unhealthy (GPU 3)")
    [line] = res["row"]["health_problems"]
    assert line.startswith("GPU 3 (bus 5D): ") and "x8" in line and "x16" in line, line
    assert res["health"]["healthy"] is False


def test_the_same_problem_on_every_gpu_is_one_line(host):
    nvml_state.update_state(lambda d: d.update({"default.persistence_mode": "0"}), host.nvml)
    rc, res = host.run(host.args(health=True))
    assert rc == 0, res
    [line] = res["row"]["health_problems"]
    assert line.startswith("GPUs 0-7: persistence mode is off"), line
    assert len(res["health"]["problems"]) == 8


def test_a_process_that_is_not_the_units_is_a_health_problem(host):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        nvml_state.claim(main_pid(host), 88098, path=host.nvml)
        nvml_state.claim(stranger.pid, 2000, gpus=[5], path=host.nvml)
        rc, res = host.run(host.args(health=True))
    finally:
        stranger.kill()
        stranger.wait()
    assert rc == 0, res
    [line] = res["row"]["health_problems"]
    assert line.startswith("GPU 5 ") and "pid %d" % stranger.pid in line and "not of the served model" in line, line


def test_a_thermal_slowdown_can_be_allowed_by_threshold(host):
    nvml_state.update_state(lambda d: d.update({"gpu.2.clocks_event_reasons": "0x40"}), host.nvml)
    rc, res = host.run(host.args(health=True))
    assert rc == 0 and res["row"]["drift"][-1] == "health", res
    rc, res = host.run(host.args(health=True, health_thresholds={"throttle_reasons": []}))
    assert rc == 0, res
    assert "health" not in res["row"]["drift"] and res["row"]["health_problems"] == []


def test_required_health_fields_the_card_cannot_report_are_health_drift(host):
    nvml_state.update_state(lambda d: d.update({"default.unsupported": "remapped_rows"}), host.nvml)
    rc, res = host.run(host.args(health=True))
    assert rc == 0 and "health" not in res["row"]["drift"], res  # unknown: out of the verdict
    rc, res = host.run(host.args(health=True, health_required=["ecc", "remapped_rows"]))
    assert rc == 0 and res["row"]["drift"][-1] == "health", res
    [line] = res["row"]["health_problems"]
    assert line.startswith("GPUs 0-7: remapped_rows cannot be read on this card or driver"), line
    rc, res = host.run(host.args(health=True, health_required=["remaped_rows"]))
    assert rc == 1 and "health_required has unknown fields 'remaped_rows'" in res["msg"] and "row" not in res


def test_health_cannot_be_read_without_nvml_is_gpus_drift_once(host):
    nvml_state.update_state(lambda d: d.update({"init_error": "DRIVER_NOT_LOADED"}), host.nvml)
    rc, res = host.run(host.args(health=True))
    assert rc == 0, res
    assert "gpus" in res["row"]["drift"] and "health" not in res["row"]["drift"]
    assert res["health"]["healthy"] is False and res["health"]["nvml_available"] is False
    assert res["row"]["gpu_health"].startswith("GPU health unknown: ")
    assert res["row"]["health_problems"] == []  # (gpu_problems says it once)
    assert res["row"]["gpu_problems"] and "DRIVER_NOT_LOADED" in res["row"]["gpu_problems"][0]


@pytest.mark.parametrize("thresholds, words", [
    ({"max_temperature_c": 500}, "health_thresholds.max_temperature_c must be a whole number of degrees Celsius"),
    ({"nonsense": 1}, "health_thresholds has unknown keys nonsense"),
    ({"throttle_reasons": ["hot"]}, "health_thresholds.throttle_reasons has unknown reasons 'hot'"),
])
def test_bad_health_thresholds_are_refused_before_anything_is_read(host, thresholds, words):
    rc, res = host.run(host.args(health=True, health_thresholds=thresholds))
    assert rc == 1 and res["failed"] is True
    assert words in res["msg"], res["msg"]
    assert "row" not in res


# ------------------------------------------------------------------ other models' units (unit_dir)


def test_another_models_unit_that_runs_or_is_enabled_is_unit_drift(host, tmp_path):
    units = tmp_path / "units"
    units.mkdir()
    marked = "# vLLM server for %s, rendered by the gpufleet.vllm.service role.\n[Unit]\n"
    for name in (UNIT, "vllm-old.service", "vllm-spare.service"):
        (units / name).write_text(marked % name)
        fakesystemd.write_unit(host.state_dir, name, [sys.executable, "-c", "import time; time.sleep(600)"])
    assert host.systemctl("enable", "vllm-old.service").returncode == 0
    rc, res = host.run(host.args(unit_dir=str(units)))
    assert rc == 0, res
    assert res["row"]["other_units"] == ["vllm-old.service (inactive, enabled)"]
    assert "unit" in res["row"]["drift"]
    assert host.systemctl("disable", "vllm-old.service").returncode == 0
    rc, res = host.run(host.args(unit_dir=str(units)))
    assert res["row"]["other_units"] == [] and "unit" not in res["row"]["drift"]
    # the host's own unit named without .service is still its own, not another model's
    assert host.systemctl("enable", "--", UNIT).returncode == 0
    rc, res = host.run(host.args(unit_dir=str(units), unit=UNIT[:-len(".service")]))
    assert rc == 0, res
    # (systemctl adds .service itself; the small fake systemd here does not, hence no ActiveState check)
    assert res["row"]["other_units"] == []


def test_the_old_models_processes_on_the_gpus_are_not_a_strangers_during_a_switch(host, tmp_path):
    # a switch to UNIT (not running yet) from vllm-old, which runs and holds the GPUs
    units = tmp_path / "units"
    units.mkdir()
    marked = "# vLLM server for %s, rendered by the gpufleet.vllm.service role.\n[Unit]\n"
    for name in (UNIT, "vllm-old.service"):
        (units / name).write_text(marked % name)
    fakesystemd.write_unit(host.state_dir, "vllm-old.service", [sys.executable, "-c", "import time; time.sleep(600)"])
    assert host.systemctl("stop", "--", UNIT).returncode == 0
    assert host.systemctl("start", "vllm-old.service").returncode == 0
    try:
        old_pid = int(host.systemctl("show", "--property=MainPID", "vllm-old.service").stdout.split("=")[1])
        nvml_state.claim(old_pid, 88098, path=host.nvml)
        rc, res = host.run(host.args(unit_dir=str(units), health=True))
    finally:
        host.systemctl("stop", "vllm-old.service")
    assert rc == 0, res
    assert res["row"]["other_units"] == ["vllm-old.service (active, disabled)"]
    assert res["row"]["health_problems"] == [] and res["health"]["healthy"] is True
