# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = """
    author: gpufleet.vllm developers (@gpufleet)
    name: podman
    short_description: The podman connection, with pipelining (simulated fleet only)
    description:
        - Like C(containers.podman.podman), whose code it uses (files go through the container's mounted root), but
          commands get their standard input, so pipelining works and a task costs one command in the container
          instead of five.
        - Commands run through C(nsenter) into the container's namespaces, with the container's own environment,
          when the controller runs as root and has C(nsenter) (about a tenth of the CPU of a C(podman exec), which
          starts conmon and runc each time); else through C(podman exec --interactive).
        - For the simulated GPU hosts of gpufleet.vllm's tests and demo, which share the controller's CPUs.
    options:
      remote_addr:
        description:
          - The name or ID of the container.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description:
          - The user that runs commands inside the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description:
          - Extra arguments to pass to the podman command line.
        default: ''
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description:
          - Executable for podman command.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
      use_nsenter:
        description:
          - Run commands through C(nsenter) when possible (see above); V(false) always uses C(podman exec).
        type: boolean
        default: true
        vars:
          - name: ansible_podman_use_nsenter
        env:
          - name: GPUFLEET_SIM_USE_NSENTER
      pipelining:
        description:
          - Send modules on standard input instead of copying them into the container first.
        type: boolean
        default: true
        vars:
          - name: ansible_pipelining
        env:
          - name: ANSIBLE_PIPELINING
"""

import json
import os
import shlex
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect

from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection


class Connection(PodmanConnection):
    """containers.podman.podman with ``podman exec --interactive`` for input, hence pipelining."""

    transport = "gpufleet_sim.hosts.podman"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super(Connection, self).__init__(*args, **kwargs)
        self._nsenter = None  # (nsenter path, container PID, container environment) once connected

    def _connect(self):
        connected = self._connected
        super(Connection, self)._connect()
        if connected or self.user or not self.get_option("use_nsenter") or os.geteuid() != 0:
            return
        nsenter = shutil.which("nsenter")
        if not nsenter:
            return
        rc, out, dummy = self._podman("inspect", ["--format", "{{.State.Pid}} {{json .Config.Env}}"])
        if rc != 0:
            return
        pid, dummy, env = to_native(out).strip().partition(" ")
        try:
            self._nsenter = (nsenter, int(pid), json.loads(env) or [])
        except ValueError:
            self._nsenter = None
        if self._nsenter and self._nsenter[1] <= 0:
            # as SSH to a powered-off host: unreachable, not a module that printed nothing
            raise AnsibleConnectionFailure("container %s is not running (podman start %s)" % (
                self._container_id, self._container_id))

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        if self._nsenter is None:
            words = ["exec"]
            if in_data is not None:
                words.append("--interactive")
            if self.user:
                words.extend(("--user", self.user))
            return self._podman(words, args, in_data)
        nsenter, pid, env = self._nsenter
        command = [nsenter, "--target", str(pid), "--all", "env", "-i"] + env + args
        try:
            proc = subprocess.Popen([to_bytes(word, errors="surrogate_or_strict") for word in command],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise AnsibleError("cannot run nsenter for container %s: %s" % (self._container_id, exc))
        stdout, stderr = proc.communicate(input=in_data)
        return proc.returncode, stdout, stderr
