# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Verify an installed Python distribution against the hashes in its RECORD.

The verdict comes from the ``RECORD`` file the installer wrote into the
distribution's ``.dist-info`` directory: every listed file is checked for
existence, type, size and (only when the size matches) its hash.  RECORD is
read with :mod:`csv`, not through ``importlib.metadata``, which on Python
3.12+ silently drops the entries of files that are missing.

Classes of a RECORD entry (see :data:`CLASSES`):

``ok``            present, same size, same hash
``modified``      same size, different hash; or a regular file replaced by a
                  symbolic link, or a file below a linked directory
``size_differs``  size differs from RECORD (not hashed: it cannot match)
``missing``       listed but not there
``unreadable``    there but could not be read (permissions, not a regular file)
``unhashed``      listed without a hash (reported, not a drift by itself)
``outside``       a path that leaves site-packages and is not a script in the
                  environment's ``bin/``; never opened
``malformed``     a RECORD row that cannot be understood

plus ``unowned``: files under the distribution's own top-level directories
that RECORD does not list (``__pycache__`` ignored and files other installed
distributions list are not counted), and ``.pth`` / ``sitecustomize`` /
``usercustomize`` start-up hooks in site-packages that no installed
distribution owns (or whose content no longer matches their owner's RECORD).

An editable install, an install without RECORD (``.egg-info``, distutils)
and an ambiguous one (two metadata directories for the same name in one
site directory) cannot be verified: the result says so with the reason and is
never ``pristine``.  Given the wheel, the installed RECORD's hashes are also
compared with the wheel's RECORD, so a rewritten RECORD cannot hide an edit.

Nothing outside the environment is opened: paths in RECORD that leave
site-packages are only followed into the environment's ``bin/``; symbolic
links inside site-packages are reported, never followed.

This module is the orchestration; each concern has its own module:

* :mod:`environment` - site-packages and ``bin/`` of an interpreter, a venv
  or a site-packages directory (:func:`environment.locate_environment`).
* :mod:`record` - the metadata directory, RECORD read with :mod:`csv`, the
  owners of other files, :func:`record.safe_text`, :class:`record.IntegrityError`.
* :mod:`filecheck` - each listed file against its row (hashed in a bounded
  thread pool, largest first) and the walk for files RECORD does not list.
* :mod:`debugscan` - the explanations for changed files (syntax-tree scan,
  literal patterns).
* :mod:`wheeldiff` - RECORD against the wheel's and a unified diff of each
  changed file; :mod:`uvtaint` - uv cache files sharing an inode with a
  changed file.  Both run only for changed files.

Public API, used by the module, the ``reinstall`` role and the ``audit``
playbook: :func:`verify` (the whole check, returns the module's result
dict), :func:`check_installed` (the environment located, then verify, as the
modules package_integrity_info and vllm_envs run it), :func:`drift_summary` (its
one sentence), :data:`CLASSES` and :data:`DRIFT_CLASSES`.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import stat
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.environment import (
    PROBE_TIMEOUT,
    locate_environment,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.filecheck import (
    HASHERS,
    OK,
    SMALL,
    WALK_MAX_DEPTH,
    Deadline,
    Hasher,
    check_file,
    default_workers,
    dir_state,
    walk,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import (
    CHUNK,
    TEXT_LIMIT,
    UNHASHED_BY_DESIGN,
    IntegrityError,
    Owners,
    decode_digest,
    editable_reason,
    find_metadata_dirs,
    metadata_field,
    read_record,
    read_small,
    safe_text,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.scanpatterns import (
    DEFAULT_PATTERNS,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.uvtaint import (
    default_uv_cache_dirs,
    find_uv_taint,
)

#: Every class a RECORD entry or a found file can end up in.
CLASSES = ("ok", "modified", "size_differs", "missing", "unreadable", "unhashed",
           "unowned", "outside", "malformed")
#: Classes that make an install not pristine.
DRIFT_CLASSES = ("modified", "size_differs", "missing", "unreadable", "unowned",
                 "outside", "malformed")
STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")
STARTUP_PACKAGES = ("sitecustomize", "usercustomize")

#: ``.pth`` files written by virtual-environment tools, recognised by content.
_VENV_TOOL_PTH = {"_virtualenv.pth": b"import _virtualenv"}


def _empty_result(dist_name):
    return {
        "changed": False,
        "pristine": False,
        "verifiable": False,
        "reason": None,
        "distribution": dist_name,
        "version": None,
        "installer": None,
        "site_packages": None,
        "dist_info": None,
        "environment": None,
        "counts": dict((c, 0) for c in CLASSES),
        "files": dict((c, []) for c in CLASSES if c != "ok"),
        "truncated": False,
        "offenders": [],
        "findings": [],
        "findings_total": 0,
        "diffs": [],
        "wheel": None,
        "wheel_error": None,
        "uv_cache_tainted": False,
        "uv_cache_taint": [],
        "uv_cache_dirs": [],
        "hardlinked_elsewhere": [],
        "shadowed": [],
        "elapsed": 0.0,
        "msg": "",
    }


def _clean(value):
    """A copy of a result value with every string made :func:`safe_text`."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return dict((safe_text(k) if isinstance(k, str) else k, _clean(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def clean_strings(value):
    """A copy of a result value with every string made :func:`safe_text`."""
    return _clean(value)


def _within(path, root):
    return path == root or path.startswith(root + os.sep)


class _Check:
    """One run of :func:`verify` (keeps the many intermediate lists together)."""

    def __init__(self, result, max_list):
        self.result = result
        self.max_list = max_list
        self.offenders = []

    def add(self, cls, item):
        self.result["counts"][cls] += 1
        if cls == "ok":
            return
        listed = self.result["files"][cls]
        if len(listed) < self.max_list:
            listed.append(item)
        else:
            self.result["truncated"] = True
        if cls in DRIFT_CLASSES and len(self.offenders) < self.max_list:
            self.offenders.append({"path": item.get("path", ""), "class": cls})


class RecordPaths:
    """Where the RECORD rows of one installed distribution point, and which may be opened.

    :meth:`classify` turns a row into ``(label, full path, path relative to
    site-packages or None)`` for a file to check, or adds it to ``check``
    (``malformed`` when listed twice, ``missing`` or ``modified`` below an
    absent or linked directory, ``outside``) and returns None.  A path that
    leaves site-packages is opened only when it is a script in the
    environment's ``bin/``, or, given ``data_root`` (the environment's
    prefix), a data file the wheel installed below it (``share/``, ...);
    never through a linked directory.  ``recorded`` holds the relative paths
    seen so far, ``dir_memo`` the state of each directory on the way
    (:func:`filecheck.dir_state`).  Used by :func:`verify` and by
    :mod:`fingerprint` (one per distribution, all hashed in one pool).
    """

    def __init__(self, check, site, meta_path, environment, data_root=None):
        self.check = check
        self.real_site = real_site = os.path.realpath(site)
        self.prefix = real_site + os.sep
        self.lexical_site = os.path.abspath(site)
        self.real_scripts = os.path.realpath(environment.scripts_dir) if environment.scripts_dir else None
        self.real_data = os.path.realpath(data_root) if data_root else None
        self.dist_info_rel = os.path.relpath(os.path.realpath(meta_path), real_site).replace(os.sep, "/")
        self.skip_unhashed = set(self.dist_info_rel + "/" + name for name in UNHASHED_BY_DESIGN)
        self.recorded = set()
        self.dir_memo = {"": "ok"}
        self.seen_outside = set()

    def add_malformed(self, malformed):
        """Count the rows RECORD could not parse; their paths count as listed."""
        real_site = self.real_site
        for item in malformed:
            self.check.add("malformed", item)
            try:
                full = os.path.normpath(os.path.join(real_site, item["path"]))
            except ValueError:
                continue
            if _within(full, real_site):
                self.recorded.add(full[len(real_site) + 1:].replace(os.sep, "/"))

    def _opened_outside(self, full):
        """The directory (scripts or data root) below which ``full`` may be opened, or None."""
        real_scripts = self.real_scripts
        if real_scripts and _within(full, real_scripts) and full != real_scripts:
            return real_scripts
        real_data = self.real_data
        if real_data and _within(full, real_data) and full != real_data:
            return real_data
        return None

    def classify(self, row):
        """(label, full path, relative path or None) of a row to check, or None."""
        raw = row.path
        prefix = self.prefix
        check = self.check
        if raw[0] != "/" and "//" not in raw and "./" not in raw and raw[-1] not in "./":
            rel = raw
            full = prefix + raw
        else:
            full = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(self.real_site, raw))
            rel = full[len(prefix):].replace(os.sep, "/") if full.startswith(prefix) else None
        if rel is not None:
            recorded = self.recorded
            if rel in recorded:
                check.add("malformed", {"line": row.line, "path": raw, "reason": "listed more than once"})
                return None
            recorded.add(rel)
            if rel in self.skip_unhashed and row.algorithm is None:
                return None
            parent, sep, dummy = rel.rpartition("/")
            if sep:
                dir_memo = self.dir_memo
                state = dir_memo.get(parent)
                if state is None:
                    state = dir_state(parent, self.real_site, dir_memo)
                if state != "ok":
                    if state == "absent":
                        check.add("missing", {"path": rel} if row.size is None else {"path": rel, "expected_size": row.size})
                    else:
                        reason = "directory %s is a symbolic link (wheels install real directories); not followed" % state[5:]
                        check.add("modified", {"path": rel, "reason": reason})
                    return None
            return rel, full, rel
        if self.lexical_site != self.real_site and self._opened_outside(full) is None:
            # site-packages is reached through a symbolic link: the installer
            # wrote ../../../bin/NAME relative to the path it was given, not
            # to the link's target; judge the file by its resolved directory.
            lexical = os.path.normpath(os.path.join(self.lexical_site, raw))
            resolved = os.path.join(os.path.realpath(os.path.dirname(lexical)), os.path.basename(lexical))
            if self._opened_outside(resolved) is not None:
                full = resolved
        if full in self.seen_outside:
            check.add("malformed", {"line": row.line, "path": raw, "reason": "listed more than once"})
            return None
        self.seen_outside.add(full)
        base = self._opened_outside(full)
        if base is None:
            where = "a script in the environment's bin/" if self.real_data is None else "in the environment"
            check.add("outside", {"path": raw, "resolved": full,
                                  "reason": "leaves site-packages and is not %s; not opened" % where})
            return None
        parent = os.path.dirname(full)
        if parent != base and os.path.realpath(parent) != parent:
            check.add("modified", {"path": raw, "reason": "a directory on the way is a symbolic link; not followed"})
            return None
        return raw, full, None


def verify(site_packages=None, dist_name="vllm", python=None, venv=None, wheel=None,
           patterns=DEFAULT_PATTERNS, uv_cache_dirs=None, max_list=50, diff_max_bytes=16384,
           workers=None, run_command=None, environment=None, timeout=None):
    """Verify ``dist_name`` against its RECORD; returns the module's result dict.

    Exactly one of ``site_packages``, ``python``, ``venv`` (or a ready
    ``environment`` from :func:`locate_environment`).  ``wheel``: a wheel
    file or wheelhouse directory for the diff of changed text files.
    ``uv_cache_dirs``: list of uv caches to look for shared inodes in (None:
    :func:`default_uv_cache_dirs`).  ``max_list`` bounds every list in the
    result (the counts are always complete).

    Raises :class:`IntegrityError` when no verdict is possible at all
    (unknown distribution, unreadable site-packages, broken interpreter), or
    when ``timeout`` seconds (None: no limit) pass before it is done.
    """
    started = time.monotonic()
    deadline = Deadline(timeout)
    if patterns is None:
        patterns = DEFAULT_PATTERNS
    result = _empty_result(dist_name)
    check = _Check(result, max(1, int(max_list)))
    if environment is None:
        environment = locate_environment(python=python, venv=venv, site_packages=site_packages,
                                         run_command=run_command)
    result["environment"] = environment.as_dict()

    metas = find_metadata_dirs(environment.site_dirs, dist_name)
    if not metas:
        raise IntegrityError(
            "The distribution %r is not installed in %s (no %s-*.dist-info directory there). "
            "Check the name and the python, venv or site_packages option."
            % (dist_name, " or ".join(environment.site_dirs), re.sub(r"[-_.]+", "_", dist_name)))
    site, entry, kind, version = metas[0]
    # Python imports from the first site directory that has it; later ones are shadowed.
    result["shadowed"] = [os.path.join(m[0], m[1]) for m in metas if m[0] != site]
    metas = [m for m in metas if m[0] == site]
    meta_path = os.path.join(site, entry)
    real_site = os.path.realpath(site)
    result["site_packages"] = site
    result["dist_info"] = meta_path
    result["version"] = version
    metadata_raw = read_small(os.path.join(meta_path, "METADATA")) or read_small(os.path.join(meta_path, "PKG-INFO"))
    result["version"] = metadata_field(metadata_raw, "Version") or version
    installer = read_small(os.path.join(meta_path, "INSTALLER"), 200)
    if installer:
        result["installer"] = installer.decode("utf-8", "replace").strip() or None

    def finish(reason=None):
        if reason:
            result["reason"] = reason
            result["verifiable"] = False
            result["pristine"] = False
        result["offenders"] = check.offenders[:check.max_list]
        result["elapsed"] = round(time.monotonic() - started, 4)
        result["msg"] = drift_summary(result)
        cleaned = _clean(result)
        result.clear()
        result.update(cleaned)
        return result

    if len(metas) > 1:
        return finish("more than one metadata directory for %s is installed (%s); remove the stale one "
                      "before a verdict is possible" % (dist_name, ", ".join(os.path.join(m[0], m[1]) for m in metas)))
    if kind == "egg-link":
        return finish("it is an editable (develop) install (%s): its code lives in the source tree, not in "
                      "site-packages" % meta_path)
    if kind != "dist-info":
        return finish("it was installed without a RECORD (%s %s): there are no recorded hashes to verify "
                      "against; reinstall it from a wheel" % (kind, meta_path))
    record_path = os.path.join(meta_path, "RECORD")
    try:
        rows, malformed = read_record(record_path)
    except FileNotFoundError:
        return finish("%s has no RECORD file: there are no recorded hashes to verify against; "
                      "reinstall it from a wheel" % meta_path)
    except OSError as exc:
        return finish("its RECORD %s cannot be read (%s)" % (record_path, exc.strerror or exc))
    except IntegrityError as exc:
        return finish(str(exc))
    editable = editable_reason(meta_path, rows)
    if editable:
        return finish(editable)
    result["verifiable"] = True
    paths = RecordPaths(check, site, meta_path, environment)
    paths.add_malformed(malformed)
    recorded = paths.recorded
    dir_memo = paths.dir_memo
    dist_info_rel = paths.dist_info_rel
    classify = paths.classify

    # Large files (and odd rows) first, so hashing starts before the rest is sorted out.
    labels = []
    big = []
    small_rows = []
    for row in rows:
        if row.size is not None and row.size <= SMALL and row.algorithm is not None:
            small_rows.append(row)
            continue
        found = classify(row)
        if found is not None:
            big.append((len(labels), found[1], row.size, row.algorithm, row.digest, found[2]))
            labels.append((found[0], row, found[1]))
    deadline.check("reading RECORD")
    hasher = Hasher(workers or default_workers(), deadline)
    hasher.start(big)
    try:
        small = []
        for row in small_rows:
            found = classify(row)
            if found is not None:
                small.append((len(labels), found[1], row.size, row.algorithm, row.digest, found[2]))
                labels.append((found[0], row, found[1]))
        top_dirs = set(d for d in set(k.partition("/")[0] for k in dir_memo if k) if dir_memo.get(d) == "ok")
        # -- while the large files hash: walk the package's directories ----
        candidates, regular = walk(real_site, top_dirs, recorded, check, deadline)
        hasher.add_small([(j[0], j[1], j[2], j[3], j[4], j[5] is not None and j[5] in regular) for j in small])
    finally:
        hashed = hasher.finish()

    changed_stats = []
    rescan = []
    already = set()
    bad = sorted((index, res) for index, res in hashed.items() if res is not OK)
    result["counts"]["ok"] += len(hashed) - len(bad)
    for index, (cls, detail, st) in bad:
        label, row, full = labels[index]
        already.add(row.path)
        item = {"path": label}
        if detail:
            item.update(detail)
        if cls == "missing" and row.size is not None:
            item["expected_size"] = row.size
        check.add(cls, item)
        if cls in ("modified", "size_differs"):
            changed_stats.append((label, st))
            if st is not None and stat.S_ISREG(st.st_mode):
                rescan.append((label, full, "changed"))

    # -- unowned files ----------------------------------------------------
    owners = Owners(environment.site_dirs, {os.path.realpath(meta_path)})
    for rel, what in candidates:
        full = os.path.join(real_site, *rel.split("/"))
        if owners.owner(full) is not None:
            continue
        item = {"path": rel}
        if what == "link":
            try:
                item["reason"] = "symbolic link to %s" % os.readlink(full)[:300]
            except OSError:
                item["reason"] = "symbolic link"
        elif what == "other":
            item["reason"] = "not a regular file"
        elif what == "deep":
            item["path"] = rel + "/"
            item["reason"] = ("directory nested more than %d levels deep in the package; not walked (no wheel installs "
                              "such a tree)" % WALK_MAX_DEPTH)
        else:
            rescan.append((rel, full, "unowned"))
        check.add("unowned", item)
    _check_startup_hooks(environment, real_site, recorded, owners, check, rescan)

    # -- wheel: RECORD against the wheel's, and diffs ---------------------
    changed_lines = {}
    if wheel:
        # imported here: zipfile and difflib are only needed when a wheel is given (AnsiballZ still ships it)
        from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.wheeldiff import compare_wheel
        compare_wheel(wheel, dist_name, result, check, rows, real_site, dist_info_rel, rescan, changed_lines,
                      diff_max_bytes, already, deadline)

    # -- explanations -----------------------------------------------------
    if rescan:
        # imported here: the syntax-tree scan is needed only when a file changed (AnsiballZ still ships it)
        from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.debugscan import explain
    findings = []
    total = 0
    explained = 0
    for label, full, why in rescan:
        deadline.check("explaining changed files (%d of %d scanned; the hashes were all checked)" % (explained, len(rescan)))
        if explained >= check.max_list * 4:
            result["truncated"] = True
            break
        explained += 1
        data = read_small(full, TEXT_LIMIT + 1)
        if data is None:
            continue
        if len(data) > TEXT_LIMIT:
            if label.endswith((".py", ".pyw", ".pth")):
                findings.append({"path": label, "line": 0, "kind": "not_scanned", "text": "",
                                 "what": "larger than %d bytes; not scanned for dumps, debuggers or patterns" % TEXT_LIMIT})
                total += 1
            continue
        is_pth = label.endswith(".pth")
        items, count = explain(data, label, patterns, python=False if is_pth else None, limit=max(1, check.max_list))
        if is_pth:
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if line.startswith(("import ", "import\t")):
                    items.append({"path": label, "line": number, "kind": "pth_exec",
                                  "what": "executed by every Python start in this environment",
                                  "text": line.strip()[:200]})
                    count += 1
        lines = changed_lines.get(label)
        for item in items:
            if lines is not None:
                item["changed_line"] = item["line"] in lines
        total += count
        findings.extend(items)
    findings.sort(key=lambda f: (f["path"], f["line"], f["kind"] == "pattern"))
    result["findings"] = findings[:check.max_list]
    result["findings_total"] = total
    if len(findings) > len(result["findings"]) or total > len(findings):
        result["truncated"] = True

    # -- uv cache taint ---------------------------------------------------
    caches = default_uv_cache_dirs() if uv_cache_dirs is None else [c for c in uv_cache_dirs if c]
    result["uv_cache_dirs"] = caches
    if changed_stats:
        site_changed = [(label, st) for label, st in changed_stats if not label.startswith("../") and not os.path.isabs(label)]
        tainted, elsewhere = find_uv_taint(site_changed, caches, entry)
        result["uv_cache_taint"] = tainted[:check.max_list]
        result["uv_cache_tainted"] = bool(tainted)
        result["hardlinked_elsewhere"] = elsewhere[:check.max_list]

    result["pristine"] = result["verifiable"] and not any(result["counts"][c] for c in DRIFT_CLASSES)
    return finish()


def _check_startup_hooks(environment, real_site, recorded, owners, check, rescan):
    """``.pth`` and sitecustomize/usercustomize hooks owned by no distribution."""
    for site in environment.site_dirs:
        real = os.path.realpath(site)
        try:
            names = sorted(os.listdir(real))
        except OSError:
            continue
        for name in names:
            is_pkg = name in STARTUP_PACKAGES and os.path.isdir(os.path.join(real, name))
            if not (name.endswith(".pth") or name in STARTUP_FILES or is_pkg):
                continue
            full = os.path.join(real, name)
            if real == real_site and name in recorded:
                continue
            if is_pkg:
                init = os.path.join(full, "__init__.py")
                if owners.owner(init) is None:
                    check.add("unowned", {"path": name + "/", "reason": "start-up hook package owned by no installed distribution"})
                    if os.path.isfile(init):
                        rescan.append((name + "/__init__.py", init, "unowned"))
                continue
            label = name if real == real_site else full
            if os.path.islink(full):
                try:
                    target = os.readlink(full)
                except OSError:
                    target = "?"
                check.add("unowned", {"path": label, "reason": "start-up hook is a symbolic link to %s; not followed" % target[:300]})
                continue
            owner = owners.owner(full)
            if owner is None:
                expected = _VENV_TOOL_PTH.get(name)
                if expected is not None:
                    data = read_small(full, 4096)
                    if data is not None and data.strip() == expected:
                        continue
                check.add("unowned", {"path": label, "reason": "start-up hook owned by no installed distribution"})
                rescan.append((label, full, "unowned"))
                continue
            owner_entry, hash_text = owner
            if not hash_text or "=" not in hash_text:
                continue
            algorithm, dummy, encoded = hash_text.partition("=")
            algorithm = algorithm.lower()
            digest = decode_digest(algorithm, encoded) if algorithm in HASHERS else None
            if digest is None:
                continue
            # streamed like every other file (a large .pth is hashed whole, never read whole)
            buf = bytearray(CHUNK)
            verdict = check_file(full, None, algorithm, digest, buf, memoryview(buf))
            if verdict[0] != "ok":
                check.add("unowned", {"path": label, "owner": owner_entry,
                                      "reason": "start-up hook listed by %s, but its content no longer matches that RECORD" % owner_entry})
                rescan.append((label, full, "unowned"))


def check_installed(dist_name="vllm", python=None, venv=None, site_packages=None, python_timeout=PROBE_TIMEOUT,
                    timeout=None, **options):
    """The check of the module package_integrity_info (and of the decision of vllm_envs): the environment located from
    exactly one of ``python``, ``venv``, ``site_packages`` (an interpreter stopped after ``python_timeout``
    seconds), then :func:`verify` with ``options`` (wheel, patterns, uv_cache_dirs, max_list, diff_max_bytes)
    within ``timeout`` seconds.  The result has ``changed`` false and ``version_matches`` null (the module compares
    a version).

    Raises :class:`IntegrityError` when no verdict is possible, and for an unexpected error, in one sentence.
    """
    try:
        environment = locate_environment(python=python, venv=venv, site_packages=site_packages, timeout=python_timeout)
        result = verify(dist_name=dist_name, environment=environment, timeout=timeout, **options)
    except IntegrityError:
        raise
    except (OSError, RecursionError, MemoryError, ValueError, RuntimeError) as exc:
        # Not expected: say what happened in one sentence rather than with a traceback.
        raise IntegrityError("The integrity check of %s stopped on an unexpected %s: %s. Nothing was changed (the "
                             "check only reads)." % (dist_name, type(exc).__name__, exc))
    result["changed"] = False
    result["version_matches"] = None
    return result


def drift_summary(result, first=5):
    """One sentence for the operator: the verdict, the counts and the first files."""
    name = "%s %s" % (result["distribution"], result.get("version") or "")
    where = result.get("site_packages") or "?"
    if not result.get("verifiable"):
        return "%s in %s cannot be verified: %s." % (name.strip(), where, result.get("reason") or "unknown reason")
    counts = result["counts"]
    if result.get("pristine"):
        extra = ""
        if counts.get("unhashed"):
            extra = " (%d listed without a hash: %s)" % (counts["unhashed"], ", ".join(
                i["path"] for i in result["files"]["unhashed"][:first]))
        return "%s in %s is pristine: %d files match their RECORD hashes%s." % (name.strip(), where, counts["ok"], extra)
    parts = ["%d %s" % (counts[c], c.replace("_", " ")) for c in DRIFT_CLASSES if counts.get(c)]
    offenders = result.get("offenders") or []
    listed = offenders[:first]
    shown = ", ".join("%s (%s)" % (o["path"], o["class"].replace("_", " ")) for o in listed)
    more = sum(counts[c] for c in DRIFT_CLASSES) > len(listed)
    msg = "%s in %s is not pristine: %s. First: %s%s." % (
        name.strip(), where, ", ".join(parts), shown, ", ..." if more else "")
    if result.get("uv_cache_tainted"):
        entries = sorted(set(t["cache_entry"] for t in result.get("uv_cache_taint") or []))
        caches = sorted(set(os.path.dirname(os.path.dirname(e)) for e in entries))
        clean = " && ".join("uv cache clean %s --cache-dir %s" % (result["distribution"], c) for c in caches[:3])
        msg += (" The edit is also in uv's cache (%s, hard-linked): a plain `uv pip install --reinstall` "
                "can put the edited file back, so clean %s from the cache first (`%s`) "
                "and reinstall with --link-mode=copy." % (", ".join(entries[:3]), result["distribution"], clean))
    return msg
