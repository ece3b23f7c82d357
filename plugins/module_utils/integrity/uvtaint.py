# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""uv cache taint: changed installed files that share an inode with uv's cache.

uv installs by hard-linking from its cache, so an in-place edit of an
installed file edits the cached copy too and a plain reinstall can put it
back.  The caches are only listed and ``lstat``-ed, never opened.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

_MAX_ARCHIVE_ENTRIES = 100000


# ---------------------------------------------------------------------------
# uv cache taint
# ---------------------------------------------------------------------------

def default_uv_cache_dirs(environ=None):
    """uv cache directories to search: ``$UV_CACHE_DIR``, ``$XDG_CACHE_HOME/uv``,
    ``~/.cache/uv`` of the user running this code (existing ones only)."""
    environ = os.environ if environ is None else environ
    candidates = []
    if environ.get("UV_CACHE_DIR"):
        candidates.append(environ["UV_CACHE_DIR"])
    if environ.get("XDG_CACHE_HOME"):
        candidates.append(os.path.join(environ["XDG_CACHE_HOME"], "uv"))
    candidates.append(os.path.join(os.path.expanduser("~"), ".cache", "uv"))
    found = []
    for path in candidates:
        if os.path.isdir(path) and os.path.realpath(path) not in [os.path.realpath(f) for f in found]:
            found.append(path)
    return found


def _archive_entries(cache_dirs, dist_info_name):
    """Archive entries in the uv caches that hold ``dist_info_name``."""
    entries = []
    seen = 0
    for cache in cache_dirs:
        try:
            tops = sorted(os.listdir(cache))
        except OSError:
            continue
        for top in tops:
            if not top.startswith("archive-v"):
                continue
            base = os.path.join(cache, top)
            try:
                with os.scandir(base) as it:
                    for item in it:
                        seen += 1
                        if seen > _MAX_ARCHIVE_ENTRIES:
                            return entries
                        if os.path.isdir(os.path.join(item.path, dist_info_name)):
                            entries.append(item.path)
            except OSError:
                continue
    return entries


def find_uv_taint(changed, cache_dirs, dist_info_name):
    """uv cache files sharing an inode with a changed installed file.

    ``changed``: list of (relative path, lstat result).  Returns
    ``(tainted, hardlinked_elsewhere)`` lists of dicts.
    """
    tainted = []
    elsewhere = []
    candidates = [(rel, st) for rel, st in changed if st is not None and st.st_nlink > 1]
    if not candidates:
        return tainted, elsewhere
    entries = _archive_entries(cache_dirs, dist_info_name)
    for rel, st in candidates:
        hit = None
        for entry in entries:
            cache_file = os.path.join(entry, *rel.split("/"))
            try:
                cst = os.lstat(cache_file)
            except OSError:
                continue
            if cst.st_ino == st.st_ino and cst.st_dev == st.st_dev:
                hit = {"path": rel, "cache_file": cache_file, "cache_entry": entry, "links": st.st_nlink}
                break
        if hit:
            tainted.append(hit)
        else:
            elsewhere.append({"path": rel, "links": st.st_nlink})
    return tainted, elsewhere
