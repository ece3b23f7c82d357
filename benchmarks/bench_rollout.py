# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout and audit playbooks' speed targets, measured on a simulated fleet.

    .venv/bin/python benchmarks/bench_rollout.py [--hosts 8] [--rollout-hosts 3] [--load-seconds 20]
                                                 [--keep] [--strict]

Run `scripts/bootstrap.sh` once first (the host image and the wheelhouse).
The script makes its own fleet of --hosts dirty simulated hosts (podman
containers bench-gpu-1..N, through scripts/sim_fleet.sh, with the
tests/sim/inventory group_vars), then, with scripts/lib.sh's environment:

1. the audit of 1 host and the audit of all N hosts (read-only; each twice,
   the faster run counts), as an operator runs them (ansible-playbook's own
   start included);
2. the rollout of the first --rollout-hosts hosts (canary, then batches as
   tests/sim/inventory says), the stand-in loading --load-seconds;
3. the same rollout again on the now converged hosts.

Both rollouts leave out the benchmark step (rollout_benchmark=never), which
would add about a minute per restarted host to the first one only.

and prints each figure next to its target:

    downtime per host (stop to ready)    <= 1.15 x the stand-in's load time
    second rollout, converged fleet      0 changed, <= 40% of the first's wall time
    audit of 8 hosts                     <= 2.5 x the audit of 1 host

The downtime comes from the rollout's summary.json (measured on each host
by the cutover from the stop to ready); the wall times are the
ansible-playbook runs'. The hosts are removed at the end unless --keep.
--strict exits 1 when a target is missed.
"""

from __future__ import absolute_import, division, print_function

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOWNTIME_RATIO = 1.15
SECOND_ROLLOUT_SHARE = 0.40
AUDIT_RATIO = 2.5


def lib_environment():
    """The environment scripts/lib.sh sets up (venv on PATH, CONTAINERS_CONF, ANSIBLE_CONFIG, ...)."""
    lib = os.path.join(REPO, "scripts", "lib.sh")
    out = subprocess.run(["bash", "-c", 'source "$1" >/dev/null && env -0', "lib", lib],
                         stdout=subprocess.PIPE, check=True).stdout
    env = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    image_file = os.path.join(env["GPUFLEET_CACHE"], "host-image")
    if not os.path.exists(image_file) and not env.get("GPUFLEET_HOST_IMAGE"):
        sys.exit("no host image: run scripts/bootstrap.sh first")
    env.setdefault("GPUFLEET_HOST_IMAGE", open(image_file).read().strip())
    return env


def write_inventory(directory, hosts):
    os.makedirs(directory)
    with open(os.path.join(directory, "hosts.yml"), "w") as f:
        f.write("---\n# bench_rollout.py's simulated fleet\nall:\n  children:\n    vllm_fleet:\n      hosts:\n")
        for name in hosts:
            f.write("        %s:\n" % name)
    os.symlink(os.path.join(REPO, "tests", "sim", "inventory", "group_vars"), os.path.join(directory, "group_vars"))


def playbook(env, inventory, name, limit, extra, log):
    """Run a playbook; return (wall seconds, total changed over the recap)."""
    command = ["ansible-playbook", "-i", inventory, os.path.join(REPO, "playbooks", name), "--limit",
               ",".join(limit + ["localhost"]), "-e", json.dumps(extra)]
    start = time.monotonic()
    proc = subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - start
    text = proc.stdout.decode(errors="replace")
    with open(log, "w") as f:
        f.write(text)
    if proc.returncode != 0:
        sys.stderr.write(text[-5000:])
        sys.exit("%s failed (exit status %d); the whole log is %s" % (name, proc.returncode, log))
    changed = sum(int(n) for n in re.findall(r"changed=(\d+)", text.split("PLAY RECAP")[-1]))
    return elapsed, changed


def summary(report_dir):
    found = sorted(glob.glob(os.path.join(report_dir, "rollout-*", "summary.json")))
    with open(found[-1]) as f:
        return json.load(f)["hosts"]


def verdict(ok):
    return "ok" if ok else "MISSED"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=int, default=8, help="hosts of the audit fleet (default 8)")
    parser.add_argument("--rollout-hosts", type=int, default=3, help="hosts rolled out (default 3, the demo's)")
    parser.add_argument("--load-seconds", type=float, default=20.0,
                        help="the stand-in's load time (default 20, the demo's)")
    parser.add_argument("--keep", action="store_true", help="leave the hosts and the logs")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    if not 1 <= args.rollout_hosts <= args.hosts:
        parser.error("--rollout-hosts must be between 1 and --hosts")

    env = lib_environment()
    work = tempfile.mkdtemp(prefix="bench-rollout-")
    hosts = ["bench-gpu-%d" % (i + 1) for i in range(args.hosts)]
    inventory = os.path.join(work, "inventory")
    write_inventory(inventory, hosts)
    fleet_env = dict(env, GPUFLEET_SIM_HOSTS=" ".join(hosts), GPUFLEET_SIM_INVENTORY=inventory)
    fleet = os.path.join(REPO, "scripts", "sim_fleet.sh")
    extra = {
        "rollout_report_dir": os.path.join(work, "reports"),
        "audit_report_dir": os.path.join(work, "reports"),
        "service_environment": {"VLLM_STANDIN_LOAD_SECONDS": "%g" % args.load_seconds,
                                "VLLM_STANDIN_VENV": "{{ fleet_current_link }}"},
        "service_load_timeout": int(args.load_seconds * 3 + 60),
        # the benchmark step (about a minute per restarted host here) would pad
        # the first rollout's wall time and flatter the second's share
        "rollout_benchmark": "never",
    }
    print("== %d dirty simulated hosts (%s)" % (args.hosts, work), flush=True)
    t0 = time.monotonic()
    subprocess.run([fleet, "reset"], env=fleet_env, check=True, stdout=subprocess.DEVNULL)
    print("   ready after %.0f s" % (time.monotonic() - t0), flush=True)
    try:
        audit = {}
        for label, limit in (("1", hosts[:1]), (str(args.hosts), hosts)):
            runs = [playbook(env, inventory, "audit.yml", limit, extra, os.path.join(work, "audit-%s-%d.log" % (
                label, i)))[0] for i in range(2)]
            audit[label] = min(runs)
            print("== audit of %s host(s): %s s" % (label, ", ".join("%.1f" % r for r in runs)), flush=True)

        targets = hosts[:args.rollout_hosts]
        first, first_changed = playbook(env, inventory, "rollout.yml", targets, extra,
                                        os.path.join(work, "rollout-1.log"))
        rows = summary(extra["rollout_report_dir"])
        print("== first rollout of %d host(s): %.1f s, %d changed" % (len(targets), first, first_changed), flush=True)
        second, second_changed = playbook(env, inventory, "rollout.yml", targets, extra,
                                          os.path.join(work, "rollout-2.log"))
        rows2 = summary(extra["rollout_report_dir"])
        print("== second rollout: %.1f s, %d changed" % (second, second_changed), flush=True)
    finally:
        if not args.keep:
            subprocess.run([fleet, "down"], env=fleet_env, check=False)

    downtimes = [(r["host"], r["downtime_s"], r.get("load_s")) for r in rows if r.get("downtime_s") is not None]
    worst = max(down for dummy, down, dummy in downtimes) if downtimes else None
    results = []
    if worst is None:
        results.append(("downtime per host (stop to ready)", "no host restarted", "", False))
    else:
        ratio = worst / args.load_seconds
        measured = "%.1f s = %.3f x the %g s load" % (worst, ratio, args.load_seconds)
        reference = "<= %.2f x (%.1f s)" % (DOWNTIME_RATIO, DOWNTIME_RATIO * args.load_seconds)
        results.append(("downtime per host (stop to ready), worst", measured, reference, ratio <= DOWNTIME_RATIO))
    share = second / first
    restarted = [r["host"] for r in rows2 if r.get("downtime_s") is not None]
    results.append(("second rollout, converged fleet", "%.1f s = %.0f%% of %.1f s, %d changed%s" % (
        second, 100 * share, first, second_changed, (", restarted: " + ", ".join(restarted)) if restarted else ""),
        "<= %.0f%%, 0 changed" % (100 * SECOND_ROLLOUT_SHARE),
        share <= SECOND_ROLLOUT_SHARE and second_changed == 0 and not restarted))
    audit_ratio = audit[str(args.hosts)] / audit["1"]
    results.append(("audit of %d hosts vs 1 host" % args.hosts, "%.1f s vs %.1f s = %.2f x" % (
        audit[str(args.hosts)], audit["1"], audit_ratio), "<= %.1f x" % AUDIT_RATIO, audit_ratio <= AUDIT_RATIO))

    print()
    print("per host: downtime (s), of which the stand-in's load (s)")
    for host, down, load in downtimes:
        print("  %-12s %6.1f  %6s" % (host, down, "%.1f" % load if load is not None else "-"))
    print()
    print("%-44s %-48s %-22s %s" % ("target", "measured", "reference", ""))
    for name, measured, reference, ok in results:
        print("%-44s %-48s %-22s %s" % (name, measured, reference, verdict(ok)))
    if args.keep:
        print("\nlogs and reports: %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    if args.strict and not all(result[3] for result in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
