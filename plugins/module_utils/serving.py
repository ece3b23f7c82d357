# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The serving config of a vLLM unit, read from its own command line and environment.

The one place that knows which ``vllm serve`` arguments decide how much GPU
memory the server takes and on which GPUs (the VRAM "loaded" gate) and how
many GPUs its parallelism needs (the pre-flight's parallelism check):

* ``--gpu-memory-utilization`` (alias ``--device-memory-utilization``): the
  fraction of EACH GPU's total memory vLLM reserves (weights, activations,
  CUDA graphs and the KV cache it sizes to fill the rest), 0 < u <= 1. Not
  given, the build's own default: 0.92 in vLLM 0.32 and 0.33 (their
  ``vllm/config/cache.py``), 0.9 in older builds. serving_config alone
  says 0.9 (DEFAULT_GPU_MEMORY_UTILIZATION); :func:`with_build_default`
  reads the build's default (:func:`build_default_utilization`: its
  ``cache.py``, else a table by version, else 0.9 with why);
* ``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``,
  ``--data-parallel-size``/``-dp`` and ``--data-parallel-size-local``/``-dpl``
  (the data parallel ranks on this host; the whole size by default): this
  host runs tp x pp x dp-local workers, one GPU each;
* ``--enable-expert-parallel``/``-ep`` (``--no-enable-expert-parallel``
  turns it off again): the MoE layers' experts spread over the GPUs instead
  of tensor-parallel slices of each expert; needs a model with experts;
* ``CUDA_VISIBLE_DEVICES`` of the unit's environment: the GPUs it may use
  (indices or ``GPU-...`` UUIDs), in that order; the workers take the first
  tp x pp x dp-local of them.

Both ``--name value`` and ``--name=value`` are read, ``--name_with_underscores``
too (vLLM accepts both spellings); as with argparse the last occurrence wins.
What this does not see: a ``--config`` YAML file (named in ``config_files``:
:func:`unsure_reason` says so, and the unit's GPUs then count as unknown), abbreviated option names,
multi-node runs (``--nnodes``, ``--headless``: reported, the fit check is
then skipped), and ``CUDA_DEVICE_ORDER`` (CUDA numbers the GPUs fastest
first by default, NVML by PCI bus; on a host of identical GPUs both orders
are the same).

All functions are pure: the callers pass NVML's figures and the model's
``config.json`` in.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math
import os
import re

# The default of builds whose own default could not be read (older vLLM builds used 0.9): see build_default_utilization.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# vLLM's default --gpu-memory-utilization by release (vllm/config/cache.py), where the build's file cannot be read.
DEFAULT_UTILIZATION_BY_VERSION = {"0.32": 0.92, "0.33": 0.92}
# vllm/config/cache.py is about 22 KiB; a larger file is not read.
MAX_CACHE_PY_BYTES = 512 * 1024
# the CacheConfig field as vLLM writes it: `gpu_memory_utilization: float = 0.92` or `... = Field(default=0.92, ...)`
_CACHE_DEFAULT = re.compile(r"^    gpu_memory_utilization: float = (?:Field\(default=)?(0\.[0-9]{1,4}|1\.0|1)[,)\s]",
                            re.M)
_DIST_INFO = re.compile(r"^vllm(?:_cpu)?-([0-9][0-9A-Za-z.+!_-]{0,60})\.dist-info\Z")
# The loaded gate expects this much less than the reserved memory by default:
# vLLM reserves u x total, but what NVML shows in use right after the load
# varies with the CUDA graphs captured, the activation peak of the profiling
# run and the driver's own allocations; 5 % (4,405 MiB of 88,098) covers that
# and still fails a server that loaded on too few GPUs or with a much smaller
# --gpu-memory-utilization than its unit says.
DEFAULT_LOADED_TOLERANCE = 0.05

# config.json keys that give a model's number of routed experts (vLLM's
# CONFIG_FIELD_ALIASES["num_experts"])
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
# sub-configs where multimodal and wrapped models keep their text model's keys
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")
MAX_CONFIG_BYTES = 16 * 1024 * 1024

_OPTIONS = {
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--device-memory-utilization": "gpu_memory_utilization",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "-pp": "pipeline_parallel_size",
    "--data-parallel-size": "data_parallel_size",
    "-dp": "data_parallel_size",
    "--data-parallel-size-local": "data_parallel_size_local",
    "-dpl": "data_parallel_size_local",
    "--nnodes": "nnodes",
    "-n": "nnodes",
}
_FLAGS = {
    "--enable-expert-parallel": ("enable_expert_parallel", True),
    "-ep": ("enable_expert_parallel", True),
    "--no-enable-expert-parallel": ("enable_expert_parallel", False),
    "--headless": ("headless", True),
}
_SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "data_parallel_size_local", "nnodes")
_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+\Z")


class ServingConfigError(ValueError):
    """The serving config cannot be read; the message lists every problem."""


def _name(word):
    """The option name of WORD (``--x`` of ``--x=y``, underscores as dashes) and its inline value or None."""
    if not word.startswith("-") or word == "-" or word == "--":
        return None, None
    name, sep, value = word.partition("=")
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, (value if sep else None)


def _number(option, text, kind):
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        return None, "%s must be %s; got %r" % (
            option, "a number such as 0.9" if kind is float else "a whole number of 1 or more", text)
    return value, None


def parse_visible_devices(text):
    """CUDA_VISIBLE_DEVICES as a list of indices (int) and UUIDs (str); None when unset. Raises ServingConfigError."""
    if text is None:
        return None
    text = str(text).strip()
    if not text:
        return []
    devices = []
    for item in text.split(","):
        item = item.strip()
        if item.isdigit():
            devices.append(int(item))
        elif _UUID_RE.match(item):
            devices.append(item)
        else:
            raise ServingConfigError(
                "CUDA_VISIBLE_DEVICES=%r: %r is neither a GPU index (0, 1, ...) nor a GPU UUID (GPU-...); CUDA "
                "would ignore it and every GPU after it" % (text, item))
        if devices.count(devices[-1]) > 1:
            raise ServingConfigError("CUDA_VISIBLE_DEVICES=%r names GPU %s twice" % (text, item))
    return devices


def serving_config(argv, environment=None):
    """The serving config of the unit whose ExecStart= words are ARGV and whose Environment= is ENVIRONMENT.

    Returns a dict: gpu_memory_utilization (float), gpu_memory_utilization_given
    (bool), tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
    data_parallel_size_local (ints), enable_expert_parallel (bool),
    multi_node (bool), visible_devices (list of indices and UUIDs, or None
    when CUDA_VISIBLE_DEVICES is unset), world_size (the workers, hence GPUs,
    on this host: tp x pp x dp-local), gpus (the GPUs they take: the first
    world_size of visible_devices, or 0 .. world_size - 1) and config_files
    (the ``--config`` files, not read: see unsure_reason).
    Raises ServingConfigError naming every malformed value.
    """
    values = {"gpu_memory_utilization": None, "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
              "data_parallel_size": 1, "data_parallel_size_local": None, "enable_expert_parallel": False,
              "nnodes": 1, "headless": False}
    problems = []
    config_files = []
    words = ["" if w is None else str(w) for w in (argv or [])]
    i = 0
    while i < len(words):
        name, inline = _name(words[i])
        i += 1
        if name == "--config":
            # (vLLM reads options from this YAML file, the command line's own ones winning: not read here)
            if inline is None and i < len(words):
                inline = words[i]
                i += 1
            config_files.append(inline or "")
            continue
        if name in _FLAGS:
            key, value = _FLAGS[name]
            values[key] = value
            continue
        if name not in _OPTIONS:
            continue
        if inline is None:
            if i >= len(words) or (words[i].startswith("-") and not re.match(r"^-?\d", words[i])):
                problems.append("%s needs a value" % name)
                continue
            inline = words[i]
            i += 1
        key = _OPTIONS[name]
        kind = float if key == "gpu_memory_utilization" else int
        value, problem = _number(name, inline.strip(), kind)
        if problem:
            problems.append(problem)
        elif kind is float and not 0 < value <= 1:
            problems.append("%s must be more than 0 and at most 1 (a fraction of each GPU's memory, such as 0.9); "
                            "got %s" % (name, inline))
        elif kind is int and value < 1:
            problems.append("%s must be a whole number of 1 or more; got %s" % (name, inline))
        else:
            values[key] = value
    visible = None
    try:
        visible = parse_visible_devices((environment or {}).get("CUDA_VISIBLE_DEVICES"))
    except ServingConfigError as exc:
        problems.append(str(exc))
    if problems:
        raise ServingConfigError("; ".join(problems))
    given = values["gpu_memory_utilization"] is not None
    if not given:
        values["gpu_memory_utilization"] = DEFAULT_GPU_MEMORY_UTILIZATION
    local = values["data_parallel_size_local"]
    if local is None:
        local = values["data_parallel_size"]
    world = values["tensor_parallel_size"] * values["pipeline_parallel_size"] * local
    gpus = list(visible[:world]) if visible is not None else list(range(world))
    return {
        "gpu_memory_utilization": values["gpu_memory_utilization"],
        "gpu_memory_utilization_given": given,
        "tensor_parallel_size": values["tensor_parallel_size"],
        "pipeline_parallel_size": values["pipeline_parallel_size"],
        "data_parallel_size": values["data_parallel_size"],
        "data_parallel_size_local": local,
        "enable_expert_parallel": values["enable_expert_parallel"],
        "multi_node": values["nnodes"] > 1 or values["headless"],
        "visible_devices": visible,
        "world_size": world,
        "gpus": gpus,
        "config_files": config_files,
    }


def unsure_reason(config):
    """Why CONFIG (serving_config's dict) may not be what the server uses, or None: a ``--config`` YAML file may set
    the parallel sizes and ``--gpu-memory-utilization``, and it is not read here."""
    if config.get("config_files"):
        return "unsure: --config %s not read (vLLM takes options such as tensor-parallel-size from it)" % ", ".join(
            repr(f) if not f or any(c in f for c in " ,'\"") else f for f in config["config_files"])
    return None


def _site_packages(argv0):
    """The site-packages directories of the venv whose bin/ holds ARGV0 (an absolute path), at most 8 looked at."""
    if not argv0 or not argv0.startswith("/") or "\n" in argv0:
        return []
    root = os.path.dirname(os.path.dirname(argv0))
    found = []
    for lib in ("lib", "lib64"):
        try:
            names = sorted(os.listdir(os.path.join(root, lib)))[:8]
        except OSError:
            continue
        for name in names:
            path = os.path.join(root, lib, name, "site-packages")
            if re.match(r"python3\.[0-9]{1,3}\Z", name) and os.path.isdir(path) and \
                    os.path.realpath(path) not in [os.path.realpath(f) for f in found]:
                found.append(path)
    return found


def _read_small(path, limit):
    """The text of the regular file PATH (links followed: a venv's files may be links) when at most LIMIT bytes."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except (IOError, OSError):
        return None
    if len(data) > limit:
        return None
    return data.decode("utf-8", "replace")


def build_default_utilization(argv):
    """The default ``--gpu-memory-utilization`` of the vLLM build the command line ARGV runs: a dict with ``value``
    and ``source`` (which of these gave it).

    1. the build's own ``vllm/config/cache.py`` (found from ARGV's program,
       ``<venv>/bin/vllm`` or ``<venv>/bin/python``; at most
       MAX_CACHE_PY_BYTES read; one line ``gpu_memory_utilization: float =
       0.92`` or ``= Field(default=0.92, ...)``, no other reading);
    2. else DEFAULT_UTILIZATION_BY_VERSION for the build's version (its
       ``vllm-<version>.dist-info``);
    3. else DEFAULT_GPU_MEMORY_UTILIZATION (0.9), saying why.
    """
    program = str(argv[0]) if argv else ""
    versions = []
    why = "the program %r is not a path inside a venv's bin/" % program[:200]
    for site in _site_packages(program):
        cache = os.path.join(site, "vllm", "config", "cache.py")
        text = _read_small(cache, MAX_CACHE_PY_BYTES)
        if text is not None:
            found = _CACHE_DEFAULT.findall(text)
            if len(found) == 1:
                return {"value": float(found[0]), "source": "the build's %s" % cache}
            why = "%s does not hold one line gpu_memory_utilization: float = <default>" % cache
        else:
            why = "%s cannot be read (missing, or larger than %d KiB)" % (cache, MAX_CACHE_PY_BYTES // 1024)
        try:
            names = sorted(os.listdir(site))[:20000]
        except OSError:
            names = []
        versions += [m.group(1) for m in (_DIST_INFO.match(n) for n in names) if m]
    for version in versions:
        release = ".".join(version.split(".")[:2])
        if release in DEFAULT_UTILIZATION_BY_VERSION:
            return {"value": DEFAULT_UTILIZATION_BY_VERSION[release],
                    "source": "the default of vLLM %s (the build is %s; %s)" % (release, version, why)}
    return {"value": DEFAULT_GPU_MEMORY_UTILIZATION,
            "source": "%s, the default of older vLLM builds: the build's own default is not known (%s%s)" % (
                DEFAULT_GPU_MEMORY_UTILIZATION, why,
                ("; its version %s is not in the table" % ", ".join(versions)) if versions else "")}


def with_build_default(config, argv):
    """CONFIG (serving_config's dict) with the build's default --gpu-memory-utilization when the command line does not
    give it, and ``gpu_memory_utilization_source`` saying where the value came from."""
    config = dict(config)
    if config.get("gpu_memory_utilization_given"):
        config["gpu_memory_utilization_source"] = "the command line's --gpu-memory-utilization"
    else:
        default = build_default_utilization(argv)
        config["gpu_memory_utilization"] = default["value"]
        config["gpu_memory_utilization_source"] = default["source"]
    return config


DEFAULT_PORT = 8000


def endpoint(argv, environment=None):
    """Where the server of the unit whose ExecStart= words are ARGV (and Environment= ENVIRONMENT) answers, and as
    what: a dict with ``port`` (vLLM's --port, 8000 when not given), ``host`` (--host, None when not given),
    ``served_model_name`` (the first name of --served-model-name, else the model: the word after ``serve``, or
    --model) and ``api_key`` (--api-key, else VLLM_API_KEY, else None). Raises ServingConfigError for a port that is
    not one."""
    words = ["" if w is None else str(w) for w in (argv or [])]
    port, names, model, host, api_key = None, None, None, None, None
    i = 0
    while i < len(words):
        word = words[i]
        name, inline = _name(word)
        i += 1
        if name is None:
            if word == "serve" and model is None and i < len(words) and not words[i].startswith("-"):
                model = words[i]
                i += 1
            continue
        if name not in ("--port", "--served-model-name", "--model", "--host", "--api-key"):
            continue
        if inline is None:
            values = []
            while i < len(words) and not words[i].startswith("-"):
                values.append(words[i])
                i += 1
                if name != "--served-model-name":
                    break
        else:
            values = [inline]
        if not values:
            raise ServingConfigError("%s needs a value" % name)
        if name == "--port":
            if not re.match(r"^[0-9]{1,5}\Z", values[0]) or not 1 <= int(values[0]) <= 65535:
                raise ServingConfigError("--port must be a port number from 1 to 65535; got %r" % values[0])
            port = int(values[0])
        elif name == "--served-model-name":
            names = values
        elif name == "--host":
            host = values[0]
        elif name == "--api-key":
            api_key = values[0]
        else:
            model = values[0]
    return {"port": port or DEFAULT_PORT, "host": host, "served_model_name": (names or [model or ""])[0],
            "api_key": api_key or (environment or {}).get("VLLM_API_KEY") or None}


# ------------------------------------------------------------ loaded gate


def _fraction_problem(name, value, high_inclusive):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "%s must be a number; got %r" % (name, value)
    if high_inclusive and not 0 < value <= 1:
        return "%s must be more than 0 and at most 1 (0.9 is 90 %% of each GPU's memory); got %r" % (name, value)
    if not high_inclusive and not 0 <= value < 1:
        return "%s must be 0 or more and less than 1 (0.05 is 5 %%); got %r" % (name, value)
    return None


def utilization_problem(name, value):
    """A problem line when VALUE is no fraction 0 < u <= 1, else None."""
    return _fraction_problem(name, value, True)


def tolerance_problem(name, value):
    """A problem line when VALUE is no tolerance 0 <= t < 1, else None."""
    return _fraction_problem(name, value, False)


def loaded_floor_mib(total_mib, utilization, tolerance=0.0):
    """floor(floor(u x total) x (1 - tolerance)): the least memory a loaded GPU of TOTAL_MIB must use."""
    reserved = math.floor(utilization * total_mib + 1e-6)
    return int(math.floor(reserved * (1.0 - tolerance) + 1e-6))


def _g(value):
    return ("%.4f" % value).rstrip("0").rstrip(".")


def describe_loaded_floor(total_mib, utilization, tolerance=0.0):
    """'83,693 MiB = 0.9 x 97,887 MiB - 5 %' (the arithmetic of loaded_floor_mib)."""
    text = "{0:,} MiB = {1} x {2:,} MiB".format(loaded_floor_mib(total_mib, utilization, tolerance), _g(utilization),
                                                total_mib)
    if tolerance:
        text += " - %s %%" % _g(tolerance * 100)
    return text


def loaded_expect(config, min_used_mib=None, tolerance=DEFAULT_LOADED_TOLERANCE):
    """The NVML expectation (nvml.check_expectations keys) of the GPUs once the model is loaded.

    MIN_USED_MIB given: that much on each used GPU (an operator's fixed
    figure). Else each used GPU must use at least its share
    (loaded_floor_mib of its own NVML total).
    """
    expect = {"gpus": list(config["gpus"])}
    if min_used_mib is not None and min_used_mib != "":
        expect["min_used_mib"] = int(min_used_mib)
    else:
        expect["min_used_fraction"] = config["gpu_memory_utilization"]
        expect["min_used_tolerance"] = tolerance
    return expect


# --------------------------------------------------------- parallelism check


def model_experts(config):
    """(number of routed experts, the key that says so) of a parsed config.json; (0, None) for a dense model."""
    def scan(node, where):
        if not isinstance(node, dict):
            return 0, None
        for key in EXPERT_KEYS:
            value = node.get(key)
            if isinstance(value, list):
                value = max([v for v in value if isinstance(v, int) and not isinstance(v, bool)] or [0])
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, where + key
        blocks = node.get("block_configs")
        if isinstance(blocks, list):
            most = max([b.get("n_routed_experts") or 0 for b in blocks
                        if isinstance(b, dict) and b.get("block_type") == "moe"
                        and isinstance(b.get("n_routed_experts"), int)] or [0])
            if most > 0:
                return most, where + "block_configs[].n_routed_experts"
        for sub in TEXT_CONFIG_KEYS:
            found = scan(node.get(sub), where + sub + ".")
            if found[0]:
                return found
        return 0, None
    return scan(config, "")


def read_model_config(model):
    """(parsed MODEL/config.json, None) or (None, why not). MODEL may be a Hugging Face id (then: not a directory)."""
    if not model or not os.path.isdir(model):
        return None, ("%s is not a directory on this host (a Hugging Face id, or not downloaded yet), so its "
                      "config.json cannot be read" % model)
    path = os.path.join(model, "config.json")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except (IOError, OSError) as exc:
        return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    if len(data) > MAX_CONFIG_BYTES:
        return None, "%s is larger than %d MiB; not read" % (path, MAX_CONFIG_BYTES // (1024 * 1024))
    try:
        config = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return None, "%s is not valid JSON: %s" % (path, exc)
    if not isinstance(config, dict):
        return None, "%s is not a JSON object" % path
    return config, None


def _sizes(config):
    parts = ["tensor parallel %d" % config["tensor_parallel_size"]]
    if config["pipeline_parallel_size"] != 1:
        parts.append("pipeline parallel %d" % config["pipeline_parallel_size"])
    if config["data_parallel_size_local"] != 1:
        parts.append("data parallel %d%s" % (config["data_parallel_size_local"],
                                             " on this host" if config["data_parallel_size_local"]
                                             != config["data_parallel_size"] else ""))
    return " x ".join(parts)


def parallel_problems(config, gpu_count=None, gpu_uuids=None, model_config=None, model=None):
    """The refusals of a serving config on a host: (problems, notes).

    GPU_COUNT: NVML's GPU count (None: not read, the fit is checked against
    CUDA_VISIBLE_DEVICES alone); GPU_UUIDS: NVML's UUIDs by index (to
    resolve UUIDs in CUDA_VISIBLE_DEVICES); MODEL_CONFIG: the parsed
    config.json of MODEL (None: not readable, expert parallel not judged).
    NOTES say what could not be checked.
    """
    problems, notes = [], []
    world = config["world_size"]
    visible = config["visible_devices"]
    if config["multi_node"]:
        notes.append("a multi-node run (--nnodes/--headless): whether the parallel sizes fit this host's GPUs is "
                     "not checked")
    else:
        usable, where = gpu_count, "NVML reports %s GPUs" % gpu_count
        if visible is not None:
            known = [d for d in visible if gpu_count is None or (
                isinstance(d, int) and d < gpu_count) or (
                not isinstance(d, int) and gpu_uuids is not None and d.lower() in [u.lower() for u in gpu_uuids])]
            unknown = [d for d in visible if d not in known]
            if unknown and gpu_count is not None:
                problems.append("CUDA_VISIBLE_DEVICES names %s, which %s among the %d GPUs of this host" % (
                    ", ".join(str(d) for d in unknown), "is not" if len(unknown) == 1 else "are not", gpu_count))
            usable = len(known)
            where = "CUDA_VISIBLE_DEVICES=%s leaves %d GPU%s" % (
                ",".join(str(d) for d in visible), usable, "" if usable == 1 else "s")
            if gpu_count is not None:
                where += " of the %d NVML reports" % gpu_count
        if usable is not None and world > usable:
            problems.append("%s needs %d GPU%s, but %s: lower the parallel sizes (service_tensor_parallel_size, "
                            "-pp/-dp in service_extra_args) or make more GPUs visible" % (
                                _sizes(config), world, "" if world == 1 else "s", where))
        if gpu_count is None and visible is None:
            notes.append("the GPUs were not counted (no NVML): whether %d GPUs are there is not checked" % world)
    if config["enable_expert_parallel"]:
        if model_config is None:
            notes.append("expert parallel is on, but the model's config.json was not read, so whether the model "
                         "has experts is not checked")
        else:
            experts, key = model_experts(model_config)
            if not experts:
                problems.append(
                    "expert parallel (--enable-expert-parallel) needs a mixture-of-experts model, but %s/config.json "
                    "declares no experts (none of %s): this is a dense model; turn expert parallel off "
                    "(service_enable_expert_parallel: false)" % (model, ", ".join(EXPERT_KEYS)))
            else:
                notes.append("expert parallel over %d GPUs, %d experts (%s)" % (
                    config["tensor_parallel_size"] * config["data_parallel_size_local"], experts, key))
    return problems, notes
