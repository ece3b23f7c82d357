# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The redesign's targets (issue 15), measured, beside the figures before it.

    python benchmarks/bench_layout.py                 # the layout (files only, a second)
    python benchmarks/bench_layout.py --rev 1098754   # the layout at another commit
    python benchmarks/bench_layout.py --run           # also the 3-host demo: reset, first and second rollout (~8 min)
    python benchmarks/bench_layout.py --logs DIR      # the demo figures from logs a --run kept (DIR/first.log ...)

The layout: lines of playbooks/rollout.yml and its multi-line Jinja
expressions, set_fact tasks in the roles and playbooks, tasks in the roles,
reinstall's entry task files, the largest file of module_utils, the parsers
of `systemctl show`, playbooks that import a role's private file.

The demo (--run, on the simulated fleet; scripts/demo.sh once first): the
hosts are made dirty again as scripts/demo.sh --reset does it (scripts/lib.sh
demo_fleet: the index up, scripts/sim_fleet.sh reset, the test world's
HAProxy restarted in front of them and waited for until every server serves;
no clients), then the
rollout runs twice as scripts/demo.sh runs it; printed lines and wall time
of each run, and the tasks per host (task results per host in the full log
the run kept in its report directory, in the default callback's format).
"""

from __future__ import absolute_import, division, print_function

import argparse
import glob
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Measured on main at 1098754 (before the redesign), 2026-12-04, on the
# 2-core test machine: the layout with --rev 1098754, the demo with the
# default callback (scripts/demo.sh then printed every task).
BEFORE = {
    "rollout.yml lines": 515,
    "multi-line Jinja in rollout.yml": 14,
    "set_fact in roles and playbooks": 54,
    "set_fact in roles": 40,
    "set_fact in playbooks": 14,
    "tasks in roles": 168,
    "reinstall entry task files": 9,
    "largest module_utils file (lines)": 1637,
    "parsers of systemctl show": 4,
    "private role files read by playbooks": 5,
    "demo: lines printed, first rollout": 1670,
    "demo: lines printed, second rollout": 560,
    "demo: tasks per host, first rollout": 198,
    "demo: tasks per host, second rollout": 103,
    "demo: first rollout (s)": 344.6,
    "demo: second rollout (s)": 86.1,
}
# The targets: (comparison, value); None where the target is "less than before".
TARGETS = {
    "rollout.yml lines": ("<=", 250),
    "multi-line Jinja in rollout.yml": ("<=", 0),
    "set_fact in roles and playbooks": ("<=", 54 // 2),
    "reinstall entry task files": ("<", 9),
    "parsers of systemctl show": ("<=", 1),
    "private role files read by playbooks": ("<=", 0),
    "demo: lines printed, first rollout": ("<=", 150),
    "demo: lines printed, second rollout": ("<=", 150),
    "demo: tasks per host, first rollout": ("<=", 80),
    "demo: tasks per host, second rollout": ("<=", 80),
    "demo: first rollout (s)": ("<", 344.6),
    "demo: second rollout (s)": ("<", 86.1),
}


class Tree(object):
    """The repository's files, in the work tree or at a commit."""

    def __init__(self, rev=None):
        self.rev = rev

    def files(self, pattern):
        if self.rev is None:
            return sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, pattern), recursive=True))
        out = subprocess.run(["git", "-C", REPO, "ls-tree", "-r", "--name-only", self.rev], check=True,
                             capture_output=True, text=True).stdout.split()
        rx = re.compile("^" + re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*") + "$")
        return sorted(p for p in out if rx.match(p))

    def read(self, path):
        if self.rev is None:
            with open(os.path.join(REPO, path), encoding="utf-8") as handle:
                return handle.read()
        return subprocess.run(["git", "-C", REPO, "show", "%s:%s" % (self.rev, path)], check=True,
                              capture_output=True, text=True).stdout


def multiline_jinja(text):
    """Block scalars (>-, |, ...) whose lines hold a Jinja expression or statement."""
    count, lines = 0, text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r":\s*[>|][-+]?\s*(#.*)?$", line):
            indent = len(line) - len(line.lstrip())
            body = []
            for nxt in lines[i + 1:]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                body.append(nxt)
            if len([b for b in body if b.strip()]) > 1 and re.search(r"\{\{|\{%", "\n".join(body)):
                count += 1
    return count


def layout(tree):
    def count(pattern, rx):
        return sum(len(re.findall(rx, tree.read(p))) for p in tree.files(pattern))

    set_fact = r"(?m)^\s*(?:- )?ansible\.builtin\.set_fact:"
    module_utils = [(len(tree.read(p).splitlines()), p) for p in tree.files("plugins/module_utils/**/*.py")]
    parsers = 0
    for pattern in ("plugins/**/*.py", "roles/**/*.yml", "playbooks/**/*.yml"):
        for path in tree.files(pattern):
            text = tree.read(path)
            # a `systemctl show` run whose output is parsed right there: an argv with "show" in Python,
            # [systemctl, show, ...] in a task file
            if path.endswith("module_utils/systemd.py"):
                continue
            parsers += 1 if re.search(r"""systemctl\w*,\s*["']show["']|\[systemctl,\s*show\b""", text) else 0
    parsers += 1 if tree.files("plugins/module_utils/systemd.py") else 0
    private = count("playbooks/**/*.yml", r"tasks_from:\s*_")
    return {
        "rollout.yml lines": len(tree.read("playbooks/rollout.yml").splitlines()),
        "multi-line Jinja in rollout.yml": multiline_jinja(tree.read("playbooks/rollout.yml")),
        "set_fact in roles and playbooks": count("roles/**/*.yml", set_fact) + count("playbooks/**/*.yml", set_fact),
        "set_fact in roles": count("roles/**/*.yml", set_fact),
        "set_fact in playbooks": count("playbooks/**/*.yml", set_fact),
        "tasks in roles": count("roles/*/tasks/*.yml", r"(?m)^\s*- name:"),
        "reinstall entry task files": len([p for p in tree.files("roles/reinstall/tasks/*.yml")
                                           if not os.path.basename(p).startswith("_")]),
        "largest module_utils file (lines)": max(module_utils)[0],
        "parsers of systemctl show": parsers,
        "private role files read by playbooks": private,
    }


RESULT = re.compile(r"^(ok|changed|skipping|fatal|failed|rescued|ignored): \[([^\]\s]+)")


def tasks_per_host(log):
    hosts = {}
    for line in log.splitlines():
        match = RESULT.match(line)
        if match:
            hosts[match.group(2)] = hosts.get(match.group(2), 0) + 1
    return max(hosts.values()) if hosts else None


def full_log(stdout_text):
    """The run's full log: the file the phases callback kept (its path is in the output), else the output itself."""
    match = re.search(r"(?i)full log: (\S+)", stdout_text)
    if match and os.path.isfile(match.group(1)):
        with open(match.group(1), encoding="utf-8", errors="replace") as handle:
            return handle.read()
    return stdout_text


def demo(out_dir):
    env = dict(os.environ)
    # as scripts/demo.sh runs it: the phases callback on the terminal, the full log in the run's report directory
    env.setdefault("ANSIBLE_STDOUT_CALLBACK", "gpufleet.vllm.phases")
    figures = {}
    lib = "source scripts/lib.sh && index_env && "
    # (the reset as scripts/demo.sh --reset does it, lib.sh's demo_fleet: the index up, the hosts dirty again, the
    # balancer restarted in front of them and every server serving through it; no clients)
    steps = [("reset", "demo_fleet reset"),
             ("first", "ansible-playbook -i ${GPUFLEET_INVENTORY:-tests/sim/inventory} playbooks/rollout.yml"),
             ("second", "ansible-playbook -i ${GPUFLEET_INVENTORY:-tests/sim/inventory} playbooks/rollout.yml")]
    for name, command in steps:
        start = time.monotonic()
        proc = subprocess.run(["bash", "-c", lib + command], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=1800, check=False)
        seconds = time.monotonic() - start
        with open(os.path.join(out_dir, name + ".log"), "w", encoding="utf-8") as handle:
            handle.write(proc.stdout + proc.stderr)
        with open(os.path.join(out_dir, name + ".time"), "w", encoding="utf-8") as handle:
            handle.write("%.1f %d\n" % (seconds, proc.returncode))
        if proc.returncode != 0:
            sys.exit("%s failed (exit %d); its output is in %s" % (name, proc.returncode, os.path.join(out_dir, name + ".log")))
    return logs(out_dir)


def logs(out_dir):
    figures = {}
    for name in ("first", "second"):
        with open(os.path.join(out_dir, name + ".log"), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        figures["demo: lines printed, %s rollout" % name] = len(text.splitlines())
        figures["demo: tasks per host, %s rollout" % name] = tasks_per_host(full_log(text))
        timing = os.path.join(out_dir, name + ".time")
        if os.path.isfile(timing):
            with open(timing, encoding="utf-8") as handle:
                figures["demo: %s rollout (s)" % name] = float(handle.read().split()[0])
        elif os.path.isfile(os.path.join(out_dir, "times")):
            # "first rc=0 383.1" lines
            with open(os.path.join(out_dir, "times"), encoding="utf-8") as handle:
                for line in handle:
                    words = line.split()
                    if len(words) == 3 and words[0] == name:
                        figures["demo: %s rollout (s)" % name] = float(words[2])
    return figures


def verdict(name, value):
    if name not in TARGETS or value is None:
        return ""
    op, limit = TARGETS[name]
    ok = value <= limit if op == "<=" else value < limit
    return "%s  (target %s %s)" % ("met    " if ok else "NOT MET", op, limit)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="measure the layout at this commit instead of the work tree")
    parser.add_argument("--run", action="store_true", help="also run the 3-host demo twice (about 8 minutes)")
    parser.add_argument("--logs", help="take the demo figures from the logs of an earlier --run in this directory")
    parser.add_argument("--out", default=os.path.join(REPO, "gpufleet-reports", "bench-layout"),
                        help="where --run keeps its logs (default: gpufleet-reports/bench-layout)")
    args = parser.parse_args()
    figures = layout(Tree(args.rev))
    if args.run:
        os.makedirs(args.out, exist_ok=True)
        figures.update(demo(args.out))
    elif args.logs:
        figures.update(logs(args.logs))
    print("%-40s %10s %10s  %s" % ("", "before", "now", ""))
    for name, before in BEFORE.items():
        value = figures.get(name)
        shown = "-" if value is None else ("%.1f" % value if isinstance(value, float) else str(value))
        print("%-40s %10s %10s  %s" % (name, before, shown, verdict(name, value)))
    missed = [name for name in figures if verdict(name, figures[name]).startswith("NOT MET")]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
