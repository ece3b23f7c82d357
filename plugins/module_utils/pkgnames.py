# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One spelling of a distribution's name and version, and the fingerprint of a set of them.

A lock (written by the control node) and an installed environment (read on
a host) name the same distribution in different spellings: ``PyNvVideoCodec``
in METADATA, ``pynvvideocodec`` in a lock; ``1.0-1`` in an old METADATA,
``1.0.post1`` in a lock.  Both sides go through :func:`canonical_name`
(PEP 503) and :func:`canonical_version` (PEP 440's normal form) before they
are compared, and :func:`set_fingerprint` turns a set of (name, version)
pairs into one short digest that is the same on the control node and on
every host that holds the same set.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import re

#: A distribution name as PEP 508 allows it (ASCII letters, digits, ``-_.``,
#: starting and ending with a letter or digit), at most 200 characters.
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,198}[A-Za-z0-9])?\Z")
_VERSION = re.compile(
    r"v?(?:(?P<epoch>[0-9]{1,9})!)?(?P<release>[0-9]{1,20}(?:\.[0-9]{1,20}){0,31})"
    r"(?P<pre>[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]{1,20})?)?"
    r"(?P<post>(?:-(?P<post_n1>[0-9]{1,20}))|(?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]{1,20})?))?"
    r"(?P<dev>[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]{1,20})?)?"
    r"(?:\+(?P<local>[a-z0-9]{1,64}(?:[-_.][a-z0-9]{1,64}){0,31}))?\Z")
_PRE = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "c": "rc", "pre": "rc", "preview": "rc", "rc": "rc"}
#: The longest version text accepted (a real one is under 60 characters).
VERSION_MAX = 200


def valid_name(name):
    """True when ``name`` is a distribution name PEP 508 accepts."""
    return isinstance(name, str) and bool(_NAME.match(name))


def canonical_name(name):
    """PEP 503: lower case, each run of ``-``, ``_`` and ``.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def canonical_version(version):
    """PEP 440's normal form of ``version`` (``1.0-1`` -> ``1.0.post1``,
    ``2.0RC1`` -> ``2.0rc1``, ``v1.2`` -> ``1.2``; leading zeros of a number
    dropped, trailing ``.0`` kept), or None when it is not a PEP 440 version
    (or is longer than :data:`VERSION_MAX`)."""
    if not isinstance(version, str) or len(version) > VERSION_MAX:
        return None
    match = _VERSION.match(version.strip().lower())
    if match is None:
        return None
    parts = []
    if match.group("epoch") and int(match.group("epoch")):
        parts.append("%d!" % int(match.group("epoch")))
    parts.append(".".join(str(int(n)) for n in match.group("release").split(".")))
    if match.group("pre"):
        parts.append("%s%d" % (_PRE[match.group("pre_l")], int(match.group("pre_n") or 0)))
    if match.group("post"):
        parts.append(".post%d" % int(match.group("post_n1") or match.group("post_n2") or 0))
    if match.group("dev"):
        parts.append(".dev%d" % int(match.group("dev_n") or 0))
    if match.group("local"):
        parts.append("+" + ".".join(str(int(p)) if p.isdigit() else p
                                    for p in re.split(r"[-_.]", match.group("local"))))
    return "".join(parts)


def pin_text(name, version):
    """``name==version`` in the canonical spelling of both (the version as
    given when it is not PEP 440)."""
    return "%s==%s" % (canonical_name(name), canonical_version(version) or version)


def set_fingerprint(pairs):
    """``sha256:<hex>`` of a set of (name, version) pairs: the sorted
    :func:`pin_text` lines, one per distribution, each ending in a newline.
    The same set gives the same fingerprint whatever the order or spelling."""
    lines = sorted(set(pin_text(name, version) for name, version in pairs))
    return "sha256:" + hashlib.sha256("".join(line + "\n" for line in lines).encode("utf-8")).hexdigest()


def short_fingerprint(fingerprint):
    """The first 12 hex digits of a :func:`set_fingerprint` value, for a table cell."""
    return fingerprint.split(":", 1)[-1][:12] if isinstance(fingerprint, str) else ""
