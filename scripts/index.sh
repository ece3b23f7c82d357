#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The test world's package index (pypiserver, from .venv) on the control node:
#   scripts/index.sh up                 start it in the background (idempotent)
#   scripts/index.sh down               stop it
#   scripts/index.sh url                print its URL (http://ADDR:PORT/simple/)
#   scripts/index.sh publish WHEEL [COMMIT]
#                                       add a wheel to the served "nightly"
#                                       directory (and to COMMIT's per-commit
#                                       index, 40 hex), atomically; a wheel
#                                       of the same name and other bytes
#                                       replaces it (vLLM's nightly index is
#                                       overwritten by every commit)
#   scripts/index.sh unpublish NAME     take the wheel NAME (a file name) out
#                                       of the nightly directory and of every
#                                       per-commit index
# It serves, as one index at $GPUFLEET_INDEX_URL, the wheelhouse (the fleet's
# offline mirror) and $GPUFLEET_INDEX_DIR/nightly (the newer vLLM builds and
# the dependencies only they need); vLLM's per-commit layout at
# http://ADDR:PORT/<commit>/ from $GPUFLEET_INDEX_DIR/commits/<commit>.
#
# Address: the simulated hosts (podman containers on the default bridge
# network) reach the control node at the bridge's gateway (their
# host.containers.internal), so the index listens there and only there,
# never on 0.0.0.0. The bridge exists only once a container has run: when
# the gateway is not yet an address of this machine, `up` runs one
# throwaway container of the host image to make it (podman's CNI backend
# keeps the bridge afterwards), and the server binds with IP_FREEBIND, so a
# bridge removed and made again (netavark, when its last container stops)
# finds it still listening. GPUFLEET_INDEX_ADDR=127.0.0.1 serves the control
# node alone (the tests). Port: GPUFLEET_INDEX_PORT (default 8765).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

INDEX_DIR="${GPUFLEET_INDEX_DIR:?set by lib.sh}"
RUN_DIR="$INDEX_DIR/run"
PID_FILE="$RUN_DIR/index.pid"
LOG_FILE="$GPUFLEET_CACHE/logs/index.log"
SERVER="$REPO_ROOT/tests/sim/index_server.py"
START_WAIT=30     # seconds for the index to answer after it starts
STOP_WAIT="${GPUFLEET_INDEX_STOP_WAIT:-10}"   # seconds for it to stop on SIGTERM before SIGKILL
[[ "$STOP_WAIT" =~ ^(0|[1-9][0-9]{0,2})$ ]] || die "GPUFLEET_INDEX_STOP_WAIT=$STOP_WAIT is not a number of seconds (0-999)"

if ! [[ "$GPUFLEET_INDEX_PORT" =~ ^[1-9][0-9]{0,4}$ ]] || ((GPUFLEET_INDEX_PORT > 65535)); then
  die "GPUFLEET_INDEX_PORT=$GPUFLEET_INDEX_PORT is not a TCP port (1-65535)"
fi

addr() {
  [[ -n "$GPUFLEET_INDEX_ADDR" ]] || die "no address for the index: podman's default network has no gateway (podman network inspect podman); set GPUFLEET_INDEX_ADDR"
  [[ "$GPUFLEET_INDEX_ADDR" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] \
    || die "GPUFLEET_INDEX_ADDR=$GPUFLEET_INDEX_ADDR is not an IPv4 address"
  [[ "$GPUFLEET_INDEX_ADDR" != 0.0.0.0 ]] || die "the index does not listen on 0.0.0.0 (every interface): give one address"
  echo "$GPUFLEET_INDEX_ADDR"
}

# the pid of our server, when it runs (a pid file of a process that is gone
# or is another program is no server)
running_pid() {
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "index_server.py" || return 1
  echo "$pid"
}

answers() {
  "$VENV/bin/python" - "$1" <<'PYEOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as reply:
        sys.exit(0 if reply.status == 200 else 1)
except Exception:
    sys.exit(1)
PYEOF
}

is_local_addr() {
  [[ "$1" == 127.* ]] && return 0
  ip -o -4 addr show 2>/dev/null | grep -q " inet $1/"
}

# the podman bridge, made by a throwaway container when it does not exist yet
ensure_bridge() {
  local a="$1" image
  is_local_addr "$a" && return 0
  image="${GPUFLEET_HOST_IMAGE:-$(cat "$GPUFLEET_CACHE/host-image" 2>/dev/null || true)}"
  [[ -n "$image" ]] || die "the podman bridge (gateway $a) does not exist yet and there is no host image to make it with: run scripts/bootstrap.sh first"
  log "the podman bridge (gateway $a) does not exist yet: starting one throwaway container to make it"
  timeout 120 podman run --rm --network podman "$image" /bin/true >/dev/null 2>&1 || true
  is_local_addr "$a" || die "the podman bridge's gateway $a is still not an address of this machine after a container ran (podman network inspect podman); the index listens only there"
}

# a process that has exited but is not reaped yet (a zombie, its parent
# being init) is stopped
alive() {
  local state
  state="$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z ]]
}

stop() {
  local pid i
  if ! pid="$(running_pid)"; then
    rm -f "$PID_FILE"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_WAIT * 10; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    log "the index (pid $pid) did not stop in ${STOP_WAIT} s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
}

up() {
  local a url pid i t0
  a="$(addr)"
  url="http://$a:$GPUFLEET_INDEX_PORT/simple/"
  if ! "$VENV/bin/python" -c 'import pypiserver' 2>/dev/null; then
    die "pypiserver is not installed in $VENV: run scripts/bootstrap.sh (requirements/control.txt)"
  fi
  [[ -d "$GPUFLEET_WHEELHOUSE" ]] || die "no wheelhouse at $GPUFLEET_WHEELHOUSE: run scripts/bootstrap.sh first"
  if pid="$(running_pid)"; then
    if answers "$url"; then
      log "index already up at $url (pid $pid)"
      return 0
    fi
    log "the index (pid $pid) does not answer at $url: restarting it"
    stop
  fi
  ensure_bridge "$a"
  mkdir -p "$INDEX_DIR/nightly" "$INDEX_DIR/commits" "$RUN_DIR" "$(dirname "$LOG_FILE")"
  rm -f "$PID_FILE"
  t0=$(now)
  # its own session (setsid): a Ctrl-C in the shell that started it does not stop it
  setsid "$VENV/bin/python" "$SERVER" --host "$a" --port "$GPUFLEET_INDEX_PORT" \
    --root "$GPUFLEET_WHEELHOUSE" --root "$INDEX_DIR/nightly" \
    --commits "$INDEX_DIR/commits" --ready-file "$PID_FILE" \
    >>"$LOG_FILE" 2>&1 </dev/null &
  pid=$!
  for ((i = 0; i < START_WAIT * 5; i++)); do
    if ! alive "$pid"; then
      rm -f "$PID_FILE"
      die "the index did not start: $(grep 'index_server:' "$LOG_FILE" | tail -n 1 || echo "see $LOG_FILE")"
    fi
    if [[ -s "$PID_FILE" ]] && answers "$url"; then
      log "index up at $url (pid $pid, $(( $(now) - t0 )) s; log $LOG_FILE)"
      return 0
    fi
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PID_FILE"
  die "the index did not answer at $url within ${START_WAIT} s (log: $LOG_FILE)"
}

# copy a wheel into the served directory under a hidden name (pypiserver
# lists no dot-file), then rename it: a client sees the whole file or none.
# The per-commit directory gets a hard link to the served copy.
publish() {
  local wheel="${1:-}" commit="${2:-}" name nightly target
  [[ -f "$wheel" ]] || die "usage: index.sh publish WHEEL [COMMIT] (no file ${wheel:-given})"
  name="$(basename "$wheel")"
  [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*\.whl$ ]] || die "$name is not a wheel's file name"
  [[ -z "$commit" || "$commit" =~ ^[0-9a-f]{40}$ ]] || die "commit $commit: expected 40 lowercase hex digits"
  nightly="$INDEX_DIR/nightly"
  mkdir -p "$nightly"
  if ! [[ "$wheel" -ef "$nightly/$name" ]] && ! cmp -s "$wheel" "$nightly/$name"; then
    cp -f --reflink=auto "$wheel" "$nightly/.publish-$$-$name"
    mv -f "$nightly/.publish-$$-$name" "$nightly/$name"
  fi
  if [[ -n "$commit" ]]; then
    target="$INDEX_DIR/commits/$commit"
    mkdir -p "$target"
    if ! [[ "$nightly/$name" -ef "$target/$name" ]]; then
      ln -f "$nightly/$name" "$target/.publish-$$-$name" 2>/dev/null \
        || cp -f --reflink=auto "$nightly/$name" "$target/.publish-$$-$name"
      mv -f "$target/.publish-$$-$name" "$target/$name"
    fi
  fi
  echo "$nightly/$name"
}

# the wheel NAME out of the served directories (the wheelhouse is the
# mirror's, not the index's: nothing there is removed)
unpublish() {
  local name="${1:-}" dir
  [[ -n "$name" ]] || die "usage: index.sh unpublish WHEEL_FILE_NAME"
  [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*\.whl$ ]] || die "$name is not a wheel's file name"
  rm -f "$INDEX_DIR/nightly/$name"
  for dir in "$INDEX_DIR"/commits/*/; do
    [[ -d "$dir" ]] && rm -f "$dir$name"
  done
  return 0
}

case "${1:-}" in
  up) up ;;
  down) stop ;;
  url) echo "http://$(addr):$GPUFLEET_INDEX_PORT/simple/" ;;
  publish) shift; publish "$@" ;;
  unpublish) shift; unpublish "$@" ;;
  *) die "usage: index.sh up|down|url|publish WHEEL [COMMIT]|unpublish NAME" ;;
esac
