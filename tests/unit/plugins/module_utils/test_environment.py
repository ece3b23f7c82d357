# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""environment: site-packages and bin/ of an interpreter, a venv or a site-packages directory."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import subprocess
import sys
import sysconfig

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import environment
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError


def test_locate_environment_runs_the_target_interpreter():
    located = environment.locate_environment(python=sys.executable)
    assert located.site_dirs[0] == sysconfig.get_paths()["purelib"]
    assert located.scripts_dir == sysconfig.get_paths()["scripts"]
    assert located.python_version == "%d.%d.%d" % sys.version_info[:3]


def test_locate_environment_uses_the_given_runner_with_a_list(tmp_path):
    site = str(tmp_path)
    seen = []

    def runner(argv):
        seen.append(argv)
        return 0, '{"purelib": "%s", "platlib": "%s", "scripts": "/x/bin", "prefix": "/x"}\n' % (site, site), ""
    located = environment.locate_environment(python=sys.executable, run_command=runner)
    assert isinstance(seen[0], list) and seen[0][:4] == [sys.executable, "-I", "-S", "-c"]
    assert located.site_dirs == [site] and located.scripts_dir == "/x/bin"


@pytest.mark.parametrize("answer, message", [
    ((1, "", "Traceback ...\nImportError: bad"), "could not report its site-packages (exit code 1: Traceback"),
    ((0, "hello\n", ""), "not the expected JSON"),
])
def test_locate_environment_broken_interpreter(answer, message):
    with pytest.raises(IntegrityError) as exc:
        environment.locate_environment(python=sys.executable, run_command=lambda argv: answer)
    assert message in str(exc.value)


def test_locate_environment_input_errors(tmp_path):
    with pytest.raises(IntegrityError, match="does not exist or is not executable"):
        environment.locate_environment(python=str(tmp_path / "python"))
    with pytest.raises(IntegrityError, match="No lib/python"):
        environment.locate_environment(venv=str(tmp_path))
    with pytest.raises(IntegrityError, match="exactly one of"):
        environment.locate_environment(venv=str(tmp_path), site_packages=str(tmp_path))


def _debian_python():
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        return None
    proc = subprocess.run([python, "-c", "import sysconfig; print('posix_local' in sysconfig.get_scheme_names())"],
                          stdout=subprocess.PIPE, timeout=30, check=False)
    return python if proc.stdout.strip() == b"True" else None


@pytest.mark.skipif(_debian_python() is None, reason="needs a Debian-patched /usr/bin/python3 (posix_local scheme)")
def test_interpreter_of_a_venv_made_by_debians_python_reports_the_venvs_site_packages(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([_debian_python(), "-m", "venv", "--without-pip", str(venv)], timeout=60, check=True)
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          stdout=subprocess.PIPE, timeout=30, check=True)
    site = str(venv / "lib" / ("python" + proc.stdout.decode().strip()) / "site-packages")
    located = environment.locate_environment(python=str(venv / "bin" / "python"))
    assert located.site_dirs[0] == site
    assert located.root == str(venv) and located.scripts_dir == str(venv / "bin")


# ---------------------------------------------------------------------------
# A venv interpreter whose files leave no doubt is not run (issue 15 item 8)
# ---------------------------------------------------------------------------

def make_venv(path):
    """A real venv (no pip) of the running interpreter; returns (root, python, site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    short = "%d.%d" % sys.version_info[:2]
    return str(path), os.path.join(str(path), "bin", "python"), os.path.join(str(path), "lib", "python" + short, "site-packages")


def ask(python):
    """What the probe answers (the interpreter run with -I -S), as the default runner runs it."""
    return environment.locate_environment(python=python, run_command=environment._default_run)


@pytest.fixture
def probes(monkeypatch):
    """Counts the probes the default runner runs."""
    calls = []
    real = environment._default_run

    def counting(argv, timeout=environment.PROBE_TIMEOUT):
        calls.append(argv)
        return real(argv, timeout)
    monkeypatch.setattr(environment, "_default_run", counting)
    return calls


def same(a, b):
    return (a.site_dirs, a.scripts_dir, a.root, a.source) == (b.site_dirs, b.scripts_dir, b.root, b.source)


def test_venv_interpreter_is_read_from_its_files_and_answers_as_the_probe(tmp_path, probes):
    root, python, site = make_venv(tmp_path / "venv")
    located = environment.locate_environment(python=python)
    assert probes == []
    assert located.site_dirs == [site] and located.scripts_dir == os.path.join(root, "bin") and located.root == root
    asked = ask(python)
    assert same(located, asked) and located.python_version == asked.python_version


def _second_python_dir(root, site):
    os.makedirs(os.path.join(root, "lib", "python3.0", "site-packages"))


def _no_version(root, site):
    cfg = os.path.join(root, "pyvenv.cfg")
    with open(cfg) as handle:
        lines = [line for line in handle if not line.lower().startswith(("version", "version_info"))]
    with open(cfg, "w") as handle:
        handle.writelines(lines)


def _conflicting_versions(root, site):
    with open(os.path.join(root, "pyvenv.cfg"), "a") as handle:
        handle.write("version_info = 3.0.1\n")


def _other_version(root, site):
    with open(os.path.join(root, "pyvenv.cfg"), "a") as handle:
        handle.write("garbage line\nversion = 3.11.7+local\n")


def _lib64_with_another_site(root, site):
    lib64 = os.path.join(root, "lib64")
    if os.path.islink(lib64):
        os.unlink(lib64)
    os.makedirs(os.path.join(lib64, "python3.0", "site-packages"))


def _another_lib_dir(root, site):
    os.makedirs(os.path.join(root, "libexec"))


def _interpreter_not_named_by_version(root, site):
    python = os.path.join(root, "bin", "python")
    os.unlink(python)
    with open(python, "w") as handle:
        handle.write("#!/bin/sh\nexec %s \"$@\"\n" % sys.executable)
    os.chmod(python, 0o755)


def _site_packages_missing(root, site):
    os.rmdir(site)
    os.makedirs(os.path.join(os.path.dirname(site), "dist-packages"))


@pytest.mark.parametrize("make_ambiguous", [
    _second_python_dir, _no_version, _conflicting_versions, _other_version, _lib64_with_another_site,
    _another_lib_dir, _interpreter_not_named_by_version, _site_packages_missing,
])
def test_venv_whose_layout_leaves_doubt_is_asked_with_the_probe(tmp_path, probes, make_ambiguous):
    root, python, site = make_venv(tmp_path / "venv")
    make_ambiguous(root, site)
    try:
        located = environment.locate_environment(python=python)
    except IntegrityError:
        located = None          # what the probe found was no usable answer: it was still asked
    assert len(probes) == 1 and probes[0][1:3] == ["-I", "-S"]
    if located is not None:
        assert same(located, ask(python))


def test_interpreter_outside_a_venv_is_asked_with_the_probe(probes):
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if os.path.isfile(os.path.join(os.path.dirname(base), "pyvenv.cfg")) or \
            os.path.isfile(os.path.join(os.path.dirname(os.path.dirname(base)), "pyvenv.cfg")):
        pytest.skip("the base interpreter sits in a venv here")
    environment.locate_environment(python=base)
    assert len(probes) == 1
