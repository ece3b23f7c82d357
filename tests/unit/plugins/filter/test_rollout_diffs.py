# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout summary points to the plan's diffs of the modified files (what drifted before the rollout)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.gpufleet.vllm.plugins.filter.drift import drift_diff_files, drift_diff_markdown
from ansible_collections.gpufleet.vllm.plugins.module_utils.rollout import summary_row as rollout_row
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.rollout import markdown

DIFF = "--- wheel/vllm/a.py\n+++ installed/vllm/a.py\n@@ -1 +1,2 @@\n x = 1\n+_t.save(x, '/tmp/d.pt')\n"


def plan(paths, note=None):
    return {"row": {"build": "0.33.0", "pristine": False, "environment": "/root/ml-env"},
            "diffs": {"wheel": "/srv/wheelhouse/vllm-0.33.0-py3-none-any.whl", "files": [
                {"path": p, "class": "modified", "diff": DIFF, "truncated": False, "note": None} for p in paths],
                "bytes": 1, "not_diffed": 0, "note": note, "wheel_dirs": ["/srv/wheelhouse"]}}


def test_summary_links_each_diff_the_plan_wrote():
    facts = {"rollout_plan": plan(["vllm/a.py", "vllm/b.py"]), "rollout_needs": ["build"]}
    row = rollout_row("gpu-a01", facts)
    assert row["diffs_before"] == [{"path": "vllm/a.py", "file": "diffs/gpu-a01/vllm/a.py.diff"},
                                   {"path": "vllm/b.py", "file": "diffs/gpu-a01/vllm/b.py.diff"}]
    # the files the summary links are the ones the plan's tasks write
    written = [e["file"] for e in drift_diff_files(["gpu-a01"], {"gpu-a01": {"gpufleet_drift": facts["rollout_plan"]}})]
    assert written == [d["file"] for d in row["diffs_before"]]
    text = markdown([row], [["gpu-a01"]])
    assert ("**gpu-a01**: what drifted before the rollout, its modified vLLM files against the pristine wheel: "
            "[vllm/a.py](<diffs/gpu-a01/vllm/a.py.diff>), [vllm/b.py](<diffs/gpu-a01/vllm/b.py.diff>).") in text


def test_pristine_host_and_host_without_diffs_get_no_pointer():
    row = rollout_row("gpu-a02", {"rollout_plan": {"row": {"build": "0.33.0", "pristine": True}, "diffs": {}}})
    assert row["diffs_before"] == []
    assert "what drifted before" not in markdown([row], [])
    assert rollout_row("gpu-a03", {})["diffs_before"] == []


def test_hostile_path_is_linked_by_its_hashed_name_and_shown_escaped():
    row = rollout_row("gpu-a01", {"rollout_plan": plan(["../../x\x1b[31m](javascript:alert(1))"])})
    (entry,) = row["diffs_before"]
    assert entry["file"].startswith("diffs/gpu-a01/_renamed/") and entry["file"].endswith(".diff")
    text = markdown([row], [])
    assert "\x1b" not in text and "[../../x\\x1b\\[31m\\](javascript:alert(1))](<%s>)" % entry["file"] in text
    # a row that names a file the report did not make is not linked
    row["diffs_before"] = [{"path": "x", "file": "../../etc/passwd"}, {"path": "y", "file": "diffs/a/<b>.diff"}]
    assert "what drifted before" not in markdown([row], [])


def test_markdown_without_wheel_dirs_names_the_setting():
    result = plan([])
    result["diffs"].update(wheel=None, wheel_dirs=[], not_diffed=2,
                           note="no diffs: no directory of wheels on the host was given (wheel_dirs)")
    text = drift_diff_markdown(["gpu-a01"], {"gpu-a01": {"gpufleet_drift": result}})
    assert text == ("### gpu-a01: what changed in its vLLM files\n\nNo diffs: fleet_wheel_dirs names no directory of "
                    "wheels on the host. Set it to the directories that hold the wheels of the builds the fleet runs "
                    "(the mirror the hosts install from), and the report shows what changed in each modified file.\n")
    assert drift_diff_markdown(["gpu-a01"], {"gpu-a01": {"gpufleet_drift": plan([])}}) == ""
    assert drift_diff_markdown(["gpu-a09"], {}) == ""


def test_markdown_gives_each_file_without_a_diff_its_reason_and_counts_the_rest():
    result = plan(["vllm/a.py"])
    result["diffs"]["files"].append({"path": "vllm/_C.abi3.so", "class": "size_differs", "diff": "", "truncated": False,
                                     "note": "binary file (wheel 10 bytes, installed 12 bytes); no text diff"})
    result["diffs"]["not_diffed"] = 3
    text = drift_diff_markdown(["gpu-a01"], {"gpu-a01": {"gpufleet_drift": result}}, lines=2)
    assert text.startswith("### gpu-a01: what changed in its vLLM files against `vllm-0.33.0-py3-none-any.whl`\n\n")
    assert ("`vllm/a.py` (modified), the first 2 lines; 1 more in the whole diff: "
            "[diffs/gpu-a01/vllm/a.py.diff](<diffs/gpu-a01/vllm/a.py.diff>)\n\n```diff\n@@ -1 +1,2 @@\n x = 1\n```\n") in text
    assert ("`vllm/_C.abi3.so` (of another size than RECORD says): no diff: binary file (wheel 10 bytes, installed "
            "12 bytes); no text diff\n") in text
    assert text.endswith("3 more changed files not diffed (the bounds diff_max_files and max_list of drift_info, or its "
                         "time limit).\n")


def unescaped(text, mark):
    """Where MARK stands in TEXT without a backslash before it, the report's own links to its diff files aside."""
    text = re.sub(r"\]\(<diffs/[A-Za-z0-9._+@=,~/-]+>\)", "", text)
    return [m.start() for m in re.finditer(r"(?<!\\)" + re.escape(mark), text)]


HOSTILE_NOTE = "# All clear <img src=x onerror=alert(1)> [fix here](https://evil.example)"


def test_a_hosts_notes_and_classes_cannot_make_headings_html_or_links_in_drift_md():
    result = plan(["vllm/a.py"])
    result["diffs"]["note"] = HOSTILE_NOTE
    result["diffs"]["files"].append({"path": "vllm/b.py", "class": "<b>x</b> [c](https://evil.example)", "diff": "",
                                     "truncated": False, "note": "1. ![p](https://evil.example/t.png) *done* `ok`"})
    text = drift_diff_markdown(["gpu-a01"], {"gpu-a01": {"gpufleet_drift": result}})
    assert ("\\# All clear \\<img src=x onerror=alert(1)\\> \\[fix here\\](https://evil.example)\n\n") in text
    assert ("`vllm/b.py` (\\<b\\>x\\</b\\> \\[c\\](https://evil.example)): no diff: 1. !\\[p\\](https://evil.example/t.png) "
            "\\*done\\* \\`ok\\`\n") in text
    # no line a renderer reads as a heading but the report's own, no raw tag, no link or image but the report's own
    assert [line for line in text.splitlines() if line.startswith("#")] == [
        "### gpu-a01: what changed in its vLLM files against `vllm-0.33.0-py3-none-any.whl`"]
    assert unescaped(text, "<") == unescaped(text, "](") == []


def test_a_link_text_cannot_hide_html_or_an_image():
    row = rollout_row("gpu-a01", {"rollout_plan": plan(["vllm/<img src=x onerror=alert(1)>.py", "vllm/`a.py"])})
    text = markdown([row], [])
    assert unescaped(text, "<") == [] and "[vllm/\\<img src=x onerror=alert(1)\\>.py](<diffs/gpu-a01/_renamed/" in text
    assert "[vllm/\\`a.py](<diffs/gpu-a01/_renamed/" in text


def test_no_diff_file_overwrites_another_one_name_each():
    from ansible_collections.gpufleet.vllm.plugins.module_utils.report.drift import _hashed
    hostile = "vllm/\x1bx.py"
    paths = [hostile, "_renamed/%s" % _hashed(hostile, ""), hostile, "vllm/a.py", "vllm/a.py"]
    result = plan(paths)
    for index, item in enumerate(result["diffs"]["files"]):
        item["diff"] = DIFF + "+# diff %d\n" % index
    entries = drift_diff_files(["gpu-a01"], {"gpu-a01": {"gpufleet_drift": result}})
    names = [e["file"] for e in entries]
    assert len(set(names)) == len(names) == 5, names
    assert names[0] == "diffs/gpu-a01/_renamed/%s.diff" % _hashed(hostile, "")
    assert names[1] == "diffs/gpu-a01/_renamed/%s.diff" % _hashed(paths[1], "")  # not plain: its own hash
    assert names[2] == "diffs/gpu-a01/_renamed/%s-2.diff" % _hashed(hostile, "")
    assert names[3] == "diffs/gpu-a01/vllm/a.py.diff" and names[4].startswith("diffs/gpu-a01/_renamed/")
    assert [e["content"].endswith("+# diff %d\n" % i) for i, e in enumerate(entries)] == [True] * 5
