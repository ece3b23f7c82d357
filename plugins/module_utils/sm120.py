# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The SM120 decision, in one place: which keys, on which GPUs, under which policy.

The ``sm120_config`` role (through the ``sm120_plan`` module) and the audit
(``drift.gather``, the ``drift_info`` module) both ask the same question:
must the FP8 KV-cache quantization keys be absent from this host's model
configs?  This module answers it once:

- :func:`policy_of` maps the role's switches onto a policy: ``keep`` (the
  keys stay), ``strip`` (removed whatever the GPUs say) or ``auto`` (removed
  where a GPU reports compute capability 12.x).
- :func:`read_gpus` says whether the GPUs have to be read to decide.
- :func:`decide` gives the action (``apply``, ``skip``, or ``preview`` in
  check mode before the GPUs can be read), what is known of the GPUs and
  the reason in words an operator can act on.
- :func:`files_problems` and :func:`module_files` check and convert the
  role's ``file name -> key paths`` map into the ``files`` option of the
  ``model_config`` module.
- :func:`summarize` turns the plan and apply results of ``model_config`` into
  the role's ``sm120_config_result``.

The reasons name the role's variables, because those are what an operator
changes to get another answer.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

POLICIES = ("auto", "strip", "keep")
ACTIONS = ("apply", "skip", "preview")

# the role's defaults: the keys wherever they sit in config.json, and ModelOpt's key in hf_quant_config.json
DEFAULT_FILES = {
    "config.json": ["**.kv_cache_scheme"],
    "hf_quant_config.json": ["quantization.kv_cache_quant_algo"],
}
DEFAULT_REQUIRED_FILES = ["config.json"]

REASON_KEEP = ("fleet_strip_kv_cache_keys is false: the KV-cache quantization keys are kept (for vLLM builds "
               "that run an FP8 KV cache on SM120 through the Triton MLA backend).")
REASON_NO_DIRS = "fleet_model_dirs is empty: no model directory to check."
REASON_FORCED = "fleet_strip_kv_cache_keys_force is true: the KV-cache quantization keys are removed whatever the GPUs report."
REASON_SM120 = "The GPUs report compute capability %s (SM120): the FP8 KV-cache quantization keys are removed."
REASON_OTHER_GPUS = ("No GPU reports compute capability 12.x (found: %s): the model configs are left as they are. "
                     "Set fleet_strip_kv_cache_keys_force: true to remove the keys anyway.")
REASON_PREVIEW = ("Check mode on a host without the host tools venv: the GPUs cannot be read yet, so this shows what "
                  "would change if they are SM120 (a real run installs the tools and reads the GPUs first).")
REASON_NVML = ("The GPUs could not be read through NVML (%s): the model configs are left as they are. Fix NVML, or set "
               "fleet_strip_kv_cache_keys_force: true to remove the keys without detection.")
REASON_NOT_READ = ("sm120_config_detect is false and no gpufleet_gpus fact was gathered: the model configs are left as "
                   "they are. Set fleet_strip_kv_cache_keys_force: true to remove the keys without detection.")


def policy_of(strip_kv_cache_keys=True, force=False):
    """The policy of the role's switches: ``keep`` when stripping is off (it wins over force), ``strip`` when forced,
    else ``auto``."""
    if not strip_kv_cache_keys:
        return "keep"
    return "strip" if force else "auto"


def read_gpus(policy, model_dirs, detect=True):
    """Whether the GPUs have to be read to decide: only for ``auto``, with directories to check and detection on."""
    return policy == "auto" and bool(model_dirs) and bool(detect)


def _known(gpus):
    """(GPUs read?, sm120 or None, their compute capabilities as text) from a ``gpufleet_gpus`` fact (or None)."""
    gpus = gpus or {}
    known = bool(gpus.get("available"))
    ccs = ", ".join(str(cc) for cc in gpus.get("compute_capabilities") or [])
    return known, (bool(gpus.get("sm120")) if known else None), ccs


def _decision(action, sm120, reason):
    return {"action": action, "sm120": sm120, "reason": reason}


def decide(policy, model_dirs=True, gpus=None, detect=True, check_mode=False, tools_ready=False, nvml_error=None):
    """Whether the KV-cache keys are removed on this host: ``{'action', 'sm120', 'reason'}``.

    ``policy``: one of POLICIES.  ``model_dirs``: the directories to check
    (only whether there is one counts).  ``gpus``: the ``gpufleet_gpus`` fact
    (``available``, ``sm120``, ``compute_capabilities``), None when none was
    gathered.  ``detect``: whether the GPUs were to be read (the role's
    ``sm120_config_detect``).  ``check_mode`` and ``tools_ready`` (the host
    tools venv exists): a check-mode run that could not read the GPUs
    previews the edits.  ``nvml_error``: NVML's message when the read failed.

    ``action`` is ``apply`` (remove the keys), ``skip`` (change nothing) or
    ``preview`` (check mode only: show what an SM120 host would change);
    ``sm120`` is true, false, or None when the GPUs are unknown.
    """
    if policy not in POLICIES:
        raise ValueError("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
    known, sm120, ccs = _known(gpus)
    if policy == "keep":
        return _decision("skip", sm120, REASON_KEEP)
    if not model_dirs:
        return _decision("skip", sm120, REASON_NO_DIRS)
    if policy == "strip":
        return _decision("apply", sm120, REASON_FORCED)
    if known and sm120:
        return _decision("apply", True, REASON_SM120 % ccs)
    if known:
        return _decision("skip", False, REASON_OTHER_GPUS % (ccs or "no GPU"))
    if detect and check_mode and not tools_ready:
        return _decision("preview", None, REASON_PREVIEW)
    if detect:
        return _decision("skip", None, REASON_NVML % (nvml_error or "no answer"))
    return _decision("skip", None, REASON_NOT_READ)


def strips(policy, gpus):
    """Whether the keys count as drift on a host whose GPUs read as ``gpus`` (the audit's question): the
    decision's ``apply``, for a host with model directories."""
    return decide(policy, model_dirs=True, gpus=gpus)["action"] == "apply"


# ---------------------------------------------------------------- the files and their keys


def _quoted(value):
    return repr(value) if not isinstance(value, str) else '"%s"' % value


def _name_problem(name):
    if not isinstance(name, str) or not name.strip():
        return "a file name must be a non-empty string"
    if name.startswith("/") or os.path.isabs(name):
        return "an absolute name"
    if ".." in name.replace("\\", "/").split("/"):
        return 'a name with ".."'
    return None


def _keys_problem(keys):
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        return "the key paths must be a list"
    if not keys:
        return "an empty list of key paths"
    if any(not isinstance(k, str) or not k for k in keys):
        return "key paths must be non-empty strings"
    return None


def files_problems(files, required_files=(), names=("fleet_config_files", "fleet_config_required_files")):
    """Sentences saying what is wrong with a ``file name -> key paths`` map and its list of required files.

    ``names``: how the two settings are called in the messages.  An empty
    list means both are fine.
    """
    files_name, required_name = names
    if not isinstance(files, dict) or not files:
        return ['%s must map file names relative to the model directory to lists of key paths such as '
                '"**.kv_cache_scheme"; it is empty.' % files_name]
    bad = []
    for name, keys in files.items():
        problem = _name_problem(name) or _keys_problem(keys)
        if problem:
            bad.append("%s (%s)" % (_quoted(name), problem))
    problems = []
    if bad:
        problems.append('%s must map file names relative to the model directory (no leading "/", no "..") to '
                        'non-empty lists of key paths such as "**.kv_cache_scheme"; entries in error: %s.' % (
                            files_name, ", ".join(bad)))
    unknown = [name for name in required_files or () if name not in files]
    if unknown:
        problems.append("%s may only name files of %s; unknown: %s." % (
            required_name, files_name, ", ".join(_quoted(n) for n in unknown)))
    return problems


def module_files(files, required_files=()):
    """The ``files`` option of the model_config module for a checked ``file name -> key paths`` map."""
    required = set(required_files or ())
    return [{"name": name, "absent": list(keys), "required": name in required} for name, keys in files.items()]


# ---------------------------------------------------------------- the role's result


def _dir_entry(path, result):
    files = result.get("files") or []
    removed = []
    for entry in files:
        for member in entry.get("removed") or []:
            removed.append({"file": entry.get("path"), "key": member.get("key"), "value": member.get("value")})
    return {
        "path": path,
        "changed": bool(result.get("changed")),
        "removed_count": sum(entry.get("removed_count") or 0 for entry in files),
        "removed": removed,
        "backups": [entry["backup_file"] for entry in files if entry.get("backup_file")],
        "skipped_files": [entry.get("path") for entry in files if entry.get("skipped")],
    }


def summarize(decision, forced, check_mode, plans=(), applied=()):
    """The role's ``sm120_config_result`` from the decision and the registered loop results.

    ``plans``: the results of the plan task (model_config in check mode,
    one per directory, ``item`` the directory; skipped items are left out).
    ``applied``: the results of the edit task (``item`` the plan result it
    acted on).  A directory edited takes the edit's result, one left alone
    its plan's.  ``check_mode``: the run's, used when nothing was edited.
    """
    done = {}
    edited_in_check_mode = None
    for result in applied or ():
        if result.get("skipped"):
            continue
        done.setdefault((result.get("item") or {}).get("item"), result)
        if edited_in_check_mode is None and "check_mode" in result:
            edited_in_check_mode = result["check_mode"]
    dirs = []
    for plan in plans or ():
        if plan.get("skipped"):
            continue
        path = plan.get("item")
        dirs.append(_dir_entry(path, done.get(path, plan)))
    return {
        "action": decision["action"],
        "applied": decision["action"] == "apply",
        "sm120": decision.get("sm120"),
        "forced": bool(forced),
        "reason": decision["reason"],
        "check_mode": bool(check_mode if edited_in_check_mode is None else edited_in_check_mode),
        "changed": any(d["changed"] for d in dirs),
        "removed_count": sum(d["removed_count"] for d in dirs),
        "dirs": dirs,
    }


def report_lines(result):
    """One line per directory of a ``sm120_config_result``: what was (or would be) removed where."""
    verb = "would remove" if result.get("check_mode") else "removed"
    lines = []
    for entry in result.get("dirs") or []:
        keys = ", ".join(str(r["key"]) for r in entry["removed"])
        lines.append("%s %d key(s) in %s%s" % (verb, entry["removed_count"], entry["path"],
                                               ": " + keys if entry["removed_count"] else ": keys already absent"))
    return lines
