# SPDX-License-Identifier: GPL-3.0-or-later
"""A very small systemd for unit tests: ``systemctl`` and ``journalctl``.

Tests that drive a real server process through a module that calls
``systemctl stop/start/show`` put two wrappers of this script on PATH
(:func:`install`).  State lives in ``$FAKE_SYSTEMD_DIR``:

* ``<unit>.json``  -- the "unit file": ``{"argv": [...], "env": {...}}``
  (absent: ``LoadState=not-found``)
* ``<unit>.pid``, ``<unit>.start`` (CLOCK_MONOTONIC, microseconds),
  ``<unit>.exit`` (exit status of the last run), ``<unit>.log`` (its output,
  what journalctl shows)
* ``calls``        -- one line per systemctl call (``stop UNIT``, ...)
* ``<unit>.fail-start`` / ``<unit>.fail-stop`` -- make that verb fail with
  the file's text on stderr

``start`` runs the argv under a small supervisor (this script, verb
``_run``) that records the exit status, so that ``show`` tells a crashed
server (``failed``) from a stopped one (``inactive``), as systemd does.
The supervisor leads a process group of its own, with the server in it:
``stop`` ends the group, and :func:`stop_all` every unit a state directory
started (tests/unit/conftest.py calls it at the end of each test that
installed a fake systemd, whatever the test stopped itself).
"""

import json
import os
import signal
import subprocess
import sys
import time

#: the state directories install() set up in this process (tests/unit/conftest.py stops their units after each test)
STATE_DIRS = set()
#: how long a stopped unit's process group may take to go after SIGTERM, before SIGKILL
STOP_SECONDS = 20

PROPS = ("LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "InvocationID",
         "ExecMainStartTimestampMonotonic", "FragmentPath")


def _dir():
    return os.environ["FAKE_SYSTEMD_DIR"]


def _path(unit, suffix):
    return os.path.join(_dir(), unit + suffix)


def _read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _pid(unit):
    text = _read(_path(unit, ".pid"))
    return int(text) if text else 0


def show(unit):
    loaded = os.path.exists(_path(unit, ".json"))
    pid = _pid(unit)
    running = loaded and pid > 0 and _alive(pid)
    status = _read(_path(unit, ".exit"))
    stopped = _read(_path(unit, ".stopped")) == "1"
    if running:
        active, sub, result = "active", "running", "success"
    elif status not in (None, "0") and not stopped:
        active, sub, result = "failed", "failed", "exit-code"
    else:
        active, sub, result = "inactive", "dead", "success"
    values = {
        "LoadState": "loaded" if loaded else "not-found", "ActiveState": active, "SubState": sub,
        "Result": result, "NRestarts": "0", "MainPID": str(pid if running else 0),
        "InvocationID": "0123abcd", "ExecMainStartTimestampMonotonic": _read(_path(unit, ".start"), "0")
        if running else "0",
        # (the unit file, when the test wrote one: write_unit's fragment)
        "FragmentPath": (_read(_path(unit, ".fragment")) or _path(unit, ".json")) if loaded else "",
        # (enabled at boot: a file <unit>.enabled, as `systemctl enable` makes)
        "UnitFileState": ("enabled" if os.path.exists(_path(unit, ".enabled")) else "disabled") if loaded else "",
        # (a file <unit>.dropins: the unit's drop-in paths)
        "DropInPaths": _read(_path(unit, ".dropins"), "") if loaded else "",
    }
    return values


def start(unit):
    if os.path.exists(_path(unit, ".fail-start")):
        sys.stderr.write(_read(_path(unit, ".fail-start")) + "\n")
        return 1
    if not os.path.exists(_path(unit, ".json")):
        sys.stderr.write("Failed to start %s: Unit %s not found.\n" % (unit, unit))
        return 5
    pid = _pid(unit)
    if pid and _alive(pid):
        return 0
    for suffix in (".exit", ".stopped"):
        if os.path.exists(_path(unit, suffix)):
            os.unlink(_path(unit, suffix))
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_run", unit], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(_path(unit, ".pid"), "w") as f:
        f.write(str(proc.pid))
    with open(_path(unit, ".start"), "w") as f:
        f.write(str(int(time.monotonic() * 1e6)))
    return 0


def stop(unit, timeout=20):
    if os.path.exists(_path(unit, ".fail-stop")):
        sys.stderr.write(_read(_path(unit, ".fail-stop")) + "\n")
        return 1
    pid = _pid(unit)
    if pid and _alive(pid):
        with open(_path(unit, ".stopped"), "w") as f:
            f.write("1")
        # SIGTERM to the supervisor, which forwards it to its server and exits when the server has; what is left
        # of the group it leads after that gets SIGTERM itself (a stop that came right after the start, before the
        # supervisor forwarded signals, ended the supervisor alone), then SIGKILL at the timeout, as systemd's
        # KillMode=control-group leaves nothing of a stopped unit running
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not _alive(pid) and _group_alive(pid):
            _kill_group(pid, signal.SIGTERM)
            while _group_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        _kill_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    return 0


def _is_supervisor(pid, unit):
    """Whether PID is still this script's supervisor of UNIT, leading its process group (not a reused id)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            words = f.read(8192).split(b"\0")
        return os.getpgid(pid) == pid and b"_run" in words and unit.encode() in words
    except OSError:
        return False


def _kill_group(pgid, signum):
    try:
        os.killpg(pgid, signum)
    except OSError:
        pass


def _group_alive(pgid):
    """Whether a live (not zombie) process is in process group PGID."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def stop_all(state_dir, timeout=STOP_SECONDS):
    """End every unit STATE_DIR started that still runs: SIGTERM to its supervisor's process group (the server in
    it), SIGKILL to what is left after TIMEOUT seconds, then wait (bounded) until the groups are gone.
    Returns the units that were running."""
    groups = {}
    try:
        names = sorted(os.listdir(state_dir))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".pid"):
            continue
        unit = name[:-len(".pid")]
        try:
            with open(os.path.join(state_dir, name)) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        if pid > 0 and (_is_supervisor(pid, unit) or _group_alive(pid)):
            # (a supervisor that is gone may have left its server in the group it led)
            groups[unit] = pid
    for pgid in groups.values():
        _kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_group_alive(pgid) for pgid in groups.values()):
        time.sleep(0.05)
    for pgid in groups.values():
        _kill_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_group_alive(pgid) for pgid in groups.values()):
        time.sleep(0.05)
    return sorted(groups)


def supervise(unit):
    """Verb _run: the unit's main process; runs the server and records its exit status."""
    with open(_path(unit, ".json")) as f:
        spec = json.load(f)
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    with open(_path(unit, ".log"), "a") as log:
        child = subprocess.Popen(spec["argv"], env=env, stdout=log, stderr=subprocess.STDOUT)
        # (a test makes the window between the server's start and the signal forwarding wide, to show that a stop
        # in it still ends the server)
        time.sleep(min(float(os.environ.get("FAKESYSTEMD_FORWARD_DELAY") or 0), 30))

        def forward(signum, frame):
            child.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        status = child.wait()
    with open(_path(unit, ".exit"), "w") as f:
        f.write(str(status))
    return 0


def systemctl(argv):
    words = [w for w in argv if w != "--"]
    verb = words[0]
    props = [w.split("=", 1)[1] for w in words if w.startswith("--property=")]
    units = [w for w in words[1:] if not w.startswith("--")]
    with open(os.path.join(_dir(), "calls"), "a") as f:
        f.write(" ".join([verb] + units) + "\n")
    if verb == "daemon-reload":
        return 0
    unit = units[0]
    if verb == "show":
        values = show(unit)
        wanted = props[0].split(",") if props else PROPS
        for key in wanted:
            print("%s=%s" % (key, values.get(key, "")))
        return 0
    if verb == "start":
        return start(unit)
    if verb == "stop":
        return stop(unit)
    if verb == "is-enabled":
        enabled = os.path.exists(_path(unit, ".enabled"))
        print("enabled" if enabled else ("disabled" if os.path.exists(_path(unit, ".json")) else "not-found"))
        return 0 if enabled else 1
    if verb in ("enable", "disable"):
        if verb == "enable":
            open(_path(unit, ".enabled"), "w").close()
        elif os.path.exists(_path(unit, ".enabled")):
            os.unlink(_path(unit, ".enabled"))
        return 0
    if verb == "_run":
        return supervise(unit)
    sys.stderr.write("fake systemctl: unknown verb %s\n" % verb)
    return 2


def journalctl(argv):
    unit = lines = None
    for word in argv:
        if word.startswith("--unit="):
            unit = word.split("=", 1)[1]
        elif word.startswith("--lines="):
            lines = int(word.split("=", 1)[1])
    text = _read(_path(unit, ".log"), "") if unit else ""
    out = [line for line in text.splitlines() if line.strip()]
    print("\n".join(out[-lines:] if lines else out))
    return 0


def install(bindir, state_dir):
    """Write systemctl and journalctl wrappers into BINDIR; return the environment to run under."""
    os.makedirs(bindir, exist_ok=True)
    os.makedirs(state_dir, exist_ok=True)
    STATE_DIRS.add(os.path.abspath(state_dir))
    for name in ("systemctl", "journalctl"):
        path = os.path.join(bindir, name)
        with open(path, "w") as f:
            f.write("#!%s\nimport sys\nsys.path.insert(0, %r)\nimport fakesystemd\n"
                    "sys.exit(fakesystemd.%s(sys.argv[1:]))\n" % (
                        sys.executable, os.path.dirname(os.path.abspath(__file__)), name))
        os.chmod(path, 0o755)
    return {"FAKE_SYSTEMD_DIR": state_dir, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}


def write_unit(state_dir, unit, argv, env=None, fragment=None):
    """The unit UNIT runs ARGV with ENV; FRAGMENT: the path of its unit file (FragmentPath) when the test wrote one."""
    with open(os.path.join(state_dir, unit + ".json"), "w") as f:
        json.dump({"argv": list(argv), "env": dict(env or {})}, f)
    if fragment:
        with open(os.path.join(state_dir, unit + ".fragment"), "w") as f:
            f.write(fragment)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_run":
        sys.exit(supervise(sys.argv[2]))
    sys.exit(systemctl(sys.argv[1:]))
