# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.rollout_summary, its action plugin run in-process as Ansible runs it on the control node."""

import json
import os

import pytest

from writer_actions import action_runner

ROWS = [
    {"host": "gpu-a01", "status": "updated", "build_before": "0.32.0", "pristine_before": False, "build_after": "0.33.0",
     "downtime_s": 21.84, "artifacts_removed": 35, "artifacts_bytes": "65.3 MB", "config_keys_removed": 2, "pristine": True,
     "single_stream_tok_s": 81.7, "peak_tok_s": 2252.4, "benchmark": "ok", "failure": "", "needed": ["dumps (35)"]},
    {"host": "gpu-a02", "status": "FAILED, rolled back", "build_before": "0.32.0", "pristine_before": True,
     "build_after": "", "downtime_s": None, "artifacts_removed": None, "config_keys_removed": None, "pristine": None,
     "failure": "cutover: not ready | within 60 s\n[Service]"},
]


@pytest.fixture
def run():
    return action_runner("rollout_summary")


def test_writes_both_files_and_says_each_host_on_one_line(run, tmp_path):
    rc, result = run({"path": str(tmp_path / "rollout-1"), "rows": ROWS, "batches": [["gpu-a01"], ["gpu-a02"]]})
    assert rc == 0 and result["changed"] is False and result["failed_hosts"] == ["gpu-a02"]
    assert result["lines"][1] == "batches: gpu-a01 -> gpu-a02"
    assert result["lines"][2].startswith("gpu-a01: updated, vllm 0.32.0 -> 0.33.0, was NOT pristine, downtime 21.8 s")
    assert "\n" not in result["lines"][3]
    data = json.loads((tmp_path / "rollout-1" / "summary.json").read_text())
    assert data["hosts"] == ROWS and data["batches"] == [["gpu-a01"], ["gpu-a02"]] and data["benchmark_report"] is None
    md = (tmp_path / "rollout-1" / "summary.md").read_text().splitlines()
    assert md[4] == ("| gpu-a01 | updated | 0.32.0 | modified | 0.33.0 | 21.8 | 35 (65.3 MB) | 2 | pristine | 81.7 | 2252 | ok |")
    assert md[5] == "| gpu-a02 | FAILED, rolled back | 0.32.0 | pristine | - | - | - | - | - | - | - | - |"
    # a failure with a pipe and a line break cannot break the table or add a line
    assert "**gpu-a02**: cutover: not ready \\| within 60 s\\n\\[Service\\]" in md
    assert not any(line.startswith("[Service]") for line in md)


def test_links_the_benchmark_report_when_there_is_one(run, tmp_path):
    (tmp_path / "report.md").write_text("# report\n")
    rc, result = run({"path": str(tmp_path), "rows": ROWS[:1]})
    assert rc == 0 and result["benchmark_report"] == str(tmp_path / "report.md")
    assert "[report.md](report.md)" in (tmp_path / "summary.md").read_text()


def test_check_mode_writes_nothing(run, tmp_path):
    rc, result = run({"path": str(tmp_path / "run"), "rows": ROWS}, check=True)
    assert rc == 0 and result["files"] == [] and not (tmp_path / "run").exists()
    assert len(result["lines"]) == 4


def test_an_unwritable_place_fails_with_the_lines(run, tmp_path):
    (tmp_path / "file").write_text("")
    rc, result = run({"path": str(tmp_path / "file" / "run"), "rows": ROWS})
    assert rc == 1 and result["msg"].startswith("Could not write the rollout summary into %s" % (tmp_path / "file" / "run"))
    assert result["failed_hosts"] == ["gpu-a02"] and len(result["lines"]) == 4
    assert not os.path.exists(tmp_path / "file" / "run")


def test_a_failure_text_cannot_add_html_or_a_link_to_the_summary(run, tmp_path):
    row = dict(ROWS[1], failure="<img src=x onerror=alert(1)> [fix here](https://example.invalid) *now*")
    rc, result = run({"path": str(tmp_path), "rows": [row]})
    md = (tmp_path / "summary.md").read_text()
    assert rc == 0
    assert "\\<img src=x onerror=alert(1)\\> \\[fix here\\](https://example.invalid) \\*now\\*" in md
    assert "<img" not in md.replace("\\<img", "")


def test_a_locked_rollout_shows_the_lock_and_each_hosts_dependency_diff(tmp_path):
    from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report
    rows = [dict(ROWS[0], lock="3f9a0c2b71de", lock_packages=137, environment_after="same as the lock",
                 dependencies={"counts": "2 changed, 1 added (134 unchanged)",
                               "lines": ["lark 1.2.2 -> 1.3.1", "vllm 0.33.0 -> 0.33.1.dev7+gcb9a7e83f501",
                                         "+ gguf 0.19.0"]}),
            dict(ROWS[1], lock="3f9a0c2b71de", lock_packages=137, environment_after="DIFFERS from the lock",
                 dependencies=None)]
    md = rollout_report.markdown(rows, [["gpu-a01"], ["gpu-a02"]], lock_file=True)
    lines = md.splitlines()
    assert lines[2].split(" | ")[9] == "packages"
    assert lines[4].split(" | ")[9] == "= lock; 2 changed, 1 added"
    assert lines[5].split(" | ")[9] == "DIFFERS from the lock"
    assert ("Fleet lock: [fleet.lock](fleet.lock), 137 packages, fingerprint 3f9a0c2b71de. 1 of 2 hosts hold exactly "
            "it, each package pristine by its RECORD; not: gpu-a02.") in lines
    at = lines.index("## Dependencies: what each updated host's environment changed")
    assert lines[at + 2:at + 7] == ["**gpu-a01** (2 changed, 1 added (134 unchanged)):", "",
                                    "- `lark 1.2.2 -> 1.3.1`", "- `vllm 0.33.0 -> 0.33.1.dev7+gcb9a7e83f501`",
                                    "- `+ gguf 0.19.0`"]
    assert "packages: 2 changed, 1 added, = lock 3f9a0c2b71de" in rollout_report.host_line(rows[0])


def test_each_failed_or_skipped_host_gets_the_sentence_that_fails_it(run, tmp_path):
    rows = ROWS + [{"host": "gpu-a03", "status": "SKIPPED", "skipped": "GPUs not healthy: GPU 3 has 12 retired pages."},
                   {"host": "gpu-a04", "status": "FAILED, not rolled back", "failure": ""}]
    rc, result = run({"path": str(tmp_path), "rows": rows})
    summary = str(tmp_path / "summary.md")
    assert rc == 0 and result["failed_hosts"] == ["gpu-a02", "gpu-a04"] and result["skipped_hosts"] == ["gpu-a03"]
    assert result["host_failures"] == {
        # (a failed host's failure is not said again: the run printed it where the host failed, summary.md has it)
        "gpu-a02": "gpu-a02 failed and was rolled back: why is printed above, where it failed, and in %s." % summary,
        "gpu-a03": "gpu-a03 was skipped, not rolled: why is printed in its plan above, and in %s." % summary,
        "gpu-a04": "gpu-a04 failed: why is printed above, where it failed, and in %s." % summary}
    # the lines say what became of each host; the failure's words are in summary.md only
    assert result["lines"][3] == "gpu-a02: FAILED, rolled back, vllm 0.32.0"
    assert result["lines"][4] == "gpu-a03: SKIPPED"
    assert "not ready" not in " ".join(result["lines"]) and "retired pages" not in " ".join(result["lines"])
    assert "**gpu-a02**: cutover: not ready \\| within 60 s\\n\\[Service\\]" in (tmp_path / "summary.md").read_text()
