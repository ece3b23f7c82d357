# SPDX-License-Identifier: GPL-3.0-or-later
"""Probes the scenarios' testinfra tests share: HTTP and NVML read from
inside a simulated host (its own python, so 127.0.0.1 is the host's), and
waiting for a condition. Importable from any scenario's tests through
molecule/conftest.py."""

import json
import time

HOST_PYTHON = "/usr/bin/python3"

HTTP_PROBE = r"""
import json, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=5) as r:
        print(json.dumps({"status": r.status, "body": r.read().decode()}))
except Exception as e:
    print(json.dumps({"status": None, "body": type(e).__name__}))
"""

NVML_PROBE = r"""
import json, pynvml
pynvml.nvmlInit()
out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpus": []}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    out["gpus"].append({
        "name": pynvml.nvmlDeviceGetName(h),
        "uuid": pynvml.nvmlDeviceGetUUID(h),
        "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
        "total_mib": mem.total // 2**20,
        "used_mib": mem.used // 2**20,
        "pids": [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)],
    })
pynvml.nvmlShutdown()
print(json.dumps(out))
"""


def http(host, path, port=8000):
    """GET http://127.0.0.1:PORT/PATH on the host: {"status": 200, "body": "..."},
    or {"status": None, "body": "<error class>"} when nothing answers."""
    return json.loads(host.check_output("%s -c %s %s %s", HOST_PYTHON, HTTP_PROBE, str(port), path))


def http_ok(host, path, port=8000):
    return http(host, path, port)["status"] == 200


def nvml(host, python):
    """What real pynvml, run by PYTHON on the host, reads from the fake NVML:
    {"driver": ..., "gpus": [{name, uuid, cc, total_mib, used_mib, pids}, ...]}."""
    return json.loads(host.check_output("%s -c %s", python, NVML_PROBE))


def wait_for(predicate, timeout, interval=0.5):
    """PREDICATE's first truthy value within TIMEOUT seconds, else its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
