#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The test world's load balancer (HAProxy, tests/sim/haproxy/haproxy.cfg) on
# the control node, in front of the simulated hosts' vLLM (port 8000):
#   scripts/balancer.sh up NAME1 NAME2 NAME3   start it (a running one is
#                                              stopped first); each NAME is a
#                                              simulated host's container,
#                                              the server's name in the
#                                              backend `vllm`
#   scripts/balancer.sh down                   stop it
#   scripts/balancer.sh status                 the backend's servers
#   scripts/balancer.sh wait [SECONDS]         until every server serves
#                                              (default 180 s)
# Clients use $GPUFLEET_LB_URL (http://127.0.0.1:$GPUFLEET_LB_PORT, 127.0.0.1
# only); the rollout drains a host through the runtime API socket
# $GPUFLEET_LB_SOCKET (module gpufleet.vllm.haproxy_server). Its pid file and
# socket live in $GPUFLEET_LB_DIR ($GPUFLEET_CACHE/balancer), never in /etc
# or /run. Port: GPUFLEET_LB_PORT (default 8780).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HAPROXY="${GPUFLEET_HAPROXY:-/usr/sbin/haproxy}"
CONFIG="$REPO_ROOT/tests/sim/haproxy/haproxy.cfg"
PID_FILE="$GPUFLEET_LB_DIR/haproxy.pid"
START_WAIT=10   # seconds for the socket to appear after the start
STOP_WAIT=10    # seconds for HAProxy to end on SIGTERM before SIGKILL

if ! [[ "$GPUFLEET_LB_PORT" =~ ^[1-9][0-9]{0,4}$ ]] || ((GPUFLEET_LB_PORT > 65535)); then
  die "GPUFLEET_LB_PORT=$GPUFLEET_LB_PORT is not a TCP port (1-65535)"
fi
[[ "$GPUFLEET_LB_SOCKET" == "$GPUFLEET_LB_DIR/admin.sock" ]] \
  || die "GPUFLEET_LB_SOCKET must be \$GPUFLEET_LB_DIR/admin.sock (the config puts it there): $GPUFLEET_LB_SOCKET"
# a UNIX socket's path has at most 107 bytes
((${#GPUFLEET_LB_SOCKET} <= 107)) || die "the socket path $GPUFLEET_LB_SOCKET is longer than 107 bytes: set a shorter GPUFLEET_LB_DIR"
[[ "$GPUFLEET_LB_DIR" != *[\"\\]* ]] || die "GPUFLEET_LB_DIR may hold no \" or \\: $GPUFLEET_LB_DIR"

# the pid of our HAProxy, when it runs (a pid file of a process that is gone
# or is another program is no balancer)
running_pid() {
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  pid="${pid%%$'\n'*}"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$CONFIG" || return 1
  echo "$pid"
}

ip_of() {
  local name="$1" ip
  ip="$(podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}{{.NetworkSettings.IPAddress}}' \
        "$name" 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]{1,3}(\.[0-9]{1,3}){3}$' | head -n 1 || true)"
  [[ -n "$ip" ]] || die "no address for $name on podman's network: is the simulated host running (scripts/sim_fleet.sh up; podman ps)?"
  echo "$ip"
}

down() {
  local pid i other
  if ! pid="$(running_pid)"; then
    # (the pid file and the socket live in the shared cache: a HAProxy of
    # another clone, with its own config, keeps them; they are not ours)
    other="$(cat "$PID_FILE" 2>/dev/null || true)"
    other="${other%%$'\n'*}"
    if [[ "$other" =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$other/cmdline" 2>/dev/null | grep -q haproxy; then
      log "balancer: not running from this clone; HAProxy $other runs another clone's config: left alone (stop it there)"
      return 0
    fi
    rm -f "$PID_FILE" "$GPUFLEET_LB_SOCKET"
    log "balancer: not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_WAIT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "balancer: HAProxy $pid did not end within $STOP_WAIT s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE" "$GPUFLEET_LB_SOCKET"
  log "balancer: stopped"
}

up() {
  (($# == 3)) || die "usage: balancer.sh up NAME1 NAME2 NAME3 (the simulated hosts behind it)"
  [[ -x "$HAPROXY" ]] || die "no HAProxy at $HAPROXY: run scripts/bootstrap.sh (it installs the haproxy package)"
  local i name pid addr
  local -a names=("$@")
  for name in "${names[@]}"; do
    [[ "$name" =~ ^[A-Za-z0-9_.:-]{1,64}$ ]] || die "'$name' is not a HAProxy server name (1-64 of A-Z a-z 0-9 _ . : -)"
  done
  for ((i = 1; i <= 3; i++)); do
    export "GPUFLEET_LB_NAME_$i=${names[i - 1]}"
    addr="$(ip_of "${names[i - 1]}")" || exit 1
    export "GPUFLEET_LB_ADDR_$i=$addr"
  done
  export GPUFLEET_LB_DIR GPUFLEET_LB_PORT
  if running_pid >/dev/null; then
    log "balancer: already running; restarting it with ${names[*]}"
    down
  fi
  # (HAProxy binds with SO_REUSEPORT: a second one on a taken port starts
  # fine, and the kernel then splits the clients between the two. Another
  # clone's balancer, which this one's pid file does not name, is such a
  # listener: refuse rather than serve half the requests from a stale one)
  if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$GPUFLEET_LB_PORT" 2>/dev/null; then
    die "port $GPUFLEET_LB_PORT on 127.0.0.1 is taken by another program (another clone's balancer? 'ss -ltnp sport = :$GPUFLEET_LB_PORT' names it): stop it (scripts/balancer.sh down in that clone), or set GPUFLEET_LB_PORT"
  fi
  mkdir -p "$GPUFLEET_LB_DIR"
  chmod 700 "$GPUFLEET_LB_DIR"
  rm -f "$GPUFLEET_LB_SOCKET" "$PID_FILE"
  "$HAPROXY" -c -q -f "$CONFIG" || die "HAProxy refuses $CONFIG (above)"
  "$HAPROXY" -D -f "$CONFIG" || die "HAProxy did not start (is port $GPUFLEET_LB_PORT free? GPUFLEET_LB_PORT picks another)"
  for ((i = 0; i < START_WAIT * 10; i++)); do
    [[ -S "$GPUFLEET_LB_SOCKET" ]] && pid="$(running_pid)" && break
    sleep 0.1
  done
  [[ -S "$GPUFLEET_LB_SOCKET" ]] || die "HAProxy's runtime API socket $GPUFLEET_LB_SOCKET did not appear within $START_WAIT s"
  log "balancer: HAProxy $pid at $GPUFLEET_LB_URL in front of $(for ((i = 1; i <= 3; i++)); do
      v="GPUFLEET_LB_NAME_$i"; a="GPUFLEET_LB_ADDR_$i"; printf '%s (%s) ' "${!v}" "${!a}"; done)"
  log "balancer: runtime API socket $GPUFLEET_LB_SOCKET"
}

status() {
  running_pid >/dev/null || die "the balancer is not running (scripts/balancer.sh up NAME1 NAME2 NAME3)"
  PYTHONPATH="$REPO_ROOT/.cache/collections" "$VENV/bin/python" - "$GPUFLEET_LB_SOCKET" <<'PYEOF'
import sys
from ansible_collections.gpufleet.vllm.plugins.module_utils.haproxy import HaproxyError, backend_servers
try:
    servers = backend_servers(sys.argv[1], "vllm", timeout=5.0)
except HaproxyError as exc:
    sys.exit("ERROR: %s" % exc)
print("%-20s %-22s %-6s %-12s %-7s %-8s %s" % ("server", "address", "admin", "status", "check", "sessions",
                                              "serving"))
for s in servers:
    print("%-20s %-22s %-6s %-12s %-7s %-8d %s" % (s["name"], "%s:%d" % (s["address"], s["port"]), s["admin"],
                                                  s["status"], s["check"], s["sessions"],
                                                  "yes" if s["serving"] else "no"))
print("%d of %d serving" % (sum(1 for s in servers if s["serving"]), len(servers)))
PYEOF
}

# every server of the backend serving (HAProxy's health check sees it up),
# within SECONDS (default 180): the hosts load their model after a start
wait_serving() {
  local limit="${1:-180}" i out
  [[ "$limit" =~ ^[1-9][0-9]{0,3}$ ]] || die "balancer.sh wait SECONDS: 1 to 9999 seconds, not '$limit'"
  running_pid >/dev/null || die "the balancer is not running (scripts/balancer.sh up NAME1 NAME2 NAME3)"
  for ((i = 0; i < limit; i++)); do
    out="$(status 2>&1 || true)"
    if [[ "$(tail -n 1 <<<"$out")" =~ ^([0-9]+)\ of\ ([0-9]+)\ serving$ ]] \
       && ((BASH_REMATCH[2] > 0 && BASH_REMATCH[1] == BASH_REMATCH[2])); then
      log "balancer: ${BASH_REMATCH[1]} of ${BASH_REMATCH[2]} servers serving"
      return 0
    fi
    sleep 1
  done
  printf '%s\n' "$out" >&2
  die "not every server of the balancer serves after $limit s (above): are the simulated hosts' servers up?"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  wait) shift; wait_serving "$@" ;;
  *) die "usage: balancer.sh up NAME1 NAME2 NAME3 | down | status | wait [SECONDS]" ;;
esac
