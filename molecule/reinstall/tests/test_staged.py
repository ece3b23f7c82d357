# SPDX-License-Identifier: GPL-3.0-or-later
"""reinstall-1: the dirty host after the staged reinstall and the service
role's cutover onto it (converge + idempotence), and the faults of
side_effect.yml."""

import re

import pytest
import testinfra
from probes import http_ok, wait_for

from reinstall_common import (ADOPTED, DEEPSEEK, PATCH_MARKERS, UNIT, cache_files_with, read_json,
                              record_check, site_packages)


@pytest.fixture(scope="module")
def host():
    """Only reinstall-1: these tests judge what side_effect.yml did there (molecule's
    --hosts option would otherwise run them on every platform)."""
    return testinfra.get_host("podman://reinstall-1")


ENV_RE = re.compile(r"^/opt/vllm/envs/vllm-0\.33\.0-[0-9]{8}T[0-9]{6}Z$")


def current_env(host):
    link = host.file("/opt/vllm/current")
    assert link.is_symlink
    return link.linked_to


def test_current_link_points_at_a_staged_venv(host):
    env = current_env(host)
    assert ENV_RE.match(env), env
    assert host.file(env + "/pyvenv.cfg").is_file
    # the environment runs: its interpreter imports the installed metadata
    version = host.check_output(
        "%s/bin/python -c 'import importlib.metadata as m; print(m.version(\"vllm\"))'", env)
    assert version.strip() == "0.33.0"


def test_current_env_is_pristine_by_record(host):
    result = record_check(host, current_env(host))
    assert result["dist_infos"] == ["vllm-0.33.0.dist-info"]
    assert result["bad"] == []
    assert result["ok"] > 5000


def test_current_env_holds_copies_not_links_into_uv_cache(host):
    result = record_check(host, current_env(host))
    assert result["linked"] == 0
    site = site_packages(host, current_env(host))
    assert host.run("find %s -type f -links +1 -print -quit", site).stdout.strip() == ""


def test_hand_patches_are_gone_from_the_current_env(host):
    text = host.file(site_packages(host, current_env(host)) + "/" + DEEPSEEK).content_string
    assert "def forward" in text
    for marker in PATCH_MARKERS:
        assert marker not in text


def test_uv_cache_no_longer_holds_the_tainted_files(host):
    for marker in PATCH_MARKERS:
        assert cache_files_with(host, marker) == [], marker
    # the operators' patched file is no longer hard-linked into the cache
    patched = site_packages(host, ADOPTED) + "/" + DEEPSEEK
    assert int(host.check_output("stat -c %%h %s", patched)) == 1


def test_adopted_venv_is_kept_as_it_was(host):
    # the operators' environment stays (it was the rollback target) and was not edited by the role
    text = host.file(site_packages(host, ADOPTED) + "/" + DEEPSEEK).content_string
    assert "self._nomla_debug += 1" in text
    assert host.file(ADOPTED + "/bin/python").exists


def test_first_switch_remembered_the_adopted_venv(host):
    faults = read_json(host, "faults.json")
    assert faults["previous_before"] == ADOPTED
    assert ENV_RE.match(faults["current_before"])


def test_serving_unit_untouched_by_the_faults(host):
    svc = host.service(UNIT)
    assert svc.is_running
    faults = read_json(host, "faults.json")
    assert faults["pid_before"] > 0
    assert int(host.check_output("systemctl show -p MainPID --value %s", UNIT)) == faults["pid_before"]
    assert wait_for(lambda: http_ok(host, "/health", 8000), timeout=30)


def test_version_not_found_fails_in_resolve(host):
    outcome = read_json(host, "faults.json")["outcomes"]["version_not_found"]
    assert outcome["failed"] is True
    assert "No build matching vllm==0.99.0" in outcome["msg"]
    assert "nothing was changed on any host" in outcome["msg"]


def test_unreachable_index_fails_in_resolve(host):
    outcome = read_json(host, "faults.json")["outcomes"]["index_unreachable"]
    assert outcome["failed"] is True
    assert "could not be reached" in outcome["msg"]
    assert "127.0.0.1:9" in outcome["msg"]


def test_too_little_space_fails_before_writing(host):
    outcome = read_json(host, "faults.json")["outcomes"]["too_little_space"]
    assert outcome["failed"] is True
    assert "MiB are free" in outcome["msg"] and "99999999" in outcome["msg"]


def test_disk_full_during_staging_removes_the_partial_env(host):
    outcome = read_json(host, "faults.json")["outcomes"]["disk_full_during_staging"]
    assert outcome["failed"] is True
    assert "No space left on device" in outcome["msg"] or "os error 28" in outcome["msg"]
    assert "was removed" in outcome["msg"]
    # the 64 MB filesystem holds the (empty) envs directory only
    assert host.run("find /srv/smalldisk -mindepth 2 -print -quit").stdout.strip() == ""
    assert host.file("/srv/smalldisk/envs").is_directory


def test_missing_package_fails_and_removes_the_partial_env(host):
    outcome = read_json(host, "faults.json")["outcomes"]["package_not_found_on_host"]
    assert outcome["failed"] is True
    assert "gpufleet-no-such-package" in outcome["msg"]
    assert "was removed" in outcome["msg"]


def test_faults_left_links_envs_and_unit_as_they_were(host):
    faults = read_json(host, "faults.json")
    assert faults["current_after"] == faults["current_before"]
    assert faults["previous_after"] == faults["previous_before"]
    assert faults["pid_after"] == faults["pid_before"]
    assert faults["envs_after"] == [faults["current_before"], "/srv/smalldisk/envs"]
