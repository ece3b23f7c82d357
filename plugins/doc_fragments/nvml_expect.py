# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """The GPU expectation of the modules that read NVML (nvml.expect_argument_spec)."""

    DOCUMENTATION = r"""
options:
  expect:
    description:
      - What the GPUs must look like. Every key is optional; an empty or absent O(expect) only gathers the facts.
      - The per-GPU keys apply to every GPU, or to the GPUs listed in O(expect.gpus).
    type: dict
    suboptions:
      count:
        description:
          - The number of GPUs NVML must report, for example V(8).
        type: int
      name:
        description:
          - A Python regular expression that every GPU's name must match (searched, not anchored), for example
            V(RTX PRO 6000).
        type: str
      compute_capability:
        description:
          - The CUDA compute capability every GPU must have, as a quoted string C(MAJOR.MINOR), for example V("12.0")
            for RTX PRO 6000 Blackwell (SM120) or V("9.0") for H100/H200.
          - V("12.x") (or V("12")) accepts any minor version of major 12.
          - Anything else (V(twelve)) is refused before NVML is touched.
        type: str
      min_total_mib:
        description:
          - Every GPU must have at least this much memory in total, in MiB.
        type: int
      min_used_mib:
        description:
          - Every GPU must have at least this much memory in use, in MiB, for example V(90000) once the model is loaded.
        type: int
      min_used_fraction:
        description:
          - Every (selected) GPU must have at least this fraction of its own memory total in use, less
            O(expect.min_used_tolerance), for example V(0.92) once a model served with the default
            C(--gpu-memory-utilization) of vLLM 0.32 and 0.33 (0.92; 0.9 in older builds) is loaded.
          - "The least is floor(floor(fraction x total) x (1 - tolerance)) MiB of each GPU's NVML total; a mismatch shows
            the arithmetic: C(expected at least 85,553 MiB = 0.92 x 97,887 MiB - 5 %, found 12,000 MiB)."
          - More than 0 and at most 1. Checked in addition to O(expect.min_used_mib) when both are given.
        type: float
      min_used_tolerance:
        description:
          - How much less than O(expect.min_used_fraction) of the total still passes, as a fraction of the reserved
            memory, for example V(0.05) (5 %). Default V(0).
          - 0 or more and less than 1; only with O(expect.min_used_fraction).
        type: float
      max_used_mib:
        description:
          - Every GPU must have at most this much memory in use, in MiB, for example V(1024) after the service stopped.
        type: int
      gpus:
        description:
          - The GPUs the per-GPU keys apply to, as indices (V(0), V(1), ...) or UUIDs (V(GPU-...)). Default is every GPU.
          - A listed GPU that the host does not have is a mismatch.
          - O(expect.count) still counts every GPU of the host.
        type: list
        elements: raw
      no_processes:
        description:
          - If V(true), no compute process may hold any (selected) GPU. V(false) or unset does not check processes.
        type: bool
"""
