# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build the fake NVML library (fakenvml.c) as libnvidia-ml.so.1.

``build(out_dir)`` compiles ``fakenvml.c`` (next to this file) with
``gcc -shared -fPIC -O2`` into ``out_dir/libnvidia-ml.so.1``, adds the
development link ``libnvidia-ml.so -> libnvidia-ml.so.1`` and returns the path
of the library.  It compiles only when the library is missing or older than
the source, and replaces the file atomically, so parallel test runs may call
it at once.

Command line (tests, the molecule prepare step)::

    python3 build.py OUT_DIR [--force] [--cc gcc]

prints the path of the library.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "fakenvml.c")
SONAME = "libnvidia-ml.so.1"
DEVLINK = "libnvidia-ml.so"
CFLAGS = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden"]


class BuildError(RuntimeError):
    """The compiler is missing or failed."""


def _needs_build(lib, source):
    try:
        return os.stat(lib).st_mtime_ns < os.stat(source).st_mtime_ns
    except FileNotFoundError:
        return True


def _ensure_link(out_dir):
    link = os.path.join(out_dir, DEVLINK)
    if os.path.islink(link) and os.readlink(link) == SONAME:
        return
    tmp = os.path.join(out_dir, ".%s.%d.tmp" % (DEVLINK, os.getpid()))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(SONAME, tmp)
    os.replace(tmp, link)


def build(out_dir, force=False, source=None, cc=None):
    """Compile the fake NVML into OUT_DIR/libnvidia-ml.so.1 when stale; return its path."""
    source = os.path.abspath(source or SOURCE)
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    lib = os.path.join(out_dir, SONAME)
    if force or _needs_build(lib, source):
        compiler = cc or os.environ.get("CC") or "gcc"
        if shutil.which(compiler) is None:
            raise BuildError(
                "C compiler %r not found: install gcc (Debian: apt-get install gcc libc6-dev) "
                "or set CC to build the fake NVML library" % compiler
            )
        fd, tmp = tempfile.mkstemp(prefix=".%s." % SONAME, dir=out_dir)
        os.close(fd)
        try:
            cmd = [compiler] + CFLAGS + ["-Wl,-soname," + SONAME, "-o", tmp, source]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
            if proc.returncode != 0:
                raise BuildError("building %s failed (%s):\n%s" % (lib, " ".join(cmd), proc.stdout))
            os.chmod(tmp, 0o755)
            os.replace(tmp, lib)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    _ensure_link(out_dir)
    return lib


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out_dir", help="directory for libnvidia-ml.so.1 and the libnvidia-ml.so link")
    parser.add_argument("--force", action="store_true", help="rebuild even when the library is up to date")
    parser.add_argument("--cc", help="C compiler (default: $CC or gcc)")
    args = parser.parse_args(argv)
    try:
        print(build(args.out_dir, force=args.force, cc=args.cc))
    except BuildError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
