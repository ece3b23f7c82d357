# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.remove_artifacts against hostile input and odd trees (issue 14).

Names that are not UTF-8, trees deeper than Python's recursion limit, patterns
that match nearly everything, system directories, the bounds of a scan and a
deadline reached part-way through the removal.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import resource

import pytest
import yaml

from helpers import REPO, load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import artifacts
from ansible_collections.gpufleet.vllm.plugins.modules import remove_artifacts

dumps = load_source('gpufleet_dumps_hostile', 'tests', 'sim', 'dumps.py')
ORDINARY = ('passwd', 'config.json', 'a', '.bashrc', 'model.safetensors', 'libfoo.so.1', 'README')


@pytest.fixture
def run(capsys):
    return module_runner(remove_artifacts.main, capsys)


def valid_for_ansible(result):
    """The result as the controller must read it: JSON text that is valid UTF-8 (no lone surrogates)."""
    return json.dumps(result, ensure_ascii=False).encode('utf-8')


def make_deep(top, depth, leaf=None):
    """top/d/d/.../d (depth levels), made relative to open directories; returns the bottom's path as bytes."""
    os.mkdir(top)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for dummy in range(depth):
            os.mkdir('d', dir_fd=fd)
            child = os.open('d', os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        if leaf:
            handle = os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
            os.write(handle, b'x' * 7)
            os.close(handle)
    finally:
        os.close(fd)


def remove_deep(top):
    """Remove a tree made by make_deep without recursion (pytest's cleanup would hit the recursion limit)."""
    flags = os.O_RDONLY | os.O_DIRECTORY
    fd = os.open(top, flags)
    levels = 0
    while 'd' in os.listdir(fd):
        child = os.open('d', flags, dir_fd=fd)
        os.close(fd)
        fd = child
        levels += 1
    try:
        while True:
            for name in os.listdir(fd):
                if name != 'd':
                    os.unlink(name, dir_fd=fd)
            if not levels:
                break
            parent = os.open('..', flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir('d', dir_fd=fd)
            levels -= 1
    finally:
        os.close(fd)
    os.rmdir(top)


# ------------------------------------------------------------------ item 4: names that are not UTF-8

def test_non_utf8_name_is_removed_and_the_result_is_valid(tmp_path, run):
    top = tmp_path / 'dumps'
    top.mkdir()
    raw = os.fsencode(str(top))
    with open(raw + b'/dump\xff_tp0.pt', 'wb') as handle:
        handle.write(b'z' * 123)
    os.mkfifo(raw + b'/dump\xfe_tp1.pt')
    (top / 'keep.txt').write_text('keep')
    rc, result = run({'paths': [str(top)], 'patterns': ['dump*_tp*.pt']}, diff=True)
    valid_for_ansible(result)
    assert rc == 0, result
    assert result['count'] == 1
    assert result['bytes_freed'] == 123
    assert [r['path'] for r in result['removed']] == [str(top) + '/dump\\xff_tp0.pt']
    assert [s['path'] for s in result['skipped']] == [str(top) + '/dump\\xfe_tp1.pt']
    assert str(top) + '/dump\\xff_tp0.pt\n' in result['diff']['before']
    assert sorted(os.listdir(raw)) == [b'dump\xfe_tp1.pt', b'keep.txt']


def test_non_utf8_name_in_check_mode_and_in_use_failure(tmp_path, run):
    top = tmp_path / 'dumps'
    top.mkdir()
    path = os.fsencode(str(top)) + b'/embed_debug_tp\xff.pt'
    with open(path, 'wb') as handle:
        handle.write(b'q' * 5)
        rc, result = run({'paths': [str(top)], 'in_use': 'fail'})
    valid_for_ansible(result)
    assert rc == 1
    assert 'embed_debug_tp\\xff.pt by pid %d' % os.getpid() in result['msg']
    assert os.path.exists(path)
    rc, result = run({'paths': [str(top)]}, check=True)
    valid_for_ansible(result)
    assert rc == 0 and result['count'] == 1
    assert result['would_remove'][0]['path'].endswith('embed_debug_tp\\xff.pt')
    assert os.path.exists(path)


def test_safe_text():
    assert artifacts.safe_text(os.fsdecode(b'a\xffb')) == 'a\\xffb'
    assert artifacts.safe_text('caf\u00e9') == 'caf\u00e9'
    assert artifacts.safe_text('x\ud800') == 'x\\ud800'
    assert artifacts.safe_text(b'\xfe') == '\\xfe'


# ------------------------------------------------------------------ item 5: deep trees, bounds

@pytest.fixture
def deep(tmp_path):
    """A path for a deep tree, removed afterwards without recursion whatever the test did."""
    top = str(tmp_path / 'deep')
    yield top
    if os.path.exists(top):
        remove_deep(top)


@pytest.mark.parametrize('fd_limit', [None, 128], ids=['recursion', 'descriptors'])
def test_deep_tree_is_walked_without_recursion_and_few_descriptors(deep, run, fd_limit):
    """1,200 levels: deeper than Python's recursion limit, and (with 128) than the descriptors one may hold."""
    top = deep
    make_deep(top, 1200, leaf='embed_debug_tp0.pt')
    with open(os.path.join(top, 'embed_debug_tp1.pt'), 'wb') as handle:
        handle.write(b'y' * 3)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if fd_limit:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(fd_limit, hard), hard))
    try:
        rc, result = run({'paths': [top], 'recursive': True})
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert rc == 0, result
    assert result['count'] == 2
    assert result['bytes_freed'] == 10
    assert sorted(len(r['path']) for r in result['removed'])[-1] == len(
        os.path.join(top, *(['d'] * 1200 + ['embed_debug_tp0.pt'])))
    assert os.listdir(os.path.join(top, *(['d'] * 1200))) == []
    assert os.listdir(top) == ['d']


def test_depth_bound_fails_clearly_before_removing(deep, run, monkeypatch):
    top = deep
    make_deep(top, 60, leaf='embed_debug_tp0.pt')
    with open(os.path.join(top, 'embed_debug_tp1.pt'), 'wb') as handle:
        handle.write(b'y')
    monkeypatch.setattr(artifacts, 'DEPTH_LIMIT', 50)
    rc, result = run({'paths': [top], 'recursive': True})
    valid_for_ansible(result)
    assert rc == 1
    assert 'more than 50 levels of subdirectories below %s (the depth bound)' % top in result['msg']
    assert os.path.join(top, *(['d'] * 51)) in result['msg']
    assert result['msg'].endswith(' Nothing was removed.') and result['count'] == 0
    assert os.path.exists(os.path.join(top, 'embed_debug_tp1.pt'))
    # max_depth below the bound scans what it is asked to
    rc, result = run({'paths': [top], 'recursive': True, 'max_depth': 50})
    assert rc == 0 and result['count'] == 1


def test_max_depth_above_the_bound_is_refused(tmp_path, run):
    rc, result = run({'paths': [str(tmp_path)], 'recursive': True, 'max_depth': 2001})
    assert rc == 1
    assert 'max_depth must be at most 2000' in result['msg']


def test_entry_bound_fails_clearly_before_removing(tmp_path, run):
    top = tmp_path / 'many'
    dumps.make_dumps(str(top))
    rc, result = run({'paths': [str(top)], 'max_entries': 20})
    assert rc == 1
    assert 'the scan stopped at %s: more than 20 directory entries were read in all (max_entries)' % top in result['msg']
    assert result['msg'].endswith(' Nothing was removed.') and result['count'] == 0 and result['changed'] is False
    assert len(os.listdir(str(top))) == 35
    rc, result = run({'paths': [str(top)], 'max_entries': 35})
    assert rc == 0 and result['count'] == 35


# ------------------------------------------------------------------ item 9: what a pattern matches; system directories

@pytest.mark.parametrize('pattern, needle', [
    ('*[!.]', 'fixed character'),
    ('[!.]*', 'fixed character'),
    ('*[!.]*', 'fixed character'),
    ('[a-z]*[a-z]', 'fixed character'),
    ('*.json', 'also matches ordinary file names such as config.json'),
    ('lib*', 'such as libfoo.so.1'),
    ('.*rc', 'such as .bashrc'),
    ('*.safetensors', 'model.safetensors'),
    ('*.pt', 'model.pt'),
])
def test_patterns_that_match_ordinary_files_are_refused(tmp_path, run, pattern, needle):
    top = tmp_path / 'mixed'
    top.mkdir()
    for name in ORDINARY + ('embed_debug_tp0.pt',):
        (top / name).write_text(name)
    rc, result = run({'paths': [str(top)], 'patterns': ['embed_debug_tp*.pt', pattern]})
    assert rc == 1
    assert 'patterns: pattern %r' % pattern in result['msg']
    assert needle in result['msg'], result['msg']
    assert sorted(os.listdir(str(top))) == sorted(ORDINARY + ('embed_debug_tp0.pt',))


def test_default_and_role_patterns_are_accepted():
    with open(os.path.join(REPO, 'roles', 'fleet', 'defaults', 'main.yml')) as handle:
        defaults = yaml.safe_load(handle)
    paths, dummy = artifacts.validate_options(defaults['fleet_dump_paths'], defaults['fleet_dump_patterns'])
    assert paths == ['/tmp']
    for pattern in artifacts.DEFAULT_PATTERNS + ('*_debug_tp*.pt', '*debug*_tp*.pt', 'dump*_tp*.pt'):
        artifacts.validate_pattern(pattern)


@pytest.mark.parametrize('path', ['/etc', '/usr', '/usr/lib', '/usr/local/share', '/etc/ssl', '/boot', '/boot/efi',
                                  '/bin', '/sbin', '/lib', '/lib64', '/run', '/var/lib', '/sys/kernel', '/dev',
                                  '/var/lib/dpkg', '/run/systemd',
                                  '/proc/1', '/etc/'])
def test_system_directories_are_refused(tmp_path, run, path):
    rc, result = run({'paths': [path]})
    assert rc == 1
    assert "paths: directory %r is refused" % path in result['msg'], result['msg']
    assert 'system directory' in result['msg']


def test_shared_memory_is_a_dump_directory_not_a_system_one():
    """/dev/shm is where dumps are written on many hosts: it is accepted although /dev is refused."""
    assert artifacts.validate_directory('/dev/shm') == '/dev/shm'


@pytest.mark.parametrize('pattern', ['*.pem', '*.key', '*.gguf', '*.tar.gz', 'x*.whl', '[!.]*.conf', '??*.yaml'])
def test_patterns_that_name_files_by_their_type_are_refused(tmp_path, run, pattern):
    top = tmp_path / 'types'
    top.mkdir()
    names = ('ca.pem', 'host.key', 'kimi.gguf', 'weights.tar.gz', 'xformers.whl', 'app.conf', 'abc.yaml')
    for name in names:
        (top / name).write_text(name)
    rc, result = run({'paths': [str(top)], 'patterns': [pattern]})
    assert rc == 1
    assert 'names files by their ending' in result['msg'], result['msg']
    assert sorted(os.listdir(str(top))) == sorted(names)


def test_a_recursive_scan_does_not_enter_a_system_directory(tmp_path, run, monkeypatch):
    """Scanning a parent of a system tree (/var holds /var/lib) skips that tree, with the reason."""
    top = tmp_path / 'var'
    (top / 'lib' / 'dpkg').mkdir(parents=True)
    (top / 'lib' / 'dpkg' / 'embed_debug_tp0.pt').write_text('system')
    (top / 'tmp').mkdir()
    (top / 'tmp' / 'embed_debug_tp1.pt').write_text('dump')
    monkeypatch.setattr(artifacts, 'FORBIDDEN_TREES', artifacts.FORBIDDEN_TREES + (str(top / 'lib'),))
    rc, result = run({'paths': [str(top)], 'patterns': ['embed_debug_tp*.pt'], 'recursive': True})
    assert rc == 0, result
    assert result['count'] == 1 and [f['path'] for f in result['removed']] == [str(top / 'tmp' / 'embed_debug_tp1.pt')]
    assert (top / 'lib' / 'dpkg' / 'embed_debug_tp0.pt').exists()
    assert {'path': str(top / 'lib'), 'reason': 'a system directory (%s); never scanned' % (top / 'lib')} \
        in result['skipped']


def test_link_to_a_system_directory_is_refused_as_such(tmp_path, run):
    os.symlink('/etc', str(tmp_path / 'etc-link'))
    rc, result = run({'paths': [str(tmp_path / 'etc-link')]})
    assert rc == 1
    assert 'is refused: /etc is a system directory' in result['msg']


# ------------------------------------------------------------------ sweep: deadline, holders, no traceback

def test_deadline_part_way_reports_what_was_removed(tmp_path, run, monkeypatch):
    top = tmp_path / 'dumps'
    dumps.make_dumps(str(top))
    start = [None]

    def clock():
        # time passes with the work done: 10 s per file removed
        gone = 35 - len(os.listdir(str(top)))
        if start[0] is None:
            start[0] = 1000.0
        return start[0] + 10 * gone

    monkeypatch.setattr(artifacts, '_clock', clock)
    rc, result = run({'paths': [str(top)], 'timeout': 25})
    valid_for_ansible(result)
    assert rc == 1
    assert result['msg'].startswith('the time limit of 25 s (timeout) was reached while removing the dumps, '
                                    'after 3 of 35 were removed.')
    assert '3 file(s)' in result['msg'] and 'listed in removed' in result['msg']
    assert result['count'] == 3 and result['changed'] is True
    assert len(result['removed']) == 3
    assert result['bytes_freed'] == sum(r['size'] for r in result['removed']) > 0
    left = os.listdir(str(top))
    assert len(left) == 32
    assert not any(os.path.basename(r['path']) in left for r in result['removed'])


def test_deadline_during_the_scan_removes_nothing(tmp_path, run, monkeypatch):
    top = tmp_path / 'dumps'
    dumps.make_dumps(str(top))
    ticks = iter(range(0, 10 ** 6, 100))
    monkeypatch.setattr(artifacts, '_clock', lambda: float(next(ticks)))
    rc, result = run({'paths': [str(top)], 'timeout': 50})
    assert rc == 1
    assert 'the time limit of 50 s (timeout) was reached while starting the scan of %s' % top in result['msg']
    assert result['count'] == 0
    assert len(os.listdir(str(top))) == 35


def test_unexpected_error_part_way_carries_the_facts(tmp_path, run, monkeypatch):
    top = tmp_path / 'dumps'
    dumps.make_dumps(str(top))
    real_unlink = os.unlink
    calls = []

    def unlink(name, *args, **kwargs):
        calls.append(name)
        if len(calls) > 2:
            raise RuntimeError('disk on fire')
        return real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(os, 'unlink', unlink)
    rc, result = run({'paths': [str(top)]})
    monkeypatch.undo()
    assert rc == 1
    assert 'Traceback' not in json.dumps(result)
    assert 'unexpected error (RuntimeError: disk on fire)' in result['msg']
    assert '2 file(s)' in result['msg']
    assert result['count'] == 2 and len(result['removed']) == 2
    assert len(os.listdir(str(top))) == 33


def test_holder_scan_is_bounded(tmp_path, monkeypatch):
    top = tmp_path / 'tmp'
    dumps.make_dumps(str(top))
    proc = tmp_path / 'proc'
    for pid, count in (('10', 2), ('11', 9)):
        (proc / pid / 'fd').mkdir(parents=True)
        (proc / pid / 'comm').write_bytes(b'p' * 100000 + b'\xff\n')  # a real comm has 16 bytes at most
        for num in range(count):
            os.symlink(str(top / ('embed_debug_tp%d.pt' % (num % 8))), str(proc / pid / 'fd' / str(num)))
    candidates, dummy = artifacts.scan([str(top)], artifacts.DEFAULT_PATTERNS)
    scanned, unreadable = artifacts.find_holders(candidates, proc=str(proc), fds_limit=5)
    assert (scanned, unreadable) == (1, 1)  # pid 11 has more descriptors than the bound
    held = sorted(c.name for c in candidates if c.in_use_by)
    assert held == ['embed_debug_tp0.pt', 'embed_debug_tp1.pt']
    assert [h['name'] for c in candidates for h in c.in_use_by] == ['p' * 256] * 2
    ticks = iter(range(0, 10 ** 6, 100))
    monkeypatch.setattr(artifacts, '_clock', lambda: float(next(ticks)))
    with pytest.raises(artifacts.ArtifactError, match='time limit of 150 s .* processes that hold the dumps open'):
        artifacts.find_holders(candidates, proc=str(proc), deadline=artifacts.Deadline(150))


def _on_listing(monkeypatch, path, change):
    """Run change() once, when the scan lists the directory at path (through its descriptor)."""
    real = os.scandir
    done = []

    def scandir(target='.'):
        if isinstance(target, int) and not done and os.readlink('/proc/self/fd/%d' % target) == path:
            done.append(path)
            change()
        return real(target)

    monkeypatch.setattr(os, 'scandir', scandir)
    return done


def test_directory_moved_while_inside_it_is_reopened_from_the_top(tmp_path, monkeypatch):
    top = tmp_path / 'top'
    (top / 'a' / 'b').mkdir(parents=True)
    for rel in ('a/b/embed_debug_tp0.pt', 'a/embed_debug_tp1.pt', 'embed_debug_tp2.pt'):
        (top / rel).write_bytes(b'x')
    # while b is read, b moves out of a: ".." of b is then top, not a, and a is re-opened by its chain
    done = _on_listing(monkeypatch, str(top / 'a' / 'b'), lambda: os.rename(str(top / 'a' / 'b'), str(top / 'b2')))
    candidates, skipped = artifacts.scan([str(top)], artifacts.DEFAULT_PATTERNS, recursive=True)
    assert done
    assert sorted(c.path for c in candidates) == sorted(str(top / rel) for rel in (
        'a/b/embed_debug_tp0.pt', 'a/embed_debug_tp1.pt', 'embed_debug_tp2.pt'))
    assert skipped == []


def test_directory_replaced_while_inside_it_is_not_read_further(tmp_path, monkeypatch):
    top = tmp_path / 'top'
    (top / 'a' / 'b').mkdir(parents=True)
    for rel in ('a/b/embed_debug_tp0.pt', 'a/embed_debug_tp1.pt', 'embed_debug_tp2.pt'):
        (top / rel).write_bytes(b'x')

    def swap():
        os.rename(str(top / 'a' / 'b'), str(top / 'b2'))
        os.rename(str(top / 'a'), str(top / 'a-old'))
        (top / 'a').mkdir()
        (top / 'a' / 'embed_debug_tp5.pt').write_bytes(b'planted')

    done = _on_listing(monkeypatch, str(top / 'a' / 'b'), swap)
    candidates, skipped = artifacts.scan([str(top)], artifacts.DEFAULT_PATTERNS, recursive=True)
    assert done
    # the rest of the old a (embed_debug_tp1.pt) is not read, nothing of the new a is taken; top goes on
    assert sorted(c.path for c in candidates) == [str(top / 'a' / 'b' / 'embed_debug_tp0.pt'),
                                                  str(top / 'embed_debug_tp2.pt')]
    assert skipped == [{'path': str(top / 'a'), 'reason': 'directory moved or replaced during the scan; the rest of '
                                                          'it was not read'}]
