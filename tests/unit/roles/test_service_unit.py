# SPDX-License-Identifier: GPL-3.0-or-later
"""The service role's unit file against hostile values, rendered by real Ansible.

One ansible-playbook run (local connection, no systemd needed) renders the
role's template with the role's own defaults and vars for each case, and
runs the role's value check (tasks/_values.yml). A case either renders a
unit whose sections and directives are exactly the expected ones, or fails
with a message that names the variable; it never renders a unit with a
directive or section the operator did not ask for.
"""

import json
import os
import pytest

from helpers import run_plays

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEMPLATE = os.path.join(REPO, "roles", "service", "templates", "vllm.service.j2")

INJECT = "\n[Service]\nExecStartPre=/bin/touch /tmp/pwned"
CASES = {
    "plain": {"service_model": "/models/kimi-k2.5"},
    "percent_and_quotes": {"service_model": "/models/kimi 100% \"q\"", "service_description": "vLLM (100%)"},
    "model_newline": {"service_model": "/models/kimi" + INJECT},
    "model_basename_newline": {"service_model": "/models/x" + INJECT.replace("/", "_")},
    "served_name_newline": {"service_model": "/models/kimi", "service_served_model_name": "kimi" + INJECT,
                            "service_description": "vLLM"},
    "description_cr": {"service_model": "/models/kimi", "service_description": "vLLM\rExecStartPre=/bin/true"},
    "description_backslash": {"service_model": "/models/kimi", "service_description": "vLLM \\"},
    "description_nel": {"service_model": "/models/kimi", "service_description": "vLLM\u2028[Install]"},
    "user_tab": {"service_model": "/models/kimi", "service_user": "root\tx"},
    "workdir_newline": {"service_model": "/models/kimi", "service_working_directory": "/srv\nUser=nobody"},
    "unit_name_path": {"service_model": "/models/kimi", "fleet_unit_name": "../../../tmp/evil"},
    "unit_name_newline": {"service_model": "/models/kimi", "fleet_unit_name": "vllm\nx"},
    "extra_arg_newline": {"service_model": "/models/kimi", "service_extra_args": ["--max-model-len", "1\n[Unit]"]},
    "env_newline": {"service_model": "/models/kimi", "service_environment": {"HF_HOME": "/x\nExecStartPre=/bin/true"}},
    "extra_arg_nul": {"service_model": "/models/kimi", "service_extra_args": ["--x", "1\x00"]},
    "env_key_newline": {"service_model": "/models/kimi", "service_environment": {"A\nB": "1"}},
    "multi_line_json": {"service_model": "/models/kimi", "service_extra_args": [
        "--override-generation-config", '{"temperature": 0.6,\n\t"top_p": 0.95}']},
    "model_option": {"service_model": "--trust-remote-code"},
    "api_key_crlf": {"service_model": "/models/kimi", "service_api_key": "k\r\nX-Evil: 1"},
}

PLAY = """
- name: Case {name}
  hosts: localhost
  gather_facts: false
  vars: {vars}
  tasks:
    - name: Role defaults and vars (a static import whose tasks are all skipped)
      ansible.builtin.import_role:
        name: gpufleet.vllm.service
      when: false
    - name: Render the template
      block:
        - name: Render
          ansible.builtin.template:
            src: {template}
            dest: "{out}/{name}.service"
            mode: "0600"
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}.render': ansible_failed_result.msg | default('?')}}) }}}}"
    - name: Run the check
      block:
        - name: Check
          ansible.builtin.include_role:
            name: gpufleet.vllm.service
            tasks_from: _values.yml
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}.check': ansible_failed_result.msg | default('?')}}) }}}}"
"""


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """outcome(case, kind): the rendered unit (kind 'service'), or the error of 'render' or 'check' (None: no error)."""
    out = str(tmp_path_factory.mktemp("units"))
    plays = [PLAY.format(name=name, vars=json.dumps(case), out=out, template=TEMPLATE) for name, case in CASES.items()]
    errors = run_plays("".join(plays), out)

    def read(name, kind):
        if kind != "service":
            return errors.get("%s.%s" % (name, kind))
        path = os.path.join(out, name + ".service")
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    return read


def directives(unit):
    """[(section, key)] of a rendered unit (comments and continuation lines skipped), as systemd reads it."""
    found, section = [], None
    for line in unit.replace("\\\n", " ").split("\n"):
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            found.append((section, None))
            continue
        found.append((section, line.split("=", 1)[0]))
    return found


def test_plain_unit_has_only_the_expected_directives(outcome):
    unit = outcome("plain", "service")
    assert outcome("plain", "check") is None
    assert directives(unit) == [
        ("[Unit]", None), ("[Unit]", "Description"), ("[Unit]", "Wants"), ("[Unit]", "After"),
        ("[Service]", None), ("[Service]", "Type"), ("[Service]", "User"), ("[Service]", "Environment"),
        ("[Service]", "ExecStart"), ("[Service]", "Restart"), ("[Service]", "RestartSec"),
        ("[Service]", "TimeoutStartSec"), ("[Service]", "TimeoutStopSec"), ("[Service]", "KillMode"),
        ("[Service]", "SyslogIdentifier"), ("[Install]", None), ("[Install]", "WantedBy")]
    assert "# vLLM server for kimi-k2.5, rendered by" in unit


def test_percent_and_quotes_are_kept_not_refused(outcome):
    unit = outcome("percent_and_quotes", "service")
    assert outcome("percent_and_quotes", "check") is None
    assert "Description=vLLM (100%%)\n" in unit
    assert '"/models/kimi 100%% \\"q\\""' in unit


@pytest.mark.parametrize("name, variable", [
    ("model_basename_newline", "service_served_model_name"),
    ("served_name_newline", "service_served_model_name"),
    ("description_cr", "service_description"),
    ("description_nel", "service_description"),
    ("user_tab", "service_user"),
    ("workdir_newline", "service_working_directory"),
    ("unit_name_path", "fleet_unit_name"),
    ("unit_name_newline", "fleet_unit_name"),
])
def test_the_template_refuses_a_value_that_would_start_a_line(outcome, name, variable):
    unit = outcome(name, "service")
    assert unit is None, "a unit was rendered:\n%s" % unit
    error = outcome(name, "render")
    assert variable in error
    assert "Traceback" not in error


def test_a_trailing_backslash_is_refused(outcome):
    assert outcome("description_backslash", "service") is None
    error = outcome("description_backslash", "render")
    assert "service_description ends in a backslash" in error


@pytest.mark.parametrize("name", ["model_newline", "extra_arg_newline", "env_newline"])
def test_quoted_words_cannot_break_out_of_their_line(outcome, name):
    """ExecStart= words and Environment= values are quoted with C escapes: the template keeps one line each."""
    unit = outcome(name, "service")
    assert [d for d in directives(unit) if d[1] in ("ExecStartPre", None)] == [
        ("[Unit]", None), ("[Service]", None), ("[Install]", None)]


@pytest.mark.parametrize("name", ["extra_arg_newline", "env_newline", "multi_line_json"])
def test_quoted_words_may_hold_line_breaks(outcome, name):
    """A multi-line JSON argument or PEM value is safe in a quoted word: the check lets it through."""
    assert outcome(name, "check") is None
    assert outcome(name, "render") is None


def test_a_multi_line_argument_reaches_the_program_as_one_quoted_word(outcome):
    unit = outcome("multi_line_json", "service")
    assert '"{\\"temperature\\": 0.6,\\n\\t\\"top_p\\": 0.95}"' in unit


@pytest.mark.parametrize("name, words", [
    ("model_newline", "service_model holds a line break (U+000A) at character 13"),
    ("served_name_newline", "service_served_model_name holds a line break"),
    ("description_cr", "service_description holds a line break (U+000D)"),
    ("user_tab", "service_user holds a control character (U+0009)"),
    ("workdir_newline", "service_working_directory holds a line break"),
    ("unit_name_path", "fleet_unit_name '../../../tmp/evil' holds characters a unit name cannot have"),
    ("extra_arg_nul", "service_extra_args[1] holds a NUL character (U+0000) at character 2"),
    ("env_key_newline", "service_environment (a key) holds a line break"),
    ("model_option", "service_model is '--trust-remote-code', which starts with '-'"),
    ("api_key_crlf", "service_api_key holds a line break (U+000D)"),
])
def test_the_check_names_the_variable_before_anything_is_written(outcome, name, words):
    error = outcome(name, "check")
    assert error is not None, "the check accepted %s" % name
    assert words in error
    assert "nothing was written" in error or "fleet_unit_name" in error
    # the value is shown escaped on one line, never raw
    assert "\n" not in error and "\r" not in error
