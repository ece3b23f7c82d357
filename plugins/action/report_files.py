# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.report_files, run on the control node (its documentation: plugins/modules/report_files.py)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpufleet.vllm.plugins.module_utils.writers import report_files
from ansible_collections.gpufleet.vllm.plugins.plugin_utils.writer import WriterAction


class ActionModule(WriterAction):
    """The action of gpufleet.vllm.report_files: module_utils/writers/report_files.py in the controller's Python."""

    WRITER = report_files
