# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers shared by the unit tests (imported as ``helpers``; conftest.py
puts this directory on sys.path)."""

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from ansible.module_utils.testing import patch_module_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_source(name, *relpath):
    """Import a repository file that is not a package module (test tools)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, *relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_runner(main, capsys):
    """run(args, check=False, diff=False) -> (exit code, result dict) of a module's main()."""
    def _run(args, check=False, diff=False):
        args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exc:
                main()
        return exc.value.code, json.loads(capsys.readouterr().out)
    return _run


# The last play of a playbook built by run_plays: the errors kept by the plays' rescue tasks, as JSON.
_ERRORS_PLAY = """
- name: Write the errors
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Errors
      ansible.builtin.copy:
        content: "{{ errors | default({}) | to_json }}"
        dest: "%s"
        mode: "0600"
"""


def run_plays(plays, out, interpreter_in_inventory=False):
    """Run plays (YAML text of plays on localhost) with the real ansible-playbook and this checkout's collection.

    Plays keep the messages of failures they rescue in a fact ``errors`` (a dict); the returned dict is that
    fact at the end. The playbook fails the test when ansible-playbook itself fails. The Python interpreter is an
    extra variable (it overrides any task's own), or with INTERPRETER_IN_INVENTORY an inventory variable, as an
    operator's inventory sets it (a task's own then wins).
    """
    import subprocess
    import sys
    errors_file = os.path.join(out, "errors.json")
    playbook = os.path.join(out, "play.yml")
    with open(playbook, "w") as handle:
        handle.write("---\n" + plays + _ERRORS_PLAY % errors_file)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    if interpreter_in_inventory:
        inventory = os.path.join(out, "inventory.ini")
        with open(inventory, "w") as handle:
            handle.write("localhost ansible_python_interpreter=%s\n" % sys.executable)
        where = ["-i", inventory]
    else:
        where = ["-i", "localhost,", "-e", "ansible_python_interpreter=" + sys.executable]
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook")] + where
                          + ["-c", "local", playbook],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(errors_file, encoding="utf-8") as handle:
        return json.load(handle)


def nvml_loaded(pid):
    """Whether process PID has the NVML library mapped (it is in nvmlInit or past it)."""
    with open("/proc/%d/maps" % pid) as maps:
        return "libnvidia-ml" in maps.read()


def has_socket(pid):
    """Whether process PID has a socket open (its first request is under way)."""
    fds = "/proc/%d/fd" % pid
    for name in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, name)).startswith("socket:"):
                return True
        except OSError:
            pass
    return False


class WhenProcess(threading.Thread):
    """Call ACTION once READY(pid) is true for the process PID, AFTER seconds later: whatever time the process took
    to start on a loaded machine. Never when PID ends first or after LIMIT seconds. ``error`` keeps what ACTION
    raised (check() raises it in the test)."""

    def __init__(self, pid, ready, action, after=1.0, limit=60.0):
        super(WhenProcess, self).__init__(daemon=True)
        self.pid, self.ready, self.action, self.after, self.limit = pid, ready, action, after, limit
        self.error = None
        self.acted = False

    def run(self):
        deadline = time.monotonic() + self.limit
        while time.monotonic() < deadline:
            try:
                ready = self.ready(self.pid)
            except OSError:
                return
            if ready:
                time.sleep(self.after)
                try:
                    self.action()
                    self.acted = True
                except Exception as exc:  # pylint: disable=broad-except
                    self.error = exc
                return
            time.sleep(0.02)

    def check(self):
        self.join(5)
        if self.error is not None:
            raise self.error


def run_module_file(module, args_file, env, when=None, ready=nvml_loaded, after=1.0, timeout=120):
    """Run the module file MODULE with ARGS_FILE in ENV as Ansible does; WHEN: a function called AFTER seconds once
    READY(pid) holds for the module's process. Returns (exit code, result dict); a traceback fails the test."""
    proc = subprocess.Popen([sys.executable, module, args_file], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    watcher = None
    if when is not None:
        watcher = WhenProcess(proc.pid, ready, when, after)
        watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if watcher is not None:
        watcher.check()
    assert "Traceback" not in stdout + stderr, stdout + stderr
    return proc.returncode, json.loads(stdout)


def run_nvml_module(module, args, state_file, lib_dir, check_mode=False, pythonpath_extra=None, when_nvml_loaded=None,
                    after=1.0):
    """Run the module file MODULE as Ansible does, against the fake NVML (LIB_DIR, STATE_FILE).

    WHEN_NVML_LOADED: a function called AFTER seconds once the module has loaded the NVML library, to change the
    state while it waits (whatever time the module took to start on a loaded machine). Returns (exit code, result
    dict); a traceback fails the test.
    """
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    directory = os.path.dirname(state_file)
    os.makedirs(directory, exist_ok=True)
    args_file = os.path.join(directory, "args.json")
    with open(args_file, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    paths = ([pythonpath_extra] if pythonpath_extra else []) + [os.path.join(REPO, ".cache", "collections")]
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir, FAKE_NVML_STATE=state_file, PYTHONPATH=os.pathsep.join(paths))
    return run_module_file(module, args_file, env, when=when_nvml_loaded, ready=nvml_loaded, after=after)
