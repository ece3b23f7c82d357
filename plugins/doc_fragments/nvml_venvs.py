# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """Where a module that reads NVML finds nvidia-ml-py when its interpreter has none (nvml.load_pynvml_venvs)."""

    DOCUMENTATION = r"""
options:
  nvml_venvs:
    description:
      - Virtual environments whose nvidia-ml-py (C(pynvml.py)) is loaded when the interpreter running the module cannot
        import C(pynvml), for example the venv of the C(gpufleet.vllm.host_tools) role.
      - Only that one file is loaded. The venv's C(site-packages) is not added to the import path, and its C(.pth)
        files are not run.
    type: list
    elements: path
    default: []
"""
