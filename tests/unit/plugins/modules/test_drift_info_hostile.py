# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.drift_info's dump scan against hostile input and odd trees (issue 14).

The module runs in-process on a host without a vLLM environment, unit or
GPUs (those parts are covered by test_drift_info.py); only the dump count is
looked at here: names that are not UTF-8, a tree deeper than Python's
recursion limit, the bounds of the scan and refused options.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import artifacts
from ansible_collections.gpufleet.vllm.plugins.module_utils import drift
from ansible_collections.gpufleet.vllm.plugins.modules import drift_info

hostile = load_source('gpufleet_remove_artifacts_hostile', 'tests', 'unit', 'plugins', 'modules',
                      'test_remove_artifacts_hostile.py')


@pytest.fixture
def run(capsys, tmp_path):
    runner = module_runner(drift_info.main, capsys)

    def _run(**args):
        return runner(dict({'venv': str(tmp_path / 'no-venv')}, **args))
    return _run


@pytest.fixture
def deep(tmp_path):
    top = str(tmp_path / 'deep')
    yield top
    if os.path.exists(top):
        hostile.remove_deep(top)


def test_non_utf8_dump_names_give_a_valid_result(tmp_path, run):
    top = tmp_path / 'dumps'
    top.mkdir()
    raw = os.fsencode(str(top))
    with open(raw + b'/dump\xff_tp0.pt', 'wb') as handle:
        handle.write(b'z' * 11)
    os.mkdir(raw + b'/dump\xfe_tp1.pt')
    rc, result = run(artifact_paths=[str(top)], artifact_patterns=['dump*_tp*.pt'])
    json.dumps(result, ensure_ascii=False).encode('utf-8')
    assert rc == 0, result
    assert result['dumps']['count'] == 1 and result['dumps']['bytes'] == 11
    assert result['dumps']['files'] == [str(top) + '/dump\\xff_tp0.pt']
    assert result['dumps']['skipped'][0]['path'] == str(top) + '/dump\\xfe_tp1.pt'
    assert 'dumps' in result['row']['drift']
    assert sorted(os.listdir(raw)) == [b'dump\xfe_tp1.pt', b'dump\xff_tp0.pt']


def test_deep_tree_is_counted(deep, run):
    hostile.make_deep(deep, 1200, leaf='embed_debug_tp0.pt')
    rc, result = run(artifact_paths=[deep], artifact_recursive=True)
    assert rc == 0, result
    assert result['dumps']['count'] == 1 and result['dumps']['bytes'] == 7
    assert result['dumps']['files'] == [os.path.join(deep, *(['d'] * 1200 + ['embed_debug_tp0.pt']))]


def test_depth_bound_is_dumps_drift_with_the_reason(deep, run, monkeypatch):
    hostile.make_deep(deep, 30, leaf='embed_debug_tp0.pt')
    monkeypatch.setattr(artifacts, 'DEPTH_LIMIT', 20)
    rc, result = run(artifact_paths=[deep], artifact_recursive=True)
    assert rc == 0, result
    assert 'dumps' in result['row']['drift']
    assert result['dumps']['count'] == 0
    assert 'more than 20 levels of subdirectories below %s (the depth bound)' % deep in result['dumps']['error']
    assert result['row']['dumps_bytes'].startswith('not counted: the scan stopped at %s/d/' % deep)


def test_entry_bound_is_dumps_drift_with_the_reason(tmp_path, run):
    top = tmp_path / 'many'
    top.mkdir()
    for index in range(30):
        (top / ('file%d' % index)).write_text('x')
    rc, result = run(artifact_paths=[str(top)], artifact_max_entries=10)
    assert rc == 0, result
    assert result['dumps']['error'].startswith('the scan stopped at %s: more than 10 directory entries' % top)
    assert result['row']['drift'][:1] == ['integrity'] and 'dumps' in result['row']['drift']


def test_timeout_is_dumps_drift_with_the_reason(tmp_path, monkeypatch):
    top = tmp_path / 'dumps'
    top.mkdir()
    ticks = iter(range(0, 10 ** 6, 100))
    monkeypatch.setattr(artifacts, '_clock', lambda: float(next(ticks)))
    found = drift.scan_dumps([str(top)], artifacts.DEFAULT_PATTERNS, timeout=30)
    assert found['count'] == 0
    assert found['error'] == 'the time limit of 30 s (timeout) was reached while starting the scan of %s.' % top


@pytest.mark.parametrize('extra, words', [
    ({'artifact_patterns': ['*[!.]*']}, "artifact_patterns: pattern '*[!.]*' has 0 fixed characters"),
    ({'artifact_patterns': ['*.json']}, 'such as config.json'),
    ({'artifact_paths': ['/etc']}, "artifact_paths: directory '/etc' is refused"),
    ({'artifact_paths': ['/usr/share']}, "inside the system directory /usr"),
    ({'artifact_max_entries': 0}, 'artifact_max_entries must be 1 or more'),
    ({'artifact_timeout': 0}, 'artifact_timeout must be more than 0 seconds'),
    ({'artifact_recursive': True, 'artifact_max_depth': 5000}, 'artifact_max_depth must be at most 2000'),
])
def test_refused_artifact_options_name_the_option(run, extra, words):
    rc, result = run(**extra)
    assert rc == 1
    assert words in result['msg'], result['msg']
