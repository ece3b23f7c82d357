# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Property tests of artifacts.py (issue 14): patterns and file names from hypothesis.

- validate_pattern never raises anything but ArtifactError, and a pattern it
  accepts matches none of the ordinary names;
- pattern_literals reads bracket sets as fnmatch does: the fixed characters
  of a pattern appear, in order, in every name it matches;
- any bytes as file names: the module's result is valid for Ansible and the
  count, the bytes and what is left on disk are right.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import json
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import artifacts
from ansible_collections.gpufleet.vllm.plugins.modules import remove_artifacts

ORDINARY = ('passwd', 'config.json', 'a', '.bashrc', 'model.safetensors', 'libfoo.so.1', 'README')
PATTERN_CHARS = st.sampled_from(list('*?[]!-^.\\_/abcdeglmnoprstuxyzAERT0123') + ['\0', '\u00e9', '\u2028'])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.one_of(st.text(PATTERN_CHARS, max_size=24), st.text(max_size=12)))
def test_validate_pattern_refuses_or_accepts_only_anchored_patterns(pattern):
    try:
        artifacts.validate_pattern(pattern)
    except artifacts.ArtifactError as exc:
        assert str(exc).startswith('patterns: ')
        json.dumps(str(exc), ensure_ascii=False).encode('utf-8')
        return
    assert not [name for name in ORDINARY + artifacts.ORDINARY_NAMES if fnmatch.fnmatchcase(name, pattern)]
    assert len(artifacts.pattern_literals(pattern)) >= artifacts.PATTERN_LITERALS
    assert '/' not in pattern and '..' not in pattern and '\0' not in pattern


NAME_CHARS = st.sampled_from(list('abcdefxyz_.-0123456789T'))


@st.composite
def name_and_pattern(draw):
    """A name, and a pattern made from it that matches it (each character kept, or a wildcard or set for it)."""
    name = draw(st.text(NAME_CHARS, min_size=1, max_size=16))
    parts = []
    index = 0
    while index < len(name):
        char = name[index]
        how = draw(st.sampled_from(['keep', 'keep', 'any', 'set', 'notset', 'star']))
        if how == 'keep':
            parts.append(char)
        elif how == 'any':
            parts.append('?')
        elif how == 'set':
            parts.append('[%s%s]' % (char, draw(NAME_CHARS)))
        elif how == 'notset':
            other = draw(NAME_CHARS.filter(lambda c, char=char: c != char))
            parts.append('[!%s]' % other)
        else:
            index += draw(st.integers(0, len(name) - index)) - 1
            parts.append('*')
        index += 1
    return name, ''.join(parts)


def _subsequence(small, big):
    found = iter(big)
    return all(char in found for char in small)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(name_and_pattern())
def test_pattern_literals_appear_in_order_in_every_match(made):
    name, pattern = made
    assert fnmatch.fnmatchcase(name, pattern), (name, pattern)
    assert _subsequence(artifacts.pattern_literals(pattern), name), (name, pattern)


def _entry_names():
    odd = st.binary(min_size=1, max_size=12).filter(lambda b: b'/' not in b and b'\0' not in b)
    return st.lists(st.one_of(
        odd.map(lambda b: b'embed_debug_tp' + b + b'.pt'),
        odd.map(lambda b: b'dump' + b + b'_tp0.pt'),
        odd.filter(lambda b: b not in (b'.', b'..')),
    ), max_size=8, unique=True)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_entry_names())
def test_any_file_names_give_a_valid_result_and_the_right_count(capsys, names):
    run = module_runner(remove_artifacts.main, capsys)
    top = tempfile.mkdtemp(prefix='art-fuzz-')
    try:
        raw = os.fsencode(top)
        for index, name in enumerate(names):
            with open(raw + b'/' + name, 'wb') as handle:
                handle.write(b'x' * index)
        patterns = list(artifacts.DEFAULT_PATTERNS) + ['dump*_tp*.pt']
        expected = [n for n in names if any(fnmatch.fnmatchcase(os.fsdecode(n), p) for p in patterns)]
        rc, result = run({'paths': [top], 'patterns': patterns}, diff=True)
        json.dumps(result, ensure_ascii=False).encode('utf-8')
        assert rc == 0, result
        assert result['count'] == len(expected)
        assert result['bytes_freed'] == sum(names.index(n) for n in expected)
        assert sorted(r['path'] for r in result['removed']) == sorted(
            artifacts.safe_text(os.fsdecode(raw + b'/' + n)) for n in expected)
        assert sorted(os.listdir(raw)) == sorted(n for n in names if n not in expected)
    finally:
        shutil.rmtree(top)
