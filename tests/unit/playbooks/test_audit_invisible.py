# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit's drift.md and terminal show a host's text as it is: a character that reorders the line (U+202E) or
hides itself (U+200B) is written as a visible escape, a | cannot end a table cell, and a host's message cannot
close a code block, in every part of the report, run by real ansible-playbook around fake drift_info results."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from helpers import load_source

diff_tests = load_source("gpufleet_audit_diffs_for_invisible", "tests", "unit", "playbooks", "test_audit_diffs.py")
query_tests = diff_tests.query_tests

RLO, ZWSP = u"\u202e", u"\u200b"


def hostile_row():
    row = query_tests.row(["integrity", "unit"], build="0.33.0" + RLO + "1.0 | x")
    row.update({"unit": "vllm" + ZWSP + ".service", "unit_state": "active" + RLO, "integrity": "pristine" + ZWSP,
                "gpu_health": "healthy" + RLO, "config_keys_present": 1, "config_reason": "sm120 " + RLO + ZWSP,
                "gpu_problems": ["GPU 0 " + RLO + "gnol"], "health_problems": ["ECC " + ZWSP + "off"],
                "dumps_bytes": "0 B" + ZWSP})
    return row


def test_a_hostile_value_in_every_part_of_drift_md_is_escaped(tmp_path):
    fleet = {"gpu-a01": dict(diff_tests.fake_result(["vllm/a" + ZWSP + ".py"]), row=hostile_row()),
             "gpu-a02": {"msg": "drift_info refused " + RLO + ZWSP + "\n```\n# a heading | of its own"}}
    proc, report = diff_tests.run_report(tmp_path, fleet)
    output = proc.stdout + proc.stderr
    assert report is not None, output
    md = (report / "drift.md").read_text(encoding="utf-8")
    assert RLO not in md and ZWSP not in md, md
    table = [line for line in md.splitlines() if line.startswith("| gpu-a0")]
    assert len(table) == 2, md
    # each row still has its eleven cells: a | in a build is escaped
    assert [len(line.replace("\\|", "").split("|")) for line in table] == [14, 14], table
    assert "| 0.33.0\\u202e1.0 \\| x |" in table[0]
    assert "vllm\\u200b.service active\\u202e" in table[0]
    assert "- GPU 0 \\u202egnol" in md and "- ECC \\u200boff" in md
    assert "SM120 KV-cache keys, gpu-a01: sm120 \\u202e\\u200b." in md
    # the message of a host that was not audited is its text, on its line: no code block of its own, no heading
    assert "\n# a heading" not in md and "```\n# a" not in md
    assert "drift_info refused \\u202e\\u200b\\n\\`\\`\\`\\n# a heading | of its own" in md
    # the terminal's lines too
    assert RLO not in proc.stdout and ZWSP not in proc.stdout
