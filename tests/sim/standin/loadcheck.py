# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Load check of the vLLM stand-in: measured throughput and CPU next to the targets.

Starts vllm_standin.py on a free loopback port (temporary fake NVML state),
runs N concurrent streaming completions of T tokens for each N of a sweep
and prints, side by side, the aggregate tokens/s it measured, the rate the
configuration asks for (``min(N * r, cap)``) and the stand-in's CPU use.
Standard library only::

    python3 loadcheck.py [--model DIR] [--concurrency 1,8,64,256] [--tokens 100]
                         [--rate 82] [--cap 2276]

The measured figure includes each request's time to first token and the
connection set-up, so it sits a few percent under the target.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "vllm_standin.py")


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def _wait_ready(port, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the stand-in exited with status %s" % proc.returncode)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the stand-in did not become ready in %d s" % timeout)


def _stream(port, tokens, results, index):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": "hello world", "max_tokens": tokens, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    data = conn.getresponse().read()
    results[index] = data.count(b'"finish_reason"')
    conn.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", help="model directory to serve (default: an empty temporary one)")
    parser.add_argument("--concurrency", default="1,8,64,256")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--rate", type=float, default=82.0)
    parser.add_argument("--cap", type=float, default=2276.0)
    args = parser.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="standin-loadcheck-")
    model = args.model or os.path.join(tmp, "model")
    os.makedirs(model, exist_ok=True)
    port = _free_port()
    env = dict(os.environ, FAKE_NVML_STATE=os.path.join(tmp, "state"), VLLM_STANDIN_LOAD_SECONDS="0.2",
               VLLM_STANDIN_TOKENS_PER_SECOND=str(args.rate), VLLM_STANDIN_MAX_TOKENS_PER_SECOND=str(args.cap))
    with open(os.path.join(tmp, "standin.log"), "w") as log:
        proc = subprocess.Popen([sys.executable, "-I", STANDIN, "serve", model, "--host", "127.0.0.1", "--port",
                                 str(port), "--max-num-seqs", "1024", "--disable-uvicorn-access-log"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(port, proc)
        header = ("concurrency", "measured tok/s", "target tok/s", "tokens ok", "stand-in CPU")
        print("%-12s %14s %14s %12s %14s" % header)
        for n in [int(x) for x in args.concurrency.split(",") if x.strip()]:
            results = [0] * n
            threads = [threading.Thread(target=_stream, args=(port, args.tokens, results, i)) for i in range(n)]
            cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed, cpu = time.monotonic() - t0, _cpu_seconds(proc.pid) - cpu0
            target = min(n * args.rate, args.cap) if args.cap > 0 else n * args.rate
            complete = "yes" if all(r == args.tokens for r in results) else "NO"
            row = (n, n * args.tokens / elapsed, target, complete, 100.0 * cpu / elapsed)
            print("%-12d %14.0f %14.0f %12s %13.0f%%" % row)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
