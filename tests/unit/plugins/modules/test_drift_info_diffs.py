# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.drift_info's diffs against the pristine wheel (wheel_dirs), run as Ansible runs the module."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from helpers import load_source

drift_tests = load_source("gpufleet_drift_info_tests_for_diffs", "tests", "unit", "plugins", "modules", "test_drift_info.py")
integrity = drift_tests.integrity
host = drift_tests.host  # the fixture: a host with a venv installed from a wheel, a model, dumps, GPUs, a unit


def wheelhouse(made):
    """The wheel the host's venv was installed from, in a directory of its own."""
    directory = made.tmp / "wheelhouse"
    directory.mkdir()
    os.rename(str(made.tmp / "vllm-0.33.0-py3-none-any.whl"), str(directory / "vllm-0.33.0-py3-none-any.whl"))
    return str(directory)


def test_modified_file_is_diffed_and_the_row_is_the_same(host):
    wheels = wheelhouse(host)
    integrity.edit_in_place(os.path.join(host.site, "demo", "core.py"), b"return x", b"return 0")
    rc, plain = host.run(host.args())
    rc_diff, res = host.run(host.args(wheel_dirs=[wheels]), check=True)
    assert rc == rc_diff == 0, res
    assert res["row"] == plain["row"] and res["changed"] is False
    assert plain["diffs"]["files"] == [] and plain["diffs"]["note"].startswith("no diffs: no directory of wheels")
    diffs = res["diffs"]
    assert diffs["wheel"] == os.path.join(wheels, "vllm-0.33.0-py3-none-any.whl")
    assert diffs["wheel_dirs"] == [wheels] and diffs["note"] is None and diffs["not_diffed"] == 0
    (entry,) = diffs["files"]
    assert entry["path"] == "demo/core.py" and entry["class"] == "modified"
    assert "-    return x\n+    return 0\n" in entry["diff"]
    assert diffs["bytes"] == len(entry["diff"].encode("utf-8"))


def test_pristine_host_has_no_diffs_and_no_note(host):
    rc, res = host.run(host.args(wheel_dirs=[wheelhouse(host)]))
    assert rc == 0
    assert res["diffs"]["files"] == [] and res["diffs"]["note"] is None and res["diffs"]["wheel"] is None


def test_diff_max_files_zero_lists_none_and_counts_them(host):
    wheels = wheelhouse(host)
    integrity.edit_in_place(os.path.join(host.site, "demo", "core.py"), b"return x", b"return 0")
    rc, res = host.run(host.args(wheel_dirs=[wheels], diff_max_files=0))
    assert rc == 0
    assert res["diffs"]["files"] == [] and res["diffs"]["not_diffed"] == 1


@pytest.mark.parametrize("extra, message", [
    ({"wheel_dirs": ["wheels"]}, "wheel_dirs names 'wheels', which is not an absolute path."),
    ({"diff_max_files": -1}, "diff_max_files must be from 0 to 1000 (got -1)."),
    ({"diff_max_bytes": 10}, "diff_max_bytes must be from 256 to 67108864 bytes (got 10)."),
    ({"diff_max_total": 1 << 30}, "diff_max_total must be from 256 to 67108864 bytes (got 1073741824)."),
])
def test_bad_diff_options_are_refused_naming_the_option(host, extra, message):
    rc, res = host.run(host.args(**extra))
    assert rc == 1 and res["failed"] is True
    assert res["msg"].startswith("Invalid options for gpufleet.vllm.drift_info: ") and message in res["msg"]
