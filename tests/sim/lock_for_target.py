# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A fleet lock for another Python or platform, for the tests of the refusal.

Reads LOCK (a lock this collection made) and writes OUT: the same pins and
hashes under a header that names another target, rendered (fingerprint and
digest) by the collection's own lockfile code, as the uv_lock lookup writes
a lock made with ``python_version``/``python_platform`` for that target. A
lock edited by hand is refused for its digest; this one is refused only for
not fitting the hosts, which is what the tests check.

    python3 lock_for_target.py LOCK OUT [--python-version 3.12] [--python-platform aarch64-manylinux_2_28]
"""

import argparse
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile  # noqa: E402  pylint: disable=wrong-import-position


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("lock")
    parser.add_argument("out")
    parser.add_argument("--python-version")
    parser.add_argument("--python-platform")
    args = parser.parse_args(argv)
    if not (args.python_version or args.python_platform):
        parser.error("give --python-version or --python-platform (or both)")
    with open(args.lock, encoding="utf-8") as handle:
        text = handle.read(lockfile.MAX_BYTES + 1)
    parsed = lockfile.parse_lock(text, where=args.lock)
    meta = dict(parsed["meta"])
    if args.python_version:
        meta["python_version"] = args.python_version
    if args.python_platform:
        meta["python_platform"] = args.python_platform
    lines = text.split("\n")
    body = "\n".join(line for line in lines[1:] if not line.startswith("# ") or line.startswith("    #"))
    out = lockfile.render_lock(meta, body, where=args.lock)
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
