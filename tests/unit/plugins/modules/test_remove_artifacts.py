# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.remove_artifacts, run in-process on the reference dump set."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil

import pytest

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import artifacts
from ansible_collections.gpufleet.vllm.plugins.modules import remove_artifacts

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
# the reference host: 35 dumps; sizes from the DeepSeek-V3 shapes at 194 tokens (see tests/sim/dumps.py)
EMBED = 194 * 7168 * 2 + 1216
NOMLA = 194 * 8 * 192 * 2 + 1216
MLA = 194 * 576 * 2 + 194 * 8 * 576 * 2 + 1216
REFERENCE_BYTES = 8 * EMBED + 8 * NOMLA + 19 * MLA


dumps = load_source('gpufleet_dumps', 'tests', 'sim', 'dumps.py')


@pytest.fixture
def run(capsys):
    """run(args, check=False, diff=False) -> (exit code, result dict)."""
    return module_runner(remove_artifacts.main, capsys)


@pytest.fixture
def dumpdir(tmp_path):
    """A directory with the 35 reference dumps and a few files that must stay."""
    directory = tmp_path / 'tmp'
    summary = dumps.make_dumps(str(directory))
    for name in ('embed_debug_notes.txt', 'mla_debug_layer0.pt', 'nomla_debug_tp0.pt.keep', 'model.pt',
                 'EMBED_DEBUG_TP0.PT'):
        (directory / name).write_bytes(b'keep me')
    assert summary['count'] == 35
    return directory


def _names(directory):
    return sorted(os.listdir(str(directory)))


KEEP = ['EMBED_DEBUG_TP0.PT', 'embed_debug_notes.txt', 'mla_debug_layer0.pt', 'model.pt', 'nomla_debug_tp0.pt.keep']


# ------------------------------------------------------------------ the reference set

def test_reference_set_shape():
    names = [n for n, dummy in dumps.reference_set()]
    assert len(names) == 35 == len(set(names))
    assert sum(s for dummy, s in dumps.reference_set()) == REFERENCE_BYTES == 65276224
    assert ['embed_debug_tp%d.pt' % r for r in range(8)] == names[:8]
    assert 'mla_debug_layer0_tp7.pt' in names and 'mla_debug_layer2_tp2.pt' in names


def test_removes_the_35_reference_dumps(dumpdir, run):
    rc, result = run({'paths': [str(dumpdir)]})
    assert rc == 0
    assert result['changed'] is True
    assert result['count'] == 35
    assert result['bytes_freed'] == REFERENCE_BYTES
    assert result['bytes_freed_human'] == '65.3 MB'
    assert result['bytes_held'] == 0
    assert result['msg'] == 'removed 35 file(s) (65.3 MB) from %s' % dumpdir
    assert result['report'] == [result['msg']] and (result['files'], result['links']) == (35, 0)
    assert _names(dumpdir) == KEEP
    sizes = dict((os.path.basename(r['path']), r['size']) for r in result['removed'])
    assert sizes['embed_debug_tp3.pt'] == EMBED
    assert sizes['nomla_debug_tp7.pt'] == NOMLA
    assert sizes['mla_debug_layer2_tp0.pt'] == MLA
    assert all(r['type'] == 'file' and r['in_use_by'] == [] for r in result['removed'])


def test_check_mode_lists_and_removes_nothing(dumpdir, run):
    before = _names(dumpdir)
    rc, result = run({'paths': [str(dumpdir)]}, check=True)
    assert rc == 0
    assert result['changed'] is True
    assert result['count'] == 35
    assert result['bytes_freed'] == REFERENCE_BYTES
    assert result['removed'] == []
    assert sorted(os.path.basename(r['path']) for r in result['would_remove']) == [
        n for n in before if n not in KEEP]
    assert result['msg'].startswith('would remove 35 file(s)')
    assert result['report'][1].startswith('would remove: ')
    assert _names(dumpdir) == before


def test_diff_mode_before_and_after(dumpdir, run):
    rc, result = run({'paths': [str(dumpdir)], 'patterns': ['embed_debug_tp*.pt']}, diff=True)
    assert rc == 0
    expected = ''.join('%s/embed_debug_tp%d.pt\n' % (dumpdir, r) for r in range(8))
    assert result['diff']['before'] == expected
    assert result['diff']['after'] == ''


def test_second_run_is_idempotent(dumpdir, run):
    assert run({'paths': [str(dumpdir)]})[1]['count'] == 35
    rc, result = run({'paths': [str(dumpdir)]})
    assert rc == 0
    assert result['changed'] is False
    assert result['count'] == 0
    assert result['bytes_freed'] == 0
    assert result['msg'] == 'nothing to remove in %s' % dumpdir


def test_missing_directory_is_skipped_not_an_error(tmp_path, run):
    rc, result = run({'paths': [str(tmp_path / 'absent')]})
    assert rc == 0
    assert result['changed'] is False
    assert result['skipped'] == [{'path': str(tmp_path / 'absent'), 'reason': 'directory does not exist'}]


# ------------------------------------------------------------------ links

def test_link_to_file_outside_is_removed_as_link_target_untouched(dumpdir, tmp_path, run):
    secret = tmp_path / 'etc' / 'shadow'
    secret.parent.mkdir()
    secret.write_bytes(b'root:*:19000:0:99999:7:::\n')
    os.symlink(str(secret), str(dumpdir / 'embed_debug_tp9.pt'))
    rc, result = run({'paths': [str(dumpdir)]})
    assert rc == 0
    assert result['count'] == 36
    assert result['bytes_freed'] == REFERENCE_BYTES  # a link frees nothing
    link = [r for r in result['removed'] if r['type'] == 'link']
    assert link == [{'path': str(dumpdir / 'embed_debug_tp9.pt'), 'size': 0, 'type': 'link',
                     'link_target': str(secret), 'in_use_by': []}]
    assert not os.path.lexists(str(dumpdir / 'embed_debug_tp9.pt'))
    assert secret.read_bytes() == b'root:*:19000:0:99999:7:::\n'


def test_link_skipped_with_symlinks_skip(dumpdir, tmp_path, run):
    secret = tmp_path / 'passwd'
    secret.write_bytes(b'x')
    os.symlink(str(secret), str(dumpdir / 'nomla_debug_tp9.pt'))
    rc, result = run({'paths': [str(dumpdir)], 'symlinks': 'skip'})
    assert rc == 0
    assert result['count'] == 35
    assert os.path.islink(str(dumpdir / 'nomla_debug_tp9.pt'))
    assert secret.read_bytes() == b'x'
    assert [s['path'] for s in result['skipped']] == [str(dumpdir / 'nomla_debug_tp9.pt')]
    assert 'symlinks=skip' in result['skipped'][0]['reason']


def test_symlinked_directory_is_not_followed(tmp_path, run):
    top = tmp_path / 'top'
    top.mkdir()
    elsewhere = tmp_path / 'elsewhere'
    dumps.make_dumps(str(elsewhere))
    os.symlink(str(elsewhere), str(top / 'sub'))
    rc, result = run({'paths': [str(top)], 'recursive': True})
    assert rc == 0
    assert result['count'] == 0
    assert len(os.listdir(str(elsewhere))) == 35
    assert result['skipped'] == [{'path': str(top / 'sub'), 'reason': 'symbolic link to a directory; not followed'}]


def test_directory_swapped_for_link_after_scan_is_not_followed(tmp_path):
    top = tmp_path / 'top'
    (top / 'sub').mkdir(parents=True)
    (top / 'sub' / 'embed_debug_tp0.pt').write_bytes(b'd' * 10)
    victim = tmp_path / 'victim'
    victim.mkdir()
    (victim / 'embed_debug_tp0.pt').write_bytes(b'precious')

    candidates, dummy = artifacts.scan([str(top)], artifacts.DEFAULT_PATTERNS, recursive=True)
    assert [c.path for c in candidates] == [str(top / 'sub' / 'embed_debug_tp0.pt')]
    shutil.rmtree(str(top / 'sub'))
    os.symlink(str(victim), str(top / 'sub'))  # the race: sub is now a link to another directory

    removed, failed, vanished = artifacts.remove(candidates)
    assert removed == [] and vanished == []
    assert failed == [{'path': str(top / 'sub' / 'embed_debug_tp0.pt'),
                       'reason': 'directory is (or was swapped for) a symbolic link or not a directory; '
                                 'not followed'}]
    assert (victim / 'embed_debug_tp0.pt').read_bytes() == b'precious'


def test_file_replaced_after_scan_is_left_alone(tmp_path):
    top = tmp_path / 'top'
    top.mkdir()
    (top / 'embed_debug_tp0.pt').write_bytes(b'old')
    candidates, dummy = artifacts.scan([str(top)], artifacts.DEFAULT_PATTERNS)
    os.unlink(str(top / 'embed_debug_tp0.pt'))
    (top / 'other').write_bytes(b'x')  # keep the old inode number from being reused at once
    (top / 'embed_debug_tp0.pt').write_bytes(b'new')
    removed, failed, dummy = artifacts.remove(candidates)
    assert removed == []
    assert failed[0]['reason'] == 'replaced since the scan; left alone'
    assert (top / 'embed_debug_tp0.pt').read_bytes() == b'new'


def test_odd_entries_named_like_dumps_are_skipped(tmp_path, run):
    top = tmp_path / 'top'
    top.mkdir()
    (top / 'embed_debug_tp0.pt').mkdir()
    os.mkfifo(str(top / 'embed_debug_tp1.pt'))
    rc, result = run({'paths': [str(top)]})
    assert rc == 0
    assert result['count'] == 0
    reasons = dict((os.path.basename(s['path']), s['reason']) for s in result['skipped'])
    assert reasons == {'embed_debug_tp0.pt': 'a directory named like a dump; only files are removed',
                       'embed_debug_tp1.pt': 'not a regular file (fifo, socket or device)'}
    assert os.path.isdir(str(top / 'embed_debug_tp0.pt'))


# ------------------------------------------------------------------ refused inputs

@pytest.mark.parametrize('args, needle', [
    ({'paths': ['tmp']}, "directory 'tmp' is relative"),
    ({'paths': ['{tmp}/../etc']}, 'contains ".."'),
    ({'paths': ['/']}, "directory '/' is refused"),
    ({'paths': ['//']}, "directory '//' is refused"),
    ({'paths': ['/proc']}, "directory '/proc' is refused"),
    ({'paths': ['{link}']}, 'resolves through a symbolic link to'),
    ({'paths': []}, '"paths" is empty'),
    ({'patterns': ['/etc/passwd']}, 'is absolute'),
    ({'patterns': ['../embed_debug_tp*.pt']}, 'contains "/"'),
    ({'patterns': ['..embed_debug_tp*.pt']}, 'contains ".."'),
    ({'patterns': ['sub/embed_debug_tp*.pt']}, 'contains "/"'),
    ({'patterns': ['*']}, 'matches every file'),
    ({'patterns': ['**']}, 'matches every file'),
    ({'patterns': ['?*']}, 'matches every file'),
    ({'patterns': ['*.*']}, 'matches every file'),
    ({'patterns': ['']}, 'empty pattern'),
    ({'max_depth': 2}, 'max_depth only applies with recursive: true'),
    ({'recursive': True, 'max_depth': -1}, 'max_depth must be 0 or more'),
    ({'min_age': 'ten minutes'}, 'min_age'),
])
def test_escaping_inputs_are_refused(dumpdir, tmp_path, run, args, needle):
    os.symlink(str(dumpdir), str(tmp_path / 'link'))
    args = json.loads(json.dumps(args).replace('{tmp}', str(dumpdir)).replace('{link}', str(tmp_path / 'link')))
    args.setdefault('paths', [str(dumpdir)])
    before = _names(dumpdir)
    rc, result = run(args)
    assert rc == 1
    assert needle in result['msg'], result['msg']
    assert _names(dumpdir) == before


def test_link_message_names_the_real_directory(dumpdir, tmp_path, run):
    os.symlink(str(dumpdir), str(tmp_path / 'link'))
    rc, result = run({'paths': [str(tmp_path / 'link')]})
    assert rc == 1
    assert 'Give the real directory (%s)' % dumpdir in result['msg']


# ------------------------------------------------------------------ in use

def test_open_dump_is_reported_with_our_pid(dumpdir, run):
    path = str(dumpdir / 'mla_debug_layer0_tp3.pt')
    with open(path, 'rb'):
        rc, result = run({'paths': [str(dumpdir)]})
    assert rc == 0
    assert result['count'] == 35
    held = [r for r in result['removed'] if r['in_use_by']]
    assert [r['path'] for r in held] == [path]
    assert {'pid': os.getpid(), 'name': open('/proc/self/comm').read().strip()} in held[0]['in_use_by']
    assert result['bytes_held'] == MLA


def test_open_dump_skipped_with_in_use_skip(dumpdir, run):
    path = str(dumpdir / 'embed_debug_tp0.pt')
    with open(path, 'rb'):
        rc, result = run({'paths': [str(dumpdir)], 'in_use': 'skip'})
    assert rc == 0
    assert result['count'] == 34
    assert result['bytes_freed'] == REFERENCE_BYTES - EMBED
    assert os.path.exists(path)
    assert result['skipped'][0]['path'] == path
    assert 'held open by pid %d' % os.getpid() in result['skipped'][0]['reason']


def test_open_dump_fails_before_removing_anything(dumpdir, run):
    before = _names(dumpdir)
    path = str(dumpdir / 'nomla_debug_tp5.pt')
    with open(path, 'rb'):
        rc, result = run({'paths': [str(dumpdir)], 'in_use': 'fail'})
    assert rc == 1
    assert 'held open by running processes' in result['msg']
    assert path in result['msg'] and 'pid %d' % os.getpid() in result['msg']
    assert 'Nothing was removed' in result['msg']
    assert _names(dumpdir) == before


# ------------------------------------------------------------------ recursion and age

@pytest.fixture
def tree(tmp_path):
    top = tmp_path / 'top'
    level = top
    for depth in range(4):  # top/, top/a/, top/a/b/, top/a/b/c/
        level.mkdir()
        (level / ('embed_debug_tp%d.pt' % depth)).write_bytes(b'x' * (depth + 1))
        level = level / 'abc'[depth] if depth < 3 else level
    return top


@pytest.mark.parametrize('args, count', [
    ({}, 1),
    ({'recursive': True, 'max_depth': 0}, 1),
    ({'recursive': True, 'max_depth': 1}, 2),
    ({'recursive': True, 'max_depth': 2}, 3),
    ({'recursive': True}, 4),
])
def test_recursive_depth(tree, run, args, count):
    rc, result = run(dict(args, paths=[str(tree)]))
    assert rc == 0
    assert result['count'] == count
    assert result['bytes_freed'] == sum(range(1, count + 1))
    left = sum(len([f for f in files if f.endswith('.pt')]) for dummy, dummy2, files in os.walk(str(tree)))
    assert left == 4 - count


def test_min_age(dumpdir, run):
    old = [str(dumpdir / ('embed_debug_tp%d.pt' % r)) for r in range(8)]
    for path in old:
        os.utime(path, (1_600_000_000, 1_600_000_000))
    rc, result = run({'paths': [str(dumpdir)], 'min_age': '10m'})
    assert rc == 0
    assert sorted(r['path'] for r in result['removed']) == sorted(old)
    assert len(result['skipped']) == 27
    assert 'younger than min_age (600 s)' in result['skipped'][0]['reason']


@pytest.mark.parametrize('value, seconds', [(None, None), ('300', 300), ('90s', 90), ('10m', 600), ('2h', 7200),
                                            ('1d', 86400), ('1w', 604800), (45, 45)])
def test_parse_age(value, seconds):
    assert artifacts.parse_age(value) == seconds


@pytest.mark.parametrize('count, text', [(0, '0 B'), (999, '999 B'), (1000, '1.0 kB'), (65276224, '65.3 MB'),
                                         (3 * 10 ** 12, '3.0 TB')])
def test_human_bytes(count, text):
    assert artifacts.human_bytes(count) == text


def test_overlapping_paths_counted_once(dumpdir, run):
    rc, result = run({'paths': [str(dumpdir), str(dumpdir) + '/']})
    assert rc == 0
    assert result['count'] == 35


def test_holder_seen_under_another_path_matched_by_inode(tmp_path):
    """A service with PrivateTmp sees the dump under another path: matched by name + inode."""
    top = tmp_path / 'tmp'
    dumps.make_dumps(str(top))
    alias = tmp_path / 'private' / 'tmp'
    alias.parent.mkdir()
    os.symlink(str(top), str(alias))  # stands in for the other mount namespace's view
    proc = tmp_path / 'proc'
    (proc / '4242' / 'fd').mkdir(parents=True)
    (proc / '4242' / 'comm').write_text('vllm\n')
    os.symlink(str(alias / 'embed_debug_tp1.pt'), str(proc / '4242' / 'fd' / '17'))
    os.symlink('socket:[12345]', str(proc / '4242' / 'fd' / '3'))
    os.symlink(str(alias / 'embed_debug_tp2.pt.old'), str(proc / '4242' / 'fd' / '4'))
    (proc / '4243').mkdir()  # a process whose fds cannot be listed
    (proc / 'self').mkdir()

    candidates, dummy = artifacts.scan([str(top)], artifacts.DEFAULT_PATTERNS)
    scanned, unreadable = artifacts.find_holders(candidates, proc=str(proc))

    assert (scanned, unreadable) == (1, 1)
    held = dict((c.name, c.in_use_by) for c in candidates if c.in_use_by)
    assert held == {'embed_debug_tp1.pt': [{'pid': 4242, 'name': 'vllm'}]}
