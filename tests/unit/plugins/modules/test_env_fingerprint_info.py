# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.env_fingerprint_info, run in-process on fake environments written in the test."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.module_utils import filecheck
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import fingerprint
from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import set_fingerprint
from ansible_collections.gpufleet.vllm.plugins.modules import env_fingerprint_info

HERE = os.path.dirname(os.path.abspath(__file__))

# the fake environment writer of the module_utils tests
fake = load_source("gpufleet_fingerprint_helpers", "tests", "unit", "plugins", "module_utils", "test_fingerprint.py")

LOCK = {"demo": "1.0", "sympy": "1.14.0", "typing-extensions": "4.16.0"}


@pytest.fixture
def run(capsys):
    """run(args, check=False, diff=False) -> (exit code, result dict)."""
    return module_runner(env_fingerprint_info.main, capsys)


@pytest.fixture
def venv(tmp_path):
    root = tmp_path / "venv"
    fake.add_dist(root, "demo", "1.0", files={"demo/__init__.py": b"def main():\n    return 0\n"},
                  scripts={"demo-cli": fake.SCRIPT})
    fake.add_dist(root, "Typing_Extensions", "4.16.0", files={"typing_extensions.py": b"X = 1\n"})
    fake.add_dist(root, "sympy", "1.14.0", data={"share/man/man1/isympy.1": b".TH ISYMPY 1\n"})
    return str(root)


def site(venv):
    return os.path.join(venv, "lib", fake.PYDIR, "site-packages")


def test_pristine(run, venv):
    code, result = run({"venv": venv})
    assert code == 0 and result["changed"] is False and result["check_mode"] is False
    assert result["fingerprint"] == set_fingerprint(LOCK.items())
    assert result["count"] == 3 and result["matches"] is None
    assert [(d["name"], d["version"], d["source"], d["installer"], d["pristine"], d["problem"])
            for d in result["distributions"]] == [("demo", "1.0", "index", "uv", True, None),
                                                  ("sympy", "1.14.0", "index", "uv", True, None),
                                                  ("typing-extensions", "4.16.0", "index", "uv", True, None)]
    assert result["msg"] == ("3 distributions in %s, fingerprint %s; all pristine (the 11 files their RECORDs list "
                             "all match)." % (site(venv), result["fingerprint"][:19]))


def test_check_mode_gives_the_same_result(run, venv):
    os.unlink(os.path.join(site(venv), "typing_extensions.py"))
    code1, normal = run({"venv": venv, "expected": LOCK})
    code2, checked = run({"venv": venv, "expected": LOCK}, check=True)
    assert code1 == code2 == 0 and checked["check_mode"] is True
    for key in ("fingerprint", "distributions", "not_pristine", "matches", "msg"):
        assert normal[key] == checked[key], key


def test_site_packages_option(run, venv):
    expected = {"Typing_Extensions": "4.16.0", "demo": "1.0", "SymPy": "1.14.0"}
    code, result = run({"site_packages": site(venv), "expected": expected})
    assert code == 0 and result["matches"] is True
    # bin/ and the data root are found from the usual layout: the script and the man page were hashed
    assert result["files_checked"] == 11 and result["not_pristine_total"] == 0


def test_mismatch_is_reported_without_failing_by_default(run, venv):
    code, result = run({"venv": venv, "expected": dict(LOCK, demo="1.1", six="1.17.0")})
    assert code == 0 and not result.get("failed")
    assert result["matches"] is False
    assert result["different"] == [{"name": "demo", "expected": "1.1", "found": "1.0"}]
    assert result["missing"] == [{"name": "six", "version": "1.17.0"}] and result["extra"] == []


def test_fail_on_mismatch_names_the_differences_and_the_not_pristine(run, venv):
    fake.edit(os.path.join(site(venv), "demo", "__init__.py"), b"return 0", b"return 1")
    expected = {"demo": "1.1", "sympy": "1.14.0", "flashinfer-python": "0.6.4"}
    code, result = run({"venv": venv, "expected": expected, "fail_on_mismatch": True})
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert result["msg"] == (
        "The environment (%s) is not the expected one: demo is 1.0, expected 1.1; flashinfer-python 0.6.4 is missing; "
        "typing-extensions 4.16.0 is not expected. Not pristine: demo 1.0 (1 modified (first: demo/__init__.py "
        "(modified))). Nothing was changed (fail_on_mismatch is true; set it to false to only report)." % site(venv))
    assert result["fingerprint"] and result["distributions"]


def test_fail_on_mismatch_passes_a_matching_environment(run, venv):
    code, result = run({"venv": venv, "expected": {"Typing_Extensions": "4.16.0", "DEMO": "1.0", "sympy": "1.14.0"},
                        "expected_fingerprint": set_fingerprint(LOCK.items()).upper().replace("SHA256", "sha256"),
                        "fail_on_mismatch": True})
    assert code == 0 and result["matches"] is True


def test_fail_on_mismatch_by_fingerprint_alone(run, venv):
    other = set_fingerprint(list(LOCK.items()) + [("six", "1.17.0")])
    code, result = run({"venv": venv, "expected_fingerprint": other, "fail_on_mismatch": True})
    assert code == 1
    assert "is not the expected one: its fingerprint %s is not the expected %s." % (
        set_fingerprint(LOCK.items()), other) in result["msg"]


def test_a_version_yaml_turned_into_a_number_fails_clearly(run, venv):
    code, result = run({"venv": venv, "expected": {"demo": 1.1}})
    assert code == 1
    assert result["msg"] == ("The expected option cannot be compared: expected gives demo the float 1.1 as its version; "
                             "give every version as text (quote it in YAML: '1.10' stays 1.10, an unquoted 1.10 "
                             "becomes the number 1.1). Nothing was checked.")


@pytest.mark.parametrize("value", ["sha256:abc", "md5:" + "0" * 64, "0" * 64, "sha256:" + "g" * 64])
def test_a_malformed_expected_fingerprint_fails(run, venv, value):
    code, result = run({"venv": venv, "expected_fingerprint": value})
    assert code == 1 and result["msg"].startswith("expected_fingerprint must be sha256: and 64 hexadecimal digits")


def test_a_missing_venv_fails_in_one_sentence(run, tmp_path):
    code, result = run({"venv": str(tmp_path / "nowhere")})
    assert code == 1 and result["msg"] == "The virtual environment %s does not exist or is not a directory." % (
        tmp_path / "nowhere")


def test_bad_bounds_fail(run, venv):
    assert run({"venv": venv, "max_list": 0})[1]["msg"] == "max_list must be 1 or more (got 0)."
    assert run({"venv": venv, "timeout": 0})[1]["msg"] == "timeout must be 1 or more seconds (got 0)."


def test_timeout_fails_the_task_saying_how_far_it_got(run, venv, monkeypatch):
    for number in range(40):
        fake.add_dist(venv, "pkg%02d" % number, "1.0")
    real = filecheck.check_file

    def slow(*args, **kwargs):
        time.sleep(0.1)
        return real(*args, **kwargs)
    monkeypatch.setattr(filecheck, "check_file", slow)
    started = time.monotonic()
    code, result = run({"venv": venv, "timeout": 1})
    assert time.monotonic() - started < 3.0
    assert code == 1 and result["changed"] is False
    assert result["msg"].startswith("The check did not finish within 1 seconds (timeout) and was stopped while hashing "
                                    "the files RECORD lists (")


def test_too_many_distributions_fail_naming_the_directory(run, venv, monkeypatch):
    monkeypatch.setattr(fingerprint, "MAX_DISTRIBUTIONS", 2)
    code, result = run({"venv": venv})
    assert code == 1
    assert result["msg"].startswith("More than 2 Python distributions are installed in %s; stopped listing them." % site(venv))


def test_credentials_never_reach_the_result(run, venv):
    fake.add_dist(venv, "gguf", "0.17.1", direct_url={"url": "https://bot:ghp_SECRET@github.com/ggml-org/llama.cpp",
                                                      "vcs_info": {"vcs": "git", "commit_id": "4c0a8e1b"}})
    code, result = run({"venv": venv})
    assert code == 0 and "ghp_SECRET" not in json.dumps(result) and "bot" not in json.dumps(result)
    assert [d["source"] for d in result["distributions"] if d["name"] == "gguf"] == [
        "git+https://github.com/ggml-org/llama.cpp@4c0a8e1b"]


def test_unexpected_error_is_one_sentence_not_a_traceback(run, venv, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(5, "Input/output error", "/dev/sdz")
    monkeypatch.setattr(fingerprint, "read_record", broken)
    code, result = run({"venv": venv})
    # an unreadable RECORD is that distribution's problem, not the task's
    assert code == 0 and result["not_pristine_total"] == 3
    assert result["not_pristine"][0]["reason"] == "its RECORD cannot be read (Input/output error)"
    monkeypatch.setattr(fingerprint, "list_distributions", broken)
    code, result = run({"venv": venv})
    assert code == 1 and result["msg"].startswith(
        "The environment fingerprint stopped on an unexpected OSError: [Errno 5] Input/output error")


# ---------------------------------------------------------------------------
# Documentation
# ---------------------------------------------------------------------------

def test_documented_options_match_the_argument_spec(monkeypatch):
    captured = {}

    class Stop(Exception):
        pass

    def fake_init(self, argument_spec, **kwargs):
        captured.update(argument_spec)
        raise Stop()
    monkeypatch.setattr(env_fingerprint_info.AnsibleModule, "__init__", fake_init)
    with pytest.raises(Stop):
        env_fingerprint_info.main()
    doc = yaml.safe_load(env_fingerprint_info.DOCUMENTATION)
    assert doc["module"] == "env_fingerprint_info"
    assert sorted(doc["options"]) == sorted(captured)
    for name, option in doc["options"].items():
        assert option["type"] == captured[name]["type"], name
        assert option.get("default") == captured[name].get("default"), name
    # (check mode full, platform posix: the info_module attributes; diff_mode its own, with what it returns instead)
    assert "gpufleet.vllm.attributes.info_module" in doc["extends_documentation_fragment"]
    assert doc["attributes"]["diff_mode"]["support"] == "N/A"


def test_documented_return_values_cover_the_result(run, venv):
    code, result = run({"venv": venv, "expected": LOCK})
    documented = set(yaml.safe_load(env_fingerprint_info.RETURN))
    assert set(result) - {"changed", "invocation", "warnings", "deprecations"} == documented


def test_examples_are_valid_yaml_tasks():
    tasks = yaml.safe_load(env_fingerprint_info.EXAMPLES)
    modules = [next(k for k in task if k not in ("name", "register")) for task in tasks]
    assert modules.count("gpufleet.vllm.env_fingerprint_info") == 4


@pytest.mark.skipif(shutil.which("ansible-doc") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "ansible-doc")), reason="ansible-doc not installed")
def test_ansible_doc_renders(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    collections = os.path.join(repo, ".cache", "collections")
    tool = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    if not os.path.exists(tool):
        tool = shutil.which("ansible-doc")
    proc = subprocess.run([tool, "--json", "gpufleet.vllm.env_fingerprint_info"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, HOME=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr.decode()
    data = json.loads(proc.stdout)["gpufleet.vllm.env_fingerprint_info"]
    assert "fail_on_mismatch" in data["doc"]["options"] and "expected" in data["doc"]["options"]
    assert "fingerprint" in data["return"] and "not_pristine" in data["return"]
    assert "gpufleet.vllm.env_fingerprint_info" in data["examples"]


def test_python_option_of_a_venv_runs_nothing(run, venv, monkeypatch):
    real = os.path.realpath(sys.executable)
    if os.path.basename(real) != "python%d.%d" % sys.version_info[:2]:
        pytest.skip("this interpreter's file is not named pythonX.Y")
    os.symlink(real, os.path.join(venv, "bin", "python"))
    from ansible_collections.gpufleet.vllm.plugins.module_utils import environment

    def no_run(*args, **kwargs):
        raise AssertionError("the interpreter was run")
    monkeypatch.setattr(environment, "_default_run", no_run)
    code, result = run({"python": os.path.join(venv, "bin", "python"), "expected": LOCK})
    assert code == 0 and result["matches"] is True and result["not_pristine_total"] == 0
    assert result["environment"]["source"] == "python:%s" % os.path.join(venv, "bin", "python")


def test_fail_on_not_pristine_names_the_distributions_that_are_not(run, venv):
    # the environment is exactly the lock, but two packages were edited after the install
    fake.edit(os.path.join(site(venv), "demo", "__init__.py"), b"return 0", b"return 1")
    with open(os.path.join(site(venv), "typing_extensions.py"), "ab") as handle:
        handle.write(b"Y = 2\n")
    code, result = run({"venv": venv, "expected": LOCK, "fail_on_mismatch": True, "fail_on_not_pristine": True,
                        "max_list": 1})
    assert code == 1 and result["failed"] is True and result["matches"] is True
    # every one counted, beyond max_list; the one not listed in not_pristine still named
    assert result["unaccepted"] == ["demo", "typing-extensions"] and len(result["not_pristine"]) == 1
    assert result["msg"] == (
        "The environment (%s) has 2 distributions that are not pristine: demo 1.0 (1 modified (first: "
        "demo/__init__.py (modified))); typing-extensions 4.16.0 (its files differ from its RECORD) "
        "(fail_on_not_pristine is true; accept_not_pristine names those that may be)." % site(venv))


def test_accepted_not_pristine_passes_in_any_spelling_and_is_still_reported(run, venv):
    fake.edit(os.path.join(site(venv), "demo", "__init__.py"), b"return 0", b"return 1")
    code, result = run({"venv": venv, "fail_on_not_pristine": True, "accept_not_pristine": ["DEMO"]})
    assert code == 0 and not result.get("failed") and result["unaccepted"] == []
    assert [d["name"] for d in result["not_pristine"]] == ["demo"] and result["not_pristine_total"] == 1
    # without it, the same environment fails; a pristine one passes
    code, result = run({"venv": venv, "fail_on_not_pristine": True})
    assert code == 1 and result["unaccepted"] == ["demo"]
    fake.edit(os.path.join(site(venv), "demo", "__init__.py"), b"return 1", b"return 0")
    code, result = run({"venv": venv, "fail_on_not_pristine": True})
    assert code == 0 and result["unaccepted"] == []


def test_fail_on_not_pristine_without_verify_is_refused(run, venv):
    code, result = run({"venv": venv, "fail_on_not_pristine": True, "verify": False})
    assert code == 1 and result["msg"].startswith("fail_on_not_pristine needs verify")
    assert "distributions" not in result
