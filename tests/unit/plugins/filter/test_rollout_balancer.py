# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The load balancer's part of the rollout summary, and which failed host goes back in rotation."""

import pytest

from ansible_collections.gpufleet.vllm.plugins.filter.rollout import rollout_line, rollout_rows, rollout_serves_again
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report

from test_rollout_decisions import FORWARD, HOSTVARS

DRAINED = {"type": "haproxy", "taken_out": True, "out_at": 1796500000.0, "drained": True, "drain_seconds": 2.34,
           "inflight_at_stop": 0, "forced": False, "put_back": True, "out_of_rotation_seconds": 31.26}


def facts(host, **extra):
    return dict(HOSTVARS[host], **extra)


def test_a_drained_host_says_its_drain_and_its_time_out_of_rotation():
    row = rollout_rows(["gpu-a01"], {"gpu-a01": facts("gpu-a01", balancer_result=DRAINED)})[0]
    assert (row["balancer"], row["drain_s"], row["inflight_at_stop"], row["out_of_rotation_s"], row["back_in_rotation"]) == (
        "haproxy", 2.34, 0, 31.26, True)
    assert "drained 2.3 s, 0 in flight at the stop, out of rotation 31.3 s" in rollout_line(row)


def test_a_host_left_out_of_rotation_is_named():
    left = dict(DRAINED, put_back=False, out_of_rotation_seconds=None)
    row = rollout_rows(["gpu-a05"], {"gpu-a05": facts("gpu-a05", balancer_result=left)})[0]
    assert row["back_in_rotation"] is False
    assert "NOT back in rotation" in rollout_line(row)
    assert "NOT back in rotation: gpu-a05" in rollout_report.balancer_line([row])


def test_the_table_gets_the_balancer_columns_only_with_a_balancer():
    hostvars = {"gpu-a01": facts("gpu-a01", balancer_result=DRAINED),
                "gpu-a07": facts("gpu-a07", balancer_result=dict(DRAINED, inflight_at_stop=3, forced=True))}
    rows = rollout_rows(list(hostvars), hostvars)
    md = rollout_report.markdown(rows, [["gpu-a01"], ["gpu-a07"]])
    header = [line for line in md.splitlines() if line.startswith("| host")][0]
    assert "| downtime (s) | drain (s) | in flight at stop | out of rotation (s) | dumps removed |" in header
    row_a01 = [line for line in md.splitlines() if line.startswith("| gpu-a01")][0]
    assert "| 2.3 | 0 | 31.3 |" in row_a01
    # every row has as many cells as the header
    assert all(line.count(" | ") == header.count(" | ") for line in md.splitlines() if line.startswith("| gpu-"))
    assert "requests in flight at the stop: gpu-a07 3." in md
    plain = rollout_report.markdown(rollout_rows(["gpu-a01"], HOSTVARS), [["gpu-a01"]])
    assert "drain (s)" not in plain and "Load balancer" not in plain


def test_without_a_balancer_the_summary_says_hosts_were_stopped_in_rotation():
    row = rollout_rows(["gpu-a01"], {"gpu-a01": facts("gpu-a01", balancer_result={"type": "none", "taken_out": False})})[0]
    assert row["drain_s"] is None
    md = rollout_report.markdown([row], [["gpu-a01"]])
    assert "drain (s)" not in md
    assert "No load balancer (balancer_type none): the restarted hosts were stopped while clients" in md


@pytest.mark.parametrize("host, expected", [
    ("gpu-a02", True),    # rolled back: the previous build started, ready
    ("gpu-a05", False),   # the rollback's cutover failed: does not serve
    ("gpu-a06", True),    # failed before any stop: the old build still serves
])
def test_only_a_host_that_serves_again_goes_back(host, expected):
    assert rollout_serves_again(HOSTVARS[host]) is expected


def test_a_host_whose_rollback_never_reached_its_cutover_does_not_go_back():
    stuck = {"rollout_failed": True, "rollout_reached": {"stopped": True, "link_moved": True},
             "rollout_cutover": FORWARD, "service_result": FORWARD}
    assert rollout_serves_again(stuck) is False


def test_a_host_whose_take_out_failed_midway_and_stayed_out_is_named_in_the_summary():
    # the take-out's request failed after the balancer took the host out (no drain time), the put-back failed too
    midway = {"type": "haproxy", "taken_out": True, "out_at": 1796500000.0}
    row = rollout_rows(["gpu-a05"], {"gpu-a05": facts("gpu-a05", balancer_result=midway)})[0]
    assert row["drain_s"] is None and row["back_in_rotation"] is False
    assert "NOT back in rotation: gpu-a05" in rollout_report.balancer_line([row])


def test_a_host_the_operator_had_taken_out_says_so_and_is_not_called_left_out():
    before = {"type": "haproxy", "taken_out": False, "was_out": True}
    row = rollout_rows(["gpu-a01"], {"gpu-a01": facts("gpu-a01", balancer_result=before)})[0]
    assert row["was_out"] is True and row["back_in_rotation"] is None and row["drain_s"] is None
    assert "out of rotation before the rollout (left in maintenance)" in rollout_line(row)
    assert "NOT back in rotation" not in rollout_report.balancer_line([row])
