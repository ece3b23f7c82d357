# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters that turn the fleet's settings (role gpufleet.vllm.fleet) into module options."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120 import policy_of


def kv_cache_policy(strip, force=False):
    """fleet_strip_kv_cache_keys and fleet_strip_kv_cache_keys_force as drift_info's config_policy (sm120.policy_of)."""
    return policy_of(boolean(strip, strict=False), boolean(force, strict=False))


class FilterModule(object):
    def filters(self):
        return {"kv_cache_policy": kv_cache_policy}
