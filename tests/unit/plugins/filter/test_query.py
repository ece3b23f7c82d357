# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The JMESPath filters query and query_error (plugins/filter/query.py), as tables of cases.

The last test runs them in real ansible-playbook templates, where the data
arrive as Ansible's tagged and lazily templated types.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.query import FilterModule, query, query_error
from helpers import run_plays

REPORT = {
    "hosts": [
        {"host": "gpu-a01", "drift": ["integrity", "dumps"], "build": "0.33.0", "dumps": 35, "unit_state": "active"},
        {"host": "gpu-a02", "drift": [], "build": "0.33.0", "dumps": 0, "unit_state": "active"},
        {"host": "gpu-a03", "drift": ["build"], "build": "0.32.1", "dumps": 0, "unit_state": "failed"},
    ],
    "not_audited": [{"host": "gpu-a04", "reason": "unreachable, or no answer"}],
}


@pytest.mark.parametrize("expression, expected", [
    ("hosts[?drift].host", ["gpu-a01", "gpu-a03"]),
    ("hosts[?!drift].host", ["gpu-a02"]),
    ("hosts[?contains(drift, 'dumps')].host", ["gpu-a01"]),
    ("hosts[?build != '0.33.0'].{host: host, build: build}", [{"host": "gpu-a03", "build": "0.32.1"}]),
    ("hosts[?dumps > `0`] | [0].dumps", 35),
    ("length(hosts[?drift])", 2),
    ("sum(hosts[*].dumps)", 35),
    ("not_audited[*].host", ["gpu-a04"]),
    ("hosts[?unit_state == 'failed'] || not_audited", [REPORT["hosts"][2]]),
    ("hosts[?host == 'gpu-b01']", []),
    ("missing.path", None),
    ("max_by(hosts, &dumps).host", "gpu-a01"),
    ("join(', ', hosts[*].host)", "gpu-a01, gpu-a02, gpu-a03"),
])
def test_query(expression, expected):
    assert query(REPORT, expression) == expected
    assert query_error(expression) == ""


@pytest.mark.parametrize("expression, message", [
    ("hosts[?drift", "not a valid JMESPath expression (Incomplete expression, at character 13): hosts[?drift"),
    ("hosts[?drift]]", "not a valid JMESPath expression (Unexpected token: ], at character 14): hosts[?drift]]"),
    ("hosts[?build == 'vllm]", "not a valid JMESPath expression (Unclosed ' delimiter, at character 17): hosts[?build == 'vllm]"),
    ("hosts[?drift]. host ==", "not a valid JMESPath expression (Incomplete expression, at character 23): hosts[?drift]. host =="),
    ("hosts[?lenght(drift) > `0`]",
     "not a valid JMESPath expression (unknown function lenght(); the functions are abs, avg, ceil, contains, ends_with, "
     "floor, join, keys, length, map, max, max_by, merge, min, min_by, not_null, reverse, sort, sort_by, starts_with, sum, "
     "to_array, to_number, to_string, type, values): hosts[?lenght(drift) > `0`]"),
    ("hosts[?length()]", "not a valid JMESPath expression (length() takes 1 argument, got 0): hosts[?length()]"),
    ("join(', ')", "not a valid JMESPath expression (join() takes 2 arguments, got 1): join(', ')"),
    ("not_null()", "not a valid JMESPath expression (not_null() takes at least 1 argument, got 0): not_null()"),
    ("", "the expression is empty"),
    ("   ", "the expression is empty"),
    (None, "the expression must be a string, got NoneType"),
    (["hosts"], "the expression must be a string, got list"),
])
def test_bad_expression(expression, message):
    assert query_error(expression) == message
    with pytest.raises(AnsibleFilterError) as exc:
        query(REPORT, expression)
    assert str(exc.value) == "gpufleet.vllm.query: " + message


@pytest.mark.parametrize("expression, message", [
    ("length(hosts[0].dumps)", "In function length(), invalid type for value: 35, expected one of: "
                               "['string', 'array', 'object'], received: \"number\""),
    ("sum(hosts[*].build)", "In function sum(), invalid type for value: 0.33.0, expected one of: ['array-number'], "
                            "received: \"str\""),
])
def test_expression_that_fails_on_the_data(expression, message):
    # valid when read: only the data show the type error
    assert query_error(expression) == ""
    with pytest.raises(AnsibleFilterError) as exc:
        query(REPORT, expression)
    assert str(exc.value) == "gpufleet.vllm.query: the expression failed on the data (%s): %s" % (message, expression)


def test_nesting_is_bounded():
    deep = []
    for dummy in range(150):
        deep = [deep]
    with pytest.raises(AnsibleFilterError, match="nests deeper than 100 levels"):
        query(deep, "[0]")
    assert "nests deeper than 100 levels" in query_error("not_null(" * 120 + "@" + ")" * 120)


def test_filters_are_registered():
    assert FilterModule().filters() == {"query": query, "query_error": query_error}


PLAYS = """
- name: Query in templates
  hosts: localhost
  gather_facts: false
  vars:
    report:
      hosts:
        - {host: gpu-a01, drift: [integrity], build: "{{ build }}"}
        - {host: gpu-a02, drift: [], build: 0.33.0}
    build: 0.32.1
    expression: "hosts[?contains(build, '0.32')].host"
  tasks:
    - name: Run the queries
      ansible.builtin.copy:
        content: "{{ results | to_json }}"
        dest: "%(out)s/results.json"
        mode: "0600"
      vars:
        results:
          drifted: "{{ report | gpufleet.vllm.query('hosts[?drift].host') }}"
          by_build: "{{ report | gpufleet.vllm.query(expression) }}"
          lengths: "{{ report | gpufleet.vllm.query('hosts[*].length(build)') }}"
          ok: "{{ expression | gpufleet.vllm.query_error }}"
          bad: "{{ 'hosts[?drift' | gpufleet.vllm.query_error }}"
    - name: A bad expression fails the task with the filter's message
      block:
        - name: Query with a bad expression
          ansible.builtin.debug:
            msg: "{{ report | gpufleet.vllm.query('hosts[?drift') }}"
      rescue:
        - name: Keep the message
          ansible.builtin.set_fact:
            errors: "{{ {'bad': ansible_failed_result.msg} }}"
"""


def test_in_real_templates(tmp_path):
    errors = run_plays(PLAYS % {"out": tmp_path}, str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results == {
        "drifted": ["gpu-a01"],
        "by_build": ["gpu-a01"],
        "lengths": [6, 6],
        "ok": "",
        "bad": "not a valid JMESPath expression (Incomplete expression, at character 13): hosts[?drift",
    }
    assert "gpufleet.vllm.query: not a valid JMESPath expression (Incomplete expression, at character 13): hosts[?drift" \
        in errors["bad"]
