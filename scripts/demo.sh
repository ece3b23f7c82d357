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
# The hosts sit behind the test world's HAProxy (scripts/balancer.sh) and a
# load generator sends streaming completions through it during the whole
# rollout; the last line says how many requests the clients saw fail.
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
  -h|--help) sed -n '4,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

"$REPO_ROOT/scripts/bootstrap.sh"
# (podman, which the index's address comes from, may have come with bootstrap)
index_env
# the fleet's package index (the wheelhouse and the newer nightly build),
# which the hosts and the control node install and lock from, the three
# hosts, and the fleet's load balancer: HAProxy on the control node in front
# of them (a shipped config; the inventory drains each host there before its
# stop: balancer_type haproxy while GPUFLEET_LB_SOCKET exists). The index and
# HAProxy stay up after the demo (scripts/index.sh down, scripts/balancer.sh
# down stop them). The clients start once every server serves.
if ((RESET)); then
  demo_fleet reset
else
  demo_fleet up
fi

# clients during the whole rollout: streaming completions through the
# balancer, every request recorded (tests/sim/traffic.py; it stops by itself
# after an hour at the latest)
TRAFFIC="$GPUFLEET_CACHE/demo-traffic"
mkdir -p "$TRAFFIC"
rm -f "$TRAFFIC/stop" "$TRAFFIC/result.json"
python3 "$REPO_ROOT/tests/sim/traffic.py" --url "$GPUFLEET_LB_URL" --model kimi-k2.5 --rate 2 --max-tokens 300 \
  --duration 3600 --stop-file "$TRAFFIC/stop" --out "$TRAFFIC/result.json" >"$TRAFFIC/traffic.log" 2>&1 &
TRAFFIC_PID=$!

export ANSIBLE_STDOUT_CALLBACK="${ANSIBLE_STDOUT_CALLBACK:-gpufleet.vllm.phases}"
log "ansible-playbook playbooks/rollout.yml -i tests/sim/inventory $*"
rc=0
ansible-playbook -i tests/sim/inventory playbooks/rollout.yml "$@" || rc=$?

touch "$TRAFFIC/stop"
for _ in $(seq 1 150); do kill -0 "$TRAFFIC_PID" 2>/dev/null || break; sleep 1; done
kill "$TRAFFIC_PID" 2>/dev/null || true
if [[ -s "$TRAFFIC/result.json" ]]; then
  log "clients through the balancer during the rollout ($TRAFFIC/result.json):"
  tail -n 1 "$TRAFFIC/traffic.log" >&2
else
  log "the load generator wrote no result (see $TRAFFIC/traffic.log)"
fi
exit "$rc"
