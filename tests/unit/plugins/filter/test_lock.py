# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet-lock filters: what the roles read of a lock, whether it fits an interpreter, what a host's
environment changes into, which wheels an in-place install fetches before the stop and what the operator reads
when one of them is not the lock's."""

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.lock import (
    lock_dependency_diff,
    lock_fetch,
    lock_fetch_message,
    lock_info,
    lock_target_problems,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, pkgnames

BODY = "".join("%s==%s \\\n    --hash=sha256:%s\n" % (name, version, char * 64) for name, version, char in (
    ("gguf", "0.19.0", "a"), ("lark", "1.3.1", "b"), ("nvidia-ml-py", "13.615.71", "c"),
    ("vllm", "0.33.1.dev7+gcb9a7e83f501", "d")))
META = {"python_version": "3.11", "python_platform": "x86_64-manylinux_2_36", "package": "vllm",
        "sources": "index http://10.88.0.1:8765/simple/", "excluded": ["torch"], "resolved_at": "2026-12-05T14:00:00Z",
        "resolver": "uv 0.13.9"}
LOCK = lockfile.render_lock(META, BODY)


def test_lock_info_gives_the_target_the_pins_and_the_fingerprint():
    info = lock_info(LOCK, "vllm")
    assert info["version"] == "0.33.1.dev7+gcb9a7e83f501"
    assert info["pins"] == {"gguf": "0.19.0", "lark": "1.3.1", "nvidia-ml-py": "13.615.71",
                            "vllm": "0.33.1.dev7+gcb9a7e83f501"}
    assert info["fingerprint"] == pkgnames.set_fingerprint(info["pins"].items())
    assert info["short"] == info["fingerprint"][7:19] and info["count"] == 4
    assert (info["python_version"], info["python_platform"]) == ("3.11", "x86_64-manylinux_2_36")


def test_lock_info_refuses_a_lock_of_another_package_or_an_edited_one():
    with pytest.raises(AnsibleFilterError, match="is a lock of vllm, not of sglang .fleet_package."):
        lock_info(LOCK, "sglang")
    with pytest.raises(AnsibleFilterError, match="The fleet lock was refused: .*edited after it was made"):
        lock_info(LOCK.replace("lark==1.3.1", "lark==1.2.2"), "vllm")
    with pytest.raises(AnsibleFilterError, match="The fleet lock was refused"):
        lock_info("vllm==0.33.0\n", "vllm")


@pytest.mark.parametrize("probe, problems", [
    ({"python": "3.11", "machine": "x86_64", "libc": "glibc 2.36"}, []),
    ({"python": "3.12", "machine": "x86_64", "libc": "glibc 2.36"},
     ["the lock is for Python 3.11, this host's environment runs Python 3.12"]),
    ({"python": "3.11", "machine": "aarch64", "libc": "glibc 2.36"},
     ["the lock is for x86_64 (x86_64-manylinux_2_36), this host is aarch64"]),
    ({"python": "3.11", "machine": "x86_64", "libc": "glibc 2.31"},
     ["the lock needs glibc 2.36 or newer (x86_64-manylinux_2_36), this host has glibc 2.31"]),
    ("not json", ["the new environment's interpreter did not say its Python version and platform"]),
])
def test_lock_target_problems(probe, problems):
    text = json.dumps(probe) if isinstance(probe, dict) else probe
    assert lock_target_problems(lock_info(LOCK, "vllm"), text) == problems


def test_no_lock_has_no_target_problems_and_no_diff():
    assert lock_target_problems({}, "") == []
    assert lock_dependency_diff({"distributions": []}, {}) == {}


def test_the_dependency_diff_of_a_host_on_yesterdays_lock():
    current = {"distributions": [
        {"name": "lark", "version": "1.2.2", "source": "index"},
        {"name": "nvidia-ml-py", "version": "13.615.71", "source": "index"},
        {"name": "vllm", "version": "0.33.0", "source": "index"},
        {"name": "gguf", "version": "0.17.0", "source": "git+https://user:secret@example.org/gguf@abc"},
        {"name": "debugpy", "version": "1.8.0", "source": "index"},
    ]}
    diff = lock_dependency_diff(current, lock_info(LOCK, "vllm"))
    assert diff["changed"] == [{"name": "gguf", "old": "0.17.0", "new": "0.19.0"},
                               {"name": "lark", "old": "1.2.2", "new": "1.3.1"},
                               {"name": "vllm", "old": "0.33.0", "new": "0.33.1.dev7+gcb9a7e83f501"}]
    assert diff["removed"] == [{"name": "debugpy", "version": "1.8.0"}]
    assert diff["counts"] == "3 changed, 1 removed, 1 source changed (1 unchanged)"
    assert diff["lines"][:3] == ["gguf 0.17.0 -> 0.19.0", "lark 1.2.2 -> 1.3.1", "vllm 0.33.0 -> 0.33.1.dev7+gcb9a7e83f501"]
    assert "secret" not in json.dumps(diff)


def probe(python="3.11", machine="x86_64", libc="glibc 2.36"):
    return {"stdout": json.dumps({"python": python, "machine": machine, "libc": libc}), "rc": 0}


def test_the_lock_is_made_for_the_hosts_own_python_and_lowest_glibc():
    from ansible_collections.gpufleet.vllm.plugins.filter.lock import lock_target
    hostvars = {"a": {"reinstall_host_probe": probe()}, "b": {"reinstall_host_probe": probe(libc="glibc 2.35")},
                "c": {"reinstall_host_probe": {"skipped": True}}, "d": {}}
    assert lock_target(["a", "b", "c", "d"], hostvars) == {
        "python_version": "3.11", "python_platform": "x86_64-manylinux_2_35", "from_hosts": ["a", "b"]}
    # what the inventory says wins; the hosts are not needed then
    assert lock_target([], {}, "3.12", "x86_64-manylinux_2_31")["python_platform"] == "x86_64-manylinux_2_31"
    assert lock_target(["a"], hostvars, "3.12")["python_version"] == "3.12"


@pytest.mark.parametrize("hostvars, words", [
    ({"a": {"reinstall_host_probe": probe()}, "b": {"reinstall_host_probe": probe(python="3.12")}},
     "A fleet lock is for one Python, and the hosts run several: 3.11 on a; 3.12 on b."),
    ({"a": {"reinstall_host_probe": probe()}, "b": {"reinstall_host_probe": probe(machine="aarch64")}},
     "A fleet lock is for one machine type, and the hosts are several: aarch64 on b; x86_64 on a."),
    ({"a": {"reinstall_host_probe": probe(libc="")}}, "a's C library is not glibc"),
    ({"a": {"reinstall_host_probe": {"stdout": "Traceback", "rc": 1}}}, "but a did not say them"),
    ({}, "give reinstall_python as an absolute path"),
])
def test_a_fleet_the_lock_cannot_fit_is_refused(hostvars, words):
    from ansible_collections.gpufleet.vllm.plugins.filter.lock import lock_target
    with pytest.raises(AnsibleFilterError) as err:
        lock_target(sorted(hostvars), hostvars)
    assert words in str(err.value) and "Nothing was changed." in str(err.value)


# --- what an in-place install fetches before the stop --------------------------------------------------------------

# uv 0.13.9's own words (stderr), from `uv pip sync --dry-run --reinstall-package vllm` and from
# `uv pip install --require-hashes` of a wheel whose bytes are not the lock's
DRY_RUN = """Using Python 3.11.2 environment at: /root/ml-env
Resolved 4 packages in 8ms
Would download 3 packages
Would uninstall 2 packages
Would install 3 packages
 + gguf==0.19.0
 - lark==1.2.2
 + lark==1.3.1
 - vllm==0.33.0
 + vllm==0.33.1.dev7+gcb9a7e83f501
"""
MISMATCH = """Using CPython 3.11.2 interpreter at: /root/ml-env/bin/python
Resolved 2 packages in 12ms
error: Failed to download `vllm==0.33.1.dev7+gcb9a7e83f501`
  cause: Hash mismatch for `vllm==0.33.1.dev7+gcb9a7e83f501`

         Expected:
           sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd

         Computed:
           sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
"""


def test_lock_fetch_takes_what_the_dry_run_installs_with_the_locks_hashes():
    fetch = lock_fetch(LOCK, {"rc": 0, "stdout": "", "stderr": DRY_RUN}, None, ["--reinstall-package", "vllm"])
    assert fetch["names"] == ["gguf", "lark", "vllm"] and fetch["count"] == 3
    assert fetch["requirements"] == (
        "gguf==0.19.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
        "lark==1.3.1 \\\n    --hash=sha256:" + "b" * 64 + "\n"
        "vllm==0.33.1.dev7+gcb9a7e83f501 \\\n    --hash=sha256:" + "d" * 64 + "\n")
    # the requirements are the lock's own pins: parsed back, the same versions and hashes
    body = lockfile.parse_lock(LOCK)["packages"]
    again = lockfile.render_lock(dict(META, package="vllm"), fetch["requirements"])
    assert lockfile.parse_lock(again)["packages"] == dict((n, body[n]) for n in fetch["names"])


def test_lock_fetch_also_takes_what_the_fingerprint_and_the_reinstall_options_name():
    current = {"missing": [{"name": "gguf", "version": "0.19.0"}],
               "different": [{"name": "Lark", "expected": "1.3.1", "found": "1.2.2"}],
               "extra": [{"name": "torch", "version": "2.9.0"}]}
    # the dry run said nothing (or something this parser does not read): the fingerprint's differences and the
    # packages reinstalled by name still are fetched; an extra package is removed, never fetched
    fetch = lock_fetch(LOCK, {"rc": 0, "stderr": "Would install 3 packages\n"}, current,
                       ["--reinstall-package", "vllm", "--reinstall-package=nvidia_ml_py"])
    assert fetch["names"] == ["gguf", "lark", "nvidia-ml-py", "vllm"]
    # --reinstall: every pin
    assert lock_fetch(LOCK, None, None, ["--reinstall"])["names"] == ["gguf", "lark", "nvidia-ml-py", "vllm"]
    # a host already on the lock (nothing planned): nothing to fetch; a skipped fingerprint adds nothing
    nothing = lock_fetch(LOCK, {"rc": 0, "stderr": "Resolved 4 packages in 1ms\nAudited 4 packages in 1ms\n"},
                         {"skipped": True, "missing": [{"name": "gguf"}]}, [])
    assert nothing == {"names": [], "count": 0, "requirements": ""}
    # a name the lock does not pin is never fetched (the install takes only the lock's pins)
    assert lock_fetch(LOCK, " + torch==2.9.0\n", None, ["--reinstall-package", "torch"])["names"] == []


def test_lock_fetch_refuses_an_edited_lock_and_a_reinstall_that_is_not_a_list():
    with pytest.raises(AnsibleFilterError, match="The fleet lock was refused: .*edited after it was made"):
        lock_fetch(LOCK.replace("lark==1.3.1", "lark==1.2.2"), DRY_RUN, None, [])
    with pytest.raises(AnsibleFilterError, match="reinstall must be the list of uv's reinstall options"):
        lock_fetch(LOCK, DRY_RUN, None, "--reinstall")


def test_a_wheel_that_is_not_the_locks_is_a_tampered_mirror_in_the_message():
    msg = lock_fetch_message({"rc": 1, "stdout": "", "stderr": MISMATCH}, "gpu-07", "vllm-kimi-k25", "/root/ml-env")
    assert msg == (
        "Refused before the stop on gpu-07: the index serves a wheel of vllm 0.33.1.dev7+gcb9a7e83f501 whose sha256 "
        "(sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef) differs from the lock's "
        "(sha256:" + "d" * 64 + "): a tampered or overwritten mirror. The unit vllm-kimi-k25 was not stopped and "
        "/root/ml-env was not changed. Compare that wheel on the mirror with the one the lock was made from, or make "
        "a new lock from a mirror you trust.")
    # without a unit (the playbook stops it), from a wheel directory; a pin with two hashes says so
    two = MISMATCH.replace("           sha256:ddd", "           sha256:" + "e" * 64 + "\n           sha256:ddd")
    msg = lock_fetch_message({"rc": 1, "stderr": two}, "gpu-07", "", "/root/ml-env", "the wheel directory")
    assert msg.startswith("Refused before the stop on gpu-07: the wheel directory serves a wheel of vllm")
    assert "differs from the lock's (sha256:" + "e" * 64 + " or 1 more)" in msg
    assert "Nothing was stopped and /root/ml-env was not changed." in msg


def test_any_other_fetch_failure_says_what_uv_said_last_and_that_nothing_was_stopped():
    said = "error: Failed to fetch: `http://10.88.0.1:8765/simple/lark/`\n  Caused by: Connection refused\n"
    msg = lock_fetch_message({"rc": 2, "stdout": "", "stderr": said}, "gpu-07", "vllm-kimi-k25", "/root/ml-env")
    assert msg == ("Fetching the lock's wheels before the stop failed on gpu-07: error: Failed to fetch: "
                   "`http://10.88.0.1:8765/simple/lark/` / Caused by: Connection refused. The unit vllm-kimi-k25 was "
                   "not stopped and /root/ml-env was not changed.")
    assert "uv said nothing (exit 2)" in lock_fetch_message({"rc": 2, "stdout": "", "stderr": ""}, "h", "", "/e")
    # a terminal escape in uv's output does not reach the operator's terminal
    assert "\x1b" not in lock_fetch_message({"rc": 2, "stderr": "error: \x1b[31mred\n"}, "h", "", "/e")
