# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The downtime window of a vLLM host, as one run on the host.

stop the unit -> wait until the GPUs are free -> point the environment link
at the new environment -> start the unit -> readiness gate -> VRAM loaded.

Done as separate Ansible tasks, every step costs a round trip to the host
while the server is down; here the steps follow each other at once, and the
downtime is measured on the host's own clock from the stop to ready.

Public API (used by the ``vllm_cutover`` module):

* :func:`read_link` / :func:`point_link` -- read a symbolic link, and point
  one at a target atomically (a new link renamed over the old one), never
  replacing a real file or directory.
* :func:`check_link_args` -- the problems of a link switch, as sentences,
  found before anything is stopped.
* :class:`Cutover` -- the run itself: ``run()`` returns the result dict or
  raises :class:`CutoverFailed`, whose ``result`` says how far it got
  (``stopped``, ``switched``, ``started``, ``ready``) so that a caller can
  roll back.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils import nvml
from ansible_collections.gpufleet.vllm.plugins.module_utils.systemd import (
    ENABLED_STATES,
    RUNNING_STATES,
    SystemdError,
    journal_tail,
    read_state,
    run_verb,
    show,
    unit_state,
    unit_stopped_reason,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.vllm_api import failure_message, wait_ready


class CutoverFailed(Exception):
    """A step failed; ``result`` holds what was done up to there."""

    def __init__(self, msg, result):
        super(CutoverFailed, self).__init__(msg)
        self.msg = msg
        self.result = result


def read_link(path):
    """The target of the link PATH, None when PATH does not exist.

    Raises ValueError when PATH exists but is not a symbolic link.
    """
    if os.path.islink(path):
        return os.readlink(path)
    if os.path.lexists(path):
        raise ValueError("%s is a real %s, not a symbolic link" % (
            path, "directory" if os.path.isdir(path) else "file"))
    return None


def point_link(path, target):
    """Point the symbolic link PATH at TARGET atomically; return True when it changed."""
    if read_link(path) == target:
        return False
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    tmp = os.path.join(parent, ".%s.gpufleet-%d" % (os.path.basename(path), os.getpid()))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except OSError:
        os.unlink(tmp)
        raise
    return True


def check_link_args(link, link_target, previous_link, must_exist=True):
    """Sentences that say why the link switch cannot be done (empty when it can).

    ``must_exist=False`` (check mode, where an earlier task did not really
    stage the environment) leaves out the checks of ``link_target`` on disk.
    """
    problems = []
    if not link:
        if link_target or previous_link:
            problems.append("link_target and previous_link need link (the path of the environment link)")
        return problems
    if not link_target:
        problems.append("link=%s needs link_target (the environment it should point at)" % link)
        return problems
    for name, path in (("link", link), ("link_target", link_target), ("previous_link", previous_link)):
        if path and not os.path.isabs(path):
            problems.append("%s=%s is not an absolute path" % (name, path))
    if problems:
        return problems
    if previous_link and previous_link == link:
        problems.append("previous_link is the same path as link")
    for name, path in (("link", link), ("previous_link", previous_link)):
        if path:
            try:
                read_link(path)
            except ValueError as exc:
                problems.append("%s: %s; it is left alone, move it away or choose another path" % (name, exc))
    if must_exist:
        if not os.path.isdir(link_target):
            problems.append("link_target %s is not a directory on this host (was the environment staged?)"
                            % link_target)
        elif not os.path.exists(os.path.join(link_target, "bin", "python")):
            problems.append("link_target %s has no bin/python: it is not a Python environment" % link_target)
    return problems


def _round(seconds):
    return None if seconds is None else round(seconds, 2)


class Cutover(object):
    """One downtime window.

    ``run_command``: ``(argv) -> (rc, out, err)``, argv lists, never a shell;
    the module gives bounded.runner (each call killed at its time limit).
    ``read_command``: the same for systemctl show and journalctl (None: ``run_command``).
    ``client``: a vllm_api.VllmClient, or None for no readiness gate.
    ``vram``: None (no NVML checks) or a dict with ``count``,
    ``stopped_max_used_mib``, ``free_timeout``, ``loaded_min_used_mib``
    and/or ``loaded_min_used_fraction`` with ``loaded_tolerance`` (both
    None: no loaded check), ``loaded_gpus`` (the GPUs the loaded check
    applies to; None: all), ``loaded_timeout``, ``interval``.
    ``ready``: dict of wait_ready's arguments (``served_model_name``,
    ``timeout``, ``interval``, ``completion``, ``prompt``).
    ``stop_units``: other units that hold the same GPUs (another model's
    server, on a model switch): each is stopped right after UNIT, before
    the wait for free GPUs; result ``others`` says which ran and which were
    stopped (what a rollback starts again).
    ``start`` False: the stop alone (stop, the other units, the GPUs free),
    and nothing after it; a unit systemd does not know has nothing to stop,
    and ``changed``/``stopped`` say whether a running server was stopped.
    ``stop_began`` in the result is the wall-clock time (``wall_clock``) of
    the stop.
    """

    def __init__(self, run_command, systemctl, journalctl, unit, link=None, link_target=None, previous_link=None,
                 previous_link_target=None, daemon_reload=False, client=None, ready=None, vram=None, journal_lines=30,
                 collect=nvml.collect, clock=time.monotonic, sleep=time.sleep, read_command=None, stop_units=(),
                 start=True, wall_clock=time.time):
        self.run_command = run_command
        # systemctl show and journalctl (only reads): a shorter limit than stop and start, when given
        self.read_command = read_command or run_command
        self.systemctl = systemctl
        self.journalctl = journalctl
        self.unit = unit
        self.link = link
        self.link_target = link_target
        self.previous_link = previous_link
        self.previous_link_target = previous_link_target
        self.daemon_reload = daemon_reload
        self.client = client
        self.ready = dict(ready or {})
        self.vram = vram
        self.journal_lines = journal_lines
        self.stop_units = list(stop_units or ())
        # start False: the stop alone (stop -> other units -> GPUs free), for the service role's stop; a unit
        # systemd does not know then has nothing to stop
        self.start = start
        self.wall_clock = wall_clock
        self.exists = None
        self.collect = collect
        self.clock = clock
        self.sleep = sleep
        self.t0 = None
        self.warnings = []
        self.result = {
            "changed": False, "unit": unit, "was_active": None, "stopped": False, "switched": False,
            "started": False, "ready": False, "link": link, "link_before": None, "link_after": None,
            "previous_link": previous_link, "phases": {}, "downtime_seconds": None, "load_seconds": None,
            "stop_seconds": None, "readiness": None, "version": None, "vram_used_mib": [], "vram_freed_mib": [],
            "failed_step": None, "others": [],
        }

    # ------------------------------------------------------------- helpers

    def _since(self, mark):
        return _round(self.clock() - mark)

    def _fail(self, step, msg, journal=False):
        self.result["failed_step"] = step
        if self.t0 is not None:
            self.result["phases"]["total"] = self._since(self.t0)
        lines = journal_tail(self.read_command, self.journalctl, self.unit, self.journal_lines) if journal else []
        if journal:
            self.result["journal"] = lines
        where = []
        if self.result["stopped"]:
            where.append("%s is stopped" % self.unit)
        others = [o["unit"] for o in self.result["others"] if o["stopped"] and o["was_active"]]
        if others:
            where.append("the other model's %s %s stopped" % (", ".join(others), "is" if len(others) == 1 else "are"))
        if self.link:
            where.append("%s points at %s" % (
                self.link, self.result["link_after"] if self.result["switched"] else self.result["link_before"]))
        if where:
            msg = "%s Now: %s." % (msg, "; ".join(where))
        if lines:
            msg += "\nLast %d lines of the journal of %s:\n%s" % (len(lines), self.unit, "\n".join(lines))
        raise CutoverFailed(msg, self.result)

    def _systemctl(self, step, verb):
        """systemctl VERB of the unit; on a failure (or a call killed at its time limit) _fail(STEP)."""
        try:
            run_verb(self.run_command, self.systemctl, verb, self.unit)
        except SystemdError as exc:
            self._fail(step, "%s." % exc, journal=verb != "daemon-reload")

    def _point(self, which, path, target):
        """point_link(PATH, TARGET); on a failure _fail("switch") naming WHICH link."""
        try:
            return point_link(path, target)
        except (OSError, ValueError) as exc:
            self._fail("switch", "Cannot point the %s %s at %s: %s." % (which, path, target, exc))
        return False

    def _wait_gpus(self, step, expect, timeout):
        res = self.collect(expect=expect, timeout=timeout, interval=self.vram.get("interval", 0.5))
        if not res["expectation_met"]:
            why = nvml.failure_message(res, timeout)
            self._fail(step, "The GPUs did not get %s: %s" % (
                "free after the stop" if step == "vram_freed" else "loaded after the start", why.replace("\n", " ")))
        return [gpu.get("memory_used_mib") for gpu in res["gpus"]]

    def _loaded_expect(self):
        """The NVML expectation of the loaded GPUs, None when there is no loaded check."""
        vram = self.vram or {}
        if vram.get("loaded_min_used_mib") is None and vram.get("loaded_min_used_fraction") is None:
            return None
        expect = {"count": vram.get("count"), "gpus": vram.get("loaded_gpus"),
                  "min_used_mib": vram.get("loaded_min_used_mib")}
        if vram.get("loaded_min_used_fraction") is not None:
            expect["min_used_fraction"] = vram["loaded_min_used_fraction"]
            expect["min_used_tolerance"] = vram.get("loaded_tolerance") or 0.0
        return dict((key, value) for key, value in expect.items() if value is not None)

    # ----------------------------------------------------------------- run

    def stops_anything(self):
        """Whether the stop stops a running server: the unit's, or one of the other units'."""
        return bool(self.result["was_active"]) or any(o["was_active"] for o in self.result["others"])

    def describe(self):
        """What run() would do, in one sentence (check mode)."""
        words = ["stop %s" % self.unit]
        if not self.start and not self.result["was_active"]:
            words = ["stop nothing of %s (%s)" % (
                self.unit, "not running" if self.exists else "systemd does not know it")]
        running = [o["unit"] for o in self.result["others"] if o["was_active"]]
        if running:
            words.append("stop the other model's %s" % ", ".join(running))
        if self.vram:
            words.append("wait until the GPUs are free")
        if not self.start:
            return ", ".join(words)
        if self.link and self.result["link_before"] != self.link_target:
            words.append("point %s at %s (was %s)" % (self.link, self.link_target, self.result["link_before"]))
        if self.daemon_reload:
            words.append("reload systemd")
        words.append("start %s" % self.unit)
        if self.client is not None:
            words.append("wait until it is ready")
        if self._loaded_expect():
            words.append("check that the model holds the GPUs' memory")
        return ", ".join(words)

    def prepare(self, check_mode=False):
        """Read the unit and the link; fail before anything is stopped when the cutover cannot work.

        In check mode a unit that does not exist yet is no failure (an
        earlier task would have rendered it); ``warnings`` says so.
        """
        try:
            state = read_state(self.read_command, self.systemctl, self.unit)
        except SystemdError as exc:
            self._fail("unit", "systemctl cannot read the unit %s (%s); nothing was stopped." % (self.unit, exc))
        self.exists = state.exists
        if not self.start:
            # (the stop alone: a unit systemd does not know has nothing to stop, one it cannot load may still run)
            pass
        elif check_mode and not state.exists:
            self.warnings.append("The unit %s does not exist yet; in a real run it must be rendered before the "
                                 "cutover." % self.unit)
        elif not state.loaded:
            self._fail("unit", "The unit %s is %s: render it (the gpufleet.vllm.service role) before a cutover; "
                       "nothing was stopped." % (self.unit, state.load_state or "unknown"))
        self.result["was_active"] = state.running
        for other in self.stop_units:
            if other == self.unit:
                self._fail("unit", "The unit %s is also in stop_units: a unit cannot be stopped for itself; nothing "
                           "was stopped." % other)
            try:
                props = show(self.read_command, self.systemctl, other, ("LoadState", "ActiveState", "UnitFileState"))
            except SystemdError as exc:
                self._fail("unit", "systemctl cannot read the unit %s that was to be stopped first (%s); nothing was "
                           "stopped." % (other, exc))
            # (a unit systemd does not know has nothing to stop: systemctl stop would fail on it in the window)
            if props.get("LoadState") not in ("not-found", None, ""):
                self.result["others"].append({
                    "unit": other, "was_active": props.get("ActiveState") in RUNNING_STATES,
                    "was_enabled": props.get("UnitFileState") in ENABLED_STATES, "stopped": False})
        if self.link:
            self.result["link_before"] = read_link(self.link)
        if self.vram and self.start:
            # NVML must answer before the server is stopped, or the stop cannot be proven (the stop alone stops
            # anyway: an operator stopping the server of a host whose GPUs are in trouble must get it down)
            res = self.collect(expect={}, timeout=0)
            if not res["nvml_available"]:
                self._fail("nvml", "NVML cannot be read, so freed and loaded VRAM cannot be checked; nothing was "
                           "stopped: %s" % nvml.failure_message(res))
            count = self.vram.get("count")
            if count is not None and res["gpu_count"] != count:
                self._fail("nvml", "The host has %d GPUs where %d are expected; nothing was stopped."
                           % (res["gpu_count"], count))

    def run(self):
        """The whole window; returns the result dict (raises CutoverFailed)."""
        result = self.result
        result["changed"] = True if self.start else self.stops_anything()
        self.t0 = self.clock()
        phases = result["phases"]

        result["stop_began"] = round(self.wall_clock(), 3)
        mark = self.clock()
        # (the stop alone: only a unit that runs, its file there or not; systemctl stop of an inactive unit whose
        # file systemd cannot load fails, where there is nothing to stop)
        if self.start or result["was_active"]:
            self._systemctl("stop", "stop")
            # (the stop alone says whether it stopped a server, as systemctl's own state=stopped does)
            result["stopped"] = True
        phases["stop"] = self._since(mark)
        if result["others"]:
            mark = self.clock()
            for other in result["others"]:
                try:
                    run_verb(self.run_command, self.systemctl, "stop", other["unit"])
                except SystemdError as exc:
                    self._fail("stop_others", "The other model's unit %s did not stop: %s." % (other["unit"], exc))
                other["stopped"] = True
            phases["stop_others"] = self._since(mark)

        if self.vram:
            mark = self.clock()
            # (the GPUs the unit uses: a model beside it on other GPUs keeps its own)
            freed = {"count": self.vram.get("count"), "max_used_mib": self.vram.get("stopped_max_used_mib", 1024),
                     "no_processes": True}
            if self.vram.get("loaded_gpus") is not None:
                freed["gpus"] = self.vram["loaded_gpus"]
            result["vram_freed_mib"] = self._wait_gpus("vram_freed", freed, self.vram.get("free_timeout", 120))
            phases["vram_freed"] = self._since(mark)
        result["stop_seconds"] = self._since(self.t0)
        if not self.start:
            phases["total"] = result["stop_seconds"]
            return result

        if self.link:
            mark = self.clock()
            try:
                before = read_link(self.link) or self.previous_link_target
            except (OSError, ValueError) as exc:
                self._fail("switch", "Cannot read the link %s: %s." % (self.link, exc))
            if self.previous_link and before and before != self.link_target:
                self._point("previous link", self.previous_link, before)
            result["switched"] = self._point("link", self.link, self.link_target)
            result["link_after"] = read_link(self.link)
            phases["switch"] = self._since(mark)

        if self.daemon_reload:
            self._systemctl("daemon_reload", "daemon-reload")

        mark = self.clock()
        self._systemctl("start", "start")
        result["started"] = True
        started_at = self.clock()
        phases["start"] = _round(started_at - mark)

        if self.client is not None:
            def watch():
                return unit_stopped_reason(self.unit, unit_state(self.read_command, self.systemctl, self.unit))
            ready = wait_ready(self.client, watch=watch, clock=self.clock, sleep=self.sleep, **self.ready)
            ready.pop("once", None)
            timeout = ready.pop("timeout", None)
            result["readiness"] = ready
            result["version"] = ready.get("version")
            phases["ready"] = self._since(started_at)
            if not ready["ready"]:
                # once: result["readiness"] is `ready`, whose msg the message is built from
                why = failure_message(ready)
                result["readiness"]["msg"] = why
                self._fail("ready", "%s did not get ready after the cutover (timeout %s s): %s" % (
                    self.unit, timeout, why), journal=True)
            result["ready"] = True
        result["load_seconds"] = self._since(started_at)
        result["downtime_seconds"] = self._since(self.t0)

        loaded = self._loaded_expect()
        if loaded:
            mark = self.clock()
            result["vram_used_mib"] = self._wait_gpus("vram_loaded", loaded, self.vram.get("loaded_timeout", 60))
            phases["vram_loaded"] = self._since(mark)
        phases["total"] = self._since(self.t0)
        return result
