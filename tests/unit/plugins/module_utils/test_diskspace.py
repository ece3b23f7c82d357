# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils.diskspace: the filesystem that would hold a path."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import collections
import os

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import diskspace

StatVFS = collections.namedtuple("StatVFS", "f_bsize f_frsize f_blocks f_bavail")


def test_nearest_existing_walks_up(tmp_path):
    (tmp_path / "a").mkdir()
    assert diskspace.nearest_existing(str(tmp_path / "a" / "b" / "c")) == str(tmp_path / "a")
    assert diskspace.nearest_existing(str(tmp_path / "a")) == str(tmp_path / "a")


def test_free_space_uses_f_bavail_and_f_frsize(tmp_path):
    seen = []

    def fake_statvfs(path):
        seen.append(path)
        # 4 KiB fragments: 1,000,000 in all, 256,000 free for users (1000 MiB)
        return StatVFS(f_bsize=1 << 20, f_frsize=4096, f_blocks=1000000, f_bavail=256000)

    result = diskspace.free_space(str(tmp_path / "new" / "env"), statvfs=fake_statvfs)
    assert seen == [str(tmp_path)]
    assert result["free_mib"] == 1000
    assert result["total_mib"] == 3906
    assert result["checked"] == str(tmp_path)
    assert result["exists"] is False


def test_free_space_matches_the_real_filesystem(tmp_path):
    result = diskspace.free_space(str(tmp_path))
    st = os.statvfs(str(tmp_path))
    assert result["exists"] is True
    assert result["free_mib"] == st.f_bavail * st.f_frsize // (1024 * 1024)
    assert os.path.ismount(result["mount"])
    assert str(tmp_path).startswith(result["mount"])


def test_nearest_existing_refuses_a_path_below_a_regular_file(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(diskspace.PathCannotExist) as exc:
        diskspace.nearest_existing(str(tmp_path / "file" / "a" / "b"))
    assert exc.value.blocker == str(tmp_path / "file")
    assert exc.value.kind == "a regular file"
    assert str(exc.value).startswith("%s cannot exist: %s is a regular file" % (tmp_path / "file" / "a" / "b", tmp_path / "file"))


def test_shown_escapes_odd_bytes():
    assert diskspace.shown(b"/opt/\xff\xfe") == "/opt/\\xff\\xfe"
    assert diskspace.shown(os.fsdecode(b"/opt/\xff")).encode("utf-8")
