# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Will the torch of an environment run on this host's driver and GPUs? Read from its files, never imported.

Importing torch on a serving host loads the CUDA libraries and may touch
the GPUs the old build still serves from; the answer is in two files of
the installed wheel instead:

* ``torch/version.py``: ``__version__`` and ``cuda`` (the CUDA the build
  was made for, ``'13.0'``; ``None`` for a CPU build), read as text with a
  size cap, never executed.
* ``torch/lib/libtorch_python.so``: the architecture list the build was
  compiled for, the text ``torch.cuda.get_arch_list()`` returns
  (``sm_75 sm_80 sm_86 sm_90 sm_100 sm_120``), found as a NUL-terminated
  string of nothing but ``sm_NN``/``compute_NN`` words; read in bounded
  chunks, at most :data:`LIBRARY_LIMIT` bytes.

:func:`judge` compares them with what NVML says: the driver's CUDA version
(a driver older than the build's CUDA major cannot run it; an older minor
runs through CUDA's minor-version compatibility, said as a note) and each
GPU's compute capability (covered by an ``sm_XY`` of the same major and a
minor not above the GPU's, an arch-specific ``sm_XYa`` only on exactly
that GPU, or else by PTX, ``compute_XY`` not above the GPU's, compiled at
the first start: a note).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import stat

from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import read_regular
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text

#: The most of version.py that is read (a real one is under 1 KiB).
VERSION_LIMIT = 64 * 1024
#: The most of libtorch_python.so that is scanned (a real one is about 35 MB).
LIBRARY_LIMIT = 512 * 1024 * 1024
CHUNK = 4 * 1024 * 1024
_ARCH_WORD = rb"(?:sm|compute)_[0-9]{2,3}[af]?"
_ARCH_LIST = re.compile(rb"(?<=\x00)(" + _ARCH_WORD + rb"(?: " + _ARCH_WORD + rb"){0,63})(?=\x00)")
_VERSION_LINE = re.compile(r"^__version__\s*=\s*['\"]([0-9A-Za-z.+_-]{1,80})['\"]\s*$", re.M)
_CUDA_LINE = re.compile(r"^cuda\s*(?::\s*Optional\[str\])?\s*=\s*(?:['\"]([0-9]{1,3}\.[0-9]{1,3})['\"]|(None))\s*$", re.M)
_O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class CompatError(Exception):
    """A file of the environment could not be read as expected."""


def _open_regular(path):
    """An fd of the regular file ``path`` (never through a link), or None when it is not there."""
    try:
        fd = os.open(path, _O_READ)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CompatError("%s cannot be opened: %s" % (path, exc.strerror or exc))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CompatError("%s is not a regular file" % path)
    return fd


def read_version_file(path):
    """(torch version, CUDA version or None, text) of a ``torch/version.py``; None when it is not there."""
    try:
        data = read_regular(path, VERSION_LIMIT + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CompatError("%s cannot be opened: %s" % (path, exc.strerror or exc))
    if len(data) > VERSION_LIMIT:
        raise CompatError("%s is larger than %d bytes; it is not torch's version file" % (path, VERSION_LIMIT))
    text = data.decode("utf-8", "replace")
    version = _VERSION_LINE.search(text)
    cuda = _CUDA_LINE.search(text)
    if version is None or cuda is None:
        raise CompatError("%s does not say torch's version and CUDA version in the form torch writes them" % path)
    return version.group(1), cuda.group(1), text


def find_arch_list(path, limit=LIBRARY_LIMIT, deadline=None):
    """The architecture list compiled into ``libtorch_python.so`` at ``path`` (a list of words), None when the
    file has none or is not there.  Two different lists in one file: CompatError (it cannot be told which)."""
    fd = _open_regular(path)
    if fd is None:
        return None
    found = set()
    tail = b""
    read = 0
    try:
        while read < limit:
            chunk = os.read(fd, min(CHUNK, limit - read))
            if not chunk:
                break
            read += len(chunk)
            data = tail + chunk
            for match in _ARCH_LIST.finditer(data):
                found.add(match.group(1))
                # two different lists of several words: no need to read on (nor to keep more of them)
                if len(set(f for f in found if b" " in f)) > 1:
                    break
            if len(set(f for f in found if b" " in f)) > 1:
                break
            # lone words: a build for one architecture has one; keep at most a few to say so
            if len(found) > 64:
                found = set(sorted(found, key=lambda f: b" " not in f)[:64])
            # keep enough of the end for a list that crosses the chunk boundary (64 words of at most 12 bytes)
            tail = data[-1024:]
            if deadline is not None and deadline():
                raise CompatError("reading %s took longer than the time limit" % path)
    finally:
        os.close(fd)
    # a list of several words is the one (a lone word such as "sm_80" may be any other string); a build for one
    # architecture has only a lone word
    lists = set(f for f in found if b" " in f) or found
    if len(lists) > 1:
        raise CompatError("%s holds %d different architecture lists (%s); it is not a torch build this check "
                          "understands" % (path, len(lists), "; ".join(sorted(f.decode() for f in lists))[:300]))
    return lists.pop().decode("ascii").split() if lists else None


def read_torch(site_dirs, deadline=None):
    """What the torch installed in ``site_dirs`` was built for: a dict with ``present`` (False when no
    site directory has torch), ``version``, ``cuda`` (None: a CPU build), ``arch_list`` (None: not found),
    ``site``."""
    for site in site_dirs or ():
        base = os.path.join(site, "torch")
        try:
            st = os.lstat(base)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise CompatError("%s is not a directory (a link or a file): not torch as a wheel installs it" % base)
        parsed = read_version_file(os.path.join(base, "version.py"))
        if parsed is None:
            raise CompatError("%s has no version.py: not torch as a wheel installs it" % base)
        version, cuda, dummy = parsed
        arch_list = None
        if cuda:
            lib = os.path.join(base, "lib")
            if os.path.islink(lib):
                raise CompatError("%s is a symbolic link: not torch as a wheel installs it" % lib)
            arch_list = find_arch_list(os.path.join(lib, "libtorch_python.so"), deadline=deadline)
        return {"present": True, "version": version, "cuda": cuda, "arch_list": arch_list, "site": site}
    return {"present": False, "version": None, "cuda": None, "arch_list": None, "site": None}


def _cuda_tuple(text):
    major, minor = text.split(".")
    return int(major), int(minor)


def _arch(word):
    """('sm'|'compute', major, minor, suffix) of an architecture word such as sm_120 or sm_90a."""
    kind, number = word.split("_", 1)
    suffix = number[-1] if number[-1] in "af" else ""
    digits = number[:-1] if suffix else number
    return kind, int(digits[:-1]), int(digits[-1]), suffix


def gpu_support(arch_list, major, minor):
    """How a GPU of compute capability major.minor runs this build: ('binary', word), ('ptx', word) or
    (None, None) when nothing in ``arch_list`` covers it."""
    binary, ptx = [], []
    for word in arch_list:
        kind, a_major, a_minor, suffix = _arch(word)
        if kind == "sm":
            if (a_major, a_minor) == (major, minor) or (suffix != "a" and a_major == major and a_minor < minor):
                binary.append(((a_minor, suffix), word))
        elif suffix == "" and (a_major, a_minor) <= (major, minor):
            ptx.append(((a_major, a_minor), word))
    # the closest build wins: the highest minor of the GPU's major, the newest PTX
    if binary:
        return "binary", max(binary)[1]
    if ptx:
        return "ptx", max(ptx)[1]
    return None, None


def judge(torch, driver_cuda, gpus):
    """Problems (the build cannot run here) and notes (it runs, with a caveat) for ``torch`` (read_torch()),
    the driver's CUDA version (NVML's integer, 13000 for 13.0; None when unknown) and ``gpus`` (NVML's
    dicts: index, name, compute_capability_major/minor)."""
    problems, notes, per_gpu = [], [], []
    if not torch.get("present"):
        notes.append("no torch in the environment: nothing to check against the driver and the GPUs")
        return problems, notes, per_gpu
    label = "torch %s" % torch["version"]
    if not torch.get("cuda"):
        problems.append("%s is a CPU build (no CUDA): vLLM would not use the GPUs" % label)
        return problems, notes, per_gpu
    need = _cuda_tuple(torch["cuda"])
    if driver_cuda is None:
        notes.append("the driver's CUDA version could not be read: %s needs CUDA %s" % (label, torch["cuda"]))
    else:
        have = (int(driver_cuda) // 1000, (int(driver_cuda) % 1000) // 10)
        if have[0] < need[0]:
            problems.append("the driver supports CUDA %d.%d, %s was built for CUDA %s: update the driver, or lock a "
                            "torch built for CUDA %d (reinstall_torch_backend)" % (have + (label, torch["cuda"], have[0])))
        elif have < need:
            notes.append("the driver supports CUDA %d.%d, older than the CUDA %s %s was built for: it runs through "
                         "CUDA's minor-version compatibility (no PTX compiled for newer GPUs)" % (have + (torch["cuda"], label)))
    arch_list = torch.get("arch_list")
    if arch_list is None:
        notes.append("%s's architecture list was not found in its libtorch_python.so: the GPUs were not checked "
                     "against it" % label)
        return problems, notes, per_gpu
    for gpu in gpus or ():
        major, minor = gpu.get("compute_capability_major"), gpu.get("compute_capability_minor")
        if major is None or minor is None:
            continue
        how, word = gpu_support(arch_list, int(major), int(minor))
        per_gpu.append({"index": gpu.get("index"), "name": valid_text(gpu.get("name") or "")[:100],
                        "compute_capability": "%d.%d" % (major, minor), "runs": how or "no", "arch": word})
    missing = [g for g in per_gpu if g["runs"] == "no"]
    if missing:
        problems.append("%s was not built for compute capability %s (GPU %s, %s); its architectures are %s"
                        % (label, ", ".join(sorted(set(g["compute_capability"] for g in missing))),
                           ", ".join(str(g["index"]) for g in missing), missing[0]["name"], " ".join(arch_list)))
    jit = [g for g in per_gpu if g["runs"] == "ptx"]
    if jit:
        notes.append("GPU %s runs %s through PTX (%s), compiled at the first start (slower start)"
                     % (", ".join(str(g["index"]) for g in jit), label, jit[0]["arch"]))
    return problems, notes, per_gpu
