# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model config edit (module_utils/sm120/modelconfig.py, as sm120_config runs it on each model directory), in-process
against realistic model dirs."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat

import pytest

from helpers import load_source, module_runner
import modelconfig_edit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
KV_KEYS = ('"kv_cache_scheme"', '"kv_cache_quant_algo"')
OLD = 1_600_000_000  # a fixed past mtime, so "not written" is visible in st_mtime_ns


fixtures = load_source('gpufleet_model_fixtures', 'tests', 'sim', 'model', 'fixtures.py')


@pytest.fixture
def run(capsys):
    """run(args, check=False, diff=False) -> (exit code, result dict)."""
    return module_runner(modelconfig_edit.main, capsys)


def _snapshot(paths):
    """path -> (bytes, mtime_ns, mode, is_link) for files and links."""
    state = {}
    for path in paths:
        st = os.lstat(path)
        data = os.readlink(path) if os.path.islink(path) else open(path, 'rb').read()
        state[path] = (data, st.st_mtime_ns, stat.S_IMODE(st.st_mode), os.path.islink(path))
    return state


def _age(paths):
    for path in paths:
        os.utime(path, (OLD, OLD), follow_symlinks=False)


def _clean_config(quant, indent=2):
    data = fixtures.kimi_k25_config(quant)
    if quant in ('top', 'both'):
        del data['quantization_config']['kv_cache_scheme']
    if quant in ('text_config', 'both'):
        del data['text_config']['quantization_config']['kv_cache_scheme']
    return fixtures.dumps(data, indent).encode()


def _clean_hf_quant(indent=4):
    return fixtures.dumps(fixtures.modelopt_hf_quant_config(kv_cache=False), indent).encode()


# ------------------------------------------------------------------ plain directories

def test_defaults_clean_both_files_of_a_plain_model_dir(tmp_path, run):
    model = str(tmp_path / 'Kimi-K2.5')
    fixtures.make_model_dir(model)
    other = os.path.join(model, 'generation_config.json')
    before_other = open(other, 'rb').read()

    rc, result = run({'path': model})

    assert rc == 0
    assert result['changed'] is True
    assert result['removed_count'] == 2
    by_name = dict((os.path.basename(f['path']), f) for f in result['files'])
    assert by_name['config.json']['removed'] == [
        {'key': 'quantization_config.kv_cache_scheme', 'value': fixtures.KV_CACHE_SCHEME}]
    assert by_name['hf_quant_config.json']['removed'] == [{'key': 'quantization.kv_cache_quant_algo', 'value': 'FP8'}]
    assert open(os.path.join(model, 'config.json'), 'rb').read() == _clean_config('top')
    assert open(os.path.join(model, 'hf_quant_config.json'), 'rb').read() == _clean_hf_quant()
    assert open(other, 'rb').read() == before_other
    assert 'diff' not in result


def test_nested_text_config_found_by_default_path(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, quant='text_config', hf_quant=False)
    rc, result = run({'path': model})
    assert rc == 0
    assert [r['key'] for r in result['files'][0]['removed']] == ['text_config.quantization_config.kv_cache_scheme']
    assert result['files'][1] == {'path': os.path.join(model, 'hf_quant_config.json'), 'exists': False,
                                  'changed': False, 'removed': [], 'removed_count': 0, 'removed_truncated': False, 'symlink': None,
                                  'skipped': 'file does not exist'}
    assert open(os.path.join(model, 'config.json'), 'rb').read() == _clean_config('text_config')


def test_explicit_files_with_literal_key_paths(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, quant='both')
    rc, result = run({'path': model, 'files': [
        {'name': 'config.json', 'required': True, 'absent': [
            'quantization_config.kv_cache_scheme', 'text_config.quantization_config.kv_cache_scheme']},
        {'name': 'hf_quant_config.json', 'absent': ['quantization.kv_cache_quant_algo']},
    ]})
    assert rc == 0
    assert result['removed_count'] == 3
    assert open(os.path.join(model, 'config.json'), 'rb').read() == _clean_config('both')


def test_single_file_with_absent(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model)
    path = os.path.join(model, 'hf_quant_config.json')
    rc, result = run({'path': path, 'absent': ['quantization.kv_cache_quant_algo']})
    assert rc == 0
    assert result['changed'] is True
    assert open(path, 'rb').read() == _clean_hf_quant()


def test_already_clean_changed_false_bytes_and_mtime_unchanged(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, quant='none')
    files = [os.path.join(model, n) for n in ('config.json', 'hf_quant_config.json')]
    _age(files)
    for path in files:  # the operators' grep -c returns 0
        assert not any(k in open(path).read() for k in KV_KEYS)
    before = _snapshot(files)

    rc, result = run({'path': model, 'backup': True}, diff=True)

    assert rc == 0
    assert result['changed'] is False
    assert result['removed_count'] == 0
    assert result['msg'] == 'nothing to remove: the keys are already absent'
    assert 'diff' not in result
    assert all('backup_file' not in f for f in result['files'])
    assert _snapshot(files) == before
    assert sorted(os.listdir(model)) == ['config.json', 'generation_config.json', 'hf_quant_config.json',
                                         'tokenizer_config.json']


def test_second_run_is_idempotent(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model)
    assert run({'path': model})[1]['changed'] is True
    files = [os.path.join(model, n) for n in ('config.json', 'hf_quant_config.json')]
    _age(files)
    before = _snapshot(files)
    rc, result = run({'path': model})
    assert (rc, result['changed']) == (0, False)
    assert _snapshot(files) == before


def test_malformed_json_fails_with_line_and_column_and_nothing_written(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model)
    config = os.path.join(model, 'config.json')
    hf_quant = os.path.join(model, 'hf_quant_config.json')
    # a hand edit dropped the comma after "quant_algo": "NVFP4" (line 7) in the second
    # file; config.json, valid and needing an edit, must not be written either
    lines = open(hf_quant).read().split('\n')
    assert lines[6] == '        "quant_algo": "NVFP4",'
    lines[6] = lines[6].rstrip(',')
    open(hf_quant, 'w').write('\n'.join(lines))
    _age([config, hf_quant])
    before = _snapshot([config, hf_quant])

    rc, result = run({'path': model})

    assert rc == 1
    assert result['failed'] is True
    assert result['file'] == hf_quant
    assert (result['line'], result['column']) == (8, 9)
    assert hf_quant in result['msg']
    assert 'line 8 column 9: a missing comma' in result['msg']
    assert 'Expecting' not in result['msg']  # the parser's own words, which point at another fault, are not quoted
    assert 'left unchanged' in result['msg']
    assert _snapshot([config, hf_quant]) == before


@pytest.mark.parametrize('indent', [2, 4, 'tab', 'compact'])
def test_indentation_kept(tmp_path, run, indent):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, indent=indent, hf_quant_indent=indent)
    rc, dummy = run({'path': model})
    assert rc == 0
    assert open(os.path.join(model, 'config.json'), 'rb').read() == _clean_config('top', indent)
    assert open(os.path.join(model, 'hf_quant_config.json'), 'rb').read() == _clean_hf_quant(indent)


def test_key_order_and_non_ascii_kept(tmp_path, run):
    path = tmp_path / 'config.json'
    data = {'zeta': 'Kimi \u2013 \u6a21\u578b', 'quantization_config': {'quant_method': 'compressed-tensors',
                                                                        'kv_cache_scheme': {'num_bits': 8}},
            'alpha': 1}
    path.write_bytes(fixtures.dumps(data, 2, ensure_ascii=False).encode('utf-8'))
    rc, dummy = run({'path': str(path), 'absent': ['**.kv_cache_scheme']})
    assert rc == 0
    del data['quantization_config']['kv_cache_scheme']
    raw = path.read_bytes()
    assert raw == fixtures.dumps(data, 2, ensure_ascii=False).encode('utf-8')
    assert '\u6a21'.encode('utf-8') in raw
    assert list(json.loads(raw)) == ['zeta', 'quantization_config', 'alpha']


def test_check_mode_writes_nothing_but_reports_diff(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model)
    files = [os.path.join(model, n) for n in ('config.json', 'hf_quant_config.json')]
    _age(files)
    before = _snapshot(files)

    rc, result = run({'path': model, 'backup': True}, check=True, diff=True)

    assert rc == 0
    assert result['changed'] is True
    assert result['msg'] == 'would remove 2 key(s) from 2 file(s)'
    assert _snapshot(files) == before
    assert len(os.listdir(model)) == 4  # no backup, no temporary file
    assert [d['before_header'] for d in result['diff']] == files
    assert result['diff'][0]['before'] == open(files[0]).read()
    assert result['diff'][0]['after'] == _clean_config('top').decode()
    assert result['diff'][1]['after'] == _clean_hf_quant().decode()
    assert all('written' not in f for f in result['files'])


def test_backup_keeps_original_bytes(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, hf_quant=False)
    config = os.path.join(model, 'config.json')
    original = open(config, 'rb').read()
    rc, result = run({'path': model, 'backup': True})
    assert rc == 0
    backup = result['files'][0]['backup_file']
    assert os.path.dirname(backup) == model
    assert os.path.basename(backup).startswith('config.json.%d.' % os.getpid())
    assert backup.endswith('~')
    assert open(backup, 'rb').read() == original
    assert open(config, 'rb').read() == _clean_config('top')


def test_mode_kept(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, hf_quant=False)
    config = os.path.join(model, 'config.json')
    os.chmod(config, 0o640)
    inode = os.stat(config).st_ino
    rc, dummy = run({'path': model})
    assert rc == 0
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o640
    assert os.stat(config).st_ino != inode  # replaced by rename, not rewritten in place
    assert [n for n in os.listdir(model) if n.endswith('.tmp')] == []


@pytest.mark.skipif(os.geteuid() != 0, reason='changing a file owner needs root')
def test_owner_kept(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, hf_quant=False)
    config = os.path.join(model, 'config.json')
    os.chown(config, 1234, 2345)
    rc, dummy = run({'path': model})
    assert rc == 0
    st = os.stat(config)
    assert (st.st_uid, st.st_gid) == (1234, 2345)
    assert open(config, 'rb').read() == _clean_config('top')


# ------------------------------------------------------------------ refused inputs

@pytest.mark.parametrize('args, needle', [
    ({'path': '{model}', 'absent': ['x']}, 'is a directory'),
    ({'path': '{model}/config.json', 'files': [{'name': 'config.json', 'absent': ['x']}]}, 'is a file'),
    ({'path': '{model}/config.json'}, '"absent" must list at least one key path'),
    ({'path': '{model}', 'files': [{'name': '../other/config.json', 'absent': ['x']}]}, 'must not contain ".."'),
    ({'path': '{model}', 'files': [{'name': '/etc/config.json', 'absent': ['x']}]}, 'must be relative'),
    ({'path': '{model}/nope'}, 'does not exist'),
    ({'path': '{model}', 'files': [{'name': 'config.json', 'absent': ['a..b']}]}, 'empty segment'),
    ({'path': '{model}', 'files': [{'name': 'extra.json', 'absent': ['a'], 'required': True}]},
     'does not exist and is marked required'),
])
def test_refused_inputs(tmp_path, run, args, needle):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model)
    before = _snapshot([os.path.join(model, n) for n in os.listdir(model)])
    args = json.loads(json.dumps(args).replace('{model}', model))
    rc, result = run(args)
    assert rc == 1
    assert needle in result['msg']
    assert _snapshot([os.path.join(model, n) for n in os.listdir(model)]) == before


# ------------------------------------------------------------------ Hugging Face cache layouts

def _hf(tmp_path, snapshots=1):
    summary = fixtures.make_model_dir(str(tmp_path / 'hub'), layout='hf-cache', snapshots=snapshots)
    blobs = os.path.join(summary['repo'], 'blobs')
    every = [os.path.join(blobs, b) for b in os.listdir(blobs)]
    for snap in summary['snapshots']:
        every += [os.path.join(snap, n) for n in os.listdir(snap)]
    return summary, every


def test_hf_refuse_is_default_and_changes_nothing(tmp_path, run):
    summary, every = _hf(tmp_path)
    before = _snapshot(every)
    rc, result = run({'path': summary['model_dir']})
    assert rc == 1
    assert 'is a symbolic link to' in result['msg']
    assert 'Hugging Face cache layout' in result['msg']
    assert 'symlinks: copy' in result['msg']
    assert _snapshot(every) == before


def test_hf_copy_replaces_link_and_leaves_blob(tmp_path, run):
    summary, every = _hf(tmp_path)
    snap = summary['model_dir']
    config = os.path.join(snap, 'config.json')
    blob = summary['blobs']['config.json'][0]
    os.chmod(blob, 0o444)  # hub blobs may be read-only; the copy takes the blob's mode
    blob_before = _snapshot([blob])

    rc, result = run({'path': snap, 'symlinks': 'copy'})

    assert rc == 0
    entry = result['files'][0]
    assert entry['symlink']['action'] == 'copy'
    assert entry['symlink']['target'] == blob
    assert entry['written'] == config
    assert not os.path.islink(config)
    assert open(config, 'rb').read() == _clean_config('top')
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o444
    assert _snapshot([blob]) == blob_before
    # untouched files of the snapshot are still links into blobs/
    assert os.path.islink(os.path.join(snap, 'generation_config.json'))
    # second run: regular file, already clean
    assert run({'path': snap, 'symlinks': 'copy'})[1]['changed'] is False


def test_hf_copy_in_check_mode_keeps_the_link(tmp_path, run):
    summary, every = _hf(tmp_path)
    before = _snapshot(every)
    rc, result = run({'path': summary['model_dir'], 'symlinks': 'copy', 'backup': True}, check=True, diff=True)
    assert rc == 0
    assert result['changed'] is True
    assert result['files'][0]['symlink']['action'] == 'copy'
    assert 'kv_cache_scheme' not in result['diff'][0]['after']
    assert _snapshot(every) == before
    assert sorted(os.listdir(summary['model_dir'])) == sorted(os.path.basename(p) for p in every
                                                              if os.path.dirname(p) == summary['model_dir'])


def test_diff_mode_when_writing(tmp_path, run):
    model = str(tmp_path / 'm')
    fixtures.make_model_dir(model, hf_quant=False)
    config = os.path.join(model, 'config.json')
    original = open(config).read()
    rc, result = run({'path': model}, diff=True)
    assert rc == 0
    assert result['diff'] == [{'before_header': config, 'after_header': config, 'before': original,
                               'after': _clean_config('top').decode()}]
    assert open(config, 'rb').read() == _clean_config('top')


def test_hf_copy_backup_is_a_link_to_the_same_blob(tmp_path, run):
    summary, dummy = _hf(tmp_path)
    snap = summary['model_dir']
    rc, result = run({'path': snap, 'symlinks': 'copy', 'backup': True})
    assert rc == 0
    backup = result['files'][0]['backup_file']
    assert os.path.islink(backup)
    assert os.readlink(backup) == result['files'][0]['symlink']['link']
    assert os.path.realpath(backup) == summary['blobs']['config.json'][0]


def test_hf_follow_edits_blob_when_not_shared(tmp_path, run):
    summary, dummy = _hf(tmp_path)
    snap = summary['model_dir']
    config = os.path.join(snap, 'config.json')
    blob = summary['blobs']['config.json'][0]
    rc, result = run({'path': snap, 'symlinks': 'follow'})
    assert rc == 0
    assert result['files'][0]['symlink']['action'] == 'follow'
    assert result['files'][0]['written'] == blob
    assert os.path.islink(config)
    assert os.path.realpath(config) == blob
    assert open(blob, 'rb').read() == _clean_config('top')


def test_hf_two_snapshots_share_a_blob(tmp_path, run):
    summary, every = _hf(tmp_path, snapshots=2)
    first, second = summary['snapshots']
    blob = summary['blobs']['config.json'][0]
    assert os.path.realpath(os.path.join(first, 'config.json')) == blob
    assert os.path.realpath(os.path.join(second, 'config.json')) == blob
    before = _snapshot(every)

    # follow would change the other snapshot: refused, naming it, nothing written
    rc, result = run({'path': second, 'symlinks': 'follow'})
    assert rc == 1
    assert 'shared by 1 other link(s)' in result['msg']
    assert os.path.join(first, 'config.json') in result['msg']
    assert _snapshot(every) == before

    # copy edits only this snapshot
    rc, result = run({'path': second, 'symlinks': 'copy'})
    assert rc == 0
    assert result['files'][0]['symlink']['shared_with'] == [os.path.join(first, 'config.json')]
    assert open(os.path.join(second, 'config.json'), 'rb').read() == _clean_config('top')
    after = _snapshot(every)
    for path in every:
        if os.path.dirname(path) != second:
            assert after[path] == before[path], path
    assert b'kv_cache_scheme' in open(os.path.join(first, 'config.json'), 'rb').read()


def test_hf_clean_link_is_fine_under_refuse(tmp_path, run):
    summary = fixtures.make_model_dir(str(tmp_path / 'hub'), layout='hf-cache', quant='none')
    snap = summary['model_dir']
    rc, result = run({'path': snap})
    assert (rc, result['changed']) == (0, False)
    assert result['files'][0]['symlink']['action'] is None
    assert os.path.islink(os.path.join(snap, 'config.json'))


def test_follow_refused_for_hard_linked_target(tmp_path, run):
    target = tmp_path / 'store' / 'config.json'
    target.parent.mkdir()
    target.write_bytes(fixtures.dumps(fixtures.kimi_k25_config('top')).encode())
    os.link(str(target), str(tmp_path / 'store' / 'copy.json'))
    model = tmp_path / 'model'
    model.mkdir()
    os.symlink(str(target), str(model / 'config.json'))
    rc, result = run({'path': str(model), 'symlinks': 'follow'})
    assert rc == 1
    assert 'has 2 hard links' in result['msg']


def test_broken_link_fails_clearly(tmp_path, run):
    model = tmp_path / 'model'
    model.mkdir()
    os.symlink('../../blobs/0000', str(model / 'config.json'))
    rc, result = run({'path': str(model)})
    assert rc == 1
    assert 'which does not exist' in result['msg']
