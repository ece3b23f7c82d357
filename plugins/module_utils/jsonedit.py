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

import copy
import fnmatch
import json
import os
import re
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
_NUMBER = re.compile(r'-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?')
_LITERALS = ('true', 'false', 'null', 'NaN', 'Infinity', '-Infinity')


class JSONEditError(Exception):
    """An edit that cannot be made; ``str()`` is a sentence for the operator."""

    def __init__(self, msg, path=None, line=None, column=None):
        super(JSONEditError, self).__init__(msg)
        self.msg = msg
        self.path = path
        self.line = line
        self.column = column


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
# position-recording scanner (input already validated by json.loads)


class _Node(object):
    __slots__ = ('kind', 'start', 'end', 'members', 'items')

    def __init__(self, kind, start):
        self.kind = kind          # 'object', 'array' or 'scalar'
        self.start = start
        self.end = None
        self.members = []         # object: list of _Member
        self.items = []           # array: list of _Node


class _Member(object):
    __slots__ = ('key', 'key_start', 'value')

    def __init__(self, key, key_start, value):
        self.key = key
        self.key_start = key_start
        self.value = value


def _skip_ws(text, pos):
    return _WS.match(text, pos).end()


def _scan_value(text, pos):
    pos = _skip_ws(text, pos)
    char = text[pos]
    if char == '{':
        node = _Node('object', pos)
        pos = _skip_ws(text, pos + 1)
        if text[pos] == '}':
            node.end = pos + 1
            return node
        while True:
            key_start = pos
            key, pos = json.decoder.scanstring(text, pos + 1)
            pos = _skip_ws(text, pos)
            pos += 1  # ':'
            value = _scan_value(text, pos)
            node.members.append(_Member(key, key_start, value))
            pos = _skip_ws(text, value.end)
            if text[pos] == '}':
                node.end = pos + 1
                return node
            pos = _skip_ws(text, pos + 1)  # ','
    if char == '[':
        node = _Node('array', pos)
        pos = _skip_ws(text, pos + 1)
        if text[pos] == ']':
            node.end = pos + 1
            return node
        while True:
            item = _scan_value(text, pos)
            node.items.append(item)
            pos = _skip_ws(text, item.end)
            if text[pos] == ']':
                node.end = pos + 1
                return node
            pos += 1  # ','
    node = _Node('scalar', pos)
    if char == '"':
        node.end = json.decoder.scanstring(text, pos + 1)[1]
        return node
    for literal in _LITERALS:
        if text.startswith(literal, pos):
            node.end = pos + len(literal)
            return node
    match = _NUMBER.match(text, pos)
    if not match:  # pragma: no cover - json.loads accepted the text
        raise ValueError('unexpected character at offset %d' % pos)
    node.end = match.end()
    return node


def _children(node):
    if node.kind == 'object':
        for index, member in enumerate(node.members):
            yield member.key, member.value, index
    elif node.kind == 'array':
        for index, item in enumerate(node.items):
            yield str(index), item, None


def _find(node, segments, trail, out):
    """Append (trail, object node, member index) for members matching segments."""
    if not segments:
        return
    head = segments[0]
    if head == '**':
        _find(node, segments[1:], trail, out)
        for key, child, dummy in _children(node):
            _find(child, segments, trail + (key,), out)
        return
    for key, child, index in _children(node):
        if not _segment_matches(head, key):
            continue
        if len(segments) == 1:
            if index is not None:
                out.append((trail + (key,), node, index))
        else:
            _find(child, segments[1:], trail + (key,), out)


def _first_match(root, key_paths):
    """The match that starts first in the text (outermost wins on overlap)."""
    found = []
    for segments in key_paths:
        _find(root, segments, (), found)
    if not found:
        return None
    return min(found, key=lambda m: (m[1].members[m[2]].key_start, len(m[0])))


def _cut_member(text, obj, index):
    """Return text without member ``index`` of ``obj`` (and its separator)."""
    members = obj.members
    if len(members) == 1:
        return text[:obj.start + 1] + text[obj.end - 1:]
    if index < len(members) - 1:
        return text[:members[index].key_start] + text[members[index + 1].key_start:]
    return text[:members[index - 1].value.end] + text[members[index].value.end:]


def _delete_concrete(data, keys):
    parent = data
    for key in keys[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    parent.pop(keys[-1], None)


def _position(text, offset):
    line = text.count('\n', 0, offset) + 1
    column = offset - (text.rfind('\n', 0, offset) + 1) + 1
    return line, column


def decode(raw, name='<json>'):
    """Decode file bytes: return (text without BOM, bom) or raise JSONEditError."""
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as exc:
        prefix = raw[:exc.start].decode('utf-8', 'replace')
        line, column = _position(prefix, len(prefix))
        raise JSONEditError(
            '%s is not UTF-8 text (invalid byte at line %d, column %d). JSON files must be UTF-8; '
            'the file was left unchanged.' % (name, line, column), name, line, column)
    bom = ''
    if text.startswith(_BOM):
        bom, text = _BOM, text[1:]
    return text, bom


def loads(text, name='<json>'):
    """json.loads that raises JSONEditError naming file, line and column."""
    try:
        return json.loads(text)
    except ValueError as exc:
        line = getattr(exc, 'lineno', None)
        column = getattr(exc, 'colno', None)
        reason = getattr(exc, 'msg', str(exc))
        raise JSONEditError(
            '%s is not valid JSON: %s at line %s, column %s. The file was left unchanged; '
            'fix it by hand (or restore it from a backup) and run again.' % (name, reason, line, column),
            name, line, column)


def remove_keys(text, key_paths, name='<json>'):
    """Remove every member matching one of key_paths from JSON text.

    key_paths: iterable of dotted strings or of tuples from parse_key_path.
    Returns (new_text, removed) where removed is a list of
    ``{'key': 'a.b.c', 'value': <old value>}`` in document order.  new_text is
    text itself (same object) when nothing matched.  Raises JSONEditError for
    invalid JSON.
    """
    parsed = [k if isinstance(k, tuple) else parse_key_path(k) for k in key_paths]
    data = loads(text, name)
    expected = copy.deepcopy(data)
    removed = []
    current = text
    while True:
        root = _scan_value(current, 0)
        match = _first_match(root, parsed)
        if match is None:
            break
        trail, obj, index = match
        member = obj.members[index]
        removed.append({
            'key': format_key_path(trail),
            'value': json.loads(current[member.value.start:member.value.end]),
        })
        _delete_concrete(expected, trail)
        current = _cut_member(current, obj, index)
    if removed and json.loads(current) != expected:  # pragma: no cover - guard against a scanner bug
        raise JSONEditError('internal error: the edit of %s would change more than the removed keys; '
                            'nothing was written. Please report this with the file.' % name, name)
    return current, removed


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


def links_sharing(target, exclude=None):
    """Other symbolic links in the Hugging Face repo of target that resolve to it."""
    repo = hf_cache_repo(target)
    if repo is None:
        return []
    exclude = os.path.abspath(exclude) if exclude else None
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(repo, 'snapshots')):
        for entry in sorted(dirnames + filenames):
            full = os.path.join(dirpath, entry)
            if full == exclude or not os.path.islink(full):
                continue
            if os.path.realpath(full) == target:
                found.append(full)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return sorted(found)


def _stat_key(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def directory_entries(path, files=None):
    """(file path, key paths, required) for each file of a model directory.

    ``files``: list of ``{'name', 'absent', 'required'}`` dicts (None:
    DEFAULT_FILES).  Raises JSONEditError for a name that is absolute or
    contains "..", and for an empty key list.
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


def plan_file(path, key_paths, required=False, symlinks='refuse', display=None):
    """Read one JSON file and work out the edit, writing nothing.

    Returns a dict (the per-file result, plus private ``_``-keys used by
    write_plan): path, exists, changed, removed, symlink (None or
    {'target', 'action', 'shared_with'}), skipped (reason or None).
    Raises JSONEditError with an operator-readable message.
    """
    name = display or path
    if symlinks not in SYMLINK_POLICIES:
        raise ValueError('symlinks must be one of %s' % ', '.join(SYMLINK_POLICIES))
    parsed = []
    for expr in key_paths:
        try:
            parsed.append(parse_key_path(expr))
        except ValueError as exc:
            raise JSONEditError('%s: %s' % (name, exc), name)
    result = {'path': path, 'exists': False, 'changed': False, 'removed': [],
              'symlink': None, 'skipped': None}

    if not os.path.lexists(path):
        if required:
            raise JSONEditError('%s does not exist and is marked required. Check the model directory '
                                '(or set required: false to skip a missing file).' % name, name)
        result['skipped'] = 'file does not exist'
        return result

    is_link = os.path.islink(path)
    target = os.path.realpath(path)
    if is_link and not os.path.exists(path):
        raise JSONEditError('%s is a symbolic link to %s, which does not exist (a broken link, for example '
                            'a Hugging Face cache whose blob was deleted). Re-download the file or remove '
                            'the link.' % (name, os.readlink(path)), name)
    if not os.path.isfile(target):
        raise JSONEditError('%s is not a regular file; give a JSON file or a model directory.' % name, name)

    try:
        with open(target, 'rb') as handle:
            st = os.fstat(handle.fileno())
            raw = handle.read()
    except (IOError, OSError) as exc:
        raise JSONEditError('cannot read %s: %s. Check the permissions of the file and of the user '
                            'Ansible becomes.' % (name, exc.strerror or exc), name)
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

    if is_link:
        shared = links_sharing(target, exclude=path)
        result['symlink'] = {'target': target, 'link': os.readlink(path), 'action': None,
                             'shared_with': shared}
        if removed:
            if symlinks == 'refuse':
                where = ''
                if hf_cache_repo(target):
                    where = (' This is a Hugging Face cache layout: snapshots/<rev>/ files are links into '
                             'blobs/, and a blob is shared by every snapshot that has the same file%s.'
                             % (' (here also: %s)' % ', '.join(shared) if shared else ''))
                raise JSONEditError(
                    '%s is a symbolic link to %s and would need an edit (remove %s).%s Nothing was changed. '
                    'Set symlinks: copy to replace this link by an edited regular file and leave the '
                    'target untouched (the right choice for a Hugging Face cache), or symlinks: follow '
                    'to edit the target itself.'
                    % (name, target, ', '.join(r['key'] for r in removed), where), name)
            if symlinks == 'follow':
                if shared:
                    raise JSONEditError(
                        '%s links to %s, which is shared by %d other link(s): %s. Editing it would change '
                        'those snapshots too; nothing was changed. Use symlinks: copy to edit only this '
                        'snapshot.' % (name, target, len(shared), ', '.join(shared)), name)
                if st.st_nlink > 1:
                    raise JSONEditError(
                        '%s links to %s, which has %d hard links; editing it would change the other '
                        'names too. Nothing was changed; use symlinks: copy.' % (name, target, st.st_nlink), name)
                result['_write_path'] = target
                result['symlink']['action'] = 'follow'
            else:
                result['symlink']['action'] = 'copy'
    return result


def diff_of(plan):
    """Ansible diff dict (before/after text) for a planned file."""
    return {
        'before_header': plan['path'],
        'after_header': plan['path'],
        'before': plan.get('_before', ''),
        'after': plan.get('_after', ''),
    }


def write_plan(module, plan, backup=False):
    """Write a changed plan atomically; return the backup file name or None.

    The new content goes to a temporary file next to the destination, which
    module.atomic_move renames over it, copying mode, owner and SELinux context
    from the file it replaces (for a replaced link: from the link's target).
    With policy ``copy`` the backup is a symbolic link with the same target as
    the replaced one, so renaming it back restores the snapshot exactly.
    Raises JSONEditError.
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
            backup_file = '%s.%d.%s' % (dest, os.getpid(), _timestamp())
            os.symlink(os.readlink(dest), backup_file)
        else:
            try:
                backup_file = module.backup_local(dest)
            except Exception as exc:  # backup_local raises a bare Exception
                raise JSONEditError('could not back up %s before editing it: %s. Nothing was written.'
                                    % (name, exc), name)

    directory = os.path.dirname(os.path.abspath(dest))
    fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(dest), suffix='.tmp', dir=directory)
    try:
        with os.fdopen(fd, 'wb') as handle:
            handle.write(plan['_raw_after'])
            handle.flush()
            os.fsync(handle.fileno())
        module.atomic_move(tmp, dest)
    except Exception as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise JSONEditError('could not write %s: %s. The original file is unchanged.' % (name, exc), name)
    return backup_file


def _timestamp():
    return time.strftime('%Y-%m-%d@%H:%M:%S~', time.localtime())


def public_result(plan):
    """The per-file result without the private keys."""
    return dict((k, v) for k, v in plan.items() if not k.startswith('_'))
