# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout's decision on the load balancer's servers (the list module ``haproxy_server`` returns).

``servers | gpufleet.vllm.balancer_capacity(leaving, min_in_service)``
    Whether taking ``leaving`` out of rotation keeps at least
    ``min_in_service`` servers serving, with the sentence that says so.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError


def _servers(servers, filter_name):
    if not isinstance(servers, (list, tuple)):
        raise AnsibleFilterError("%s needs the list of servers (haproxy_server's servers), got %s"
                                 % (filter_name, type(servers).__name__))
    for item in servers:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise AnsibleFilterError("%s: every server must be a dict with a name, got %r" % (filter_name, item))
    return servers


def _names(names, filter_name, label):
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise AnsibleFilterError("%s: %s must be a list of server names, got %r" % (filter_name, label, names))
    return [str(name) for name in names]


def _plural(count):
    return "%d server%s" % (count, "" if count == 1 else "s")


def _why_out(server):
    if server.get("admin", "ready") != "ready":
        return server["admin"]
    return server.get("status") or "not serving"


def balancer_capacity(servers, leaving, min_in_service):
    """{serving_now, serving_after, ok, msg} for taking the servers named in leaving out of rotation."""
    servers = _servers(servers, "balancer_capacity")
    leaving = _names(leaving, "balancer_capacity", "leaving")
    if isinstance(min_in_service, bool):
        raise AnsibleFilterError("balancer_capacity: min_in_service must be a number, got %r" % min_in_service)
    try:
        minimum = int(min_in_service)
    except (TypeError, ValueError):
        raise AnsibleFilterError("balancer_capacity: min_in_service must be a number, got %r" % (min_in_service,))
    if minimum < 0:
        raise AnsibleFilterError("balancer_capacity: min_in_service must be 0 or more, got %d" % minimum)
    # (a backup server gets requests only once no active server is up: it does not count as serving; a "sorry"
    # server that answers every request with an error page is a backup too)
    serving = [s["name"] for s in servers if s.get("serving") and not s.get("backup")]
    after = [name for name in serving if name not in leaving]
    ok = len(after) >= minimum
    out = ["%s is already out of rotation (%s)" % (s["name"], _why_out(s)) for s in servers if not s.get("serving")]
    out.extend("%s is a backup server (not counted)" % s["name"] for s in servers if s.get("serving") and s.get("backup"))
    what = ", ".join(leaving) if leaving else "no server"
    remaining = "%s serving (%s)" % (_plural(len(after)), ", ".join(after)) if after else "no server serving"
    if ok:
        msg = "taking %s out leaves %s, at least rollout_min_in_service (%d)" % (what, remaining, minimum)
    else:
        msg = "taking %s out would leave %s, fewer than rollout_min_in_service (%d)" % (what, remaining, minimum)
    if out:
        msg += "; " + "; ".join(out)
    return {"serving_now": len(serving), "serving_after": len(after), "ok": ok, "msg": msg}


class FilterModule(object):
    """The rollout's load balancer decision."""

    def filters(self):
        return {"balancer_capacity": balancer_capacity}
