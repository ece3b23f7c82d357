# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's checks of names and values match the whole string: in a regular expression ``$`` also matches
before a final line break, so ``^...$`` passes ``s1\\n``; ``\\Z`` (or re.fullmatch) does not."""

# pylint: disable=protected-access

import ast
import os
import re

import pytest

from ansible_collections.gpufleet.vllm.plugins.lookup import uv_resolve
from ansible_collections.gpufleet.vllm.plugins.module_utils import haproxy, serving, systemd, uvcli, vllm_api
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import baseline, report, sweep

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE)))), "plugins")
# line-wise searches (re.M): there $ is meant to end a line
LINE_PATTERNS = {("module_utils/torchcompat.py", "^__version__"), ("module_utils/torchcompat.py", "^cuda")}


@pytest.mark.parametrize("pattern, good", [
    (haproxy.NAME, "s1"), (systemd._UNIT_NAME, "vllm-kimi-k25"), (systemd._KEY, "MainPID"),
    (systemd._ENV_NAME, "CUDA_VISIBLE_DEVICES"), (serving._UUID_RE, "GPU-0a1b"), (vllm_api.HOST_CHARS, "gpu-01"),
    (uvcli.PYTHON_VERSION_RE, "3.12"), (uvcli.PLATFORM_RE, "x86_64-manylinux_2_28"), (uvcli.ENV_NAME_RE, "UV_X"),
    (uv_resolve.NAME_RE, "vllm"), (uv_resolve.EXACT_VERSION_RE, "0.33.0"),
    (report.SAFE_NAME, "host-1"), (baseline.QUANT_NAME, "nvfp4"), (sweep.ENV_NAME, "HF_HOME"),
    (sweep.URL, "http://127.0.0.1:8000/v1"),
])
def test_a_value_with_a_final_line_break_does_not_pass(pattern, good):
    assert pattern.match(good)
    assert not pattern.match(good + "\n")


def test_unit_names_and_haproxy_names_with_a_final_line_break_are_refused():
    assert systemd.unit_name_problem("vllm-kimi-k25\n")
    with pytest.raises(ValueError):
        systemd.unit_name("vllm-kimi-k25.service\n")
    assert haproxy.name_problem("rollout-1\n", "server")


def _patterns(path):
    """(pattern text, line) of the string literals in PATH that read as an anchored regular expression."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            if text.startswith("^") and len(text) < 300:
                yield text, node.lineno


def test_no_anchored_pattern_in_the_plugins_ends_in_a_dollar():
    found = []
    for root, dummy, files in os.walk(PLUGINS):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, PLUGINS)
            for text, line in _patterns(path):
                if re.search(r"(?<!\\)\$\)*\Z", text) and not any(
                        rel == where and text.startswith(start) for where, start in LINE_PATTERNS):
                    found.append("%s:%d %s" % (rel, line, text[:80]))
    assert found == [], "anchored with $ (matches before a final line break; use \\Z): %s" % found
