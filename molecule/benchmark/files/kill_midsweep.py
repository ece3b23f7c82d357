# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kill the vLLM server (SIGKILL through systemd) in the middle of a benchmark sweep.

Waits until the result file of an earlier level exists (that level is
done), then until the server's /metrics shows requests running (the next
level's `vllm bench serve` has finished importing and is sending load),
waits a little more and kills the unit's processes. Prints what it did as
one JSON line. Standard library only (runs with the host's python3).

    python3 kill_midsweep.py --wait-for /var/lib/gpufleet/benchmark/RUN/c1.json \
        --unit vllm-kimi-k25 --metrics http://127.0.0.1:8000/metrics
"""

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request

RUNNING = re.compile(r'^vllm:num_requests_running\{[^}]*\}\s+([0-9.eE+-]+)\s*$', re.M)


def running_requests(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode('utf-8', 'replace')
    except OSError:
        return None
    values = [float(v) for v in RUNNING.findall(text)]
    return sum(values) if values else 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--wait-for', required=True)
    parser.add_argument('--unit', required=True)
    parser.add_argument('--metrics', required=True)
    parser.add_argument('--delay', type=float, default=1.5, help='seconds between seeing load and the kill')
    parser.add_argument('--timeout', type=float, default=600)
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    record = {'waited_for': args.wait_for, 'unit': args.unit}

    while True:
        try:
            open(args.wait_for).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                record['error'] = 'the earlier level never finished'
                print(json.dumps(record))
                return 1
            time.sleep(0.2)
    record['level_done_at'] = time.time()

    while True:
        running = running_requests(args.metrics)
        if running:
            record['running_seen'] = running
            break
        if time.monotonic() > deadline:
            record['error'] = 'no load seen on %s' % args.metrics
            print(json.dumps(record))
            return 1
        time.sleep(0.2)
    time.sleep(args.delay)
    record['running_at_kill'] = running_requests(args.metrics)
    subprocess.run(['systemctl', 'kill', '--signal=SIGKILL', args.unit], check=True)
    record['killed_at'] = time.time()
    print(json.dumps(record))
    return 0


if __name__ == '__main__':
    sys.exit(main())
