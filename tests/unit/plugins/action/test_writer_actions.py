# SPDX-License-Identifier: GPL-3.0-or-later
"""The control-node writers are actions: they run in the controller's Python whatever host the task is for.

A real ansible-playbook runs them for a host that cannot be reached (its SSH port refuses), without delegate_to:
they write on the control node all the same, in check mode they write nothing, and the values they get are
Ansible's templated ones. Their documentation (plugins/modules/<name>.py, no code) says what their argument
spec takes, option by option, since ansible-test's validate-modules cannot compare the two for an action.
"""

import ast
import importlib
import json
import os
import stat
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpufleet.vllm.plugins.module_utils.writers import bench_report, report_files, rollout_summary
from writer_actions import action_runner

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
WRITERS = {"bench_report": bench_report, "report_files": report_files, "rollout_summary": rollout_summary}

PLAY = """
- name: Write reports for a host nothing can reach
  hosts: gpu-far
  gather_facts: false
  vars:
    report_dir: "%(out)s/reports"
    diff_text: "{{ '+ _t.save(q)' ~ '\\n' }}"
  tasks:
    - name: Diffs
      gpufleet.vllm.report_files:
        path: "{{ report_dir }}"
        files: [{file: "diffs/{{ inventory_hostname }}/model.py.diff", content: "{{ diff_text }}"}]
      register: written_files
    - name: Summary
      gpufleet.vllm.rollout_summary:
        path: "{{ report_dir }}"
        rows: [{host: "{{ inventory_hostname }}", status: updated}]
        batches: [["{{ inventory_hostname }}"]]
      register: summary
    - name: Benchmark report
      gpufleet.vllm.bench_report:
        path: "{{ report_dir }}/bench"
        png: false
        results: [{host: "{{ inventory_hostname }}", run_id: bench, files: {c1.json: "{}"}}]
      register: bench
    - name: Keep the results
      ansible.builtin.copy:
        content: "{{ {'files': written_files, 'summary': summary, 'bench': bench} | to_json }}"
        dest: "%(out)s/results.json"
        mode: "0600"
      delegate_to: localhost
      check_mode: false
"""


def _play(tmp_path, check=False):
    inventory = tmp_path / "inventory.ini"
    # (port 1 on the loopback refuses at once: a task that needs the host fails it as unreachable)
    inventory.write_text("gpu-far ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh "
                         "ansible_python_interpreter=/nonexistent/python\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY % {"out": tmp_path})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    args = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(playbook)]
    return subprocess.run(args + (["--check"] if check else []), env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_writers_run_on_the_control_node_for_a_host_that_cannot_be_reached(tmp_path):
    proc = _play(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    reports = tmp_path / "reports"
    assert (reports / "diffs" / "gpu-far" / "model.py.diff").read_text() == "+ _t.save(q)\n"
    assert "| gpu-far | updated |" in (reports / "summary.md").read_text()
    assert json.loads((reports / "summary.json").read_text())["batches"] == [["gpu-far"]]
    assert (reports / "bench" / "gpu-far" / "c1.json").read_text() == "{}"
    assert (reports / "bench" / "report.md").is_file()
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["files"]["files"] == ["diffs/gpu-far/model.py.diff"] and results["files"]["changed"] is False
    assert results["summary"]["lines"][0] == "report: %s" % (reports / "summary.md")
    assert results["bench"]["changed"] is True and results["bench"]["hosts"][0]["host"] == "gpu-far"


def test_in_check_mode_nothing_is_written(tmp_path):
    proc = _play(tmp_path, check=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert not (tmp_path / "reports").exists()
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["files"]["check_mode"] is True and results["files"]["files"] == ["diffs/gpu-far/model.py.diff"]
    assert results["summary"]["check_mode"] is True and results["summary"]["files"] == []
    assert results["bench"]["check_mode"] is True and results["bench"]["changed"] is True


def test_an_unknown_or_missing_option_fails_as_a_module_would(tmp_path):
    run = action_runner("report_files")
    rc, result = run({"path": str(tmp_path), "files": [], "max_file": 3})
    assert rc == 1 and result["msg"].startswith(
        "Unsupported parameters for (gpufleet.vllm.report_files) module: max_file. Supported parameters include:")
    rc, result = run({"files": []})
    assert rc == 1 and result["msg"] == "missing required arguments: path"
    rc, result = action_runner("bench_report")({"path": str(tmp_path), "timeout": "soon"})
    assert rc == 1 and "timeout" in result["msg"] and "int" in result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_a_report_file_that_is_there_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path):
    run = action_runner("report_files")
    kept = tmp_path / "diffs" / "kept.diff"
    kept.parent.mkdir()
    kept.write_text("old")
    os.chmod(str(kept), 0o600)
    files = [{"file": "diffs/kept.diff", "content": "new"}, {"file": "diffs/new.diff", "content": "new"}]
    umask = os.umask(0o027)
    try:
        rc, result = run({"path": str(tmp_path), "files": files})
    finally:
        os.umask(umask)
    assert rc == 0, result
    assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "diffs" / "new.diff").stat().st_mode) == 0o640
    assert sorted(os.listdir(str(tmp_path / "diffs"))) == ["kept.diff", "new.diff"]  # (no temporary file left)


def _documentation(name):
    with open(os.path.join(REPO, "plugins", "modules", name + ".py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    assigned = [node for node in tree.body if isinstance(node, ast.Assign)]
    # (documentation only: a module file without code, as ansible-test's validate-modules accepts it)
    assert all(not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import)) for node in tree.body)
    return yaml.safe_load(next(node.value.value for node in assigned if node.targets[0].id == "DOCUMENTATION"))


def _compare(where, documented, spec):
    assert sorted(documented) == sorted(spec), "%s: documented %s, spec %s" % (where, sorted(documented), sorted(spec))
    for option, entry in spec.items():
        doc = documented[option]
        here = "%s.%s" % (where, option)
        assert doc.get("type", "str") == entry.get("type", "str"), here
        assert bool(doc.get("required")) == bool(entry.get("required")), here
        assert doc.get("default") == entry.get("default"), here
        assert doc.get("elements") == entry.get("elements"), here
        if entry.get("options") or doc.get("suboptions"):
            _compare(here, doc.get("suboptions") or {}, entry.get("options") or {})


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_the_documentation_says_what_the_argument_spec_takes(name):
    doc = _documentation(name)
    _compare(name, doc["options"], WRITERS[name].ARGUMENT_SPEC)
    # (the action, async and bypass_host_loop attributes come from the writers' doc fragment)
    assert "gpufleet.vllm.attributes.controller_writer" in doc["extends_documentation_fragment"]
    fragment = yaml.safe_load(importlib.import_module(
        "ansible_collections.gpufleet.vllm.plugins.doc_fragments.attributes").ModuleDocFragment.CONTROLLER_WRITER)
    assert fragment["attributes"]["action"]["support"] == "full"
    assert fragment["attributes"]["async"]["support"] == "none"
    assert "ansible.builtin.action_common_attributes.flow" in doc["extends_documentation_fragment"]
    assert "delegate_to" not in json.dumps(doc) or "needs no C(delegate_to)" in json.dumps(doc)
