# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The default --gpu-memory-utilization of the serving build (module_utils/serving.py): vLLM 0.32 and 0.33 default to
0.92 (vllm/config/cache.py), older builds to 0.9; the VRAM "loaded" gate of a unit that does not give it uses the
default of the build the unit runs, and says where it came from."""

# pylint: disable=protected-access

import glob
import json
import os
import zipfile

import pytest

from helpers import run_module_file

from ansible_collections.gpufleet.vllm.plugins.filter.serving import serving_loaded_expect
from ansible_collections.gpufleet.vllm.plugins.module_utils import serving

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
WHEELHOUSE = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(
    os.path.expanduser("~"), ".cache", "gpufleet-vllm", "wheelhouse")
# vLLM 0.33.0's line, as its wheel carries it
FIELD_LINE = "    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)\n"


def venv(tmp_path, cache_text=None, version=None, python="python3.12"):
    """A venv layout: bin/vllm, and in site-packages vllm/config/cache.py (CACHE_TEXT) and vllm-VERSION.dist-info."""
    root = tmp_path / "venv"
    site = root / "lib" / python / "site-packages"
    (site / "vllm" / "config").mkdir(parents=True, exist_ok=True)
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin" / "vllm").write_text("#!/bin/sh\n")
    if cache_text is not None:
        (site / "vllm" / "config" / "cache.py").write_text(cache_text)
    if version:
        (site / ("vllm-%s.dist-info" % version)).mkdir()
    return str(root / "bin" / "vllm")


@pytest.mark.parametrize("text", [
    "class CacheConfig:\n" + FIELD_LINE,
    "class CacheConfig:\n    block_size: int = 16\n    gpu_memory_utilization: float = 0.92\n    \"\"\"0.9 ...\"\"\"\n",
])
def test_the_builds_own_file_gives_the_default(tmp_path, text):
    program = venv(tmp_path, text)
    got = serving.build_default_utilization([program, "serve", "/m"])
    assert got["value"] == 0.92 and got["source"].startswith("the build's ") and got["source"].endswith(
        "/lib/python3.12/site-packages/vllm/config/cache.py")


@pytest.mark.parametrize("text, version, value, words", [
    # not one line as vLLM writes it: the table by version, else 0.9 and why
    (FIELD_LINE + FIELD_LINE, "0.33.0", 0.92, "the default of vLLM 0.33 (the build is 0.33.0; "),
    ("gpu_memory_utilization = 0.5\n", "0.32.1.dev7+g1234567", 0.92, "the default of vLLM 0.32"),
    (None, "0.33.1", 0.92, "cache.py cannot be read"),
    ("x" * (serving.MAX_CACHE_PY_BYTES + 1) + "\n" + FIELD_LINE, "0.10.1", 0.9,
     "cannot be read (missing, or larger than 512 KiB); its version 0.10.1 is not in the table"),
    (None, None, 0.9, "0.9, the default of older vLLM builds: the build's own default is not known"),
])
def test_the_table_by_version_then_the_old_default(tmp_path, text, version, value, words):
    got = serving.build_default_utilization([venv(tmp_path, text, version)])
    assert got["value"] == value and words in got["source"], got


@pytest.mark.parametrize("argv", [["vllm", "serve", "/m"], [], ["/nowhere/bin/vllm"], ["/bin\n/vllm"]])
def test_a_program_not_in_a_venv_falls_back_to_the_old_default_saying_why(argv):
    got = serving.build_default_utilization(argv)
    assert got["value"] == 0.9 and got["source"].startswith("0.9, the default of older vLLM builds"), got


def test_the_command_lines_own_value_wins(tmp_path):
    program = venv(tmp_path, FIELD_LINE)
    config = serving.with_build_default(serving.serving_config([program, "serve", "/m"]), [program])
    assert (config["gpu_memory_utilization"], config["gpu_memory_utilization_given"]) == (0.92, False)
    argv = [program, "serve", "/m", "--gpu-memory-utilization", "0.8"]
    config = serving.with_build_default(serving.serving_config(argv), argv)
    assert config["gpu_memory_utilization"] == 0.8
    assert config["gpu_memory_utilization_source"] == "the command line's --gpu-memory-utilization"


def test_the_wheel_of_the_test_world_carries_the_line_read():
    wheels = sorted(glob.glob(os.path.join(WHEELHOUSE, "vllm-0.3[23].*.whl")))
    if not wheels:
        pytest.skip("no vLLM 0.32/0.33 wheel in %s" % WHEELHOUSE)
    with zipfile.ZipFile(wheels[-1]) as archive:
        text = archive.read("vllm/config/cache.py").decode("utf-8")
    assert serving._CACHE_DEFAULT.findall(text) == ["0.92"]


def test_the_loaded_gate_uses_the_builds_default_unless_the_unit_gives_one():
    argv = ["/opt/vllm/current/bin/vllm", "serve", "/m", "-tp", "2"]
    assert serving_loaded_expect(argv, {}, default_utilization=0.92) == {
        "gpus": [0, 1], "min_used_fraction": 0.92, "min_used_tolerance": 0.05}
    assert serving_loaded_expect(argv + ["--gpu-memory-utilization", "0.7"], {}, default_utilization=0.92)[
        "min_used_fraction"] == 0.7
    assert serving_loaded_expect(argv, {}, default_utilization=None)["min_used_fraction"] == 0.9
    assert serving.describe_loaded_floor(97887, 0.92, 0.05) == "85,553 MiB = 0.92 x 97,887 MiB - 5 %"


def test_serving_check_says_where_the_default_came_from(tmp_path):
    program = venv(tmp_path, FIELD_LINE)
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "argv": [program, "serve", "/m", "-tp", "2"], "nvml": False, "_ansible_check_mode": True}}))
    rc, res = run_module_file(os.path.join(REPO, "plugins", "modules", "serving_check.py"), str(args_file),
                              dict(os.environ, PYTHONPATH=COLLECTIONS))
    assert rc == 0, res
    assert res["serving"]["gpu_memory_utilization"] == 0.92
    assert res["serving"]["gpu_memory_utilization_source"].startswith("the build's %s" % os.path.dirname(
        os.path.dirname(program)))
