#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Take a server of a HAProxy backend out of rotation or put it back, through HAProxy's runtime API
version_added: 0.1.0
description:
  - Talks to HAProxy's runtime API over its UNIX socket (C(stats socket PATH level admin) in HAProxy's config), one
    command per connection, bounded in time (O(request_timeout)) and in the size of the answer; no shell, no socat.
  - With O(state=query), reads the servers of O(backend) (C(show stat) and C(show servers state)) and changes nothing.
  - With O(state=ready), O(state=drain) or O(state=maint), sets the admin state of O(server)
    (C(set server BACKEND/SERVER state X)) when it differs. V(drain) takes no new requests but lets the ones in
    flight end; V(maint) takes none at all (for the stop); V(ready) puts it back in rotation.
  - With O(wait=true), waits after the change, reading every O(interval) seconds at most O(timeout) seconds. With
    V(ready), until HAProxy's own health check sees the server up (status exactly C(UP), see RV(servers)); with
    V(drain) or V(maint), until the server has no session left (C(scur) 0). At O(timeout), O(on_timeout) says
    whether the task fails or goes on with a warning.
  - With O(state=maint) and O(drain=true), drains first, as M(community.general.haproxy)'s C(drain) does. It sets
    V(drain) (unless the server is in V(drain) or V(maint) already), waits with O(wait=true) until the server has no
    session left (O(timeout), O(interval), O(on_timeout)), then sets V(maint); one task for a server's whole way out
    of rotation.
  - "Backend and server names are checked before they reach a command line of the API (HAProxy identifiers, 1 to 64
    of C(A-Z a-z 0-9 _ . : -))."
  - A socket that is missing, not a socket, not allowed or refused, a socket without C(level admin), an unknown
    backend (the task names the backends HAProxy has) or server (it names the backend's servers) fail the task
    before anything is written.
options:
  socket:
    description: The absolute path of HAProxy's runtime API socket, its C(stats socket) line with C(level admin).
    type: path
    required: true
  backend:
    description: The backend (C(backend NAME) in HAProxy's config).
    type: str
    required: true
  server:
    description:
      - The server in O(backend) (C(server NAME ADDRESS) in HAProxy's config). Required unless O(state=query);
        with V(query), RV(server) is this server when given.
    type: str
  state:
    description:
      - V(query) reads only. V(ready), V(drain) and V(maint) are HAProxy's admin states of a server.
    type: str
    choices: [query, ready, drain, maint]
    default: query
  drain:
    description:
      - With O(state=maint), set V(drain) first and wait (with O(wait=true)) until the server has no session left,
        then set V(maint). At O(timeout) with O(on_timeout=continue) the server goes to V(maint) all the same (with a
        warning, RV(timed_out=true)); with O(on_timeout=fail) it stays in V(drain) and the task fails.
      - Only with O(state=maint).
    type: bool
    default: false
  wait:
    description:
      - With O(state=ready), wait until the server's status is exactly C(UP), its full health (or C(no check) for a
        server without health check). HAProxy puts a server that leaves V(maint) or V(drain) back in rotation at
        once, before any check, as C(UP 1/2) (with C(rise 2 fall 2); one failed check takes it down); that does not
        end the wait, a passed check does. A server that was C(DOWN) shows C(DOWN 1/2) until C(rise) checks passed.
      - With O(state=drain) or O(state=maint), wait until the server's current sessions (C(scur)) are 0 (with
        O(drain=true), between the drain and the maint).
      - Ignored with O(state=query).
    type: bool
    default: false
  timeout:
    description: The most seconds to wait with O(wait=true), from 0 (read once) to 3600.
    type: int
    default: 60
  interval:
    description: Seconds between two reads while waiting, from 0.1 to 60.
    type: float
    default: 1.0
  on_timeout:
    description:
      - What to do when O(timeout) passes before the wait is over.
      - V(fail) fails the task, naming the server's status and sessions at the last read.
      - V(continue) returns RV(timed_out=true) with a warning.
    type: str
    choices: [fail, continue]
    default: fail
  request_timeout:
    description: Seconds one exchange with the API may take in all (connect, command, answer), from 0.1 to 300.
    type: float
    default: 5.0
extends_documentation_fragment:
  - gpufleet.vllm.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the servers and reports what would change; sends no command that writes. It waits (reading only) when
        nothing would change, and not when a change would be made, since nothing would happen to wait for.
  diff_mode:
    support: full
    details: The server's admin state before and after.
notes:
  - Run it where the socket is, usually the balancer's host (C(delegate_to)), as a user who may open the socket.
  - A server is RV(servers[].serving) when its admin state is V(ready) and its status C(UP), C(UP n/m) (HAProxy
    sends it requests) or C(no check); C(DRAIN), C(MAINT), C(NOLB), C(DOWN) and C(DOWN n/m) serve no new requests.
  - O(state=ready) puts the server in rotation at once, before HAProxy checked it; prove the server (readiness)
    before, and let O(wait=true) confirm HAProxy's own check after.
  - The socket is opened anew for each command; HAProxy closes it after its answer.
requirements:
  - HAProxy 1.8 or newer with C(stats socket PATH level admin) (tested with 2.6).
seealso:
  - module: gpufleet.vllm.vllm_metrics_info
  - module: community.general.haproxy
  - name: HAProxy management guide, the runtime API
    description: The commands this module sends.
    link: https://docs.haproxy.org/2.6/management.html#9.3
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: The servers of the backend
  gpufleet.vllm.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: vllm
  delegate_to: lb1
  register: lb

- name: Drain this host and wait until its requests ended
  gpufleet.vllm.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: vllm
    server: "{{ inventory_hostname }}"
    state: drain
    wait: true
    timeout: 600
  delegate_to: lb1

- name: Out of rotation for the stop
  gpufleet.vllm.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: vllm
    server: "{{ inventory_hostname }}"
    state: maint
  delegate_to: lb1

- name: Drain, wait until no session is left (at most 10 minutes), then maint for the stop
  gpufleet.vllm.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: vllm
    server: "{{ inventory_hostname }}"
    state: maint
    drain: true
    wait: true
    timeout: 600
    on_timeout: continue
  delegate_to: lb1

- name: Back in rotation once HAProxy's health check sees it up
  gpufleet.vllm.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: vllm
    server: "{{ inventory_hostname }}"
    state: ready
    wait: true
    timeout: 120
  delegate_to: lb1
"""

RETURN = r"""
changed:
  description: Whether the server's admin state was (in check mode, would be) changed.
  returned: always
  type: bool
  sample: true
check_mode:
  description: Whether the module ran in check mode.
  returned: always
  type: bool
  sample: false
msg:
  description: One sentence that says what was done (or, on a failure, what went wrong and what to check).
  returned: always
  type: str
  sample: "vllm/rollout-2: drain (was ready); 0 session(s) after 3.2 s; 2 of 3 server(s) serving."
error_kind:
  description:
    - On a failure, what failed. C(missing), C(not_socket), C(permission), C(refused), C(timeout), C(connect),
      C(too_large), C(not_admin), C(unknown_command), C(unknown_backend), C(unknown_server), C(answer), C(invalid),
      C(options), C(wait_timeout).
  returned: failure
  type: str
  sample: unknown_server
servers:
  description: The servers of the backend, after the change (and the wait), in the order of HAProxy's config.
  returned: success, and on a wait timeout
  type: list
  elements: dict
  contains:
    name:
      description: The server's name.
      type: str
    address:
      description: Its address.
      type: str
    port:
      description: Its port (0 when HAProxy does not report one).
      type: int
    admin:
      description: The admin state, V(ready), V(drain) or V(maint) (from C(show servers state)'s C(srv_admin_state)).
      type: str
    status:
      description:
        - C(show stat)'s status, as HAProxy writes it; C(UP), C(DOWN), C(MAINT), C(DRAIN), C(NOLB), C(no check),
          C(UP 1/2) (up without full health; a check failed, or none passed since it left V(maint)), C(DOWN 1/2)
          (down, going up after C(rise) good checks).
      type: str
    check:
      description: The last health check's C(check_status) (C(L7OK), C(L4CON), C(L7STS), ...); empty without check.
      type: str
    check_desc:
      description: HAProxy's words for it.
      type: str
    sessions:
      description: The server's current sessions (C(scur)).
      type: int
    backup:
      description: Whether it is a backup server.
      type: bool
    up:
      description: Whether HAProxy's health check sees it up (C(UP), C(UP n/m), C(DRAIN), C(NOLB) or C(no check)).
      type: bool
    serving:
      description: Whether it takes new requests now (admin V(ready) and status C(UP), C(UP n/m) or C(no check)).
      type: bool
  sample: [{"name": "rollout-1", "address": "10.88.0.5", "port": 8000, "admin": "ready", "status": "UP",
            "check": "L7OK", "check_desc": "Layer7 check passed", "sessions": 2, "backup": false, "up": true,
            "serving": true}]
serving:
  description: How many servers of the backend serve now (RV(servers[].serving)).
  returned: success, and on a wait timeout
  type: int
  sample: 2
server:
  description:
    - O(server) as in RV(servers), after the change and the wait; empty when O(server) is not given.
    - In check mode, as it would be (C(admin) and C(serving); C(status) as it is now).
  returned: success, and on a wait timeout
  type: dict
  sample: {"name": "rollout-2", "admin": "drain", "status": "DRAIN", "sessions": 0, "serving": false}
previous:
  description: O(server) as in RV(servers), before the change; empty when O(server) is not given.
  returned: success, and on a wait timeout
  type: dict
  sample: {"name": "rollout-2", "admin": "ready", "status": "UP", "sessions": 3, "serving": true}
drained:
  description:
    - With O(drain=true), the drain before the maint. C(set) (whether V(drain) was set), C(sessions) (the server's
      sessions when the wait ended), C(waited) and C(timed_out).
  returned: with O(drain=true), on success and on a wait timeout
  type: dict
  sample: {"set": true, "sessions": 0, "waited": 3.2, "timed_out": false}
waited:
  description: Seconds waited (0 without O(wait)).
  returned: success, and on a wait timeout
  type: float
  sample: 3.2
timed_out:
  description: Whether O(timeout) passed before the wait was over.
  returned: success, and on a wait timeout
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vllm.plugins.module_utils.haproxy import (
    MAX_WAIT,
    HaproxyError,
    backend_servers,
    find,
    name_problem,
    no_sessions,
    predicted,
    set_admin,
    settled_up,
    wait_for,
)


def _problems(params):
    problems = []
    if not params["socket"].startswith("/"):
        problems.append("socket must be an absolute path; got %r" % params["socket"])
    problem = name_problem(params["backend"], "backend")
    if problem:
        problems.append(problem)
    if params["server"] is not None:
        problem = name_problem(params["server"], "server")
        if problem:
            problems.append(problem)
    elif params["state"] != "query":
        problems.append("state=%s needs a server" % params["state"])
    if params["drain"] and params["state"] != "maint":
        problems.append("drain=true goes with state=maint (the drain before it), not state=%s" % params["state"])
    if not 0 <= params["timeout"] <= MAX_WAIT:
        problems.append("timeout must be 0 to %d seconds; got %d" % (MAX_WAIT, params["timeout"]))
    if not 0.1 <= params["interval"] <= 60:
        problems.append("interval must be 0.1 to 60 seconds; got %s" % params["interval"])
    if not 0.1 <= params["request_timeout"] <= 300:
        problems.append("request_timeout must be 0.1 to 300 seconds; got %s" % params["request_timeout"])
    return problems


def _drain_first(module, read, path, backend, name, rtimeout, already=False):
    """drain=true: drain (unless ALREADY), then wait (with wait=true, not in check mode) until no session is left."""
    params = module.params
    if not already and not module.check_mode:
        set_admin(path, backend, name, "drain", rtimeout)
    waited, timed_out, sessions, servers, server = 0.0, False, None, None, None
    if params["wait"] and not module.check_mode:
        servers, server, waited, timed_out = wait_for(read, no_sessions, params["timeout"], params["interval"])
        sessions = server["sessions"]
    elif not module.check_mode:
        module.warn("drain=true without wait=true sets drain and maint one right after the other: the requests in "
                    "flight are not waited for.")
    return {"set": not already and not module.check_mode, "sessions": sessions, "waited": waited,
            "timed_out": timed_out, "already": already, "servers": servers, "server": server}


def _drain_timed_out(module, drained, previous, backend, name, base):
    """on_timeout=fail: the server stays in drain, the task fails saying so."""
    servers = drained["servers"] or []
    module.fail_json(
        msg="%s/%s: %s, but after %s s it still had %s session(s) (timeout %d s); it stays in drain, not set to "
            "maint (on_timeout=fail)." % (backend, name, "in drain already" if drained["already"] else "drained",
                                          drained["waited"], drained["sessions"], module.params["timeout"]),
        error_kind="wait_timeout", changed=drained["set"], waited=drained["waited"], timed_out=True,
        drained=_drained_result(drained), servers=servers, serving=sum(1 for s in servers if s["serving"]),
        server=drained["server"] or {}, previous=previous, **base)


def _drained_result(drained):
    return dict((key, drained[key]) for key in ("set", "sessions", "waited", "timed_out"))


def _drain_phrase(module, drained, params, did):
    if module.check_mode:
        return "would be %s, then set to maint (check mode, nothing sent)" % (
            "kept in drain" if drained["already"] else "drained")
    first = "in drain already" if drained["already"] else "drained"
    if not params["wait"]:
        return "%s, then %s" % (first, did)
    return "%s, %s session(s) after %s s%s, then %s" % (
        first, drained["sessions"], drained["waited"], " (timed out)" if drained["timed_out"] else "", did)


def _serving_phrase(servers):
    return "%d of %d server(s) serving" % (sum(1 for s in servers if s["serving"]), len(servers))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", required=True),
            backend=dict(type="str", required=True),
            server=dict(type="str"),
            state=dict(type="str", choices=["query", "ready", "drain", "maint"], default="query"),
            drain=dict(type="bool", default=False),
            wait=dict(type="bool", default=False),
            timeout=dict(type="int", default=60),
            interval=dict(type="float", default=1.0),
            on_timeout=dict(type="str", choices=["fail", "continue"], default="fail"),
            request_timeout=dict(type="float", default=5.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    base = {}
    base["check_mode"] = module.check_mode
    problems = _problems(params)
    if problems:
        module.fail_json(msg="Invalid options for gpufleet.vllm.haproxy_server: %s. Nothing was sent to HAProxy."
                         % "; ".join(problems), error_kind="options", changed=False, **base)
    path, backend, name, state = params["socket"], params["backend"], params["server"], params["state"]
    rtimeout = params["request_timeout"]

    def read():
        servers = backend_servers(path, backend, rtimeout)
        return servers, (find(servers, backend, name, path) if name is not None else {})

    sent = None
    drained = None
    try:
        servers, previous = read()
        changed = state != "query" and previous["admin"] != state
        if params["drain"] and previous["admin"] == "ready":
            drained = _drain_first(module, read, path, backend, name, rtimeout)
            sent = "drain" if drained["set"] else None
            if drained["timed_out"] and params["on_timeout"] == "fail":
                _drain_timed_out(module, drained, previous, backend, name, base)
        elif params["drain"] and previous["admin"] == "drain":
            drained = _drain_first(module, read, path, backend, name, rtimeout, already=True)
            if drained["timed_out"] and params["on_timeout"] == "fail":
                _drain_timed_out(module, drained, previous, backend, name, base)
        if changed and not module.check_mode:
            set_admin(path, backend, name, state, rtimeout)
            sent = state
            servers, current = read()
        else:
            current = predicted(previous, state) if changed else previous
        waited, timed_out = 0.0, False
        do_wait = params["wait"] and state != "query" and not (changed and module.check_mode) and drained is None
        if do_wait:
            done = settled_up if state == "ready" else no_sessions
            servers, current, waited, timed_out = wait_for(read, done, params["timeout"], params["interval"])
        if drained is not None:
            waited, timed_out = drained["waited"], drained["timed_out"]
    except HaproxyError as exc:
        # (a failure after the set: the server's state did change, and the operator must know it)
        msg = str(exc) if not sent else "%s; %s/%s was set to %s before that" % (exc, backend, name, sent)
        module.fail_json(msg=msg, error_kind=exc.kind, changed=bool(sent), **base)

    result = dict(check_mode=base["check_mode"], changed=changed, servers=servers,
                  serving=sum(1 for s in servers if s["serving"]), server=current, previous=previous, waited=waited,
                  timed_out=timed_out)
    if params["drain"]:
        nothing = {"set": False, "sessions": None, "waited": 0.0, "timed_out": False}
        result["drained"] = _drained_result(drained) if drained else nothing
    if name is not None and state != "query":
        result["diff"] = {"before": {"admin": previous["admin"]}, "after": {"admin": state},
                          "before_header": "%s/%s" % (backend, name), "after_header": "%s/%s" % (backend, name)}
    where = "%s/%s" % (backend, name) if name is not None else "backend %s" % backend
    if state == "query":
        result["msg"] = "%s: %s." % (where, _serving_phrase(servers)) if name is None else \
            "%s: admin %s, status %s, %d session(s); %s." % (where, current["admin"], current["status"],
                                                             current["sessions"], _serving_phrase(servers))
        module.exit_json(**result)
    did = ("%s (was %s)" % (state, previous["admin"]) if changed else "%s already" % state)
    if module.check_mode and changed:
        did = "would be set to %s (is %s; check mode, nothing sent)" % (state, previous["admin"])
    if drained is not None:
        did = _drain_phrase(module, drained, params, did)
        if drained["timed_out"]:
            module.warn("%s/%s still had %s session(s) after %s s of drain (timeout %d s); set to maint all the same "
                        "(on_timeout=continue)." % (backend, name, drained["sessions"], drained["waited"],
                                                    params["timeout"]))
        result["msg"] = "%s: %s; status %s, %d session(s); %s." % (where, did, current["status"], current["sessions"],
                                                                   _serving_phrase(servers))
        module.exit_json(**result)
    if do_wait:
        goal = "status UP" if state == "ready" else "0 session(s)"
        if timed_out:
            message = ("%s: %s, but after %s s of waiting for %s it is %s with %d session(s) (timeout %d s); %s."
                       % (where, did, waited, goal, current["status"], current["sessions"], params["timeout"],
                          _serving_phrase(servers)))
            if params["on_timeout"] == "fail":
                result.update(msg=message, error_kind="wait_timeout")
                module.fail_json(**result)
            module.warn(message + " Going on anyway (on_timeout=continue).")
            result["msg"] = message
            module.exit_json(**result)
        did += "; %s after %s s" % (goal, waited)
    result["msg"] = "%s: %s; status %s, %d session(s); %s." % (where, did, current["status"], current["sessions"],
                                                               _serving_phrase(servers))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
