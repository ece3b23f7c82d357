# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers shared by the unit tests (imported as ``helpers``; conftest.py
puts this directory on sys.path)."""

import importlib.util
import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_source(name, *relpath):
    """Import a repository file that is not a package module (test tools)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, *relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_runner(main, capsys):
    """run(args, check=False, diff=False) -> (exit code, result dict) of a module's main()."""
    def _run(args, check=False, diff=False):
        args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exc:
                main()
        return exc.value.code, json.loads(capsys.readouterr().out)
    return _run
