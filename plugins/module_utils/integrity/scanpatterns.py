# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The operators' literal patterns for changed files (the ``patterns`` option).

Kept apart from :mod:`debugscan`, which re-exports them, so that a module
whose default needs them does not import (and, inside AnsiballZ, compile)
the syntax-tree scan on a run where no file changed.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

#: The literal patterns the operators grepped for on the reference host.
DEFAULT_PATTERNS = (
    "torch.save",
    "_t2.save",
    "_t.save",
    "NOMLA_SAVE",
    "embed_debug",
    "_nomla_debug",
    "_embed_debug_saved",
    "_nomla_class_saved",
)
