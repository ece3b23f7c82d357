# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' checks of values that reach a command line or a host path (tasks/_values.yml), run by real Ansible.

One ansible-playbook run (local connection) includes each role's check with
the role's defaults and the case's variables; a case passes or fails with a
message naming the variable. Nothing is installed or changed: the checks are
asserts.
"""

import json
import pytest

from helpers import run_plays

CASES = {
    "reinstall_defaults": ("reinstall", {}),
    "reinstall_local_version_and_paths": ("reinstall", {"reinstall_extra_packages": ["flashinfer-python==0.6.4"],
                                                        "reinstall_find_links": ["/srv/wheels"]}),
    "reinstall_option_package": ("reinstall", {"reinstall_extra_packages": ["--index-url=http://127.0.0.1:9/simple"]}),
    "reinstall_bad_package": ("reinstall", {"fleet_package": "../../etc"}),
    # ($ of a pattern matches before a final line break: the checks match the whole value)
    "reinstall_package_line_break": ("reinstall", {"fleet_package": "vllm\n"}),
    "reinstall_commit_line_break": ("reinstall", {"reinstall_nightly_commit": "0123456789abcdef0123456789abcdef01234567\n"}),
    "reinstall_exclude_line_break": ("reinstall", {"reinstall_lock_exclude": ["torch\n"]}),
    "reinstall_option_index": ("reinstall", {"reinstall_extra_index_urls": ["--no-verify-hashes"]}),
    "reinstall_newline_path": ("reinstall", {"fleet_envs_dir": "/opt/vllm/envs\n/etc"}),
    "reinstall_env_newline": ("reinstall", {"reinstall_uv_environment": {"UV_INDEX_URL": "http://x\r\n"}}),
    "host_tools_defaults": ("host_tools", {}),
    "host_tools_option_package": ("host_tools", {"host_tools_packages": ["nvidia-ml-py", "--pre"]}),
    "host_tools_tab_venv": ("host_tools", {"fleet_tools_venv": "/opt/tools\t"}),
}

PLAY = """
- name: Case {name}
  hosts: localhost
  gather_facts: false
  vars: {vars}
  tasks:
    - name: Run the check
      block:
        - name: Check
          ansible.builtin.include_role:
            name: gpufleet.vllm.{role}
            tasks_from: _values.yml
      rescue:
        - name: Keep the error
          ansible.builtin.set_fact:
            errors: "{{{{ errors | default({{}}) | combine({{'{name}': ansible_failed_result.msg | default('?')}}) }}}}"
"""


@pytest.fixture(scope="module")
def errors(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("values"))
    plays = [PLAY.format(name=name, role=role, vars=json.dumps(case)) for name, (role, case) in CASES.items()]
    return run_plays("".join(plays), out)


@pytest.mark.parametrize("name", ["reinstall_defaults", "reinstall_local_version_and_paths", "host_tools_defaults"])
def test_ordinary_values_pass(errors, name):
    assert name not in errors, errors.get(name)


@pytest.mark.parametrize("name, words", [
    ("reinstall_option_package", "reinstall_extra_packages[0] is '--index-url=http://127.0.0.1:9/simple', "
                                 "which starts with '-'"),
    ("reinstall_bad_package", 'fleet_package must be a distribution name such as vllm'),
    ("reinstall_package_line_break", 'fleet_package must be a distribution name such as vllm'),
    ("reinstall_commit_line_break", "reinstall_nightly_commit must be a full 40-hex commit hash"),
    ("reinstall_exclude_line_break", "reinstall_lock_exclude holds a value that is not a distribution name"),
    ("reinstall_option_index", "reinstall_extra_index_urls[0] is '--no-verify-hashes', which starts with '-'"),
    ("reinstall_newline_path", "fleet_envs_dir holds a line break (U+000A)"),
    ("reinstall_env_newline", "reinstall_uv_environment.UV_INDEX_URL holds a line break (U+000D)"),
    ("host_tools_option_package", "host_tools_packages[1] is '--pre', which starts with '-'"),
    ("host_tools_tab_venv", "fleet_tools_venv holds a control character (U+0009)"),
])
def test_hostile_values_are_refused_by_name(errors, name, words):
    assert name in errors, "the check accepted %s" % name
    assert words in errors[name]
    assert "nothing was changed" in errors[name]
