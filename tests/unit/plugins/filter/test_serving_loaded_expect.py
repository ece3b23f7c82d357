# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""serving_loaded_expect (plugins/filter/serving.py): the service role's VRAM "loaded" gate, from the unit's words."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.serving import FilterModule, serving_loaded_expect

# __service_exec_argv of the role's defaults (port as a string, the size too)
ARGV = ["/opt/vllm/current/bin/vllm", "serve", "/shared/kimi-k2.5-nvfp4", "--served-model-name", "kimi-k2.5",
        "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "8", "--enable-expert-parallel"]


def test_the_role_defaults_derive_the_gate_for_the_eight_gpus():
    assert serving_loaded_expect(ARGV, {"PYTHONUNBUFFERED": "1"}, min_used_mib=None, tolerance=0.05) == {
        "gpus": [0, 1, 2, 3, 4, 5, 6, 7], "min_used_fraction": 0.9, "min_used_tolerance": 0.05}


def test_the_utilization_and_the_gpus_come_from_the_unit():
    # service_extra_args may hold YAML numbers: they reach the unit as words all the same
    got = serving_loaded_expect(ARGV + ["--gpu-memory-utilization", 0.85, "-tp", 4],
                                {"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert got == {"gpus": [4, 5, 6, 7], "min_used_fraction": 0.85, "min_used_tolerance": 0.05}


@pytest.mark.parametrize("fixed", [90000, "90000", 0])
def test_a_fixed_figure_overrides_the_derived_one(fixed):
    assert serving_loaded_expect(ARGV, {}, min_used_mib=fixed) == {"gpus": list(range(8)), "min_used_mib": int(fixed)}


def test_empty_derives():
    assert "min_used_fraction" in serving_loaded_expect(ARGV, {}, min_used_mib="")


@pytest.mark.parametrize("argv, kwargs, words", [
    (ARGV + ["--gpu-memory-utilization", "1.5"], {},
     "The unit's serving arguments cannot be read: --gpu-memory-utilization must be more than 0 and at most 1"),
    (ARGV, {"min_used_mib": "lots"}, "service_min_used_mib must be a whole number of MiB"),
    (ARGV, {"min_used_mib": -1}, "service_min_used_mib must be a whole number of MiB"),
    (ARGV, {"tolerance": 1}, "service_vram_loaded_tolerance must be 0 or more and less than 1"),
    (ARGV, {"tolerance": "five"}, "service_vram_loaded_tolerance must be a number such as 0.05"),
    ("vllm serve", {}, "needs the unit's command line as a list of words"),
])
def test_bad_values_fail_with_the_variable_named(argv, kwargs, words):
    with pytest.raises(AnsibleFilterError) as err:
        serving_loaded_expect(argv, {}, **kwargs)
    assert words in str(err.value)


def test_the_filter_is_registered():
    assert FilterModule().filters()["serving_loaded_expect"] is serving_loaded_expect
