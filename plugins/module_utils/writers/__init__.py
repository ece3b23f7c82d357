# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The control-node writers: what the action plugins rollout_summary, report_files and bench_report do.

Each module here has ``ARGUMENT_SPEC`` (the options, as plugins/modules/<name>.py documents them) and
``run(params, mode)`` (``mode``: a ``common.Mode``), which returns the task's result or raises ``common.WriterFailed``.
They run in the controller's own Python, never on a host.
"""
