# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the sm120_config role needs the GPUs read (so the host tools venv), from the fleet's settings."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.policy import (
    DEFAULT_FILES,
    DEFAULT_REQUIRED_FILES,
    builds_problems,
    files_problems,
    policy_of,
    read_gpus,
)


def sm120_read_gpus(strip=True, force=False, build="", builds=None, detect=True, model_dirs=(), files=None,
                    required_files=None):
    """sm120.read_gpus() of the settings the sm120_config module takes; false for settings the module refuses (it
    then fails naming them, before anything is read or installed)."""
    files = DEFAULT_FILES if files is None else files
    required_files = DEFAULT_REQUIRED_FILES if required_files is None else required_files
    if files_problems(files, required_files) or builds_problems(builds or []):
        return False
    if not isinstance(model_dirs, (list, tuple)):
        return False
    dirs = [d for d in model_dirs if d]
    policy = policy_of(boolean(strip, strict=False), boolean(force, strict=False))
    return read_gpus(policy, dirs, boolean(detect, strict=False), build or None, builds or [])


class FilterModule(object):
    def filters(self):
        return {"sm120_read_gpus": sm120_read_gpus}
