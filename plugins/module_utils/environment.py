# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where a Python environment keeps its packages and scripts.

:func:`locate_environment` takes exactly one of an interpreter (read from
its venv's files when they leave no doubt, :func:`venv_of_interpreter`, else
asked with ``-I -S``, so none of the target environment's site hooks run, and
killed after a timeout), a virtual environment or a site-packages directory,
and returns an :class:`Environment`: its site directories and ``bin/``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError, read_small

#: Asked of the target interpreter, which runs with ``-I -S``: no site hooks
#: (``.pth`` files, sitecustomize) run, so the venv is found from its
#: ``pyvenv.cfg`` here (Python before 3.11 sets ``sys.prefix`` in site.py),
#: and its paths come from the venv scheme: Debian's default scheme for a
#: prefix is ``posix_local`` (``<prefix>/local/lib/pythonX.Y/dist-packages``).
_PROBE = ("import json, os, site, sys, sysconfig\n"
          "prefix = sys.prefix\n"
          "here = os.path.dirname(os.path.abspath(sys.executable))\n"
          "for cand in (here, os.path.dirname(here)):\n"
          "    if os.path.isfile(os.path.join(cand, 'pyvenv.cfg')):\n"
          "        prefix = cand\n"
          "        break\n"
          "v = {'base': prefix, 'platbase': prefix} if prefix != sys.prefix else None\n"
          "s = 'venv' if 'venv' in sysconfig.get_scheme_names() else ('posix_prefix' if os.name == 'posix' else 'nt')\n"
          "p = sysconfig.get_paths(s, vars=v) if v else sysconfig.get_paths()\n"
          "g = getattr(site, 'getsitepackages', lambda *a: [])([prefix])\n"
          "print(json.dumps({'purelib': p.get('purelib'), 'platlib': p.get('platlib'), 'site': g, "
          "'scripts': p.get('scripts'), 'data': p.get('data'), 'prefix': prefix, "
          "'base_prefix': getattr(sys, 'base_prefix', sys.prefix), "
          "'version': '%d.%d.%d' % sys.version_info[:3]}))\n")

#: Seconds the target interpreter may take to answer (the python option).
PROBE_TIMEOUT = 30
_PROBE_OUTPUT_LIMIT = 1 << 20
#: The most of a pyvenv.cfg that is read (a real one is a few hundred bytes).
_PYVENV_CFG_LIMIT = 1 << 16
_PYVENV_VERSION = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})(\.[0-9]{1,4})?\Z")


# ---------------------------------------------------------------------------
# Locating the environment
# ---------------------------------------------------------------------------

class Environment:
    """Where an environment keeps its packages and scripts.

    ``site_dirs``: directories that may hold ``.dist-info`` directories
    (purelib first); ``scripts_dir``: the ``bin/`` RECORD's ``../../../bin``
    entries point into, or None; ``root``: the environment's prefix, or None;
    ``python_version``: of the target interpreter when it was asked.
    """

    def __init__(self, site_dirs, scripts_dir=None, root=None, source=None, python_version=None):
        self.site_dirs = site_dirs
        self.scripts_dir = scripts_dir
        self.root = root
        self.source = source
        self.python_version = python_version

    def as_dict(self):
        return {"site_dirs": list(self.site_dirs), "scripts_dir": self.scripts_dir,
                "root": self.root, "source": self.source}


def _default_run(argv, timeout=PROBE_TIMEOUT):
    """Run ``argv`` (a list, no shell) with :func:`bounded.run_bounded`: its own session, killed whole after
    ``timeout`` seconds, at most 1 MiB of each output read.  Returns ``(rc, stdout, stderr)``; raises
    :class:`subprocess.TimeoutExpired` when the deadline passed, OSError when it could not be started."""
    # imported here: only the python option runs a probe (AnsiballZ still ships it)
    from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded
    rc, out, err = bounded.run_bounded(argv, timeout, max_output=_PROBE_OUTPUT_LIMIT)
    if bounded.timed_out(rc, err):
        raise subprocess.TimeoutExpired(argv, timeout)
    if bounded.not_started(rc, err):
        raise OSError(err)
    return rc, out, err


def probe_argv(python):
    """The list-argument command that asks ``python`` for its install paths:
    isolated (``-I``) and without the site module (``-S``), so no ``.pth``
    file, sitecustomize or usercustomize of the target environment runs."""
    return [python, "-I", "-S", "-c", _PROBE]


def parse_probe(python, rc, out, err):
    """Turn the probe's output into an :class:`Environment`."""
    if rc != 0:
        raise IntegrityError(
            "The Python interpreter %s could not report its site-packages (exit code %s: %s). "
            "Check that it runs, or give the venv or site_packages option instead."
            % (python, rc, (err or out or "no output").strip()[-300:]))
    data = None
    for line in reversed((out or "").strip().splitlines()):
        try:
            data = json.loads(line)
            break
        except ValueError:
            continue
    if not isinstance(data, dict) or not data.get("purelib"):
        raise IntegrityError(
            "The Python interpreter %s answered the site-packages query with something that is "
            "not the expected JSON (%r). Give the venv or site_packages option instead."
            % (python, (out or "")[-200:]))
    site_dirs = [data["purelib"]]
    seen = set([os.path.realpath(data["purelib"])])
    for path in [data.get("platlib")] + list(data.get("site") or []):
        if path and os.path.isdir(path) and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            site_dirs.append(path)
    return Environment(site_dirs, data.get("scripts"), data.get("prefix"),
                       "python:%s" % python, data.get("version"))


def venv_of_interpreter(python):
    """The :class:`Environment` of the venv interpreter ``python``, read from
    the venv's files without running anything, or None when they leave any
    doubt (then the interpreter is asked, :func:`probe_argv`).

    No doubt means: a ``pyvenv.cfg`` beside the interpreter or one directory
    up (where the interpreter itself, and the probe, look for it) gives one
    version X.Y (``version`` or ``version_info``); the interpreter, its links
    resolved, is a file named ``pythonX.Y``; the venv's only ``lib*``
    entries are ``lib`` and ``lib64``, ``lib`` holds exactly one ``python*``
    entry, ``pythonX.Y``, with a ``site-packages`` directory, and ``lib64``
    holds no other one (it is usually a link to ``lib``).  Then the probe
    would answer the same: site-packages ``<venv>/lib/pythonX.Y/site-packages``
    (the venv scheme, and posix_prefix before Python 3.11), scripts
    ``<venv>/bin``.
    """
    here = os.path.dirname(os.path.abspath(python))
    prefix = None
    for candidate in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(candidate, "pyvenv.cfg")):
            prefix = candidate
            break
    if prefix is None:
        return None
    data = read_small(os.path.join(prefix, "pyvenv.cfg"), _PYVENV_CFG_LIMIT + 1)
    if data is None or len(data) > _PYVENV_CFG_LIMIT:
        return None
    versions = set()
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in ("version", "version_info"):
            match = _PYVENV_VERSION.match(value.strip())
            if match is None:
                return None
            versions.add((match.group(1) + "." + match.group(2), value.strip()))
    if len(set(v[0] for v in versions)) != 1:
        return None
    short, full = sorted(versions)[-1]
    real = os.path.realpath(python)
    if os.path.basename(real) != "python" + short or not os.path.isfile(real):
        return None
    try:
        libs = [name for name in os.listdir(prefix) if name.startswith("lib")]
        in_lib = [name for name in os.listdir(os.path.join(prefix, "lib")) if name.startswith("python")]
    except OSError:
        return None
    site = os.path.join(prefix, "lib", "python" + short, "site-packages")
    if not set(libs) <= set(("lib", "lib64")) or in_lib != ["python" + short] or not os.path.isdir(site):
        return None
    if "lib64" in libs:
        lib64 = os.path.join(prefix, "lib64")
        try:
            in_lib64 = [name for name in os.listdir(lib64) if name.startswith("python")]
        except OSError:
            return None
        if in_lib64 and (in_lib64 != ["python" + short]
                         or os.path.realpath(os.path.join(lib64, in_lib64[0])) != os.path.realpath(os.path.dirname(site))):
            return None
    return Environment([site], os.path.join(prefix, "bin"), prefix, "python:%s" % python,
                       full if full.count(".") == 2 else None)


def venv_site_dirs(venv):
    """The site-packages directories of a venv (lib and lib64, each pythonX.Y), links counted once."""
    found = []
    for lib in ("lib", "lib64"):
        base = os.path.join(venv, lib)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            if name.startswith("python"):
                candidate = os.path.join(base, name, "site-packages")
                if os.path.isdir(candidate):
                    real = os.path.realpath(candidate)
                    if real not in [os.path.realpath(f) for f in found]:
                        found.append(candidate)
    return found


def _guess_scripts_dir(site_packages):
    """``<prefix>/bin`` for ``<prefix>/lib*/python*/{site,dist}-packages``, as
    given (a linked site-packages keeps its environment) or else resolved."""
    for path in (os.path.abspath(site_packages), os.path.realpath(site_packages)):
        pyver = os.path.dirname(path)
        lib = os.path.dirname(pyver)
        if os.path.basename(pyver).startswith("python") and os.path.basename(lib) in ("lib", "lib64"):
            root = os.path.dirname(lib)
            return os.path.join(root, "bin"), root
    return None, None


def locate_environment(python=None, venv=None, site_packages=None, run_command=None, timeout=PROBE_TIMEOUT):
    """Find site-packages and ``bin/`` from exactly one of the three inputs.

    ``python`` of a venv whose files leave no doubt is not run at all
    (:func:`venv_of_interpreter`); otherwise it is run as a list-argument
    subprocess (``run_command(argv) -> (rc, stdout, stderr)``; default
    :func:`bounded.run_bounded`) so the target interpreter may differ from
    the one running this code.  It is killed after ``timeout`` seconds.  A
    caller that gives ``run_command`` always gets the interpreter asked.
    """
    given = [n for n, v in (("python", python), ("venv", venv), ("site_packages", site_packages)) if v]
    if len(given) != 1:
        raise IntegrityError("Give exactly one of python, venv or site_packages (got %s)."
                             % (", ".join(given) or "none"))
    if python:
        if not os.path.isfile(python) or not os.access(python, os.X_OK):
            raise IntegrityError(
                "The Python interpreter %s does not exist or is not executable on this host. "
                "Point python at the environment's interpreter (for example /root/ml-env/bin/python)."
                % python)
        if run_command is None:
            located = venv_of_interpreter(python)
            if located is not None:
                return located
        try:
            if run_command is None:
                rc, out, err = _default_run(probe_argv(python), timeout)
            else:
                rc, out, err = run_command(probe_argv(python))
        except subprocess.TimeoutExpired:
            raise IntegrityError(
                "The Python interpreter %s did not report its site-packages within %s seconds (python_timeout) "
                "and was stopped; nothing was checked. It was run with -I -S (no site hooks); check that it starts, "
                "or give the venv or site_packages option instead." % (python, timeout))
        except (OSError, subprocess.SubprocessError) as exc:
            raise IntegrityError("Could not run the Python interpreter %s: %s." % (python, exc))
        return parse_probe(python, rc, out, err)
    if venv:
        if not os.path.isdir(venv):
            raise IntegrityError("The virtual environment %s does not exist or is not a directory." % venv)
        dirs = venv_site_dirs(venv)
        if not dirs:
            raise IntegrityError(
                "No lib/python*/site-packages directory was found in the virtual environment %s. "
                "Is it a virtual environment? Give site_packages or python instead." % venv)
        return Environment(dirs, os.path.join(venv, "bin"), venv, "venv:%s" % venv)
    scripts, root = _guess_scripts_dir(site_packages)
    return Environment([site_packages], scripts, root, "site_packages:%s" % site_packages)
