# SPDX-License-Identifier: GPL-3.0-or-later
"""A host's failure on the terminal once, in words; a check-mode change reads "would change".

The rollout's own pieces, through the phases callback: the benchmark role's
gate task (taken from roles/benchmark/tasks/run.yml) fails on one host inside
the rollout's block, the rescue is playbooks/tasks/rollback_host.yml, and the
Summary play is the one of playbooks/rollout.yml (the summary module, its
lines, the failure of each failed host). The gate's sentence must reach the
terminal once, where the gate failed, starting with what failed, never after
a task's name.
"""

import os
import re

import yaml

from test_phases import REPO, playbook_run, write  # pylint: disable=import-error

HOSTS = ("gpu-node-1", "gpu-node-2", "gpu-node-3")
FAILING = ("gpu-node-2", "gpu-node-3")
GATE_TASK = "Report what was measured, failing on a failed sweep or a regression"
VERDICT = ("single stream: 20.1 tok/s is 75.5% below the baseline 82.0 tok/s (the limit is 10%); peak: 2276.0 tok/s, "
           "within 10% of the baseline")


def _gate_task():
    with open(os.path.join(REPO, "roles", "benchmark", "tasks", "run.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    return next(task for task in tasks if task.get("name") == GATE_TASK)


def _summary_play():
    with open(os.path.join(REPO, "playbooks", "rollout.yml"), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    return next(play for play in plays if play.get("name") == "Summary")


def _rollout_play(reports):
    return {
        "name": "Roll out, batch by batch",
        "hosts": "vllm_fleet",
        "gather_facts": False,
        "serial": 1,
        "tasks": [
            {"name": "Start the notes afresh (as the pre-flight does)",
             "ansible.builtin.set_fact": {
                 "gpufleet_report_dir": reports, "rollout_needs": [], "rollout_batch": [], "rollout_cutover": {},
                 "rollout_reached": {}, "rollout_integrity": {}, "rollout_failed": False, "rollout_failure": "",
                 "rollout_skipped": ""}},
            {"name": "Note the batch this host goes in",
             "ansible.builtin.set_fact": {"rollout_batch": "{{ ansible_play_batch }}"}},
            {"name": "Roll out this host",
             "block": [{"name": "Benchmark", "ansible.builtin.include_role": {"name": "benchmark"}}],
             "rescue": [{"name": "Roll this host back onto the build it served before",
                         "ansible.builtin.import_tasks": os.path.join(REPO, "playbooks", "tasks", "rollback_host.yml")}]},
        ],
    }


# what the benchmark role holds when its gate runs (a regression on gpu-node-2 and gpu-node-3, none on gpu-node-1)
GATE_VARS = """---
__benchmark_check_mode: false
benchmark_mode: gate
benchmark_on_regression: fail
benchmark_model: kimi-k2.5
benchmark_run: 20261207T100000Z
benchmark_report: false
benchmark_local_dir: "{reports}/benchmark/{{{{ inventory_hostname }}}}"
benchmark_report_result: {{}}
benchmark_result:
  status: "{{{{ 'regressed' if inventory_hostname != 'gpu-node-1' else 'ok' }}}}"
  quantization: int4
  reused: false
  single_stream_tok_s: "{{{{ 20.1 if inventory_hostname != 'gpu-node-1' else 82.3 }}}}"
  peak_tok_s: 2276.0
  peak_concurrency: 64
  verdict:
    regressed: "{{{{ inventory_hostname != 'gpu-node-1' }}}}"
    message: "{{{{ '{verdict}' if inventory_hostname != 'gpu-node-1' else 'within 10% of the baselines' }}}}"
"""


def test_a_failed_gate_is_printed_once_starting_with_what_failed(tmp_path):
    tmp = str(tmp_path)
    reports = os.path.join(tmp, "reports", "rollout-20261207T100000Z")
    write(os.path.join(tmp, "roles", "benchmark", "tasks", "main.yml"), yaml.safe_dump([_gate_task()], sort_keys=False))
    write(os.path.join(tmp, "roles", "benchmark", "vars", "main.yml"), GATE_VARS.format(reports=reports, verdict=VERDICT))
    playbook = yaml.safe_dump([_rollout_play(reports), _summary_play()], sort_keys=False)
    rc, out, err = playbook_run(tmp, playbook, hosts=HOSTS, group="vllm_fleet")
    assert rc != 0, out + err
    assert os.path.isfile(os.path.join(reports, "summary.md")), out + err
    lines = out.splitlines()

    # once per host, at the gate, with the block's rescue named; the message's first words say what failed
    assert out.count(VERDICT) == len(FAILING), out
    for host in FAILING:
        head = 'FAILED (rescued by "Roll out this host") %s | benchmark | %s' % (host, GATE_TASK)
        assert head in lines, out
        assert lines[lines.index(head) + 1].startswith("  msg: Benchmark regression on %s: %s" % (host, VERDICT)), out
    # a task's name is never a message's prefix
    assert "%s:" % GATE_TASK not in out, out
    assert "Roll out this host:" not in out, out

    # the host's line after its rollback, the summary's line and the run's failure of the host: what happened
    # and where to read why, not the sentence again
    # (nothing was stopped here, so nothing was rolled back: the old build still serves)
    for host in FAILING:
        assert "%s: FAILED" % host in lines, out
        assert "  %s: FAILED" % host in lines, out
    # (a shown message is printed in its own words, after no task's name; the summary without a host's name)
    assert "Say what happened to this host" not in out and "Show the summary" not in out, out
    assert lines[lines.index("PLAY Summary") + 1] == "  report: %s" % os.path.join(reports, "summary.md"), out
    for host in FAILING:
        fail = "FAILED %s | Summary | Fail the run for each host that failed or was skipped" % host
        assert fail in lines, out
        assert lines[lines.index(fail) + 1] == "  msg: %s failed: why is printed above, where it failed, and in %s." % (
            host, os.path.join(reports, "summary.md")), out
    assert not any(line.startswith("FAILED gpu-node-1") for line in lines), out
    # the summary file keeps the sentence in full, once per failed host
    with open(os.path.join(reports, "summary.md"), encoding="utf-8") as handle:
        summary = handle.read()
    assert summary.count(VERDICT) == len(FAILING), summary
    for host in FAILING:
        assert "**%s**: Benchmark regression on %s: %s" % (host, host, VERDICT) in summary, summary
    assert "(failed task: %s)" % GATE_TASK in summary, summary


CHECK_PLAY = """
- name: Pre-flight and plan (nothing changes here)
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Render the unit in check mode (does it change, does it run)
      ansible.builtin.include_role:
        name: service
        tasks_from: unit
        apply: {{check_mode: true}}

- name: Roll out
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Render the unit
      ansible.builtin.import_role:
        name: service
        tasks_from: unit
    - name: Write the report on the control node (a new file each run, also in check mode)
      ansible.builtin.copy:
        content: "report\\n"
        dest: "{tmp}/report-{{{{ inventory_hostname }}}}.md"
        mode: "0644"
      check_mode: false
"""

UNIT_TASKS = """---
- name: Render the unit file
  ansible.builtin.copy:
    content: "[Service]\\nExecStart=/opt/vllm/current/bin/vllm serve\\n"
    dest: "{tmp}/unit-{{{{ inventory_hostname }}}}.service"
    mode: "0644"
"""


def _check_run(tmp_path, args=()):
    tmp = str(tmp_path)
    write(os.path.join(tmp, "roles", "service", "tasks", "unit.yml"), UNIT_TASKS.format(tmp=tmp))
    rc, out, err = playbook_run(tmp, CHECK_PLAY.format(tmp=tmp), hosts=HOSTS, args=args)
    assert rc == 0, out + err
    return tmp, out, out.splitlines()


def _phase(lines, host, phase):
    found = [line for line in lines if re.match(r"^  %s +%s  " % (re.escape(host), re.escape(phase)), line)]
    assert len(found) == 1, lines
    return re.split(r"\s{2,}", found[0].strip())[2]


def _recap(lines, host):
    at = next(i for i, line in enumerate(lines) if line.startswith("RECAP ("))
    return next(line for line in lines[at:] if line.startswith("  %s " % host))


def test_a_change_in_check_mode_reads_would_change(tmp_path):
    tmp, out, lines = _check_run(tmp_path)
    # the pre-flight's render (check_mode through the include's apply) changed nothing: it would change the unit;
    # the rollout's render changed it
    for host in HOSTS:
        service = [line for line in lines if re.match(r"^  %s +service  " % host, line)]
        assert len(service) == 2, out
        assert re.split(r"\s{2,}", service[0].strip())[2] == "would change 1", out
        assert re.split(r"\s{2,}", service[1].strip())[2] == "changed 1", out
        assert _phase(lines, host, "Roll out") == "changed 1", out
        assert re.match(r"^  %s +ok +ok=\d+  changed=2  would change=1$" % host, _recap(lines, host)), out
        assert os.path.isfile(os.path.join(tmp, "unit-%s.service" % host))


def test_a_check_run_reads_would_change_and_changes_only_what_check_mode_false_writes(tmp_path):
    tmp, out, lines = _check_run(tmp_path, args=("--check",))
    assert "PLAY Roll out [check mode]" in lines, out
    for host in HOSTS:
        service = [line for line in lines if re.match(r"^  %s +service  " % host, line)]
        assert [re.split(r"\s{2,}", line.strip())[2] for line in service] == ["would change 1", "would change 1"], out
        # the report, written with check_mode: false, did change
        assert _phase(lines, host, "Roll out") == "changed 1", out
        assert re.match(r"^  %s +ok +ok=\d+  changed=1  would change=2$" % host, _recap(lines, host)), out
        assert not os.path.exists(os.path.join(tmp, "unit-%s.service" % host))
    assert " changed 1 " not in " ".join(line for line in lines if " service " in line), out
