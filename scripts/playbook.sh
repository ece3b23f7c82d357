#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# ansible-playbook on the simulated fleet (tests/sim/inventory), with what
# scripts/bootstrap.sh set up: the control node's .venv, this repository's
# ansible.cfg, the collection and the simulated hosts' connection, the
# wheelhouse. For example, after scripts/demo.sh:
#   scripts/playbook.sh playbooks/audit.yml       the read-only drift report
#   scripts/playbook.sh playbooks/rollout.yml     the rollout again (converged: nothing restarts)
#   scripts/playbook.sh playbooks/benchmark.yml   the benchmark alone
# Arguments go to ansible-playbook as they are (--check, --limit, -e ...).
# The terminal shows one line per host and phase (the gpufleet.vllm.phases
# callback), the full output goes to a log file whose path the last line
# says; ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default prints it all.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

(($#)) || die "usage: scripts/playbook.sh PLAYBOOK [ansible-playbook options] (e.g. playbooks/audit.yml)"
[[ -x "$VENV/bin/ansible-playbook" ]] || die "no $VENV/bin/ansible-playbook yet: run scripts/demo.sh (or scripts/bootstrap.sh) first"
[[ -s "$GPUFLEET_CACHE/host-image" ]] || die "the simulated fleet is not set up yet: run scripts/demo.sh first"
export ANSIBLE_STDOUT_CALLBACK="${ANSIBLE_STDOUT_CALLBACK:-gpufleet.vllm.phases}"
exec "$VENV/bin/ansible-playbook" -i tests/sim/inventory "$@"
