# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpufleet.vllm.phases stdout callback, through real ansible-playbook runs.

A small fleet of three local hosts runs two roles and the play's own tasks
(about 40 tasks per host): the terminal must show one line per host and
phase, the warnings, failures (rescued or not) and unreachable hosts in
full, the results a task asks to show, a recap line per host, and where the
full log is; the log itself holds ansible-core's default output of every
task and moves to the report directory that a task names.
"""

import glob
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
HOSTS = ("gpu-node-1", "gpu-node-2", "gpu-node-3")

# a module that warns and deprecates, as a module of the collection would
WARNER = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={})
    module.warn("the staged build is 3 nightlies older than the index's newest")
    module.deprecate("option served_name is renamed served_model_name", version="2.0.0", collection_name="gpufleet.vllm")
    module.exit_json(changed=False)


main()
'''

STAGE_TASKS = "".join(
    "- name: Stage step {i}\n  ansible.builtin.debug:\n    msg: stage {i}\n  changed_when: {changed}\n".format(
        i=i, changed="true" if i < 3 else "false")
    for i in range(15))

SERVE_TASKS = "".join(
    "- name: Serve step {i}\n  ansible.builtin.set_fact:\n    serve_step: {i}\n".format(i=i) for i in range(14)) + """
- name: Check the server's warnings
  warner:
- name: Start and wait until ready
  block:
    - name: Wait for the health endpoint
      ansible.builtin.command: /bin/sh -c "echo probing; echo 'connection refused on 127.0.0.1:8000' >&2; exit 7"
      changed_when: false
      when: inventory_hostname == 'gpu-node-2'
  rescue:
    - name: Put the previous build back
      ansible.builtin.debug:
        msg: rolled back
"""

PLAYBOOK = """
- name: Pre-flight (every host at once)
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Fix the run's report directory once
      ansible.builtin.set_fact:
        gpufleet_report_dir: "{reports}"
      run_once: true
    - name: Read {{{{ gpufleet_unset_setting }}}}
      ansible.builtin.debug:
        msg: ansible-core warns about this task's name
      when: inventory_hostname == 'gpu-node-1'
    - name: Check the inventory
      ansible.builtin.debug:
        msg: "{{{{ item }}}}"
      loop: [1]
    - name: Stage
      ansible.builtin.include_role:
        name: stage
    - name: Serve
      ansible.builtin.import_role:
        name: serve
    - name: Say what this host needs
      ansible.builtin.debug:
        msg: "plan: {{{{ inventory_hostname }}}} needs build 0.16.0rc2, keys, dumps"
      vars:
        gpufleet_show: true
    - name: Note the batch
      ansible.builtin.debug:
        msg: not shown

- name: Roll out
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Stop the old build
      ansible.builtin.fail:
        msg: "the service did not stop within 30 s\\nvllm-kimi-k25.service is still active (deactivating)"
      when: inventory_hostname == 'gpu-node-3'
    - name: After the stop
      ansible.builtin.debug:
        msg: stopped

- name: Reach the spare host
  hosts: spare
  gather_facts: false
  tasks:
    - name: Ping it
      ansible.builtin.ping:
"""

# An ssh "client" that fails as ssh does when the host does not answer (exit 255): no network is used.
NO_SSH = """#!/bin/sh
echo "ssh: connect to host gpu-node-9 port 22: Connection refused" >&2
exit 255
"""


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)


def playbook_run(tmp, playbook, env=None, hosts=HOSTS, group="fleet", args=()):
    """ansible-playbook with the phases callback in tmp: (return code, stdout, stderr)."""
    inventory = "[%s]\n" % group + "".join("%s ansible_connection=local\n" % host for host in hosts)
    inventory += "[spare]\ngpu-node-9 ansible_connection=ssh ansible_ssh_executable=%s\n" % os.path.join(tmp, "no-ssh")
    write(os.path.join(tmp, "hosts"), inventory)
    write(os.path.join(tmp, "no-ssh"), NO_SSH, 0o755)
    write(os.path.join(tmp, "play.yml"), "---\n" + playbook)
    run_env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
                   ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
                   ANSIBLE_STDOUT_CALLBACK="gpufleet.vllm.phases", ANSIBLE_ROLES_PATH=os.path.join(tmp, "roles"),
                   ANSIBLE_DEPRECATION_WARNINGS="1")
    run_env.update(env or {})
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", os.path.join(tmp, "hosts"),
                           "-e", "ansible_python_interpreter=" + sys.executable] + list(args) + [os.path.join(tmp, "play.yml")],
                          cwd=tmp, env=run_env, capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def make_roles(tmp):
    write(os.path.join(tmp, "roles", "stage", "tasks", "main.yml"), "---\n" + STAGE_TASKS)
    write(os.path.join(tmp, "roles", "serve", "tasks", "main.yml"), "---\n" + SERVE_TASKS)
    write(os.path.join(tmp, "roles", "serve", "library", "warner.py"), WARNER)


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("phases"))
    make_roles(tmp)
    reports = os.path.join(tmp, "reports", "rollout-20261204T1800Z")
    rc, out, err = playbook_run(tmp, PLAYBOOK.format(reports=reports))
    return {"tmp": tmp, "rc": rc, "out": out, "err": err, "lines": out.splitlines(), "reports": reports}


def phase_lines(lines, host, phase):
    return [line for line in lines if re.match(r"^  %s +%s +\S" % (re.escape(host), re.escape(phase)), line)]


def test_one_line_per_host_and_phase_with_result_tasks_and_time(fleet_run):
    lines = fleet_run["lines"]
    for host in HOSTS:
        stage = phase_lines(lines, host, "stage")
        assert len(stage) == 1, fleet_run["out"]
        assert re.match(r"^  %s +stage +changed 3 +15 tasks +\d+\.\d s$" % host, stage[0]), stage
        serve = phase_lines(lines, host, "serve")
        assert len(serve) == 1, fleet_run["out"]
        # the play's own tasks before and after the roles: one entry of the phase "Pre-flight" at the play's end,
        # so that they do not cut a role's phase in two
        assert len(phase_lines(lines, host, "Pre-flight")) == 1, fleet_run["out"]
    assert re.match(r"^  gpu-node-1 +serve +ok +16 tasks", phase_lines(lines, "gpu-node-1", "serve")[0])
    assert re.match(r"^  gpu-node-2 +serve +ok \(1 rescued\) +17 tasks", phase_lines(lines, "gpu-node-2", "serve")[0])
    assert re.match(r"^  gpu-node-3 +Roll out +failed +1 task ", phase_lines(lines, "gpu-node-3", "Roll out")[0])
    assert re.match(r"^  gpu-node-1 +Roll out +ok +2 tasks ", phase_lines(lines, "gpu-node-1", "Roll out")[0])
    # the columns line up across hosts
    columns = {line.index(" stage ") for host in HOSTS for line in phase_lines(lines, host, "stage")}
    assert len(columns) == 1
    assert "PLAY Pre-flight (every host at once)" in lines
    assert "PLAY Roll out" in lines


def test_output_stays_small(fleet_run):
    # 3 hosts x about 40 tasks: the default callback prints several hundred lines
    assert len(fleet_run["lines"]) <= 60, fleet_run["out"]
    assert not any(line.startswith("TASK [") for line in fleet_run["lines"])
    assert not any("stage 7" in line for line in fleet_run["lines"])


def test_failure_in_full(fleet_run):
    out = fleet_run["out"]
    assert fleet_run["rc"] != 0
    block = out.split("FAILED gpu-node-3 | Roll out | Stop the old build\n", 1)[1]
    assert block.startswith("  msg:\n    the service did not stop within 30 s\n"
                            "    vllm-kimi-k25.service is still active (deactivating)\n"), block


def test_rescued_failure_shown_and_marked(fleet_run):
    out = fleet_run["out"]
    head = 'FAILED (rescued by "Start and wait until ready") gpu-node-2 | serve | Wait for the health endpoint\n'
    assert head in out, out
    block = out.split(head, 1)[1]
    assert block.startswith("  msg: non-zero return code\n  rc: 7\n  stderr:\n    | connection refused on 127.0.0.1:8000\n"
                            "  stdout:\n    | probing\n"), block
    assert "gpu-node-1 | serve | Wait for the health endpoint" not in out


def test_warnings_and_deprecations_with_host_and_task(fleet_run):
    out = fleet_run["out"]
    for host in HOSTS:
        assert ("[WARNING] %s | serve | Check the server's warnings: the staged build is 3 nightlies older than the index's newest"
                % host) in out, out
        assert "[DEPRECATION WARNING] %s | serve | Check the server's warnings: option served_name is renamed" % host in out


def test_unreachable_in_full(fleet_run):
    out = fleet_run["out"]
    block = out.split("UNREACHABLE gpu-node-9 | Reach the spare host | Ping it\n", 1)[1]
    assert "Connection refused" in block.split("\n", 1)[0], block
    assert re.search(r"^  gpu-node-9 +Reach the spare host +unreachable +1 task ", out, re.M), out


def test_shown_results_in_full(fleet_run):
    for host in HOSTS:
        # in the message's own words after the host's name, not after the task's
        assert "%s: plan: %s needs build 0.16.0rc2, keys, dumps" % (host, host) in fleet_run["lines"]
    assert "Say what this host needs" not in fleet_run["out"]
    assert "not shown" not in fleet_run["out"]


def test_recap_one_line_per_host_and_log_path(fleet_run):
    lines = fleet_run["lines"]
    recap = lines[lines.index(next(line for line in lines if line.startswith("RECAP ("))) + 1:]
    assert re.match(r"^  gpu-node-1 +ok +ok=\d+ +changed=3 +skipped=2$", recap[0]), recap
    assert re.match(r"^  gpu-node-2 +ok +ok=\d+ +changed=3 +rescued=1 +skipped=2$", recap[1]), recap
    assert re.match(r"^  gpu-node-3 +FAILED +ok=\d+ +changed=3 +failed=1 +skipped=2$", recap[2]), recap
    assert re.match(r"^  gpu-node-9 +FAILED +ok=0 +changed=0 +unreachable=1$", recap[3]), recap
    assert recap[4] == "Full log: %s" % os.path.join(fleet_run["reports"], "play.log")


def test_full_log_in_the_report_directory(fleet_run):
    path = os.path.join(fleet_run["reports"], "play.log")
    with open(path, encoding="utf-8") as handle:
        log = handle.read()
    for i in range(15):
        assert "TASK [stage : Stage step %d] " % i in log
    for i in range(14):
        assert "TASK [serve : Serve step %d] " % i in log
    assert "ok: [gpu-node-3] => \n    msg: stage 14\n" in log
    assert "fatal: [gpu-node-3]: FAILED! =>" in log
    assert "the service did not stop within 30 s" in log
    assert "[WARNING]: the staged build is 3 nightlies older" in log
    assert re.search(r"^gpu-node-2 +: ok=\d+ +changed=3 +unreachable=0 +failed=0 +skipped=\d+ +rescued=1 ", log, re.M), log[-2000:]
    # what ansible-core prints itself is in the log too (and on the terminal, as without the callback)
    assert "'gpufleet_unset_setting' is undefined" in fleet_run["err"]
    assert "[WARNING]: Encountered 1 template error.\nerror 1 - 'gpufleet_unset_setting' is undefined" in log
    # moved, not copied: the default directory (created for the log) is gone again
    assert not os.path.exists(os.path.join(fleet_run["tmp"], "gpufleet-reports"))


LOOP_PLAY = """
- name: Roll out
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Check each model's warnings
      warner:
      loop: [kimi-k2.5, minimax-m2.5]
    - name: After the stop
      ansible.builtin.debug:
        msg: stopped
"""


def test_without_report_dir_the_log_goes_to_log_dir(tmp_path):
    tmp = str(tmp_path)
    write(os.path.join(tmp, "library", "warner.py"), WARNER)
    rc, out, err = playbook_run(tmp, LOOP_PLAY, hosts=HOSTS[:1])
    assert rc == 0, out + err
    # each item's warning once: not again from the loop's result, which repeats them
    warnings = [line for line in out.splitlines() if line.startswith("[WARNING] gpu-node-1 | Roll out | Check each model's warnings: ")]
    assert len(warnings) == 2, out
    logs = glob.glob(os.path.join(tmp, "gpufleet-reports", "logs", "play-*.log"))
    assert len(logs) == 1, out
    assert re.match(r"^play-\d{8}T\d{6}Z\.log$", os.path.basename(logs[0]))
    assert out.splitlines()[-1] == "Full log: %s" % logs[0]
    with open(logs[0], encoding="utf-8") as handle:
        log = handle.read()
    assert "TASK [After the stop] " in log
    # as ansible-core's display does, the log says a warning once
    assert log.count("[WARNING]: the staged build is 3 nightlies older") == 1, log


def test_log_size_cap(tmp_path):
    tmp = str(tmp_path)
    play = "- name: Talk a lot\n  hosts: fleet\n  gather_facts: false\n  tasks:\n" + "".join(
        "    - name: Say line {i}\n      ansible.builtin.debug:\n        msg: \"{text}\"\n".format(i=i, text="x" * 400)
        for i in range(20))
    rc, out, err = playbook_run(tmp, play, env={"GPUFLEET_PHASES_LOG_DIR": "logs", "GPUFLEET_PHASES_LOG_MAX_SIZE": "3000"},
                                hosts=HOSTS[:1])
    assert rc == 0, out + err
    logs = glob.glob(os.path.join(tmp, "logs", "play-*.log"))
    assert len(logs) == 1, out
    size = os.path.getsize(logs[0])
    with open(logs[0], encoding="utf-8") as handle:
        log = handle.read()
    assert 3000 <= size <= 3200, size
    assert log.rstrip("\n").endswith("[log cut here: it reached its cap of 3000 bytes (log_max_size); the rest of the run is not in it]")
    assert "TASK [Say line 19]" not in log
    assert out.splitlines()[-1].endswith(" (cut at 3000 bytes: log_max_size)"), out


RESCUE_PLAY = """
- name: Roll out
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Roll out this host
      block:
        - name: Cut over (included)
          ansible.builtin.include_role:
            name: cutover
      rescue:
        - name: Put the previous build back
          ansible.builtin.debug:
            msg: back
    - name: Roll out again
      block:
        - name: Cut over (imported)
          ansible.builtin.import_role:
            name: cutover
      rescue:
        - name: Start the previous build
          ansible.builtin.fail:
            msg: the previous build did not start either
"""

CUTOVER_TASKS = """
- name: Switch inside a block of the role's own
  block:
    - name: Switch the environment link
      ansible.builtin.fail:
        msg: the staged environment has no python
"""


def test_rescue_through_include_and_import_role(tmp_path):
    tmp = str(tmp_path)
    write(os.path.join(tmp, "roles", "cutover", "tasks", "main.yml"), "---\n" + CUTOVER_TASKS)
    rc, out, err = playbook_run(tmp, RESCUE_PLAY, hosts=HOSTS[:1])
    assert rc != 0, out + err
    lines = out.splitlines()
    # a failure in a role that a play's block includes (or imports) is rescued by that block
    assert 'FAILED (rescued by "Roll out this host") gpu-node-1 | cutover | Switch the environment link' in lines, out
    assert 'FAILED (rescued by "Roll out again") gpu-node-1 | cutover | Switch the environment link' in lines, out
    # a failure in a rescue section is a failure
    assert "FAILED gpu-node-1 | Roll out | Start the previous build" in lines, out
    assert lines[lines.index("FAILED gpu-node-1 | Roll out | Start the previous build") + 1] == \
        "  msg: the previous build did not start either"
    # the play's own tasks between the two includes do not cut the role's phase in two
    cutover = [line for line in lines if re.match(r"^  gpu-node-1 +cutover ", line)]
    assert len(cutover) == 1 and re.match(r"^  gpu-node-1 +cutover +ok \(2 rescued\) +2 tasks +\d+\.\d s$", cutover[0]), out
    assert re.search(r"^  gpu-node-1 +FAILED +ok=2 +changed=0 +failed=1 +rescued=2$", out, re.M), out
