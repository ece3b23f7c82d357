# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""jsonedit under hostile input (issue 14): the cost of an edit is linear in
the text, nesting and walks are bounded, and results are valid text."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import sys

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import jsonedit


def _document(n):
    """A config with n layers, each holding one kv_cache_scheme to remove."""
    layers = [{'index': i, 'kv_cache_scheme': {'num_bits': 8, 'type': 'float'}, 'name': 'layer-%d' % i}
              for i in range(n)]
    return json.dumps({'architectures': ['X'], 'layers': layers}, indent=2)


def _operations(text):
    """Python and C function calls made by remove_keys (a count, not a time)."""
    count = [0]

    def profile(frame, event, arg):
        if event in ('call', 'c_call'):
            count[0] += 1

    sys.setprofile(profile)
    try:
        new, removed = jsonedit.remove_keys(text, ['**.kv_cache_scheme'])
    finally:
        sys.setprofile(None)
    return count[0], new, removed


def test_cost_of_an_edit_grows_linearly_with_the_number_of_matches():
    small, new_small, removed_small = _operations(_document(50))
    large, new_large, removed_large = _operations(_document(200))
    assert (len(removed_small), len(removed_large)) == (50, 200)
    assert json.loads(new_large) == {'architectures': ['X'], 'layers': [
        {'index': i, 'name': 'layer-%d' % i} for i in range(200)]}
    # 4 times the text and the matches: about 4 times the work (rescanning per match made it 16)
    assert large < 5 * small, (small, large)


def test_removed_members_are_found_in_one_pass(monkeypatch):
    calls = []
    real = jsonedit._scan
    monkeypatch.setattr(jsonedit, '_scan', lambda *args: calls.append(1) or real(*args))
    new, removed = jsonedit.remove_keys(_document(30), ['**.kv_cache_scheme'])
    assert len(removed) == 30
    assert len(calls) == 1


def test_nesting_is_capped_without_recursion():
    text = '[' * 100000 + ']' * 100000
    with pytest.raises(jsonedit.JSONEditError) as err:
        jsonedit.remove_keys(text, ['**.k'], name='deep.json')
    assert 'deep.json nests objects and arrays deeper than 128 levels (line 1, column 129)' in err.value.msg
    ok = '[' * 128 + '{"k": 1}' + ']' * 128
    with pytest.raises(jsonedit.JSONEditError):
        jsonedit.remove_keys(ok, ['**.k'])
    new, removed = jsonedit.remove_keys('[' * 127 + '{"k": 1}' + ']' * 127, ['**.k'])
    assert new == '[' * 127 + '{}' + ']' * 127
    assert removed == [{'key': '.'.join(['0'] * 127 + ['k']), 'value': 1}]


def test_repeated_parent_of_the_same_kind_is_still_edited():
    new, removed = jsonedit.remove_keys('{"a": {"k": 1}, "a": {"k": 2, "x": 0}}', ['a.k'])
    assert new == '{"a": {}, "a": {"x": 0}}'
    assert [r['value'] for r in removed] == [1, 2]


def test_repeated_parent_not_on_the_path_is_fine():
    assert jsonedit.remove_keys('{"a": {"x": 2}, "a": 5, "k": 1}', ['**.k'])[0] == '{"a": {"x": 2}, "a": 5}'


def test_nan_and_infinity_survive_the_check():
    new, removed = jsonedit.remove_keys('{"a": NaN, "b": -Infinity, "k": NaN}', ['k'])
    assert new == '{"a": NaN, "b": -Infinity}'


def test_numbers_too_long_for_int_are_valid_json_kept_as_written():
    """json.loads refuses integers of more than 4300 digits by default; they are valid JSON, kept byte for byte."""
    big = '9' * 5001
    new, removed = jsonedit.remove_keys('{"n": %s, "k": -%s}' % (big, big), ['k'])
    assert new == '{"n": %s}' % big
    assert removed[0]['value'] == '-99999999999...9999 (a number of 5002 digits)'
    json.dumps(removed)


def test_printable():
    assert jsonedit.printable('caf\udce9') == 'caf\\xe9'
    assert jsonedit.printable('\ud800x') == '\\ud800x'
    assert jsonedit.printable('Kimi \u2013 K2.5') == 'Kimi \u2013 K2.5'


def _snapshots(tmp_path, depth):
    repo = tmp_path / 'models--o--m'
    blob = repo / 'blobs' / 'abc'
    blob.parent.mkdir(parents=True)
    blob.write_text('{}')
    deep = repo / 'snapshots' / 'rev'
    for level in range(depth):
        deep = deep / ('d%d' % level)
    deep.mkdir(parents=True)
    os.symlink(str(blob), str(repo / 'snapshots' / 'rev' / 'config.json'))
    os.symlink(str(blob), str(deep / 'config.json'))
    return str(blob), str(repo / 'snapshots' / 'rev' / 'config.json'), str(deep / 'config.json')


def test_links_sharing_walk_is_bounded_in_depth_and_says_so(tmp_path):
    blob, link, deep = _snapshots(tmp_path, 40)
    found, incomplete = jsonedit._links_sharing(blob, exclude=link)
    assert found == []
    assert incomplete.startswith('directories deeper than 16 levels under ')
    found, incomplete = jsonedit._links_sharing(blob, exclude=link, max_depth=64)
    assert (found, incomplete) == ([deep], None)


def test_links_sharing_walk_is_bounded_in_entries(tmp_path):
    blob, link, deep = _snapshots(tmp_path, 3)
    found, incomplete = jsonedit._links_sharing(blob, max_entries=2)
    assert incomplete == 'more than 2 entries under %s/snapshots' % os.path.dirname(os.path.dirname(blob))


def test_follow_is_refused_when_the_walk_was_cut_short(tmp_path):
    blob, link, deep = _snapshots(tmp_path, 40)
    with open(blob, 'w') as handle:
        handle.write('{"kv_cache_scheme": 1}')
    with pytest.raises(jsonedit.JSONEditError) as err:
        jsonedit.plan_file(link, ['kv_cache_scheme'], symlinks='follow')
    assert 'the search for other links to it stopped early (directories deeper than 16 levels' in err.value.msg
    assert open(blob).read() == '{"kv_cache_scheme": 1}'


def test_depth_position_skips_brackets_in_strings_even_unterminated():
    assert jsonedit._deepest('[' * 5 + '"[[\\"[" [[', 6) == 14
    assert jsonedit._deepest('["[[[[[[[[' + 'x' * 1000, 2) is None
    text = '{"a": ' * 3000 + '"unterminated'
    with pytest.raises(jsonedit.JSONEditError) as err:
        jsonedit.remove_keys(text, ['a'], name='c.json')
    assert 'deeper than 128 levels (line 1, column %d)' % (128 * 6 + 1) in err.value.msg
