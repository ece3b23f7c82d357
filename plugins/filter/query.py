# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""query, query_error: JMESPath on the control node, with messages an operator can act on.

``report | gpufleet.vllm.query('hosts[?drift].host')`` selects from a result
as ``selectattr``/``map`` chains do, in the language of ``aws --query`` and
``az --query``. A bad expression is refused naming the expression and where
it goes wrong; unknown functions and wrong argument counts are found when
the expression is read, not only when a row reaches them.
``expression | gpufleet.vllm.query_error`` gives that message (or an empty
string) without raising, for a playbook that checks an operator's expression
before it reads anything from the hosts.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

try:
    import jmespath
    from jmespath import exceptions as jmespath_exceptions
    from jmespath import functions as jmespath_functions
except ImportError:  # pragma: no cover - the control-node requirements pin jmespath
    jmespath = jmespath_exceptions = jmespath_functions = None

# deeper than any report of this collection; a bound on the walk of the data and of the expression
MAX_DEPTH = 100
NO_JMESPATH = ("the jmespath Python package is missing on the control node "
               "(it is in the collection's control-node requirements: pip install jmespath)")


def _reason(exc):
    """The first line of a jmespath parse error, without its boilerplate."""
    line = str(exc).split("\n", 1)[0]
    for prefix in ("Invalid jmespath expression: ", "Bad jmespath expression: "):
        if line.startswith(prefix):
            line = line[len(prefix):]
    line = line.split(": Parse error at column", 1)[0]
    return line.rstrip(":").strip() or "parse error"


def _check_functions(node, table, depth=0):
    """The problem of the first unknown function or wrong argument count in a parsed expression, or None."""
    if depth > MAX_DEPTH:
        return "the expression nests deeper than %d levels" % MAX_DEPTH
    if not isinstance(node, dict):
        return None
    if node.get("type") == "function_expression":
        name = node.get("value")
        if name not in table:
            return "unknown function %s(); the functions are %s" % (name, ", ".join(sorted(table)))
        signature = table[name]["signature"]
        given = len(node.get("children", []))
        if signature and signature[-1].get("variadic"):
            if given < len(signature):
                return "%s() takes at least %d argument%s, got %d" % (name, len(signature), "" if len(signature) == 1 else "s", given)
        elif given != len(signature):
            return "%s() takes %d argument%s, got %d" % (name, len(signature), "" if len(signature) == 1 else "s", given)
    for child in node.get("children", []):
        problem = _check_functions(child, table, depth + 1)
        if problem:
            return problem
    return None


def _compile(expression):
    """(compiled expression, None) or (None, the problem in words)."""
    if jmespath is None:
        return None, NO_JMESPATH
    if not isinstance(expression, str):
        return None, "the expression must be a string, got %s" % type(expression).__name__
    if not expression.strip():
        return None, "the expression is empty"
    text = str.__str__(expression)
    try:
        compiled = jmespath.compile(text)
    except jmespath_exceptions.JMESPathError as exc:
        position = getattr(exc, "lex_position", None)
        where = ", at character %d" % (position + 1) if isinstance(position, int) else ""
        return None, "not a valid JMESPath expression (%s%s): %s" % (_reason(exc), where, text)
    except (ValueError, TypeError, RecursionError) as exc:
        return None, "not a valid JMESPath expression (%s): %s" % (exc, text)
    problem = _check_functions(compiled.parsed, jmespath_functions.Functions().FUNCTION_TABLE)
    if problem:
        return None, "not a valid JMESPath expression (%s): %s" % (problem, text)
    return compiled, None


def _plain(value, depth=0):
    """The data as plain dict/list/str/int/float/bool/None (Ansible's tagged and lazy types are not, and
    jmespath's functions know types by their names)."""
    if depth > MAX_DEPTH:
        raise AnsibleFilterError("gpufleet.vllm.query: the data nests deeper than %d levels" % MAX_DEPTH)
    if value is None or type(value) in (str, bool, int, float):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(key, depth + 1): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    return value


def query_error(expression):
    """The problem of a JMESPath expression in words (it names the expression), or '' when it is usable."""
    return _compile(expression)[1] or ""


def query(data, expression):
    """The result of a JMESPath expression on data; AnsibleFilterError naming the expression when it is bad."""
    compiled, problem = _compile(expression)
    if problem:
        raise AnsibleFilterError("gpufleet.vllm.query: %s" % problem)
    try:
        return compiled.search(_plain(data))
    except jmespath_exceptions.JMESPathError as exc:
        raise AnsibleFilterError("gpufleet.vllm.query: the expression failed on the data (%s): %s"
                                 % (str(exc).split("\n", 1)[0], str.__str__(expression)))
    except (ValueError, TypeError, RecursionError) as exc:
        raise AnsibleFilterError("gpufleet.vllm.query: the expression failed on the data (%s): %s"
                                 % (exc, str.__str__(expression)))


class FilterModule(object):
    """JMESPath queries."""

    def filters(self):
        return {"query": query, "query_error": query_error}
