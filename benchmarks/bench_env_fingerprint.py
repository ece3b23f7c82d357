# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Time and memory of env_fingerprint_info's check, in-process, on real environments.

    python benchmarks/bench_env_fingerprint.py [--venv DIR ...] [--repeat N] [--sha256sum]

Without --venv it measures two environments: the benchmark environment
($GPUFLEET_BENCH_ENV: vLLM with all its dependencies, about 9 GB) when it
exists, and vLLM alone (the wheel from $GPUFLEET_WHEELHOUSE installed with uv,
--no-deps, into a temporary venv, removed afterwards).  For each: one warm-up
call (fills the page cache), then --repeat timed calls with ``verify`` (every
RECORD-listed file hashed) and --repeat without (metadata only), each in a
fresh child process so its peak resident memory is the check's own; the
distributions, files, bytes, the not-pristine ones and the load average are
printed.  --sha256sum also times ``sha256sum`` over the same files (one
process per 500 files) for comparison.  Warm page cache only: the numbers are
what a second audit of a host costs, not a cold first read from disk.
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
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "gpufleet-vllm")

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.vllm.plugins.module_utils import environment
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity import fingerprint
venv, verify = sys.argv[2], sys.argv[3] == "1"
env = environment.locate_environment(venv=venv)
started = time.perf_counter()
cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
result = fingerprint.fingerprint_environment(env, verify=verify, timeout=3600)
wall = time.perf_counter() - started
cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
print(json.dumps({"wall": wall, "cpu": cpu, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "count": result["count"], "files": result["files_checked"], "fingerprint": result["fingerprint"],
                  "not_pristine": result["not_pristine"], "site_dirs": result["environment"]["site_dirs"]}))
"""


def child(venv, verify):
    out = subprocess.run([sys.executable, "-c", CHILD, COLLECTIONS, venv, "1" if verify else "0"],
                         stdout=subprocess.PIPE, check=True).stdout
    return json.loads(out)


def find_uv():
    candidate = os.path.join(os.path.dirname(sys.executable), "uv")
    return candidate if os.access(candidate, os.X_OK) else shutil.which("uv")


def install_vllm_only(tmp):
    house = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.join(CACHE, "wheelhouse")
    wheels = sorted(glob.glob(os.path.join(house, "vllm-*.whl")))
    uv = find_uv()
    if not uv or not wheels:
        return None
    venv = os.path.join(tmp, "vllm-only")
    env = dict(os.environ, UV_OFFLINE="1", UV_NO_PROGRESS="1")
    subprocess.run([uv, "venv", "-q", venv, "--python", sys.executable], check=True, env=env)
    subprocess.run([uv, "pip", "install", "-q", "--no-deps", "--link-mode=hardlink", "--cache-dir",
                    os.path.join(tmp, "uv-cache"), "-p", os.path.join(venv, "bin", "python"), wheels[-1]],
                   check=True, env=env)
    return venv


def listed_files(site_dirs):
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import read_record
    files = []
    size = 0
    for site in site_dirs:
        for record in glob.glob(os.path.join(site, "*.dist-info", "RECORD")):
            rows, dummy = read_record(record)
            for row in rows:
                if row.digest is not None:
                    path = os.path.normpath(os.path.join(site, row.path))
                    if os.path.isfile(path) and not os.path.islink(path):
                        files.append(path)
                        size += row.size or 0
    return files, size


def sha256sum_seconds(files):
    tool = shutil.which("sha256sum")
    if not tool:
        return None
    start = time.perf_counter()
    for i in range(0, len(files), 500):
        subprocess.run([tool] + files[i:i + 500], stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def measure(label, venv, repeat, with_sha256sum):
    load = os.getloadavg()[0]
    child(venv, True)      # warm-up: the page cache
    runs = [child(venv, True) for dummy in range(repeat)]
    meta = [child(venv, False) for dummy in range(repeat)]
    best = min(runs, key=lambda r: r["wall"])
    files, size = listed_files(best["site_dirs"])
    print("%s (%s): %d distributions, %d files checked, %.2f GB listed" % (
        label, venv, best["count"], best["files"], size / 1e9))
    print("  verify: best %.2f s of %d (all: %s), CPU %.2f s, peak RSS %d MB" % (
        best["wall"], repeat, ", ".join("%.2f" % r["wall"] for r in runs), best["cpu"], best["maxrss_kb"] // 1024))
    print("  metadata only (verify: false): best %.3f s, peak RSS %d MB" % (
        min(r["wall"] for r in meta), min(r["maxrss_kb"] for r in meta) // 1024))
    if with_sha256sum:
        seconds = sha256sum_seconds(files)
        if seconds:
            print("  sha256sum over the same %d files: %.2f s (%.1fx the verify)" % (len(files), seconds, seconds / best["wall"]))
    print("  fingerprint %s; not pristine: %s" % (best["fingerprint"][:19], "; ".join(
        "%s %s (%s)" % (i["name"], i["version"], i["reason"][:120]) for i in best["not_pristine"]) or "none"))
    print("  load average %.1f at the start, %.1f at the end (2 cores shared with other work)" % (load, os.getloadavg()[0]))


def main():
    parser = argparse.ArgumentParser(description="Time and memory of env_fingerprint_info's check, in-process.")
    parser.add_argument("--venv", action="append", help="an environment to measure (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sha256sum", action="store_true")
    args = parser.parse_args()
    if args.venv:
        for venv in args.venv:
            measure("environment", venv, args.repeat, args.sha256sum)
        return
    bench = os.environ.get("GPUFLEET_BENCH_ENV") or os.path.join(CACHE, "bench-env")
    if os.path.isdir(bench):
        measure("vLLM with all its dependencies", bench, args.repeat, args.sha256sum)
    tmp = tempfile.mkdtemp(prefix="bench-fingerprint-")
    try:
        venv = install_vllm_only(tmp)
        if venv:
            measure("vLLM alone", venv, args.repeat, args.sha256sum)
        else:
            print("vLLM alone: skipped (needs uv and the vLLM wheel in the wheelhouse)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
