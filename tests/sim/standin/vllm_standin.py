# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in for ``vllm serve`` on simulated GPU hosts (no GPU, no vLLM).

One standard-library-only file (Python 3.9 or newer; Debian bookworm's
python3 runs it with nothing installed). It answers the parts of vLLM's
OpenAI-compatible HTTP API that the gpufleet.vllm roles and the real
``vllm bench serve`` of vLLM 0.33.0 use, with the request and response
fields that vLLM itself sends, and it behaves like a real server over time:

* It accepts vLLM's command line: ``vllm serve MODEL [vllm args...]``.
  ``--served-model-name`` (one or more), ``--host``, ``--port``,
  ``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``,
  ``--max-model-len``, ``--max-num-seqs``, ``--gpu-memory-utilization`` and
  ``--disable-uvicorn-access-log`` are used; every other vLLM argument is
  accepted and logged as ignored. ``vllm --version`` prints the version.
* Like vLLM, it binds its port at once (so a second server on the same port
  fails fast with "Address already in use") but listens only when the model
  is loaded: during the load a connection is refused. Then ``GET /health``
  answers 200.
* While loading it claims VRAM in the fake NVML state (half at start, all
  when ready), and after SIGTERM or SIGINT it stops listening, frees the VRAM
  gradually over the release delay (half, then none) and exits 0.
* Tokens are streamed at a configured rate per stream with an aggregate cap
  across streams: every running request gets ``r`` tokens/s while
  ``n * r <= cap``, and ``cap / n`` tokens/s each beyond that (``n`` counts
  running sequences; more than ``--max-num-seqs`` requests wait).

Answers right or wrong (the quality gate, module ``vllm_quality_info``):
a completion with ``temperature`` 0 (greedy) is a deterministic function of
the model directory's contents and the prompt, so the same model answers
the same every time and another or damaged one answers differently. As
vLLM does, ``/v1/completions`` answers ``return_token_ids`` (the choice's
``token_ids`` and ``prompt_token_ids``), ``logprobs`` (``text_offset``,
``token_logprobs``, ``tokens``, ``top_logprobs``; the tokens as
``token_id:N`` with ``return_tokens_as_token_ids``) and ``prompt_logprobs``
(a list with None first, then per prompt token ``{"<id>": {"logprob",
"rank", "decoded_token"}}``), each logprob a deterministic function of the
model directory and the tokens; ``prompt_logprobs`` with ``stream`` is
refused with 400, as vLLM refuses it. The fault ``incoherent_venv`` makes
one build answer as a model that lost its weights' meaning: other greedy
answers and a passage's mean negative log-likelihood near ln(vocabulary).

Endpoints: ``GET /health``, ``GET /ping``, ``GET /version``, ``GET /load``,
``GET /v1/models``, ``POST /v1/completions`` (streaming and not),
``POST /v1/chat/completions`` (streaming and not), ``POST /tokenize``,
``POST /detokenize``, ``GET /metrics`` (Prometheus text, vLLM's metric names
with ``model_name`` and ``engine`` labels).

Tokens: the stand-in reads ``MODEL/tokenizer.json`` (as written by
``tests/sim/model/make_model_dir.py``: a WordLevel tokenizer with a
Whitespace pre-tokenizer) and counts prompt tokens exactly as that tokenizer
does; the text it generates is one vocabulary word per token (" word"), so
the client's tokenizer re-encodes N streamed pieces to N tokens. Without a
tokenizer.json it counts whitespace/punctuation pieces.

Every completion produces exactly ``max_tokens`` tokens (finish_reason
``length``). A ``/v1/completions`` request that leaves ``max_tokens`` out
gets vLLM's default of 16 (finish_reason ``length``, as the real engine
answers). Without ``max_tokens`` (null, a chat completion, or a min_tokens
above 16) the simulated model stops (finish_reason
``stop``) after ``VLLM_STANDIN_NATURAL_TOKENS`` tokens or ``min_tokens``,
whichever is larger, unless ``ignore_eos`` is set (then it runs to the
context limit, as vLLM does).

Environment (all optional)::

    VLLM_STANDIN_LOAD_SECONDS=5            time before the port listens
    VLLM_STANDIN_NEVER_READY=0             1: load forever (port never opens)
    VLLM_STANDIN_TOKENS_PER_SECOND=82      decode rate of one stream
    VLLM_STANDIN_MAX_TOKENS_PER_SECOND=2276
                                           aggregate cap over all streams
                                           (the reference host's figure at
                                           high concurrency); 0: no cap
    VLLM_STANDIN_TTFT_SECONDS=0.1          time to first token (base)
    VLLM_STANDIN_PREFILL_TOKENS_PER_SECOND=0
                                           > 0: add prompt_tokens / rate to
                                           the time to first token
    VLLM_STANDIN_NATURAL_TOKENS=16         tokens before EOS when the request
                                           gives no max_tokens
    VLLM_STANDIN_VRAM_MIB=                 MiB claimed per GPU; unset (the
                                           default): like vLLM,
                                           --gpu-memory-utilization (default
                                           0.9) * the GPU's total, 88098 of
                                           97887; 0: no claim at all
    VLLM_STANDIN_GPUS=                     number of GPUs claimed (default:
                                           tensor * pipeline parallel size);
                                           indices from CUDA_VISIBLE_DEVICES
                                           when set, else 0..N-1
    VLLM_STANDIN_RELEASE_SECONDS=1         VRAM release delay after SIGTERM
    VLLM_STANDIN_FAIL_AFTER_REQUESTS=0     N > 0: serve N generation requests,
                                           crash when request N+1 arrives
    VLLM_STANDIN_EXIT_AFTER_SECONDS=0      S > 0: crash S seconds after ready
    VLLM_STANDIN_CRASH_EXIT_CODE=1         exit status of a simulated crash
    VLLM_STANDIN_KV_CACHE_TOKENS=1000000   KV cache size for kv_cache_usage_perc
    VLLM_STANDIN_VERSION=0.33.0            reported by /version and --version
    VLLM_STANDIN_VENV=                     the vLLM environment this server
                                           "runs" (a unit passes its venv):
                                           /version reports the vllm version
                                           installed there, and the log says
                                           which environment was resolved
    VLLM_STANDIN_FAULTS_FILE=/etc/vllm-standin/faults
                                           read at start when it exists:
                                           key=value lines (the table below);
                                           a fault injected on one host
                                           without touching its unit
    VLLM_STANDIN_NEVER_READY_VENV=         a glob: when VLLM_STANDIN_VENV
                                           resolves (links followed) to a
                                           path matching it, load forever;
                                           makes one build fail its
                                           readiness gate while the previous
                                           one still works (rollback tests)
    VLLM_STANDIN_REQUIRE_MODEL_DIR=1       0: do not fail when MODEL is a
                                           missing local path
    FAKE_NVML_STATE=/var/lib/fake-nvml/state
                                           the fake NVML state file

The faults file (``#`` starts a comment). A key ending in ``_venv`` takes
a glob and applies only when VLLM_STANDIN_VENV resolves (links followed) to
a path matching it, so one build fails while the previous one still works
and a rollback onto it succeeds::

    never_ready=1              load forever (as VLLM_STANDIN_NEVER_READY)
    never_ready_venv=GLOB      load forever (the readiness gate fails)
    crash_at_start_venv=GLOB   exit 1 right at start, before binding the port
                               (the unit fails to start)
    no_vram_venv=GLOB          serve normally but claim no VRAM in the fake
                               NVML state (the "VRAM loaded" gate fails)
    vram_held_venv=GLOB        at the stop: the driver keeps the server's
    vram_held_seconds=N        VRAM for N s after it exits, with no process
                               listed (the fake NVML's held_mib; VRAM not
                               freed in time); read again at the stop
    block_link_venv=GLOB       at the stop: a real directory takes the place
    block_link=PATH            of the symbolic link PATH (the link is kept as
                               PATH.standin-blocked): a link switch after the
                               stop fails; read again at the stop
    tamper_venv=GLOB           once ready, append the line
                               "# debug: tampered by the stand-in fault" to
                               <venv>/lib/python3*/site-packages/vllm/__init__.py
                               (unless it is there already): the integrity
                               check fails after the switch
    slow_venv=GLOB             stream at slow_tokens_per_second tokens/s per
    slow_tokens_per_second=N   stream (the benchmark regresses); slow_venv
                               without it is an error
    incoherent_venv=GLOB       answer incoherently: other greedy answers and
                               prompt logprobs near -ln(vocabulary) (the
                               quality gate fails after the switch)
    release_seconds=N          every build: the VRAM release delay after
                               SIGTERM (overrides VLLM_STANDIN_RELEASE_SECONDS;
                               VRAM not freed in time)

A number that is not one, in the environment or the faults file, stops the
stand-in at start with exit status 2 and a message naming it.

A simulated crash does not free its VRAM entries: the fake NVML library
ignores the entries of dead processes, as the driver frees their memory.

Install on a simulated host so that a unit's
``ExecStart=<venv>/bin/vllm serve ...`` runs it::

    python3 vllm_standin.py --standin-install <venv> [--standin-python /usr/bin/python3]

(writes ``<venv>/bin/vllm``, mode 0755, with a ``#!`` line for the given
interpreter, default ``/usr/bin/env python3``), or call ``install(prefix)``.
Note that installing the real vLLM wheel into the same venv replaces
``bin/vllm`` with vLLM's own entry point.
"""

import argparse
import errno
import fcntl
import fnmatch
import glob
import hashlib
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import TCPServer, ThreadingMixIn

STANDIN_VERSION = "0.33.0"
DEFAULT_STATE_PATH = "/var/lib/fake-nvml/state"
DEFAULT_TOTAL_MIB = 97887
# vLLM's default --gpu-memory-utilization
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_MAX_MODEL_LEN = 32768
TAMPER_LINE = "# debug: tampered by the stand-in fault"

LOG = logging.getLogger("vllm.standin")
ACCESS_LOG = logging.getLogger("uvicorn.access")
UVICORN_LOG = logging.getLogger("uvicorn.error")

FALLBACK_WORDS = (
    "hello", "world", "token", "model", "serve", "stream", "value", "light",
    "river", "stone", "cloud", "green", "quiet", "north", "paper", "table",
)

# Buckets of vLLM's time_to_first_token_seconds and e2e_request_latency_seconds
# (vllm/v1/metrics/buckets.py of vLLM 0.33.0).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                640.0, 2560.0)
# vLLM's inter-token latency buckets (also time_per_output_token's)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
               1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# the other request phase histograms (queue, inference, prefill, decode) use E2E_BUCKETS too
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
               30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
               7680.0)


FAULTS_MAX_BYTES = 64 * 1024


def _read_faults(path):
    """key=value lines of the faults file (its first 64 KiB); {} when it does not exist."""
    faults = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(FAULTS_MAX_BYTES)
    except OSError:
        return faults
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            faults[key.strip()] = value.strip()
    return faults


def _venv_vllm_version(venv):
    """The version of the vllm distribution installed in VENV, or None."""
    if not venv:
        return None
    for site in glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")):
        for dist in sorted(glob.glob(os.path.join(site, "vllm-*.dist-info"))):
            name = os.path.basename(dist)[len("vllm-"):-len(".dist-info")]
            if name:
                return name
    return None


class ConfigError(Exception):
    """A setting the stand-in cannot work with."""


def _fault_number(faults, key, default, minimum=0.0):
    """The decimal number KEY of the faults file (DEFAULT when absent)."""
    raw = faults.get(key, "").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError("the faults file sets %s=%r: not a decimal number" % (key, raw))
    if math.isnan(value) or value < minimum or value > 86400:
        raise ConfigError("the faults file sets %s=%r: it must be at least %s and at most 86400"
                          % (key, raw, minimum))
    return value


# ---------------------------------------------------------------------------
# settings


def _env_number(name, default, kind=float, minimum=0):
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = kind(raw.strip())
    except ValueError:
        raise ConfigError("environment variable %s=%r is not a %s number"
                          % (name, raw, "whole" if kind is int else "decimal"))
    if value < minimum:
        raise ConfigError("environment variable %s=%r must be at least %s"
                          % (name, raw, minimum))
    return value


def _env_flag(name, default=False):
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError("environment variable %s=%r is not a boolean (use 1 or 0)" % (name, raw))


def _parse_len(text):
    """vLLM's human-readable lengths: 32768, 32k (x1000), 32K (x1024), 1m, 1M."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*$", str(text))
    if not match:
        raise argparse.ArgumentTypeError("not a length: %r" % (text,))
    number, suffix = float(match.group(1)), match.group(2)
    factor = {"": 1, "k": 1000, "K": 1024, "m": 1000 ** 2, "M": 1024 ** 2,
              "g": 1000 ** 3, "G": 1024 ** 3}[suffix]
    return int(number * factor)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="vllm", add_help=True, allow_abbrev=False,
        description="vLLM stand-in (simulated host): only 'serve' and '--version'.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--standin-install", metavar="PREFIX",
                        help="install this file as PREFIX/bin/vllm and exit")
    parser.add_argument("--standin-python", metavar="INTERPRETER", default="/usr/bin/env python3",
                        help="interpreter for the #! line written by --standin-install")
    parser.add_argument("subcommand", nargs="?", help="serve")
    parser.add_argument("model_tag", nargs="?", help="model path or name")
    parser.add_argument("--model", dest="model_opt")
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--max-model-len", type=_parse_len, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=None)
    parser.add_argument("--disable-uvicorn-access-log", action="store_true")
    return parser


class Settings:
    """Everything the stand-in needs, from the command line and environment."""

    def __init__(self, args, ignored):
        self.model = args.model_opt or args.model_tag
        if not self.model:
            raise ConfigError("no model given: use 'vllm serve MODEL_PATH [options]'")
        self.served_names = list(args.served_model_name or [self.model])
        self.host = args.host
        self.port = args.port
        self.tp = args.tensor_parallel_size
        self.pp = args.pipeline_parallel_size
        if self.tp < 1 or self.pp < 1:
            raise ConfigError("--tensor-parallel-size and --pipeline-parallel-size must be at least 1")
        self.max_model_len_arg = args.max_model_len
        self.max_num_seqs = max(1, args.max_num_seqs)
        self.gpu_memory_utilization = args.gpu_memory_utilization
        self.access_log = not args.disable_uvicorn_access_log
        self.ignored = ignored

        self.load_seconds = _env_number("VLLM_STANDIN_LOAD_SECONDS", 5.0)
        self.never_ready = _env_flag("VLLM_STANDIN_NEVER_READY")
        self.tokens_per_second = _env_number("VLLM_STANDIN_TOKENS_PER_SECOND", 82.0, minimum=0.001)
        self.max_tokens_per_second = _env_number("VLLM_STANDIN_MAX_TOKENS_PER_SECOND", 2276.0)
        self.ttft_seconds = _env_number("VLLM_STANDIN_TTFT_SECONDS", 0.1)
        self.prefill_tokens_per_second = _env_number("VLLM_STANDIN_PREFILL_TOKENS_PER_SECOND", 0.0)
        self.natural_tokens = _env_number("VLLM_STANDIN_NATURAL_TOKENS", 16, kind=int, minimum=1)
        vram = os.environ.get("VLLM_STANDIN_VRAM_MIB", "").strip()
        self.vram_mib = None if vram == "" else _env_number("VLLM_STANDIN_VRAM_MIB", 0, kind=int)
        self.gpus = _env_number("VLLM_STANDIN_GPUS", self.tp * self.pp, kind=int, minimum=1)
        self.release_seconds = _env_number("VLLM_STANDIN_RELEASE_SECONDS", 1.0)
        self.fail_after_requests = _env_number("VLLM_STANDIN_FAIL_AFTER_REQUESTS", 0, kind=int)
        self.exit_after_seconds = _env_number("VLLM_STANDIN_EXIT_AFTER_SECONDS", 0.0)
        self.crash_exit_code = _env_number("VLLM_STANDIN_CRASH_EXIT_CODE", 1, kind=int)
        self.kv_cache_tokens = _env_number("VLLM_STANDIN_KV_CACHE_TOKENS", 1000000, kind=int, minimum=1)
        self.venv = os.environ.get("VLLM_STANDIN_VENV", "").strip()
        self.venv_resolved = os.path.realpath(self.venv) if self.venv else ""
        self.version = (os.environ.get("VLLM_STANDIN_VERSION", "").strip()
                        or _venv_vllm_version(self.venv_resolved) or STANDIN_VERSION)
        self.faults_path = os.environ.get("VLLM_STANDIN_FAULTS_FILE", "/etc/vllm-standin/faults")
        faults = _read_faults(self.faults_path)
        if faults.get("never_ready", "0").strip().lower() in ("1", "true", "yes", "on"):
            self.never_ready = True
        never_glob = (os.environ.get("VLLM_STANDIN_NEVER_READY_VENV", "").strip()
                      or faults.get("never_ready_venv", "").strip())
        if self._venv_matches(never_glob):
            self.never_ready = True
        # faults that hit one build only (the previous one still works, so a rollback onto it succeeds)
        self.crash_at_start = self._venv_matches(faults.get("crash_at_start_venv", "").strip())
        self.no_vram = self._venv_matches(faults.get("no_vram_venv", "").strip())
        self.tamper = self._venv_matches(faults.get("tamper_venv", "").strip())
        self.incoherent = self._venv_matches(faults.get("incoherent_venv", "").strip())
        slow_glob = faults.get("slow_venv", "").strip()
        if slow_glob:
            slow_rate = _fault_number(faults, "slow_tokens_per_second", None, minimum=0.001)
            if slow_rate is None:
                raise ConfigError("the faults file sets slow_venv=%s but no slow_tokens_per_second=N "
                                  "(the decode rate of the slow build)" % slow_glob)
            if self._venv_matches(slow_glob):
                self.tokens_per_second = slow_rate
        self.release_seconds = _fault_number(faults, "release_seconds", self.release_seconds)
        self.stop_faults(faults)  # a bad value stops the stand-in at start, not only at the stop
        self.faults = faults
        self.require_model_dir = _env_flag("VLLM_STANDIN_REQUIRE_MODEL_DIR", True)
        self.state_path = os.environ.get("FAKE_NVML_STATE") or DEFAULT_STATE_PATH
        self.max_model_len = None  # resolved from the model's config.json

    def stop_faults(self, faults=None):
        """The faults that act at the stop: ``(vram_held_seconds or None, block_link or None)``.

        Read from the faults file again at the stop (FAULTS None), so a fault
        written while this build serves hits its stop.
        """
        if faults is None:
            faults = _read_faults(self.faults_path)
        held = None
        held_glob = faults.get("vram_held_venv", "").strip()
        if held_glob:
            held = _fault_number(faults, "vram_held_seconds", None)
            if held is None:
                raise ConfigError("the faults file sets vram_held_venv=%s but no vram_held_seconds=N "
                                  "(how long the driver keeps the memory)" % held_glob)
            if not self._venv_matches(held_glob):
                held = None
        link = None
        link_glob = faults.get("block_link_venv", "").strip()
        if link_glob:
            link = faults.get("block_link", "").strip()
            if (not re.match(r"/[A-Za-z0-9_.@+-][A-Za-z0-9_./@+-]{0,254}\Z", link) or "/../" in link + "/"
                    or link.endswith("/")):
                raise ConfigError("the faults file sets block_link_venv=%s but block_link=%r is not an "
                                  "absolute path (the link to block)" % (link_glob, link))
            if not self._venv_matches(link_glob):
                link = None
        return held, link

    def _venv_matches(self, pattern):
        """True when VLLM_STANDIN_VENV resolves (links followed) to a path matching the glob PATTERN."""
        return bool(pattern and self.venv_resolved and fnmatch.fnmatch(self.venv_resolved, pattern))

    def gpu_indices(self):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        if visible:
            try:
                indices = [int(x) for x in visible.split(",") if x.strip() != ""]
            except ValueError:
                indices = []
            if indices:
                return indices[: self.gpus]
        return list(range(self.gpus))

    def default_max_model_len(self):
        """max_position_embeddings from MODEL/config.json (or its text_config)."""
        try:
            with open(os.path.join(self.model, "config.json"), encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError):
            return DEFAULT_MAX_MODEL_LEN
        for section in (config, config.get("text_config") or {}):
            value = section.get("max_position_embeddings") if isinstance(section, dict) else None
            if isinstance(value, int) and value > 0:
                return value
        return DEFAULT_MAX_MODEL_LEN


# ---------------------------------------------------------------------------
# fake NVML state (same format and locking as tests/sim/fakenvml/state.py)


class FakeNvmlState:
    """Minimal writer of the fake NVML state file.

    ``key=value`` lines; the per-GPU key ``gpu.<i>.procs=PID:MIB[,PID:MIB]``
    lists compute processes. Updates are read-modify-write under an
    exclusive flock on ``<state>.lock``, written to a temporary file in the
    same directory and renamed over the state file.
    """

    def __init__(self, path):
        self.path = path

    def _read(self):
        data = {}
        try:
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    line = line.strip()
                    if not line or line.startswith("#") or "=" not in line:
                        continue
                    key, value = line.split("=", 1)
                    data[key.strip()] = value.strip()
        except FileNotFoundError:
            pass
        return data

    def _write(self, data):
        directory = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".state.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write("# fake NVML state; see tests/sim/fakenvml/state.py\n")
                for key, value in data.items():
                    handle.write("%s=%s\n" % (key, value))
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def update(self, mutate):
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            mutate(data)
            self._write(data)
            return data

    @staticmethod
    def _procs(text):
        procs = []
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            pid, dummy, mib = item.partition(":")
            try:
                procs.append((int(pid), int(mib or 0)))
            except ValueError:
                continue
        return procs

    @staticmethod
    def _format(procs):
        return ",".join("%d:%d" % (pid, mib) for pid, mib in procs)

    def claim(self, pid, mib, gpus):
        def mutate(data):
            for i in gpus:
                key = "gpu.%d.procs" % i
                procs = [p for p in self._procs(data.get(key)) if p[0] != pid]
                procs.append((pid, int(mib)))
                data[key] = self._format(procs)
        self.update(mutate)

    def hold(self, mib, seconds, gpus):
        """The driver keeps MIB MiB on GPUS for SECONDS from now, with no process (held_mib, held_until)."""
        until = int(math.ceil(time.time() + seconds))

        def mutate(data):
            for i in gpus:
                data["gpu.%d.held_mib" % i] = str(int(mib))
                data["gpu.%d.held_until" % i] = str(until)
        self.update(mutate)

    def release(self, pid):
        def mutate(data):
            for key in list(data):
                if key.startswith("gpu.") and key.endswith(".procs"):
                    procs = [p for p in self._procs(data[key]) if p[0] != pid]
                    if procs:
                        data[key] = self._format(procs)
                    else:
                        del data[key]
        self.update(mutate)

    def total_mib(self, index):
        data = self._read()
        for key in ("gpu.%d.total_mib" % index, "default.total_mib"):
            try:
                return int(data[key])
            except (KeyError, ValueError):
                continue
        return DEFAULT_TOTAL_MIB


# ---------------------------------------------------------------------------
# the simulated model's answers (greedy completions and logprobs)


MODEL_KEY_MAX_FILES = 256
MODEL_KEY_MAX_BYTES = 64 * 1024 * 1024


#: the files a model's answers follow: its weights and its tokenizer. Not its configuration, which a policy edits in
#: place (the SM120 role, an operator by hand), nor the backups an edit leaves beside it: hosts under the same policy,
#: or edited differently, answer alike
MODEL_KEY_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".model", ".tiktoken")
MODEL_KEY_NAMES = frozenset(("vocab.json", "vocab.txt", "merges.txt", "special_tokens_map.json", "added_tokens.json"))


def _model_key_file(name):
    return (name.endswith(MODEL_KEY_SUFFIXES) or name in MODEL_KEY_NAMES
            or (name.startswith("tokenizer") and name.endswith((".json", ".txt"))))


def model_key(model, incoherent=False):
    """A sha256 of the model directory's contents (its top-level weight and tokenizer files, links followed; names
    and sizes only beyond 64 MiB read), or of the model's name when it is no directory; another one for an incoherent
    build."""
    digest = hashlib.sha256(b"incoherent\n" if incoherent else b"model\n")
    try:
        names = sorted(os.listdir(model))[:MODEL_KEY_MAX_FILES] if os.path.isdir(model) else None
    except OSError:
        names = None
    if names is None:
        digest.update(str(model).encode("utf-8", "replace"))
        return digest.hexdigest()
    budget = MODEL_KEY_MAX_BYTES
    for name in names:
        path = os.path.join(model, name)
        if not _model_key_file(name) or not os.path.isfile(path):
            continue
        size = os.path.getsize(path)
        digest.update(("%s %d\n" % (name, size)).encode("utf-8", "replace"))
        if size <= budget:
            budget -= size
            try:
                with open(path, "rb") as handle:
                    digest.update(handle.read(size))
            except OSError:
                pass
    return digest.hexdigest()


def _unit(*parts):
    """A number in [0, 1) that is a deterministic function of PARTS."""
    text = "\0".join(str(part) for part in parts).encode("utf-8", "replace")
    return int(hashlib.sha256(text).hexdigest()[:13], 16) / float(16 ** 13)


# ---------------------------------------------------------------------------
# tokenizer


_PIECE = re.compile(r"\w+|[^\w\s]+")
_WORD = re.compile(r"^[A-Za-z]+$")


class SimTokenizer:
    """Encodes like a WordLevel tokenizer.json with a Whitespace pre-tokenizer."""

    def __init__(self, model_path):
        self.vocab = {}
        self.id_to_token = {}
        self.special = {}
        self.unk_id = None
        self.split_whitespace_only = False
        self.source = "built-in word list"
        path = os.path.join(model_path, "tokenizer.json")
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            self._load(data)
            self.source = path
        except (OSError, ValueError, TypeError, AttributeError):
            self.vocab = dict((w, i) for i, w in enumerate(FALLBACK_WORDS))
            self.unk_id = len(FALLBACK_WORDS)
            self.id_to_token = dict((i, w) for w, i in self.vocab.items())
            self.id_to_token[self.unk_id] = "<unk>"
        specials = sorted(self.special, key=len, reverse=True)
        self._special_re = re.compile("(%s)" % "|".join(re.escape(s) for s in specials)) if specials else None
        self.words = [(i, t) for i, t in sorted(self.id_to_token.items())
                      if t not in self.special and _WORD.match(t)]
        if not self.words:
            self.words = [(self.unk_id or 0, w) for w in FALLBACK_WORDS]

    def _load(self, data):
        model = data.get("model") or {}
        vocab = model.get("vocab")
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            vocab = dict((entry[0], i) for i, entry in enumerate(vocab))
        if not isinstance(vocab, dict):
            raise ValueError("tokenizer.json has no vocabulary")
        self.vocab = dict(vocab)
        for added in data.get("added_tokens") or []:
            self.vocab[added["content"]] = added["id"]
            if added.get("special", False):
                self.special[added["content"]] = added["id"]
        self.id_to_token = dict((i, t) for t, i in self.vocab.items())
        unk = model.get("unk_token")
        if unk in self.vocab:
            self.unk_id = self.vocab[unk]
        pre = data.get("pre_tokenizer") or {}
        self.split_whitespace_only = pre.get("type") == "WhitespaceSplit"

    def _pieces(self, text):
        return text.split() if self.split_whitespace_only else _PIECE.findall(text)

    def encode(self, text):
        ids = []
        parts = self._special_re.split(text) if self._special_re else [text]
        for part in parts:
            if not part:
                continue
            if part in self.special:
                ids.append(self.special[part])
                continue
            for piece in self._pieces(part):
                token_id = self.vocab.get(piece, self.unk_id)
                ids.append(0 if token_id is None else token_id)
        return ids

    def decode(self, ids):
        return " ".join(self.id_to_token.get(int(i), "") for i in ids)

    def word(self, k):
        """(token id, text) of the k-th generated token: one vocabulary word."""
        token_id, text = self.words[k % len(self.words)]
        return token_id, " " + text


# ---------------------------------------------------------------------------
# scheduler and metrics


class Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value):
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += 1
        self.sum += value


def request_tokens_buckets(max_model_len):
    """vLLM's 1-2-5 buckets of the request token histograms, up to max_model_len."""
    buckets, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10 ** exponent
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


# vLLM's FinishReason values, as request_success's finished_reason label
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


class Scheduler:
    """Admission (max_num_seqs) and the shared decode rate, plus counters.

    ``token_interval()`` is the time between two tokens of one stream:
    ``max(1/r, n/cap)`` for ``n`` running sequences, so the streams together
    produce ``min(n*r, cap)`` tokens per second.

    ``running``/``waiting`` count HTTP requests (``/load``); the metrics count
    engine requests as vLLM does (a request with n=2 or two prompts is two):
    ``sequences`` running and ``waiting_sequences`` queued.
    """

    def __init__(self, settings, stopping):
        self.settings = settings
        self.rate = settings.tokens_per_second
        self.cap = settings.max_tokens_per_second
        self.max_num_seqs = settings.max_num_seqs
        self.kv_cache_tokens = settings.kv_cache_tokens
        self.stopping = stopping
        self.cond = threading.Condition()
        self.created = time.time()
        self.running = 0
        self.waiting = 0
        self.sequences = 0
        self.waiting_sequences = 0
        self.kv_tokens = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.success = dict((reason, 0) for reason in FINISH_REASONS)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.tpot = Histogram(ITL_BUCKETS)
        self.phases = dict((name, Histogram(E2E_BUCKETS)) for name in ("queue", "inference", "prefill", "decode"))
        self.request_tokens = None

    def admit(self, sequences, prompt_tokens):
        with self.cond:
            self.waiting += 1
            self.waiting_sequences += sequences
            try:
                while self.running >= self.max_num_seqs and not self.stopping.is_set():
                    self.cond.wait(0.5)
            finally:
                self.waiting -= 1
                self.waiting_sequences -= sequences
            if self.stopping.is_set():
                return False
            self.running += 1
            self.sequences += sequences
            self.kv_tokens += prompt_tokens
            self.prompt_tokens_total += prompt_tokens
            return True

    def _token_histograms(self):
        if self.request_tokens is None:
            buckets = request_tokens_buckets(self.settings.max_model_len or DEFAULT_MAX_MODEL_LEN)
            self.request_tokens = {"prompt": Histogram(buckets), "generation": Histogram(buckets)}
        return self.request_tokens

    def finish(self, sequences, kv_tokens, reason, ttft, e2e, timing=None):
        """One request ends. TIMING: queue, prefill and decode seconds, tokens produced per sequence and
        prompt tokens per sequence (as vLLM records them per engine request)."""
        with self.cond:
            self.running -= 1
            self.sequences -= sequences
            self.kv_tokens -= kv_tokens
            self.success[reason] = self.success.get(reason, 0) + sequences
            for dummy in range(sequences):
                if ttft is not None:
                    self.ttft.observe(ttft)
                self.e2e.observe(e2e)
                if timing:
                    self.phases["queue"].observe(timing["queue"])
                    self.phases["prefill"].observe(timing["prefill"])
                    self.phases["decode"].observe(timing["decode"])
                    self.phases["inference"].observe(timing["prefill"] + timing["decode"])
                    if timing["tokens"] > 1:
                        self.tpot.observe(timing["decode"] / (timing["tokens"] - 1))
                    histograms = self._token_histograms()
                    histograms["prompt"].observe(timing["prompt_tokens"])
                    histograms["generation"].observe(timing["tokens"])
            self.cond.notify()

    def generated(self, tokens, interval=None):
        """TOKENS more tokens; INTERVAL: seconds since the previous token of those sequences (the inter-token
        latency, one observation per sequence)."""
        with self.cond:
            self.generation_tokens_total += tokens
            self.kv_tokens += tokens
            if interval is not None:
                for dummy in range(tokens):
                    self.itl.observe(interval)

    def token_interval(self):
        n = max(1, self.sequences)
        interval = 1.0 / self.rate
        if self.cap > 0:
            interval = max(interval, n / self.cap)
        return interval

    def metrics_text(self, model_name, version):
        """/metrics as vLLM's prometheus_client registry writes it: HELP, TYPE, samples with the labels sorted by
        name, counters and histograms with their _created sample."""
        base = {"engine": "0", "model_name": model_name}
        with self.cond:
            lines = []

            def label_text(extra):
                labels = dict(base, **extra)
                escaped = dict((key, value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"'))
                               for key, value in labels.items())
                return ",".join('%s="%s"' % (key, escaped[key]) for key in sorted(escaped))

            def metric(name, kind, help_text, samples, family=None):
                lines.append("# HELP %s %s" % (family or name, help_text))
                lines.append("# TYPE %s %s" % (family or name, kind))
                for suffix, extra, value in samples:
                    lines.append("%s%s{%s} %s" % (name, suffix, label_text(extra), _num(value)))

            def created(name, help_text, extras):
                # prometheus_client writes a counter's or histogram's _created samples as a gauge family after it
                metric(name + "_created", "gauge", help_text, [("", extra, self.created) for extra in extras])

            def counter(name, help_text, values):
                # the TYPE line names the counter with _total, as prometheus_client's text format does
                metric(name, "counter", help_text, [("_total", extra, value) for extra, value in values],
                       family=name + "_total")
                created(name, help_text, [extra for extra, dummy in values])

            def histogram(name, help_text, hist):
                samples = []
                for bound, count in zip(hist.buckets, hist.counts):
                    samples.append(("_bucket", {"le": _num(float(bound))}, count))
                samples.append(("_bucket", {"le": "+Inf"}, hist.total))
                samples.append(("_count", {}, hist.total))
                samples.append(("_sum", {}, hist.sum))
                metric(name, "histogram", help_text, samples)
                created(name, help_text, [{}])

            metric("vllm:num_requests_running", "gauge",
                   "Number of requests in model execution batches.", [("", {}, self.sequences)])
            metric("vllm:num_requests_waiting", "gauge",
                   "Number of requests waiting to be processed.", [("", {}, self.waiting_sequences)])
            metric("vllm:num_requests_waiting_by_reason", "gauge",
                   "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
                   "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
                   "status). Sum of all reasons equals vllm:num_requests_waiting.",
                   [("", {"reason": "capacity"}, self.waiting_sequences), ("", {"reason": "deferred"}, 0)])
            metric("vllm:kv_cache_usage_perc", "gauge",
                   "KV-cache usage. 1 means 100 percent usage.",
                   [("", {}, min(1.0, float(self.kv_tokens) / self.kv_cache_tokens))])
            counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", [({}, 0)])
            counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [({}, self.prompt_tokens_total)])
            counter("vllm:generation_tokens", "Number of generation tokens processed.",
                    [({}, self.generation_tokens_total)])
            counter("vllm:request_success", "Count of successfully processed requests.",
                    [({"finished_reason": reason}, self.success.get(reason, 0)) for reason in FINISH_REASONS])
            histograms = self._token_histograms()
            histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", histograms["prompt"])
            histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                      histograms["generation"])
            histogram("vllm:time_to_first_token_seconds",
                      "Histogram of time to first token in seconds.", self.ttft)
            histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl)
            histogram("vllm:request_time_per_output_token_seconds",
                      "Histogram of time_per_output_token_seconds per request.", self.tpot)
            histogram("vllm:e2e_request_latency_seconds",
                      "Histogram of e2e request latency in seconds.", self.e2e)
            histogram("vllm:request_queue_time_seconds",
                      "Histogram of time spent in WAITING phase for request.", self.phases["queue"])
            histogram("vllm:request_inference_time_seconds",
                      "Histogram of time spent in RUNNING phase for request.", self.phases["inference"])
            histogram("vllm:request_prefill_time_seconds",
                      "Histogram of time spent in PREFILL phase for request.", self.phases["prefill"])
            histogram("vllm:request_decode_time_seconds",
                      "Histogram of time spent in DECODE phase for request.", self.phases["decode"])
            metric("vllm:standin_info", "gauge", "vLLM stand-in build information.",
                   [("", {"version": version}, 1)])
        return "\n".join(lines) + "\n"


def _num(value):
    if isinstance(value, float):
        return repr(value)
    return "%d.0" % value if isinstance(value, int) else str(value)


# ---------------------------------------------------------------------------
# HTTP


class ClientGone(Exception):
    """The client closed the connection or the server is stopping."""


class RequestError(Exception):
    def __init__(self, status, message, err_type="BadRequestError", param=None):
        Exception.__init__(self, message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def _dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class StandinHTTPServer(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 2048  # uvicorn's default backlog

    def __init__(self, address, family, app):
        self.address_family = family
        self.app = app
        HTTPServer.__init__(self, address, Handler, bind_and_activate=False)

    def server_bind(self):
        # HTTPServer.server_bind looks the host name up (socket.getfqdn), which
        # can hang for seconds on a host without DNS: bind only.
        TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        LOG.debug("connection from %s ended with an error", client_address, exc_info=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = 600  # idle keep-alive connections

    # -- plumbing -------------------------------------------------------------

    @property
    def app(self):
        return self.server.app

    def log_request(self, code="-", size="-"):
        if not self.app.settings.access_log:
            return
        try:
            phrase = self.responses[int(code)][0]
        except (KeyError, ValueError, TypeError):
            phrase = ""
        ACCESS_LOG.info('%s:%s - "%s" %s %s', self.client_address[0], self.client_address[1],
                        self.requestline, code, phrase)

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        LOG.debug("%s - %s", self.address_string(), format % args)

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _json_body(self):
        raw = self._read_body()
        try:
            body = json.loads(raw.decode("utf-8") or "null")
        except (UnicodeDecodeError, ValueError) as exc:
            raise RequestError(400, "The request body is not valid JSON: %s" % exc)
        if not isinstance(body, dict):
            raise RequestError(400, "The request body must be a JSON object.")
        return body

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else body.encode("utf-8")
        self.send_response(status)
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_json(self, status, obj):
        self._send(status, _dumps(obj))

    def _send_error(self, exc):
        self._send_json(exc.status, {"error": {"message": exc.message, "type": exc.err_type,
                                               "param": exc.param, "code": exc.status}})

    def _start_stream(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _chunk(self, text):
        if self.app.stopping.is_set():
            raise ClientGone()
        data = text.encode("utf-8")
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError:
            raise ClientGone()

    def _end_stream(self):
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            raise ClientGone()

    # -- routing --------------------------------------------------------------

    ROUTES = {
        ("GET", "/health"): "health",
        ("GET", "/ping"): "health",
        ("POST", "/ping"): "health",
        ("GET", "/version"): "version",
        ("GET", "/load"): "load",
        ("GET", "/v1/models"): "models",
        ("GET", "/metrics"): "metrics",
        ("POST", "/v1/completions"): "completions",
        ("POST", "/v1/chat/completions"): "chat",
        ("POST", "/tokenize"): "tokenize",
        ("POST", "/detokenize"): "detokenize",
    }

    def _dispatch(self):
        path = self.path.split("?", 1)[0]
        if path != "/" and path.endswith("/"):
            path = path.rstrip("/")
        name = self.ROUTES.get((self.command, path))
        if name is None:
            if any(p == path for (dummy, p) in self.ROUTES):
                self._read_body()
                self._send_json(405, {"detail": "Method Not Allowed"})
            else:
                self._read_body()
                self._send_json(404, {"detail": "Not Found"})
            return
        try:
            getattr(self, "do_route_" + name)()
        except RequestError as exc:
            self._send_error(exc)
        except ClientGone:
            self.close_connection = True

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self._dispatch()

    def do_POST(self):  # noqa: N802
        self._dispatch()

    # -- simple endpoints -----------------------------------------------------

    def do_route_health(self):
        self._read_body()
        self._send(200, b"", content_type=None)  # like vLLM: empty body, no content type

    def do_route_version(self):
        self._send_json(200, {"version": self.app.settings.version})

    def do_route_load(self):
        self._send_json(200, {"server_load": self.app.scheduler.running + self.app.scheduler.waiting})

    def do_route_models(self):
        settings = self.app.settings
        created = int(time.time())
        data = []
        for name in settings.served_names:
            data.append({
                "id": name, "object": "model", "created": created, "owned_by": "vllm",
                "root": settings.model, "parent": None, "max_model_len": settings.max_model_len,
                "permission": [{
                    "id": "modelperm-%s" % uuid.uuid4().hex, "object": "model_permission",
                    "created": created, "allow_create_engine": False, "allow_sampling": True,
                    "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                    "allow_fine_tuning": False, "organization": "*", "group": None,
                    "is_blocking": False,
                }],
            })
        self._send_json(200, {"object": "list", "data": data})

    def do_route_metrics(self):
        text = self.app.scheduler.metrics_text(self.app.settings.served_names[0], self.app.settings.version)
        self._send(200, text, content_type="text/plain; version=0.0.4; charset=utf-8")

    def do_route_tokenize(self):
        body = self._json_body()
        self.app.check_model(body.get("model"))
        if "messages" in body:
            text = _messages_text(body.get("messages"))
        else:
            text = body.get("prompt")
            if not isinstance(text, str):
                raise RequestError(400, "'prompt' must be a string.", param="prompt")
        tokens = self.app.tokenizer.encode(text)
        result = {"count": len(tokens), "max_model_len": self.app.settings.max_model_len, "tokens": tokens,
                  "token_strs": None}
        if body.get("return_token_strs"):
            result["token_strs"] = [self.app.tokenizer.id_to_token.get(t, "") for t in tokens]
        self._send_json(200, result)

    def do_route_detokenize(self):
        body = self._json_body()
        self.app.check_model(body.get("model"))
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) and t >= 0 for t in tokens):
            raise RequestError(400, "'tokens' must be a list of non-negative integers.", param="tokens")
        self._send_json(200, {"prompt": self.app.tokenizer.decode(tokens)})

    # -- generation -----------------------------------------------------------

    def do_route_completions(self):
        body = self._json_body()
        self.app.count_generation_request()
        model = self.app.check_model(body.get("model"))
        prompts = _prompt_list(body.get("prompt"))
        prompt_lens = [len(p) if isinstance(p, list) else len(self.app.tokenizer.encode(p)) for p in prompts]
        job = Generation(self.app, body, prompt_lens, _completion_max_tokens(body))
        prompt_ids = [p if isinstance(p, list) else self.app.tokenizer.encode(p) for p in prompts]
        _check_logprob_fields(body)
        if body.get("temperature") == 0 and not isinstance(body.get("temperature"), bool):
            per_prompt = job.choices // len(prompts)
            job.greedy = [",".join(str(t) for t in prompt_ids[i // per_prompt]) for i in range(job.choices)]
        if body.get("stream"):
            self._stream_completion(job, model, body)
        else:
            job.run(None)
            choices = [{"index": i, "text": job.texts[i], "logprobs": None, "finish_reason": job.finish_reason,
                        "stop_reason": None, "prompt_logprobs": None} for i in range(job.choices)]
            for i, choice in enumerate(choices):
                _quality_fields(self.app, body, choice, prompt_ids[i * len(prompts) // job.choices],
                                job.token_ids[i])
            self._send_json(200, {
                "id": "cmpl-%s" % uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
                "model": model, "choices": choices, "service_tier": None, "system_fingerprint": None,
                "usage": job.usage(), "kv_transfer_params": None})

    def _stream_completion(self, job, model, body):
        include_usage, continuous = _usage_options(body)
        request_id = "cmpl-%s" % uuid.uuid4().hex
        created = int(time.time())
        self._start_stream()

        def on_step(step, pieces, finished):
            for index, (_token_id, text) in enumerate(pieces):
                chunk = {"id": request_id, "object": "text_completion", "created": created, "model": model,
                         "choices": [{"index": index, "text": text, "logprobs": None,
                                      "finish_reason": job.finish_reason if finished else None,
                                      "stop_reason": None}]}
                if continuous:
                    chunk["usage"] = job.usage(step)
                self._chunk("data: %s\n\n" % _dumps(chunk))

        job.run(on_step)
        if include_usage:
            self._chunk("data: %s\n\n" % _dumps({
                "id": request_id, "object": "text_completion", "created": created, "model": model,
                "choices": [], "usage": job.usage()}))
        self._chunk("data: [DONE]\n\n")
        self._end_stream()

    def do_route_chat(self):
        body = self._json_body()
        self.app.count_generation_request()
        model = self.app.check_model(body.get("model"))
        text = _messages_text(body.get("messages"))
        max_tokens = body.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        job = Generation(self.app, body, [len(self.app.tokenizer.encode(text))], max_tokens)
        if body.get("stream"):
            self._stream_chat(job, model, body)
        else:
            job.run(None)
            choices = [{"index": i,
                        "message": {"role": "assistant", "content": job.texts[i], "reasoning_content": None,
                                    "tool_calls": []},
                        "logprobs": None, "finish_reason": job.finish_reason, "stop_reason": None}
                       for i in range(job.choices)]
            self._send_json(200, {
                "id": "chatcmpl-%s" % uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": choices, "service_tier": None, "system_fingerprint": None,
                "usage": job.usage(), "prompt_logprobs": None, "kv_transfer_params": None})

    def _stream_chat(self, job, model, body):
        include_usage, continuous = _usage_options(body)
        request_id = "chatcmpl-%s" % uuid.uuid4().hex
        created = int(time.time())
        self._start_stream()

        def chunk(choices, usage=None):
            obj = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": choices}
            if usage is not None:
                obj["usage"] = usage
            self._chunk("data: %s\n\n" % _dumps(obj))

        def on_step(step, pieces, finished):
            if step == 1:
                for index in range(job.choices):
                    chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                            "logprobs": None, "finish_reason": None}],
                          job.usage(0) if continuous else None)
            for index, (_token_id, text) in enumerate(pieces):
                chunk([{"index": index, "delta": {"content": text}, "logprobs": None,
                        "finish_reason": job.finish_reason if finished else None}],
                      job.usage(step) if continuous else None)

        job.run(on_step)
        if include_usage:
            chunk([], job.usage())
        self._chunk("data: [DONE]\n\n")
        self._end_stream()


def _usage_options(body):
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        options = {}
    include = bool(options.get("include_usage"))
    return include, include and bool(options.get("continuous_usage_stats"))


#: vLLM's default max_tokens of /v1/completions (a field default of its request model): a request that leaves the
#: field out gets 16 tokens and ends with finish_reason "length", as the real engine does
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


def _completion_max_tokens(body):
    """max_tokens of a /v1/completions body: vLLM's default 16 when the field is left out (an explicit null, or a
    min_tokens above 16, keeps the simulated model's natural stop: the stand-in is lenient where vLLM answers 400)."""
    if "max_tokens" in body:
        return body["max_tokens"]
    min_tokens = body.get("min_tokens")
    if isinstance(min_tokens, int) and not isinstance(min_tokens, bool) and min_tokens > COMPLETIONS_DEFAULT_MAX_TOKENS:
        return None
    return COMPLETIONS_DEFAULT_MAX_TOKENS


def _check_logprob_fields(body):
    """vLLM's checks of logprobs and prompt_logprobs (a RequestError of 400, with vLLM's words)."""
    for name in ("prompt_logprobs", "logprobs"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < -1):
            raise RequestError(400, "`%s` must be a positive value or -1." % name, param=name)
    if body.get("prompt_logprobs") is not None and body.get("stream") and body["prompt_logprobs"] != 0:
        raise RequestError(400, "`prompt_logprobs` are not available when `stream=True`.", param="prompt_logprobs")


def _quality_fields(app, body, choice, prompt_ids, token_ids):
    """A non-streamed completion choice's return_token_ids, logprobs and prompt_logprobs, in vLLM's shapes."""
    if body.get("return_token_ids"):
        choice["token_ids"] = list(token_ids)
        choice["prompt_token_ids"] = list(prompt_ids)
    if body.get("logprobs") is not None:
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        tokens = ["token_id:%d" % t if as_ids else " " + app.tokenizer.id_to_token.get(t, "") for t in token_ids]
        offsets, at = [], 0
        for token in tokens:
            offsets.append(at)
            at += len(token)
        choice["logprobs"] = {"text_offset": offsets, "token_logprobs": [-0.05] * len(tokens), "tokens": tokens,
                              "top_logprobs": [{token: -0.05} for token in tokens]}
    if body.get("prompt_logprobs") is not None:
        entries = [None]
        for position in range(1, len(prompt_ids)):
            token_id = prompt_ids[position]
            entries.append({str(token_id): {
                "logprob": app.prompt_logprob(prompt_ids[position - 1], token_id, position), "rank": 1,
                "decoded_token": app.tokenizer.id_to_token.get(token_id, "")}})
        choice["prompt_logprobs"] = entries


def _prompt_list(prompt):
    """The prompts of a completion request: str, [str], [int] or [[int]]."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return [prompt]
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return list(prompt)
    raise RequestError(400, "'prompt' must be a string, a list of strings, a list of token ids "
                            "or a list of lists of token ids.", param="prompt")


def _messages_text(messages):
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list.", param="messages")
    parts = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(item.get("text", "") for item in content
                         if isinstance(item, dict) and item.get("type") == "text")
    return "\n".join(parts)


class Generation:
    """One generation request: validation, admission, paced token steps."""

    def __init__(self, app, body, prompt_lens, max_tokens):
        settings = app.settings
        self.app = app
        n = body.get("n", 1)
        if n is None:
            n = 1
        if not isinstance(n, int) or n < 1:
            raise RequestError(400, "n must be at least 1, got %r." % (n,), param="n")
        self.choices = len(prompt_lens) * n
        self.prompt_tokens = sum(prompt_lens) * n
        longest = max(prompt_lens)
        if longest > settings.max_model_len:
            raise RequestError(400, "This model's maximum context length is %d tokens. However, your request "
                                    "has %d input tokens. Please reduce the length of the input prompt."
                               % (settings.max_model_len, longest), param="prompt")
        min_tokens = body.get("min_tokens") or 0
        if not isinstance(min_tokens, int) or min_tokens < 0:
            raise RequestError(400, "min_tokens must be greater than or equal to 0, got %r." % (min_tokens,),
                               param="min_tokens")
        room = settings.max_model_len - longest
        if max_tokens is None:
            if body.get("ignore_eos"):
                self.tokens, self.finish_reason = room, "length"
            else:
                natural = max(settings.natural_tokens, min_tokens)
                self.tokens, self.finish_reason = min(natural, room), ("stop" if natural <= room else "length")
        else:
            if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
                raise RequestError(400, "max_tokens must be at least 1, got %r." % (max_tokens,),
                                   param="max_tokens")
            if max_tokens > room:
                raise RequestError(400, "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's "
                                        "maximum context length is %d tokens and your request has %d input "
                                        "tokens (%d > %d - %d)." % (max_tokens, settings.max_model_len, longest,
                                                                    max_tokens, settings.max_model_len, longest),
                                   param="max_tokens")
            if min_tokens > max_tokens:
                raise RequestError(400, "min_tokens must be less than or equal to max_tokens=%d, got %d."
                                   % (max_tokens, min_tokens), param="min_tokens")
            self.tokens, self.finish_reason = max_tokens, "length"
        self.produced = 0
        self.texts = [""] * self.choices
        self.token_ids = [[] for dummy in range(self.choices)]
        self.offset = app.next_offset()
        self.greedy = None  # per choice, the prompt whose greedy answer it is (a temperature-0 completion)

    def usage(self, produced=None):
        completion = (self.produced if produced is None else produced) * self.choices
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + completion,
                "completion_tokens": completion}

    def run(self, on_step):
        """Produce all tokens, calling on_step(step, pieces, finished) per step."""
        app = self.app
        scheduler = app.scheduler
        stopping = app.stopping
        start = time.monotonic()
        if not scheduler.admit(self.choices, self.prompt_tokens):
            raise ClientGone()
        admitted = last_token = time.monotonic()
        first_token = None
        reason, ttft = "abort", None
        try:
            settings = app.settings
            delay = settings.ttft_seconds
            if settings.prefill_tokens_per_second > 0:
                delay += self.prompt_tokens / settings.prefill_tokens_per_second
            deadline = time.monotonic() + delay
            for step in range(1, self.tokens + 1):
                if step > 1:
                    deadline += scheduler.token_interval()
                wait = deadline - time.monotonic()
                if wait > 0:
                    if stopping.wait(wait):
                        raise ClientGone()
                elif wait < -0.25:
                    deadline = time.monotonic()  # fell behind (CPU starved): do not burst
                pieces = []
                for index in range(self.choices):
                    token_id, text = (app.tokenizer.word(self.offset + index + step) if self.greedy is None
                                      else app.greedy_word(self.greedy[index], step))
                    pieces.append((token_id, text))
                    self.texts[index] += text
                    self.token_ids[index].append(token_id)
                self.produced = step
                now = time.monotonic()
                scheduler.generated(self.choices, None if step == 1 else now - last_token)
                last_token = now
                if step == 1:
                    first_token = now
                    ttft = now - start
                if on_step is not None:
                    on_step(step, pieces, step == self.tokens)
            reason = self.finish_reason
        finally:
            end = time.monotonic()
            prefill_end = first_token if first_token is not None else end
            timing = {"queue": admitted - start, "prefill": prefill_end - admitted, "decode": end - prefill_end,
                      "tokens": self.produced, "prompt_tokens": self.prompt_tokens // max(1, self.choices)}
            scheduler.finish(self.choices, self.prompt_tokens + self.produced * self.choices, reason, ttft,
                             end - start, timing)


# ---------------------------------------------------------------------------
# the server process


class StandinApp:
    def __init__(self, settings):
        self.settings = settings
        self.stopping = threading.Event()
        self.signalled = threading.Event()
        self.scheduler = Scheduler(settings, self.stopping)
        self.tokenizer = SimTokenizer(settings.model)
        self.model_key = model_key(settings.model, getattr(settings, "incoherent", False))
        self.nvml = FakeNvmlState(settings.state_path)
        self.pid = os.getpid()
        self.vram_claimed = False
        self.server = None
        self.serve_thread = None
        self._lock = threading.Lock()
        self._requests = 0
        self._offset = 0

    # -- requests -------------------------------------------------------------

    def check_model(self, name):
        if name is None or name == "":
            return self.settings.served_names[0]
        if name in self.settings.served_names:  # like vLLM: served names only, not the path
            return name
        raise RequestError(404, "The model `%s` does not exist." % name, err_type="NotFoundError", param="model")

    def greedy_word(self, prompt_key, step):
        """(token id, text) of the STEP-th greedy token of a prompt: a function of the model and the prompt."""
        words = self.tokenizer.words
        return self.tokenizer.word(int(_unit(self.model_key, "answer", prompt_key, step) * len(words)))

    def prompt_logprob(self, previous, token_id, position):
        """The logprob of TOKEN_ID after PREVIOUS at POSITION: a function of the model and the tokens. A coherent
        model gives -0.3 to -2.3; an incoherent one about -ln(vocabulary), as a model guessing at random."""
        value = _unit(self.model_key, "logprob", previous, token_id, position)
        if getattr(self.settings, "incoherent", False):
            return -(math.log(max(16, len(self.tokenizer.id_to_token))) + 0.5 * value)
        return -(0.3 + 2.0 * value)

    def next_offset(self):
        with self._lock:
            self._offset += 7
            return self._offset

    def count_generation_request(self):
        limit = self.settings.fail_after_requests
        with self._lock:
            self._requests += 1
            number = self._requests
        if limit and number > limit:
            self.crash("simulated crash: request %d arrived after the configured %d "
                       "(VLLM_STANDIN_FAIL_AFTER_REQUESTS)" % (number, limit))

    def crash(self, why):
        LOG.error("EngineCore encountered a fatal error: %s", why)
        LOG.error("AsyncLLM output_handler failed. EngineDeadError: EngineCore encountered an issue.")
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(self.settings.crash_exit_code)  # pylint: disable=protected-access

    # -- VRAM -----------------------------------------------------------------

    def vram_target(self):
        settings = self.settings
        if settings.vram_mib is not None:
            return settings.vram_mib
        # like vLLM: --gpu-memory-utilization (default 0.9) of the GPU's total
        utilization = settings.gpu_memory_utilization
        if utilization is None:
            utilization = DEFAULT_GPU_MEMORY_UTILIZATION
        try:
            total = self.nvml.total_mib(settings.gpu_indices()[0])
        except OSError:
            total = DEFAULT_TOTAL_MIB
        return int(total * utilization)

    def claim(self, mib):
        gpus = self.settings.gpu_indices()
        try:
            if mib > 0:
                self.nvml.claim(self.pid, mib, gpus)
                self.vram_claimed = True
            else:
                self.nvml.release(self.pid)
                self.vram_claimed = False
        except OSError as exc:
            LOG.warning("Could not record VRAM use in the fake NVML state %s: %s", self.settings.state_path, exc)

    # -- lifecycle ------------------------------------------------------------

    def on_signal(self, signum, _frame):
        if self.signalled.is_set():
            LOG.warning("Received signal %d again during shutdown; exiting now.", signum)
            if self.vram_claimed:
                self.claim(0)
            os._exit(0)  # pylint: disable=protected-access
        self.signalled.set()

    def make_server(self):
        host = self.settings.host
        bind_host = host if host else ""
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        server = StandinHTTPServer((bind_host, self.settings.port), family, self)
        server.server_bind()
        return server

    def run(self):
        settings = self.settings
        LOG.info("vLLM API server version %s (stand-in)", settings.version)
        LOG.info("non-default args: %s", _dumps({
            "model": settings.model, "served_model_name": settings.served_names, "host": settings.host,
            "port": settings.port, "tensor_parallel_size": settings.tp, "pipeline_parallel_size": settings.pp,
            "max_model_len": settings.max_model_len_arg, "max_num_seqs": settings.max_num_seqs}))
        if settings.ignored:
            LOG.info("Ignoring vLLM arguments the stand-in does not model: %s", " ".join(settings.ignored))
        if settings.crash_at_start:
            LOG.error("simulated crash at start (faults file crash_at_start_venv matches the vLLM environment "
                      "%s): exiting before binding the port", settings.venv_resolved)
            return 1
        if settings.require_model_dir and _looks_like_path(settings.model) and not os.path.isdir(settings.model):
            LOG.error("Invalid repository ID or local directory specified: '%s'. The model directory does "
                      "not exist on this host: copy the model there or fix the path in the unit.", settings.model)
            return 1
        settings.max_model_len = settings.max_model_len_arg or settings.default_max_model_len()
        LOG.info("Using max model len %d", settings.max_model_len)
        LOG.info("Tokenizer: %s (%d output words)", self.tokenizer.source, len(self.tokenizer.words))

        try:
            self.server = self.make_server()
        except OSError as exc:
            LOG.error("Could not bind %s:%d: %s", settings.host or "0.0.0.0", settings.port, exc)
            if exc.errno == errno.EADDRINUSE:
                LOG.error("Another process already uses port %d: stop it or choose another --port.",
                          settings.port)
            return 1

        target = self.vram_target()
        if settings.no_vram:
            LOG.warning("faults file no_vram_venv matches the vLLM environment %s: serving without claiming "
                        "any VRAM", settings.venv_resolved)
            target = 0
        gpus = settings.gpu_indices()
        LOG.info("Loading model %s on %d GPU(s) %s (tensor parallel %d): claiming %d MiB per GPU",
                 settings.model, len(gpus), ",".join(str(g) for g in gpus), settings.tp, target)
        if target > 0:
            self.claim(target // 2)

        if not self.load():
            return self.shutdown(target)

        if target > 0:
            self.claim(target)
        self.server.server_activate()
        self.serve_thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self.serve_thread.start()
        host = settings.host or "0.0.0.0"
        url = "http://%s:%d" % ("[%s]" % host if ":" in host else host, self.server.server_address[1])
        LOG.info("Starting vLLM server on %s", url)
        for name in settings.served_names:
            LOG.info("Serving model %s as %s (max_model_len=%d)", settings.model, name, settings.max_model_len)
        UVICORN_LOG.info("Started server process [%d]", self.pid)
        UVICORN_LOG.info("Waiting for application startup.")
        UVICORN_LOG.info("Application startup complete.")
        UVICORN_LOG.info("Uvicorn running on %s (Press CTRL+C to quit)", url)
        if settings.tamper:
            self.tamper()

        ready_at = time.monotonic()
        while not self.signalled.wait(0.5):
            if settings.exit_after_seconds and time.monotonic() - ready_at >= settings.exit_after_seconds:
                self.crash("simulated crash %.1f s after ready (VLLM_STANDIN_EXIT_AFTER_SECONDS)"
                           % settings.exit_after_seconds)
        return self.shutdown(target)

    def block_link(self, link):
        """The block_link fault: a real directory where the symbolic link LINK was (kept as LINK.standin-blocked)."""
        aside = link + ".standin-blocked"
        if not os.path.islink(link):
            LOG.warning("faults file block_link: %s is not a symbolic link; left alone", link)
            return
        try:
            if os.path.lexists(aside):
                raise OSError("%s exists already" % aside)
            os.rename(link, aside)
            os.mkdir(link, 0o755)
        except OSError as exc:
            LOG.warning("faults file block_link: could not block %s: %s", link, exc)
            return
        LOG.warning("faults file block_link_venv matches the vLLM environment %s: %s is now a real directory "
                    "(the link is kept as %s)", self.settings.venv_resolved, link, aside)

    def tamper(self):
        """The tamper_venv fault: append TAMPER_LINE to the environment's vllm/__init__.py (once)."""
        pattern = os.path.join(self.settings.venv_resolved, "lib", "python3*", "site-packages", "vllm", "__init__.py")
        paths = sorted(glob.glob(pattern))
        if not paths:
            LOG.warning("faults file tamper_venv: no %s to tamper with", pattern)
            return
        try:
            with open(paths[0], "a+", encoding="utf-8") as handle:
                handle.seek(0)
                text = handle.read(16 * 1024 * 1024)
                if TAMPER_LINE in text.splitlines():
                    return
                handle.write(("" if text.endswith("\n") or not text else "\n") + TAMPER_LINE + "\n")
        except OSError as exc:
            LOG.warning("faults file tamper_venv: could not append to %s: %s", paths[0], exc)
            return
        LOG.warning("faults file tamper_venv: appended %r to %s", TAMPER_LINE, paths[0])

    def load(self):
        """Wait the load time (forever when never-ready); False if signalled."""
        settings = self.settings
        started = time.monotonic()
        if settings.venv:
            LOG.info("vLLM environment %s (resolved: %s), vllm %s", settings.venv, settings.venv_resolved,
                     settings.version)
        if settings.never_ready:
            LOG.info("VLLM_STANDIN_NEVER_READY is set (or VLLM_STANDIN_NEVER_READY_VENV matches): "
                     "the model load will never finish.")
            while not self.signalled.wait(5.0):
                LOG.info("Still loading model weights (%.0f s)...", time.monotonic() - started)
            return False
        marks = (0.25, 0.5, 0.75, 1.0)
        for mark in marks:
            until = started + settings.load_seconds * mark
            if self.signalled.wait(max(0.0, until - time.monotonic())):
                return False
            if settings.load_seconds >= 2 or mark == 1.0:
                LOG.info("Loading safetensors checkpoint shards: %3d%% Completed", int(mark * 100))
        LOG.info("Loading weights took %.2f seconds", time.monotonic() - started)
        LOG.info("init engine (profile, create kv cache, warmup model) took %.2f seconds",
                 time.monotonic() - started)
        return True

    def shutdown(self, target):
        LOG.info("Shutting down FastAPI HTTP server.")
        self.stopping.set()
        if self.serve_thread is not None:
            self.server.shutdown()
        if self.server is not None:
            self.server.server_close()
        try:
            held_seconds, block_link = self.settings.stop_faults()
        except ConfigError as exc:
            LOG.error("faults file %s at the stop: %s (no fault applied)", self.settings.faults_path, exc)
            held_seconds, block_link = None, None
        if block_link:
            self.block_link(block_link)
        delay = self.settings.release_seconds
        if self.vram_claimed:
            LOG.info("Releasing GPU memory (%.1f s)...", delay)
            if delay > 0 and target > 1:
                time.sleep(delay / 2.0)
                self.claim(target // 2)
                time.sleep(delay / 2.0)
            if held_seconds and target > 0:
                try:
                    self.nvml.hold(target, held_seconds, self.settings.gpu_indices())
                except OSError as exc:
                    LOG.warning("faults file vram_held_venv: could not write the fake NVML state: %s", exc)
                else:
                    LOG.warning("faults file vram_held_venv matches the vLLM environment %s: the driver keeps "
                                "%d MiB per GPU for %.1f s after this process exits",
                                self.settings.venv_resolved, target, held_seconds)
            self.claim(0)
            LOG.info("GPU memory released.")
        UVICORN_LOG.info("Application shutdown complete.")
        UVICORN_LOG.info("Finished server process [%d]", self.pid)
        return 0


def _looks_like_path(model):
    return model.startswith(("/", "./", "../", "~")) or os.path.exists(model)


# ---------------------------------------------------------------------------
# installation and entry point


def install(prefix, python="/usr/bin/env python3"):
    """Write this file as ``<prefix>/bin/vllm`` (mode 0755) and return its path."""
    with open(os.path.abspath(__file__), encoding="utf-8") as handle:
        source = handle.read()
    if source.startswith("#!"):
        source = source.split("\n", 1)[1]
    bindir = os.path.join(prefix, "bin")
    os.makedirs(bindir, exist_ok=True)
    target = os.path.join(bindir, "vllm")
    fd, tmp = tempfile.mkstemp(prefix=".vllm.", dir=bindir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("#!%s\n" % python)
        handle.write(source)
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return target


def setup_logging():
    formatter = logging.Formatter("(APIServer pid=%(process)d) %(levelname)s %(asctime)s [standin:%(lineno)d] "
                                  "%(message)s", "%m-%d %H:%M:%S")
    plain = logging.Formatter("(APIServer pid=%(process)d) %(levelname)s:     %(message)s")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    plain_handler = logging.StreamHandler(sys.stdout)
    plain_handler.setFormatter(plain)
    for logger in (ACCESS_LOG, UVICORN_LOG):
        logger.addHandler(plain_handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def main(argv=None):
    parser = build_parser()
    args, unknown = parser.parse_known_intermixed_args(argv)
    if args.standin_install:
        print(install(args.standin_install, args.standin_python))
        return 0
    if args.version:
        print(os.environ.get("VLLM_STANDIN_VERSION", "").strip() or STANDIN_VERSION)
        return 0
    if args.subcommand != "serve":
        parser.print_usage(sys.stderr)
        sys.stderr.write("vllm (stand-in): only 'vllm serve MODEL [options]' and 'vllm --version' are "
                         "simulated, got %r\n" % (args.subcommand,))
        return 2
    setup_logging()
    try:
        settings = Settings(args, unknown)
    except ConfigError as exc:
        LOG.error("%s", exc)
        return 2
    app = StandinApp(settings)
    signal.signal(signal.SIGTERM, app.on_signal)
    signal.signal(signal.SIGINT, app.on_signal)
    return app.run()


if __name__ == "__main__":
    sys.exit(main())
