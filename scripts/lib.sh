# shellcheck shell=bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Shared settings of the repository's scripts: sourced, not run.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO_ROOT

# Everything built once and reused between runs (host image, wheelhouse,
# fake NVML library) lives in the cache, outside the clone, so that a second
# run in a fresh clone is fast too.
GPUFLEET_CACHE="${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet-vllm}"
GPUFLEET_WHEELHOUSE="${GPUFLEET_WHEELHOUSE:-$GPUFLEET_CACHE/wheelhouse}"
# vLLM with its dependencies, for the real `vllm bench serve`: one relocatable
# environment, mounted read-only into every simulated host at
# /opt/vllm/bench-env (a shared tools volume, as on a fleet's NFS)
GPUFLEET_BENCH_ENV="${GPUFLEET_BENCH_ENV:-$GPUFLEET_CACHE/bench-env}"
VENV="${GPUFLEET_VENV:-$REPO_ROOT/.venv}"
export GPUFLEET_CACHE GPUFLEET_WHEELHOUSE GPUFLEET_BENCH_ENV

# Podman on these machines needs runc, cgroupfs and ulimits no higher than
# the current ones: the engine config ships with the tests; /etc stays as is.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$REPO_ROOT/tests/sim/containers.conf}"

export ANSIBLE_CONFIG="$REPO_ROOT/ansible.cfg"
# .cache/collections: this collection (a link); tests/sim/collections: the
# simulated hosts' connection (test-only, not part of the collection)
export ANSIBLE_COLLECTIONS_PATH="$REPO_ROOT/.cache/collections:$REPO_ROOT/tests/sim/collections"
# The machine's own python3 (not the venv's), to create the venv with.
export HOST_PYTHON
HOST_PYTHON="${GPUFLEET_PYTHON:-$(PATH="${PATH//$VENV\/bin:/}" command -v python3 || true)}"
case ":$PATH:" in *":$VENV/bin:"*) ;; *) export PATH="$VENV/bin:$PATH" ;; esac

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# A short hash of a requirements file's requirement lines (comments and
# blank lines left out: editing a comment is not a new set of wheels),
# followed by any extra words given: names the stamps of what was installed.
requirements_hash() {
  local file="$1"; shift
  { grep -Ev '^[[:space:]]*(#|$)' "$file"; printf '%s\n' "$@"; } | sha256sum | cut -c1-16
}

# Seconds since the epoch, for the phase timings the scripts print.
now() { date +%s; }
