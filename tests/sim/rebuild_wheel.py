# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A second build of a real wheel, for the test world's package index.

The index of the simulated fleet serves two vLLM builds: the real wheel of
the wheelhouse, and this script's re-versioned copy of it, shaped like a
nightly (``0.33.1.dev7+g<12 hex of a commit>``). The copy is a real wheel:

* every file of the source wheel, byte for byte (the compressed data is
  copied as it is, not recompressed: seconds for vLLM's 340 MB), the
  ``.dist-info`` (and ``.data``) directory renamed for the new version;
* ``METADATA`` with the new ``Version`` and the changed requirements:
  ``--pin lark==1.3.1`` replaces the requirement on an existing dependency,
  ``--add gguf==0.19.0`` adds one; ``WHEEL`` and the other files kept;
* ``RECORD`` regenerated: the sha256 and size of every file, computed from
  the data (each source file is checked against the source RECORD on the way:
  a damaged source wheel is refused, not copied);
* the same input gives the same bytes: entries in the source order, the
  rewritten ``METADATA`` and ``RECORD`` last, one fixed timestamp.

Built once, reused: the output directory keeps a stamp per wheel made of the
source wheel's sha256, this script's sha256 and the options; a later run with
the same input finds the wheel in a moment (its sha256 is checked: a wheel
edited on disk since, a tampered mirror's test, is made again).

Command line (scripts/bootstrap.sh, the tests)::

    python3 rebuild_wheel.py SOURCE.whl OUT_DIR [--version 0.33.1.dev7]
        [--commit HEX40] [--pin NAME==VERSION ...] [--add NAME==VERSION ...]

prints ``PATH<TAB>COMMIT`` of the wheel. ``--version`` without a local part
gets ``+g<first 12 hex of the commit>``; the commit, when not given, is
derived from the source wheel's hash and the version (so it is stable).
"""

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import struct
import sys
import tempfile
import zipfile
import zlib

CHUNK = 1 << 20
# one fixed modification time for every entry: 1980-01-01 00:00 in DOS form
DOS_DATE = (0 << 9) | (1 << 5) | 1
DOS_TIME = 0
ZIP32_LIMIT = 0xFFFFFFFF
REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")
VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$")
HEX40 = re.compile(r"^[0-9a-f]{40}$")


class RebuildError(Exception):
    """Input the script cannot turn into a wheel; the message says why."""


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def record_hash(digest):
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def parse_requirement(text, option):
    match = REQ.match(text.strip())
    if not match:
        raise RebuildError("%s %r: expected NAME==VERSION (an exact pin)" % (option, text))
    return match.group(1), match.group(2)


def rewrite_metadata(data, version, pins, adds):
    """METADATA with a new Version and changed Requires-Dist lines (headers only)."""
    text = data.decode("utf-8")
    head, sep, body = text.partition("\n\n")
    lines = head.split("\n")
    out, seen_version, pinned = [], False, set()
    for line in lines:
        if line.startswith("Version:") and not seen_version:
            out.append("Version: " + version)
            seen_version = True
            continue
        if line.startswith("Requires-Dist:"):
            spec = line[len("Requires-Dist:"):].strip()
            name = re.match(r"[A-Za-z0-9._-]+", spec)
            key = canonical(name.group(0)) if name else None
            if key in pins and ";" not in spec:
                out.append("Requires-Dist: %s==%s" % (pins[key][0], pins[key][1]))
                pinned.add(key)
                continue
        out.append(line)
    if not seen_version:
        raise RebuildError("METADATA has no Version field")
    missing = sorted(set(pins) - pinned)
    if missing:
        raise RebuildError("--pin %s: the source wheel has no unconditional requirement on %s"
                           % (", ".join(missing), ", ".join(missing)))
    present = {canonical(re.match(r"[A-Za-z0-9._-]+", line[len("Requires-Dist:"):].strip()).group(0))
               for line in out if line.startswith("Requires-Dist:")}
    # added after the last requirement that is not an extra's
    at = max([i + 1 for i, line in enumerate(out) if line.startswith("Requires-Dist:") and "extra ==" not in line]
             or [len(out)])
    for key, (name, pin) in sorted(adds.items()):
        if key in present:
            raise RebuildError("--add %s: the source wheel already requires %s (use --pin)" % (name, name))
        out.insert(at, "Requires-Dist: %s==%s" % (name, pin))
        at += 1
    return ("\n".join(out) + sep + body).encode("utf-8")


def read_source_record(zf, dist_info):
    rows = {}
    text = zf.read(dist_info + "/RECORD").decode("utf-8")
    for row in csv.reader(io.StringIO(text)):
        if row:
            rows[row[0]] = row
    return rows


def raw_entry(zf, handle, info):
    """The compressed bytes of an entry (local header skipped), in chunks."""
    handle.seek(info.header_offset)
    header = handle.read(30)
    if header[:4] != b"PK\x03\x04":
        raise RebuildError("%s: bad local header" % info.filename)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    handle.seek(info.header_offset + 30 + name_len + extra_len)
    left = info.compress_size
    while left:
        block = handle.read(min(CHUNK, left))
        if not block:
            raise RebuildError("%s: truncated entry" % info.filename)
        left -= len(block)
        yield block


class ZipOut:
    """A minimal, deterministic zip writer: stored or raw-copied entries, no zip64."""

    def __init__(self, handle):
        self.handle = handle
        self.central = []

    def add(self, name, method, crc, csize, usize, chunks, external_attr):
        offset = self.handle.tell()
        if max(offset, csize, usize) >= ZIP32_LIMIT:
            raise RebuildError("%s: the wheel would need zip64, which this script does not write" % name)
        raw_name = name.encode("utf-8")
        flags = 0x800 if not raw_name.isascii() else 0
        self.handle.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, flags, method, DOS_TIME,
                                      DOS_DATE, crc, csize, usize, len(raw_name), 0))
        self.handle.write(raw_name)
        for block in chunks:
            self.handle.write(block)
        self.central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", (3 << 8) | 20, 20, flags,
                                        method, DOS_TIME, DOS_DATE, crc, csize, usize, len(raw_name),
                                        0, 0, 0, 0, external_attr, offset) + raw_name)

    def add_bytes(self, name, data):
        self.add(name, zipfile.ZIP_STORED, zlib.crc32(data), len(data), len(data), [data], 0o100644 << 16)

    def close(self):
        start = self.handle.tell()
        for entry in self.central:
            self.handle.write(entry)
        size = self.handle.tell() - start
        if len(self.central) > 0xFFFF or start >= ZIP32_LIMIT:
            raise RebuildError("the wheel would need zip64, which this script does not write")
        self.handle.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(self.central),
                                      len(self.central), size, start, 0))


def rebuild(source, out_dir, version, pins, adds):
    """Write the new wheel into out_dir (atomically); returns its path."""
    base = os.path.basename(source)
    parts = base[:-len(".whl")].split("-") if base.endswith(".whl") else []
    if len(parts) not in (5, 6):
        raise RebuildError("%s is not named like a wheel (NAME-VERSION-PY-ABI-PLATFORM.whl)" % base)
    name, old_version, tags = parts[0], parts[1], "-".join(parts[-3:])
    old_prefix, new_prefix = "%s-%s" % (name, old_version), "%s-%s" % (name, version)
    renames = {old_prefix + ".dist-info/": new_prefix + ".dist-info/",
               old_prefix + ".data/": new_prefix + ".data/"}
    dist_info = old_prefix + ".dist-info"
    target = os.path.join(out_dir, "%s-%s-%s.whl" % (name, version, tags))
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".rebuild-", suffix=".tmp", dir=out_dir)
    try:
        with zipfile.ZipFile(source) as zf, open(source, "rb") as raw, os.fdopen(fd, "wb") as handle:
            infos = zf.infolist()
            if dist_info + "/RECORD" not in zf.NameToInfo or dist_info + "/METADATA" not in zf.NameToInfo:
                raise RebuildError("%s has no %s/RECORD or METADATA" % (base, dist_info))
            old_record = read_source_record(zf, dist_info)
            out = ZipOut(handle)
            record = []
            for info in infos:
                if info.is_dir() or info.filename in (dist_info + "/RECORD", dist_info + "/METADATA"):
                    continue
                new_name = info.filename
                for old, new in renames.items():
                    if new_name.startswith(old):
                        new_name = new + new_name[len(old):]
                digest, size = hashlib.sha256(), 0
                with zf.open(info) as member:          # checks the CRC too
                    for block in iter(lambda: member.read(CHUNK), b""):
                        digest.update(block)
                        size += len(block)
                row = old_record.get(info.filename)
                if row is None or row[1] != record_hash(digest.digest()) or row[2] != str(size):
                    raise RebuildError("%s: %s does not match the source wheel's RECORD (a damaged wheel?)"
                                       % (base, info.filename))
                out.add(new_name, info.compress_type, info.CRC, info.compress_size, info.file_size,
                        raw_entry(zf, raw, info), info.external_attr)
                record.append((new_name, record_hash(digest.digest()), str(size)))
            metadata = rewrite_metadata(zf.read(dist_info + "/METADATA"), version, pins, adds)
            meta_name = new_prefix + ".dist-info/METADATA"
            out.add_bytes(meta_name, metadata)
            record.append((meta_name, record_hash(hashlib.sha256(metadata).digest()), str(len(metadata))))
            record_name = new_prefix + ".dist-info/RECORD"
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerows(record)
            writer.writerow((record_name, "", ""))
            out.add_bytes(record_name, text.getvalue().encode("utf-8"))
            out.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("source")
    parser.add_argument("out_dir")
    parser.add_argument("--version", default="0.33.1.dev7")
    parser.add_argument("--commit", help="40 hex digits (default: derived from the source and the version)")
    parser.add_argument("--pin", action="append", default=[], metavar="NAME==VERSION")
    parser.add_argument("--add", action="append", default=[], metavar="NAME==VERSION")
    args = parser.parse_args(argv)
    try:
        pins = {}
        for text in args.pin:
            name, pin = parse_requirement(text, "--pin")
            pins[canonical(name)] = (name, pin)
        adds = {}
        for text in args.add:
            name, pin = parse_requirement(text, "--add")
            adds[canonical(name)] = (name, pin)
        if not os.path.isfile(args.source):
            raise RebuildError("no source wheel at %s" % args.source)
        source_hash = sha256_file(args.source)
        commit = args.commit
        if commit is None:
            commit = hashlib.sha1(("gpufleet test-world build %s %s" % (source_hash, args.version))
                                  .encode("ascii")).hexdigest()
        if not HEX40.match(commit):
            raise RebuildError("--commit %r: expected 40 lowercase hex digits" % commit)
        version = args.version if "+" in args.version else "%s+g%s" % (args.version, commit[:12])
        if not VERSION.match(version):
            raise RebuildError("--version %r is not a PEP 440 version in normal form" % version)
        with open(os.path.abspath(__file__), "rb") as handle:
            script_hash = hashlib.sha256(handle.read()).hexdigest()
        key = hashlib.sha256(("\n".join([source_hash, script_hash, version, repr(sorted(pins.items())),
                                         repr(sorted(adds.items()))])).encode("utf-8")).hexdigest()[:16]
        stamp = os.path.join(args.out_dir, ".built-%s-%s" % (os.path.basename(args.source)[:-len(".whl")], key))
        if os.path.isfile(stamp):
            with open(stamp) as handle:
                fields = handle.read().split()
            # the wheel as it was written (a wheel edited on disk is made again)
            if len(fields) == 2 and os.path.isfile(fields[0]) and sha256_file(fields[0]) == fields[1]:
                print("%s\t%s" % (fields[0], commit))
                return 0
        path = rebuild(args.source, args.out_dir, version, pins, adds)
        with open(stamp + ".tmp", "w") as handle:
            handle.write("%s\t%s\n" % (path, sha256_file(path)))
        os.replace(stamp + ".tmp", stamp)
    except (RebuildError, OSError, zipfile.BadZipFile) as exc:
        print("rebuild_wheel: %s" % exc, file=sys.stderr)
        return 1
    print("%s\t%s" % (path, commit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
