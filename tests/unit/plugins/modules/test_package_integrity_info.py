# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.package_integrity_info, run in-process on wheels built in the test."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from helpers import load_source, module_runner
from ansible_collections.gpufleet.vllm.plugins.modules import package_integrity_info

HERE = os.path.dirname(os.path.abspath(__file__))


# the wheel builder and installer of the module_utils tests
helpers = load_source("gpufleet_integrity_helpers", "tests", "unit", "plugins", "module_utils", "test_integrity.py")


@pytest.fixture
def run(capsys):
    """run(args, check=False, diff=False) -> (exit code, result dict)."""
    return module_runner(package_integrity_info.main, capsys)


@pytest.fixture
def venv(tmp_path):
    wheel = helpers.make_wheel(tmp_path)
    site = helpers.install_wheel(wheel, tmp_path / "venv")
    return {"root": str(tmp_path / "venv"), "site": site, "wheel": wheel}


def base_args(env, **extra):
    args = {"venv": env["root"], "name": "demo", "uv_cache_dir": []}
    args.update(extra)
    return args


def test_pristine(run, venv):
    code, result = run(base_args(venv))
    assert code == 0
    assert result["changed"] is False and result["pristine"] is True
    assert result["counts"]["ok"] == len(helpers.DEMO_FILES) + 5
    assert result["msg"].startswith("demo 1.0 in %s is pristine" % venv["site"])


def test_drift_fails_and_names_the_files(run, venv):
    helpers.edit_in_place(os.path.join(venv["site"], "demo", "core.py"), b"return x", b"return 0")
    os.unlink(os.path.join(venv["site"], "demo", "sub", "model.py"))
    code, result = run(base_args(venv))
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert result["msg"] == (
        "demo 1.0 in %s is not pristine: 1 modified, 1 missing. First: demo/core.py (modified), "
        "demo/sub/model.py (missing). (fail_on_drift is true; set it to false to only report.)" % venv["site"])
    assert result["counts"]["modified"] == 1 and result["pristine"] is False


def test_drift_reported_without_failing(run, venv):
    helpers.edit_in_place(os.path.join(venv["site"], "demo", "core.py"), b"return x", b"return 0")
    code, result = run(base_args(venv, fail_on_drift=False, wheel=venv["wheel"]))
    assert code == 0 and not result.get("failed")
    assert result["pristine"] is False
    assert result["files"]["modified"][0]["path"] == "demo/core.py"
    assert "-    return x\n+    return 0\n" in result["diffs"][0]["diff"]


def test_check_mode_gives_the_same_result(run, venv):
    helpers.edit_in_place(os.path.join(venv["site"], "demo", "core.py"), b"return x", b"return 0")
    code1, normal = run(base_args(venv, fail_on_drift=False))
    code2, checked = run(base_args(venv, fail_on_drift=False), check=True)
    assert code1 == code2 == 0
    for key in ("pristine", "counts", "files", "findings", "changed"):
        assert normal[key] == checked[key]


def test_python_option_runs_the_target_interpreter(run, tmp_path):
    root = tmp_path / "target-env"
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    if os.access(uv, os.X_OK):
        subprocess.run([uv, "venv", "-q", str(root), "--python", sys.executable], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = helpers.install_wheel(helpers.make_wheel(tmp_path), root)
    code, result = run({"python": str(root / "bin" / "python"), "name": "demo", "uv_cache_dir": []})
    assert code == 0, result["msg"]
    assert result["pristine"] is True
    assert os.path.realpath(result["site_packages"]) == os.path.realpath(site)
    assert result["environment"]["source"] == "python:%s" % (root / "bin" / "python")


def test_cannot_verify_fails_unless_told_not_to(run, venv):
    os.unlink(os.path.join(venv["site"], "demo-1.0.dist-info", "RECORD"))
    code, result = run(base_args(venv))
    assert code == 1 and "cannot be verified" in result["msg"] and "no RECORD file" in result["reason"]
    code, result = run(base_args(venv, fail_on_drift=False))
    assert code == 0 and result["verifiable"] is False and result["pristine"] is False


@pytest.mark.parametrize("args, message", [
    ({"name": "torch"}, "The distribution 'torch' is not installed in "),
    ({"venv": None, "python": "/nonexistent/bin/python"},
     "The Python interpreter /nonexistent/bin/python does not exist or is not executable on this host."),
    ({"venv": None, "site_packages": "/nonexistent/site-packages"},
     "The site-packages directory /nonexistent/site-packages does not exist."),
    ({"max_list": 0}, "max_list must be 1 or more (got 0)."),
    ({"diff_max_bytes": 10}, "diff_max_bytes must be 256 or more (got 10)."),
    ({"python": "/usr/bin/python3"}, "parameters are mutually exclusive: python|venv|site_packages"),
    ({"venv": None}, "one of the following is required: python, venv, site_packages"),
])
def test_bad_input_is_a_clear_message(run, venv, args, message):
    merged = base_args(venv, **args)
    merged = dict((k, v) for k, v in merged.items() if v is not None)
    code, result = run(merged)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith(message), result["msg"]
    assert "Traceback" not in json.dumps(result)


# ---------------------------------------------------------------------------
# Documentation matches the code
# ---------------------------------------------------------------------------

def argument_spec(monkeypatch):
    captured = {}

    class Capture:
        def __init__(self, argument_spec, **kwargs):
            captured.update(argument_spec)
            captured["__kwargs__"] = kwargs
            raise SystemExit(0)
    monkeypatch.setattr(package_integrity_info, "AnsibleModule", Capture)
    with pytest.raises(SystemExit):
        package_integrity_info.main()
    return captured


def test_documented_options_match_the_argument_spec(monkeypatch):
    spec = argument_spec(monkeypatch)
    kwargs = spec.pop("__kwargs__")
    assert kwargs["supports_check_mode"] is True
    doc = yaml.safe_load(package_integrity_info.DOCUMENTATION)
    assert doc["module"] == "package_integrity_info" and doc["version_added"] == "0.1.0"
    options = doc["options"]
    assert sorted(options) == sorted(spec)
    for name, option in options.items():
        assert option["type"] == spec[name]["type"], name
        assert option.get("default") == spec[name].get("default"), name
        assert option.get("elements") == spec[name].get("elements"), name
        assert option.get("choices") == spec[name].get("choices"), name


def test_documented_return_values_cover_the_result(run, venv):
    helpers.edit_in_place(os.path.join(venv["site"], "demo", "core.py"), b"return x", b"return 0")
    code, result = run(base_args(venv, fail_on_drift=False, wheel=venv["wheel"]))
    documented = set(yaml.safe_load(package_integrity_info.RETURN))
    # warnings and deprecations are added by AnsibleModule itself (and collect across module runs in one process)
    assert set(result) - {"changed", "invocation", "warnings", "deprecations"} == documented


def test_examples_are_valid_yaml_tasks():
    tasks = yaml.safe_load(package_integrity_info.EXAMPLES)
    modules = [next(k for k in task if k != "name" and k != "register" and k != "when") for task in tasks]
    assert modules.count("gpufleet.vllm.package_integrity_info") == 4


@pytest.mark.skipif(shutil.which("ansible-doc") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "ansible-doc")), reason="ansible-doc not installed")
def test_ansible_doc_renders(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    collections = os.path.join(repo, ".cache", "collections")
    tool = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    if not os.path.exists(tool):
        tool = shutil.which("ansible-doc")
    proc = subprocess.run([tool, "--json", "gpufleet.vllm.package_integrity_info"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, HOME=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr.decode()
    data = json.loads(proc.stdout)["gpufleet.vllm.package_integrity_info"]
    assert "fail_on_drift" in data["doc"]["options"]
    assert "uv_cache_tainted" in data["return"]
    assert "gpufleet.vllm.package_integrity_info" in data["examples"]


def test_hanging_python_fails_at_python_timeout_with_a_clear_message(run, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!%s -S\nimport time\ntime.sleep(60)\n" % sys.executable)
    fake.chmod(0o755)
    code, result = run({"python": str(fake), "name": "demo", "python_timeout": 1})
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert "%s did not report its site-packages within 1 seconds (python_timeout)" % fake in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_unexpected_error_is_one_sentence_not_a_traceback(run, venv, monkeypatch):
    from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import check as integrity

    def broken(*args, **kwargs):
        raise OSError(5, "Input/output error", "/dev/sdz")
    monkeypatch.setattr(integrity, "walk", broken)
    code, result = run(base_args(venv))
    assert code == 1 and result["changed"] is False
    assert result["msg"].startswith("The integrity check of demo stopped on an unexpected OSError: [Errno 5] Input/output error")
    assert "Nothing was changed" in result["msg"] and "exception" not in result


def test_error_message_with_non_utf8_path_is_valid_utf8(run, tmp_path):
    odd = os.path.join(str(tmp_path), "v", "lib", b"python\xff".decode("utf-8", "surrogateescape"), "site-packages")
    os.makedirs(odd)
    code, result = run({"venv": str(tmp_path / "v"), "name": "demo", "uv_cache_dir": []})
    assert code == 1 and "is not installed in" in result["msg"]
    assert "lib/python\\xff/site-packages" in result["msg"]
    json.dumps(result, ensure_ascii=False).encode("utf-8")


def test_the_expected_version_passes_in_any_pep440_spelling(run, venv):
    code, result = run(base_args(venv, version="1.0"))
    assert code == 0 and result["version_matches"] is True and result["pristine"] is True
    code, result = run(base_args(venv, version=" v1.0 "))
    assert code == 0 and result["version_matches"] is True
    code, result = run(base_args(venv))
    assert code == 0 and result["version_matches"] is None


def test_another_version_fails_even_pristine_and_without_fail_on_drift(run, venv):
    # (what staging proves after uv said it installed the target)
    code, result = run(base_args(venv, version="1.1", fail_on_drift=False))
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert result["pristine"] is True and result["version_matches"] is False and result["version"] == "1.0"
    assert result["msg"].startswith("demo is version 1.0, not the expected 1.1: demo 1.0 in %s is pristine" % venv["site"])
    helpers.edit_in_place(os.path.join(venv["site"], "demo", "core.py"), b"return x", b"return 0")
    code, result = run(base_args(venv, version="1.1"))
    assert code == 1 and "is not pristine: 1 modified" in result["msg"]
    assert result["msg"].startswith("demo is version 1.0, not the expected 1.1: ")


# ---- expected_packages: the package and its whole environment (a fleet lock) proved in one run

fp = load_source("gpufleet_fingerprint_helpers_integrity", "tests", "unit", "plugins", "module_utils", "test_fingerprint.py")


@pytest.fixture
def locked(tmp_path):
    root = tmp_path / "env"
    fp.add_dist(root, "vllm", "0.33.0", files={"vllm/__init__.py": b"X = 1\n"})
    fp.add_dist(root, "lark", "1.3.1", files={"lark/__init__.py": b"L = 1\n"})
    fp.add_dist(root, "pynvvideocodec", "2.0.0", files={"pynvvideocodec/__init__.py": b"P = 1\n"})
    return root, {"vllm": "0.33.0", "lark": "1.3.1", "pynvvideocodec": "2.0.0"}


def test_expected_packages_prove_the_environment_in_the_same_run(run, locked):
    root, pins = locked
    rc, out = run({"venv": str(root), "expected_packages": pins})
    assert rc == 0, out["msg"]
    assert out["pristine"] is True and out["environment_check"]["matches"] is True
    assert out["environment_check"]["unaccepted"] == []
    fingerprint = out["environment_check"]["fingerprint"]
    rc, out = run({"venv": str(root), "expected_packages": pins, "expected_fingerprint": fingerprint})
    assert rc == 0 and out["environment_check"]["matches"] is True
    # without expected_packages: no environment check
    rc, out = run({"venv": str(root)})
    assert rc == 0 and out["environment_check"] is None


def test_an_environment_that_is_not_the_lock_fails_naming_the_difference(run, locked):
    root, pins = locked
    rc, out = run({"venv": str(root), "expected_packages": dict(pins, lark="1.2.2")})
    assert rc == 1
    assert out["msg"].startswith("vllm 0.33.0 is pristine, but the environment (")
    assert "is not the expected one: lark is 1.3.1, expected 1.2.2" in out["msg"]
    assert out["msg"].endswith("(fail_on_drift is true; set it to false to only report.)")
    assert out["environment_check"]["matches"] is False
    rc, out = run({"venv": str(root), "expected_packages": dict(pins, lark="1.2.2"), "fail_on_drift": False})
    assert rc == 0 and out["environment_check"]["matches"] is False


def test_a_package_not_pristine_fails_unless_accepted(run, locked):
    root, pins = locked
    fp.edit(os.path.join(fp.site_of(root), "pynvvideocodec", "__init__.py"), b"P = 1", b"P = 2")
    rc, out = run({"venv": str(root), "expected_packages": pins})
    assert rc == 1 and "has 1 distribution that is not pristine: pynvvideocodec 2.0.0" in out["msg"], out["msg"]
    assert out["pristine"] is True  # vLLM itself is
    rc, out = run({"venv": str(root), "expected_packages": pins, "accept_not_pristine": ["PyNvVideoCodec"]})
    assert rc == 0, out["msg"]


def test_a_bad_expected_fingerprint_is_refused(run, locked):
    root, pins = locked
    rc, out = run({"venv": str(root), "expected_packages": pins, "expected_fingerprint": "sha256:xyz"})
    assert rc == 1 and "expected_fingerprint must be sha256: and 64 hexadecimal digits" in out["msg"]
    rc, out = run({"venv": str(root), "expected_fingerprint": "sha256:" + "0" * 64})
    assert rc == 1 and "expected_fingerprint goes with expected_packages" in out["msg"]


def test_a_package_that_drifted_fails_before_the_environment_is_read(run, locked, monkeypatch):
    root, pins = locked
    fp.edit(os.path.join(fp.site_of(root), "vllm", "__init__.py"), b"X = 1", b"X = 2")

    def not_now(**kwargs):
        raise AssertionError("the environment was read although vLLM itself failed")
    monkeypatch.setattr(package_integrity_info, "check_environment", not_now)
    rc, out = run({"venv": str(root), "expected_packages": pins})
    assert rc == 1 and out["pristine"] is False and out["environment_check"] is None
    assert "vllm/__init__.py" in out["msg"] and "fail_on_drift is true" in out["msg"]
