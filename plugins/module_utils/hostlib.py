# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Python libraries a module needs on the host: this interpreter's, else the collection's tools venv's.

The modules run with whatever Python the play gives them (often the host's
own, or a vLLM environment's).  The libraries they need beyond the standard
library (nvidia-ml-py's ``pynvml``, ``prometheus_client``) live in the
``host_tools`` role's venv.  :func:`load` imports one from this interpreter
and, when it has none, from the site-packages of given venvs -- one file
(``NAME.py``) or one package (``NAME/``), nothing else: the directory is
not added to ``sys.path`` and its ``.pth`` files are not run, so a dirty
environment's start-up hooks never run in the module.

Public API:

* :func:`load` -- ``(module, where)``; ``where`` is None for this
  interpreter's own module, else the file or package directory loaded.
* :func:`load_from` -- the same from the directories only.
* :func:`site_dirs_of` -- the site-packages directories of venvs.
* :class:`LibraryMissing` -- raised by :func:`load`: ``name``, ``text``
  (what was tried, as a phrase) and ``load_error`` (True when a copy was
  found but failed to load).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib
import importlib.util
import os
import sys

from ansible_collections.gpufleet.vllm.plugins.module_utils.environment import venv_site_dirs


class LibraryMissing(ImportError):
    """NAME could not be imported from this interpreter nor loaded from the given site-packages."""

    def __init__(self, name, text, load_error=False):
        super(LibraryMissing, self).__init__(text)
        self.name = name
        self.text = text
        self.load_error = load_error


def site_dirs_of(venvs):
    """The site-packages directories of the virtual environments VENVS, in order."""
    return [site for venv in venvs or () for site in venv_site_dirs(venv)]


def _exec(name, path, package_dir=None):
    locations = [package_dir] if package_dir else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=locations)
    module = importlib.util.module_from_spec(spec)
    # as the import system does: the module (and a package's submodules) look it up in sys.modules
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # pylint: disable=broad-except
        for loaded in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
            del sys.modules[loaded]
        raise LibraryMissing(name, "%s could not be loaded (%s: %s)" % (path, type(exc).__name__, exc), True)
    return module


def load_from(name, site_dirs, package=True):
    """NAME from the first of SITE_DIRS with ``NAME/__init__.py`` (only with PACKAGE) or ``NAME.py``.

    Returns (module, where) or None when no directory has it; raises
    :class:`LibraryMissing` (``load_error`` true) when the copy found fails
    to load.
    """
    for site in site_dirs or ():
        directory = os.path.join(site, name)
        init = os.path.join(directory, "__init__.py")
        if package and os.path.isfile(init):
            return _exec(name, init, directory), directory
        single = os.path.join(site, name + ".py")
        if os.path.isfile(single):
            return _exec(name, single), single
    return None


def load(name, site_dirs=(), package=True):
    """NAME from this interpreter, else from SITE_DIRS as :func:`load_from` finds it.

    Returns (module, where).  Raises :class:`LibraryMissing` whose text is
    the interpreter's import error when no directory has it, or says which
    copy failed to load.
    """
    try:
        return importlib.import_module(name), None
    except ImportError as exc:
        first = LibraryMissing(name, "cannot import %s (%s)" % (name, exc))
    found = load_from(name, site_dirs, package)
    if found is None:
        raise first
    return found
