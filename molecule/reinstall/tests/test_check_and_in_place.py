# SPDX-License-Identifier: GPL-3.0-or-later
"""reinstall-2: a check-mode run on a fresh dirty host changed nothing on
disk; then the in_place mode reinstalled /root/ml-env pristine, restarting
the unit, and a second in_place run had nothing to do."""

import pytest
import testinfra
from probes import http_ok, wait_for

from reinstall_common import (ADOPTED, DEEPSEEK, PATCH_MARKERS, TEST_DIR, UNIT, cache_files_with, read_json,
                              record_check, site_packages)


@pytest.fixture(scope="module")
def host():
    """Only reinstall-2: these tests judge what side_effect.yml did there (molecule's
    --hosts option would otherwise run them on every platform)."""
    return testinfra.get_host("podman://reinstall-2")


def test_check_mode_changed_nothing_on_disk(host):
    before = host.file(TEST_DIR + "/snapshot-before.txt").content_string
    after = host.file(TEST_DIR + "/snapshot-after.txt").content_string
    # the snapshot covers what the role would touch: the dirty venv, uv's cache, /opt
    assert (site_packages(host, ADOPTED) + "/" + DEEPSEEK + " f ") in before
    assert "/root/.cache/uv/archive-v0/" in before
    assert len(before.splitlines()) > 10000
    assert after == before
    paths = [line.split(" ", 1)[0] for line in before.splitlines()]
    for made_by_the_role in ("/opt/vllm", "/opt/gpufleet"):
        assert not [p for p in paths if p == made_by_the_role or p.startswith(made_by_the_role + "/")]


def test_check_mode_predicted_a_build(host):
    predicted = read_json(host, "check-mode.json")
    assert predicted["target_version"] == "0.33.0"
    assert predicted["stage_action"] == "build"
    assert predicted["switched"] is True
    assert predicted["staged_env"].startswith("/opt/vllm/envs/vllm-0.33.0-")


def test_in_place_made_the_adopted_venv_pristine(host):
    result = record_check(host, ADOPTED)
    assert result["dist_infos"] == ["vllm-0.33.0.dist-info"]
    assert result["bad"] == []
    assert result["linked"] == 0
    text = host.file(site_packages(host, ADOPTED) + "/" + DEEPSEEK).content_string
    for marker in PATCH_MARKERS:
        assert marker not in text


def test_in_place_cleaned_uv_cache(host):
    for marker in PATCH_MARKERS:
        assert cache_files_with(host, marker) == [], marker


def test_in_place_restarted_the_unit_and_second_run_did_nothing(host):
    record = read_json(host, "in-place.json")
    assert record["venv"] == ADOPTED
    assert record["first_needed"] is True
    assert record["second_needed"] is False
    assert host.service(UNIT).is_running
    pid_now = int(host.check_output("systemctl show -p MainPID --value %s", UNIT))
    assert pid_now not in (0, record["pid_before"])
    assert wait_for(lambda: http_ok(host, "/health", 8000), timeout=30)


def test_in_place_made_no_staged_environments(host):
    assert not host.file("/opt/vllm").exists
