# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a listing of everything under the given roots (no file contents):
path, type, size, mtime (ns), inode, link count, mode, link target; one line
per entry, sorted. Two listings taken around a check-mode run must be equal.

    snapshot.py OUTPUT ROOT... [--exclude PATH]...
"""
import os
import stat
import sys


def main(argv):
    out, rest = argv[0], argv[1:]
    roots, excludes = [], []
    while rest:
        arg = rest.pop(0)
        if arg == "--exclude":
            excludes.append(rest.pop(0).rstrip("/"))
        else:
            roots.append(arg)
    lines = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in excludes]
            for name in [""] + sorted(dirnames + filenames):
                path = os.path.join(dirpath, name) if name else dirpath
                if path in excludes:
                    continue
                st = os.lstat(path)
                target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
                kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if target else "f"
                fields = (path, kind, st.st_size, st.st_mtime_ns, st.st_ino, st.st_nlink, st.st_mode, target)
                lines.append("%s %s %d %d %d %d %o %s" % fields)
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(sorted(set(lines))) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
