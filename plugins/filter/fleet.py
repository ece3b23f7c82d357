# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters that turn the fleet's settings (role gpufleet.vllm.fleet) into module options."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError


def config_files(files, required=()):
    """fleet_config_files ({file name: [key paths]}) and fleet_config_required_files as model_config's "files"."""
    if not isinstance(files, dict):
        raise AnsibleFilterError("fleet_config_files must be a dict of file name -> key paths, got %s" % type(files).__name__)
    if isinstance(required, str) or not isinstance(required, (list, tuple)):
        raise AnsibleFilterError("fleet_config_required_files must be a list of file names, got %s" % type(required).__name__)
    unknown = [name for name in required if name not in files]
    if unknown:
        raise AnsibleFilterError("fleet_config_required_files names files that fleet_config_files does not list: %s"
                                 % ", ".join(str(name) for name in unknown))
    return [{"name": name, "absent": keys, "required": name in required} for name, keys in files.items()]


def kv_cache_policy(strip, force=False):
    """fleet_strip_kv_cache_keys and fleet_strip_kv_cache_keys_force as drift_info's config_policy."""
    if not strip:
        return "keep"
    return "strip" if force else "auto"


class FilterModule(object):
    def filters(self):
        return {"config_files": config_files, "kv_cache_policy": kv_cache_policy}
