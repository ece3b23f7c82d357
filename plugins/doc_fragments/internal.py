# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """A plugin that is a step of the collection's own roles and playbooks, not an operator's tool."""

    DOCUMENTATION = r"""
options: {}
notes:
  - This filter is a step of the collection's own roles and playbooks, exported only because their YAML calls it. It
    is not a stable interface - its input and its result follow those roles and may change in any release. In a
    playbook of your own, use the collection's modules and its other filters.
"""

    MODULE = r"""
options: {}
notes:
  - This module is a step of the collection's own roles and playbooks, exported only because their YAML calls it. It
    is not a stable interface - its options and its result follow those roles and may change in any release. In a
    playbook of your own, run the role or playbook that calls it.
"""
