# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A manifest of what the cleanup roles may touch on a test host.

Runs on the simulated host (standard library only)::

    python3 cleanup_manifest.py --out FILE

and writes a JSON document (to FILE, atomically, and to stdout):

* ``shared``: every entry below /shared (the model directories), by path,
  with its type, size, mode, inode, modification time in ns, the sha256 of
  a regular file and the text of a link;
* ``tmp_dumps``: the entries of /tmp whose names match the debug dump
  patterns (a link is described, never followed);
* ``passwd_sha256``: /etc/passwd (the target of a planted dump link);
* ``tools_venv``: whether /opt/gpufleet exists (the host_tools venv).

The cleanup scenario takes one at the end of prepare and one right after
the check-mode run; the two must be equal.
"""

from __future__ import absolute_import, division, print_function

import argparse
import fnmatch
import hashlib
import json
import os
import stat
import sys

PATTERNS = ('nomla_debug_tp*.pt', 'embed_debug_tp*.pt', 'mla_debug_layer*_tp*.pt')


def sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def describe(path, hash_files=True):
    st = os.lstat(path)
    entry = {'size': st.st_size, 'mode': '%04o' % stat.S_IMODE(st.st_mode), 'ino': st.st_ino,
             'mtime_ns': st.st_mtime_ns, 'nlink': st.st_nlink}
    if stat.S_ISLNK(st.st_mode):
        entry['type'] = 'link'
        entry['target'] = os.readlink(path)
    elif stat.S_ISDIR(st.st_mode):
        entry['type'] = 'dir'
    elif stat.S_ISREG(st.st_mode):
        entry['type'] = 'file'
        if hash_files:
            entry['sha256'] = sha256(path)
    else:
        entry['type'] = 'other'
    return entry


def tree(top):
    entries = {}
    if not os.path.lexists(top):
        return entries
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(root, name)
            entries[path] = describe(path)
    return entries


def manifest(shared='/shared', tmp='/tmp', passwd='/etc/passwd', tools='/opt/gpufleet'):
    dumps = {}
    for name in sorted(os.listdir(tmp)):
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in PATTERNS):
            path = os.path.join(tmp, name)
            dumps[path] = describe(path, hash_files=False)
    return {
        'shared': tree(shared),
        'tmp_dumps': dumps,
        'passwd_sha256': sha256(passwd),
        'tools_venv': os.path.lexists(tools),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', help='write the manifest to this file too')
    args = parser.parse_args(argv)
    text = json.dumps(manifest(), indent=2, sort_keys=True) + '\n'
    if args.out:
        tmp = args.out + '.tmp'
        with open(tmp, 'w') as handle:
            handle.write(text)
        os.replace(tmp, args.out)
    sys.stdout.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
