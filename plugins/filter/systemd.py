# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Quote values for systemd unit files (filters for the unit templates).

systemd does not run ``ExecStart=`` through a shell: it splits the line into
words itself, following its own rules (systemd.service(5), "Command lines";
systemd.syntax(7); systemd.unit(5), "Specifiers"):

* a word in double quotes may contain spaces; inside it, C-style escapes
  apply: ``\\\\`` is a backslash, ``\\"`` a double quote, ``\\n``, ``\\t``,
  ``\\xNN`` control characters;
* ``%`` starts a specifier (``%n``, ``%h``, ...) everywhere in a unit file:
  a literal ``%`` is ``%%``;
* ``$NAME`` and ``${NAME}`` in ``ExecStart=`` are replaced by environment
  variables: a literal ``$`` is ``$$``;
* ``Environment=`` takes quoted ``"NAME=value"`` assignments with the same
  quoting and specifiers, but no ``$`` substitution;
* a line cannot hold a newline; a line that ends in a backslash continues on
  the next line.

Filters:

``systemd_quote(word)``
    One ``ExecStart=`` word, always in double quotes.
``systemd_exec_args(argv, wrap=False)``
    A whole command line (a list of words) for ``ExecStart=``; with
    ``wrap=true`` one word per line, joined by backslash continuations.
``systemd_environment(env)``
    A dict as a list of ``Environment="NAME=value"`` lines, sorted by name.
``systemd_value(text, name=None)``
    A plain one-line setting (``Description=``, ``User=``,
    ``WorkingDirectory=``) or the text of a comment line: ``%`` doubled;
    control characters (a line break would start a new line, hence a new
    section or directive) and a trailing backslash (a line continuation that
    would swallow the next directive) refused, with an error naming ``name``.
``systemd_unit_name(text, name=None)``
    A unit name (``vllm-kimi-k25`` or ``vllm-kimi-k25.service``) checked
    against systemd's rules for unit names, as ``<name>.service``: it becomes
    a file name under the unit directory, so no ``/`` and no ``..``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import describe_control, shown
from ansible_collections.gpufleet.vllm.plugins.module_utils.systemd import unit_name_problem

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_NAMED_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _word_text(value, what):
    """Text of one value; refuses values that have no single text form."""
    if value is None:
        raise AnsibleFilterError("%s is empty (None); give a string" % what)
    if isinstance(value, bool):
        raise AnsibleFilterError(
            "%s is the boolean %s: write the text the program expects as a quoted string "
            "(for example '1', 'true' or '--flag')" % (what, value))
    if isinstance(value, (dict, list, tuple, set)):
        raise AnsibleFilterError("%s is a %s, not a single word: %r" % (what, type(value).__name__, value))
    text = to_text(value, errors="surrogate_or_strict")
    if "\x00" in text:
        raise AnsibleFilterError("%s holds a NUL character (U+0000) at character %d of %s: systemd refuses it and no "
                                 "program argument can carry one" % (what, text.index("\x00") + 1, shown(text)))
    return text


def _escape(text, dollar):
    out = []
    for char in text:
        if char in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[char])
        elif char == "%":
            out.append("%%")
        elif char == "$" and dollar:
            out.append("$$")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append("\\x%02x" % ord(char))
        else:
            out.append(char)
    return "".join(out)


def systemd_quote(word):
    """One ExecStart= word in double quotes: backslash, quote, %, $ and control characters escaped."""
    return '"%s"' % _escape(_word_text(word, "the ExecStart word"), dollar=True)


def systemd_exec_args(argv, wrap=False):
    """A command line (list of words) for ExecStart=, every word quoted.

    With ``wrap`` true the words go one per line, joined by `` \\`` line
    continuations (systemd reads them as one line).
    """
    if isinstance(argv, str) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError(
            "systemd_exec_args needs a list of words (the program, then each argument), got %s %r: "
            "a single string would have to be split like a shell does, which this filter never does"
            % (type(argv).__name__, argv))
    if not argv:
        raise AnsibleFilterError("systemd_exec_args got an empty command line; the first word must be the program")
    words = []
    for index, word in enumerate(argv):
        words.append('"%s"' % _escape(_word_text(word, "word %d of the command line" % index), dollar=True))
    program = _word_text(argv[0], "the program")
    if not program.startswith("/"):
        raise AnsibleFilterError(
            "the program of an ExecStart= line must be an absolute path, got %r" % (program,))
    return (" \\\n    " if wrap else " ").join(words)


def systemd_environment(env):
    """A dict of environment variables as Environment="NAME=value" lines, sorted by name."""
    if env is None:
        return []
    if not isinstance(env, dict):
        raise AnsibleFilterError("systemd_environment needs a dict of NAME: value, got %s %r"
                                 % (type(env).__name__, env))
    lines = []
    for name in sorted(env, key=to_text):
        text_name = to_text(name)
        if not _ENV_NAME.match(text_name):
            raise AnsibleFilterError(
                "environment variable name %r is not valid: use letters, digits and underscores, "
                "not starting with a digit" % (text_name,))
        value = _word_text(env[name], "the value of environment variable %s" % text_name)
        lines.append('Environment="%s=%s"' % (text_name, _escape(value, dollar=False)))
    return lines


def _line_text(text, name):
    """Text of one value that goes on a unit line as it is: control characters refused, naming name."""
    value = _word_text(text, name)
    problem = describe_control(value, name)
    if problem:
        raise AnsibleFilterError(problem)
    return value


def systemd_value(text, name=None):
    """A one-line unit setting value: % doubled; control characters and a trailing backslash refused."""
    name = name or "the unit setting"
    value = _line_text(text, name)
    if value.endswith("\\"):
        raise AnsibleFilterError(
            "%s ends in a backslash (%s): systemd would read it as a line continuation and join the next "
            "line of the unit to it" % (name, shown(value)))
    return value.replace("%", "%%")


def systemd_unit_name(text, name=None):
    """A service unit name as <name>.service, refused unless systemd would accept it as one file name.

    The rules (systemd.unit(5)) live in module_utils/systemd.py, shared with the modules that read units.
    """
    name = name or "the unit name"
    value = _line_text(text, name)
    base = value[:-len(".service")] if value.endswith(".service") else value
    problem = unit_name_problem(base)
    if problem:
        raise AnsibleFilterError("%s %s %s: give the unit's name, for example vllm-kimi-k25"
                                 % (name, shown(value), problem))
    return base + ".service"


class FilterModule(object):
    """systemd unit file quoting."""

    def filters(self):
        return {
            "systemd_quote": systemd_quote,
            "systemd_exec_args": systemd_exec_args,
            "systemd_environment": systemd_environment,
            "systemd_value": systemd_value,
            "systemd_unit_name": systemd_unit_name,
        }
