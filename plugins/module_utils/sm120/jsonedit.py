# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Remove keys from JSON files while keeping every other byte as it was.

The edit is made on the text, not by re-serialising the document: the file is
parsed once with the standard ``json`` module (which validates it and names
the line and column of a syntax error), then a small scanner records where
each object member starts and ends, and only the removed members (with the
comma and whitespace that belonged to them) are cut out.  Indentation, key
order, number spelling (``1e-06``, ``50000.0``), escapes, non-ASCII text, line
endings, a byte order mark and the presence of a trailing newline all stay as
they were.  After the edit the result is parsed again and compared with the
expected document, so a scanner bug can never write a file that differs in
anything but the removed keys.

Key paths are dotted strings.  A segment is matched against object keys with
``fnmatch`` (case-sensitive): ``*`` matches any key at one level, ``**``
matches any number of levels (zero included), a literal segment matches that
key; a backslash escapes a dot inside a key (``a\\.b``).  Array elements are
levels too (their keys are ``0``, ``1``, ...), but only object members are
removed.

Files in a Hugging Face cache are symbolic links from ``snapshots/<rev>/``
into ``blobs/``, and one blob is shared by every snapshot that has the same
file.  :func:`plan_file` refuses to edit through such a link unless told how
(``SYMLINK_POLICIES``): ``copy`` replaces the link in this snapshot by an
edited regular file and leaves the blob alone, ``follow`` edits the target
itself and is only allowed when nothing else (another snapshot's link or a
hard link) shares it.

Only the Python standard library is used; :func:`write_plan` takes an
``AnsibleModule`` for its atomic move and backup helpers.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import gc
import json
import os
import re
import stat
import tempfile
import time

SYMLINK_POLICIES = ('refuse', 'copy', 'follow')

# What the SM120 policy strips when a directory is given without ``files``.
DEFAULT_FILES = (
    {'name': 'config.json', 'absent': ['**.kv_cache_scheme'], 'required': False},
    {'name': 'hf_quant_config.json', 'absent': ['quantization.kv_cache_quant_algo'], 'required': False},
)

_BOM = u'\ufeff'
_WS = re.compile(r'[ \t\n\r]*')
_BRACKETS = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]')  # closing quote optional: never rescans


def _number(text):
    """An integer as json reads it, or a marker for one too long for Python's int() (over 4300 digits):
    a valid JSON number the edit keeps as written, never an error."""
    try:
        return int(text)
    except ValueError:
        return ('json number', text)


_DECODER = json.JSONDecoder(parse_int=_number)

# Bounds (documented in the sm120_config module's notes).
MAX_DEPTH = 128                 # nesting of objects and arrays
MAX_SIZE = 16 * 1024 * 1024     # default cap on the size of one file, in bytes (memory: about 65x in the worst case)
LIST_LIMIT = 1000               # removed members listed per file in a result (all are counted)
DIFF_LIMIT = 1024 * 1024        # before + after text of a diff, in characters; a larger one is summarised
MAX_WALK_ENTRIES = 100000       # entries looked at in a Hugging Face cache's snapshots/
MAX_WALK_DEPTH = 16             # directory levels below snapshots/


class JSONEditError(Exception):
    """An edit that cannot be made; ``str()`` is a sentence for the operator."""

    def __init__(self, msg, path=None, line=None, column=None):
        super(JSONEditError, self).__init__(msg)
        self.msg = msg
        self.path = path
        self.line = line
        self.column = column
        self.backup_file = None


# --------------------------------------------------------------------------
# key paths


def parse_key_path(expr):
    """Split a dotted key path into segments; ``\\.`` is a literal dot.

    Returns a tuple of strings.  Raises ValueError for an empty path or an
    empty segment (``a..b``, a leading or trailing dot).
    """
    if not isinstance(expr, str) or not expr:
        raise ValueError('a key path must be a non-empty string, got %r' % (expr,))
    segments = []
    current = []
    i = 0
    while i < len(expr):
        char = expr[i]
        if char == '\\' and i + 1 < len(expr) and expr[i + 1] in '.\\':
            current.append(expr[i + 1])
            i += 2
            continue
        if char == '.':
            segments.append(''.join(current))
            current = []
        else:
            current.append(char)
        i += 1
    segments.append(''.join(current))
    if any(seg == '' for seg in segments):
        raise ValueError('key path %r has an empty segment (two dots in a row, or a leading or trailing dot)' % expr)
    if segments[-1] == '**':
        raise ValueError('key path %r ends with "**"; name the key to remove after it (for example "**.kv_cache_scheme")' % expr)
    return tuple(segments)


def format_key_path(keys):
    """Inverse of parse_key_path for concrete keys (dots in keys escaped)."""
    return '.'.join(str(k).replace('\\', '\\\\').replace('.', '\\.') for k in keys)


def _segment_matches(segment, key):
    if segment == '*':
        return True
    return fnmatch.fnmatchcase(key, segment)


# --------------------------------------------------------------------------
# text made safe for a module result


def printable(text):
    """Text that encodes as UTF-8: undecodable bytes of a file name
    (surrogateescape) become ``\\xNN``, lone surrogates (a JSON ``\\ud800``
    escape) become ``\\ud800``; other text is returned as it is."""
    if not isinstance(text, str):
        return text
    try:
        text.encode('utf-8')
        return text
    except UnicodeEncodeError:
        pass
    out = []
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            out.append('\\x%02x' % (code - 0xDC00))
        elif 0xD800 <= code <= 0xDFFF:
            out.append('\\u%04x' % code)
        else:
            out.append(char)
    return ''.join(out)


def _printable_value(value):
    """A parsed JSON value with every string made printable (depth is capped by MAX_DEPTH)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_printable_value(v) for v in value]
    if isinstance(value, dict):
        return dict((printable(k), _printable_value(v)) for k, v in value.items())
    if isinstance(value, tuple) and len(value) == 2 and value[0] == 'json number':
        digits = value[1]
        return '%s...%s (a number of %d digits)' % (digits[:12], digits[-4:], len(digits))
    return value


# --------------------------------------------------------------------------
# syntax errors in words


def _excerpt(text, offset, width=60):
    """The line holding offset, cut to about width characters around it, with
    control characters escaped."""
    start = text.rfind('\n', 0, offset) + 1
    end = text.find('\n', offset)
    if end < 0:
        end = len(text)
    if end - start > width:
        left = max(start, min(offset - width // 2, end - width))
        piece = ('...' if left > start else '') + text[left:left + width] + ('...' if left + width < end else '')
    else:
        piece = text[start:end]
    return ''.join(c if c >= ' ' and c != '\x7f' else repr(c)[1:-1] for c in piece.rstrip('\r'))


def _describe(text, pos, reason):
    """What is at pos, in words, for the parser's reason."""
    at = _WS.match(text, pos).end() if pos < len(text) else pos
    char = text[at] if at < len(text) else ''
    before = text[:pos].rstrip(' \t\r\n')[-1:]
    if text.startswith('//', at):
        return 'a // comment (JSON has no comments)'
    if text.startswith('/*', at):
        return 'a /* */ comment (JSON has no comments)'
    if char == '#':
        return 'a # comment (JSON has no comments)'
    if char in '}]' and char and before == ',':
        return "trailing comma before '%s'" % char
    if char == "'":
        return 'a single-quoted string (JSON needs double quotes)'
    if reason.startswith('Invalid control character'):
        return 'a raw control character %s inside a string (write it escaped, for example \\n or \\t)' % (
            repr(text[pos:pos + 1]),)
    if reason.startswith('Invalid \\escape') or reason.startswith('Invalid \\u'):
        return 'an invalid escape %s in a string' % repr(text[pos:pos + 6])
    if reason.startswith('Unterminated string'):
        return 'a string that is never closed'
    if reason.startswith('Extra data'):
        return 'more text after the end of the JSON document'
    if at >= len(text):
        return 'the text ends early (empty file, or an object or array that is not closed)'
    word = re.match(r'[A-Za-z_][A-Za-z0-9_]*', text[at:at + 64])
    if word:
        name = word.group(0)
        if name in ('True', 'False', 'None'):
            return "Python's %s (JSON spells it %s)" % (name, {'True': 'true', 'False': 'false', 'None': 'null'}[name])
        if reason.startswith('Expecting property name'):
            return "an unquoted key %s (JSON keys need double quotes)" % name
        return 'an unquoted word %s' % name
    if reason.startswith("Expecting ',' delimiter"):
        return "a missing comma before %s" % repr(char)
    if reason.startswith("Expecting ':' delimiter"):
        return "a missing ':' before %s" % repr(char)
    return 'unexpected %s' % repr(char)


def _deepest(text, limit):
    """Offset of the first bracket nested deeper than limit (strings skipped), or None."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        token = match.group(0)
        if token in '[{':
            depth += 1
            if depth > limit:
                return match.start()
        elif token in ']}':
            depth -= 1
    return None


def _too_deep(text, name, offset):
    line, column = _position(text, offset) if offset is not None else (None, None)
    where = ' (line %d, column %d)' % (line, column) if line else ''
    return JSONEditError(
        '%s nests objects and arrays deeper than %d levels%s; a model config is a few levels deep, so this is '
        'not one. The file was left unchanged.' % (name, MAX_DEPTH, where), name, line, column)


# --------------------------------------------------------------------------
# parsing and matching


def _constant(word):
    return ('json constant', word)   # NaN, Infinity: equal to themselves, unlike float('nan')


def _load_pairs(text, name):
    """Parse text into nested lists (objects as lists of [key, value] pairs,
    so repeated keys all stay); raise JSONEditError with what is wrong."""
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_number)
    except RecursionError:
        raise _too_deep(text, name, _deepest(text, MAX_DEPTH))
    except ValueError as exc:
        pos = getattr(exc, 'pos', None)
        line = getattr(exc, 'lineno', None)
        column = getattr(exc, 'colno', None)
        reason = getattr(exc, 'msg', str(exc))
        if reason.endswith(' at'):  # "Invalid control character at"
            reason = reason[:-3]
        if pos is None:  # pragma: no cover - json always sets it
            raise JSONEditError('%s is not valid JSON: %s. The file was left unchanged.' % (name, reason), name)
        what = _describe(text, pos, reason)
        # (the parser's own words only where the error was not recognised: for a trailing comma, a comment or a
        # single quote they name another fault, "Expecting property name", and send the reader to the wrong fix)
        parser = (' (the parser says: %s at line %s, column %s)' % (reason, line, column)
                  if what.startswith('unexpected ') else '')
        raise JSONEditError(
            '%s line %s column %s: %s. Line %s reads: \'%s\'%s. The file '
            'was left unchanged; fix it by hand (or restore it from a backup) and run again.'
            % (name, line, column, what, line, _excerpt(text, pos), parser),
            name, line, column)


def _pairs(pairs):
    return _Obj(pairs)


class _Obj(list):
    """An object parsed as its list of (key, value) pairs."""
    __slots__ = ()


def loads(text, name='<json>'):
    """json.loads that raises JSONEditError naming file, line, column and what is there."""
    _load_pairs(text, name)
    return json.loads(text, parse_int=_number)


class _Matcher(object):
    """Key paths as one automaton: a state is (path index, segment index)."""

    def __init__(self, key_paths):
        self.paths = key_paths
        self.start = self._closure((p, 0) for p in range(len(key_paths)))
        self._cache = {}

    def _closure(self, states):
        out = set()
        todo = list(states)
        while todo:
            state = todo.pop()
            if state in out:
                continue
            out.add(state)
            path, index = state
            if index < len(self.paths[path]) and self.paths[path][index] == '**':
                todo.append((path, index + 1))
        return frozenset(out)

    def step(self, states, key):
        """(states for the child under key, whether the child itself is matched)."""
        if not states:
            return states, False
        cached = self._cache.get((states, key))
        if cached is not None:
            return cached
        nxt = []
        matched = False
        for path, index in states:
            segments = self.paths[path]
            if index >= len(segments):
                continue
            segment = segments[index]
            if segment == '**':
                nxt.append((path, index))
            elif _segment_matches(segment, key):
                if index + 1 == len(segments):
                    matched = True
                else:
                    nxt.append((path, index + 1))
        result = (self._closure(nxt), matched)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[(states, key)] = result
        return result


def _scan(text, matcher, name):
    """One pass over valid JSON text: return (cuts, matches).

    cuts: disjoint (start, end) offsets to delete; matches: [trail, value
    start, value end] of each removed member in document order.  A member
    inside a removed one is not matched again (the outer one wins).  No
    recursion: the open objects and arrays are an explicit stack, and nesting
    deeper than MAX_DEPTH is refused.
    """
    scalar = _DECODER.scan_once
    scanstring = json.decoder.scanstring
    ws = _WS.match
    empty = frozenset()
    cuts = []
    matches = []
    # frames: [kind, start, states, (key, key start, matched, value start, matches so far) or index,
    #          members, any removed, {key: (kind of value, key start, matches inside)}]
    stack = []

    def enter(frame, pos):
        """Start the next member or item of frame at pos; return (value start, states for the value)."""
        if frame[0] == '{':
            key_start = pos
            key, pos = scanstring(text, pos + 1)
            pos = ws(text, ws(text, pos).end() + 1).end()
            states, matched = matcher.step(frame[2], key)
            frame[3] = (key, key_start, matched, pos, len(matches))
            if matched:
                frame[5] = True
                matches.append([tuple(f[3][0] if f[0] == '{' else str(f[3]) for f in stack), pos, None])
                states = empty
            return pos, states
        frame[3] = 0 if frame[3] is None else frame[3] + 1
        return pos, (matcher.step(frame[2], str(frame[3]))[0] if frame[2] else empty)

    pos = ws(text, 0).end()
    states = matcher.start
    while True:
        char = text[pos]
        if char == '{' or char == '[':
            if len(stack) >= MAX_DEPTH:
                raise _too_deep(text, name, pos)
            frame = [char, pos, states, None, [], False, {}]
            stack.append(frame)
            pos = ws(text, pos + 1).end()
            if text[pos] != '}' and text[pos] != ']':
                pos, states = enter(frame, pos)
                continue
            stack.pop()
            end = pos + 1
        else:
            end = scalar(text, pos)[1]
        # a value ended at `end`: record it, then go on in its container
        while stack:
            frame = stack[-1]
            if frame[0] == '{':
                key, key_start, matched, value_start, before = frame[3]
                frame[4].append((key_start, end, matched))
                if matched:
                    matches[-1][2] = end
                else:
                    _check_repeated(text, name, frame, key, key_start, value_start, len(matches) > before)
            pos = ws(text, end).end()
            if text[pos] == ',':
                pos, states = enter(frame, ws(text, pos + 1).end())
                break
            stack.pop()
            if frame[5]:
                _object_cuts(frame, pos, cuts)
            end = pos + 1
        else:
            return cuts, matches


_KINDS = {'{': 'an object', '[': 'an array', '"': 'a string'}


def _check_repeated(text, name, frame, key, key_start, value_start, inner):
    """Refuse a key repeated in one object with values of different kinds when
    a key to remove lies inside one of them: a JSON reader keeps only the last,
    so the edit would be ambiguous."""
    kind = _KINDS.get(text[value_start], 'a number or literal')
    seen = frame[6].get(key)
    if seen is None:
        frame[6][key] = (kind, key_start, inner)
        return
    if seen[0] != kind and (inner or seen[2]):
        line1, column1 = _position(text, seen[1])
        line2, column2 = _position(text, key_start)
        raise JSONEditError(
            '%s: the key "%s" appears twice in one object (line %d, column %d and line %d, column %d), holding %s '
            'and then %s, and a key to remove lies inside one of them. A JSON reader keeps only the last one, so '
            'the edit is ambiguous. The file was left unchanged; remove the repeated key by hand.'
            % (name, printable(key), line1, column1, line2, column2, seen[0], kind), name, line2, column2)
    frame[6][key] = (kind, key_start, inner or seen[2])


def _object_cuts(frame, close, cuts):
    """Cuts for the removed members of one object (its `}` at close).

    A removed member takes the text up to the next member's key; removed
    members at the end take the comma after the last kept one; when every
    member goes, everything between the braces goes.
    """
    members = frame[4]
    kept = [i for i, m in enumerate(members) if not m[2]]
    if not kept:
        cuts.append((frame[1] + 1, close))
        return
    last = kept[-1]
    for i, member in enumerate(members[:last]):
        if member[2]:
            cuts.append((member[0], members[i + 1][0]))
    if last < len(members) - 1:
        cuts.append((members[last][1], members[-1][1]))


def _expected(tree, matcher):
    """The parsed tree without the matched members (iterative, in place)."""
    todo = [(tree, matcher.start)]
    while todo:
        node, states = todo.pop()
        if not states:
            continue
        if isinstance(node, _Obj):
            kept = []
            for pair in node:
                child, matched = matcher.step(states, pair[0])
                if not matched:
                    kept.append(pair)
                    if isinstance(pair[1], list):
                        todo.append((pair[1], child))
            node[:] = kept
        elif isinstance(node, list):
            for index, item in enumerate(node):
                if isinstance(item, list):
                    todo.append((item, matcher.step(states, str(index))[0]))
    return tree


def remove_keys(text, key_paths, name='<json>'):
    """Remove every member matching one of key_paths from JSON text.

    key_paths: iterable of dotted strings or of tuples from parse_key_path.
    Returns (new_text, removed) where removed is a list of
    ``{'key': 'a.b.c', 'value': <old value>}`` in document order.  new_text is
    text itself (same object) when nothing matched.  Raises JSONEditError for
    invalid JSON, for nesting deeper than MAX_DEPTH, and (never expected) for
    an edit that would change more than the removed members.

    The cost is linear in the size of the text: it is parsed once by
    ``json``, scanned once for the members to remove, cut in one join and
    parsed once more to check the result.
    """
    parsed = [k if isinstance(k, tuple) else parse_key_path(k) for k in key_paths]
    # the parse trees hold no cycles: the cyclic collector would only rescan them again and again
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _remove_keys(text, parsed, name)
    finally:
        if collecting:
            gc.enable()


def _remove_keys(text, parsed, name):
    tree = _load_pairs(text, name)
    matcher = _Matcher(parsed)
    cuts, matches = _scan(text, matcher, name)
    if not matches:
        return text, []
    removed = [{'key': printable(format_key_path(trail)), 'value': _printable_value(json.loads(text[start:end], parse_int=_number))}
               for trail, start, end in matches]
    cuts.sort()
    pieces = []
    last = 0
    for start, end in cuts:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    new_text = ''.join(pieces)
    expected = _expected(tree, matcher)
    try:
        ok = json.loads(new_text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_number) == expected
    except ValueError:
        ok = False
    if not ok:  # pragma: no cover - guard against a scanner bug
        raise JSONEditError('internal error: the edit of %s would change more than the removed keys; '
                            'nothing was written. Please report this with the file.' % name, name)
    return new_text, removed


def _position(text, offset):
    line = text.count('\n', 0, offset) + 1
    column = offset - (text.rfind('\n', 0, offset) + 1) + 1
    return line, column


def decode(raw, name='<json>'):
    """Decode file bytes: return (text without BOM, bom) or raise JSONEditError."""
    if raw[:2] in (b'\xff\xfe', b'\xfe\xff'):
        raise JSONEditError('%s is UTF-16 text (it starts with a UTF-16 byte order mark). JSON files must be '
                            'UTF-8; the file was left unchanged.' % name, name, 1, 1)
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as exc:
        prefix = raw[:exc.start].decode('utf-8', 'replace')
        line, column = _position(prefix, len(prefix))
        raise JSONEditError(
            '%s is not UTF-8 text (invalid byte 0x%02x at line %d, column %d). JSON files must be UTF-8; '
            'the file was left unchanged.' % (name, raw[exc.start], line, column), name, line, column)
    bom = ''
    if text.startswith(_BOM):
        bom, text = _BOM, text[1:]
    if '\x00' in text:
        offset = text.index('\x00')
        line, column = _position(text, offset)
        raise JSONEditError('%s contains a NUL byte at line %d, column %d (a truncated or binary file?); JSON '
                            'text has none. The file was left unchanged.' % (name, line, column), name, line, column)
    return text, bom


# --------------------------------------------------------------------------
# files, symbolic links, Hugging Face cache


def hf_cache_repo(target):
    """Return the repo dir of a Hugging Face cache blob path, or None.

    A cache repo looks like ``models--org--name/{blobs,refs,snapshots}`` and
    snapshot files are links into ``blobs/``.
    """
    blobs = os.path.dirname(target)
    if os.path.basename(blobs) != 'blobs':
        return None
    repo = os.path.dirname(blobs)
    if os.path.isdir(os.path.join(repo, 'snapshots')):
        return repo
    return None


def _links_sharing(target, exclude=None, max_entries=MAX_WALK_ENTRIES, max_depth=MAX_WALK_DEPTH):
    """(links, incomplete): the links in target's Hugging Face repo resolving to
    it, and None or a sentence saying why the search stopped early.

    The walk is iterative (no recursion), does not follow directory links,
    looks at no more than max_entries entries and max_depth levels.
    """
    repo = hf_cache_repo(target)
    if repo is None:
        return [], None
    exclude = os.path.abspath(exclude) if exclude else None
    found = []
    seen = 0
    incomplete = None
    todo = [(os.path.join(repo, 'snapshots'), 0)]
    while todo:
        directory, depth = todo.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if seen > max_entries:
                        return sorted(found), 'more than %d entries under %s/snapshots' % (max_entries, repo)
                    if entry.is_symlink():
                        if entry.path != exclude and os.path.realpath(entry.path) == target:
                            found.append(entry.path)
                    elif entry.is_dir(follow_symlinks=False):
                        if depth + 1 > max_depth:
                            incomplete = 'directories deeper than %d levels under %s/snapshots' % (max_depth, repo)
                        else:
                            todo.append((entry.path, depth + 1))
        except OSError as exc:
            incomplete = 'cannot list %s: %s' % (directory, exc.strerror or exc)
    return sorted(found), incomplete


def links_sharing(target, exclude=None):
    """Other symbolic links in the Hugging Face repo of target that resolve to it (bounded walk)."""
    return _links_sharing(target, exclude)[0]


def _stat_key(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def directory_entries(path, files=None):
    """(file path, key paths, required) for each file of a model directory.

    ``files``: list of ``{'name', 'absent', 'required'}`` dicts (None:
    DEFAULT_FILES).  Raises JSONEditError for a name that is absolute or
    contains "..", and for an empty key list.  Lists no directory: only the
    named files are considered.
    """
    entries = []
    for spec in DEFAULT_FILES if files is None else files:
        name = spec['name']
        parts = name.replace('\\', '/').split('/')
        if os.path.isabs(name) or '..' in parts or not name.strip():
            raise JSONEditError('file name %r must be relative to %s and must not contain "..".' % (name, path))
        if not spec['absent']:
            raise JSONEditError('file %r has an empty "absent" list; name at least one key path.' % name)
        entries.append((os.path.join(path, name), spec['absent'], spec.get('required', False)))
    return entries


def _linked_directory(path, base):
    """The first directory between base and path that is a symbolic link
    leading outside base (as ``(link, resolved)``), or None.

    base itself may be a link (a model directory given through a link): only
    the components below it count.  A link that stays inside base is fine.
    """
    if not base:
        return None
    base = os.path.abspath(base)
    relative = os.path.relpath(os.path.abspath(path), base)
    parts = relative.split(os.sep)
    if parts[0] == os.pardir:
        return None
    real_base = os.path.realpath(base)
    current = base
    for part in parts[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            resolved = os.path.realpath(current)
            if resolved != real_base and not resolved.startswith(real_base.rstrip(os.sep) + os.sep):
                return current, resolved
    return None


def _read(target, name, max_size):
    """The bytes and stat of a regular file, refusing more than max_size bytes
    before reading them (and not blocking on a FIFO)."""
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) | getattr(os, 'O_NOCTTY', 0))
    except OSError as exc:
        raise JSONEditError('cannot read %s: %s. Check the permissions of the file and of the user '
                            'Ansible becomes.' % (name, exc.strerror or exc), name)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JSONEditError('%s is not a regular file; give a JSON file or a model directory.' % name, name)
        if st.st_size > max_size:
            raise JSONEditError(
                '%s is %d bytes (%.1f MiB), more than the max_size cap of %d bytes (%.1f MiB); a model config is '
                'a few kilobytes. Nothing was read or changed. Raise max_size if the file really is a config.'
                % (name, st.st_size, st.st_size / 1048576.0, max_size, max_size / 1048576.0), name)
        chunks = []
        size = 0
        while size <= max_size:
            chunk = os.read(fd, min(1 << 20, max_size + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_size:
            raise JSONEditError('%s grew past the max_size cap of %d bytes while it was read; nothing was changed.'
                                % (name, max_size), name)
        return b''.join(chunks), st
    except OSError as exc:
        raise JSONEditError('cannot read %s: %s. Nothing was changed.' % (name, exc.strerror or exc), name)
    finally:
        os.close(fd)


def plan_file(path, key_paths, required=False, symlinks='refuse', display=None, base=None, max_size=MAX_SIZE):
    """Read one JSON file and work out the edit, writing nothing.

    base: the model directory the file was named in; a directory link between
    base and the file that leads outside base counts as a link to the file
    (so O(symlinks) decides), and base itself may be a link.
    max_size: files larger than this many bytes are refused unread.

    Returns a dict (the per-file result, plus private ``_``-keys used by
    write_plan): path, exists, changed, removed, symlink (None or
    {'target', 'action', 'shared_with'}), skipped (reason or None).
    Raises JSONEditError with an operator-readable message.
    """
    name = printable(display or path)
    if symlinks not in SYMLINK_POLICIES:
        raise ValueError('symlinks must be one of %s' % ', '.join(SYMLINK_POLICIES))
    parsed = []
    for expr in key_paths:
        try:
            parsed.append(parse_key_path(expr))
        except ValueError as exc:
            raise JSONEditError('%s: %s' % (name, exc), name)
    result = {'path': name, 'exists': False, 'changed': False, 'removed': [],
              'symlink': None, 'skipped': None}

    if not os.path.lexists(path):
        if required:
            raise JSONEditError('%s does not exist and is marked required. Check the model directory '
                                '(or set required: false to skip a missing file).' % name, name)
        result['skipped'] = 'file does not exist'
        return result

    is_link = os.path.islink(path)
    through = _linked_directory(path, base)
    target = os.path.realpath(path)
    if is_link and not os.path.exists(path):
        raise JSONEditError('%s is a symbolic link to %s, which does not exist (a broken link, for example '
                            'a Hugging Face cache whose blob was deleted). Re-download the file or remove '
                            'the link.' % (name, printable(os.readlink(path))), name)
    if not os.path.isfile(target):
        raise JSONEditError('%s is not a regular file; give a JSON file or a model directory.' % name, name)

    raw, st = _read(target, name, max_size)
    text, bom = decode(raw, name)
    new_text, removed = remove_keys(text, parsed, name)

    result['exists'] = True
    result['removed'] = removed
    result['changed'] = bool(removed)
    result['_stat'] = _stat_key(st)
    result['_target'] = target
    result['_before'] = text
    result['_after'] = new_text
    result['_raw_after'] = (bom + new_text).encode('utf-8')
    result['_write_path'] = path

    if is_link or through:
        shared, incomplete = _links_sharing(target, exclude=path)
        link_text = os.readlink(path) if is_link else os.readlink(through[0])
        result['symlink'] = {'target': printable(target), 'link': printable(link_text), 'action': None,
                             'shared_with': [printable(s) for s in shared]}
        if through:
            result['symlink']['through'] = printable(through[0])
        if removed:
            keys = ', '.join(r['key'] for r in removed)
            via = ''
            if through:
                via = (' It is reached through the directory link %s -> %s, which leads outside the model '
                       'directory %s.' % (printable(through[0]), printable(through[1]), printable(base)))
            if symlinks == 'refuse':
                where = ''
                if hf_cache_repo(target):
                    where = (' This is a Hugging Face cache layout: snapshots/<rev>/ files are links into '
                             'blobs/, and a blob is shared by every snapshot that has the same file%s.'
                             % (' (here also: %s)' % ', '.join(result['symlink']['shared_with']) if shared else ''))
                if through:
                    raise JSONEditError(
                        '%s would need an edit (remove %s), but the file lies outside the model directory.%s '
                        'Nothing was changed. Set symlinks: follow to edit %s itself, or replace the directory '
                        'link by a directory.' % (name, keys, via, printable(target)), name)
                raise JSONEditError(
                    '%s is a symbolic link to %s and would need an edit (remove %s).%s Nothing was changed. '
                    'Set symlinks: copy to replace this link by an edited regular file and leave the '
                    'target untouched (the right choice for a Hugging Face cache), or symlinks: follow '
                    'to edit the target itself.'
                    % (name, printable(target), keys, where), name)
            if symlinks == 'copy' and through:
                raise JSONEditError(
                    '%s would need an edit (remove %s).%s symlinks: copy replaces a link to a file by an edited '
                    'copy, and would write into that outside directory. Nothing was changed; use symlinks: '
                    'follow to edit %s itself, or replace the directory link by a directory.'
                    % (name, keys, via, printable(target)), name)
            if symlinks == 'follow':
                if shared:
                    raise JSONEditError(
                        '%s links to %s, which is shared by %d other link(s): %s. Editing it would change '
                        'those snapshots too; nothing was changed. Use symlinks: copy to edit only this '
                        'snapshot.' % (name, printable(target), len(shared), ', '.join(result['symlink']['shared_with'])),
                        name)
                if incomplete:
                    raise JSONEditError(
                        '%s links to %s, and the search for other links to it stopped early (%s), so editing '
                        'it might change other snapshots. Nothing was changed; use symlinks: copy.'
                        % (name, printable(target), printable(incomplete)), name)
                if st.st_nlink > 1:
                    raise JSONEditError(
                        '%s links to %s, which has %d hard links; editing it would change the other '
                        'names too. Nothing was changed; use symlinks: copy.' % (name, printable(target), st.st_nlink),
                        name)
                result['_write_path'] = target
                result['symlink']['action'] = 'follow'
            else:
                result['symlink']['action'] = 'copy'
    return result


def diff_of(plan):
    """Ansible diff dict (before/after text) for a planned file; a summary line when the texts are over DIFF_LIMIT."""
    before = plan.get('_before', '')
    after = plan.get('_after', '')
    if len(before) + len(after) > DIFF_LIMIT:
        return {'prepared': '%s: %d key(s) removed; the file is %d characters, too large to show as a diff (over %d). '
                            'The removed keys are in the result (files[].removed, the first %d).\n'
                            % (plan['path'], len(plan.get('removed') or []), len(before), DIFF_LIMIT, LIST_LIMIT)}
    return {
        'before_header': plan['path'],
        'after_header': plan['path'],
        'before': before,
        'after': after,
    }


def write_plan(module, plan, backup=False):
    """Write a changed plan atomically; return the backup file name or None.

    The new content goes to a temporary file next to the destination, which
    module.atomic_move renames over it, copying mode, owner and SELinux context
    from the file it replaces (for a replaced link: from the link's target).
    With policy ``copy`` the backup is a symbolic link with the same target as
    the replaced one, so renaming it back restores the snapshot exactly.
    Raises JSONEditError; its ``backup_file`` names a backup already made.
    """
    dest = plan['_write_path']
    name = plan['path']
    try:
        with open(plan['_target'], 'rb') as handle:
            now = _stat_key(os.fstat(handle.fileno()))
    except (IOError, OSError):
        now = None
    if now != plan['_stat']:
        raise JSONEditError('%s changed while it was being edited (another process wrote it). '
                            'Nothing was written; run again.' % name, name)

    backup_file = None
    if backup:
        if plan['symlink'] and plan['symlink']['action'] == 'copy':
            candidate = '%s.%d.%s' % (dest, os.getpid(), _timestamp())
            try:
                os.symlink(os.readlink(dest), candidate)
            except OSError as exc:
                raise JSONEditError('could not back up %s before editing it (a link named %s): %s. Nothing was '
                                    'written.' % (name, printable(candidate), exc.strerror or exc), name)
            backup_file = candidate
        else:
            try:
                backup_file = module.backup_local(dest)
            except Exception as exc:  # backup_local raises a bare Exception
                raise JSONEditError('could not back up %s before editing it: %s. Nothing was written.'
                                    % (name, printable(str(exc))), name)

    directory = os.path.dirname(os.path.abspath(dest))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(dest), suffix='.tmp', dir=directory)
        with os.fdopen(fd, 'wb') as handle:
            handle.write(plan['_raw_after'])
            handle.flush()
            os.fsync(handle.fileno())
        module.atomic_move(tmp, dest)
    except Exception as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = '' if tmp is not None else ' (cannot create a temporary file in %s)' % printable(directory)
        kept = ' A backup was made first: %s.' % printable(backup_file) if backup_file else ''
        error = JSONEditError('could not write %s%s: %s. The original file is unchanged.%s'
                              % (name, where, printable(reason), kept), name)
        error.backup_file = backup_file
        raise error
    return backup_file


def _timestamp():
    return time.strftime('%Y-%m-%d@%H:%M:%S~', time.localtime())


def public_result(plan):
    """The per-file result without the private keys: removed_count counts every removed member, removed lists
    the first LIST_LIMIT of them (removed_truncated says whether there were more)."""
    public = dict((k, v) for k, v in plan.items() if not k.startswith('_'))
    removed = public.get('removed') or []
    public['removed_count'] = len(removed)
    public['removed_truncated'] = len(removed) > LIST_LIMIT
    public['removed'] = removed[:LIST_LIMIT]
    return public
