# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
name: phases
type: stdout
short_description: One line per host and phase on the terminal, the whole log in a file
version_added: 0.1.0
author: gpufleet.vllm developers (@gpufleet)
description:
  - A stdout callback for the collection's playbooks on a fleet. The terminal shows, per host, the phases the host
    went through (a role such as C(reinstall), C(service) or C(benchmark), or the play's own tasks) with their
    result (V(ok), V(changed N), V(would change N), V(failed), V(unreachable), V(skipped)), how many tasks they ran
    and their wall time, in one line printed when the host's phase ends.
  - A task that reports a change in check mode (C(--check), or C(check_mode) on the task, its block, role or include)
    changed nothing; its phase reads V(would change N), never V(changed), and so does the host's recap line
    (C(would change=N) beside C(changed=N), which counts the real changes only).
  - Warnings, deprecations, failures (task, host, message, the last lines of stderr and stdout, C(module_stderr))
    and unreachable hosts are printed in full as they happen. A failure that a block's C(rescue) handles is printed
    too, marked as rescued.
  - A task whose variable named by O(show_var) (C(gpufleet_show)) is true has its result printed in full for every
    host, for example C(ansible.builtin.debug) tasks that say a host's plan or the run's summary (the C(msg), or the
    C(var) that C(debug) shows). Set it on the task, C(vars) of a task only, not of a play. The message is printed
    in its own words after the host's name (not when it starts with it), never after the task's name; a
    C(run_once) task's message (the run's summary) without a host name.
  - The whole run, rendered by ansible-core's default callback (task banners, per-host results, failures in full,
    recap), goes to a log file whose path is printed at the end. The file lies in the run's report directory
    once a task sets the fact named by O(report_dir_fact) (the rollout and the audit do), else in O(log_dir).
  - Ends with one recap line per host.
  - Enable it with C(ANSIBLE_STDOUT_CALLBACK=gpufleet.vllm.phases) or C(stdout_callback = gpufleet.vllm.phases) in
    the C([defaults]) section of C(ansible.cfg).
options:
  log_dir:
    description:
      - The directory of the log file until a task sets the fact named by O(report_dir_fact). The file is named after
        the playbook and the UTC start time, for example C(rollout-20261204T181200Z.log). Created when missing.
      - A relative path is taken from the directory ansible-playbook runs in.
    type: path
    default: gpufleet-reports/logs
    ini:
      - section: callback_gpufleet_phases
        key: log_dir
    env:
      - name: GPUFLEET_PHASES_LOG_DIR
  report_dir_fact:
    description:
      - The name of a fact that holds the run's report directory. When a task sets it (C(ansible.builtin.set_fact)),
        the log moves there as C(<playbook>.log), for example C(gpufleet-reports/rollout-<time>/rollout.log).
      - Empty to keep the log in O(log_dir).
    type: str
    default: gpufleet_report_dir
    ini:
      - section: callback_gpufleet_phases
        key: report_dir_fact
    env:
      - name: GPUFLEET_PHASES_REPORT_DIR_FACT
  log_max_size:
    description:
      - The largest log file in bytes (default 200 MiB). Past it, the log says it was cut and nothing more is
        written; the terminal says so at the end. V(0) writes no log file.
    type: int
    default: 209715200
    ini:
      - section: callback_gpufleet_phases
        key: log_max_size
    env:
      - name: GPUFLEET_PHASES_LOG_MAX_SIZE
  tail_lines:
    description: How many of the last lines of a failed task's stdout, stderr and C(module_stderr) the terminal shows.
    type: int
    default: 20
    ini:
      - section: callback_gpufleet_phases
        key: tail_lines
    env:
      - name: GPUFLEET_PHASES_TAIL_LINES
  show_var:
    description: The task variable that, when true, prints the task's result in full on the terminal.
    type: str
    default: gpufleet_show
    ini:
      - section: callback_gpufleet_phases
        key: show_var
    env:
      - name: GPUFLEET_PHASES_SHOW_VAR
notes:
  - Molecule's idempotence step reads the default callback's output; keep this callback out of molecule runs.
  - Messages that ansible-core prints itself rather than through the callback (for example a template warning, or
    C(-vvv) connection output) reach the terminal as usual and are copied into the log while it is open, from the
    playbook's start to its recap; the inventory's warnings before the start and the final error of a failed run
    after the recap are not in the log file.
  - Deprecation warnings follow ansible-core's C(deprecation_warnings) setting.
  - A failure's message is shown whatever its shape (a loop item that is an empty string, a dict or a number; a
    message that is a list); control characters and characters that reorder or hide text are shown as escapes
    (C(\x1b), C(\u202e)), and a message longer than 200 lines or 64 KiB is cut on the terminal (the log has it
    whole).
  - An error of the callback's own never stops the run or hides a failure. It prints what ansible-core sent (the
    raw result) with a note, passes the event on to the log, and still counts the host's failure in its phase.
"""

EXAMPLES = r"""
# Enable it for one run:
#   ANSIBLE_STDOUT_CALLBACK=gpufleet.vllm.phases ansible-playbook -i inventories/prod gpufleet.vllm.rollout
# or for every run, in ansible.cfg:
#   [defaults]
#   stdout_callback = gpufleet.vllm.phases
#   [callback_gpufleet_phases]
#   log_dir = /var/log/gpufleet

# A task whose result the terminal shows in full:
- name: Say what this host needs
  ansible.builtin.debug:
    msg: "plan: {{ plan_line }}"
  vars:
    gpufleet_show: true
"""

import datetime
import functools
import os
import shutil
import time
import traceback

import yaml

from ansible import constants as C
from ansible import context
from ansible.playbook.block import Block
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import callback_loader

try:
    from ansible._internal._display_utils import format_message as _format_summary
except ImportError:  # another ansible-core than the one the collection pins
    _format_summary = None

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import printable_block

MIB = 1024 * 1024
PHASE_WIDTH = 28
# a failure's message on the terminal: at most this many lines and characters (the log has it whole)
MSG_LINES = 200
MSG_CHARS = 64 * 1024
# the raw result printed when the callback itself could not show an event
RAW_CHARS = 4000


def _summary_text(summary):
    """The text of a warning, deprecation or error summary of ansible-core, or of a plain string."""
    if isinstance(summary, str):
        return summary
    if _format_summary is not None:
        try:
            return _format_summary(summary, False)
        except Exception:  # pylint: disable=broad-except
            pass
    event = getattr(summary, "event", None)
    return str(getattr(event, "msg", summary))


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _text(value):
    """A value as the text an operator reads: strings as they are, lists one item a line, the rest as YAML.

    Control characters and the characters that reorder or hide text (a terminal escape, a carriage return, U+202E,
    U+200B) are shown as escapes (safetext.printable_block): what a host sent cannot rewrite the terminal's lines.
    Never raises: a value YAML cannot show is shown as its repr().
    """
    if isinstance(value, str):
        text = value
    elif isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        text = "\n".join(value)
    else:
        try:
            text = yaml.safe_dump(value, default_flow_style=False, allow_unicode=True, sort_keys=False).rstrip("\n")
            if text.endswith("\n..."):
                text = text[:-4].rstrip("\n")  # a plain scalar: YAML's end-of-document marker is not the value's
        except Exception:  # pylint: disable=broad-except
            text = _raw(value)
    return printable_block(text)


def _raw(value, limit=RAW_CHARS):
    """repr(VALUE), cut to about LIMIT characters; never raises."""
    try:
        text = repr(value)
    except Exception as exc:  # pylint: disable=broad-except
        text = "<a %s that cannot be shown: %s>" % (type(value).__name__, type(exc).__name__)
    return text if len(text) <= limit else text[:limit] + "... (%d characters more)" % (len(text) - limit)


def _first_line(value, limit=200):
    """The first line of VALUE as text (an item's label): '' for an empty one, cut to about LIMIT characters."""
    lines = _text(value).splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[:limit] + "..."


def _bounded(text, lines=MSG_LINES, chars=MSG_CHARS):
    """TEXT cut to its first LINES lines and CHARS characters, with a note saying so (the log has it whole)."""
    cut = text[:chars]
    all_lines = cut.splitlines()
    if len(all_lines) > lines:
        cut = "\n".join(all_lines[:lines])
    if len(cut) < len(text):
        total = text.count("\n") + 1
        cut += "\n... (cut here: %d lines, %d characters in all; the log has the whole message)" % (total, len(text))
    return cut


def _indent(text, prefix="    "):
    return "\n".join(prefix + line if line else prefix.rstrip() for line in str(text).splitlines() or [""])


def _tail(text, lines):
    if isinstance(text, (list, tuple)):
        text = "\n".join(item if isinstance(item, str) else _raw(item) for item in text)
    elif not isinstance(text, str):
        text = _raw(text)
    text = text.rstrip("\n")
    count = len(text.splitlines())
    # the last lines of at most the last MSG_CHARS characters (a single line of a gigabyte is cut, not shown whole)
    all_lines = printable_block(text[-MSG_CHARS:]).splitlines()
    if count <= lines and len(text) <= MSG_CHARS:
        return "\n".join(all_lines), count, False
    return "\n".join(all_lines[-lines:]), count, True


def _seconds(value):
    if value < 60:
        return "%.1f s" % value
    minutes, secs = divmod(int(round(value)), 60)
    return "%d min %02d s" % (minutes, secs)


def _size(value):
    if value >= MIB:
        return "%.0f MiB" % (value / MIB) if value % MIB == 0 else "%.1f MiB" % (value / MIB)
    return "%d bytes" % value


class _LogFile:
    """The log file: written line by line, at most max_size bytes, movable to another directory."""

    def __init__(self, path, max_size):
        self.path = path
        self.max_size = max_size
        self.written = 0
        self.truncated = False
        self.error = None
        self._handle = None
        if max_size <= 0:
            self.path = None
            return
        self._created = None
        try:
            self._created = self._make_dirs(os.path.dirname(path))
            self._handle = open(path, "w", encoding="utf-8", errors="replace", buffering=1)
        except OSError as exc:
            self.error = "cannot write the log %s: %s" % (path, exc.strerror or exc)
            self.path = None

    @staticmethod
    def _make_dirs(directory):
        """Create directory when missing; return the topmost directory created (None when none was)."""
        directory = os.path.abspath(directory or ".")
        top = None
        probe = directory
        while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
            top = probe
            probe = os.path.dirname(probe)
        os.makedirs(directory, exist_ok=True)
        return top

    def _remove_created(self, old_dir):
        """After a move, remove the directories this log created for itself when they are left empty."""
        if self._created is None:
            return
        current = os.path.abspath(old_dir)
        while current.startswith(self._created):
            try:
                os.rmdir(current)
            except OSError:
                break
            current = os.path.dirname(current)
        self._created = None

    def write(self, text):
        if self._handle is None or self.truncated:
            return
        try:
            self._write(text)
        except (OSError, ValueError) as exc:
            # a full disk, a file system gone: the run goes on, the terminal says at the end that the log stopped
            self.error = "the log %s stopped being written: %s" % (self.path, getattr(exc, "strerror", None) or exc)
            self.truncated = True

    def _write(self, text):
        data = text.encode("utf-8", errors="replace")
        if self.written + len(data) > self.max_size:
            room = max(0, self.max_size - self.written)
            self._handle.write(data[:room].decode("utf-8", errors="ignore"))
            self._handle.write("\n[log cut here: it reached its cap of %s (log_max_size); the rest of the run is not in it]\n"
                               % _size(self.max_size))
            self._handle.flush()
            self.truncated = True
            return
        self._handle.write(text)
        self.written += len(data)

    def move(self, directory, name):
        """Move the file into directory (created when missing) as name and go on writing there."""
        if self._handle is None:
            return
        target = os.path.join(directory, name)
        if os.path.abspath(target) == os.path.abspath(self.path):
            return
        old_dir = os.path.dirname(self.path)
        try:
            self._handle.close()
            os.makedirs(directory, exist_ok=True)
            shutil.move(self.path, target)
        except OSError as exc:
            self.error = "could not move the log to %s (%s): it stays at %s" % (target, exc.strerror or exc, self.path)
        else:
            self.path = target
            self._remove_created(old_dir)
        try:
            self._handle = open(self.path, "a", encoding="utf-8", errors="replace", buffering=1)
        except OSError as exc:
            self._handle = None
            self.error = "the log %s could not be opened again (%s): the rest of the run is not in it" % (
                self.path, exc.strerror or exc)

    def close(self):
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class _FileDisplay:
    """What ansible-core's default callback calls on its display, written to a _LogFile without colours."""

    def __init__(self, log, verbosity):
        self._log = log
        self.verbosity = verbosity
        self.columns = 79
        self.b_cowsay = None
        self._seen = set()

    def display(self, msg, color=None, stderr=False, screen_only=False, log_only=False, newline=True, caplevel=None):
        if screen_only:
            return
        self._log.write(str(msg) + ("\n" if newline else ""))

    def banner(self, msg, color=None, cows=True):
        msg = str(msg).strip()
        self.display("\n%s %s" % (msg, "*" * max(3, self.columns - len(msg))))

    def _verbose(self, level, msg, host=None):
        if self.verbosity >= level:
            self.display(msg if host is None else "<%s> %s" % (host, msg))

    def v(self, msg, host=None):
        self._verbose(1, msg, host)

    def vv(self, msg, host=None):
        self._verbose(2, msg, host)

    def vvv(self, msg, host=None):
        self._verbose(3, msg, host)

    def vvvv(self, msg, host=None):
        self._verbose(4, msg, host)

    def vvvvv(self, msg, host=None):
        self._verbose(5, msg, host)

    def vvvvvv(self, msg, host=None):
        self._verbose(6, msg, host)

    def debug(self, msg, host=None):
        return

    def _once(self, text):
        """Display text unless it was displayed before, as ansible-core shows each warning once."""
        if text in self._seen:
            return
        if len(self._seen) < 10000:
            self._seen.add(text)
        self.display(text)

    def warning(self, msg, formatted=False, **kwargs):
        self._once("[WARNING]: %s" % msg)

    def _warning(self, warning):
        self._once("[WARNING]: %s" % _summary_text(warning))

    def deprecated(self, msg, *args, **kwargs):
        self._once("[DEPRECATION WARNING]: %s" % msg)

    def _deprecated(self, deprecation):
        self._once("[DEPRECATION WARNING]: %s" % _summary_text(deprecation))

    def error(self, msg, wrap_text=True, stderr=True):
        self.display("[ERROR]: %s" % msg)

    def _error(self, error, stderr=False):
        self.display("[ERROR]: %s" % _summary_text(error))


class _Phase:
    """One host's run of consecutive tasks of one phase: counters only, never the results."""

    __slots__ = ("name", "start", "end", "tasks", "ok", "changed", "would", "failed", "rescued", "ignored", "skipped",
                 "unreachable", "own", "busy")

    def __init__(self, name, start, own=False):
        self.name = name
        self.start = start
        self.end = start
        self.own = own    # the play's own tasks (not a role's): counted together, timed by their own durations
        self.busy = 0.0
        self.tasks = 0
        self.ok = self.changed = self.failed = self.rescued = self.ignored = self.skipped = self.unreachable = 0
        self.would = 0    # the changes reported in check mode: nothing changed

    def result(self):
        if self.unreachable:
            word = "unreachable"
        elif self.failed:
            word = "failed"
        elif self.changed or self.would:
            word = ", ".join(part for part in ("changed %d" % self.changed if self.changed else "",
                                               "would change %d" % self.would if self.would else "") if part)
        elif self.ok or self.rescued or self.ignored:
            word = "ok"
        else:
            word = "skipped"
        extra = []
        if self.rescued:
            extra.append("%d rescued" % self.rescued)
        if self.ignored:
            extra.append("%d ignored" % self.ignored)
        return word + (" (%s)" % ", ".join(extra) if extra else "")


def _check_mode(task):
    """Whether TASK ran in check mode: its own check_mode, else its block's, role's or include's (ansible-core
    looks it up the same way), else the run's --check."""
    try:
        value = getattr(task, "check_mode", None)
    except Exception:  # pylint: disable=broad-except
        value = None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and "{" not in value:
        return _truthy(value)
    return bool(context.CLIARGS.get("check", False))


def _phase_of(task, play_name):
    """The phase a task belongs to: its role's short name, else the play's name up to its first parenthesis."""
    role = getattr(task, "_role", None)
    if role is not None:
        try:
            return role.get_name(include_role_fqcn=False)
        except TypeError:
            return role.get_name()
    name = (play_name or "play").split(" (", 1)[0].strip() or "play"
    return name


def _rescue_of(task):
    """The name of the block whose rescue handles a failure of task, or None when no rescue does.

    The task, or a block or include on its way up to the play, must be in the block section of a block that has a
    rescue (a failure in a rescue or always section goes up to the next block). A static import_role puts the
    role's blocks in the block section while their parent is the import, so the whole way up is compared.
    """
    path = {getattr(task, "_uuid", None), id(task)}
    parent = getattr(task, "_parent", None)
    depth = 0
    while parent is not None and depth < 64:
        depth += 1
        if isinstance(parent, Block) and parent.rescue:
            if any(id(item) in path or getattr(item, "_uuid", None) in path for item in parent.block):
                names = [getattr(item, "name", "") for item in parent.rescue]
                return parent.name or next((name for name in names if name), "the block")
        path.update((getattr(parent, "_uuid", None), id(parent)))
        parent = getattr(parent, "_parent", None)
    return None


def _guarded(method):
    """The event METHOD, made never to raise: an error of the callback's own is said on the terminal and in the log,
    with what ansible-core sent (the raw result), and the event still reaches the log's default callback."""
    @functools.wraps(method)
    def event(self, *args, **kwargs):
        self._forwarded = False
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # pylint: disable=broad-except
            self._event_failed(method.__name__, exc, args, kwargs)
        return None
    return event


def _guard_events(cls):
    """Every v2_ event method CLS defines guarded (_guarded). Only its own: ansible-core sends an event to a callback
    only when the callback defines its method (CallbackBase's own, inherited, are left as they are)."""
    for name, value in list(vars(cls).items()):
        if name.startswith("v2_") and callable(value):
            setattr(cls, name, _guarded(value))
    return cls


@_guard_events
class CallbackModule(CallbackBase):
    """Phases on the terminal, ansible-core's default output in a log file."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "gpufleet.vllm.phases"

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._log = None
        self._full = None
        self._playbook = "ansible-playbook"
        self._started = time.time()
        self._play_name = ""
        self._phases = {}          # host -> the open _Phase of a role in the current play
        self._own = {}             # host -> the _Phase of the play's own tasks (printed when the play ends)
        self._task_start = {}      # host -> when its current task started
        self._task_begun = time.time()  # when the current task started (meta tasks start no runner)
        self._host_width = 12
        self._would = {}           # host -> the changes it reported in check mode (the recap's "would change")
        self._own_line = False
        self._untee = None
        self._forwarded = False    # whether the current event reached the log's default callback

    # -- the log file and the default callback that writes it --------------------------------------------------

    def _open_log(self, playbook_name):
        self._playbook = playbook_name
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = os.path.join(self.get_option("log_dir"), "%s-%s.log" % (playbook_name, stamp))
        self._log = _LogFile(path, self.get_option("log_max_size"))
        if self._log.error:
            self._line("[WARNING]: %s" % self._log.error, color=C.COLOR_WARN)
        if self._log.path is None:
            return
        try:
            full = callback_loader.get("ansible.builtin.default")
            full.set_options()
        except Exception as exc:  # pylint: disable=broad-except
            self._line("[WARNING]: no full log: ansible-core's default callback did not load (%s)" % exc, color=C.COLOR_WARN)
            return
        full._display = _FileDisplay(self._log, self._display.verbosity)
        self._full = full
        self._tee_core_messages()

    def _tee_core_messages(self):
        """Copy what ansible-core prints itself (its warnings, errors, -v output) into the log too.

        The display is ansible-core's one Display object: its display method on this instance gets a wrapper
        that writes to the log whatever this callback did not print itself, and is put back at the end.
        """
        display = self._display
        original = display.display
        log = self._log

        def display_and_log(msg, *args, **kwargs):
            if not self._own_line and not kwargs.get("screen_only"):
                log.write("%s\n" % (msg,))
            return original(msg, *args, **kwargs)

        def untee():
            if display.display is display_and_log:
                display.display = original

        display.display = display_and_log
        self._untee = untee

    def _forward(self, method, *args, **kwargs):
        self._forwarded = True
        if self._full is None:
            return
        self._full._current_task_result = self._current_task_result
        try:
            getattr(self._full, method)(*args, **kwargs)
        finally:
            self._full._current_task_result = None

    def _follow_report_dir(self, result):
        fact = self.get_option("report_dir_fact")
        if not fact or self._log is None:
            return
        facts = result.result.get("ansible_facts")
        if not isinstance(facts, dict) or not isinstance(facts.get(fact), str) or not facts.get(fact):
            return
        self._log.move(facts[fact], "%s.log" % self._playbook)
        if self._log.error:
            self._line("[WARNING]: %s" % self._log.error, color=C.COLOR_WARN)
            self._log.error = None

    def _event_failed(self, name, exc, args, kwargs):
        """The callback could not show event NAME: say so, print what ansible-core sent as it is, log the traceback,
        and pass the event on to the log's default callback if it did not get it. Never raises."""
        try:
            self._line("[gpufleet.vllm.phases] could not show this event (%s: %s: %s); what ansible-core sent follows, "
                       "as it is" % (name, type(exc).__name__, printable_block(_raw(str(exc), 200))), color=C.COLOR_WARN)
            for arg in args:
                raw = getattr(arg, "_result", arg)
                host = getattr(getattr(arg, "_host", None), "name", None)
                task = getattr(getattr(arg, "_task", None), "name", None)
                where = " | ".join(str(part) for part in (host, task) if part)
                self._line("  %s%s" % (where + ": " if where else "", printable_block(_raw(raw))), color=C.COLOR_WARN)
            if self._log is not None:
                self._log.write("[gpufleet.vllm.phases] the error of the event %s:\n%s" % (name, traceback.format_exc()))
        except Exception:  # pylint: disable=broad-except
            pass
        if not self._forwarded:
            try:
                self._forward(name, *args, **kwargs)
            except Exception:  # pylint: disable=broad-except
                pass

    # -- the terminal -------------------------------------------------------------------------------------------

    def _line(self, text, color=None):
        self._own_line = True
        try:
            self._display.display(text, color=color)
        finally:
            self._own_line = False

    def _host_label(self, host):
        return host.ljust(self._host_width)

    def _note_host(self, host):
        if len(host) > self._host_width:
            self._host_width = min(len(host), 40)

    def _close_phase(self, host, own=False):
        phase = (self._own if own else self._phases).pop(host, None)
        if phase is None:
            return
        name = phase.name if len(phase.name) <= PHASE_WIDTH else phase.name[:PHASE_WIDTH - 3] + "..."
        result = phase.result()
        tasks = "%d task%s" % (phase.tasks, "" if phase.tasks == 1 else "s")
        color = None
        if phase.failed or phase.unreachable:
            color = C.COLOR_ERROR
        elif phase.changed:
            color = C.COLOR_CHANGED
        seconds = phase.busy if phase.own else phase.end - phase.start
        self._line("  %s  %s  %s  %s  %9s" % (self._host_label(host), name.ljust(PHASE_WIDTH), result.ljust(22), tasks.rjust(9),
                                              _seconds(seconds)), color=color)

    def _close_all(self):
        for host in list(self._phases):
            self._close_phase(host)
        for host in list(self._own):
            self._close_phase(host, own=True)

    def _phase_for(self, result):
        """The host's open phase for this result (closing the one before when the phase changes)."""
        host = result.host.get_name()
        self._note_host(host)
        name = _phase_of(result.task, self._play_name)
        now = time.time()
        start = max(self._task_start.get(host, self._task_begun), self._task_begun)
        if getattr(result.task, "_role", None) is None:
            # the play's own steps (notes, checks, the summary) between the roles: one entry per host and play,
            # timed by what they took, so that a role's phase is not cut in two by a note between its tasks
            phase = self._own.get(host)
            if phase is None:
                phase = self._own[host] = _Phase(name, start, own=True)
            phase.tasks += 1
            phase.busy += max(0.0, now - start)
            phase.end = now
            return phase
        phase = self._phases.get(host)
        if phase is not None and phase.name != name:
            self._close_phase(host)
            phase = None
        if phase is None:
            phase = _Phase(name, start)
            self._phases[host] = phase
        phase.tasks += 1
        phase.end = now
        return phase

    def _where(self, result):
        phase = _phase_of(result.task, self._play_name)
        task = result.task
        name = (task.name or task.action or "").strip()
        return "%s | %s | %s" % (result.host.get_name(), phase, name)

    def _warnings(self, result, loop_done=False):
        if loop_done and isinstance(result.result.get("results"), list):
            return  # a loop's result repeats the warnings its items had: those were printed with each item
        for warning in getattr(result, "warnings", None) or []:
            self._line("[WARNING] %s: %s" % (self._where(result), _summary_text(warning)), color=C.COLOR_WARN)
        if not C.config.get_config_value("DEPRECATION_WARNINGS"):
            return
        for deprecation in getattr(result, "deprecations", None) or []:
            self._line("[DEPRECATION WARNING] %s: %s" % (self._where(result), _summary_text(deprecation)),
                       color=C.COLOR_DEPRECATE)

    def _detail(self, res, prefix="  "):
        """The lines that say why a task failed: msg, rc, the tails of stderr, stdout and module_stderr.

        RES may be of any shape (a loop item's result need not be a dict): what is not a dict is its message."""
        lines = []
        tail_lines = self.get_option("tail_lines")
        if not isinstance(res, dict):
            res = {"msg": res}
        msg = res.get("msg")
        if not (msg is None or (isinstance(msg, str) and msg == "")):
            text = _bounded(_text(msg))
            if "\n" in text:
                lines.append("%smsg:" % prefix)
                lines.append(_indent(text, prefix + "  "))
            else:
                lines.append("%smsg: %s" % (prefix, text))
        rc = res.get("rc")
        if not (rc is None or (isinstance(rc, int) and rc == 0)) or ("rc" in res and "cmd" in res):
            lines.append("%src: %s" % (prefix, _first_line(rc)))
        for key in ("stderr", "stdout", "module_stderr", "module_stdout"):
            value = res.get(key)
            if value is None or (isinstance(value, (str, list)) and not value):
                continue
            text, count, cut = _tail(value, tail_lines)
            if not text.strip():
                continue
            if cut and count <= tail_lines:
                label = "%s (its last %d characters)" % (key, MSG_CHARS)
            else:
                label = "%s (last %d of %d lines)" % (key, tail_lines, count) if cut else key
            lines.append("%s%s:" % (prefix, label))
            lines.append(_indent(text, prefix + "  | "))
        return lines

    def _print_failure(self, result, ignore_errors=False, rescue=None):
        res = result.result if isinstance(result.result, dict) else {"msg": result.result}
        if ignore_errors:
            head, color = "FAILED (ignored)", C.COLOR_WARN
        elif rescue:
            head, color = "FAILED (rescued by \"%s\")" % rescue, C.COLOR_WARN
        else:
            head, color = "FAILED", C.COLOR_ERROR
        self._line("%s %s" % (head, self._where(result)), color=color)
        lines = self._detail(res)
        items = res.get("results")
        if isinstance(items, list):
            failed_items = [item for item in items if isinstance(item, dict) and item.get("failed")]
            for item in failed_items[:20]:
                label = item.get("_ansible_item_label", item.get("item"))
                if label is None:
                    lines.append("  item:")
                else:
                    # an item may be anything: an empty string, a dict, a number
                    shown = _first_line(label)
                    lines.append("  item %s:" % (shown if shown.strip() else "%s (%s)" % (
                        _raw(label, 40), "empty" if not shown else "blank")))
                lines.extend(self._detail(item, prefix="    "))
            if len(failed_items) > 20:
                lines.append("  ... and %d more failed items (in the log)" % (len(failed_items) - 20))
        if not lines:
            lines.append("  (no message; the log has the whole result)")
        for line in lines:
            self._line(line, color=color)
        return rescue

    def _print_shown(self, result):
        task = result.task
        show_var = self.get_option("show_var")
        if not show_var or not _truthy((getattr(task, "vars", None) or {}).get(show_var)):
            return
        res = result.result
        if "msg" in res:
            value = res["msg"]
        elif (task.action in C._ACTION_DEBUG and isinstance(task.args, dict) and isinstance(task.args.get("var"), str)
              and task.args["var"] in res):
            value = res[task.args["var"]]
        else:
            value = {key: val for key, val in res.items() if not key.startswith("_") and key not in ("changed", "failed")}
        # the message in its own words: after the host's name unless it starts with it, never after the task's
        # name; a run_once task's message is the fleet's (the summary), not its first host's
        text = _text(value)
        host = result.host.get_name()
        fleet = _truthy(getattr(task, "run_once", False))
        if "\n" in text:
            if not fleet:
                self._line("%s:" % host)
            self._line(_indent(text, "  "))
        elif fleet or text == host or text.startswith((host + " ", host + ":")):
            self._line(text)
        else:
            self._line("%s: %s" % (host, text))

    # -- playbook and play events -------------------------------------------------------------------------------

    def v2_playbook_on_start(self, playbook):
        if self._log is None:  # ansible-core sends the stats after each playbook: each has a log of its own
            name = os.path.splitext(os.path.basename(getattr(playbook, "_file_name", "") or "ansible-playbook"))[0]
            self._open_log(name)
        self._forward("v2_playbook_on_start", playbook)

    def v2_playbook_on_play_start(self, play):
        self._close_all()
        self._forward("v2_playbook_on_play_start", play)
        self._play_name = play.get_name().strip()
        mode = " [check mode]" if getattr(play, "check_mode", False) else ""
        self._line("")
        self._line("PLAY %s%s" % (self._play_name or "(unnamed)", mode), color=C.COLOR_HIGHLIGHT)

    def v2_playbook_on_no_hosts_matched(self):
        self._forward("v2_playbook_on_no_hosts_matched")
        self._line("  skipping: no hosts matched", color=C.COLOR_SKIP)

    def v2_playbook_on_no_hosts_remaining(self):
        self._forward("v2_playbook_on_no_hosts_remaining")
        self._line("  no hosts left: the play stops", color=C.COLOR_ERROR)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_begun = time.time()
        self._forward("v2_playbook_on_task_start", task, is_conditional)

    def v2_playbook_on_handler_task_start(self, task):
        self._forward("v2_playbook_on_handler_task_start", task)

    def v2_playbook_on_cleanup_task_start(self, task):
        self._forward("v2_playbook_on_cleanup_task_start", task)

    def v2_runner_on_start(self, host, task):
        self._task_start[host.get_name()] = time.time()
        self._forward("v2_runner_on_start", host, task)

    def v2_playbook_on_include(self, included_file):
        self._forward("v2_playbook_on_include", included_file)

    def v2_playbook_on_notify(self, handler, host):
        self._forward("v2_playbook_on_notify", handler, host)

    # -- results --------------------------------------------------------------------------------------------

    def v2_runner_on_ok(self, result):
        if result.task.action in C._ACTION_ALL_INCLUDES:
            # an include_role or include_tasks is not a step of its own (ansible-core counts none either): its
            # tasks are, so the include does not open a phase between two roles
            self._forward("v2_runner_on_ok", result)
            return
        phase = self._phase_for(result)
        phase.ok += 1
        if result.is_changed():
            self._count_change(result, phase)
        self._warnings(result, loop_done=True)
        self._print_shown(result)
        self._follow_report_dir(result)
        self._forward("v2_runner_on_ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        phase = self._phase_for(result)
        rescue = None if ignore_errors else _rescue_of(result.task)
        try:
            self._warnings(result, loop_done=True)
            self._print_failure(result, ignore_errors=ignore_errors, rescue=rescue)
        finally:
            self._count_failure(result, phase, ignore_errors, rescue)
        self._forward("v2_runner_on_failed", result, ignore_errors=ignore_errors)

    def _count_failure(self, result, phase, ignore_errors, rescue):
        """The failure counted in the host's phase, whatever printing it did (the phase line never says "skipped")."""
        if ignore_errors:
            # ansible-core counts an ignored failure as ok, and as changed when it changed something
            phase.ignored += 1
            if result.is_changed():
                self._count_change(result, phase)
        elif rescue:
            phase.rescued += 1
        else:
            phase.failed += 1

    def _count_change(self, result, phase):
        """A change, or in check mode a change that would be made: counted apart, for the phase and the recap."""
        if _check_mode(result.task):
            phase.would += 1
            host = result.host.get_name()
            self._would[host] = self._would.get(host, 0) + 1
        else:
            phase.changed += 1

    def v2_runner_on_skipped(self, result):
        if result.task.action in C._ACTION_ALL_INCLUDES:
            self._forward("v2_runner_on_skipped", result)
            return
        phase = self._phase_for(result)
        phase.skipped += 1
        self._forward("v2_runner_on_skipped", result)

    def v2_runner_on_unreachable(self, result):
        phase = self._phase_for(result)
        phase.unreachable += 1
        self._line("UNREACHABLE %s" % self._where(result), color=C.COLOR_UNREACHABLE)
        for line in self._detail(result.result) or ["  (no message; the log has the whole result)"]:
            self._line(line, color=C.COLOR_UNREACHABLE)
        self._forward("v2_runner_on_unreachable", result)

    def v2_runner_item_on_ok(self, result):
        self._warnings(result)
        self._forward("v2_runner_item_on_ok", result)

    def v2_runner_item_on_failed(self, result):
        self._warnings(result)
        self._forward("v2_runner_item_on_failed", result)

    def v2_runner_item_on_skipped(self, result):
        self._forward("v2_runner_item_on_skipped", result)

    def v2_runner_retry(self, result):
        self._forward("v2_runner_retry", result)

    def v2_runner_on_async_poll(self, result):
        self._forward("v2_runner_on_async_poll", result)

    def v2_runner_on_async_ok(self, result):
        self._forward("v2_runner_on_async_ok", result)

    def v2_runner_on_async_failed(self, result):
        self._forward("v2_runner_on_async_failed", result)

    def v2_on_file_diff(self, result):
        self._forward("v2_on_file_diff", result)

    # -- the end ----------------------------------------------------------------------------------------------

    def v2_playbook_on_stats(self, stats):
        self._close_all()
        self._forward("v2_playbook_on_stats", stats)
        self._line("")
        self._line("RECAP (%s)" % _seconds(time.time() - self._started), color=C.COLOR_HIGHLIGHT)
        hosts = sorted(stats.processed.keys())
        for host in hosts:
            self._note_host(host)
        for host in hosts:
            summary = stats.summarize(host)
            would = min(self._would.get(host, 0), summary["changed"])
            parts = ["ok=%d" % summary["ok"], "changed=%d" % (summary["changed"] - would)]
            if would:
                parts.append("would change=%d" % would)
            for key in ("failures", "unreachable", "rescued", "ignored", "skipped"):
                if summary.get(key):
                    parts.append("%s=%d" % ("failed" if key == "failures" else key, summary[key]))
            verdict = "FAILED" if summary["failures"] or summary["unreachable"] else "ok"
            color = C.COLOR_ERROR if verdict == "FAILED" else (C.COLOR_CHANGED if summary["changed"] - would else C.COLOR_OK)
            self._line("  %s  %-6s  %s" % (self._host_label(host), verdict, "  ".join(parts)), color=color)
        if self._untee is not None:
            self._untee()
            self._untee = None
        log, self._log, self._full = self._log, None, None
        self._started = time.time()
        if log is not None and log.path:
            cut = " (cut at %s: log_max_size)" % _size(log.max_size) if log.truncated else ""
            log.close()
            self._line("Full log: %s%s" % (log.path, cut))
        elif log is not None:
            log.close()
