# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The quality gate's figures next to the reference's in the rollout's summary: the rows (rollout_rows reads each
host's quality_result), the lines a run prints at its end, summary.md and summary.json."""

import json

from ansible_collections.gpufleet.vllm.plugins.filter.rollout import rollout_line, rollout_rows
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report

import quality_results as results
from test_rollout_decisions import HOSTVARS
from writer_actions import action_runner

GATE_TASK = "gpufleet.vllm.quality : Fail on a failed quality gate"


def failure_of(result, task=GATE_TASK):
    """rollout_failure as tasks/rollback_host.yml notes it: the failed task's message, then the task's name."""
    return "%s (failed task: %s)" % (result["msg"].strip(), task)


def fleet():
    failed = results.gated(nll=6.9, differing=7)
    return {
        "gpu-a01": dict(HOSTVARS["gpu-a01"], quality_result=results.gated()),
        # the gate failed after the start: rolled back to the build it served
        "gpu-a02": dict(HOSTVARS["gpu-a02"], quality_result=failed, rollout_failure=failure_of(failed)),
        "gpu-a03": dict(HOSTVARS["gpu-a07"], quality_result=results.not_gated()),
        "gpu-a04": dict(HOSTVARS["gpu-a04"]),
        "gpu-a05": dict(HOSTVARS["gpu-a07"], quality_result=results.skipped()),
        "gpu-a06": dict(HOSTVARS["gpu-a06"], quality_result=results.not_measured(),
                        rollout_failure=failure_of(results.not_measured())),
    }


def test_each_row_holds_its_hosts_quality_or_none():
    rows = {row["host"]: row for row in rollout_rows(list(fleet()), fleet())}
    assert rows["gpu-a01"]["quality"]["verdict"] == "passed"
    assert rows["gpu-a02"]["quality"]["verdict"] == "failed"
    assert rows["gpu-a02"]["quality"]["passage"]["reference_nll"] == 1.2301
    assert rows["gpu-a03"]["quality"]["verdict"] == "not_gated"
    assert rows["gpu-a04"]["quality"] is None and rows["gpu-a05"]["quality"] is None
    assert rows["gpu-a06"]["quality"]["verdict"] == "error" and rows["gpu-a06"]["quality"]["error_kind"] == "timeout"
    # (rows go into summary.json as they are)
    assert json.loads(json.dumps(list(rows.values()))) == list(rows.values())


def test_each_hosts_line_says_its_quality_next_to_the_reference():
    lines = [rollout_line(row) for row in rollout_rows(list(fleet()), fleet())]
    assert lines[0].endswith(", quality passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %)")
    assert ", quality FAILED: 1/8 answers, NLL 6.9000 (ref 1.2301, +460.9 %) -- Quality of kimi-k2.5" in lines[1]
    assert lines[2].endswith(", quality not gated (no reference): NLL 1.2345")
    assert "quality" not in lines[3] and "quality" not in lines[4]
    assert ", quality not measured (timed out) -- Quality of kimi-k2.5" in lines[5]


def test_the_run_prints_short_lines_and_summary_md_has_the_column_and_the_tables(tmp_path):
    rows = rollout_rows(list(fleet()), fleet())
    rc, result = action_runner("rollout_summary")({"path": str(tmp_path), "rows": rows,
                                                   "batches": [["gpu-a01"], ["gpu-a02", "gpu-a03"]]})
    assert rc == 0
    hosts = {line.split(":", 1)[0]: line for line in result["lines"][2:]}
    # the end of a run: the figures, not the failure's sentence (printed where it failed), each line short
    assert hosts["gpu-a02"] == ("gpu-a02: FAILED, rolled back, vllm 0.33.0, 0 dumps removed (0 B), quality FAILED: "
                                "1/8 answers, NLL 6.9000 (ref 1.2301, +460.9 %)")
    assert all(len(line) < 250 for line in result["lines"])
    md = (tmp_path / "summary.md").read_text().splitlines()
    assert md[2].endswith("| benchmark | answer quality |") and md[3].endswith("|---|---|")
    assert md[4].endswith("| ok | passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %) |")
    assert md[5].endswith("| FAILED: 1/8 answers, NLL 6.9000 (ref 1.2301, +460.9 %) |")
    assert md[7].endswith("| - |") and md[8].endswith("| - |")
    # the failure, whole, on one paragraph: the gate's own words and the task that failed
    failure = [line for line in md if line.startswith("**gpu-a02**: Quality of")]
    assert failure == ["**gpu-a02**: Quality of kimi-k2.5 (nvfp4) at http://127.0.0.1:8000 failed: the greedy answers "
                       "match the reference for 1 of 8 prompts (12 %, at least 80 % needed; the first to differ is "
                       "prompt 1, at token 0); the passage's mean NLL is 6.9000 per token against the reference's "
                       "1.2301 (+460.9 %, tolerance 5.0 %). (failed task: gpufleet.vllm.quality : Fail on a failed "
                       "quality gate)"]
    # the tables last, one per host whose gate ran
    start = md.index("## Answer quality")
    assert start > md.index(failure[0])
    tail = md[start:]
    assert "**gpu-a02**: quality FAILED: 1/8 answers, NLL 6.9000 (ref 1.2301, +460.9 %)" in tail
    assert "| relative difference | +460.9 % |  | within ±5.0 % |" in tail
    assert "| build | 0.33.0 | 0.32.0, recorded 2026-12-01T10:00:00Z |  |" in tail
    assert not any("gpu-a04" in line or "gpu-a05" in line for line in tail)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["hosts"][1]["quality"]["answers"]["matched"] == 1 and data["hosts"][3]["quality"] is None


def test_without_a_gate_the_summary_is_as_before():
    rows = rollout_rows(["gpu-a01", "gpu-a04"], HOSTVARS)
    md = rollout_report.markdown(rows, [["gpu-a01"]])
    assert "answer quality" not in md and "## Answer quality" not in md
    assert "quality" not in rollout_line(rows[0])


def test_hostile_strings_in_the_result_stay_text_in_the_summary(tmp_path):
    hostile = "0.33.0\u202e\n**bold** <b>x</b> | cell"
    result = results.gated(nll=6.9, differing=7, build=hostile)
    result.update(msg="failed\n# not a heading\u202e", failures=["line one\nline two | [x](http://y)"])
    rows = rollout_rows(["gpu-a02"], {"gpu-a02": dict(HOSTVARS["gpu-a02"], quality_result=result,
                                                      rollout_failure=failure_of(result))})
    line = rollout_line(rows[0])
    assert "\n" not in line and "\u202e" not in line and "\\u202e" in line
    rc, out = action_runner("rollout_summary")({"path": str(tmp_path), "rows": rows})
    assert rc == 0 and not any("\u202e" in entry or "\n" in entry for entry in out["lines"])
    md = (tmp_path / "summary.md").read_text()
    assert "\u202e" not in md and "<b>" not in md and "\n# not a heading" not in md and "\nline two" not in md
    assert "| build | 0.33.0\\u202e\\n\\*\\*bold\\*\\* \\<b\\>x\\</b\\> \\| cell | 0.32.0" in md
    assert "- line one\\nline two \\| \\[x\\](http://y)" in md
    for row in md.splitlines():
        if row.startswith("| ") and "answer quality" not in row and not row.startswith("| host"):
            # (the quality tables' four cells; the summary's 12 and its quality column)
            assert row.replace("\\|", "").count("|") in (5, 14), row


def test_rollout_quality_gives_each_hosts_figures_or_the_markdown_section():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.vllm.plugins.filter.rollout import rollout_quality
    hostvars = fleet()
    found = rollout_quality(list(hostvars), hostvars)
    assert sorted(found) == sorted(hostvars)
    assert found["gpu-a01"]["summary"] == "quality passed: 8/8 answers, NLL 1.2345 (ref 1.2301, +0.4 %)"
    assert found["gpu-a01"]["finding"] is False
    assert found["gpu-a02"]["finding"] is True and found["gpu-a06"]["finding"] is True
    assert found["gpu-a03"]["finding"] is False and found["gpu-a04"] is None and found["gpu-a05"] is None
    # a host missing from hostvars, another variable
    assert rollout_quality(["gone"], hostvars) == {"gone": None}
    other = rollout_quality(["gpu-a01"], {"gpu-a01": {"audit_q": results.gated()}}, var="audit_q")
    assert other["gpu-a01"]["verdict"] == "passed"
    md = rollout_quality(list(hostvars), hostvars, markdown=True)
    assert md.startswith("## Answer quality\n") and not md.endswith("\n")
    assert "**gpu-a02**: quality FAILED: 1/8 answers" in md and "gpu-a04" not in md
    assert rollout_quality(["gpu-a04"], hostvars, markdown=True) == ""
    for bad in ("gpu-a01", None):
        try:
            rollout_quality(bad, hostvars)
        except AnsibleFilterError as exc:
            assert "expects a list of hosts" in str(exc)
        else:
            raise AssertionError("accepted %r" % (bad,))
