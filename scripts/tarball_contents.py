# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check that a built collection tarball holds the collection only.

    python scripts/tarball_contents.py dist/gpufleet-vllm-0.1.0.tar.gz

Every entry of the tarball must sit under one of the allowed places below
(what a user runs, reads or copies); anything else (tests, molecule,
scripts, benchmarks, caches, byte code, the repository's own tool settings)
is named, one line per unexpected entry (the outermost path outside the
allow-list, or a hidden or byte-code path anywhere) with its count, and
the exit status is 1. scripts/test.sh runs this in its build stage.
"""

import sys
import tarfile

# files at the top of the tarball (MANIFEST.json and FILES.json are written
# by ansible-galaxy from galaxy.yml)
ALLOWED_FILES = ("MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.rst")
# directories whose whole content belongs to the collection
ALLOWED_DIRS = ("plugins", "roles", "playbooks", "meta", "docs", "LICENSES", "changelogs", "inventories/example")
# never in a tarball, wherever they are (nor any hidden file or directory)
FORBIDDEN_PARTS = ("__pycache__",)
FORBIDDEN_SUFFIXES = (".pyc", ".pyo", ".retry", ".tar.gz")


def _parts(name):
    return [part for part in name.split("/") if part not in ("", ".")]


def _outside(parts):
    """None when the entry may ship, else (the outermost path outside the
    allow-list, whether that path is a directory)."""
    for index, part in enumerate(parts):
        if part in FORBIDDEN_PARTS or part.startswith("."):
            return "/".join(parts[:index + 1]), index + 1 < len(parts)
    path = "/".join(parts)
    if (len(parts) == 1 and path in ALLOWED_FILES) or any(
            # the directory itself, anything under it, or a parent on the way
            # to it (the "inventories" entry on the way to inventories/example)
            path == directory or path.startswith(directory + "/") or directory.startswith(path + "/")
            for directory in ALLOWED_DIRS):
        return (path, False) if parts[-1].endswith(FORBIDDEN_SUFFIXES) else None
    # the first level that is not on the way to an allowed place
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        if not any(d == prefix or d.startswith(prefix + "/") for d in ALLOWED_DIRS):
            return prefix, depth < len(parts)
    return path, False  # not reached: the whole path is on the way to an allowed place


def unexpected(names):
    """Unexpected entries of a tarball's name list, as {entry: count of names}.

    An entry is the outermost path outside the allow-list, with a trailing
    "/" when it is a directory ("tests/" for tests/unit/test_x.py,
    "inventories/local/" for its files; a name that ends in "/" is a
    directory), so a stray directory is one line however much it holds.
    """
    counts = {}
    directories = set()
    for name in names:
        parts = _parts(name)
        if not parts:
            continue
        outside = _outside(parts)
        if outside is None:
            continue
        entry, is_dir = outside
        counts[entry] = counts.get(entry, 0) + 1
        if is_dir or name.endswith("/"):
            directories.add(entry)
    return {(entry + "/" if entry in directories else entry): count for entry, count in counts.items()}


def report(found):
    lines = ["the collection tarball holds %d entr%s outside its allow-list (galaxy.yml build_ignore must leave them out):"
             % (len(found), "y" if len(found) == 1 else "ies")]
    for entry in sorted(found):
        count = found[entry]
        lines.append("  %s  (%d %s)" % (entry, count, "entry" if count == 1 else "entries"))
    lines.append("allowed: %s, and %s/" % (", ".join(ALLOWED_FILES), "/, ".join(ALLOWED_DIRS)))
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: %s COLLECTION.tar.gz\n" % argv[0])
        return 2
    try:
        with tarfile.open(argv[1], "r:gz") as tar:
            names = [member.name + "/" if member.isdir() else member.name for member in tar.getmembers()]
    except (OSError, tarfile.TarError) as exc:
        sys.stderr.write("cannot read the collection tarball %s: %s\n" % (argv[1], exc))
        return 2
    found = unexpected(names)
    if found:
        sys.stderr.write(report(found) + "\n")
        return 1
    print("%s: %d entries, all inside the allow-list" % (argv[1], len(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
