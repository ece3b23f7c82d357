# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The role gpufleet.vllm.quality through real ansible-playbook, against servers that answer as vLLM does
(tests/unit/fakevllm_quality.py, in threads of the test): record writes the references for review, the same server
passes the gate, a damaged one fails the host (or warns), and the pre-flight refuses a reference that cannot be the
host's before any request.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

from fakevllm_quality import FakeVllm
from helpers import load_source

query_tests = load_source("gpufleet_audit_query_for_quality_role", "tests", "unit", "playbooks", "test_audit_query.py")


@pytest.fixture
def fake():
    server = FakeVllm().start()
    yield server
    server.stop()


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    (path / "tokenizer.json").write_text('{"model": {"type": "WordLevel", "vocab": {"[UNK]": 0}}}')
    (path / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    return str(path)


def play(tmp_path, fake, model_dir, tasks_from="main", after=(), extra=None, **role_vars):
    """ansible-playbook of one play on two local hosts that include the role (both measure FAKE), then AFTER; EXTRA:
    more extra vars."""
    role_vars = dict({"quality_port": int(fake.url.rsplit(":", 1)[1]), "quality_served_model_name": fake.model,
                      "quality_model_dir": model_dir, "quality_record_dir": str(tmp_path / "reports")}, **role_vars)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Quality", "hosts": "fleet", "gather_facts": False,
        "tasks": [{"name": "The role", "ansible.builtin.include_role": {
            "name": "gpufleet.vllm.quality", "tasks_from": tasks_from}, "vars": role_vars}] + list(after)}],
        sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"fleet": {"hosts": {"gpu-1": {}, "gpu-2": {}}}}}}))
    proc = query_tests.ansible_playbook(str(tmp_path), str(playbook), str(inventory), extra or {})
    return proc, proc.stdout + proc.stderr


def recorded(tmp_path, fake, model_dir):
    proc, output = play(tmp_path, fake, model_dir, quality_mode="record")
    assert proc.returncode == 0, output
    files = sorted(os.listdir(str(tmp_path / "reports")))
    assert len(files) == 1 and files[0].startswith("quality-references-") and files[0].endswith(".yml"), files
    with open(str(tmp_path / "reports" / files[0])) as handle:
        text = handle.read()
    assert "on gpu-1, gpu-2." in text and "# gpu-2 agrees with gpu-1 on tiny (bf16)" in text, text
    assert files[0] in output and "review it, then copy quality_references into your inventory" in output, output
    return yaml.safe_load(text)["quality_references"]


def test_record_then_gate_passes_on_the_same_server_and_fails_the_host_on_a_damaged_one(tmp_path, fake, model_dir):
    references = recorded(tmp_path, fake, model_dir)
    assert list(references["tiny"]) == ["bf16"] and references["tiny"]["bf16"]["model"] == "tiny"
    proc, output = play(tmp_path, fake, model_dir, quality_references=references)
    assert proc.returncode == 0 and "Quality of tiny (bf16) at http://127.0.0.1:" in output, output
    assert "passed: 8 of 8 answers match" in output
    fake.answer_salt = "damaged"
    proc, output = play(tmp_path, fake, model_dir, quality_references=references)
    assert proc.returncode == 2 and "failed: the greedy answers match the reference for 0 of 8" in output, output
    assert "failed=1" in output
    proc, output = play(tmp_path, fake, model_dir, quality_references=references, quality_on_failure="warn")
    assert proc.returncode == 0 and "WARNING (quality_on_failure=warn): Quality of tiny" in output, output


def test_a_server_without_prompt_logprobs_fails_a_gated_host_and_warns_for_one_without_a_reference(
        tmp_path, fake, model_dir):
    references = recorded(tmp_path, fake, model_dir)
    fake.prompt_logprobs = False
    proc, output = play(tmp_path, fake, model_dir, quality_references=references)
    assert proc.returncode == 2 and "no prompt_logprobs" in output, output
    proc, output = play(tmp_path, fake, model_dir)
    assert proc.returncode == 0 and "WARNING (not gated: no reference for this model and quantisation): " in output
    assert "prompt_logprobs" in output, output


def test_a_record_where_no_host_measured_writes_no_file(tmp_path, fake, model_dir):
    # (a file with an empty quality_references, copied into the inventory as it asks, would wipe the references)
    fake.prompt_logprobs = False
    proc, output = play(tmp_path, fake, model_dir, quality_mode="record")
    assert proc.returncode == 0 and "WARNING (record mode, nothing gated): " in output, output
    assert "prompt_logprobs" in output and "written to" not in output, output
    assert not (tmp_path / "reports").exists() or os.listdir(str(tmp_path / "reports")) == [], output


def test_the_preflight_refuses_a_reference_of_another_tokenizer_before_any_request(tmp_path, fake, model_dir):
    references = recorded(tmp_path, fake, model_dir)
    references["tiny"]["bf16"]["tokenizer"] = "sha256:" + "0" * 64
    fake.requests.clear()
    proc, output = play(tmp_path, fake, model_dir, tasks_from="preflight", quality_references=references)
    assert proc.returncode == 2 and "recorded with the tokenizer sha256:000" in output, output
    assert fake.requests == []
    proc, output = play(tmp_path, fake, model_dir, tasks_from="preflight", quality_references={})
    assert proc.returncode == 0 and fake.requests == [], output


def test_no_served_model_name_and_no_references_measures_the_first_model_listed(tmp_path, fake, model_dir):
    # (the README: an empty quality_served_model_name means the first model /v1/models lists)
    proc, output = play(tmp_path, fake, model_dir, tasks_from="preflight", quality_served_model_name="")
    assert proc.returncode == 0 and fake.requests == [], output
    proc, output = play(tmp_path, fake, model_dir, quality_served_model_name="")
    assert proc.returncode == 0 and "not gated: there" in output, output
    assert {request[2]["model"] for request in fake.completions()} == {"tiny"}


def test_off_does_nothing(tmp_path, fake, model_dir):
    proc, output = play(tmp_path, fake, model_dir, quality_mode="off")
    assert proc.returncode == 0 and fake.requests == [], output


def test_a_measure_that_ends_without_a_verdict_fails_the_host_with_a_sentence(tmp_path, model_dir):
    # (the module dies on the host: an interpreter that runs nothing, so no result, no verdict, no error kind)
    dead = tmp_path / "dead-python"
    dead.write_text("#!/bin/sh\nexit 0\n")
    dead.chmod(0o755)
    server = FakeVllm().start()
    extra = {"ansible_python_interpreter": str(dead)}
    try:
        proc, output = play(tmp_path, server, model_dir, extra=extra)
        assert proc.returncode == 2 and "failed=1" in output and "failed=0" not in output, output
        assert "Module result deserialization failed" in output, output
        # (warned, and what the summary and the audit read says a measure that failed: not a host without figures)
        after = [{"name": "The registered result", "ansible.builtin.debug": {
            "msg": "error_kind={{ quality_result.error_kind | default('none') }}"}}]
        proc, output = play(tmp_path, server, model_dir, after=after, extra=extra, quality_on_failure="warn")
        assert proc.returncode == 0 and "WARNING (quality_on_failure=warn): Module result deserialization failed" in output, output
        assert output.count("error_kind=task") == 2, output
    finally:
        server.stop()


def test_the_preflight_refuses_what_the_gate_would_refuse_after_a_restart(tmp_path, fake, model_dir):
    # (the rollout validates main only when it includes it, after the host restarted: a typo there rolls it back)
    specs = yaml.safe_load(open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))), "roles", "quality", "meta", "argument_specs.yml")))["argument_specs"]
    assert set(specs["main"]["options"]) <= set(specs["preflight"]["options"])
    for bad in ({"quality_on_failure": "ignore"}, {"quality_max_tokens": "many"},
                {"quality_mode": "record", "quality_max_tokens": 4, "quality_compare_tokens": 8}):
        proc, output = play(tmp_path, fake, model_dir, tasks_from="preflight", **bad)
        assert proc.returncode == 2 and "failed=1" in output and fake.requests == [], (bad, output)
    assert "compare_tokens must be 1 to max_tokens (4); got 8" in output
