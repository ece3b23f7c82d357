#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The main job on the simulated fleet: bring up three "dirty" GPU hosts
# (tests/sim/inventory) and run the rollout playbook against them.
#   scripts/demo.sh            set up what is missing, then roll out (hosts
#                              that are already up are rolled out as they
#                              are: a second run finds them converged)
#   scripts/demo.sh --reset    recreate the three hosts dirty, THEN roll out
#                              again (scripts/sim_fleet.sh reset only resets)
# Extra arguments go to ansible-playbook (e.g. --check, --tags debug_artifacts).
# The terminal shows one line per host and phase (the gpufleet.vllm.phases
# callback); the full ansible-playbook output goes to the run's report
# directory. ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default prints it all.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

RESET=0
case "${1:-}" in
  --reset) RESET=1; shift ;;
  -h|--help) sed -n '4,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

"$REPO_ROOT/scripts/bootstrap.sh"
GPUFLEET_HOST_IMAGE="$(cat "$GPUFLEET_CACHE/host-image")"
export GPUFLEET_HOST_IMAGE
# the fleet's package index (the wheelhouse and the newer nightly build),
# which the hosts and the control node install and lock from; it stays up
# after the demo (scripts/index.sh down stops it)
"$REPO_ROOT/scripts/index.sh" up
if ((RESET)); then
  "$REPO_ROOT/scripts/sim_fleet.sh" reset
else
  "$REPO_ROOT/scripts/sim_fleet.sh" up
fi

export ANSIBLE_STDOUT_CALLBACK="${ANSIBLE_STDOUT_CALLBACK:-gpufleet.vllm.phases}"
log "ansible-playbook playbooks/rollout.yml -i tests/sim/inventory $*"
exec ansible-playbook -i tests/sim/inventory playbooks/rollout.yml "$@"
