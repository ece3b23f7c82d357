# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout playbook's filters (playbooks/rollout.yml): a host's line of the summary, what the rollout does with a
host (rollout_host_plan), and the steps the playbook's own YAML decides with. The logic is module_utils/rollout.py's
and module_utils/report/rollout.py's; each filter is documented in the .yml of its name."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils import rollout
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import quality as quality_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report.rollout import host_line


def rollout_line(row):
    """One line of the rollout summary for one host (see rollout_line.yml)."""
    if not isinstance(row, dict):
        raise AnsibleFilterError("rollout_line expects a summary row (a dict), got %s" % type(row).__name__)
    return host_line(row)


# --- the rollout playbook's decisions: the logic is module_utils/rollout.py's --------------------------------------


def _call(name, function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except ValueError as e:
        raise AnsibleFilterError("%s: %s" % (name, e))


def rollout_host_plan(plan, target_version=None, unit_changed=False, unit_active=True, ready=None, force_restart=False,
                      force_build=False, benchmark="changed"):
    """What the rollout does with one host, from its drift_info result (see rollout_host_plan.yml)."""
    return _call("rollout_host_plan", rollout.host_plan, plan, target_version, unit_changed, unit_active, ready,
                 force_restart, force_build, benchmark)


def rollout_pending(targets, hostvars):
    """The TARGETS (in their order) whose plan says they need something and that are not skipped (see
    rollout_pending.yml)."""
    return rollout.pending(targets, hostvars)


def rollout_failed_hosts(hosts, hostvars):
    """The HOSTS whose rollout failed in this run (see rollout_failed_hosts.yml)."""
    return rollout.failed_hosts(hosts, hostvars)


def rollout_cutover_state(service_result):
    """How far a host got before a failure (see rollout_cutover_state.yml)."""
    return rollout.cutover_state(service_result)


def rollout_serves_again(facts):
    """Whether a failed host serves again after its rescue (see rollout_serves_again.yml)."""
    return rollout.serves_again(facts)


def rollout_rows(targets, hostvars):
    """The summary's rows, one per target host, in the targets' order (see rollout_rows.yml), each with the quality
    gate's figures next to the reference's (``quality``: report.quality's digest of the host's quality_result, None
    when the gate did not run on it)."""
    rows = rollout.summary_rows(targets, hostvars)
    for row in rows:
        facts = hostvars[row["host"]] if row["host"] in hostvars else {}
        row["quality"] = quality_report.digest(rollout.note(facts, "quality_result", None))
    return rows


def rollout_quality(hosts, hostvars, markdown=False, var="quality_result"):
    """The quality gate's figures of HOSTS next to the reference's (see rollout_quality.yml): host -> the digest
    with its ``summary`` line (None when the gate did not run), or, with MARKDOWN, the ``## Answer quality`` section
    of a report ('' when it ran on none)."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("rollout_quality expects a list of hosts, got %s" % type(hosts).__name__)
    if not isinstance(var, str) or not var:
        raise AnsibleFilterError("rollout_quality: var must name the hosts' variable, got %r" % (var,))
    found = []
    for host in hosts:
        facts = hostvars[host] if host in hostvars else {}
        found.append((host, quality_report.digest(rollout.note(facts, var, None))))
    if rollout.as_bool(markdown):
        return "\n".join(quality_report.section(found)).strip("\n")
    return dict((host, dict(summary, summary=quality_report.phrase(summary), finding=quality_report.finding(summary))
                 if summary else None) for host, summary in found)


def rollout_batches(targets, hostvars):
    """The batches in the order they ran, the canary first (see rollout_batches.yml)."""
    return rollout.ran_batches(targets, hostvars)


class FilterModule(object):
    def filters(self):
        return {
            "rollout_line": rollout_line,
            "rollout_host_plan": rollout_host_plan,
            "rollout_pending": rollout_pending,
            "rollout_failed_hosts": rollout_failed_hosts,
            "rollout_cutover_state": rollout_cutover_state,
            "rollout_serves_again": rollout_serves_again,
            "rollout_rows": rollout_rows,
            "rollout_batches": rollout_batches,
            "rollout_quality": rollout_quality,
        }
