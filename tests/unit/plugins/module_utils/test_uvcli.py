# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/uvcli.py find_uv: the uv executable is always run by its absolute path, found where it should be."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import sys

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import uvcli


def _uv(directory, name="uv", executable=True):
    os.makedirs(str(directory), exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755 if executable else 0o644)
    return str(path)


def test_uv_given_by_name_is_the_path_of_the_first_on_path(tmp_path, monkeypatch):
    first, second = _uv(tmp_path / "a"), _uv(tmp_path / "b")
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "empty"), os.path.dirname(first),
                                                os.path.dirname(second)]))
    assert uvcli.find_uv("uv") == first
    assert os.path.isabs(uvcli.find_uv("uv"))
    # (no name given: uv on PATH, by its path)
    assert uvcli.find_uv("") == first


def test_a_name_is_not_taken_from_the_working_directory_nor_a_non_executable_on_path(tmp_path, monkeypatch):
    _uv(tmp_path / "cwd")
    _uv(tmp_path / "plain", executable=False)
    monkeypatch.chdir(str(tmp_path / "cwd"))
    monkeypatch.setenv("PATH", str(tmp_path / "plain"))
    with pytest.raises(uvcli.UvError) as err:
        uvcli.find_uv("uv")
    assert err.value.kind == "no_uv" and "'uv' was not found on the control node" in str(err.value)


def test_a_directory_named_uv_on_path_is_skipped_for_the_executable_after_it(tmp_path, monkeypatch):
    os.makedirs(str(tmp_path / "a" / "uv"))
    real = _uv(tmp_path / "b")
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    assert uvcli.find_uv("uv") == real


def test_uv_given_by_path_is_that_path_and_must_be_executable(tmp_path, monkeypatch):
    given = _uv(tmp_path / "tools", name="uv-0.9")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert uvcli.find_uv(given) == given
    plain = _uv(tmp_path / "tools", name="uv-plain", executable=False)
    with pytest.raises(uvcli.UvError):
        uvcli.find_uv(plain)
    # (a path with a directory in it is never looked up on PATH)
    _uv(tmp_path / "on-path" / "sub")
    monkeypatch.setenv("PATH", str(tmp_path / "on-path"))
    with pytest.raises(uvcli.UvError):
        uvcli.find_uv(os.path.join("sub", "uv"))


def test_without_uv_on_path_the_packages_binary_is_used_or_the_error_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    fake = _uv(tmp_path / "pkg")

    class Package(object):
        @staticmethod
        def find_uv_bin():
            return fake
    monkeypatch.setitem(sys.modules, "uv", Package)
    assert uvcli.find_uv("") == fake

    class Broken(object):
        @staticmethod
        def find_uv_bin():
            raise FileNotFoundError("no binary")
    monkeypatch.setitem(sys.modules, "uv", Broken)
    with pytest.raises(uvcli.UvError) as err:
        uvcli.find_uv("")
    assert "Install it (for example 'pip install uv') or give its path" in str(err.value)
