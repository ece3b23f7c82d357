# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The balancer filter: whether a batch leaves enough serving."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.balancer import FilterModule, balancer_capacity


def server(name, admin="ready", status="UP", serving=None):
    if serving is None:
        serving = admin == "ready" and (status == "UP" or status.startswith("UP ") or status == "no check")
    return {"name": name, "admin": admin, "status": status, "serving": serving, "sessions": 0}


SERVERS = [server("rollout-1"), server("rollout-2"), server("rollout-3", admin="maint", status="MAINT")]


def test_registered():
    assert set(FilterModule().filters()) == {"balancer_capacity"}


def test_capacity_refused_with_the_sentence_of_the_brief():
    got = balancer_capacity(SERVERS, ["rollout-2"], 2)
    assert got == {"serving_now": 2, "serving_after": 1, "ok": False,
                   "msg": "taking rollout-2 out would leave 1 server serving (rollout-1), fewer than "
                          "rollout_min_in_service (2); rollout-3 is already out of rotation (maint)"}


def test_capacity_ok():
    got = balancer_capacity([server("a"), server("b"), server("c")], ["b"], 2)
    assert got["ok"] and got["serving_now"] == 3 and got["serving_after"] == 2
    assert got["msg"] == "taking b out leaves 2 servers serving (a, c), at least rollout_min_in_service (2)"


def test_capacity_names_why_a_ready_server_is_out():
    got = balancer_capacity([server("a"), server("b", status="DOWN"), server("c", admin="drain", status="DRAIN")],
                            ["a"], 1)
    assert not got["ok"] and got["serving_after"] == 0
    assert got["msg"] == ("taking a out would leave no server serving, fewer than rollout_min_in_service (1); "
                          "b is already out of rotation (DOWN); c is already out of rotation (drain)")


def test_capacity_leaving_a_server_already_out_costs_nothing():
    got = balancer_capacity(SERVERS, ["rollout-3"], 2)
    assert got["ok"] and got["serving_after"] == 2


def test_capacity_zero_minimum_and_nothing_leaving():
    assert balancer_capacity(SERVERS, [], 0)["ok"]
    assert balancer_capacity(SERVERS, [], 0)["msg"].startswith("taking no server out leaves 2 servers serving")
    assert balancer_capacity(SERVERS, [], "2")["ok"]


@pytest.mark.parametrize("servers,leaving,minimum", [
    ("x", [], 1), ([{"nom": "a"}], [], 1), (SERVERS, "rollout-1", 1), (SERVERS, [], -1), (SERVERS, [], "two"),
    (SERVERS, [], True), (SERVERS, [], None),
])
def test_capacity_refuses_bad_input(servers, leaving, minimum):
    with pytest.raises(AnsibleFilterError):
        balancer_capacity(servers, leaving, minimum)


def test_capacity_does_not_count_a_backup_server():
    # HAProxy sends a backup server requests only once no active server is up (often a "sorry" page): a batch that
    # takes every active server out leaves nothing serving, whatever the backups
    sorry = dict(server("sorry"), backup=True)
    got = balancer_capacity([server("a"), server("b"), sorry], ["a", "b"], 1)
    assert not got["ok"] and got["serving_now"] == 2 and got["serving_after"] == 0
    assert got["msg"] == ("taking a, b out would leave no server serving, fewer than rollout_min_in_service (1); "
                          "sorry is a backup server (not counted)")
    assert balancer_capacity([server("a"), server("b"), sorry], ["a"], 1)["ok"]
