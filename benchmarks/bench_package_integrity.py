# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Speed and memory of the package_integrity verify call on the real vLLM wheel.

    python benchmarks/bench_package_integrity.py [--venv DIR] [--repeat N] [--workers N] [--no-sha256sum] [--strict]

Without --venv it installs the vLLM wheel from the wheelhouse
($GPUFLEET_WHEELHOUSE, default ~/.cache/gpufleet-vllm/wheelhouse) with uv,
--no-deps, into a temporary virtual environment (removed afterwards).

The verify calls run in a fresh child process, so that its peak resident
memory is the verify's own: one warm-up call (fills the page cache), then
--repeat timed calls.  Printed side by side with the targets of issue 3:

    verify, warm page cache      < 0.3 s
    peak memory (RSS)            < 100 MB

plus the CPU time per call and the floor it implies on this machine's cores
(a figure that does not depend on what else runs here), the SHA-256 rate of
one core, and `sha256sum` over the same files for reference.
--strict exits 1 when a target is missed.
"""

from __future__ import absolute_import, division, print_function

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
TARGET_SECONDS = 0.3
TARGET_MB = 100

CHILD = r"""
import hashlib, json, os, resource, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.vllm.plugins.module_utils import integrity
venv, repeat, workers = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) or None

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

first = integrity.verify(venv=venv, uv_cache_dirs=[], workers=workers)   # warm-up
walls, cpus = [], []
rss_verify = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(repeat):
    c0, t0 = cpu(), time.perf_counter()
    result = integrity.verify(venv=venv, uv_cache_dirs=[], workers=workers)
    walls.append(time.perf_counter() - t0)
    cpus.append(cpu() - c0)
rss_after_verify = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
block = os.urandom(8 << 20)
best = None
for _ in range(5):
    h, t0 = hashlib.sha256(), time.perf_counter()
    for _ in range(4):
        h.update(block)
    took = time.perf_counter() - t0
    best = took if best is None else min(best, took)
rate = 4 * len(block) / best
print(json.dumps({
    "pristine": result["pristine"], "files": result["counts"]["ok"],
    "walls": walls, "cpus": cpus, "maxrss_kb": max(rss_verify, rss_after_verify),
    "sha256_rate": rate, "site": result["site_packages"], "dist_info": result["dist_info"],
}))
"""


def find_uv():
    candidate = os.path.join(os.path.dirname(sys.executable), "uv")
    return candidate if os.access(candidate, os.X_OK) else shutil.which("uv")


def find_wheel():
    house = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(
        os.path.expanduser("~"), ".cache", "gpufleet-vllm", "wheelhouse")
    wheels = sorted(glob.glob(os.path.join(house, "vllm-*.whl")))
    return wheels[-1] if wheels else None


def install(tmp):
    uv, wheel = find_uv(), find_wheel()
    if not uv or not wheel:
        sys.exit("needs uv and the vLLM wheel in the wheelhouse (GPUFLEET_WHEELHOUSE); or pass --venv")
    venv = os.path.join(tmp, "venv")
    env = dict(os.environ, UV_OFFLINE="1", UV_NO_PROGRESS="1")
    subprocess.run([uv, "venv", "-q", venv, "--python", sys.executable], check=True, env=env)
    subprocess.run([uv, "pip", "install", "-q", "--no-deps", "--link-mode=hardlink",
                    "--cache-dir", os.path.join(tmp, "uv-cache"), "-p", os.path.join(venv, "bin", "python"), wheel],
                   check=True, env=env)
    return venv


def record_files(site, dist_info):
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.gpufleet.vllm.plugins.module_utils.record import read_record
    rows, dummy = read_record(os.path.join(dist_info, "RECORD"))
    files = [os.path.normpath(os.path.join(site, r.path)) for r in rows if r.digest is not None]
    return files, sum(r.size or 0 for r in rows)


def sha256sum_seconds(files):
    tool = shutil.which("sha256sum")
    if not tool:
        return None
    start = time.perf_counter()
    for i in range(0, len(files), 500):
        subprocess.run([tool] + files[i:i + 500], stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--venv", help="an existing virtual environment with vLLM installed")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--workers", type=int, default=0, help="hashing threads (default: the module's choice)")
    parser.add_argument("--no-sha256sum", action="store_true")
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()

    tmp = None
    try:
        if args.venv:
            venv = args.venv
        else:
            tmp = tempfile.mkdtemp(prefix="bench-integrity-")
            started = time.perf_counter()
            venv = install(tmp)
            print("installed the vLLM wheel --no-deps with uv in %.1f s" % (time.perf_counter() - started))
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        child = subprocess.run([sys.executable, "-c", CHILD, COLLECTIONS, venv, str(args.repeat), str(args.workers)],
                               stdout=subprocess.PIPE, check=True)
        data = json.loads(child.stdout.decode().strip().splitlines()[-1])
        files, total = record_files(data["site"], data["dist_info"])
        walls = sorted(data["walls"])
        cpu = sorted(data["cpus"])[len(data["cpus"]) // 2]
        best, median = walls[0], walls[len(walls) // 2]
        rss_mb = data["maxrss_kb"] / 1024.0
        n = cores()
        floor = total / (data["sha256_rate"] * n)

        def verdict(value, limit):
            return "OK" if value < limit else "OVER"
        print("files %d, %.0f MB, %d cores, load average %.2f at start, pristine=%s"
              % (data["files"], total / 1e6, n, load, data["pristine"]))
        print("%-38s %8s   %s" % ("", "measured", "target"))
        print("%-38s %7.3f s   < %.1f s  %s" % ("verify, warm cache, best of %d" % len(walls), best, TARGET_SECONDS,
                                                verdict(best, TARGET_SECONDS)))
        print("%-38s %7.3f s   < %.1f s  %s" % ("verify, warm cache, median", median, TARGET_SECONDS,
                                                verdict(median, TARGET_SECONDS)))
        print("%-38s %7.0f MB  < %d MB  %s" % ("peak memory (RSS of the process)", rss_mb, TARGET_MB,
                                               verdict(rss_mb, TARGET_MB)))
        print("%-38s %7.3f s   (CPU / %d cores = %.3f s on idle cores)" % ("CPU time per verify (median)", cpu, n, cpu / n))
        print("%-38s %7.2f GB/s per core; hashing alone needs %.3f s on %d cores" % (
            "SHA-256 rate here", data["sha256_rate"] / 1e9, floor, n))
        if not args.no_sha256sum:
            seconds = sha256sum_seconds(files)
            if seconds is not None:
                print("%-38s %7.3f s   (reference)" % ("sha256sum over the same files", seconds))
        missed = best >= TARGET_SECONDS or rss_mb >= TARGET_MB
        return 1 if (args.strict and missed) else 0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
