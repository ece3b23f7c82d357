# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The SM120 decision, in one place: which keys, on which GPUs, under which policy.

The ``sm120_config`` role (through the ``sm120_config`` module) and the audit
(``drift.gather``, the ``drift_info`` module) both ask the same question:
must the FP8 KV-cache quantization keys be absent from this host's model
configs?  This module answers it once:

- :func:`policy_of` maps the role's switches onto a policy: ``keep`` (the
  keys stay), ``strip`` (removed whatever the GPUs say) or ``auto`` (removed
  where a GPU reports compute capability 12.x).
- :func:`builds_problems` and :func:`build_row` check and read the fleet's
  table of vLLM builds (``fleet_sm120_fp8_kv_cache_builds``): the first row
  whose PEP 440 specifier takes the build says whether that build runs an
  FP8 KV cache on SM120. A build that does keeps the keys whatever the GPUs
  and the force switch say; one that does not, or that no row takes, or an
  unknown build, is decided by the policy and the GPUs as before.
- :func:`read_gpus` says whether the GPUs have to be read to decide.
- :func:`decide` gives the action (``apply``, ``skip``, or ``preview`` in
  check mode before the GPUs can be read), what is known of the GPUs and
  the reason in words an operator can act on.
- :func:`files_problems` and :func:`module_files` check and convert the
  role's ``file name -> key paths`` map into the per-file list that
  module_utils/sm120/modelconfig.py plans and edits (name, absent, required).
- :func:`summarize` turns the plan and edit results of each model directory
  (modelconfig's, one per directory) into the role's ``sm120_config_result``.

The reasons name the role's variables, because those are what an operator
changes to get another answer.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible_collections.gpufleet.vllm.plugins.module_utils.pkgnames import (
    canonical_version,
    specifier_contains,
    specifier_problem,
)

POLICIES = ("auto", "strip", "keep")
ACTIONS = ("apply", "skip", "preview")

# the role's defaults: both keys (compressed-tensors' kv_cache_scheme, ModelOpt's kv_cache_quant_algo) wherever they
# sit in config.json (its quantization_config, top level or under text_config), and in hf_quant_config.json
DEFAULT_FILES = {
    "config.json": ["**.kv_cache_scheme", "**.kv_cache_quant_algo"],
    "hf_quant_config.json": ["quantization.kv_cache_quant_algo", "quantization.kv_cache_scheme"],
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
#: The fleet's variable that holds the table of builds (named in the reasons).
BUILDS_NAME = "fleet_sm120_fp8_kv_cache_builds"
BUILD_KEYS = ("versions", "fp8_kv_cache_on_sm120", "note")
#: Bounds of the table: rows, and characters of a note (it is quoted in every reason).
BUILDS_MAX = 64
NOTE_MAX = 240
REASON_BUILD_KEEPS = ("vLLM %s runs an FP8 KV cache on SM120 (%s): the KV-cache quantization keys are kept.")
BUILD_NO_FP8 = " vLLM %s runs no FP8 KV cache on SM120 (%s)."
BUILD_NO_ROW = " vLLM %s: no row of " + BUILDS_NAME + " takes it."
BUILD_NOT_PEP440 = " vLLM %r is not a PEP 440 version, so no row of " + BUILDS_NAME + " takes it."
BUILD_UNKNOWN = " The vLLM build is unknown, so " + BUILDS_NAME + " was not read."
REASON_NOT_READ = ("sm120_config_detect is false and no gpufleet_gpus fact was gathered: the model configs are left as "
                   "they are. Set fleet_strip_kv_cache_keys_force: true to remove the keys without detection.")


def policy_of(strip_kv_cache_keys=True, force=False):
    """The policy of the role's switches: ``keep`` when stripping is off (it wins over force), ``strip`` when forced,
    else ``auto``."""
    if not strip_kv_cache_keys:
        return "keep"
    return "strip" if force else "auto"


def builds_problems(builds, name=BUILDS_NAME):
    """Sentences saying what is wrong with a table of builds (an empty list: it is fine).

    A table is a list of rows ``{versions: "<PEP 440 specifier>", fp8_kv_cache_on_sm120: <bool>, note: "<text>"}``
    (``note`` optional, one line of at most NOTE_MAX characters), at most BUILDS_MAX rows.
    """
    if builds is None:
        return []
    if not isinstance(builds, (list, tuple)):
        return ["%s must be a list of rows {versions, fp8_kv_cache_on_sm120, note}; it is a %s." % (
            name, type(builds).__name__)]
    if len(builds) > BUILDS_MAX:
        return ["%s has %d rows; at most %d are read." % (name, len(builds), BUILDS_MAX)]
    problems = []
    for index, row in enumerate(builds):
        where = "%s[%d]" % (name, index)
        if not isinstance(row, dict):
            problems.append("%s must be a mapping {versions, fp8_kv_cache_on_sm120, note}." % where)
            continue
        unknown = sorted(str(k) for k in row if k not in BUILD_KEYS)
        if unknown:
            problems.append("%s has unknown keys: %s (known: %s)." % (where, ", ".join(unknown), ", ".join(BUILD_KEYS)))
        problem = specifier_problem(row.get("versions"))
        if problem:
            problems.append('%s.versions must be a PEP 440 version specifier such as ">=0.19.0" or ">=0.18,<0.19": '
                            '%s.' % (where, problem))
        if not isinstance(row.get("fp8_kv_cache_on_sm120"), bool):
            problems.append("%s.fp8_kv_cache_on_sm120 must be true or false, got %r." % (
                where, row.get("fp8_kv_cache_on_sm120")))
        note = row.get("note", "")
        if not isinstance(note, str) or len(note) > NOTE_MAX or any(c in note for c in "\r\n\x00"):
            problems.append("%s.note must be one line of text of at most %d characters." % (where, NOTE_MAX))
    return problems


def build_row(builds, build):
    """The first row of a checked table that takes ``build``: ``{index, versions, fp8_kv_cache_on_sm120, note}``,
    or None (no table, no build, a build that is not a PEP 440 version, or no row takes it)."""
    if not builds or not build or not canonical_version(build):
        return None
    for index, row in enumerate(builds):
        if specifier_contains(row["versions"], build):
            return {"index": index, "versions": row["versions"],
                    "fp8_kv_cache_on_sm120": row["fp8_kv_cache_on_sm120"], "note": row.get("note") or ""}
    return None


def _row_text(row):
    """``fleet_sm120_fp8_kv_cache_builds[0] ">=0.19.0": note`` - which row, and why."""
    return '%s[%d] "%s"%s' % (BUILDS_NAME, row["index"], row["versions"], ": " + row["note"] if row["note"] else "")


def _row_short(row):
    return '%s[%d] "%s"' % (BUILDS_NAME, row["index"], row["versions"])


def _keeps(build, builds):
    """The row that keeps the keys for this build (it runs an FP8 KV cache on SM120), or None."""
    row = build_row(builds, build)
    return row if row and row["fp8_kv_cache_on_sm120"] else None


def read_gpus(policy, model_dirs, detect=True, build=None, builds=None):
    """Whether the GPUs have to be read to decide: only for ``auto``, with directories to check and detection on,
    and a build the table does not already keep the keys for."""
    return policy == "auto" and bool(model_dirs) and bool(detect) and _keeps(build, builds) is None


def _known(gpus):
    """(GPUs read?, sm120 or None, their compute capabilities as text) from a ``gpufleet_gpus`` fact (or None)."""
    gpus = gpus or {}
    known = bool(gpus.get("available"))
    ccs = ", ".join(str(cc) for cc in gpus.get("compute_capabilities") or [])
    return known, (bool(gpus.get("sm120")) if known else None), ccs


def _build_sentence(build, row):
    """What the table says of the build, for a decision that removes the keys."""
    if not build:
        return BUILD_UNKNOWN
    if not canonical_version(build):
        return BUILD_NOT_PEP440 % build
    if row is None:
        return BUILD_NO_ROW % build
    return BUILD_NO_FP8 % (build, _row_text(row))


def decide(policy, model_dirs=True, gpus=None, detect=True, check_mode=False, tools_ready=False, nvml_error=None,
           build=None, builds=None):
    """Whether the KV-cache keys are removed on this host: ``{action, sm120, reason, build, build_row, summary}``.

    ``policy``: one of POLICIES.  ``model_dirs``: the directories to check
    (only whether there is one counts).  ``gpus``: the ``gpufleet_gpus`` fact
    (``available``, ``sm120``, ``compute_capabilities``), None when none was
    gathered.  ``detect``: whether the GPUs were to be read (the role's
    ``sm120_config_detect``).  ``check_mode`` and ``tools_ready`` (the host
    tools venv exists): a check-mode run that could not read the GPUs
    previews the edits.  ``nvml_error``: NVML's message when the read failed.

    ``build``: the vLLM version the configs are for (the rollout's target,
    the audit's installed build; None or empty: unknown) and ``builds`` the
    checked table of builds: a row that says the build runs an FP8 KV cache
    on SM120 keeps the keys, before the GPUs or the force switch count.

    ``action`` is ``apply`` (remove the keys), ``skip`` (change nothing) or
    ``preview`` (check mode only: show what an SM120 host would change);
    ``sm120`` is true, false, or None when the GPUs are unknown; ``build``
    the build decided for (None: unknown), ``build_row`` the table's row
    that took it (None: none did) and ``summary`` the decision in a few
    words for a summary line.
    """
    if policy not in POLICIES:
        raise ValueError("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
    known, sm120, ccs = _known(gpus)
    build = build or None
    row = build_row(builds, build)

    def decision(action, is_sm120, reason, summary):
        return {"action": action, "sm120": is_sm120, "reason": reason, "build": build, "build_row": row,
                "summary": summary}

    if policy == "keep":
        return decision("skip", sm120, REASON_KEEP, "keys kept: fleet_strip_kv_cache_keys is false")
    if not model_dirs:
        return decision("skip", sm120, REASON_NO_DIRS, "no model directory")
    if row and row["fp8_kv_cache_on_sm120"]:
        return decision("skip", sm120, REASON_BUILD_KEEPS % (build, _row_text(row)),
                        "keys kept: vLLM %s, %s" % (build, _row_short(row)))
    removed = _build_sentence(build, row)
    table = "vLLM build unknown" if not build else (
        "vLLM %s in no row" % build if row is None else "vLLM %s, %s" % (build, _row_short(row)))
    if policy == "strip":
        return decision("apply", sm120, REASON_FORCED + removed, "keys removed: forced, %s" % table)
    if known and sm120:
        return decision("apply", True, REASON_SM120 % ccs + removed, "keys removed: SM120, %s" % table)
    if known:
        return decision("skip", False, REASON_OTHER_GPUS % (ccs or "no GPU"),
                        "keys left as they are: no SM120 GPU")
    if detect and check_mode and not tools_ready:
        return decision("preview", None, REASON_PREVIEW + removed, "keys would be removed if SM120, %s" % table)
    if detect:
        return decision("skip", None, REASON_NVML % (nvml_error or "no answer"), "keys left as they are: GPUs not read")
    return decision("skip", None, REASON_NOT_READ, "keys left as they are: GPUs not read")


def strips(policy, gpus, build=None, builds=None):
    """Whether the keys count as drift on a host whose GPUs read as ``gpus`` and that serves ``build`` (the audit's
    question): the decision's ``apply``, for a host with model directories."""
    return decide(policy, model_dirs=True, gpus=gpus, build=build, builds=builds)["action"] == "apply"


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
    """The per-file list modelconfig plans and edits (name, absent, required) of a checked name -> key paths map."""
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

    ``plans``: the plan of each directory (modelconfig's edit in check mode,
    one per directory, ``item`` the directory; skipped items are left out).
    ``applied``: the results of the edits (``item`` the plan result each
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
        "build": decision.get("build"),
        "build_row": decision.get("build_row"),
        "summary": decision.get("summary") or "",
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
