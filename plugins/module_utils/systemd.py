# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one place that knows ``systemctl`` and ``journalctl``.

Every module and role of the collection reads a unit's state here (the
``unit_info`` module is the roles' door to it): one call of ``systemctl
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
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import (
    READ_TIMEOUT,
    command_failure,
    not_started,
    runner,
    timed_out,
)
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
VERBS = ("start", "stop", "restart", "daemon-reload")

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
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
            elif re.match(r"^[0-9]+$", value):
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
