# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Damage a (plain) model directory the ways real fleets see it damaged.

Standard library only: it runs on the simulated hosts with their
``/usr/bin/python3``::

    python3 damage_model.py MODEL_DIR FAULT [FAULT ...] [--shard NAME] [--kib N]

Faults (each prints one JSON line: ``fault``, ``file``, ``changed`` and
what it did; an already damaged file is left as it is, ``changed: false``):

``truncate-shard``
    cut the last shard the index names (or ``--shard``) by ``--kib`` KiB
    (16), as an interrupted copy leaves it; its header stays whole.
``lfs-pointer``
    replace the first shard (or ``--shard``) by the Git LFS pointer file a
    clone without ``git lfs pull`` has (version, ``oid sha256:`` of the
    real content, size).
``missing-shard``
    remove the second shard (or ``--shard``) the index names.
``tokenizer-revision``
    a newer tokenizer revision: ``tokenizer.json`` gets one more added
    (special) token, ``tokenizer_config.json`` lists it in
    ``added_tokens_decoder``; both stay valid JSON and load with
    ``tokenizers``/transformers.

MODEL_DIR must be a directory (not a link to one); a file the fault would
touch must be a regular file in it (a link, as in a Hugging Face cache
snapshot, is refused: never followed out of MODEL_DIR). Exit status 0 when
every fault was applied (or already was), 1 when one was refused, 2 for a
usage error.
"""

import argparse
import errno
import hashlib
import json
import os
import re
import stat
import struct
import sys

INDEX = "model.safetensors.index.json"
FAULTS = ("truncate-shard", "lfs-pointer", "missing-shard", "tokenizer-revision")
MAX_JSON = 64 << 20
MAX_HEADER = 100000000
MAX_SHARD = 1 << 30             # truncate-shard rewrites the shard through memory: the simulated model's are small
LFS_PREFIX = b"version https://git-lfs.github.com/spec/v1"
REVISION_TOKEN = "<|gpufleet_revision_2|>"
_SHARD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.safetensors\Z")
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
CHUNK = 1 << 20


class Refused(Exception):
    """The fault cannot be applied; str() says why."""


def _regular(model_dir, name):
    """os.lstat of MODEL_DIR/NAME, which must be a regular file (not a link); None when it is not there."""
    try:
        st = os.lstat(os.path.join(model_dir, name))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise Refused("%s cannot be read: %s" % (name, exc.strerror or exc)) from exc
    if stat.S_ISLNK(st.st_mode):
        raise Refused("%s is a link (a Hugging Face cache snapshot?): not followed; damage a plain copy" % name)
    if not stat.S_ISREG(st.st_mode):
        raise Refused("%s is not a regular file" % name)
    return st


def _read(model_dir, name, limit):
    """The bytes of the regular file MODEL_DIR/NAME, at most LIMIT of them (more is refused)."""
    if _regular(model_dir, name) is None:
        raise Refused("%s is not in the model directory" % name)
    fd = os.open(os.path.join(model_dir, name), os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise Refused("%s has %d bytes, more than the %d read" % (name, size, limit))
        return _read_fd(fd, size)
    finally:
        os.close(fd)


def _read_fd(fd, size):
    """Up to SIZE bytes from FD, in chunks of CHUNK (fewer when the file ends first)."""
    chunks = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _replace(model_dir, name, data, mode):
    """Write DATA as MODEL_DIR/NAME through a new file beside it (never through a link)."""
    path = os.path.join(model_dir, name)
    tmp = os.path.join(model_dir, ".%s.damage-%d" % (name, os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, stat.S_IMODE(mode))
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def _head(model_dir, name, size):
    """The first SIZE bytes (at most MAX_SHARD) of MODEL_DIR/NAME."""
    fd = os.open(os.path.join(model_dir, name), os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
    try:
        return _read_fd(fd, size)
    finally:
        os.close(fd)


def _json(model_dir, name):
    try:
        return json.loads(_read(model_dir, name, MAX_JSON).decode("utf-8"))
    except ValueError as exc:
        raise Refused("%s is not JSON: %s" % (name, exc)) from exc


def shards(model_dir):
    """The shard names the index names, sorted (each a plain file name)."""
    index = _json(model_dir, INDEX)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise Refused("%s has no weight_map" % INDEX)
    names = set()
    for shard in weight_map.values():
        if not isinstance(shard, str) or not _SHARD_NAME.match(shard):
            raise Refused("%s names %r, not a shard file name of this directory" % (INDEX, shard))
        names.add(shard)
    return sorted(names)


def _pick(model_dir, wanted, default_position):
    names = shards(model_dir)
    if wanted is None:
        return names[min(default_position, len(names) - 1)] if default_position >= 0 else names[default_position]
    if wanted not in names:
        raise Refused("the index names no shard %s (it names %s)" % (wanted, ", ".join(names)))
    return wanted


def _header_end(model_dir, name, size):
    """(8 + header length, the end of the data the header announces) of the shard, or None when it is no whole
    safetensors header (a pointer, a file cut inside its header)."""
    fd = os.open(os.path.join(model_dir, name), os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
    try:
        head = os.pread(fd, 8, 0)
        if len(head) < 8 or head.startswith(LFS_PREFIX[:8]):
            return None
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER or 8 + length > size:
            return None
        text = os.pread(fd, length, 8)
    finally:
        os.close(fd)
    try:
        header = json.loads(text.decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(header, dict):
        return None
    ends = [info["data_offsets"][1] for key, info in header.items()
            if key != "__metadata__" and isinstance(info, dict) and isinstance(info.get("data_offsets"), list)
            and len(info["data_offsets"]) == 2 and isinstance(info["data_offsets"][1], int)]
    return 8 + length, 8 + length + max(ends or [0])


def truncate_shard(model_dir, shard=None, kib=16):
    name = _pick(model_dir, shard, -1)
    st = _regular(model_dir, name)
    if st is None:
        raise Refused("%s is not in the model directory" % name)
    bounds = _header_end(model_dir, name, st.st_size)
    if bounds is None or st.st_size < bounds[1]:
        return {"file": name, "changed": False, "size": st.st_size, "detail": "already cut (or no whole shard)"}
    data_start, end = bounds
    if st.st_size > MAX_SHARD:
        raise Refused("%s has %d bytes, more than the %d this fault rewrites" % (name, st.st_size, MAX_SHARD))
    cut = min(kib * 1024, st.st_size - data_start - 1)
    if cut <= 0:
        raise Refused("%s has no tensor data to cut" % name)
    # (a new file in its place, as a copy leaves it: a hard link to the whole shard elsewhere stays whole)
    _replace(model_dir, name, _head(model_dir, name, st.st_size - cut), st.st_mode)
    return {"file": name, "changed": True, "size": st.st_size - cut, "was": st.st_size, "expected": end,
            "detail": "cut by %d bytes" % cut}


def lfs_pointer(model_dir, shard=None):
    name = _pick(model_dir, shard, 0)
    st = _regular(model_dir, name)
    if st is None:
        raise Refused("%s is not in the model directory" % name)
    digest = hashlib.sha256()
    fd = os.open(os.path.join(model_dir, name), os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
    try:
        head = os.pread(fd, len(LFS_PREFIX), 0)
        if head == LFS_PREFIX:
            return {"file": name, "changed": False, "size": st.st_size, "detail": "already a Git LFS pointer"}
        size = 0
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
               % (digest.hexdigest(), size)).encode("ascii")
    _replace(model_dir, name, pointer, st.st_mode)
    return {"file": name, "changed": True, "size": len(pointer), "oid": "sha256:" + digest.hexdigest(),
            "was": size, "detail": "replaced by a Git LFS pointer"}


def missing_shard(model_dir, shard=None):
    name = _pick(model_dir, shard, 1)
    st = _regular(model_dir, name)
    if st is None:
        return {"file": name, "changed": False, "detail": "already missing"}
    os.unlink(os.path.join(model_dir, name))
    return {"file": name, "changed": True, "was": st.st_size, "detail": "removed"}


def tokenizer_revision(model_dir):
    name = "tokenizer.json"
    st = _regular(model_dir, name)
    data = _json(model_dir, name)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise Refused("%s is not a tokenizers file (no model)" % name)
    added = data.get("added_tokens")
    if added is None:
        added = data["added_tokens"] = []
    if not isinstance(added, list) or not all(isinstance(a, dict) for a in added):
        raise Refused("%s has no added_tokens list" % name)
    if any(a.get("content") == REVISION_TOKEN for a in added):
        return {"file": name, "changed": False, "token": REVISION_TOKEN, "detail": "already the newer revision"}
    vocab = data["model"].get("vocab")
    ids = [a.get("id") for a in added]
    if isinstance(vocab, dict):
        ids.extend(vocab.values())
    elif isinstance(vocab, list):
        ids.append(len(vocab) - 1)
    ids = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
    token_id = max(ids or [-1]) + 1
    entry = {"id": token_id, "content": REVISION_TOKEN, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
    added.append(entry)
    _replace(model_dir, name, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), st.st_mode)
    result = {"file": name, "changed": True, "token": REVISION_TOKEN, "id": token_id,
              "detail": "one more added token"}
    config_st = _regular(model_dir, "tokenizer_config.json")
    if config_st is not None:
        config = _json(model_dir, "tokenizer_config.json")
        if isinstance(config, dict):
            decoder = config.get("added_tokens_decoder")
            if not isinstance(decoder, dict):
                decoder = config["added_tokens_decoder"] = {}
            decoder[str(token_id)] = dict((k, v) for k, v in entry.items() if k != "id")
            _replace(model_dir, "tokenizer_config.json",
                     (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), config_st.st_mode)
            result["also"] = ["tokenizer_config.json"]
    return result


def damage(model_dir, fault, shard=None, kib=16):
    """Apply FAULT to MODEL_DIR; return what was done (a dict with fault, file, changed)."""
    try:
        st = os.lstat(model_dir)
    except OSError as exc:
        raise Refused("%s cannot be read: %s" % (model_dir, exc.strerror or exc)) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise Refused("%s is not a directory%s" % (model_dir, " (a link: give the directory itself)"
                                                   if stat.S_ISLNK(st.st_mode) else ""))
    if fault == "truncate-shard":
        result = truncate_shard(model_dir, shard, kib)
    elif fault == "lfs-pointer":
        result = lfs_pointer(model_dir, shard)
    elif fault == "missing-shard":
        result = missing_shard(model_dir, shard)
    elif fault == "tokenizer-revision":
        result = tokenizer_revision(model_dir)
    else:
        raise Refused("unknown fault %s (one of %s)" % (fault, ", ".join(FAULTS)))
    out = {"fault": fault}
    out.update(result)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description="Damage a plain model directory the ways real fleets see.")
    parser.add_argument("model_dir")
    parser.add_argument("faults", nargs="+", choices=FAULTS, metavar="FAULT", help=", ".join(FAULTS))
    parser.add_argument("--shard", help="the shard to damage (a name the index gives)")
    parser.add_argument("--kib", type=int, default=16, help="KiB truncate-shard cuts (1 to 65536)")
    args = parser.parse_args(argv)
    if not 1 <= args.kib <= 65536:
        parser.error("--kib must be 1 to 65536")
    if args.shard is not None and not _SHARD_NAME.match(args.shard):
        parser.error("--shard must be a shard file name (*.safetensors, no directory)")
    model_dir = os.path.abspath(args.model_dir)
    for fault in args.faults:
        try:
            result = damage(model_dir, fault, args.shard, args.kib)
        except (Refused, OSError) as exc:
            sys.stdout.write(json.dumps({"fault": fault, "changed": False, "failed": True, "msg": str(exc)},
                                        sort_keys=True) + "\n")
            return 1
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
