# SPDX-License-Identifier: GPL-3.0-or-later
"""What the rollout scenario left: the reports of the audit before, the
failed first rollout, the converging rollout and the audit after, and the
hosts themselves."""

import glob
import json
import os
import re

import pytest
import testinfra

REPORTS = os.environ.get("GPUFLEET_SCENARIO_REPORTS", "")


def report(kind, name, which=-1):
    """The report of a run (reports sort by time: 0 the first, -1 the last)."""
    found = sorted(glob.glob(os.path.join(REPORTS, kind, "*", name)))
    assert found, "no %s report %s under %s" % (kind, name, REPORTS)
    with open(found[which]) as handle:
        return json.load(handle)


def rows(data):
    return {row["host"]: row for row in data["hosts"]}


def host(name):
    return testinfra.get_host("podman://" + name)


def test_audit_before_reports_drift_on_every_host():
    before = rows(report("before", "drift.json"))
    assert set(before) == {"rollout-1", "rollout-2", "rollout-3"}
    for row in before.values():
        assert {"integrity", "config", "dumps"} <= set(row["drift"]), row
        assert row["dumps"] == 35
        assert not row["pristine"]


def test_first_rollout_canary_passed_failing_host_rolled_back_next_untouched():
    first = rows(report("first", "summary.json"))
    assert first["rollout-1"]["status"] == "updated"
    assert first["rollout-1"]["pristine"] is True
    assert first["rollout-1"]["artifacts_removed"] == 35
    assert first["rollout-2"]["status"] == "FAILED, rolled back"
    assert "ready" in first["rollout-2"]["failure"].lower() or "health" in first["rollout-2"]["failure"].lower()
    assert first["rollout-3"]["status"] == "untouched"
    # the plan (every host at once, check mode) said what rollout-3 needs; its
    # dumps and config keys are not reported as removed
    assert any(re.match(r"build 0\.33\.1\.dev7\+g[0-9a-f]{12} \(from 0\.33\.0\)\Z", need)
               for need in first["rollout-3"]["needed"]), first["rollout-3"]["needed"]
    assert "dumps (35)" in first["rollout-3"]["needed"]
    assert first["rollout-3"]["artifacts_removed"] is None
    assert first["rollout-3"]["config_keys_removed"] is None
    # the canary's downtime, measured on the host by the cutover: the stop, then the load
    assert first["rollout-1"]["load_s"] >= 5
    assert first["rollout-1"]["load_s"] <= first["rollout-1"]["downtime_s"] < first["rollout-1"]["load_s"] + 10


def test_first_rollout_batches_followed_the_inventory_not_the_plan():
    # prepare.yml made rollout-2 (the host that fails) finish the plan first
    # (one fork, pattern "rollout-2:rollout-1:rollout-3"): the canary is still
    # the first listed host, rollout-2 comes next and fails, rollout-3 waits
    with open(os.path.join(REPORTS, "first", "ansible-playbook.log")) as handle:
        log = re.sub(r"\x1b\[[0-9;]*m", "", handle.read())  # run without colours; in case
    # the hosts in the order the plan's last task answered for them
    plan_task = log.split("TASK [Say what this host needs]", 1)[1].split("TASK [", 1)[0]
    plan_order = re.findall(r"^ok: \[([^\]]+)\]", plan_task, re.M)
    assert sorted(plan_order) == ["rollout-1", "rollout-2", "rollout-3"], log[-4000:]
    assert plan_order[0] == "rollout-2", log[-4000:]
    assert report("first", "summary.json")["batches"] == [["rollout-1"], ["rollout-2"]]
    # a failed host is reported, not warned about; nothing else warns either
    assert "[WARNING]" not in log, [line for line in log.splitlines() if "WARNING" in line]


def test_failing_host_served_its_previous_build_after_the_first_rollout():
    node = host("rollout-2")
    # the rollback pointed the link back at the adopted venv of the operators
    assert node.file("/var/tmp/rollout-after-first-current").content_string.strip() == "/root/ml-env"
    assert node.file("/var/tmp/rollout-after-first-version").content_string.strip() == "0.33.0"


def test_host_after_the_failure_was_untouched_by_the_first_rollout():
    node = host("rollout-3")
    before = node.file("/var/tmp/rollout-before-pid").content_string.strip()
    after = node.file("/var/tmp/rollout-after-first-pid").content_string.strip()
    assert before == after and before != "0"
    assert node.file("/var/tmp/rollout-after-first-current").content_string.strip() == "none"


def test_converged_rollout_updated_the_rest():
    converge = rows(report("converge", "summary.json", 0))
    assert converge["rollout-1"]["status"] == "unchanged"
    assert converge["rollout-1"]["needed"] == []  # converged: verified in the plan, never waited for a batch
    assert converge["rollout-2"]["status"] == "updated"
    assert converge["rollout-3"]["status"] == "updated"
    # rollout-1 needed nothing: the batches are the other two, in inventory order
    assert report("converge", "summary.json", 0)["batches"] == [["rollout-2"], ["rollout-3"]]


def test_second_rollout_on_the_converged_fleet_restarted_nothing():
    # molecule's idempotence step ran converge.yml again: 0 changed, and the
    # summary of that run says no host restarted
    runs = sorted(glob.glob(os.path.join(REPORTS, "converge", "*", "summary.json")))
    assert len(runs) == 2, runs
    assert report("converge", "summary.json", 1)["batches"] == []
    second = rows(report("converge", "summary.json", 1))
    for name, row in second.items():
        assert row["status"] == "unchanged", (name, row)
        assert row["downtime_s"] is None, (name, row)


def test_audit_before_shows_what_drifted_from_the_mirror_wheel():
    # fleet_wheel_dirs is the mirror (/srv/wheelhouse): each host's edited deepseek_v2.py is diffed against it
    runs = sorted(glob.glob(os.path.join(REPORTS, "before", "audit-*")))
    assert runs, "no audit report under %s/before" % REPORTS
    rel = "vllm/model_executor/models/deepseek_v2.py"
    with open(os.path.join(runs[-1], "drift.md")) as handle:
        markdown = handle.read()
    for name in ("rollout-1", "rollout-2", "rollout-3"):
        with open(os.path.join(runs[-1], "diffs", name, rel + ".diff")) as handle:
            diff = handle.read()
        assert diff.startswith("--- wheel/%s\n+++ installed/%s\n" % (rel, rel)), diff[:300]
        assert "\n+            _t.save(q.detach().cpu()" in diff and "\n+        # embed_debug: " in diff
        assert "### %s: what changed in its vLLM files against `vllm-" % name in markdown
        assert "[diffs/{0}/{1}.diff](<diffs/{0}/{1}.diff>)".format(name, rel) in markdown
    assert "```diff\n@@ " in markdown


def test_first_rollout_plan_wrote_the_diffs_and_the_summary_links_them():
    runs = sorted(glob.glob(os.path.join(REPORTS, "first", "rollout-*")))
    assert len(runs) == 1, runs
    rel = "vllm/model_executor/models/deepseek_v2.py"
    with open(os.path.join(runs[0], "summary.md")) as handle:
        markdown = handle.read()
    for name in ("rollout-1", "rollout-2", "rollout-3"):
        with open(os.path.join(runs[0], "diffs", name, rel + ".diff")) as handle:
            assert "\n+            _t.save(q.detach().cpu()" in handle.read()
        assert "**%s**: what drifted before the rollout" % name in markdown
        assert "[{1}](<diffs/{0}/{1}.diff>)".format(name, rel) in markdown


def test_audit_after_reports_no_drift():
    after = rows(report("after", "drift.json"))
    for name, row in after.items():
        assert row["drift"] == [], (name, row)
        assert row["pristine"] is True


@pytest.mark.parametrize("name", ["rollout-1", "rollout-2", "rollout-3"])
def test_hosts_serve_the_staged_pristine_build(name):
    node = host(name)
    link = node.file("/opt/vllm/current")
    assert link.is_symlink and re.match(r"/opt/vllm/envs/vllm-0\.33\.1\.dev7_g[0-9a-f]{12}-", link.linked_to)
    assert node.service("vllm-kimi-k25").is_running
    assert not node.file("/tmp/embed_debug_tp0.pt").exists
    config = node.file("/shared/kimi-k2.5-nvfp4/config.json").content_string
    assert "kv_cache_scheme" not in config


def test_first_rollout_benchmarked_the_canary_next_to_the_summary():
    first = rows(report("first", "summary.json"))
    canary = first["rollout-1"]
    # the real `vllm bench serve` against the stand-in: 82 tok/s per stream,
    # 2,276 tok/s in all (tests/sim/inventory: levels 1 and 64)
    assert canary["benchmark"] == "ok", canary
    assert 0.9 * 82 <= canary["single_stream_tok_s"] <= 1.03 * 82
    assert 0.9 * 2276 <= canary["peak_tok_s"] <= 1.03 * 2276
    # rollout-2 failed before its benchmark, rollout-3 was never reached
    assert first["rollout-2"]["benchmark"] is None
    assert first["rollout-3"]["benchmark"] is None
    runs = sorted(glob.glob(os.path.join(REPORTS, "first", "rollout-*")))
    assert len(runs) == 1, runs
    assert sorted(os.listdir(os.path.join(runs[0], "rollout-1"))) == ["c1.json", "c64.json", "summary.json"]
    assert not os.path.exists(os.path.join(runs[0], "rollout-2"))
    with open(os.path.join(runs[0], "report.md")) as handle:
        assert "rollout-1" in handle.read()
    assert report("first", "summary.json")["benchmark_report"] == os.path.join(runs[0], "report.md")
    with open(os.path.join(runs[0], "summary.md")) as handle:
        markdown = handle.read()
    assert "[report.md](report.md)" in markdown
    # the benchmark column: the canary's status, a dash where no benchmark ran; the answer quality column: the
    # canary's gate against the simulated fleet's reference
    lines = markdown.splitlines()
    header = [cell.strip() for cell in next(line for line in lines if line.startswith("| host")).strip("|").split("|")]
    cells = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines
             if line.startswith("| rollout-")]
    assert [row[header.index("benchmark")] for row in cells] == ["ok", "-", "-"], (header, cells)
    assert cells[0][header.index("answer quality")].startswith("passed: 8/8 answers, NLL "), (header, cells)


def test_limited_audit_reports_the_limited_host_only():
    limited = report("limited", "drift.json")
    assert [row["host"] for row in limited["hosts"]] == ["rollout-2"]
    assert limited["hosts"][0]["drift"] == ["dumps"]
    assert limited["not_audited"] == []


def test_the_audit_shows_each_hosts_model_fingerprint_and_names_each_model_fault_on_its_host():
    after = rows(report("after", "drift.json"))
    recorded = after["rollout-1"]["model"][0]["fingerprint"]
    assert {row["model"][0]["fingerprint"] for row in after.values()} == {recorded}
    assert recorded.startswith("sha256:")
    damaged = rows(report("models", "drift.json"))
    whole = damaged["rollout-1"]["model"][0]
    assert whole["fingerprint"] == recorded and whole["fleet"] == "= recorded" and whole["reference_from"] == "recorded"
    assert "model" not in damaged["rollout-1"]["drift"]
    # another tokenizer revision loads: whole, and other bytes than the record, with the file that differs
    tokenizer = damaged["rollout-2"]["model"][0]
    assert tokenizer["ok"] is True and tokenizer["finding"] == "differs" and "model" in damaged["rollout-2"]["drift"]
    assert tokenizer["fingerprint"].startswith("sha256:") and tokenizer["fingerprint"] != recorded
    assert "tokenizer.json (other content)" in tokenizer["differs"], tokenizer
    broken = damaged["rollout-3"]["model"][0]
    assert broken["finding"] == "broken" and "model" in damaged["rollout-3"]["drift"]
    kinds = {(problem["file"], problem["kind"]) for problem in broken["problems"]}
    assert {("model-00004-of-00004.safetensors", "truncated"), ("model-00001-of-00004.safetensors", "lfs_pointer"),
            ("model-00002-of-00004.safetensors", "missing")} <= kinds, broken["problems"]
    found = sorted(glob.glob(os.path.join(REPORTS, "models", "*", "drift.md")))
    with open(found[-1]) as handle:
        markdown = handle.read()
    section = markdown.split("## Model directories", 1)[1]
    assert "reference `%s` (recorded in fleet_model_fingerprints)" % recorded in section
    assert "tokenizer.json (other content)" in section and "model-00002-of-00004.safetensors" in section


# --- one environment for the whole fleet (the lock) -------------------------------------------------------------

def lock_of(kind):
    found = sorted(glob.glob(os.path.join(REPORTS, kind, "rollout-*", "fleet.lock")))
    assert found, "no fleet.lock under %s/%s" % (REPORTS, kind)
    with open(found[0]) as handle:
        return handle.read()


def lock_header(text, key):
    return re.search(r"^# %s: (.*)$" % key, text, re.M).group(1)


def lock_pins(text):
    """The lock's pins with their hashes: its lines between the header and the digest line."""
    return [line for line in text.splitlines() if not line.startswith("# ")]


def test_the_first_rollout_kept_its_lock_and_the_converge_resolved_the_same_one():
    first, converge = lock_of("first"), lock_of("converge")
    # resolved again from the same index (before the newer build was published): the same pins and hashes
    assert lock_pins(converge) == lock_pins(first)
    assert lock_header(converge, "fingerprint") == lock_header(first, "fingerprint")
    assert lock_header(first, "package").startswith("vllm==0.33.1.dev7+g")
    assert lock_header(first, "python-version") == "3.11"
    assert lock_header(first, "python-platform") == "x86_64-manylinux_2_36"
    assert "torch" in lock_header(first, "excluded")
    pins = re.findall(r"^([a-z0-9-]+)==(\S+) \\$", first, re.M)
    assert ("lark", "1.3.1") in pins and ("gguf", "0.19.0") in pins and len(pins) > 100
    # every pin carries the sha256 of its wheel (the first block is the header)
    blocks = re.split(r"\n(?=[a-z0-9-]+==)", first)[1:]
    assert len(blocks) == len(pins) and all("--hash=sha256:" in block for block in blocks)
    assert re.search(r"^# digest: sha256:[0-9a-f]{64}$", first, re.M)


def test_a_newer_build_published_between_the_batches_changed_nothing():
    # converge.yml's watcher published vLLM 0.33.1.dev8 once rollout-2's batch switched its link
    with open(os.path.join(REPORTS, "newer-published.json")) as handle:
        published = json.load(handle)
    assert published["wheel"].startswith("vllm-0.33.1.dev8+g") and published["container"] == "rollout-2"
    assert published["after"] != published["before"] and published["after"].startswith("/opt/vllm/envs/")
    node = host("rollout-3")
    env = node.file("/opt/vllm/current").linked_to
    staged_lock = node.file(env + "/gpufleet.lock")
    # rollout-3's batch staged after the publication, from the lock resolved before it
    assert staged_lock.mtime.timestamp() > published["published_at"]
    assert lock_pins(staged_lock.content_string) == lock_pins(lock_of("converge"))
    assert "0.33.1.dev8" not in staged_lock.content_string
    assert node.run(env + "/bin/python -c 'import importlib.metadata as m; print(m.version(\"vllm\"))'").stdout.strip() \
        == lock_header(lock_of("converge"), "package").split("==")[1]


def test_a_tampered_wheel_and_a_lock_for_another_python_stopped_nothing():
    # prepare.yml ran both against rollout-3 (rc 2, each saying why: checked there); its process and link are those
    # from before the first rollout
    node = host("rollout-3")
    before = node.file("/var/tmp/rollout-before-pid").content_string.strip()
    assert node.file("/var/tmp/rollout-after-bad-input").content_string.split() == [before, "none"]
    tampered = rows(report("tampered", "summary.json"))["rollout-3"]
    assert tampered["status"] != "updated" and tampered["downtime_s"] is None, tampered


def test_the_summary_shows_each_updated_hosts_dependency_diff():
    first = rows(report("first", "summary.json"))
    deps = first["rollout-1"]["dependencies"]
    assert deps["lines"] == ["lark 1.2.2 -> 1.3.1", "vllm 0.33.0 -> %s" % first["rollout-1"]["build_after"],
                             "+ gguf 0.19.0"]
    assert deps["counts"].startswith("2 changed, 1 added (")
    assert first["rollout-1"]["environment_after"] == "same as the lock"
    assert first["rollout-2"]["dependencies"] is None and first["rollout-3"]["dependencies"] is None
    runs = sorted(glob.glob(os.path.join(REPORTS, "first", "rollout-*")))
    with open(os.path.join(runs[0], "summary.md")) as handle:
        markdown = handle.read()
    assert "| = lock; 2 changed, 1 added |" in markdown
    assert "Fleet lock: [fleet.lock](fleet.lock), " in markdown
    assert "- `lark 1.2.2 -> 1.3.1`\n" in markdown


def test_every_host_ends_on_the_locks_fingerprint():
    lock_fingerprint = lock_header(lock_of("first"), "fingerprint").split(":", 1)[1][:12]
    converge = rows(report("converge", "summary.json", 0))
    for name in ("rollout-2", "rollout-3"):
        assert converge[name]["environment_after"] == "same as the lock", converge[name]
        assert converge[name]["lock"] == lock_fingerprint
    after = rows(report("after", "drift.json"))
    for name, row in after.items():
        # side_effect.yml audits with audit_lock: the first run's lock
        assert row["fingerprint"] == lock_fingerprint, (name, row)
        assert row["lock"] == "same" and row["fleet"] == "same as all 3 hosts read", (name, row)
        assert row["packages_not_pristine"] == []


def test_audit_before_shows_the_fleet_on_yesterdays_lock():
    before = rows(report("before", "drift.json"))
    prints = set(row["fingerprint"] for row in before.values())
    # every dirty host holds the same older set (vLLM 0.33.0 and its locked dependencies); only vLLM's files were edited
    assert len(prints) == 1 and all(len(p) == 12 for p in prints)
    for row in before.values():
        assert row["fleet"] == "same as all 3 hosts read" and row["packages"] > 100
        assert "packages" not in row["drift"]


def test_the_audit_between_the_rollouts_lists_what_the_lock_changes_on_each_host():
    midway = rows(report("midway", "drift.json"))
    build = rows(report("first", "summary.json"))["rollout-1"]["build_after"]
    assert midway["rollout-1"]["dependencies"] is None and midway["rollout-1"]["lock"] == "same"
    for name in ("rollout-2", "rollout-3"):
        deps = midway[name]["dependencies"]
        assert deps["reference"] == "lock" and deps["against"].startswith("first.lock (fingerprint ")
        assert deps["lines"] == ["lark 1.2.2 -> 1.3.1", "vllm 0.33.0 -> %s" % build, "+ gguf 0.19.0"], deps
        assert "packages" in midway[name]["drift"]
    found = sorted(glob.glob(os.path.join(REPORTS, "midway", "*", "drift.md")))
    with open(found[-1]) as handle:
        markdown = handle.read()
    section = markdown.split("## Dependencies: how each host's packages differ", 1)[1].split("\n## ", 1)[0]
    assert "**rollout-1**" not in section
    for name in ("rollout-2", "rollout-3"):
        block = section.split("**%s**" % name, 1)[1].split("\n\n**", 1)[0]
        assert "- `lark 1.2.2 -> 1.3.1`\n" in block and "- `+ gguf 0.19.0`" in block


def traffic(name):
    with open(os.path.join(REPORTS, "traffic", name + ".json")) as handle:
        return json.load(handle)


@pytest.mark.parametrize("name", ["first", "converge", "faults", "faults2", "faults3"])
def test_clients_through_the_balancer_saw_no_failed_request(name):
    seen = traffic(name)
    assert seen["failed"] == 0 and seen["ok"] == seen["sent"] and seen["ok"] >= 20, seen
    assert 0 < seen["latency_s"]["p50"] <= seen["latency_s"]["p99"], seen


def test_the_same_traffic_without_the_drain_saw_failures():
    seen = traffic("no-drain")
    assert seen["failed"] > 0, seen
    summary = report("no-drain", "summary.json")
    assert rows(summary)["rollout-1"]["balancer"] == "none"
    assert rows(summary)["rollout-1"]["drain_s"] is None


def test_each_restarted_host_was_drained_and_put_back_once_proven():
    first = rows(report("first", "summary.json"))
    converge = rows(report("converge", "summary.json", 0))
    for row in (first["rollout-1"], first["rollout-2"], converge["rollout-2"], converge["rollout-3"]):
        assert row["balancer"] == "haproxy", row
        assert row["drain_s"] is not None and row["inflight_at_stop"] == 0, row
        assert row["back_in_rotation"] is True, row
    # out of rotation from the drain to the health check's "up": at least the stop and the 5 s load
    assert first["rollout-1"]["out_of_rotation_s"] > first["rollout-1"]["load_s"], first["rollout-1"]
    # the host that failed its readiness gate went back once its previous build served again
    assert first["rollout-2"]["status"] == "FAILED, rolled back"
    assert first["rollout-2"]["out_of_rotation_s"] is not None
    # hosts that did not restart never left the rotation
    assert first["rollout-3"]["drain_s"] is None and converge["rollout-1"]["drain_s"] is None


def test_faults_after_the_stop_each_rolled_back_and_back_in_rotation():
    faults = rows(report("faults", "summary.json"))
    assert report("faults", "summary.json")["batches"] == [["rollout-1"], ["rollout-2"], ["rollout-3"]]
    for name, row in faults.items():
        assert row["status"] == "FAILED, rolled back", (name, row)
        assert row["inflight_at_stop"] == 0 and row["back_in_rotation"] is True, (name, row)
        assert re.match(r"/opt/vllm/envs/vllm-0\.33\.1\.dev7_g[0-9a-f]{12}-", row["serving_env"]), (name, row)
    assert "pristine" in faults["rollout-3"]["failure"].lower() or "modified" in faults["rollout-3"]["failure"].lower(), faults["rollout-3"]
    assert "vram" in faults["rollout-2"]["failure"].lower() or "mib" in faults["rollout-2"]["failure"].lower(), faults["rollout-2"]


def test_faults_in_the_window_and_at_the_gate_each_rolled_back_and_back_in_rotation():
    summary = report("faults2", "summary.json")
    faults = rows(summary)
    assert summary["batches"] == [["rollout-1"], ["rollout-2"], ["rollout-3"]]
    for name, row in faults.items():
        assert row["status"] == "FAILED, rolled back", (name, row)
        assert row["inflight_at_stop"] == 0 and row["back_in_rotation"] is True, (name, row)
        assert re.match(r"/opt/vllm/envs/vllm-0\.33\.1\.dev7_g[0-9a-f]{12}-", row["serving_env"]), (name, row)
    # the old build's VRAM (vLLM's 0.9 x 97,887 MiB), held by the driver 30 s after its stop: the cutover's 8 s
    # wait failed
    assert "did not get free after the stop" in faults["rollout-1"]["failure"], faults["rollout-1"]
    assert "GPUs 0-7: memory used expected at most 1024 MiB, found 88098 MiB with no compute process listed" in (
        faults["rollout-1"]["failure"]), faults["rollout-1"]
    # a host rolled back names the build it tried beside the one it serves
    for name, row in faults.items():
        assert row["build_after"] == row["build_before"], (name, row)
        assert row["build_tried"].startswith("0.33.1.dev8+g"), (name, row)
    # a real directory where the previous link was: the link switch failed, the link stayed on the old build
    assert "Cannot point the previous link /opt/vllm/previous at" in faults["rollout-2"]["failure"], faults["rollout-2"]
    # 20 tok/s against the baseline's 82: the benchmark gate (policy fail) failed the new build
    assert "Benchmark regression on rollout-3" in faults["rollout-3"]["failure"], faults["rollout-3"]
    measured = re.search(r"single stream: (\d+\.\d) tok/s is \d+\.\d% below the baseline 82\.0 tok/s",
                         faults["rollout-3"]["failure"])
    assert measured and 15 <= float(measured.group(1)) <= 25, faults["rollout-3"]  # the slow build's 20 tok/s


def test_a_build_that_answers_incoherently_failed_the_quality_gate_and_was_rolled_back():
    summary = report("faults3", "summary.json")
    row = rows(summary)["rollout-2"]
    assert summary["batches"] == [["rollout-2"]]
    assert row["status"] == "FAILED, rolled back", row
    assert row["inflight_at_stop"] == 0 and row["back_in_rotation"] is True, row
    # ready, pristine and fast, and still caught: the answers and the passage's NLL against the reference
    assert "Quality of kimi-k2.5 (nvfp4) at http://127.0.0.1:8000 failed: the greedy answers match the reference " \
        "for" in row["failure"], row
    assert row["quality"]["verdict"] == "failed" and row["quality"]["answers"]["matched"] <= 1, row["quality"]
    assert row["quality"]["passage"]["relative_difference"] > 0.5, row["quality"]
    assert row["build_after"] == row["build_before"] and row["build_tried"].startswith("0.33.1.dev8+g"), row
    # the hosts the converging rollout gated passed against the same reference
    for name, gated in rows(report("converge", "summary.json", 0)).items():
        if gated.get("quality"):
            assert gated["quality"]["verdict"] == "passed", (name, gated["quality"])
