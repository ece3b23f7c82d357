# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Decision of the reinstall role (documented in reinstall_plan.yml next to this file).

What to stage: decided in Python with a table of cases
(module_utils/stageplan.py), instead of in multi-line Jinja inside the role's
task files. The module vllm_envs decides with the same rule on the host, with
the checks it needs, in one call (the role's stage.yml); this filter decides
from check results registered by tasks. Which staged environment to reuse and
which ones cleanup removes are read on the host by vllm_envs
(module_utils/venvs.py).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.module_utils.stageplan import PlanError, plan


def reinstall_plan(current_check, target_version, force=False, current_env="", reuse_check=None, reuse_env="",
                   new_env="", locked=False, current_fingerprint=None, reuse_fingerprint=None, accepted=None):
    """What stage.yml does and which environment it leaves staged (see reinstall_plan.yml).

    The rule is module_utils/stageplan.py's plan(), the one the module vllm_envs decides with on the host.
    """
    try:
        return plan(current_check, target_version, force=force, current_env=current_env, reuse_check=reuse_check,
                    reuse_env=reuse_env, new_env=new_env, locked=locked, current_fingerprint=current_fingerprint,
                    reuse_fingerprint=reuse_fingerprint, accepted=accepted)
    except PlanError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    """gpufleet.vllm reinstall filters."""

    def filters(self):
        return {
            "reinstall_plan": reinstall_plan,
        }
