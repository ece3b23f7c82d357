# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers of the reinstall scenario's tests: an independent RECORD check run
on the host (standard library only, not the collection's module), JSON
records written by side_effect.yml."""

import json

TEST_DIR = "/var/tmp/reinstall-test"
ADOPTED = "/root/ml-env"
UNIT = "vllm-kimi-k25"
UV_CACHE = "/root/.cache/uv"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
# strings only the operators' hand patches contain (tests/sim/dirty/make_dirty_vllm.py)
PATCH_MARKERS = ("_nomla_debug", "_embed_debug_saved", "_MINIMAX_SKIP_SUFFIXES")

RECORD_CHECK = r"""
import base64, csv, glob, hashlib, json, os, sys
venv = sys.argv[1]
site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
dist = glob.glob(os.path.join(site, "vllm-*.dist-info"))
out = {"site": site, "dist_infos": [os.path.basename(d) for d in dist], "ok": 0, "bad": [], "linked": 0}
with open(os.path.join(dist[0], "RECORD"), newline="") as f:
    for row in csv.reader(f):
        if not row or not row[1]:
            continue
        path = os.path.normpath(os.path.join(site, row[0]))
        algo, _, want = row[1].partition("=")
        try:
            with open(path, "rb") as g:
                got = base64.urlsafe_b64encode(hashlib.new(algo, g.read()).digest()).rstrip(b"=").decode()
        except OSError as e:
            out["bad"].append([row[0], str(e)])
            continue
        if got == want:
            out["ok"] += 1
        else:
            out["bad"].append([row[0], "hash differs"])
        if path.startswith(site) and os.lstat(path).st_nlink > 1:
            out["linked"] += 1
print(json.dumps(out))
"""


def record_check(host, venv):
    """Every file RECORD lists, hashed on the host: ok count, mismatches, files with more than one link."""
    return json.loads(host.check_output("/usr/bin/python3 -c %s %s", RECORD_CHECK, venv))


def read_json(host, name):
    return json.loads(host.file(TEST_DIR + "/" + name).content_string)


def site_packages(host, venv):
    return host.check_output("ls -d %s/lib/python3*/site-packages", venv).strip()


def cache_files_with(host, marker):
    """Files in uv's cache that contain MARKER."""
    out = host.run("grep -rl --include=*.py -- %s %s", marker, UV_CACHE)
    assert out.rc in (0, 1), out.stderr
    return [ln for ln in out.stdout.splitlines() if ln]
