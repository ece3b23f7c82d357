# SPDX-License-Identifier: GPL-3.0-or-later
"""reinstall-2: a check-mode run on a fresh dirty host changed nothing on
disk; an in_place run with a lock whose vLLM hash the index's wheel does not
have was refused before the stop; then the in_place mode installed the lock
into /root/ml-env, pristine, restarting the unit, and a second in_place run
had nothing to do."""

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
    assert predicted["check_mode"] is True
    assert predicted["staged_env"].startswith("/opt/vllm/envs/vllm-0.33.0-")


def test_in_place_refused_a_wheel_that_is_not_the_locks_before_the_stop(host):
    record = read_json(host, "in-place-tampered.json")
    assert record["failed"] is True
    assert record["task"] == "Fail when a wheel is not the lock's or cannot be fetched (before the stop)"
    msg = record["msg"]
    assert msg.startswith("Refused before the stop on reinstall-2: the index serves a wheel of vllm 0.33.0 whose sha256 (sha256:")
    assert "differs from the lock's (sha256:" in msg
    assert "a tampered or overwritten mirror" in msg
    assert "Nothing was stopped and /root/ml-env was not changed." in msg
    # the same process served throughout, and not one entry of the environment changed (path, type, size, mtime,
    # inode, mode, link target); only link counts may drop: the cache clean-up before the fetch removed uv's cache
    # entries that the dirty host's files were hard links of
    assert record["pid_before"] != 0
    assert record["pid_after"] == record["pid_before"]
    before = host.file(TEST_DIR + "/tampered-env-before.txt").content_string
    after = host.file(TEST_DIR + "/tampered-env-after.txt").content_string
    assert (site_packages(host, ADOPTED) + "/" + DEEPSEEK + " f ") in before

    def entries(listing):
        rows = [line.split(" ") for line in listing.splitlines()]
        assert all(len(row) == 8 for row in rows)
        return [row[:5] + row[6:] for row in rows], [int(row[5]) for row in rows]

    (kept, links_before), (now, links_after) = entries(before), entries(after)
    assert len(kept) > 1000
    assert now == kept
    assert all(a <= b for a, b in zip(links_after, links_before))


def test_in_place_installed_exactly_the_lock(host):
    lock = host.file(ADOPTED + ".gpufleet.lock").content_string
    assert "# package: vllm==0.33.0" in lock
    pinned = sorted(line.split("==")[0].lower() for line in lock.splitlines() if "==" in line and not line.startswith("#"))
    out = host.check_output("%s/bin/python -I -c %s", ADOPTED,
                            "import importlib.metadata as m; print('\\n'.join(sorted(set("
                            "d.metadata['Name'].lower().replace('_', '-').replace('.', '-') for d in m.distributions()))))")
    assert sorted(set(n.replace("_", "-").replace(".", "-") for n in pinned)) == out.split()
    assert len(pinned) > 50


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


def test_in_place_install_refused_while_the_unit_ran(host):
    record = read_json(host, "in-place.json")
    assert record["running"]["failed"] is True
    assert "is active, not stopped" in record["running"]["msg"]
    assert "The environment was not changed" in record["running"]["msg"]
    assert record["running"]["pid_after"] == record["pid_before"] > 0


def test_in_place_restarted_the_unit_and_second_run_did_nothing(host):
    record = read_json(host, "in-place.json")
    assert record["venv"] == ADOPTED
    assert record["first_needed"] is True
    # started again by the service role's cutover, through its readiness gate
    assert record["first_ready"] is True
    assert record["second_needed"] is False
    assert host.service(UNIT).is_running
    pid_now = int(host.check_output("systemctl show -p MainPID --value %s", UNIT))
    assert pid_now not in (0, record["pid_before"])
    assert wait_for(lambda: http_ok(host, "/health", 8000), timeout=30)


def test_in_place_made_no_staged_environments(host):
    assert not host.file("/opt/vllm").exists
