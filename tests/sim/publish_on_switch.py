# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Publish a newer build to the test world's index in the middle of a rollout.

The rollout scenario's converge rolls the fleet out batch by batch; a fleet
lock is resolved once, before the first batch. This watcher, started in the
background before the rollout, waits until the environment link of one
simulated host (a podman container) changes (its batch switched it to the
new environment), then publishes WHEEL with ``scripts/index.sh publish``: the
index now offers a newer build than the lock, while the later batches have
not staged yet. It writes MARKER (JSON: when it published, what the link
was and became) and exits. The verifier checks that the later batches
staged after that time and still hold exactly the lock.

Bounded: one ``podman exec`` at a time with its own timeout, a poll every
half second, and a deadline; at the deadline it writes no marker and exits
with 3. Its pid is in MARKER.pid while it runs, for whoever stops it.

    python3 publish_on_switch.py --container rollout-2 --link /opt/vllm/current \\
        --wheel NEWER.whl --marker FILE [--deadline SECONDS]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INDEX_SH = os.path.join(HERE, "..", "..", "scripts", "index.sh")
POLL = 0.5
EXEC_TIMEOUT = 15
_CONTAINER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
_LINK = re.compile(r"/[A-Za-z0-9_./-]{1,255}\Z")


def read_link(container, link):
    """Where LINK points in CONTAINER ('' when it does not exist or podman does not answer in time)."""
    try:
        result = subprocess.run(["podman", "exec", container, "readlink", link], capture_output=True, text=True,
                                timeout=EXEC_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def write_atomically(path, text):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--container", required=True)
    parser.add_argument("--link", required=True)
    parser.add_argument("--wheel", required=True)
    parser.add_argument("--marker", required=True)
    parser.add_argument("--deadline", type=int, default=900)
    args = parser.parse_args(argv)
    if not _CONTAINER.match(args.container):
        parser.error("--container %r is not a container name" % args.container)
    if not _LINK.match(args.link) or ".." in args.link.split("/"):
        parser.error("--link %r is not an absolute path" % args.link)
    if not os.path.isfile(args.wheel) or not args.wheel.endswith(".whl"):
        parser.error("--wheel %r is not a wheel file" % args.wheel)
    if not 1 <= args.deadline <= 3600:
        parser.error("--deadline must be 1 to 3600 seconds")
    write_atomically(args.marker + ".pid", "%d\n" % os.getpid())
    try:
        end = time.monotonic() + args.deadline
        before = read_link(args.container, args.link)
        while time.monotonic() < end:
            now = read_link(args.container, args.link)
            if before and now and now != before:
                published = subprocess.run([INDEX_SH, "publish", args.wheel], capture_output=True, text=True,
                                           timeout=120, check=False)
                if published.returncode != 0:
                    sys.stderr.write("publish failed: %s\n" % published.stderr[-2000:])
                    return 2
                write_atomically(args.marker, json.dumps({
                    "published_at": time.time(), "container": args.container, "link": args.link,
                    "before": before, "after": now, "wheel": os.path.basename(args.wheel),
                    "path": published.stdout.strip()}) + "\n")
                return 0
            if not before:
                before = now
            time.sleep(POLL)
        sys.stderr.write("%s's %s did not change in %d s: nothing published\n"
                         % (args.container, args.link, args.deadline))
        return 3
    finally:
        try:
            os.unlink(args.marker + ".pid")
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
