# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Text-preserving key removal (plugins/module_utils/sm120/jsonedit.py)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import json
import os

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import jsonedit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def _load_fixtures():
    spec = importlib.util.spec_from_file_location(
        'gpufleet_model_fixtures', os.path.join(REPO, 'tests', 'sim', 'model', 'fixtures.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fixtures = _load_fixtures()


# ---------------------------------------------------------------- key paths

@pytest.mark.parametrize('expr, expected', [
    ('kv_cache_scheme', ('kv_cache_scheme',)),
    ('text_config.quantization_config.kv_cache_scheme', ('text_config', 'quantization_config', 'kv_cache_scheme')),
    ('**.kv_cache_scheme', ('**', 'kv_cache_scheme')),
    ('a\\.b.c', ('a.b', 'c')),
    ('a\\\\.c', ('a\\', 'c')),
])
def test_parse_key_path(expr, expected):
    assert jsonedit.parse_key_path(expr) == expected


@pytest.mark.parametrize('expr', ['', 'a..b', '.a', 'a.', 'a.**'])
def test_parse_key_path_refuses(expr):
    with pytest.raises(ValueError):
        jsonedit.parse_key_path(expr)


def test_format_key_path_round_trips_dots():
    keys = ('model.layers.0', 'kv')
    assert jsonedit.parse_key_path(jsonedit.format_key_path(keys)) == keys


# ---------------------------------------------------------------- removal on text

def test_nested_text_config_removed_and_rest_identical_to_writer():
    data = fixtures.kimi_k25_config('text_config')
    text = fixtures.dumps(data, 2)
    new, removed = jsonedit.remove_keys(text, ['text_config.quantization_config.kv_cache_scheme'])
    assert removed == [{'key': 'text_config.quantization_config.kv_cache_scheme', 'value': fixtures.KV_CACHE_SCHEME}]
    expected = json.loads(text)
    del expected['text_config']['quantization_config']['kv_cache_scheme']
    # byte-identical to what the writer (json.dumps indent=2 + newline) produces without the key
    assert new == fixtures.dumps(expected, 2)


def test_double_star_finds_every_location_top_and_nested():
    text = fixtures.dumps(fixtures.kimi_k25_config('both'), 2)
    new, removed = jsonedit.remove_keys(text, ['**.kv_cache_scheme'])
    assert [r['key'] for r in removed] == ['quantization_config.kv_cache_scheme',
                                           'text_config.quantization_config.kv_cache_scheme']
    assert 'kv_cache_scheme' not in new
    assert json.loads(new)['quantization_config']['quant_method'] == 'compressed-tensors'


def test_double_star_matches_top_level_key_too():
    new, removed = jsonedit.remove_keys('{"kv_cache_scheme": 1, "b": 2}', ['**.kv_cache_scheme'])
    assert new == '{"b": 2}'
    assert removed == [{'key': 'kv_cache_scheme', 'value': 1}]


def test_single_star_matches_one_level_only():
    text = '{"a": {"x": 1, "deep": {"x": 2}}, "b": {"x": 3}, "x": 4}'
    new, removed = jsonedit.remove_keys(text, ['*.x'])
    assert [r['key'] for r in removed] == ['a.x', 'b.x']
    assert json.loads(new) == {'a': {'deep': {'x': 2}}, 'b': {}, 'x': 4}


def test_wildcard_inside_segment_and_arrays_as_levels():
    text = '{"layers": [{"kv_a": 1, "keep": 0}, {"kv_b": 2}], "kv_top": 3}'
    new, removed = jsonedit.remove_keys(text, ['layers.*.kv_*'])
    assert [r['key'] for r in removed] == ['layers.0.kv_a', 'layers.1.kv_b']
    assert new == '{"layers": [{"keep": 0}, {}], "kv_top": 3}'


@pytest.mark.parametrize('indent', [2, 4, 'tab', 'compact'])
def test_indentation_kept(indent):
    data = fixtures.modelopt_hf_quant_config()
    text = fixtures.dumps(data, indent)
    new, removed = jsonedit.remove_keys(text, ['quantization.kv_cache_quant_algo'])
    assert removed == [{'key': 'quantization.kv_cache_quant_algo', 'value': 'FP8'}]
    expected = fixtures.modelopt_hf_quant_config(kv_cache=False)
    assert new == fixtures.dumps(expected, indent)


def test_key_order_kept_not_sorted():
    text = '{\n  "zeta": 1,\n  "kv_cache_scheme": null,\n  "alpha": 2,\n  "mid": {"z": 1, "a": 2}\n}\n'
    new, dummy = jsonedit.remove_keys(text, ['kv_cache_scheme'])
    assert new == '{\n  "zeta": 1,\n  "alpha": 2,\n  "mid": {"z": 1, "a": 2}\n}\n'
    assert list(json.loads(new)) == ['zeta', 'alpha', 'mid']


@pytest.mark.parametrize('key, expected', [
    ('a', '{\n    "b": 2,\n    "c": 3\n}'),
    ('b', '{\n    "a": 1,\n    "c": 3\n}'),
    ('c', '{\n    "a": 1,\n    "b": 2\n}'),
])
def test_first_middle_last_member(key, expected):
    text = '{\n    "a": 1,\n    "b": 2,\n    "c": 3\n}'
    assert jsonedit.remove_keys(text, [key])[0] == expected


def test_only_member_leaves_empty_object_like_json_dumps():
    text = json.dumps({'q': {'kv': 1}, 'r': 0}, indent=2) + '\n'
    new, dummy = jsonedit.remove_keys(text, ['q.kv'])
    assert new == json.dumps({'q': {}, 'r': 0}, indent=2) + '\n'


def test_all_members_of_object_removed():
    text = '{"kv_cache_scheme": {"a": 1}, "kv_cache_quant_algo": "FP8"}'
    new, removed = jsonedit.remove_keys(text, ['kv_cache_scheme', 'kv_cache_quant_algo'])
    assert new == '{}'
    assert len(removed) == 2


def test_numbers_escapes_non_ascii_crlf_and_missing_newline_kept():
    text = ('{\r\n  "rms_norm_eps": 1e-06,\r\n  "rope_theta": 50000.0,\r\n  "big": 1E+400,\r\n'
            '  "name": "Kimi \u2013 K2.5 \u6a21\u578b",\r\n  "escaped": "\\u00e9\\n",\r\n'
            '  "kv_cache_scheme": {"num_bits": 8},\r\n  "neg": -0.0\r\n}')
    new, dummy = jsonedit.remove_keys(text, ['kv_cache_scheme'])
    assert new == text.replace('  "kv_cache_scheme": {"num_bits": 8},\r\n', '')
    assert not new.endswith('\n')


def test_duplicate_keys_all_removed():
    new, removed = jsonedit.remove_keys('{"k": 1, "x": 0, "k": 2}', ['k'])
    assert new == '{"x": 0}'
    assert [r['value'] for r in removed] == [1, 2]


def test_nested_match_inside_removed_member_reported_once():
    new, removed = jsonedit.remove_keys('{"kv": {"kv": 1}, "z": 0}', ['**.kv'])
    assert new == '{"z": 0}'
    assert removed == [{'key': 'kv', 'value': {'kv': 1}}]


def test_nothing_to_remove_returns_same_text_object():
    text = fixtures.dumps(fixtures.kimi_k25_config('none'), 2)
    new, removed = jsonedit.remove_keys(text, ['**.kv_cache_scheme'])
    assert removed == []
    assert new is text


def test_remove_keys_refuses_scalar_root_without_error():
    assert jsonedit.remove_keys('[1, 2]', ['**.x']) == ('[1, 2]', [])


# ---------------------------------------------------------------- malformed input

def test_malformed_json_names_line_and_column():
    text = '{\n  "a": 1,\n  "b": 2\n  "c": 3\n}\n'
    with pytest.raises(jsonedit.JSONEditError) as err:
        jsonedit.remove_keys(text, ['a'], name='/m/config.json')
    assert err.value.line == 4
    assert err.value.column == 3
    assert '/m/config.json' in err.value.msg
    assert 'line 4 column 3: a missing comma' in err.value.msg
    assert 'Expecting' not in err.value.msg


def test_empty_file_is_malformed():
    with pytest.raises(jsonedit.JSONEditError) as err:
        jsonedit.remove_keys('', ['a'], name='x.json')
    assert (err.value.line, err.value.column) == (1, 1)


def test_decode_keeps_bom_and_rejects_non_utf8():
    text, bom = jsonedit.decode(b'\xef\xbb\xbf{"a": 1}')
    assert (text, bom) == ('{"a": 1}', '\ufeff')
    with pytest.raises(jsonedit.JSONEditError) as err:
        jsonedit.decode(b'{\n"a": "caf\xe9"}', name='latin1.json')
    assert err.value.line == 2
    assert err.value.column == 10  # "a": "caf<0xe9>: the bad byte is the 10th
    assert 'latin1.json is not UTF-8' in err.value.msg


# ---------------------------------------------------------------- plan_file

def test_plan_file_missing_optional_and_required(tmp_path):
    plan = jsonedit.plan_file(str(tmp_path / 'hf_quant_config.json'), ['quantization.kv_cache_quant_algo'])
    assert plan['exists'] is False
    assert plan['changed'] is False
    assert plan['skipped'] == 'file does not exist'
    with pytest.raises(jsonedit.JSONEditError) as err:
        jsonedit.plan_file(str(tmp_path / 'config.json'), ['a'], required=True)
    assert 'does not exist and is marked required' in err.value.msg


def test_plan_file_bom_kept_in_output(tmp_path):
    path = tmp_path / 'config.json'
    path.write_bytes(b'\xef\xbb\xbf{"a": 1, "kv_cache_scheme": 2}\n')
    plan = jsonedit.plan_file(str(path), ['kv_cache_scheme'])
    assert plan['_raw_after'] == b'\xef\xbb\xbf{"a": 1}\n'


def test_links_sharing_finds_other_snapshots(tmp_path):
    summary = fixtures.make_model_dir(str(tmp_path), layout='hf-cache', snapshots=2)
    blob = summary['blobs']['config.json'][0]
    first, second = summary['snapshots']
    assert jsonedit.hf_cache_repo(blob) == summary['repo']
    assert jsonedit.links_sharing(blob, exclude=os.path.join(second, 'config.json')) == [
        os.path.join(first, 'config.json')]
    assert jsonedit.hf_cache_repo(os.path.join(second, 'config.json')) is None
