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

:func:`version_key` orders versions as PEP 440 does, and
:func:`specifier_problem` / :func:`specifier_contains` read and apply a
PEP 440 version specifier such as ``>=0.19.0,<0.40``, standard library
only (the hosts' Python may lack ``packaging``).
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


def not_accepted(names, accepted):
    """NAMES (as text) but those ACCEPTED names, in any spelling (PEP 503), in their order."""
    skip = set(canonical_name(str(name)) for name in accepted or ())
    return [str(name) for name in names if canonical_name(str(name)) not in skip]


def same_version(found, wanted):
    """Whether two versions are the same in their PEP 440 form (the text itself when one is not PEP 440)."""
    found, wanted = str(found or ""), str(wanted or "")
    return (canonical_version(found) or found) == (canonical_version(wanted) or wanted)


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


# ---------------------------------------------------------------- ordering and specifiers (PEP 440)

_PRE_RANK = {"a": 0, "b": 1, "rc": 2}
_CLAUSE = re.compile(r"\s*(~=|==|!=|<=|>=|<|>)\s*([^\s,]+)\s*\Z")
#: The most clauses one specifier may hold (a real one has one to three).
SPECIFIER_CLAUSES_MAX = 16


def _parts(version):
    """The parsed parts of a PEP 440 version: a dict, or None when it is not one."""
    if not isinstance(version, str) or len(version) > VERSION_MAX:
        return None
    match = _VERSION.match(version.strip().lower())
    if match is None:
        return None
    pre = None
    if match.group("pre"):
        pre = (_PRE[match.group("pre_l")], int(match.group("pre_n") or 0))
    post = None
    if match.group("post"):
        post = int(match.group("post_n1") or match.group("post_n2") or 0)
    local = None
    if match.group("local"):
        local = tuple(re.split(r"[-_.]", match.group("local")))
    return {
        "epoch": int(match.group("epoch") or 0),
        "release": tuple(int(n) for n in match.group("release").split(".")),
        "pre": pre,
        "post": post,
        "dev": int(match.group("dev_n") or 0) if match.group("dev") else None,
        "local": local,
    }


def _key(parts, with_local=True):
    release = list(parts["release"])
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    if parts["pre"] is None and parts["post"] is None and parts["dev"] is not None:
        pre = (0,)  # 1.0.dev0 sorts before 1.0a0
    elif parts["pre"] is None:
        pre = (3,)
    else:
        pre = (1, _PRE_RANK[parts["pre"][0]], parts["pre"][1])
    post = (0,) if parts["post"] is None else (1, parts["post"])
    dev = (1,) if parts["dev"] is None else (0, parts["dev"])
    local = (0,)
    if with_local and parts["local"] is not None:
        local = (1,) + tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in parts["local"])
    return (parts["epoch"], tuple(release), pre, post, dev, local)


def version_key(version):
    """A key that sorts PEP 440 versions in PEP 440's order (``0.19.0rc1`` < ``0.19.0`` < ``0.19.0.post1``,
    ``0.33.1.dev7`` < ``0.33.1``), or None when ``version`` is not a PEP 440 version."""
    parts = _parts(version)
    return None if parts is None else _key(parts)


def _clauses(specifier):
    """[(operator, version text, parts, prefix?)] of a specifier, or a sentence saying what is wrong."""
    if not isinstance(specifier, str) or not specifier.strip():
        return "it is empty"
    if len(specifier) > VERSION_MAX:
        return "it is longer than %d characters" % VERSION_MAX
    texts = specifier.split(",")
    if len(texts) > SPECIFIER_CLAUSES_MAX:
        return "it has more than %d clauses" % SPECIFIER_CLAUSES_MAX
    clauses = []
    for text in texts:
        match = _CLAUSE.match(text)
        if match is None:
            return "%r is not an operator (~=, ==, !=, <=, >=, <, >) followed by a version" % text.strip()
        operator, version = match.groups()
        prefix = version.endswith(".*")
        if prefix and operator not in ("==", "!="):
            return "%r: only == and != take a version ending in .*" % text.strip()
        parts = _parts(version[:-2] if prefix else version)
        if parts is None:
            return "%r: %r is not a PEP 440 version" % (text.strip(), version)
        if prefix and (parts["pre"] or parts["post"] is not None or parts["dev"] is not None or parts["local"]):
            return "%r: a version ending in .* may only hold release numbers" % text.strip()
        if parts["local"] and operator not in ("==", "!="):
            return "%r: only == and != take a local version (+...)" % text.strip()
        if operator == "~=" and len(parts["release"]) < 2:
            return "%r: ~= needs at least two release numbers (~=0.19 or ~=0.19.0)" % text.strip()
        clauses.append((operator, parts, prefix))
    return clauses


def specifier_problem(specifier):
    """None when ``specifier`` is a PEP 440 version specifier this module applies (comma-separated clauses of
    ``~=``, ``==`` (with ``.*``), ``!=``, ``<=``, ``>=``, ``<``, ``>``; no ``===``), else a sentence saying why not."""
    clauses = _clauses(specifier)
    return clauses if isinstance(clauses, str) else None


def _public(parts):
    return dict(parts, local=None)


def _base(parts):
    return (parts["epoch"], _key(dict(parts, pre=None, post=None, dev=None, local=None))[1])


def _is_pre(parts):
    return parts["pre"] is not None or parts["dev"] is not None


def _prefix_match(candidate, prefix):
    if candidate["epoch"] != prefix["epoch"]:
        return False
    width = len(prefix["release"])
    release = tuple(candidate["release"]) + (0,) * max(0, width - len(candidate["release"]))
    return release[:width] == prefix["release"]


def _clause_contains(operator, spec, prefix, candidate):
    if operator in ("==", "!="):
        if prefix:
            equal = _prefix_match(candidate, spec)
        elif spec["local"] is not None:
            equal = _key(candidate) == _key(spec)
        else:
            equal = _key(_public(candidate)) == _key(spec)
        return equal if operator == "==" else not equal
    mine, theirs = _key(_public(candidate)), _key(spec)
    if operator == ">=":
        return mine >= theirs
    if operator == "<=":
        return mine <= theirs
    if operator in ("<", ">") and _base(candidate) == _base(spec):
        # PEP 440: <V and >V leave out V's own family (as packaging does): <V takes no pre-release of a final V,
        # >V no post-release of a final or pre-release V
        if operator == "<":
            if _is_pre(spec):
                return mine < theirs
            # (a final V's post-release: all below it but its own development releases)
            return spec["post"] is not None and mine < theirs and not (
                candidate["dev"] is not None and (candidate["pre"], candidate["post"]) == (spec["pre"], spec["post"]))
        if spec["dev"] is not None or spec["post"] is not None:
            return mine > theirs
        return mine > theirs and candidate["pre"] != spec["pre"]
    if operator == "<":
        return mine < theirs
    if operator == ">":
        return mine > theirs
    # ~=V: >=V and ==V's release without its last number .*
    stem = dict(spec, release=spec["release"][:-1], pre=None, post=None, dev=None, local=None)
    return mine >= theirs and _prefix_match(candidate, stem)


def specifier_contains(specifier, version):
    """Whether ``version`` satisfies every clause of ``specifier`` (PEP 440, local version labels ignored except by
    ``==``/``!=`` with a local version). Pre-releases and development releases are matched like any other version
    (a nightly ``0.33.1.dev7`` satisfies ``>=0.19.0``), unlike pip's default. False when ``version`` is not a PEP 440
    version; ValueError when ``specifier`` is not a specifier (:func:`specifier_problem` says why)."""
    clauses = _clauses(specifier)
    if isinstance(clauses, str):
        raise ValueError("%r is not a version specifier: %s" % (specifier, clauses))
    candidate = _parts(version)
    if candidate is None:
        return False
    return all(_clause_contains(operator, spec, prefix, candidate) for operator, spec, prefix in clauses)
