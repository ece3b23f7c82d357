# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""serving_loaded_expect: the VRAM "loaded" gate of a unit, derived from its own arguments.

``__service_exec_argv | gpufleet.vllm.serving_loaded_expect(__service_environment, min_used_mib=..., tolerance=...)``
gives the keys of an NVML expectation (``gpus`` and either ``min_used_mib``
or ``min_used_fraction`` with ``min_used_tolerance``); the reading of the
arguments is module_utils/serving.py's, shared with the serving_check module.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.vllm.plugins.module_utils import serving


def serving_loaded_expect(argv, environment=None, min_used_mib=None, tolerance=serving.DEFAULT_LOADED_TOLERANCE,
                          default_utilization=None):
    """The NVML expectation keys of the GPUs the unit uses, once its model is loaded (DEFAULT_UTILIZATION: the
    serving build's default --gpu-memory-utilization, as serving_check read it on the host, for a command line that
    does not give it)."""
    if isinstance(argv, str) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError("serving_loaded_expect needs the unit's command line as a list of words, got %r"
                                 % (argv,))
    if environment is not None and not isinstance(environment, dict):
        raise AnsibleFilterError("serving_loaded_expect: environment must be a dict, got %r" % (environment,))
    if min_used_mib == "":
        min_used_mib = None
    if min_used_mib is not None:
        try:
            min_used_mib = int(min_used_mib)
        except (TypeError, ValueError):
            min_used_mib = -1
        if min_used_mib < 0:
            raise AnsibleFilterError("service_min_used_mib must be a whole number of MiB (0 or more), or empty to "
                                     "derive it from --gpu-memory-utilization")
    try:
        tolerance = float(tolerance)
    except (TypeError, ValueError):
        raise AnsibleFilterError("service_vram_loaded_tolerance must be a number such as 0.05; got %r" % (tolerance,))
    problem = serving.tolerance_problem("service_vram_loaded_tolerance", tolerance)
    if problem:
        raise AnsibleFilterError(problem)
    env = dict((str(k), "" if v is None else str(v)) for k, v in (environment or {}).items())
    try:
        config = serving.serving_config(["" if w is None else str(w) for w in argv], env)
    except serving.ServingConfigError as exc:
        raise AnsibleFilterError("The unit's serving arguments cannot be read: %s" % exc)
    if default_utilization not in (None, "") and not config["gpu_memory_utilization_given"]:
        try:
            default_utilization = float(default_utilization)
        except (TypeError, ValueError):
            default_utilization = None
        problem = serving.utilization_problem("default_utilization", default_utilization)
        if problem:
            raise AnsibleFilterError(problem)
        config["gpu_memory_utilization"] = default_utilization
    return serving.loaded_expect(config, min_used_mib=min_used_mib, tolerance=tolerance)


class FilterModule(object):
    """The serving config of a unit."""

    def filters(self):
        return {"serving_loaded_expect": serving_loaded_expect}
