# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """The attributes the collection's modules share; ansible.builtin.action_common_attributes describes them.

    DOCUMENTATION: the platform, for every module; a module that edits declares its own check_mode and diff_mode.
    INFO_MODULE: a module that only reads (the *_info modules and drift_info): the platform, full check mode, no diff.
    CONTROLLER_WRITER: a module file that documents an action plugin writing files on the control node (the report
    writers): the action, async, bypass_host_loop and platform attributes; it declares its own check_mode and diff_mode.
    Name this fragment before ansible.builtin.action_common_attributes: of two fragments that set the same
    attribute, the first one named wins (a module's own attributes win over both).
    """

    DOCUMENTATION = r"""
options: {}
attributes:
  platform:
    support: full
    platforms: posix
"""

    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - The module only reads. In check mode it runs exactly as outside it (the same reads, waits and checks) and
        returns the same result; RV(check_mode) tells the two apart.
  diff_mode:
    support: N/A
    details: The module only reads; there is nothing to diff.
  platform:
    support: full
    platforms: posix
"""

    CONTROLLER_WRITER = r"""
options: {}
attributes:
  action:
    support: full
    details: An action plugin; all of it runs on the control node.
  async:
    support: none
  bypass_host_loop:
    support: none
  platform:
    support: full
    platforms: posix
    details: The control node, whatever host the task is for.
"""
