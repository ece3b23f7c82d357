# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a copy of a fleet lock in which one package's sha256 is another
(its last hex digit changed), made again through the collection's own
lockfile.render_lock (fingerprint and digest computed anew), so the
collection reads the copy as a valid lock: to a host it is a lock whose wheel
the mirror no longer serves (what a tampered or overwritten mirror looks like
from the lock's side).

    tamper_lock.py LOCK OUTPUT PACKAGE
"""
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile, pkgnames  # noqa: E402


def main(lock, output, package):
    with open(lock, encoding="utf-8") as handle:
        text = handle.read()
    parsed = lockfile.parse_lock(text, where=lock)
    pin = parsed["packages"][pkgnames.canonical_name(package)]
    old = pin["hashes"][0]
    new = old[:-1] + ("0" if old[-1] != "0" else "1")
    assert text.count(old[len("sha256:"):]) == 1, "the hash is not on one line of the lock"
    # the body as uv wrote it (below the header: the magic line and one line per header key)
    body = "\n".join(text.splitlines()[1 + len(lockfile.HEADER_KEYS):]) + "\n"
    text = lockfile.render_lock(parsed["meta"], body.replace(old[len("sha256:"):], new[len("sha256:"):]), where=output)
    again = lockfile.parse_lock(text, where=output)
    assert again["packages"][pin["name"]]["hashes"][0] == new
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print("%s: %s %s -> %s" % (output, pin["name"], old, new))


if __name__ == "__main__":
    main(*sys.argv[1:])
