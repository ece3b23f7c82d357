# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Commands and phases with a time limit.

``AnsibleModule.run_command`` waits for ever: a ``systemctl`` that hangs on
a wedged D-Bus, or a ``journalctl`` on a huge journal, would hold the task
(and the downtime window) with it.  :func:`run_bounded` runs an argv (a
list, never a shell) in its own session, kills the whole session when the
time is up, and reads at most the last ``max_output`` bytes of each stream
(they go to temporary files, so memory does not grow with the output).

Public API:

* :func:`run_bounded` -- ``(rc, stdout, stderr)`` like ``run_command``;
  on a timeout ``rc`` is :data:`TIMEOUT_RC` and ``stderr`` the sentence
  that says so (``systemctl show x.service did not answer within 30 s``).
* :func:`runner` -- a ``run_command``-like callable with a fixed limit, for
  code that takes one (``vllm_api.unit_state``, ``journal_tail``).
* :func:`command_failure` -- the sentence of a failed call, the timeout
  sentence as it is.
* :class:`Deadline` -- the overall time limit of a module run, with a clock
  of its own (tests make time pass), ``left()`` and ``check(doing)``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import signal
import subprocess
import tempfile
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text

# the exit status of a command that was killed at its time limit (as coreutils timeout gives)
TIMEOUT_RC = 124
# the most bytes read of each of stdout and stderr (the end of the output is kept)
MAX_OUTPUT = 1 << 20
# the time limit of a call that only reads (systemctl show, journalctl)
READ_TIMEOUT = 30

_TIMEOUT_MARK = " did not answer within "
_START_MARK = " could not be run: "
NOT_STARTED_RC = 127


def _words(argv):
    """The command as a person would type it (the program's base name, then its arguments)."""
    words = [os.path.basename(str(argv[0]))] + [str(w) for w in argv[1:] if str(w) != "--"]
    text = " ".join(w for w in words if not w.startswith("--property=") and not w.startswith("--output="))
    return valid_text(text)


def _number(value):
    return ("%d" % value) if float(value) == int(value) else ("%.1f" % value)


def _tail(handle, limit, head=False):
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(0 if head else max(0, size - limit))
    data = handle.read(limit)
    # as run_command gives it: bytes that are not UTF-8 kept as surrogate escapes
    return data.decode("utf-8", "surrogateescape")


def run_bounded(argv, timeout, max_output=MAX_OUTPUT, env=None, stdin=None, cwd=None, stdout_head=False):
    """Run ARGV (a list) for at most TIMEOUT seconds; return (rc, stdout, stderr).

    The command runs in a session of its own with stdin from /dev/null (or
    the text STDIN, from a temporary file); at the time limit the whole
    session (the command and whatever it started) is killed with SIGKILL and
    the answer is ``(TIMEOUT_RC, out, "<command> did not answer within N s
    and was killed")``.  A command that cannot be started gives rc 127 and
    the reason.  Output goes to temporary files; at most the last MAX_OUTPUT
    bytes of each are read (the first, for stdout, with STDOUT_HEAD).
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("run_bounded takes a list of words, never a shell command line")
    argv = [str(w) for w in argv]
    timeout = max(0.1, float(timeout))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as given:
        if stdin is not None:
            given.write(stdin.encode("utf-8") if not isinstance(stdin, bytes) else stdin)
            given.seek(0)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL if stdin is None else given, stdout=out, stderr=err,
                                    start_new_session=True, close_fds=True, env=env, cwd=cwd)
        except OSError as exc:
            return NOT_STARTED_RC, "", "%s%s%s" % (_words(argv), _START_MARK, exc.strerror or exc)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.wait()
            return TIMEOUT_RC, _tail(out, max_output, stdout_head), "%s%s%s s and was killed" % (
                _words(argv), _TIMEOUT_MARK, _number(timeout))
        return rc, _tail(out, max_output, stdout_head), _tail(err, max_output)


def runner(timeout, max_output=MAX_OUTPUT, deadline=None):
    """A run_command-like callable: ``run(argv) -> (rc, out, err)``, each call bounded by TIMEOUT seconds
    (and by what is left of DEADLINE, a :class:`Deadline`, when one is given)."""
    def run(argv, **kwargs):
        limit = timeout if deadline is None else max(0.1, min(timeout, deadline.left()))
        return run_bounded(argv, limit, max_output=max_output)
    return run


def timed_out(rc, err):
    """Whether (rc, err) of run_bounded says the command was killed at its time limit."""
    return rc == TIMEOUT_RC and _TIMEOUT_MARK in (err or "")


def not_started(rc, err):
    """Whether (rc, err) of run_bounded says the command could not be started at all."""
    return rc == NOT_STARTED_RC and _START_MARK in (err or "")


def command_failure(argv, rc, err):
    """The sentence of a failed call: the timeout sentence, or '<command> failed (exit N): <stderr>'."""
    if timed_out(rc, err):
        return err.strip()
    text = valid_text(" ".join((err or "").split()))
    return "%s failed (exit %d): %s" % (_words(argv), rc, text[:600])


class DeadlinePassed(Exception):
    """The overall time limit passed; str() says while doing what."""


class Deadline(object):
    """An overall limit of SECONDS from now, on CLOCK (time.monotonic unless a test gives another)."""

    def __init__(self, seconds, clock=None, option="timeout"):
        self.clock = clock or time.monotonic
        self.seconds = seconds
        self.option = option
        self.at = self.clock() + seconds

    def left(self):
        return max(0.0, self.at - self.clock())

    def passed(self):
        return self.clock() >= self.at

    def message(self, doing):
        return "the time limit of %s s (%s) passed before %s" % (_number(self.seconds), self.option, doing)

    def check(self, doing):
        """Raise DeadlinePassed (with the sentence) when the limit has passed; DOING says what was next."""
        if self.passed():
            raise DeadlinePassed(self.message(doing))
