#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The simulated fleet of tests/sim/inventory:
#   scripts/sim_fleet.sh up       create missing hosts and make them "dirty"
#   scripts/sim_fleet.sh reset    destroy and recreate them, dirty again
#   scripts/sim_fleet.sh down     destroy them
# Each host is a podman container with systemd as PID 1 made from the
# locally built image, with the wheelhouse mounted read-only as its mirror
# and the bench environment (vLLM with its dependencies, for the rollout's
# `vllm bench serve`) read-only at /opt/vllm/bench-env.
# Another fleet (benchmarks/bench_rollout.py): GPUFLEET_SIM_HOSTS="a b c"
# and GPUFLEET_SIM_INVENTORY=<an inventory that lists them>.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

read -r -a HOSTS <<<"${GPUFLEET_SIM_HOSTS:-sim-gpu-1 sim-gpu-2 sim-gpu-3}"
INVENTORY="${GPUFLEET_SIM_INVENTORY:-tests/sim/inventory}"
IMAGE="${GPUFLEET_HOST_IMAGE:-$(cat "$GPUFLEET_CACHE/host-image" 2>/dev/null || true)}"

down() {
  for h in "${HOSTS[@]}"; do podman rm -f -t 5 "$h" >/dev/null 2>&1 || true; done
}

up() {
  [[ -n "$IMAGE" ]] || die "no host image yet: run scripts/bootstrap.sh first"
  [[ -x "$GPUFLEET_BENCH_ENV/bin/vllm" ]] || die "no bench environment at $GPUFLEET_BENCH_ENV yet: run scripts/bootstrap.sh first"
  local new=() h
  for h in "${HOSTS[@]}"; do
    # running, and made by this version of the script (it mounts the bench environment)
    if [[ "$(podman inspect -f '{{.State.Running}} {{range .Mounts}}{{.Destination}} {{end}}' "$h" 2>/dev/null)" \
          == "true "*"/opt/vllm/bench-env "* ]]; then
      continue
    fi
    podman rm -f "$h" >/dev/null 2>&1 || true
    podman run -d --name "$h" --hostname "$h" --systemd=always \
      --label gpufleet.sim=1 \
      -v "$GPUFLEET_WHEELHOUSE:/srv/wheelhouse:ro" \
      -v "$GPUFLEET_BENCH_ENV:/opt/vllm/bench-env:ro" \
      "$IMAGE" /sbin/init >/dev/null \
      || die "podman could not start $h from $IMAGE"
    new+=("$h")
  done
  if ((${#new[@]} == 0)); then
    log "simulated fleet: ${#HOSTS[@]} hosts already up (scripts/sim_fleet.sh reset makes them dirty again)"
    return 0
  fi
  log "simulated fleet: ${#new[@]} new host(s) (${new[*]}): preparing the dirty reference state"
  GPUFLEET_REPO="$REPO_ROOT" ansible-playbook -i "$INVENTORY" \
    --limit "$(IFS=,; echo "${new[*]}")" \
    tests/sim/playbooks/sim_host.yml tests/sim/playbooks/dirty_host.yml
}

case "${1:-up}" in
  up) up ;;
  reset) down; up ;;
  down) down ;;
  *) die "usage: sim_fleet.sh up|reset|down" ;;
esac
