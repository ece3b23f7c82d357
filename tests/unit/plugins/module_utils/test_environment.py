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
from ansible_collections.gpufleet.vllm.plugins.module_utils.record import IntegrityError


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
