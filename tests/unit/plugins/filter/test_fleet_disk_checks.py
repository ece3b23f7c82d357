# SPDX-License-Identifier: GPL-3.0-or-later
"""fleet_disk_checks with the model directories, as free_space_info's paths option."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.fleet import disk_checks

CHECKS = [{"path": "/root/.cache", "min_free_mib": 20480, "purpose": "vLLM's caches"},
          {"path": "/tmp", "min_free_mib": 1024, "purpose": "temporary files"}]


def test_each_model_directory_is_one_more_path():
    out = disk_checks(CHECKS, ["/shared/kimi", "/shared/minimax"], 1024)
    assert out[:2] == CHECKS
    assert out[2:] == [
        {"path": "/shared/kimi", "min_free_mib": 1024, "purpose": "the model config edits and their backups"},
        {"path": "/shared/minimax", "min_free_mib": 1024, "purpose": "the model config edits and their backups"}]
    out[0]["path"] = "/elsewhere"
    assert CHECKS[0]["path"] == "/root/.cache"


def test_no_model_directory_leaves_the_checks():
    assert disk_checks(CHECKS) == CHECKS and disk_checks([], []) == []


@pytest.mark.parametrize("checks, dirs, words", [
    ("/tmp", [], "fleet_disk_checks must be a list"),
    (["/tmp"], [], "fleet_disk_checks must be a list"),
    (CHECKS, "/shared/kimi", "fleet_model_dirs must be a list"),
])
def test_wrong_shapes_are_refused_naming_the_variable(checks, dirs, words):
    with pytest.raises(AnsibleFilterError, match=words):
        disk_checks(checks, dirs)
