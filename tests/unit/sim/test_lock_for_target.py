# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/sim/lock_for_target.py: the same pins under another target's header, a lock the collection reads."""

import os
import subprocess
import sys

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile as lf

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "sim", "lock_for_target.py")
BODY = """lark==1.2.2 \\
    --hash=sha256:%s
    # via vllm
vllm==0.33.0 \\
    --hash=sha256:%s
    # via -r -
""" % ("a" * 64, "b" * 64)
META = {"python_version": "3.11", "python_platform": "x86_64-manylinux_2_36", "package": "vllm",
        "sources": "index http://index.example/simple/", "excluded": ["torch"],
        "resolved_at": "2026-12-05T13:47:43Z", "resolver": "uv 0.13.9"}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_pins_stay_and_only_the_target_changes(tmp_path):
    source = tmp_path / "fleet.lock"
    source.write_text(lf.render_lock(META, BODY))
    out = tmp_path / "py312.lock"
    result = run(source, out, "--python-version", "3.12", "--python-platform", "aarch64-manylinux_2_28")
    assert result.returncode == 0, result.stderr
    before, after = lf.parse_lock(source.read_text()), lf.parse_lock(out.read_text())
    assert after["packages"] == before["packages"] and after["fingerprint"] == before["fingerprint"]
    assert after["meta"]["python_version"] == "3.12" and after["meta"]["python_platform"] == "aarch64-manylinux_2_28"
    for key in ("package", "sources", "excluded", "resolved_at", "resolver"):
        assert after["meta"][key] == before["meta"][key]


def test_an_edited_lock_is_not_made_valid_and_a_target_is_required(tmp_path):
    source = tmp_path / "fleet.lock"
    source.write_text(lf.render_lock(META, BODY).replace("# python-version: 3.11", "# python-version: 3.12"))
    result = run(source, tmp_path / "out.lock", "--python-version", "3.13")
    assert result.returncode != 0 and "do not match its digest" in result.stderr
    assert not (tmp_path / "out.lock").exists()
    assert "give --python-version or --python-platform" in run(source, tmp_path / "out.lock").stderr
