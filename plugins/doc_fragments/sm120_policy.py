# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """The SM120 KV-cache policy options of sm120_config (module_utils/sm120/policy.py decides; drift_info reads the same)."""

    DOCUMENTATION = r"""
options:
  strip_kv_cache_keys:
    description:
      - The policy switch. V(false) keeps the keys whatever else is set (newer vLLM builds run an FP8 KV cache on
        SM120 through the Triton MLA backend).
    type: bool
    default: true
  force:
    description:
      - Remove the keys whatever the GPUs report, or when they cannot be read (not for a build that O(builds) says runs
        an FP8 KV cache on SM120). The GPUs are then not read.
    type: bool
    default: false
  build:
    description:
      - The vLLM version the model configs are for (the rollout's target build). Empty, the build is unknown and
        O(builds) is not read.
    type: str
    default: ""
  builds:
    description:
      - The table of vLLM builds (the C(fleet_sm120_fp8_kv_cache_builds) setting of the C(gpufleet.vllm.fleet) role), in
        order; the first row whose C(versions) takes O(build) applies.
      - Each row is C(versions) (a PEP 440 version specifier such as V(>=0.19.0); pre-releases and nightlies such as
        V(0.33.1.dev7) are matched like any version, local labels such as V(+cu130) are ignored),
        C(fp8_kv_cache_on_sm120) (true or false) and an optional one-line C(note), quoted in RV(reason).
    type: list
    elements: dict
    default: []
  detect:
    description:
      - Whether the GPUs are read through NVML to decide. V(false) decides from O(gpus) alone.
    type: bool
    default: true
  files:
    description:
      - File name (relative to each model directory, no leading C(/), no C(..)) mapped to the non-empty list of key
        paths that must be absent from it.
      - A key path is a dotted string. Each segment is matched against object keys with shell-style wildcards
        (case-sensitive); C(*) matches any key at one level, C(**) matches any number of levels including none, so
        C(**.kv_cache_scheme) means "wherever it sits". A backslash escapes a dot that is part of a key
        (C(a\.b)). Array elements are levels too (keys C(0), C(1), ...), but only object members are removed.
    type: dict
    default:
      config.json:
        - "**.kv_cache_scheme"
        - "**.kv_cache_quant_algo"
      hf_quant_config.json:
        - quantization.kv_cache_quant_algo
        - quantization.kv_cache_scheme
  required_files:
    description:
      - Files of O(files) that must exist in every model directory; the others are skipped when missing.
    type: list
    elements: str
    default: [config.json]
"""
