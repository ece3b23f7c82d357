# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model config edit (module_utils/sm120/modelconfig.py) against hostile input and odd trees:
directory links leading outside the model directory, repeated parent keys,
deep nesting, unwritable directories, oversized files, syntax errors named in
words, odd encodings, and a fuzz test of the whole parse, edit and write path."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import random
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import jsonedit
import modelconfig_edit

KV = {'num_bits': 8, 'type': 'float', 'strategy': 'tensor'}
CONFIG = {'architectures': ['X'], 'quantization_config': {'kv_cache_scheme': KV, 'quant_method': 'fp8'}, 'hidden_size': 7}
CLEAN = {'architectures': ['X'], 'quantization_config': {'quant_method': 'fp8'}, 'hidden_size': 7}


@pytest.fixture
def run(capsys):
    return module_runner(modelconfig_edit.main, capsys)


def _write(path, data):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    raw = data if isinstance(data, bytes) else json.dumps(data, indent=2).encode() + b'\n'
    with open(str(path), 'wb') as handle:
        handle.write(raw)
    return raw


def _tree(root):
    """Every file under root: relative path -> bytes (links: their text)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(str(root)):
        for entry in dirnames + filenames:
            full = os.path.join(dirpath, entry)
            if os.path.islink(full):
                out[os.path.relpath(full, str(root))] = 'link:' + os.readlink(full)
            elif os.path.isfile(full):
                out[os.path.relpath(full, str(root))] = open(full, 'rb').read()
    return out


# ------------------------------------------------------------------ item 6: directory links

def _linked_sub(tmp_path):
    outside = tmp_path / 'outside' / 'dir'
    _write(outside / 'config.json', CONFIG)
    model = tmp_path / 'model'
    model.mkdir()
    os.symlink(str(outside), str(model / 'sub'))
    files = [{'name': 'sub/config.json', 'absent': ['**.kv_cache_scheme']}]
    return model, outside, files


@pytest.mark.parametrize('policy', ['refuse', 'copy'])
def test_directory_link_outside_the_model_dir_is_refused(tmp_path, run, policy):
    model, outside, files = _linked_sub(tmp_path)
    before = _tree(tmp_path)
    rc, result = run({'path': str(model), 'files': files, 'symlinks': policy})
    assert rc == 1
    assert result['changed'] is False
    assert 'directory link %s -> %s' % (model / 'sub', outside) in result['msg']
    assert 'outside the model directory' in result['msg']
    assert 'Nothing was changed' in result['msg']
    assert _tree(tmp_path) == before


def test_directory_link_outside_is_edited_only_with_follow(tmp_path, run):
    model, outside, files = _linked_sub(tmp_path)
    rc, result = run({'path': str(model), 'files': files, 'symlinks': 'follow'})
    assert rc == 0
    entry = result['files'][0]
    assert entry['written'] == str(outside / 'config.json')
    assert entry['symlink']['through'] == str(model / 'sub')
    assert entry['symlink']['action'] == 'follow'
    assert json.loads(open(str(outside / 'config.json')).read()) == CLEAN
    assert os.path.islink(str(model / 'sub'))


def test_model_dir_given_through_a_link_and_inner_links_inside_it_still_work(tmp_path, run):
    real = tmp_path / 'real'
    _write(real / 'inner' / 'config.json', CONFIG)
    os.symlink('inner', str(real / 'alias'))           # a directory link that stays inside
    os.symlink(str(real), str(tmp_path / 'model'))     # the model dir itself is a link
    rc, result = run({'path': str(tmp_path / 'model'),
                      'files': [{'name': 'alias/config.json', 'absent': ['**.kv_cache_scheme']}]})
    assert rc == 0
    assert result['files'][0]['symlink'] is None
    assert json.loads(open(str(real / 'inner' / 'config.json')).read()) == CLEAN


# ------------------------------------------------------------------ item 7: tracebacks

def test_parent_key_repeated_with_an_object_then_a_number_fails_cleanly(tmp_path, run):
    config = tmp_path / 'm' / 'config.json'
    raw = _write(config, b'{\n  "quantization_config": {"kv_cache_scheme": {"num_bits": 8}, "x": 1},\n'
                         b'  "quantization_config": 5\n}\n')
    rc, result = run({'path': str(tmp_path / 'm'),
                      'files': [{'name': 'config.json', 'absent': ['quantization_config.kv_cache_scheme']}]})
    assert rc == 1
    assert result['file'] == str(config)
    assert 'appears twice in one object (line 2, column 3 and line 3, column 3)' in result['msg']
    assert 'holding an object and then a number' in result['msg']
    assert 'Traceback' not in json.dumps(result)
    assert open(str(config), 'rb').read() == raw


def test_nesting_deeper_than_the_recursion_limit_fails_cleanly(tmp_path, run):
    config = tmp_path / 'config.json'
    depth = 5000
    raw = _write(config, ('{"a": ' * depth + '{"kv_cache_scheme": 1}' + '}' * depth).encode())
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme']})
    assert rc == 1
    assert result['file'] == str(config)
    assert 'nests objects and arrays deeper than 128 levels (line 1, column 769)' in result['msg']
    assert open(str(config), 'rb').read() == raw


def test_nesting_over_the_cap_but_under_the_parser_limit_is_refused_too(tmp_path, run):
    config = tmp_path / 'config.json'
    raw = _write(config, ('[' * 300 + '{"kv_cache_scheme": 1}' + ']' * 300).encode())
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme']})
    assert rc == 1
    assert 'deeper than 128 levels' in result['msg']
    assert open(str(config), 'rb').read() == raw


def test_unwritable_directory_fails_with_file_reason_and_what_was_done(tmp_path, run, monkeypatch):
    model = tmp_path / 'm'
    first = model / 'config.json'
    second = model / 'hf_quant_config.json'
    _write(first, CONFIG)
    raw2 = _write(second, {'quantization': {'kv_cache_quant_algo': 'FP8', 'quant_algo': 'NVFP4'}})
    real_mkstemp = jsonedit.tempfile.mkstemp
    calls = []

    def mkstemp(*args, **kwargs):
        calls.append(kwargs.get('prefix'))
        if len(calls) == 2:  # root ignores chmod 0o555: make the second file's directory refuse here
            raise PermissionError(13, 'Permission denied')
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(jsonedit.tempfile, 'mkstemp', mkstemp)
    rc, result = run({'path': str(model), 'backup': True})
    assert rc == 1
    assert result['changed'] is True
    assert result['file'] == str(second)
    assert ('could not write %s (cannot create a temporary file in %s): Permission denied' % (second, model)
            in result['msg'])
    assert 'The original file is unchanged' in result['msg']
    assert 'Already written before this failure: %s.' % first in result['msg']
    done, failed = result['files']
    assert done['written'] == str(first) and os.path.exists(done['backup_file'])
    assert json.loads(open(str(first)).read()) == CLEAN
    assert 'written' not in failed
    assert open(failed['backup_file'], 'rb').read() == raw2
    assert 'A backup was made first: %s.' % failed['backup_file'] in result['msg']
    assert 'Backups made: %s.' % done['backup_file'] in result['msg']
    assert open(str(second), 'rb').read() == raw2
    assert sorted(os.listdir(str(model))) == sorted(['config.json', 'hf_quant_config.json',
                                                     os.path.basename(done['backup_file']),
                                                     os.path.basename(failed['backup_file'])])


# ------------------------------------------------------------------ item 8: size cap

def test_file_over_the_default_cap_is_refused_unread(tmp_path, run, monkeypatch):
    config = tmp_path / 'config.json'
    with open(str(config), 'wb') as handle:   # sparse: 16 MiB + 1 byte, no disk used
        handle.truncate(16 * 1024 * 1024 + 1)
    reads = []
    real_read = os.read
    monkeypatch.setattr(jsonedit.os, 'read', lambda fd, n: reads.append(n) or real_read(fd, n))
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme']})
    assert rc == 1
    assert result['file'] == str(config)
    assert ('is 16777217 bytes (16.0 MiB), more than the max_size cap of 16777216 bytes (16.0 MiB)'
            in result['msg'])
    assert 'Nothing was read or changed' in result['msg']
    assert reads == []


def test_max_size_option(tmp_path, run):
    config = tmp_path / 'config.json'
    raw = _write(config, CONFIG)
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme'], 'max_size': len(raw) - 1})
    assert rc == 1
    assert 'is %d bytes' % len(raw) in result['msg']
    assert open(str(config), 'rb').read() == raw
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme'], 'max_size': len(raw)})
    assert (rc, result['changed']) == (0, True)


# ------------------------------------------------------------------ item 10b: syntax errors in words

@pytest.mark.parametrize('text, needle', [
    ('{\n  "a": 1,\n  "kv_cache_scheme": 2,\n  }\n',
     "config.json line 4 column 3: trailing comma before '}'. Line 4 reads: '  }'"),
    ('{\n  "a": [1, 2,],\n  "kv_cache_scheme": 2\n}\n', "line 2 column 14: trailing comma before ']'"),
    ('{\n  // the KV cache\n  "kv_cache_scheme": 2\n}\n',
     "config.json line 2 column 3: a // comment (JSON has no comments). Line 2 reads: '  // the KV cache'"),
    ('{"a": 1, /* x */ "b": 2}', 'a /* */ comment (JSON has no comments)'),
    ("{'kv_cache_scheme': 1}", 'a single-quoted string (JSON needs double quotes)'),
    ('{"a": True}', "Python's True (JSON spells it true)"),
    ('{kv_cache_scheme: 1}', 'an unquoted key kv_cache_scheme (JSON keys need double quotes)'),
    ('{"a": "x\ty"}', "a raw control character '\\t' inside a string"),
    ('{"a": 1\x1b}', "Line 1 reads: '{\"a\": 1\\x1b}'"),
    ('{"a": 1', 'the text ends early'),
])
def test_syntax_errors_are_named(tmp_path, run, text, needle):
    config = tmp_path / 'config.json'
    raw = _write(config, text.encode())
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme']})
    assert rc == 1
    assert needle.replace('config.json', str(config)) in result['msg']
    assert 'The file was left unchanged' in result['msg']
    assert open(str(config), 'rb').read() == raw


@pytest.mark.parametrize('text', ['{\n  "a": 1,\n  "kv_cache_scheme": 2,\n  }\n', '{"a": [1, 2,]}',
                                  '{\n  // the KV cache\n  "a": 2\n}\n', "{'a': 1}", '{kv_cache_scheme: 1}'])
def test_a_recognised_syntax_error_says_only_what_it_is(tmp_path, run, text):
    # (the parser's "Expecting property name enclosed in double quotes" names another fault than a trailing comma)
    config = tmp_path / 'config.json'
    _write(config, text.encode())
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme']})
    assert rc == 1
    assert 'Expecting' not in result['msg'] and 'the parser says' not in result['msg']


def test_an_unrecognised_syntax_error_still_quotes_the_parser(tmp_path, run):
    config = tmp_path / 'config.json'
    _write(config, b'{"a": @}')
    rc, result = run({'path': str(config), 'absent': ['**.kv_cache_scheme']})
    assert rc == 1
    assert "(the parser says: Expecting value at line 1, column 7)" in result['msg']


# ------------------------------------------------------------------ sweep: encodings, odd text

@pytest.mark.parametrize('raw, needle', [
    (b'\xff\xfe{\x00}\x00', 'is UTF-16 text'),
    (b'{"a": 1}\x00\x00\x00', 'contains a NUL byte at line 1, column 9'),
    (b'{"a": "\xc3("}', 'is not UTF-8 text (invalid byte 0xc3 at line 1, column 8)'),
])
def test_odd_encodings_fail_cleanly(tmp_path, run, raw, needle):
    config = tmp_path / 'config.json'
    _write(config, raw)
    rc, result = run({'path': str(config), 'absent': ['a']})
    assert rc == 1
    assert needle in result['msg']
    assert open(str(config), 'rb').read() == raw


def test_lone_surrogate_escapes_are_reported_as_valid_text(tmp_path, run, capsys):
    config = tmp_path / 'config.json'
    _write(config, b'{"kv_cache_scheme": {"\\ud800": "\\udcff"}, "a": 1}')
    rc, result = run({'path': str(config), 'absent': ['kv_cache_scheme']})
    assert rc == 0
    assert result['files'][0]['removed'] == [{'key': 'kv_cache_scheme', 'value': {'\\ud800': '\\xff'}}]
    assert open(str(config), 'rb').read() == b'{"a": 1}'


def test_model_dir_with_an_undecodable_link_target(tmp_path, run):
    model = tmp_path / 'm'
    _write(model / 'config.json', CONFIG)
    outside = os.fsencode(str(tmp_path)) + b'/caf\xe9'
    os.mkdir(outside)
    with open(outside + b'/config.json', 'wb') as handle:
        handle.write(json.dumps(CONFIG).encode())
    os.symlink(outside, os.fsencode(str(model / 'sub')))
    rc, result = run({'path': str(model), 'files': [{'name': 'sub/config.json', 'absent': ['**.kv_cache_scheme']}]})
    assert rc == 1
    assert 'caf\\xe9' in result['msg']


# ------------------------------------------------------------------ fuzz: parse, edit, write

_KEYS = st.sampled_from(['kv_cache_scheme', 'kv_cache_scheme', 'a', 'b', 'quantization_config', '', 'k\u00e9y', 'x.y'])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 20, 10 ** 20),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
_JSON = st.recursive(_SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(_KEYS, kids, max_size=4)), max_leaves=20)


def _reference(value):
    """value without every kv_cache_scheme member, outermost first."""
    if isinstance(value, dict):
        return dict((k, _reference(v)) for k, v in value.items() if k != 'kv_cache_scheme')
    if isinstance(value, list):
        return [_reference(v) for v in value]
    return value


def _mutate(raw, seed, times):
    rnd = random.Random(seed)
    data = bytearray(raw)
    for dummy in range(times):
        if not data:
            break
        where = rnd.randrange(len(data))
        action = rnd.choice(['flip', 'insert', 'delete'])
        byte = rnd.choice(b',{}[]":/ \n\x00\xff\xc3tn0-')
        if action == 'flip':
            data[where] = byte
        elif action == 'insert':
            data.insert(where, byte)
        else:
            del data[where]
    return bytes(data)


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=_JSON, indent=st.sampled_from([None, 2, '\t']), seed=st.integers(0, 2 ** 32),
       times=st.sampled_from([0, 0, 1, 2, 3]))
def test_fuzz_parse_edit_write(run, value, indent, seed, times):
    raw = _mutate(json.dumps(value, indent=indent, ensure_ascii=bool(seed % 3)).encode(), seed, times)
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, 'config.json')
        _write(config, raw)
        rc, result = run({'path': config, 'absent': ['**.kv_cache_scheme']})
        after = open(config, 'rb').read()
        json.dumps(result).encode('utf-8')   # the result is valid text
        if rc != 0:
            assert result['file'] == config and result['changed'] is False
            assert after == raw
            return
        try:
            before = json.loads(raw.decode('utf-8'), parse_constant=str)
        except ValueError:
            pytest.fail('accepted invalid JSON: %r' % raw)
        assert json.loads(after.decode('utf-8'), parse_constant=str) == _reference(before)
        assert result['changed'] is (after != raw)


def test_a_file_of_many_matches_gives_a_bounded_result_and_a_summary_diff(tmp_path, run):
    """300,000 matching keys: all removed and counted, the first 1000 listed, the diff one line (review finding)."""
    config = tmp_path / 'config.json'
    config.write_text('[' + ', '.join('{"kv_cache_scheme": %d}' % i for i in range(300000)) + ']')
    rc, result = run({'path': str(tmp_path), 'files': [{'name': 'config.json', 'absent': ['**.kv_cache_scheme']}]},
                     check=True, diff=True)
    assert rc == 0, result
    assert result['removed_count'] == 300000
    entry = result['files'][0]
    assert entry['removed_count'] == 300000 and entry['removed_truncated'] is True
    assert len(entry['removed']) == 1000 and entry['removed'][999]['value'] == 999
    assert len(json.dumps(result)) < 200000
    assert result['diff'][0]['prepared'].startswith('%s: 300000 key(s) removed; the file is' % config)
