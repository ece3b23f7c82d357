# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils.report.drift import EXCERPT_LINES, diff_entries, markdown


def _get(mapping, key):
    try:
        return mapping[key]
    except Exception:  # missing, or undefined in a lazy hostvars entry  # pylint: disable=broad-exception-caught
        return None


def _hosts(targets, hostvars, var):
    """[(host, the diffs of its drift_info result)] for each target host that has one, in the targets' order."""
    if targets is None:
        return []
    if isinstance(targets, str) or not isinstance(targets, (list, tuple)):
        raise AnsibleFilterError("the drift diff filters expect a list of hosts, got %s" % type(targets).__name__)
    found = []
    for host in targets:
        result = _get(_get(hostvars, host) or {}, var)
        diffs = _get(result, "diffs") if result is not None else None
        if isinstance(diffs, dict):
            found.append((str(host), dict(diffs)))
    return found


def drift_diff_files(targets, hostvars, var="gpufleet_drift"):
    """The diff files to write under the report directory (see drift_diff_files.yml)."""
    return diff_entries(_hosts(targets, hostvars, var))


def drift_diff_markdown(targets, hostvars, lines=EXCERPT_LINES, var="gpufleet_drift", setting="fleet_wheel_dirs"):
    """The drift report's section on what changed, per host and file (see drift_diff_markdown.yml)."""
    try:
        lines = int(lines)
    except (TypeError, ValueError):
        raise AnsibleFilterError("drift_diff_markdown: lines must be a number, got %r" % (lines,))
    return markdown(_hosts(targets, hostvars, var), lines=max(1, min(lines, 1000)), setting=setting)


class FilterModule(object):
    def filters(self):
        return {
            "drift_diff_files": drift_diff_files,
            "drift_diff_markdown": drift_diff_markdown,
        }
