# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Checks for values that reach a file, a unit or a command line.

Shared by the filters that render systemd units and by the roles' checks of
their variables: one definition of "control character" and one way of
showing a hostile value in an error (escaped, on one line, cut short).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re
import unicodedata

LINE_BREAKS = u"\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def valid_text(value):
    """VALUE as text that is valid UTF-8 (for a module result, a message, a report), nothing else changed.

    Bytes that are not UTF-8 (a file name, a line of a command's output),
    whether given as bytes or kept by Python as surrogate escapes, are shown
    as backslash escapes (\\xff); so is any other lone surrogate (a JSON
    string may carry one), which no JSON reader on the controller accepts.
    None and other non-text values become their str().
    """
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if not isinstance(value, str):
        value = str(value)
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        # lone surrogates that do not stand for a byte: escape each, keep the rest
        return "".join(char if not 0xD800 <= ord(char) <= 0xDFFF else
                       (char.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                        if 0xDC80 <= ord(char) <= 0xDCFF else "\\u%04x" % ord(char))
                       for char in value)


def control_character(text):
    """(index, char) of the first control character in text, or None.

    Control characters are C0 (below U+0020), DEL, C1 (U+0080-U+009F) and
    the Unicode line and paragraph separators: anything that could end a line
    or hide itself in a terminal.
    """
    for index, char in enumerate(text):
        code = ord(char)
        if code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029):
            return index, char
    return None


def shown(text, limit=80):
    """A value as one printable line for an error: escaped, quoted, cut to about limit characters."""
    escaped = text.encode("unicode_escape").decode("ascii")
    if len(escaped) > limit:
        escaped = escaped[:limit] + "..."
    return "'%s'" % escaped


def describe_control(text, name, rule="a value that goes into a systemd unit must be one line of printable text"):
    """The error for a control character in text, the value of name (None when there is none)."""
    found = control_character(text)
    if found is None:
        return None
    index, char = found
    what = "a line break" if char in LINE_BREAKS else "a control character"
    return "%s holds %s (U+%04X) at character %d of %s: %s" % (name, what, ord(char), index + 1, shown(text), rule)


def value_problems(values, options=(), quoted=(),
                   rule="a value that reaches a file, a unit or a command line must be printable text"):
    """The problems of named values, one message each, naming the variable (and the item inside it).

    values: a dict of variable name -> value (strings, numbers, lists and
    dicts of them). Every string, every list item and every dict key and value
    must be free of control characters. Names in options are words of a
    command line that must not be read as an option: none of their strings
    (or list items) may start with "-". Names in quoted are rendered quoted
    with escapes (ExecStart= words, Environment= values): their strings may
    hold line breaks and tabs, only a NUL is refused (no argument can carry
    one); their dict keys are checked in full.
    """
    problems = []

    def walk(path, value, as_word, escaped=False):
        if isinstance(value, bytes):
            value = value.decode("utf-8", "backslashreplace")
        if isinstance(value, str):
            if escaped:
                problem = None
                if u"\x00" in value:
                    problem = ("%s holds a NUL character (U+0000) at character %d of %s: no program argument or "
                               "environment value can carry one" % (path, value.index(u"\x00") + 1, shown(value)))
            else:
                problem = describe_control(value, path, rule)
            if problem:
                problems.append(problem)
            elif as_word and value.startswith("-"):
                problems.append("%s is %s, which starts with '-': the program would read it as an option of its "
                                "own, not as a value" % (path, shown(value)))
        elif isinstance(value, dict):
            for key in value:
                key_text = key if isinstance(key, str) else str(key)
                problem = describe_control(key_text, "%s (a key)" % path, rule)
                if problem:
                    problems.append(problem)
                else:
                    walk("%s.%s" % (path, key_text), value[key], as_word, escaped)
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk("%s[%d]" % (path, index), item, as_word, escaped)

    for name in values:
        walk(name, values[name], name in options, name in quoted)
    return problems


# Kept in a block: the line break and the tab. Escaped: every other C0 character (ESC of a terminal escape, CR, NUL),
# DEL, C1, the Unicode line and paragraph separators, every format character (Unicode category Cf: the bidirectional
# marks, overrides and isolates that reorder what a reader sees, U+200B-U+200D, U+2060-U+2064, U+FEFF, the soft
# hyphen, the interlinear annotation marks, the tag characters, the shorthand and musical format controls) and every
# other Default_Ignorable_Code_Point of Unicode, listed below because they are not Cf (the variation selectors
# U+FE00-U+FE0F and U+E0100-U+E01EF, the combining grapheme joiner U+034F, the Hangul and Khmer fillers, the Mongolian
# selectors U+180B-U+180F, and the unassigned ignorable code points such as U+2065 and U+E0080-U+E0FFF): they render
# as nothing, so they hide text or make two names look alike. Surrogates (bytes that were not UTF-8, decoded with
# surrogateescape) too. Private-use and other unassigned characters stay: a font may draw them, and this Python's
# Unicode tables may predate a character a host sends.
_IGNORABLE = re.compile(u"[\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                        u"\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
                        u"\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
# categories escaped wherever they are: controls, format characters, surrogates, line and paragraph separators
_UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
# the candidates: everything but the printable ASCII, the line break and the tab (judged one by one)
_CANDIDATE = re.compile(u"[^\t\n\x20-\x7e]")


def _unsafe(char):
    """Whether CHAR is shown escaped in a block (see above)."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES or _IGNORABLE.match(char) is not None


def _block_escape(match):
    if not _unsafe(match.group()):
        return match.group()
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:
        return "\\x%02x" % (code - 0xDC00)
    if code < 0x100:
        return "\\x%02x" % code
    if code > 0xFFFF:
        return "\\U%08x" % code
    return "\\u%04x" % code


def printable_block(text):
    """Multi-line text (a diff, a file's lines) safe to show in a terminal or a Markdown file.

    Line breaks (\\n) and tabs stay. Every other control character (the ESC
    of a terminal escape, a carriage return, NUL, DEL, C1, the Unicode line
    and paragraph separators), every format character (Unicode category Cf:
    the bidirectional marks and overrides, U+200B, U+2060, U+FEFF), every
    other default-ignorable character (the variation selectors U+FE0F and
    U+E0100-U+E01EF, the fillers) and each byte that was not UTF-8 are shown as backslash escapes (\\x1b,
    \\x0d, \\xff, \\u202e, \\u200b), so what a reader sees is what the file holds.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    elif not isinstance(text, str):
        text = str(text)
    return _CANDIDATE.sub(_block_escape, text)


def one_line(value):
    """VALUE (any value from a host) as one printable line for a report, a terminal or a figure: odd bytes, control
    and invisible characters escaped as printable_block() does, and the line break and the tab too (\\n, \\t)."""
    return printable_block(value).replace("\n", "\\n").replace("\t", "\\t")


# Markdown that text from a host must not make: HTML and autolinks (< >), entities (&), links and images ([ ]), code
# spans (`), emphasis and strike-through (* ~, and _ at a word's edge: diff_max_bytes stays as it is), and a
# backslash that would escape the next character. At the start of a block: a heading (#), a quote (>), a list
# (- + * 1. 1)), a setext underline (=) and an indented code block (leading spaces).
_MD_INLINE = re.compile(r"\\(?=[!-/:-@\[-`{-~])|[`*\[\]<>&~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_BLOCK_START = re.compile(r"(#|[-+=]|[0-9]{1,9}(?=[.)]))")


def markdown_inline(text, block_start=False):
    """TEXT (already one line, see printable_block) as Markdown that shows exactly TEXT: every character Markdown
    reads as markup is backslash-escaped, so a host's note such as ``# All clear <img src=x> [fix](https://x)``
    renders as that text, not as a heading, HTML or a link. BLOCK_START: TEXT begins a line of the document (no
    heading, list or code block from its first characters)."""
    out = _MD_INLINE.sub(lambda match: "\\" + match.group(), text)
    if block_start:
        out = out.lstrip(" ")
        match = _MD_BLOCK_START.match(out)
        if match:
            end = match.end()
            out = out[:end] + "\\" + out[end:] if out[:end].isdigit() else "\\" + out
    return out
