# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Explain what a changed Python file does: debug dumps, debuggers, switches.

This is the *explanation* half of the integrity check (the verdict comes from
the hashes in RECORD, see ``integrity.py``).  Two independent scans run on a
file's text:

* :func:`scan_source` parses the file with :mod:`ast` and follows aliases,
  so that ``import torch as _t; _t.save(x, p)``, ``from torch import save as
  dump; dump(x, p)``, ``f = torch.save; f(x, p)``, ``getattr(torch, "save")``,
  ``__import__("torch")``, ``importlib.import_module("torch")`` and
  ``sys.modules["torch"]`` are all recognised as ``torch.save``.  It reports
  tensor and object dumps (``torch.save``, ``torch.serialization.save``,
  ``safetensors.torch.save_file``, ``numpy.save``/``savez``, ``pickle.dump``,
  ...), debugger leftovers (``breakpoint()``, ``pdb.set_trace()``, ...) and
  environment-gated debug switches (an ``if`` on an environment variable that
  guards a dump or a debugger, or the read of an environment variable whose
  name says debug/dump/save/trace).
* :func:`scan_patterns` reports every line holding one of the operator's
  literal patterns (:data:`DEFAULT_PATTERNS` by default).

Alias tracking is flow-insensitive on purpose: a name bound anywhere in the
file (in any function) to ``torch`` is taken as ``torch`` everywhere.  That
over-approximates, which is right for an explanation of a file already known
to differ from its wheel.

Only the Python standard library is used.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ast
import re

# The literal patterns the operators grepped for on the reference host (defined apart, re-exported here).
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.scanpatterns import DEFAULT_PATTERNS

#: Canonical call name -> finding kind.
DUMP_CALLS = {
    "torch.save": "tensor_dump",
    "torch.serialization.save": "tensor_dump",
    "safetensors.torch.save_file": "tensor_dump",
    "safetensors.numpy.save_file": "tensor_dump",
    "safetensors.flax.save_file": "tensor_dump",
    "safetensors.paddle.save_file": "tensor_dump",
    "numpy.save": "tensor_dump",
    "numpy.savez": "tensor_dump",
    "numpy.savez_compressed": "tensor_dump",
    "numpy.savetxt": "tensor_dump",
    "pickle.dump": "object_dump",
    "_pickle.dump": "object_dump",
    "pickle.Pickler": "object_dump",
    "cloudpickle.dump": "object_dump",
    "dill.dump": "object_dump",
    "joblib.dump": "object_dump",
    "marshal.dump": "object_dump",
}

DEBUGGER_CALLS = frozenset((
    "breakpoint",
    "builtins.breakpoint",
    "pdb.set_trace",
    "pdb.post_mortem",
    "pdb.pm",
    "pdb.run",
    "pdb.runcall",
    "pdb.Pdb",
    "ipdb.set_trace",
    "ipdb.post_mortem",
    "pudb.set_trace",
    "remote_pdb.set_trace",
    "debugpy.listen",
    "debugpy.breakpoint",
    "debugpy.wait_for_client",
    "IPython.embed",
    "code.interact",
))

ENV_GET_CALLS = frozenset((
    "os.environ.get",
    "os.environ.setdefault",
    "os.environ.pop",
    "os.getenv",
    "os.getenvb",
    "os.environb.get",
))
ENV_MAPPINGS = frozenset(("os.environ", "os.environb"))
# vLLM reads its switches through ``vllm.envs`` (``envs.VLLM_...``).
ENV_MODULE_PREFIXES = ("vllm.envs.",)

#: Environment variable names that announce a debug switch.
DEBUG_ENV_RE = re.compile(r"(?i)(debug|dump|save|trace|pdb|breakpoint)")

_MAX_ALIASES_PER_NAME = 16
_MAX_FIXPOINT_ROUNDS = 6
_MAX_TEXT = 200


def _clip(text, limit=_MAX_TEXT):
    text = text.strip()
    if len(text) > limit:
        return text[:limit - 3] + "..."
    return text


def _dotted(node):
    """``a.b.c`` for a chain of Name/Attribute nodes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _const_str(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class _Resolver:
    """Map expressions to the canonical dotted names they may stand for."""

    def __init__(self, nodes):
        self.aliases = {}
        self.bound = set()
        self._bindings = []
        self._collect(nodes)
        self._solve()

    # -- binding collection -------------------------------------------------
    def _bind_static(self, key, value):
        self.aliases.setdefault(key, set()).add(value)

    def _collect(self, nodes):
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self._bind_static(alias.asname, alias.name)
                    else:
                        top = alias.name.split(".", 1)[0]
                        self._bind_static(top, top)
            elif isinstance(node, ast.ImportFrom):
                if node.level or not node.module:
                    continue
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    self._bind_static(alias.asname or alias.name, node.module + "." + alias.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    self._collect_assign(target, node.value)
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                self._collect_assign(node.target, node.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                self._mark_bound(node.target)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self._mark_bound(node.optional_vars)

    def _mark_bound(self, target):
        if isinstance(target, (ast.Tuple, ast.List)):
            for sub in target.elts:
                self._mark_bound(sub)
            return
        key = _dotted(target)
        if key is not None:
            self.bound.add(key)

    def _collect_assign(self, target, value):
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for sub_target, sub_value in zip(target.elts, value.elts):
                    self._collect_assign(sub_target, sub_value)
            else:
                self._mark_bound(target)
            return
        key = _dotted(target)
        if key is not None:
            self.bound.add(key)
            self._bindings.append((key, value))

    def _solve(self):
        for dummy in range(_MAX_FIXPOINT_ROUNDS):
            changed = False
            for key, value in self._bindings:
                names = self.resolve(value)
                if not names:
                    continue
                known = self.aliases.setdefault(key, set())
                before = len(known)
                for name in names:
                    if len(known) >= _MAX_ALIASES_PER_NAME:
                        break
                    if name != key:
                        known.add(name)
                if len(known) != before:
                    changed = True
            if not changed:
                break

    # -- resolution ---------------------------------------------------------
    def resolve(self, node, depth=0):
        """Set of canonical dotted names ``node`` may evaluate to."""
        if depth > 24:
            return set()
        if isinstance(node, ast.Name):
            found = self.aliases.get(node.id)
            if found:
                return set(found)
            if node.id in self.bound:
                return set()
            return {node.id}
        if isinstance(node, ast.Attribute):
            key = _dotted(node)
            if key is not None and key in self.aliases:
                return set(self.aliases[key])
            return {base + "." + node.attr for base in self.resolve(node.value, depth + 1)}
        if isinstance(node, ast.Call):
            return self._resolve_call(node, depth)
        if isinstance(node, ast.Subscript):
            name = _const_str(node.slice)
            if name is not None and "sys.modules" in self.resolve(node.value, depth + 1):
                return {name}
        return set()

    def _resolve_call(self, node, depth):
        funcs = self.resolve(node.func, depth + 1)
        args = node.args
        if "getattr" in funcs or "builtins.getattr" in funcs:
            if len(args) >= 2:
                attr = _const_str(args[1])
                if attr is not None:
                    return {base + "." + attr for base in self.resolve(args[0], depth + 1)}
            return set()
        if args and ("__import__" in funcs or "builtins.__import__" in funcs):
            name = _const_str(args[0])
            if name:
                return {name.split(".", 1)[0]}
        if args and "importlib.import_module" in funcs:
            name = _const_str(args[0])
            if name and not name.startswith("."):
                return {name}
        return set()


def _node_lines(node):
    start = getattr(node, "lineno", 0)
    end = getattr(node, "end_lineno", None) or start
    return start, end


def _finding(path, line, kind, what, lines, via=None):
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    item = {"path": path, "line": line, "kind": kind, "what": what, "text": _clip(text)}
    if via:
        item["via"] = via
    return item


def _env_reads_direct(node, resolver):
    """Environment variable names read by exactly this node (not its children)."""
    if isinstance(node, ast.Call):
        if resolver.resolve(node.func) & ENV_GET_CALLS:
            return [_const_str(node.args[0]) or "?"] if node.args else ["?"]
        return []
    if isinstance(node, ast.Subscript):
        if resolver.resolve(node.value) & ENV_MAPPINGS:
            return [_const_str(node.slice) or "?"]
        return []
    if isinstance(node, ast.Compare):
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                resolver.resolve(c) & ENV_MAPPINGS for c in node.comparators):
            return [_const_str(node.left) or "?"]
        return []
    if isinstance(node, ast.Attribute) and node.attr.isupper():
        names = []
        for base in resolver.resolve(node.value):
            if base + "." in ENV_MODULE_PREFIXES:
                names.append(node.attr)
        return names
    return []


def _env_reads(node, resolver, env_names):
    """Environment variables read anywhere inside ``node`` (names, or '?')."""
    found = []
    for sub in ast.walk(node):
        found.extend(_env_reads_direct(sub, resolver))
        if env_names and isinstance(sub, (ast.Name, ast.Attribute)):
            key = _dotted(sub)
            if key is not None and key in env_names:
                found.extend(sorted(env_names[key]))
    return found


def _spans(node, lines):
    start, end = _node_lines(node)
    return any(start <= line <= end for line in lines)


def scan_source(source, path="<string>"):
    """Syntax-tree scan of Python ``source`` (str or bytes).

    Returns a list of findings, each a dict with ``path``, ``line``, ``kind``
    (``tensor_dump``, ``object_dump``, ``debugger``, ``env_debug_switch``,
    ``syntax_error`` or ``not_scanned`` for a tree too deep or too large for
    :mod:`ast`), ``what`` (the canonical call or the variable), ``text``
    (the line, clipped) and, for calls made through an alias, ``via`` (the
    spelling in the file, e.g. ``_t.save``).  Sorted by line.
    """
    if isinstance(source, bytes):
        text = source.decode("utf-8", "replace")
    else:
        text = source
    lines = text.splitlines()
    try:
        tree = ast.parse(source, filename=path)
    except (RecursionError, MemoryError) as exc:
        return [_not_scanned(path, exc, lines)]
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 0
        return [_finding(path, line, "syntax_error", "not valid Python: %s" % (getattr(exc, "msg", None) or exc), lines)]
    try:
        return _scan_tree(tree, path, lines)
    except (RecursionError, MemoryError) as exc:
        return [_not_scanned(path, exc, lines)]


def _not_scanned(path, exc, lines):
    return _finding(path, 0, "not_scanned", "too deeply nested or too large for the syntax-tree scan (%s); only the "
                    "patterns were looked for" % type(exc).__name__, lines)


def _scan_tree(tree, path, lines):
    nodes = list(ast.walk(tree))
    resolver = _Resolver(nodes)
    findings = []

    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        spelled = _dotted(node.func)
        for name in sorted(resolver.resolve(node.func)):
            kind = DUMP_CALLS.get(name)
            if kind is None and name in DEBUGGER_CALLS:
                kind = "debugger"
            if kind is None:
                continue
            if name == "builtins.breakpoint":
                name = "breakpoint"
            via = spelled if spelled and spelled != name else None
            if spelled is None:
                via = "dynamic lookup"
            findings.append(_finding(path, node.lineno, kind, name, lines, via))
            break

    # Direct reads of the environment, by line.
    direct = {}
    for node in nodes:
        if isinstance(node, (ast.Call, ast.Subscript, ast.Compare, ast.Attribute)):
            names = _env_reads_direct(node, resolver)
            if names:
                direct.setdefault(node.lineno, []).extend(names)

    # Names assigned from an environment read: NOMLA = os.environ.get("NOMLA_SAVE")
    env_names = {}
    if direct:
        for node in nodes:
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = (node.target,)
            else:
                continue
            if not _spans(node.value, direct):
                continue
            reads = _env_reads(node.value, resolver, None)
            for target in targets:
                key = _dotted(target)
                if key is not None and reads:
                    env_names.setdefault(key, set()).update(reads)

    reported = set()
    dumps = list(findings)
    if direct and dumps:
        for node in nodes:
            if not isinstance(node, (ast.If, ast.While, ast.IfExp)):
                continue
            reads = _env_reads(node.test, resolver, env_names)
            if not reads:
                continue
            body = node.body if isinstance(node.body, list) else [node.body]
            start = min(_node_lines(b)[0] for b in body)
            end = max(_node_lines(b)[1] for b in body)
            guarded = sorted(set(f["what"] for f in dumps if start <= f["line"] <= end))
            if not guarded:
                continue
            findings.append(_finding(
                path, node.lineno, "env_debug_switch",
                "environment variable %s gates %s" % (", ".join(sorted(set(reads))), ", ".join(guarded)),
                lines))
            reported.add(node.lineno)

    for line in sorted(direct):
        if line in reported:
            continue
        for name in direct[line]:
            if name != "?" and DEBUG_ENV_RE.search(name):
                findings.append(_finding(path, line, "env_debug_switch",
                                         "reads environment variable %s" % name, lines))
                break

    findings.sort(key=lambda f: (f["line"], f["kind"], f["what"]))
    return findings


def scan_patterns(text, patterns=DEFAULT_PATTERNS, path="<string>"):
    """Every line of ``text`` holding a literal pattern (case-sensitive).

    One finding per (line, pattern): ``path``, ``line``, ``kind`` =
    ``pattern``, ``what`` (the pattern) and ``text`` (the line, clipped).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    patterns = [p for p in (patterns or ()) if p]
    findings = []
    if not patterns:
        return findings
    for number, line in enumerate(text.splitlines(), 1):
        for pattern in patterns:
            if pattern in line:
                findings.append({"path": path, "line": number, "kind": "pattern",
                                 "what": pattern, "text": _clip(line)})
    return findings


def explain(data, path, patterns=DEFAULT_PATTERNS, python=None, limit=100):
    """Findings for one file's bytes: syntax-tree scan (Python files) + patterns.

    ``python`` forces (True) or suppresses (False) the syntax-tree scan; by
    default it runs for ``*.py`` files and for scripts whose first line names
    a Python interpreter.  The list is sorted by line and cut at ``limit``;
    returns ``(findings, total)``.
    """
    if b"\x00" in data[:8192]:
        return [], 0
    if python is None:
        first = data[:128].split(b"\n", 1)[0]
        python = path.endswith((".py", ".pyw")) or (first.startswith(b"#!") and b"python" in first)
    findings = []
    if python:
        findings.extend(scan_source(data, path))
    findings.extend(scan_patterns(data, patterns, path))
    findings.sort(key=lambda f: (f["line"], f["kind"] == "pattern", f["kind"], f["what"]))
    return findings[:limit], len(findings)
