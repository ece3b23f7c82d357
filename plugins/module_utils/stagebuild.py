# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Staging a build: a new environment made with uv beside the serving one, proved pristine, or removed.

The procedure of the module ``vllm_stage`` (the role ``reinstall``'s build),
in the order it runs on the host, each step bounded:

1. the values checked (nothing reaches uv's command line that it would read
   as an option of its own, or that holds a control character), the path of
   the new environment free, uv there, room on its filesystem;
2. uv's cache entries of the package removed (an operator's edit in a file
   uv hard-linked into the cache must not come back), unreferenced ones pruned;
3. ``uv venv`` with the given interpreter;
4. with a lock: the new interpreter's Python, machine and C library against
   the lock's (:func:`lockfile.check_target`), the lock written into the
   environment, ``uv pip sync --require-hashes`` of exactly it; without one,
   ``uv pip install`` of the target; always ``--link-mode copy``;
5. the package checked against its ``RECORD`` at the target version
   (:func:`integrity.check_installed`), and with a lock every package
   against the lock and pristine (:func:`fingerprint.check_environment`).

A failure from step 3 on removes the new environment; the message says the
step, what uv (or the check) said, and that the serving environment was not
touched. Commands run through a runner ``run(argv, timeout, env) -> (rc,
stdout, stderr)`` (:func:`bounded.run_bounded` on a host; tests give their
own).

Public API: :func:`check_options`, :func:`plan` (the commands, for check
mode), :func:`build`, :class:`StageFailed`.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import binascii
import json
import os
import re
import shutil
import stat
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded, diskspace, lockfile, pkgnames, uvcli, venvs
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.fingerprint import (
    check_environment, mismatch_message, not_pristine_message)
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.check import check_installed
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.record import IntegrityError
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown, valid_text, value_problems

#: what the new environment's interpreter says of itself (isolated, no site hooks): Python X.Y, machine, C library
PROBE_CODE = ("import json, os, platform, sys; "
              "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(), "
              "'libc': os.confstr('CS_GNU_LIBC_VERSION') if 'CS_GNU_LIBC_VERSION' in os.confstr_names else ''}))")
PROBE_TIMEOUT = 60
#: the file that marks the new environment's directory as this run's while it is built (removed once it is proved):
#: the run's token, its process and the boot (venvs.staging_mark). A directory that still holds it is unfinished
#: (a run killed mid-install leaves one): vllm_envs never reuses it, and removes it once no process builds it
MARKER = venvs.STAGING_MARKER
#: the file in the new environment that keeps the lock it was built from
LOCK_NAME = "gpufleet.lock"
#: the most characters of a lock given to the module (a real one is tens of KiB)
LOCK_MAX = 4 * 1024 * 1024
#: how many of uv's last error lines a failure quotes
ERROR_LINES = 6
HASH_MISMATCH = re.compile(r"[Hh]ash mismatch")
PRERELEASE = ("", "disallow", "allow", "if-necessary", "explicit", "if-necessary-or-explicit")
#: the checks' own "nothing was changed" (they only read): the staging's sentence says what became of the environment
_READS_ONLY = re.compile(r"\s*Nothing was changed \(the check only reads\)\.?")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_EXACT = re.compile(r"^[0-9][0-9A-Za-z.!+_-]*\Z")

#: the steps, in order, as the result and the messages name them
STEPS = (
    ("room", "check the room for the new environment"),
    ("cache", "remove the package from uv's cache"),
    ("venv", "create the venv"),
    ("probe", "check the new interpreter against the lock"),
    ("lock", "put the lock into the new environment"),
    ("install", "install"),
    ("record", "verify the new environment against RECORD"),
    ("fingerprint", "prove the new environment is exactly the lock"),
)
STEP_NAMES = dict(STEPS)


class StageFailed(Exception):
    """A staging that failed: MSG for the operator, RESULT what is known (steps, removed, checks)."""

    def __init__(self, msg, result):
        super(StageFailed, self).__init__(msg)
        self.msg = msg
        self.result = result


def _lines_of(text, limit=ERROR_LINES):
    lines = [uvcli.without_credentials(ln.strip()) for ln in valid_text(text or "").splitlines() if ln.strip()]
    return lines[-limit:]


def parse_the_lock(text):
    """The parsed lock (lockfile.parse_lock) of TEXT, or raise ValueError in one sentence."""
    if len(text) > LOCK_MAX:
        raise ValueError("lock is %d characters, more than the %d a lock of this collection holds" % (len(text), LOCK_MAX))
    try:
        return lockfile.parse_lock(text, where="the lock")
    except lockfile.LockError as exc:
        raise ValueError(str(exc).rstrip("."))


def check_options(p):
    """Why the options P (the module's params) cannot be used, one sentence each; empty when they can."""
    problems = []
    env = p["env"] or ""
    if not env.startswith("/") or os.path.normpath(env) in ("/", "//"):
        problems.append("env must be an absolute path below a directory, got %s" % shown(env))
    elif os.path.normpath(env) != env.rstrip("/"):
        problems.append("env must be a plain path (no '.', '..' or '//' in it), got %s" % shown(env))
    if p.get("current_env") and env and os.path.normpath(p["current_env"]) == os.path.normpath(env):
        problems.append("env is the current environment (%s): staging never builds over the environment that serves"
                        % shown(env))
    if not pkgnames.valid_name(p["package"]):
        problems.append("package must be a distribution name such as vllm (letters, digits, '.', '_', '-'), got %s"
                        % shown(p["package"]))
    if not _EXACT.match(p["version"] or ""):
        problems.append("version must be one exact version such as 0.33.0, got %s" % shown(p["version"] or ""))
    uv = p["uv"] or ""
    if not uv or ("/" in uv and not uv.startswith("/")):
        problems.append("uv must be the uv executable, an absolute path or a name found on PATH, got %s" % shown(uv))
    if p["prerelease"] not in PRERELEASE:
        problems.append("prerelease must be one of %s, got %s" % (", ".join(PRERELEASE[1:]), shown(p["prerelease"])))
    for name, value in (("timeout", p["timeout"]), ("check_timeout", p["check_timeout"]), ("max_list", p["max_list"])):
        if value < 1:
            problems.append("%s must be 1 or more, got %d" % (name, value))
    if p["min_free_mib"] < 0:
        problems.append("min_free_mib must be 0 or more, got %d" % p["min_free_mib"])
    for key in p["environment"] or {}:
        if not _ENV_NAME.match(str(key)):
            problems.append("environment holds %s, which is not a variable name (letters, digits, '_')" % shown(str(key)))
    if p["lock"] is not None:
        if p["extra_packages"]:
            problems.append("extra_packages cannot be given with a lock: the lock holds the whole environment")
        if p["no_deps"]:
            problems.append("no_deps cannot be given with a lock: a lock holds every dependency it installs")
    problems += value_problems(
        {"env": env, "package": p["package"], "version": p["version"], "python": p["python"],
         "extra_packages": p["extra_packages"], "index_url": p["index_url"],
         "extra_index_urls": p["extra_index_urls"], "find_links": p["find_links"],
         "torch_backend": p["torch_backend"], "uv": p["uv"], "cache_dir": p["cache_dir"],
         "current_env": p["current_env"], "host_name": p["host_name"]},
        options=("env", "package", "version", "python", "extra_packages", "index_url", "extra_index_urls",
                 "find_links", "torch_backend", "uv", "cache_dir"))
    problems += value_problems({"environment": p["environment"] or {}}, quoted=("environment",))
    return problems


def _global_args(p):
    return ["--no-progress", "--color", "never"] + (["--cache-dir", p["cache_dir"]] if p["cache_dir"] else [])


def _source_args(p, locked):
    # (a lock decides every version and holds every dependency: no pre-release rule, no --no-deps)
    argv = uvcli.source_args(index_url=p["index_url"], extra_index_urls=p["extra_index_urls"],
                             find_links=p["find_links"], no_index=p["no_index"],
                             prerelease="" if locked else p["prerelease"])
    argv += ["--torch-backend", p["torch_backend"]] if p["torch_backend"] else []
    argv += ["--no-deps"] if p["no_deps"] and not locked else []
    return argv


def plan(p):
    """The commands the build runs, in order: [(step, argv)] (the probe and the checks are not commands of uv)."""
    uv, env, locked = p["uv"], p["env"], p["lock"] is not None
    python = env + "/bin/python"
    steps = []
    if p["cache_clean"]:
        steps.append(("cache", [uv, "cache", "clean"] + _global_args(p) + [p["package"]]))
        steps.append(("cache", [uv, "cache", "prune"] + _global_args(p)))
    # (the module makes the directory itself, right before, so that the path is claimed by this run:
    # --allow-existing lets uv fill it)
    venv = ["--no-python-downloads", "--allow-existing", "--python", p["python"], env]
    steps.append(("venv", [uv, "venv"] + _global_args(p) + venv))
    if locked:
        steps.append(("probe", [python, "-I", "-S", "-c", PROBE_CODE]))
    install = [uv, "pip", "sync" if locked else "install"] + _global_args(p) + [
        "--python", python, "--link-mode", "copy", "--no-python-downloads"]
    if locked:
        install += ["--require-hashes"] + _source_args(p, True) + [env + "/" + LOCK_NAME]
    else:
        install += _source_args(p, False) + ["%s==%s" % (p["package"], p["version"])] + list(p["extra_packages"])
    steps.append(("install", install))
    return steps


def uv_environment(p, token=""):
    """The environment uv runs with: the staging's TOKEN first (venvs.VARIABLE: every process uv starts carries it,
    so that the next run tells that they still build the new environment), the module's, NO_COLOR, then the given
    variables."""
    env = {venvs.VARIABLE: token} if token else {}
    env.update((key, value) for key, value in os.environ.items() if key != venvs.VARIABLE)
    env["NO_COLOR"] = "1"
    for key, value in (p["environment"] or {}).items():
        env[str(key)] = str(value)
    if token:
        # (the operator's variables do not replace it; it stays first)
        env[venvs.VARIABLE] = token
    return env


def _default_run(argv, timeout, env):
    return bounded.run_bounded(argv, timeout, env=env)


class _Build(object):
    """One staging run: the steps done so far, their times, and the failure's message."""

    def __init__(self, p, run, clock):
        self.p, self.run, self.clock = p, run, clock
        self.steps = []
        self.result = {"changed": False, "env": p["env"], "steps": self.steps, "removed": False, "created": False,
                       "cache_removed": False, "lock": None, "check": None, "fingerprint": None}
        self.identity = None
        #: the step that runs now (the one an unexpected error stopped)
        self.step = "room"
        self.what = "%s %s" % (p["package"], p["version"])
        self.host = p["host_name"] or "this host"
        self.current = p["current_env"] or "the current environment"
        #: the run's own token: in the staging's mark and in the environment of every command it runs
        self.token = binascii.hexlify(os.urandom(16)).decode("ascii")

    def done(self, step, started, **extra):
        entry = {"step": step, "name": STEP_NAMES[step], "seconds": round(self.clock() - started, 2)}
        entry.update(extra)
        self.steps.append(entry)

    def refuse(self, why):
        """A failure before anything of the new environment exists."""
        raise StageFailed("Staging %s on %s was refused: %s. Nothing was changed; the service and %s were not touched."
                          % (self.what, self.host, why.rstrip("."), self.current), self.result)

    def stop(self, step, why):
        """A failure before the new environment was created (uv's cache cleaned, the directory made, perhaps)."""
        raise StageFailed("Staging %s on %s failed at '%s': %s. The new environment was not created; the service and "
                          "%s were not touched." % (self.what, self.host, STEP_NAMES[step],
                                                    valid_text(why).strip().rstrip("."), self.current), self.result)

    def fail(self, step, why, hint=""):
        """A failure once the new environment was created: it is removed (only the directory this run made), and
        the message says so."""
        env = self.p["env"]
        removal = self._remove_ours(env)
        why = valid_text(why).strip().rstrip(".")
        raise StageFailed("Staging %s on %s failed at '%s': %s%s. %s; the service and %s were not touched."
                          % (self.what, self.host, STEP_NAMES[step], hint, why, removal, self.current), self.result)

    def _remove_ours(self, env):
        """Remove ENV when it is still the directory this run made; the sentence that says what became of it."""
        try:
            info = os.lstat(env)
        except FileNotFoundError:
            return "No part of the new environment %s was left" % env
        except OSError as exc:
            return "The incomplete environment %s could not be looked at (%s): remove it by hand before the next run" % (
                env, exc.strerror or exc)
        if self.identity is None or (info.st_dev, info.st_ino) != self.identity[:2] or not stat.S_ISDIR(info.st_mode) \
                or _read_marker(env) != self.identity[2]:
            return ("%s is not the directory this run made (another run or a person put it there); it was left alone: "
                    "look at it before the next run" % env)
        try:
            _remove(env)
        except OSError as exc:
            return ("The incomplete environment %s could NOT be removed (%s): remove it by hand before the next run"
                    % (env, exc.strerror or exc))
        self.result["removed"] = True
        return "The incomplete environment %s was removed" % env

    def claim(self):
        """Make the new environment's directory (the venv step fills it): the path is this run's from here on.

        The directory is made under a hidden name beside it, marked, then renamed to its path: a run killed at any
        point leaves either nothing under the environment's name or a marked directory (unfinished), never an
        unmarked one that would read as a finished environment."""
        env = self.p["env"]
        # (an inode number is reused at once: the marker's token says the directory is still this run's; the process
        # and boot in it tell the next run whether a staging still builds it)
        token = self.token
        mark = venvs.staging_mark(token)
        claim = os.path.join(os.path.dirname(env), ".%s.claim-%s" % (os.path.basename(env), token[:12]))
        try:
            os.mkdir(claim, 0o755)
        except OSError as exc:
            self.stop("venv", "%s could not be created: %s" % (claim, exc.strerror or exc))
        try:
            fd = os.open(os.path.join(claim, MARKER),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(mark)
            os.chmod(claim, 0o755)
            # (rename would replace an empty directory: one that is there already is another's)
            if os.path.lexists(env):
                raise FileExistsError(17, "File exists")
            os.rename(claim, env)
        except OSError as exc:
            try:
                _remove(claim)
            except OSError:
                pass
            if isinstance(exc, FileExistsError) or os.path.lexists(env):
                self.stop("venv", "%s appeared while this run staged (another run, or a person); it was left alone"
                          % env)
            self.stop("venv", "%s could not be created: %s" % (env, exc.strerror or exc))
        info = os.lstat(env)
        self.result["changed"] = self.result["created"] = True
        self.identity = (info.st_dev, info.st_ino, mark)
        # (a mark an earlier cleanup kept beside a killed staging of the same name is not this one's: left, it would
        # make this one unfinished)
        try:
            os.unlink(os.path.join(os.path.dirname(env), venvs.TOMBSTONE % os.path.basename(env)))
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.fail("venv", "the mark of a killed staging of the same name beside it could not be removed: %s"
                      % (exc.strerror or exc))

    def release(self):
        """The build is proved: the directory is the new environment now, without the staging's marker."""
        os.unlink(os.path.join(self.p["env"], MARKER))

    def command(self, step, argv, timeout=None):
        """Run ARGV for STEP; (rc, out, err). A command that could not finish fails STEP, with uv's last lines."""
        started = self.clock()
        rc, out, err = self.run(argv, timeout or self.p["timeout"], uv_environment(self.p, self.token))
        self.done(step, started, rc=rc)
        if rc != 0:
            lines = _lines_of(err) or _lines_of(out) or [
                uvcli.without_credentials(bounded.command_failure(argv, rc, err))]
            if bounded.timed_out(rc, err) or bounded.not_started(rc, err):
                lines = [uvcli.without_credentials(err.strip())]
            hint = ""
            if HASH_MISMATCH.search(err or ""):
                hint = ("the index serves a wheel whose sha256 is not the one the lock names (a tampered mirror, or a "
                        "nightly build overwritten since the lock was made: pin reinstall_nightly_commit, or make a new "
                        "lock); ")
            return rc, out, err, " / ".join(lines), hint
        return rc, out, err, "", ""


def _read_marker(env):
    try:
        fd = os.open(os.path.join(env, MARKER), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(venvs.MARKER_MAX).decode("ascii", "replace")


def _remove(path):
    """Remove PATH, the new environment's directory (checked to be this run's), with what it holds."""
    shutil.rmtree(path)


def _room(b):
    p = b.p
    if p["min_free_mib"] <= 0:
        return
    started = b.clock()
    checks, problems = diskspace.check_paths(
        [{"path": os.path.dirname(p["env"]), "min_free_mib": p["min_free_mib"],
          "purpose": "staging %s (%s)" % (b.what, p["room_purpose"] or "min_free_mib")}], timeout=60)
    b.done("room", started, free_mib=checks[0]["free_mib"] if checks else None)
    if problems:
        b.refuse("; ".join(problems) + ". Free space there (old environments, compile caches, dumps) or point the "
                 "environments elsewhere")


def build(p, run=None, check_mode=False, clock=time.monotonic):
    """Stage the new environment of P (the module's params, checked by :func:`check_options`); the result.

    Raises :class:`StageFailed` with the operator's sentence, the new environment removed."""
    run = run or _default_run
    # (check_options took a trailing slash: the new environment's own name, and its directory, without it)
    p = dict(p, env=os.path.normpath(p["env"]))
    b = _Build(p, run, clock)
    env = p["env"]
    locked = p["lock"] is not None
    parsed = None
    if locked:
        try:
            parsed = parse_the_lock(p["lock"])
        except ValueError as exc:
            b.refuse(str(exc))
        if pkgnames.canonical_name(parsed["package"]["name"]) != pkgnames.canonical_name(p["package"]) or \
                not pkgnames.same_version(parsed["package"]["version"], p["version"]):
            b.refuse("the lock is for %s==%s, not for %s" % (parsed["package"]["name"], parsed["package"]["version"],
                                                             b.what.replace(" ", "==")))
        b.result["lock"] = {"package": "%s==%s" % (parsed["package"]["name"], parsed["package"]["version"]),
                            "count": len(parsed["packages"]), "fingerprint": parsed["fingerprint"],
                            "python_version": parsed["meta"].get("python_version"),
                            "python_platform": parsed["meta"].get("python_platform")}
    if os.path.lexists(env):
        b.refuse("%s already exists; run the role again (a new environment's name carries the time now)" % env)
    envs_dir = os.path.dirname(env)
    if os.path.lexists(envs_dir) and not os.path.isdir(envs_dir):
        b.refuse("%s, where the new environment goes, is not a directory" % envs_dir)
    _room(b)
    commands = plan(p)
    b.result["commands"] = _shown(commands)
    if check_mode:
        b.result["changed"] = True
        b.result["msg"] = "would stage %s in %s (%s)" % (
            b.what, env, "exactly the lock, %d packages, hashes required" % len(parsed["packages"]) if locked
            else "resolved on the host")
        return b.result
    uv = p["uv"] if "/" in p["uv"] else shutil.which(p["uv"], path=uv_environment(p).get("PATH"))
    if not uv or not os.path.isfile(uv) or not os.access(uv, os.X_OK):
        b.refuse("uv was not found at %s, or is not an executable file. Set reinstall_uv to the uv executable, or "
                 "leave it empty and run the role's preflight entry point (or the role itself) first: it sets up the "
                 "collection's host tools, which have uv" % p["uv"])
    commands = [(step, [uv] + argv[1:] if argv[0] == p["uv"] else argv) for step, argv in commands]
    b.result["commands"] = _shown(commands)
    if not os.path.isdir(envs_dir):
        try:
            os.makedirs(envs_dir, 0o755)
            os.chmod(envs_dir, 0o755)
        except OSError as exc:
            b.refuse("%s could not be created: %s" % (envs_dir, exc.strerror or exc))
        b.result["changed"] = True
    try:
        _run_steps(b, commands, parsed)
    except StageFailed:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        # (not expected: the new environment goes all the same, and the sentence says what happened)
        b.fail(b.step, "stopped on an unexpected %s: %s" % (type(exc).__name__, exc))
    b.result["msg"] = "staged %s in %s (%s), %s" % (
        b.what, env, "exactly the lock, %d packages" % len(parsed["packages"]) if locked else "resolved on the host",
        "proved pristine" if locked or p["verify"] else "not verified (verify is false)")
    return b.result


def _shown(commands):
    """The commands as the result shows them: any credentials in a URL left out."""
    return [[uvcli.without_credentials(str(word)) for word in argv] for _step, argv in commands]


def _run_steps(b, commands, parsed):
    for step, argv in commands:
        b.step = step
        if step == "cache":
            _rc, out, err, why, _hint = b.command(step, argv)
            if why:
                b.stop(step, "uv %s said: %s" % (" ".join(argv[1:3]), why))
            if re.search("Removed", out + err):
                b.result["cache_removed"] = b.result["changed"] = True
            continue
        if step == "venv":
            b.claim()
        if step == "probe":
            _probe(b, argv, parsed)
            _write_lock(b)
            continue
        _rc, _out, _err, why, hint = b.command(step, argv)
        if why:
            b.fail(step, why, hint)
    b.step = "record"
    _verify(b, parsed)
    b.release()


def _probe(b, argv, parsed):
    rc, out, err, why, _hint = b.command("probe", argv, timeout=PROBE_TIMEOUT)
    if why:
        b.fail("probe", "the new environment's interpreter could not say its Python version and platform: %s" % why)
    try:
        found = json.loads((out or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        found = None
    if not isinstance(found, dict):
        b.fail("probe", "the new environment's interpreter did not say its Python version and platform")
    b.steps[-1]["found"] = dict((key, str(found.get(key) or "")[:40]) for key in ("python", "machine", "libc"))
    problems = lockfile.check_target(parsed["meta"], found.get("python"), found.get("machine"), found.get("libc"))
    if problems:
        b.fail("probe", "The lock does not fit %s: %s. Resolve it for the hosts' Python and platform "
                        "(reinstall_resolve_python_version, reinstall_resolve_python_platform) or point python "
                        "(reinstall_python) at the interpreter it was made for" % (b.host, "; ".join(problems)))


def _write_lock(b):
    b.step = "lock"
    started = b.clock()
    path = os.path.join(b.p["env"], LOCK_NAME)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(b.p["lock"])
        os.chmod(path, 0o644)
    except OSError as exc:
        b.done("lock", started)
        b.fail("lock", "%s could not be written: %s" % (path, exc.strerror or exc))
    b.done("lock", started)


def _verify(b, parsed):
    p, env = b.p, b.p["env"]
    if p["verify"]:
        started = b.clock()
        try:
            check = check_installed(dist_name=p["package"], venv=env, max_list=p["max_list"], timeout=p["check_timeout"],
                                    uv_cache_dirs=[p["cache_dir"]] if p["cache_dir"] else None)
        except IntegrityError as exc:
            b.done("record", started)
            b.fail("record", _READS_ONLY.sub("", str(exc)))
        b.done("record", started, pristine=check["pristine"])
        b.result["check"] = check
        found = str(check.get("version") or "")
        if not pkgnames.same_version(found, p["version"]):
            b.fail("record", "%s is version %s, not the expected %s: %s"
                   % (p["package"], found or "(none)", p["version"], check["msg"]))
        if not check["pristine"]:
            b.fail("record", check["msg"])
    if parsed is None:
        return
    b.step = "fingerprint"
    started = b.clock()
    try:
        found = check_environment(venv=env, expected=lockfile.versions(parsed), expected_fingerprint=parsed["fingerprint"],
                                  accept_not_pristine=p["accept_not_pristine"], max_list=p["max_list"],
                                  timeout=p["check_timeout"])
    except IntegrityError as exc:
        b.done("fingerprint", started)
        b.fail("fingerprint", _READS_ONLY.sub("", str(exc)))
    b.done("fingerprint", started, matches=found["matches"])
    b.result["fingerprint"] = found
    if found["matches"] is False:
        b.fail("fingerprint", mismatch_message(found))
    if found["unaccepted"]:
        b.fail("fingerprint", not_pristine_message(found, found["unaccepted"]))
