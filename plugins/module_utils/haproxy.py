# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""HAProxy's runtime API over its UNIX socket (``stats socket ... level admin``).

One command per connection, as HAProxy's non-interactive mode answers it: the
command and a newline are sent, the answer is read until HAProxy closes the
connection, bounded in time (``request_timeout`` for the whole exchange) and
in bytes (``max_bytes``).  No shell and no socat: the standard library's
``socket`` only.  Every name reaching a command line is checked first
(:func:`name_problem`): HAProxy identifiers only, so that no space, ``;``
(HAProxy's command separator) or newline can add a command.

What a server's state means here:

* ``admin`` -- the operator's state, from ``show servers state``'s
  ``srv_admin_state`` bits: ``maint`` (forced, inherited, from the
  configuration, from DNS resolution or from a hostname that did not
  resolve), else ``drain`` (forced or inherited), else ``ready``.
* ``status`` -- ``show stat``'s status string as HAProxy writes it: ``UP``,
  ``DOWN``, ``MAINT``, ``DRAIN``, ``NOLB``, ``no check``, and the
  transitions ``UP n/m`` (up, but with less than full health: a check failed,
  or none passed yet -- a server leaving maint is put back up at once,
  unchecked, as ``UP 1/2`` with ``rise 2 fall 2``, and one failed check takes
  it down) and ``DOWN n/m`` (down, checks passing: up after ``rise`` of them).
* ``up`` -- the health check sees the server up: the status is ``UP`` or an
  ``UP n/m`` transition, or ``DRAIN``/``NOLB`` (up, but taking no new
  traffic), or ``no check`` (a server without health check is up for
  HAProxy).
* ``serving`` -- it takes new requests now: admin ``ready`` and a status
  ``UP``, ``UP n/m`` (HAProxy sends it requests) or ``no check``.
* the wait of ``state=ready`` ends on ``settled_up``: admin ``ready`` and a
  status exactly ``UP`` (full health: a check passed since it came back and
  none failed since), or ``no check`` (nothing to wait for).

Public API (used by the ``haproxy_server`` module): :func:`name_problem`,
:func:`command`, :func:`backend_servers`, :func:`set_admin`,
:func:`wait_for`, :class:`HaproxyError` (``kind`` says what failed).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import csv
import errno
import os
import re
import socket
import stat
import time

from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}\Z")
# the most bytes of one answer (a `show stat` of some hundred servers is some hundred KiB)
DEFAULT_MAX_BYTES = 4 << 20
ADMIN_STATES = ("ready", "drain", "maint")
MAX_WAIT = 3600

# srv_admin_state bits (HAProxy's SRV_ADMF_*)
_MAINT_BITS = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
_DRAIN_BITS = 0x08 | 0x10


class HaproxyError(Exception):
    """A failed exchange with HAProxy; ``kind`` names the cause, for tests and roles.

    Kinds: ``missing``, ``not_socket``, ``permission``, ``refused``, ``timeout``, ``connect`` (another socket
    fault), ``too_large``, ``not_admin`` (the API refused a command: a socket without ``level admin``),
    ``unknown_command``, ``unknown_backend``, ``unknown_server``, ``answer`` (an answer that cannot be read),
    ``invalid`` (a name refused before it was sent).
    """

    def __init__(self, msg, kind):
        super(HaproxyError, self).__init__(msg)
        self.kind = kind


def name_problem(value, what):
    """None when value is a HAProxy identifier (backend or server name), else the sentence why not."""
    if not isinstance(value, str) or not NAME.match(value):
        return ("%s %r is not a HAProxy name: 1 to 64 of the characters A-Z a-z 0-9 _ . : - (no space, ';' or line "
                "break)" % (what, valid_text(str(value))[:80]))
    return None


def _check_socket(path):
    hint = "is HAProxy running, and does its config have `stats socket %s level admin`?" % path
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise HaproxyError("no HAProxy runtime API socket at %s: %s" % (path, hint), "missing")
    except PermissionError:
        raise HaproxyError("permission denied on the way to the HAProxy runtime API socket %s: run the task as a user "
                           "who may open it (become, or the socket's `mode`/`user`/`group` in HAProxy's config)"
                           % path, "permission")
    except OSError as exc:
        raise HaproxyError("cannot look at the HAProxy runtime API socket %s: %s" % (path, exc.strerror), "connect")
    if not stat.S_ISSOCK(info.st_mode):
        raise HaproxyError("%s is not a socket, so it is no HAProxy runtime API socket (%s)" % (
            path, "a directory" if stat.S_ISDIR(info.st_mode) else "a file or another kind of entry")
            + ": check the path against `stats socket` in HAProxy's config", "not_socket")


def command(path, line, timeout=5.0, max_bytes=DEFAULT_MAX_BYTES):
    """Send one command line, return HAProxy's answer (text), bounded in time (in all) and bytes."""
    if "\n" in line or "\r" in line or ";" in line:
        raise HaproxyError("refused to send a command with a line break or ';': %r" % valid_text(line)[:120],
                           "invalid")
    _check_socket(path)
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except PermissionError:
            raise HaproxyError("permission denied opening the HAProxy runtime API socket %s: run the task as a user "
                               "who may open it (become, or the socket's `mode`/`user`/`group` in HAProxy's config)"
                               % path, "permission")
        except ConnectionRefusedError:
            raise HaproxyError("connection refused at the HAProxy runtime API socket %s: nothing listens there (a "
                               "socket left by a HAProxy that stopped?); is HAProxy running?" % path, "refused")
        except socket.timeout:
            raise HaproxyError("the HAProxy runtime API socket %s did not accept a connection within %s s" % (
                path, timeout), "timeout")
        except OSError as exc:
            raise HaproxyError("cannot connect to the HAProxy runtime API socket %s: %s" % (
                path, exc.strerror or exc), "connect")
        chunks = []
        size = 0
        try:
            sock.sendall(line.encode("ascii") + b"\n")
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                sock.settimeout(left)
                data = sock.recv(65536)
                if not data:
                    break
                size += len(data)
                if size > max_bytes:
                    raise HaproxyError("HAProxy's answer to `%s` at %s is larger than %d bytes; refused" % (
                        line, path, max_bytes), "too_large")
                chunks.append(data)
        except socket.timeout:
            raise HaproxyError("HAProxy at %s did not answer `%s` within %s s" % (path, line, timeout), "timeout")
        except OSError as exc:
            if exc.errno in (errno.ECONNRESET, errno.EPIPE):
                raise HaproxyError("HAProxy at %s closed the connection during `%s`" % (path, line), "connect")
            raise HaproxyError("reading HAProxy's answer to `%s` at %s failed: %s" % (
                line, path, exc.strerror or exc), "connect")
    finally:
        sock.close()
    answer = valid_text(b"".join(chunks))
    first = answer.strip().splitlines()[0] if answer.strip() else ""
    if first.startswith("Permission denied"):
        raise HaproxyError("HAProxy at %s refused `%s` (Permission denied): its `stats socket` line needs "
                           "`level admin`" % (path, " ".join(line.split()[:2])), "not_admin")
    if first.startswith("Unknown command"):
        raise HaproxyError("HAProxy at %s does not know `%s` (Unknown command): a socket without `level admin`, or a "
                           "HAProxy older than 1.8?" % (path, line), "unknown_command")
    return answer


def _stat_rows(path, timeout, max_bytes):
    answer = command(path, "show stat", timeout, max_bytes)
    lines = answer.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise HaproxyError("HAProxy at %s answered `show stat` with something that is not its CSV: %r" % (
            path, answer[:120]), "answer")
    header = lines[0][2:].split(",")
    for needed in ("pxname", "svname"):
        if needed not in header:
            raise HaproxyError("HAProxy at %s answered `show stat` with a header without %s: %r" % (
                path, needed, lines[0][:120]), "answer")
    least = max(header.index("pxname"), header.index("svname")) + 1
    rows = []
    try:
        for number, row in enumerate(csv.reader([ln for ln in lines[1:] if ln.strip()]), 2):
            if len(row) < least:
                raise HaproxyError("HAProxy at %s answered `show stat` with line %d of %d fields, too few to hold "
                                   "pxname and svname: %r" % (path, number, len(row), ",".join(row)[:120]), "answer")
            rows.append(dict(zip(header, row)))
    except csv.Error as exc:
        raise HaproxyError("HAProxy at %s answered `show stat` with CSV that cannot be read: %s" % (path, exc),
                           "answer")
    return rows


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def admin_of(bits):
    """ready, drain or maint from srv_admin_state's bits."""
    if bits & _MAINT_BITS:
        return "maint"
    if bits & _DRAIN_BITS:
        return "drain"
    return "ready"


def _up(status):
    return status == "UP" or status.startswith("UP ") or status in ("DRAIN", "NOLB", "no check") \
        or status.startswith("DRAIN ")


def _check_result(text):
    return text[2:] if text.startswith("* ") else text


def _serving(admin, status):
    return admin == "ready" and (status == "UP" or status.startswith("UP ") or status == "no check")


def backend_servers(path, backend, timeout=5.0, max_bytes=DEFAULT_MAX_BYTES):
    """The backend's servers as dicts (name, address, port, admin, status, check, sessions, up, serving)."""
    problem = name_problem(backend, "backend")
    if problem:
        raise HaproxyError(problem, "invalid")
    rows = _stat_rows(path, timeout, max_bytes)
    backends = []
    for row in rows:
        if row.get("svname") == "BACKEND" and row.get("pxname") not in backends:
            backends.append(row.get("pxname"))
    if backend not in backends:
        raise HaproxyError("HAProxy at %s has no backend %s; its backends: %s" % (
            path, backend, ", ".join(backends) or "none"), "unknown_backend")
    answer = command(path, "show servers state %s" % backend, timeout, max_bytes)
    if answer.strip().startswith("Can't find backend"):
        raise HaproxyError("HAProxy at %s has no backend %s" % (path, backend), "unknown_backend")
    header = None
    states = {}
    for line in answer.splitlines():
        if line.startswith("# "):
            header = line[2:].split()
            continue
        if header is None or not line.strip():
            continue
        fields = dict(zip(header, line.split()))
        if fields.get("be_name") == backend and "srv_name" in fields:
            states[fields["srv_name"]] = fields
    if header is None or "srv_admin_state" not in header:
        raise HaproxyError("HAProxy at %s answered `show servers state %s` without srv_admin_state: %r" % (
            path, backend, answer[:120]), "answer")
    servers = []
    for row in rows:
        if row.get("pxname") != backend or row.get("svname") in ("BACKEND", "FRONTEND"):
            continue
        name = row["svname"]
        state = states.get(name)
        # (a server missing from the answer, or its row cut short, has no admin state to read: not "ready")
        if state is None or "srv_admin_state" not in state:
            raise HaproxyError("HAProxy at %s answered `show servers state %s` %s for server %s" % (
                path, backend, "without a row" if state is None else "with a row that ends before srv_admin_state",
                valid_text(name)[:80]), "answer")
        bits = state["srv_admin_state"]
        if not re.match(r"[0-9]{1,10}\Z", bits):
            raise HaproxyError("HAProxy at %s answered `show servers state %s` with srv_admin_state %r for server "
                               "%s, which is not a number" % (path, backend, valid_text(bits)[:40], name), "answer")
        admin = admin_of(int(bits))
        status = row.get("status", "")
        addr = row.get("addr", "")
        address, _sep, port = addr.rpartition(":") if ":" in addr else (state.get("srv_addr", addr), "", "")
        servers.append({
            "name": name,
            "address": address.strip("[]") or state.get("srv_addr", ""),
            "port": _int(port or state.get("srv_port")),
            "admin": admin,
            "status": status,
            # (HAProxy marks a check in progress with "* " before the last result: the result is what it says)
            "check": _check_result(row.get("check_status", "")),
            "check_desc": row.get("check_desc", ""),
            "sessions": _int(row.get("scur")),
            "backup": row.get("bck") == "1",
            "up": _up(status),
            "serving": _serving(admin, status),
        })
    return servers


def find(servers, backend, server, path):
    for item in servers:
        if item["name"] == server:
            return item
    raise HaproxyError("backend %s of HAProxy at %s has no server %s; its servers: %s" % (
        backend, path, server, ", ".join(s["name"] for s in servers) or "none"), "unknown_server")


def set_admin(path, backend, server, state, timeout=5.0):
    """set server BACKEND/SERVER state STATE; HAProxy's refusals as HaproxyError."""
    for value, what in ((backend, "backend"), (server, "server")):
        problem = name_problem(value, what)
        if problem:
            raise HaproxyError(problem, "invalid")
    if state not in ADMIN_STATES:
        raise HaproxyError("state must be one of %s; got %r" % (", ".join(ADMIN_STATES), state), "invalid")
    answer = command(path, "set server %s/%s state %s" % (backend, server, state), timeout).strip()
    if answer.startswith("No such backend"):
        raise HaproxyError("HAProxy at %s has no backend %s" % (path, backend), "unknown_backend")
    if answer.startswith("No such server"):
        raise HaproxyError("backend %s of HAProxy at %s has no server %s" % (backend, path, server), "unknown_server")
    if answer:
        raise HaproxyError("HAProxy at %s answered `set server %s/%s state %s` with: %s" % (
            path, backend, server, state, answer.splitlines()[0][:200]), "answer")


def predicted(server, state):
    """The server as it would be with admin state (check mode): admin and serving; the status as it is now."""
    return dict(server, admin=state, serving=_serving(state, server["status"]))


def settled_up(server):
    """The end of a wait for ready: admin ready, status exactly UP (or no check)."""
    return server["admin"] == "ready" and server["status"] in ("UP", "no check")


def no_sessions(server):
    return server["sessions"] == 0


def wait_for(read, done, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Call read() (-> (servers, server)) until done(server) or timeout seconds passed.

    Returns (servers, server, waited seconds, timed_out). Bounded: at most timeout / interval + 2 reads.
    """
    start = clock()
    limit = int(timeout / interval) + 2
    for _count in range(limit):
        servers, server = read()
        waited = round(clock() - start, 3)
        if done(server):
            return servers, server, waited, False
        if waited >= timeout:
            return servers, server, waited, True
        sleep(max(0.0, min(interval, timeout - waited)))
    servers, server = read()
    return servers, server, round(clock() - start, 3), not done(server)
