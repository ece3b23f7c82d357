# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""debugscan: the alias-following syntax-tree scan and the literal patterns."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import textwrap

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import debugscan


def scan(src):
    return debugscan.scan_source(textwrap.dedent(src), "m.py")


def calls(src):
    """(line, kind, what) of dump and debugger findings."""
    return [(f["line"], f["kind"], f["what"]) for f in scan(src)
            if f["kind"] in ("tensor_dump", "object_dump", "debugger")]


@pytest.mark.parametrize("src, what, via", [
    ("import torch\ntorch.save(x, p)\n", "torch.save", None),
    ("import torch as _t\n_t.save(x, p)\n", "torch.save", "_t.save"),
    ("from torch import save as dump\ndump(x, p)\n", "torch.save", "dump"),
    ("from torch import save\nsave(x, p)\n", "torch.save", "save"),
    ("import torch\nf = torch.save\nf(x, p)\n", "torch.save", "f"),
    ("import torch\nt = torch\ng = t\ng.save(x, p)\n", "torch.save", "g.save"),
    ("import torch\ns = getattr(torch, 'save')\ns(x, p)\n", "torch.save", "s"),
    ("import torch\ngetattr(torch, 'save')(x, p)\n", "torch.save", "dynamic lookup"),
    ("t = __import__('torch')\nt.save(x, p)\n", "torch.save", "t.save"),
    ("import importlib\nt = importlib.import_module('torch')\nt.save(x, p)\n", "torch.save", "t.save"),
    ("import sys\nsys.modules['torch'].save(x, p)\n", "torch.save", "dynamic lookup"),
    ("import torch.serialization\ntorch.serialization.save(x, p)\n", "torch.serialization.save", None),
    ("from torch import serialization as ser\nser.save(x, p)\n", "torch.serialization.save", "ser.save"),
    ("import safetensors.torch as st\nst.save_file(d, p)\n", "safetensors.torch.save_file", "st.save_file"),
    ("from safetensors.torch import save_file\nsave_file(d, p)\n", "safetensors.torch.save_file", "save_file"),
    ("import numpy as np\nnp.save(p, a)\n", "numpy.save", "np.save"),
    ("import numpy as np\nnp.savez(p, a=a)\n", "numpy.savez", "np.savez"),
    ("import pickle\npickle.dump(o, f)\n", "pickle.dump", None),
    ("import pickle as pk\nw = pk.dump\nw(o, f)\n", "pickle.dump", "w"),
])
def test_dump_calls_are_found_through_aliases(src, what, via):
    found = [f for f in scan(src) if f["kind"] in ("tensor_dump", "object_dump")]
    assert len(found) == 1, found
    assert found[0]["what"] == what
    assert found[0]["line"] == src.count("\n")
    assert found[0].get("via") == via
    assert found[0]["kind"] == ("object_dump" if what.startswith("pickle") else "tensor_dump")


def test_alias_bound_in_a_method_and_through_self_attribute():
    src = """
        class Attn:
            def __init__(self):
                import torch as tt
                self._saver = tt

            def forward(self, q):
                self._saver.save(q, "/tmp/q.pt")
                return q
    """
    assert calls(src) == [(8, "tensor_dump", "torch.save")]


def test_debugger_leftovers():
    src = """
        import pdb
        import pdb as p
        def f():
            breakpoint()
            pdb.set_trace()
            p.set_trace()
            __import__("ipdb").set_trace()
    """
    assert calls(src) == [(5, "debugger", "breakpoint"), (6, "debugger", "pdb.set_trace"),
                          (7, "debugger", "pdb.set_trace"), (8, "debugger", "ipdb.set_trace")]


def test_rebound_breakpoint_and_unrelated_save_methods_are_not_reported():
    src = """
        import pickle
        breakpoint = lambda: None
        breakpoint()
        model.save("ckpt")
        self.save(q)
        data = pickle.dumps(obj)
        def save(x, p):
            pass
        save(1, 2)
    """
    assert calls(src) == []


def test_env_gated_switch_that_guards_a_dump():
    src = """
        import os
        import torch as _t
        def forward(q):
            if q.shape[0] == 5 and os.environ.get("NOMLA_SAVE", "1") == "1":
                _t.save(q, "/tmp/nomla.pt")
    """
    found = scan(src)
    gates = [f for f in found if f["kind"] == "env_debug_switch"]
    assert len(gates) == 1
    assert gates[0]["line"] == 5
    assert "NOMLA_SAVE" in gates[0]["what"] and "torch.save" in gates[0]["what"]


def test_env_switch_through_a_variable_and_getenv():
    src = """
        import os
        import numpy as np
        FLAG = os.getenv("MY_FLAG")
        if FLAG:
            np.save("/tmp/a", arr)
    """
    found = [(f["line"], f["what"]) for f in scan(src) if f["kind"] == "env_debug_switch"]
    assert found == [(5, "environment variable MY_FLAG gates numpy.save")]


def test_env_reads_with_debug_names_and_vllm_envs():
    src = """
        import os
        import vllm.envs as envs
        a = os.environ["DUMP_DIR"]
        b = "TRACE_ME" in os.environ
        c = os.environ.get("HOME")
        d = envs.VLLM_DEBUG_DUMP_PATH
        e = envs.VLLM_USE_V1
    """
    found = [(f["line"], f["what"]) for f in scan(src) if f["kind"] == "env_debug_switch"]
    assert found == [(4, "reads environment variable DUMP_DIR"),
                     (5, "reads environment variable TRACE_ME"),
                     (7, "reads environment variable VLLM_DEBUG_DUMP_PATH")]


def test_syntax_error_is_a_finding_not_an_exception():
    found = debugscan.scan_source("def f(:\n    torch.save(x)\n", "bad.py")
    assert [(f["kind"], f["line"]) for f in found] == [("syntax_error", 1)]


def test_null_bytes_do_not_raise():
    found = debugscan.scan_source(b"x = 1\x00\n", "nul.py")
    assert found[0]["kind"] == "syntax_error"


def test_patterns_report_file_line_and_text():
    text = "a = 1\nself._nomla_debug += 1\n_t.save(q, p)  # torch.save\n"
    found = debugscan.scan_patterns(text, debugscan.DEFAULT_PATTERNS, "x.py")
    assert [(f["line"], f["what"], f["text"]) for f in found] == [
        (2, "_nomla_debug", "self._nomla_debug += 1"),
        (3, "torch.save", "_t.save(q, p)  # torch.save"),
        (3, "_t.save", "_t.save(q, p)  # torch.save"),
    ]
    assert all(f["path"] == "x.py" and f["kind"] == "pattern" for f in found)


def test_patterns_are_literal_and_case_sensitive():
    found = debugscan.scan_patterns("torch_save\nTORCH.SAVE\na.b\n", ["torch.save", "a.b", ""], "x")
    assert [(f["line"], f["what"]) for f in found] == [(3, "a.b")]


def test_default_patterns_are_the_field_list():
    assert list(debugscan.DEFAULT_PATTERNS) == [
        "torch.save", "_t2.save", "_t.save", "NOMLA_SAVE", "embed_debug", "_nomla_debug",
        "_embed_debug_saved", "_nomla_class_saved"]


def test_explain_combines_and_bounds():
    data = b"import torch as _t\n" + b"_t.save(x, p)\n" * 30
    findings, total = debugscan.explain(data, "pkg/mod.py", limit=10)
    assert total == 60  # 30 tensor dumps + 30 "_t.save" pattern hits
    assert len(findings) == 10
    assert findings[0]["kind"] == "tensor_dump" and findings[0]["line"] == 2


def test_explain_skips_ast_for_non_python_and_binary():
    findings, total = debugscan.explain(b"torch.save(x)\n", "notes.txt")
    assert [f["kind"] for f in findings] == ["pattern"] and total == 1
    findings, total = debugscan.explain(b"\x7fELF\x00\x00torch.save", "lib.so")
    assert findings == [] and total == 0
    script = b"#!/opt/env/bin/python\nimport torch as t\nt.save(1, 'x')\n"
    kinds = [f["kind"] for f in debugscan.explain(script, "../../../bin/tool")[0]]
    assert "tensor_dump" in kinds


@pytest.mark.parametrize("source", [
    "x = " + "-" * 200000 + "1\n",          # MemoryError in the parser
    "y = " + "1+" * 200000 + "1\n",          # RecursionError building the tree
    "z = a" + ".b" * 200000 + "\n",
])
def test_tree_too_deep_for_ast_is_a_not_scanned_finding_and_patterns_still_run(source):
    data = ("import torch\ntorch.save(1, 'p')\n" + source).encode()
    findings, total = debugscan.explain(data, "deep.py", ["torch.save"])
    kinds = sorted((f["kind"], f["line"]) for f in findings)
    assert kinds == [("not_scanned", 0), ("pattern", 2)]
    scanned = [f for f in findings if f["kind"] == "not_scanned"][0]
    assert "too deeply nested or too large for the syntax-tree scan" in scanned["what"]
    assert scanned["what"].split("(")[1].startswith(("RecursionError", "MemoryError"))


def test_nul_byte_after_the_binary_sniff_is_a_syntax_error_finding():
    data = b"x = 1\n" * 2000 + b"y = '\x00'\n"
    findings, total = debugscan.explain(data, "nul.py", [])
    assert [f["kind"] for f in findings] == ["syntax_error"]
    assert "null bytes" in findings[0]["what"]
