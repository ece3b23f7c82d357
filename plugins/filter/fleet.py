# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters that turn the fleet's settings (role gpufleet.vllm.fleet) into module options."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.policy import policy_of


def kv_cache_policy(strip, force=False):
    """fleet_strip_kv_cache_keys and fleet_strip_kv_cache_keys_force as drift_info's config_policy (sm120.policy_of)."""
    return policy_of(boolean(strip, strict=False), boolean(force, strict=False))


def disk_checks(checks, model_dirs=(), model_min_free_mib=0, staging=None):
    """fleet_disk_checks with one entry per model directory of fleet_model_dirs (MODEL_MIN_FREE_MIB each), and
    STAGING (the staged environment's room: its path, min_free_mib and purpose, such as the reinstall pre-flight's
    free_space_info result; empty for none): the paths option of free_space_info."""
    if not isinstance(checks, (list, tuple)) or not all(isinstance(c, dict) for c in checks):
        raise AnsibleFilterError("fleet_disk_checks must be a list of {path, min_free_mib, purpose}, got %r" % (checks,))
    if not isinstance(model_dirs, (list, tuple)):
        raise AnsibleFilterError("fleet_model_dirs must be a list of directories, got %r" % (model_dirs,))
    out = [dict(c) for c in checks]
    out.extend({"path": d, "min_free_mib": model_min_free_mib, "purpose": "the model config edits and their backups"}
               for d in model_dirs)
    if staging:
        if not isinstance(staging, dict) or not staging.get("path"):
            raise AnsibleFilterError("disk_checks: staging must be {path, min_free_mib, purpose}, got %r" % (staging,))
        out.insert(0, dict((k, staging[k]) for k in ("path", "min_free_mib", "purpose") if k in staging))
    return out


class FilterModule(object):
    def filters(self):
        return {"kv_cache_policy": kv_cache_policy, "disk_checks": disk_checks}
