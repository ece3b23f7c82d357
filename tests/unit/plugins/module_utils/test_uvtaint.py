# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""uvtaint: which uv caches are searched for shared inodes."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import uvtaint


def test_default_uv_cache_dirs(tmp_path, monkeypatch):
    for sub in ("a", "xdg/uv", "home/.cache/uv"):
        (tmp_path / sub).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    environ = {"UV_CACHE_DIR": str(tmp_path / "a"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert uvtaint.default_uv_cache_dirs(environ) == [
        str(tmp_path / "a"), str(tmp_path / "xdg" / "uv"), str(tmp_path / "home" / ".cache" / "uv")]
    assert uvtaint.default_uv_cache_dirs({"UV_CACHE_DIR": str(tmp_path / "missing")}) == [
        str(tmp_path / "home" / ".cache" / "uv")]
