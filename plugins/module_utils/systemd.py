# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one place that knows ``systemctl`` and ``journalctl``.

Every module and role of the collection reads a unit's state here (the
``managed_units`` module's keep_state is the roles' door to it): one call of ``systemctl
show``, one strict parser, one structure.

Calls take a ``run_command``: ``(argv) -> (rc, stdout, stderr)``, argv a
list, never a shell.  Modules give :func:`bounded.runner` (each call killed
at its time limit, at most the last MiB of output read); :func:`reader` is
that runner with the limits of a read.

Public API:

* :data:`UNIT_PROPERTIES` -- the properties read; :data:`ACTIVE_STATES`
  (up or coming up) and :data:`RUNNING_STATES` (a stop has something to end).
* :func:`parse_show` -- ``Key=Value`` lines to a dict, strictly: a value may
  hold ``=``; an empty answer, a line without ``=``, a key that was not
  asked for or that comes twice, a number that is not one, or an answer
  larger than :data:`MAX_SHOW_CHARS` raise :class:`SystemdError`.
* :func:`show` -- run ``systemctl show`` for a unit and parse it (raises
  :class:`SystemdError` with the sentence an operator reads).
* :class:`UnitState` and :func:`read_state` -- the unit's state:
  ``load_state``, ``active_state``, ``sub_state``, ``main_pid`` and
  ``exists``, ``loaded``, ``active``, ``running``; ``as_result()`` for a
  module result.  A unit systemd does not know reads ``LoadState=not-found``.
* :func:`unit_state` -- the properties as a dict, ``{}`` when systemctl
  cannot answer (for watchers that poll and must not fail on one answer).
* :func:`unit_stopped_reason`, :func:`seconds_since_start` -- what a
  readiness gate asks of the state.
* :func:`run_verb` -- ``systemctl start|stop|restart|daemon-reload``;
  raises :class:`SystemdError` with the failure sentence.
* :func:`journal_tail` -- the last lines of the unit's journal.
* :func:`unit_name_problem`, :func:`unit_name` -- systemd's rules for a
  unit name (what a unit file may be called).
* :func:`managed_unit_files`, :func:`managed_units` -- the units the
  service role rendered (its template's MANAGED_MARKER line), with their
  state: what a model switch stops and the audit lists.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import stat
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import (
    READ_TIMEOUT,
    command_failure,
    not_started,
    runner,
    timed_out,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils import serving
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text

UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "InvocationID",
                   "ExecMainStartTimestampMonotonic", "FragmentPath")
# properties whose value is a number (read as int; an empty value reads None)
INT_PROPERTIES = ("NRestarts", "MainPID", "ExecMainStartTimestampMonotonic")
# the unit is up or coming up: a start would change nothing
ACTIVE_STATES = ("active", "activating", "reloading")
# the unit has something a stop would end
RUNNING_STATES = ACTIVE_STATES + ("deactivating",)
# the answer of systemctl show for the properties above is a few hundred bytes
MAX_SHOW_CHARS = 64 * 1024
VERBS = ("start", "stop", "restart", "daemon-reload", "enable", "disable")

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\-]+\Z")
UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice",
              "scope")


class SystemdError(Exception):
    """systemctl could not answer, or answered something that is not a unit's state; str() says which."""


def reader(timeout=READ_TIMEOUT):
    """A run_command for reads (systemctl show, journalctl): killed after TIMEOUT s, at most the last MiB read."""
    return runner(timeout)


def _failure(argv, rc, err):
    """The sentence of a failed call: the timeout or could-not-start sentence as it is."""
    if not_started(rc, err):
        return err.strip()
    return command_failure(argv, rc, err)


def _shown_line(line, limit=120):
    escaped = valid_text(line).encode("unicode_escape").decode("ascii")
    return "'%s'" % (escaped[:limit] + ("..." if len(escaped) > limit else ""))


def parse_show(text, unit="the unit", properties=UNIT_PROPERTIES):
    """The ``Key=Value`` lines of ``systemctl show`` as a dict (numbers of INT_PROPERTIES as int).

    Strict: raises SystemdError for an empty answer, an answer longer than
    MAX_SHOW_CHARS, a line that is not ``Key=Value``, a key not in
    PROPERTIES or given twice, and a number property that is not a number.
    The first ``=`` ends the key: the value may hold more of them.
    """
    where = "systemctl show %s" % unit
    if len(text) > MAX_SHOW_CHARS:
        raise SystemdError("%s printed at least %d characters, more than the %d KiB a unit's state takes; the answer was not "
                           "read (is systemctl a wrapper that prints something else?)"
                           % (where, len(text), MAX_SHOW_CHARS // 1024))
    state = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not _KEY.match(key):
            raise SystemdError("%s printed line %d, %s, which is not a Key=Value property: the unit's state "
                               "cannot be read from it" % (where, number, _shown_line(line)))
        if key not in properties:
            raise SystemdError("%s printed the property %s, which was not asked for (line %d): the answer is not "
                               "the unit's state" % (where, key, number))
        if key in state:
            raise SystemdError("%s printed the property %s twice (line %d)" % (where, key, number))
        if key in INT_PROPERTIES:
            if value == "":
                value = None
            elif re.match(r"^[0-9]+\Z", value):
                value = int(value)
            else:
                raise SystemdError("%s printed %s=%s, which is not a number" % (where, key, _shown_line(value)))
        state[key] = value
    if not state:
        raise SystemdError("%s printed nothing: systemctl answers a unit's state with one Key=Value line per "
                           "property" % where)
    return state


def show(run_command, systemctl, unit, properties=UNIT_PROPERTIES):
    """The unit's properties (a dict, see parse_show) from one ``systemctl show``; raises SystemdError."""
    if not systemctl:
        raise SystemdError("systemctl was not found: this host does not look like a systemd host")
    argv = [systemctl, "show", "--property=" + ",".join(properties), "--", unit]
    rc, out, err = run_command(argv)
    if rc != 0:
        # the timeout sentence as it is; else "systemctl show UNIT failed (exit N): <stderr>"
        raise SystemdError(_failure(argv, rc, err or out))
    return parse_show(out, unit, properties)


class UnitState(object):
    """A unit's state as systemctl showed it.

    ``properties``: the dict parse_show gave.  ``exists``: systemd knows the
    unit (LoadState is not ``not-found``); ``loaded``: its unit file is read
    (LoadState ``loaded``); ``active``: it is up or coming up (ActiveState
    in ACTIVE_STATES); ``running``: a stop has something to end (ActiveState
    in RUNNING_STATES, which adds ``deactivating``).
    """

    def __init__(self, unit, properties):
        self.unit = unit
        self.properties = dict(properties)

    @property
    def load_state(self):
        return self.properties.get("LoadState")

    @property
    def active_state(self):
        return self.properties.get("ActiveState")

    @property
    def sub_state(self):
        return self.properties.get("SubState")

    @property
    def main_pid(self):
        return self.properties.get("MainPID") or 0

    @property
    def exists(self):
        return self.load_state not in (None, "", "not-found")

    @property
    def loaded(self):
        return self.load_state == "loaded"

    @property
    def active(self):
        return self.active_state in ACTIVE_STATES

    @property
    def running(self):
        return self.active_state in RUNNING_STATES

    def as_result(self):
        """The state for a module result: the words, the answers and the properties as read."""
        return {
            "unit": self.unit, "load_state": self.load_state, "active_state": self.active_state,
            "sub_state": self.sub_state, "main_pid": self.main_pid, "exists": self.exists, "loaded": self.loaded,
            "active": self.active, "running": self.running, "properties": dict(self.properties),
        }


def read_state(run_command, systemctl, unit):
    """The unit's :class:`UnitState`; raises SystemdError when systemctl cannot tell (LoadState included)."""
    properties = show(run_command, systemctl, unit)
    if "LoadState" not in properties or "ActiveState" not in properties:
        raise SystemdError("systemctl show %s did not say the unit's %s" % (
            unit, "LoadState" if "LoadState" not in properties else "ActiveState"))
    return UnitState(unit, properties)


def unit_state(run_command, systemctl, unit):
    """The unit's properties (a dict), {} when systemctl cannot answer or answers something else.

    For code that polls (the readiness gate's watch) and must not stop on
    one missing answer; code that decides uses read_state.
    """
    try:
        return show(run_command, systemctl, unit)
    except SystemdError:
        return {}


def seconds_since_start(state, now=None):
    """Seconds since the unit's main process started (CLOCK_MONOTONIC, like systemd), or None."""
    started = state.get("ExecMainStartTimestampMonotonic") if state else None
    if not isinstance(started, int) or started <= 0:
        return None
    now = time.monotonic() if now is None else now
    return round(now - started / 1e6, 3)


def unit_stopped_reason(unit, state):
    """A sentence when the unit is not loaded, failed or stopped (waiting is pointless), else None.

    A unit between two restarts (``activating``/``auto-restart``) is still
    coming up: None.
    """
    if not state:
        return None
    if state.get("LoadState") == "not-found":
        return "the unit %s does not exist" % unit
    active = state.get("ActiveState")
    if active == "failed":
        return "the unit %s failed (result: %s, restarts: %s)" % (unit, state.get("Result"), state.get("NRestarts"))
    if active in ("inactive", "deactivating"):
        return "the unit %s is not running (%s, result: %s)" % (unit, active, state.get("Result"))
    return None


def run_verb(run_command, systemctl, verb, unit=None):
    """``systemctl VERB [-- UNIT]``; raises SystemdError with the failure sentence (the timeout one as it is)."""
    if verb not in VERBS:
        raise ValueError("run_verb runs %s, not %r" % (", ".join(VERBS), verb))
    if not systemctl:
        raise SystemdError("systemctl was not found: this host does not look like a systemd host")
    argv = [systemctl, verb]
    if verb != "daemon-reload":
        argv += ["--", unit]
    rc, dummy, err = run_command(argv)
    if rc != 0:
        msg = _failure(argv, rc, err)
        if timed_out(rc, err) and verb in ("start", "restart"):
            msg += " (systemd may still be starting it: see 'systemctl status %s')" % unit
        raise SystemdError(msg)


def journal_tail(run_command, journalctl, unit, lines=30, line_chars=2000):
    """The last ``lines`` lines of the unit's journal (a list of str; [] when unreadable).

    Bytes that are not UTF-8 (``run_command`` gives them as surrogate
    escapes) are shown as ``\\xNN``; a line is cut at ``line_chars``.
    """
    if not journalctl or lines <= 0:
        return []
    rc, out, dummy = run_command([journalctl, "--unit=" + unit, "--lines=%d" % lines, "--no-pager",
                                  "--output=short-iso", "--quiet"])
    if rc != 0:
        return []
    tail = [line for line in out.splitlines() if line.strip()][-lines:]
    return [valid_text(line[:line_chars] + ("..." if len(line) > line_chars else "")) for line in tail]


def unit_name_problem(base):
    """Why BASE (a unit name without its type suffix) is not one systemd accepts, or None."""
    if not base:
        return "is empty"
    if not _UNIT_NAME.match(base):
        return ("holds characters a unit name cannot have (only letters, digits and : - _ . @ \\ are allowed; "
                "no /, no spaces)")
    if base.startswith(("-", ".")) or ".." in base:
        return "starts with - or . or holds '..'"
    if base.endswith("@"):
        return "is a template (it ends in @): give an instance, for example vllm@kimi"
    if len(base) + len(".service") > 255:
        return "is longer than the 255 characters systemd allows"
    return None


def unit_name(text):
    """TEXT as a full unit name (``vllm-kimi-k25`` -> ``vllm-kimi-k25.service``; ``x.timer`` kept);
    raises ValueError with the problem (see unit_name_problem)."""
    base, dot, suffix = text.rpartition(".")
    if not dot or suffix not in UNIT_TYPES:
        base, suffix = text, "service"
    problem = unit_name_problem(base)
    if problem:
        raise ValueError(problem)
    return "%s.%s" % (base, suffix)


# ---------------------------------------------------------------- the units the service role rendered

#: The comment line the service role's unit template writes into every unit it renders (templates/vllm.service.j2),
#: matched whole, in the comment block before the first section.
MANAGED_MARKER = re.compile(rb"^# vLLM server for .*, rendered by the gpufleet\.vllm\.service role\.\Z")
#: The properties read of each managed unit.
MANAGED_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "UnitFileState", "DropInPaths")
MANAGED_MAX_ENTRIES = 4096
#: A rendered unit is about 1 KiB; a file past this is not read whole (its words would be half read).
MANAGED_READ_BYTES = 64 * 1024
#: The UnitFileState values of a unit that starts at the next boot. The -runtime forms live under /run and are gone
#: after a reboot; ``systemctl disable`` does not remove them (it needs --runtime), so they are not counted.
ENABLED_STATES = ("enabled", "linked", "alias")


def _marked(head, marker):
    """Whether one line of the comment block that opens HEAD (a unit file's first bytes) is MARKER, whole."""
    for line in head.splitlines():
        line = line.rstrip(b"\r")
        if line.startswith(b"["):
            return False
        if line.startswith((b"#", b";")) and marker.match(line):
            return True
        if line.strip() and not line.startswith((b"#", b";")):
            return False
    return False


def _unit_lines(text):
    """The (section, key, value) settings of a unit file's TEXT, continuation lines joined as systemd joins them."""
    settings = []
    section = None
    pending = ""
    # (systemd ends a line at a newline only; str.splitlines() would also break at U+0085, U+2028, ...)
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        # (a comment line is ignored also inside a continued line, as systemd.syntax(7) says)
        if line.lstrip().startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            continue
        key, sep, value = stripped.partition("=")
        if sep:
            settings.append((section, key.strip(), value.strip()))
    if pending.strip():
        settings.append((section,) + tuple(part.strip() for part in pending.partition("=")[::2]))
    return settings


_C_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f",
              "v": "\v", "s": " "}


def split_words(value, what, dollar=True):
    """The words of an ExecStart= (DOLLAR true) or Environment= value as systemd splits them (systemd.syntax(7),
    extract_first_word with unquoting): double or single quotes anywhere in a word, C escapes, ``%%`` a percent sign
    and, with DOLLAR, ``$$`` a dollar sign.

    A specifier (``%n``) or a variable (``$NAME``) cannot be resolved here:
    ValueError naming WHAT, as for an unterminated quote or escape.
    """
    words = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in " \t":
            i += 1
        if i >= n:
            return words
        word = []
        quote = None
        while i < n:
            char = value[i]
            if quote is None and char in " \t":
                break
            if quote is None and char in "\"'":
                quote = char
                i += 1
                continue
            if quote is not None and char == quote:
                quote = None
                i += 1
                continue
            if char == "\\":
                if i + 1 >= n:
                    raise ValueError("%s ends in an unfinished escape" % what)
                nxt = value[i + 1]
                if nxt == "x" and re.match(r"^[0-9a-fA-F]{2}\Z", value[i + 2:i + 4]):
                    word.append(chr(int(value[i + 2:i + 4], 16)))
                    i += 4
                    continue
                if nxt not in _C_ESCAPES:
                    raise ValueError("%s: the escape \\%s at character %d is not one this reader knows" % (what, nxt, i + 1))
                word.append(_C_ESCAPES[nxt])
                i += 2
                continue
            if char == "%":
                if value[i + 1:i + 2] != "%":
                    raise ValueError("%s holds the specifier %s at character %d, which only systemd can resolve"
                                     % (what, value[i:i + 2], i + 1))
                word.append("%")
                i += 2
                continue
            if char == "$" and dollar:
                if value[i + 1:i + 2] != "$":
                    raise ValueError("%s uses a variable ($) at character %d, which only systemd can resolve"
                                     % (what, i + 1))
                word.append("$")
                i += 2
                continue
            word.append(char)
            i += 1
        if quote is not None:
            raise ValueError("%s has a quote that is never closed" % what)
        words.append("".join(word))


def parse_rendered_unit(text, name="the unit"):
    """The command line and environment of a unit the service role rendered (its template's ExecStart= and
    Environment= lines): a dict with ``argv`` (the words, the program first) and ``environment`` (a dict).

    Raises ValueError naming what is not as the template writes it (no
    ExecStart=, more than one, a word that needs systemd to resolve it).
    ``environment_files``: the EnvironmentFile= lines, whose variables are
    not read here (the GPUs of such a unit are not known). UnsetEnvironment=
    is applied last, as systemd applies it (``NAME`` removes the variable,
    ``NAME=value`` only that assignment, an empty line resets the list);
    ``pass_environment`` (only when some are): the PassEnvironment= names
    that neither Environment= sets nor UnsetEnvironment= removes.
    """
    argv = None
    exec_prefix = ""
    environment = {}
    environment_files = []
    unset = []
    passed = []
    for section, key, value in _unit_lines(text):
        if section != "Service":
            continue
        if key == "ExecStart":
            if argv is not None:
                raise ValueError("%s has more than one ExecStart= line" % name)
            argv = split_words(value, "the ExecStart= line of %s" % name)
            if argv and argv[0][:1] in "-@+!:":
                # (with @, the second word is the process's argv[0], not its first argument: see vllm_argv)
                exec_prefix = argv[0][:len(argv[0]) - len(argv[0].lstrip("-@+!:"))]
                argv[0] = argv[0].lstrip("-@+!:")
        elif key == "EnvironmentFile":
            # (its variables are not read here: CUDA_VISIBLE_DEVICES may come from it)
            environment_files.append(value)
        elif key == "Environment" and not value:
            # (an empty assignment resets the list, as in systemd)
            environment = {}
        elif key == "Environment":
            for word in split_words(value, "an Environment= line of %s" % name, dollar=False):
                env_name, sep, env_value = word.partition("=")
                if not sep or not _ENV_NAME.match(env_name):
                    raise ValueError("%s: the Environment= assignment %r is not NAME=value" % (name, word[:80]))
                environment[env_name] = env_value
        elif key == "PassEnvironment" and not value:
            passed = []
        elif key == "PassEnvironment":
            passed.extend(split_words(value, "a PassEnvironment= line of %s" % name, dollar=False))
        elif key == "UnsetEnvironment" and not value:
            unset = []
        elif key == "UnsetEnvironment":
            for word in split_words(value, "an UnsetEnvironment= line of %s" % name, dollar=False):
                env_name, sep, env_value = word.partition("=")
                if not _ENV_NAME.match(env_name):
                    raise ValueError("%s: the UnsetEnvironment= entry %r is not NAME or NAME=value" % (name, word[:80]))
                unset.append((env_name, env_value if sep else None))
    if not argv:
        raise ValueError("%s has no ExecStart= command line" % name)
    # (systemd removes these last, whatever the order of the lines: NAME removes the variable, NAME=value only
    # that assignment)
    for env_name, env_value in unset:
        if env_name in environment and (env_value is None or environment[env_name] == env_value):
            del environment[env_name]
    rendered = {"argv": argv, "environment": environment, "environment_files": environment_files}
    if exec_prefix:
        rendered["exec_prefix"] = exec_prefix
    # (variables taken from systemd's own environment; Environment= overrides them, UnsetEnvironment= removes them)
    passed = [n for n in passed if n not in environment and not any(u == n and v is None for u, v in unset)]
    if passed:
        rendered["pass_environment"] = passed
    return rendered


def _read_head(path, read_bytes):
    """The first READ_BYTES of the regular file PATH (a link never followed), None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, read_bytes)
    except OSError:
        return None
    finally:
        os.close(fd)


def _rendered(head, name, read_bytes):
    """The parse_rendered_unit dict of HEAD, or a dict with ``error`` (why its GPUs cannot be known)."""
    if len(head) >= read_bytes:
        return {"error": "%s is larger than %d KiB, more than a unit the role renders" % (name, read_bytes // 1024)}
    try:
        return parse_rendered_unit(head.decode("utf-8"), name)
    except UnicodeDecodeError:
        return {"error": "%s is not UTF-8 text" % name}
    except ValueError as exc:
        return {"error": str(exc)}


def read_rendered_file(path, marker=MANAGED_MARKER, read_bytes=MANAGED_READ_BYTES):
    """parse_rendered_unit of the unit file PATH, which must be one the service role rendered (MARKER in its opening
    comment block); raises SystemdError saying why it cannot be read."""
    if not path or not str(path).startswith("/"):
        raise SystemdError("systemd knows no unit file for it (FragmentPath is %s)" % (repr(path) if path else "empty"))
    head = _read_head(path, read_bytes)
    if head is None:
        raise SystemdError("its unit file %s cannot be read as a regular file (a link is not followed)"
                           % valid_text(path))
    if not _marked(head, marker):
        raise SystemdError("its unit file %s was not rendered by the gpufleet.vllm.service role (no marker line), so "
                           "its serving arguments are not read" % valid_text(path))
    rendered = _rendered(head, valid_text(path), read_bytes)
    if "error" in rendered:
        raise SystemdError(rendered["error"])
    return rendered


def managed_unit_files(unit_dir, marker=MANAGED_MARKER, max_entries=MANAGED_MAX_ENTRIES, read_bytes=MANAGED_READ_BYTES):
    """The ``.service`` files in UNIT_DIR whose opening comment block (before the first section) has MARKER as one
    whole line: a sorted list of (name, rendered), rendered being parse_rendered_unit's dict or one with ``error``.

    Only regular files (a link is never followed), names systemd accepts, at
    most MAX_ENTRIES directory entries looked at (SystemdError past that, so
    a wrong directory is said, not half read), at most READ_BYTES of each
    file. A missing UNIT_DIR has none.
    """
    try:
        entries = os.scandir(unit_dir)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SystemdError("the unit directory %s cannot be read: %s" % (valid_text(unit_dir), exc.strerror or exc))
    found = []
    with entries:
        for count, entry in enumerate(entries, 1):
            if count > max_entries:
                raise SystemdError("the unit directory %s has more than %d entries: not read (is it the systemd unit "
                                   "directory?)" % (valid_text(unit_dir), max_entries))
            name = entry.name
            if not name.endswith(".service") or unit_name_problem(name[:-len(".service")]):
                continue
            head = _read_head(entry.path, read_bytes)
            if head is not None and _marked(head, marker):
                found.append((name, _rendered(head, name, read_bytes)))
    return sorted(found)


# The commands whose options are read (anything else, a shell or a wrapper, may start the server with other GPUs):
# vLLM's own ``<dir>/vllm serve`` and ``<dir>/python3 -m vllm.entrypoints.openai.api_server`` (or
# ``-m vllm.entrypoints.cli.main serve``), each maybe behind ``env NAME=value ...`` (its assignments applied).
_PROGRAM = re.compile(r"^[A-Za-z0-9_./+-]+\Z")
_PYTHON = re.compile(r"^python(?:3(?:\.[0-9]{1,2})?)?\Z")
_VLLM_MODULES = {"vllm.entrypoints.openai.api_server": (), "vllm.entrypoints.cli.main": ("serve",)}
# vLLM options that decide how many GPUs, and which, its server takes: those serving_config reads...
GPU_OPTIONS_READ = ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
                    "--data-parallel-size-local", "-dpl", "--nnodes", "-n", "--headless")
# ...and those it does not (their GPUs are not known)
GPU_OPTIONS_UNREAD = ("--prefill-context-parallel-size", "-pcp", "--device-ids", "--data-parallel-rank", "-dpn",
                      "--data-parallel-start-rank", "-dpr", "--data-parallel-hybrid-lb", "-dph",
                      "--data-parallel-external-lb", "-dpe", "--node-rank", "-r", "--distributed-executor-backend")
# (the executors that start their workers on this host, under the unit's own environment)
_LOCAL_EXECUTORS = ("mp", "uni")


def _option_words_unsure(words):
    """Why an option word of vLLM's WORDS may change its GPUs in a way serving_config does not read, or None: an option
    it does not read, an abbreviation (argparse takes an unambiguous prefix of an option), a one-letter option with its
    value attached (``-n2``), an end of options."""
    gpu_options = GPU_OPTIONS_READ + GPU_OPTIONS_UNREAD
    for index, word in enumerate(words):
        if word == "--":
            return "unsure: its command line has an end of options (--) not read here"
        if not word.startswith("-") or re.match(r"^-[0-9.]", word):
            continue
        name, inline = word.partition("=")[0], word.partition("=")[2] if "=" in word else None
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in GPU_OPTIONS_READ:
            continue
        if name == "--distributed-executor-backend":
            value = inline if inline is not None else (words[index + 1] if index + 1 < len(words) else "")
            if value in _LOCAL_EXECUTORS:
                continue
        if name in GPU_OPTIONS_UNREAD:
            return "unsure: its option %s changes the GPUs it takes and is not read here" % valid_text(word[:80])
        long_form = name.startswith("--")
        for option in gpu_options:
            if option.startswith("--") == long_form and option.startswith(name) and len(name) > (2 if long_form else 1):
                return ("unsure: its option %s abbreviates %s (vLLM takes an option's unambiguous prefix), not read "
                        "here" % (valid_text(word[:80]), option))
        if not long_form and inline is None and name[:2] in gpu_options and len(name) > 2:
            return "unsure: its option %s is %s with its value attached, not read here" % (
                valid_text(word[:80]), name[:2])
    return None


def vllm_argv(rendered):
    """The options of the vLLM server the rendered unit starts and its environment (``env NAME=value`` applied), and
    None, or None, None and why its command is not one whose GPUs can be read (not vLLM's own command, a shell, an
    unknown wrapper, an option word that may change its GPUs and is not read: ``_option_words_unsure``)."""
    argv = list(rendered["argv"])
    environment = dict(rendered.get("environment") or {})
    if "@" in rendered.get("exec_prefix", ""):
        return None, None, "unsure: its ExecStart= has the @ prefix (the program is not its first word)"
    program = os.path.basename(argv[0]) if _PROGRAM.match(argv[0]) else None
    if program == "env":
        argv.pop(0)
        while argv and "=" in argv[0] and _ENV_NAME.match(argv[0].partition("=")[0]):
            env_name, dummy, env_value = argv.pop(0).partition("=")
            environment[env_name] = env_value
        if not argv or argv[0].startswith("-"):
            return None, None, "unsure: its command runs env %s, not read here" % (
                "with the option %s" % valid_text(argv[0][:80]) if argv else "with no program")
        program = os.path.basename(argv[0]) if _PROGRAM.match(argv[0]) else None
    words = None
    if program == "vllm" and argv[1:2] == ["serve"]:
        words = argv[2:]
    elif program and _PYTHON.match(program) and argv[1:2] == ["-m"] and len(argv) > 2 and argv[2] in _VLLM_MODULES:
        after = _VLLM_MODULES[argv[2]]
        if tuple(argv[3:3 + len(after)]) == after:
            words = argv[3 + len(after):]
    if words is None:
        return None, None, ("unsure: its command %s is not vLLM's own (vllm serve, python -m "
                            "vllm.entrypoints.openai.api_server): a shell or wrapper may start it with other GPUs"
                            % valid_text(" ".join(argv)[:120]))
    why = _option_words_unsure(words)
    if why:
        return None, None, why
    return words, environment, None


def gpus_of(rendered, drop_ins=""):
    """The GPUs (indices or UUIDs, a list) the rendered unit's server takes and None, or None and why they cannot be
    known (its file not as the role writes it, an EnvironmentFile=, DROP_INS: the unit's DropInPaths)."""
    if "argv" not in rendered:
        return None, rendered.get("error") or "its file cannot be read"
    if rendered.get("environment_files"):
        return None, "its EnvironmentFile= %s may set CUDA_VISIBLE_DEVICES" % ", ".join(rendered["environment_files"])
    if "CUDA_VISIBLE_DEVICES" in rendered.get("pass_environment", ()):
        return None, "its PassEnvironment= takes CUDA_VISIBLE_DEVICES from systemd's own environment, not read here"
    if drop_ins and drop_ins.strip():
        return None, "its drop-ins %s may change its command line or environment" % drop_ins.strip()
    words, environment, unsure = vllm_argv(rendered)
    if unsure:
        return None, unsure
    try:
        config = serving.serving_config(words, environment)
    except serving.ServingConfigError as exc:
        return None, "its serving arguments are not valid: %s" % exc
    unsure = serving.unsure_reason(config)
    if unsure:
        return None, unsure
    return config["gpus"], None


def share_gpus(first, second):
    """Whether two units' GPUs (gpus_of) may overlap: unknown, or named in different forms (indices and UUIDs), counts
    as shared."""
    if first is None or second is None:
        return True
    if any(isinstance(g, str) for g in first) != any(isinstance(g, str) for g in second):
        return True
    return bool(set(first) & set(second))


def managed_units(run_command, systemctl, unit_dir, keep=None, **limits):
    """The units the service role rendered in UNIT_DIR with their state: a list of dicts (``unit``, ``active_state``,
    ``sub_state``, ``unit_file_state``, ``main_pid``, ``active``, ``enabled``, ``gpus`` (None: not known, with
    ``gpus_unknown`` saying why), ``other``: not KEEP, and ``shares_gpus``: may use a GPU KEEP's server takes (KEEP's
    GPUs unknown, or KEEP not rendered here: any GPU)). Raises SystemdError."""
    if keep:
        # (vllm-kimi-k25 is vllm-kimi-k25.service, as systemctl reads it)
        try:
            keep = unit_name(keep)
        except ValueError:
            pass
    files = managed_unit_files(unit_dir, **limits)
    states = dict((name, show(run_command, systemctl, name, MANAGED_PROPERTIES)) for name, dummy in files)
    keep_gpus = None
    for name, rendered in files:
        if name == keep:
            keep_gpus = gpus_of(rendered, states[name].get("DropInPaths"))[0]
    units = []
    for name, rendered in files:
        props = states[name]
        gpus, why = gpus_of(rendered, props.get("DropInPaths"))
        unit = {
            "unit": name, "active_state": props.get("ActiveState") or "", "sub_state": props.get("SubState") or "",
            "unit_file_state": props.get("UnitFileState") or "", "main_pid": props.get("MainPID") or 0,
            "active": props.get("ActiveState") in RUNNING_STATES,
            "enabled": (props.get("UnitFileState") or "") in ENABLED_STATES,
            "gpus": gpus, "other": name != keep, "shares_gpus": name == keep or share_gpus(gpus, keep_gpus)}
        if gpus is None:
            unit["gpus_unknown"] = why
        units.append(unit)
    return units


def others_to_stop(units):
    """Of managed_units' list, the other units a switch to KEEP stops or disables: they run or start at boot and may
    share a GPU with KEEP."""
    return [u for u in units if u["other"] and u["shares_gpus"] and (u["active"] or u["enabled"])]
