#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Run every test of the collection, setting up what is missing first:
#   unit tests (pytest), yamllint, ansible-lint (production profile) and
#   antsibull-changelog lint,
#   ansible-test sanity, collection build + install, molecule scenarios.
# Usage: scripts/test.sh [STAGE ...]   (default: all stages, in order)
#   stages: unit engine lint sanity build molecule
# MOLECULE_SCENARIOS="default cleanup" limits the molecule stage;
# GPUFLEET_UNIT_WORKERS=N runs the unit tests in N processes (default: one
# per core; 0: in pytest's own process); GPUFLEET_MOLECULE_LANES=1 runs the
# molecule scenarios one after the other (default 2: the rollout scenario
# beside the others).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

STAGES=("$@")
((${#STAGES[@]})) || STAGES=(unit engine lint sanity build molecule)
T_ALL=$(now)
SUMMARY=()
SCENARIO_TIMES=()
FAILED=()

run_stage() {
  local name="$1"; shift
  local t0 rc
  t0=$(now)
  log "stage $name"
  set +e
  "$@"
  rc=$?
  set -e
  SUMMARY+=("$(printf '%-9s %-6s %5ss' "$name" "$([[ $rc == 0 ]] && echo ok || echo FAILED)" "$(( $(now) - t0 ))")")
  ((rc == 0)) || FAILED+=("$name")
}

stage_unit() {
  # pytest exits 5 when it collected nothing: that is a failure here too
  # on every core (pytest-xdist); GPUFLEET_UNIT_WORKERS=0 runs them in this one process
  # (the 15 slowest tests are listed at the end: where the stage's time goes)
  python -m pytest -q -p no:cacheprovider -n "${GPUFLEET_UNIT_WORKERS:-auto}" --dist worksteal --durations=15 tests/unit
}

stage_engine() {
  # the real vLLM engine (the CPU build, installed by bootstrap) serving a
  # generated model, and the stand-in, checked by the same client code; one
  # process: the engine takes both cores while it loads (about 2-3 min in all)
  python -m pytest -q -p no:cacheprovider -n 0 tests/engine
}

stage_lint() {
  # (.ansible-lint says offline: ansible-lint installs nothing, so it sees
  # this checkout alone, not "another version" of it in ~/.ansible)
  yamllint --strict . && ansible-lint --profile production --strict &&
  # the changelog fragments (changelogs/fragments) and changelog.yaml
  antsibull-changelog lint
}

stage_sanity() {
  # ansible-test wants the collection at ansible_collections/NS/NAME: test a
  # copy of what git tracks (plus new files not ignored) placed there.
  local root="$REPO_ROOT/.cache/sanity/ansible_collections/gpufleet/vllm"
  rm -rf "$REPO_ROOT/.cache/sanity"
  mkdir -p "$root"
  git ls-files -z --cached --others --exclude-standard \
    | xargs -0 -I{} cp --parents -P {} "$root/" 2>/dev/null
  # ansible-test makes a venv per sanity test and bootstraps pip in it with a
  # script it downloads from a host outside the package registries: give it
  # a HOME of its own whose cache holds an offline stand-in for that script.
  # (in the cache, so its per-test venvs are reused by the next clone too)
  local home="$GPUFLEET_CACHE/ansible-test-home"
  mkdir -p "$home/.ansible/test/cache"
  cp "$REPO_ROOT/tests/sanity/get_pip_offline.py" "$home/.ansible/test/cache/get_pip_24_2.py"
  (cd "$root" && git init -q && git add -A && \
   HOME="$home" ansible-test sanity --python 3.11 --color no)
}

stage_build() {
  local out="$REPO_ROOT/.cache/build"
  rm -rf "$out" && mkdir -p "$out/collections"
  ansible-galaxy collection build --force --output-path "$out" "$REPO_ROOT" &&
  # the tarball holds the collection only (no tests, molecule, scripts, ...)
  python "$REPO_ROOT/scripts/tarball_contents.py" "$out"/gpufleet-vllm-*.tar.gz &&
  ansible-galaxy collection install --force -p "$out/collections" "$out"/gpufleet-vllm-*.tar.gz &&
  # the installed tarball, not the checkout, answers by FQCN
  ANSIBLE_COLLECTIONS_PATH="$out/collections" python -m pytest -q -p no:cacheprovider \
    tests/integration/test_built_collection.py &&
  # the README's commands for a real fleet, as written, from a HOME of their own
  python -m pytest -q -p no:cacheprovider tests/integration/test_readme_real_fleet.py &&
  # the execution environment's build context (no image is built here; the
  # rollout scenario runs the playbooks from its requirements: scripts/ee.sh):
  # the runtime requirements and the tarball just built are in it
  rm -rf "$REPO_ROOT/.cache/ee-context" &&
  ansible-builder create -f execution-environment.yml -c "$REPO_ROOT/.cache/ee-context" &&
  test -s "$REPO_ROOT/.cache/ee-context/Containerfile" &&
  cmp "$REPO_ROOT/requirements/runtime.txt" "$REPO_ROOT/.cache/ee-context/_build/requirements.txt" &&
  cmp "$out"/gpufleet-vllm-*.tar.gz "$REPO_ROOT/.cache/ee-context/_build/collection/$(basename "$out"/gpufleet-vllm-*.tar.gz)"
}

# One molecule scenario, its output to LOG (or the terminal when LOG is -);
# its line for the summary goes to TIMES.
run_scenario() {
  local s="$1" out="$2" times="$3" t0 src
  t0=$(now)
  # molecule's idempotence step and the rollout scenario read the default
  # callback's output, whatever a developer exported for their own runs
  if [[ "$out" == - ]]; then
    if env -u ANSIBLE_STDOUT_CALLBACK molecule test -s "$s"; then src=ok; else src=FAILED; fi
  else
    if env -u ANSIBLE_STDOUT_CALLBACK molecule test -s "$s" >"$out" 2>&1 </dev/null; then src=ok; else src=FAILED; fi
  fi
  printf '  %-16s %-6s %5ss\n' "$s" "$src" "$(( $(now) - t0 ))" >>"$times"
  [[ $src == ok ]]
}

# A lane: its scenarios one after the other, each one's output printed whole
# once it is done (one at a time: the lanes share the terminal).
run_lane() {
  local dir="$1"; shift
  local s rc=0
  for s in "$@"; do
    if ! run_scenario "$s" "$dir/$s.log" "$dir/$s.time"; then rc=1; fi
    {
      flock 9
      log "molecule test -s $s: $(awk '{print $2 ", " $3}' "$dir/$s.time")"
      cat "$dir/$s.log"
    } 9>"$dir/print.lock"
  done
  return $rc
}

stage_molecule() {
  local scenarios=()
  read -ra scenarios <<<"${MOLECULE_SCENARIOS:-}"
  if ((${#scenarios[@]} == 0)); then
    mapfile -t scenarios < <(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml \
                             -printf '%h\n' | xargs -n1 basename | sort)
  fi
  local s rc=0 dir
  dir="$(mktemp -d)"
  # Two lanes (GPUFLEET_MOLECULE_LANES=2, the default): the rollout scenario,
  # the longest, which waits on its hosts about half of the time, beside the
  # others one after the other. It gets a package index of its own (it
  # publishes a newer build in the middle of its rollouts, which another
  # scenario resolving the newest build must not see): a hard-linked copy of
  # the index directory, served on the next port. GPUFLEET_MOLECULE_LANES=1
  # runs every scenario one after the other.
  local alone=() others=()
  for s in "${scenarios[@]}"; do
    if [[ "$s" == rollout && "${GPUFLEET_MOLECULE_LANES:-2}" == 2 ]]; then alone+=("$s"); else others+=("$s"); fi
  done
  ((${#others[@]})) || { others=("${alone[@]}"); alone=(); }
  # the fleet's package index (scripts/index.sh): up for the scenarios, down
  # after them, also when one fails or the run is interrupted
  "$REPO_ROOT/scripts/index.sh" up || return 1
  trap '"$REPO_ROOT/scripts/index.sh" down; [[ -z "${LANE_INDEX_DIR:-}" ]] || GPUFLEET_INDEX_DIR="$LANE_INDEX_DIR" GPUFLEET_INDEX_PORT="$LANE_INDEX_PORT" "$REPO_ROOT/scripts/index.sh" down' EXIT
  if ((${#alone[@]} == 0)); then
    for s in "${others[@]}"; do
      log "molecule test -s $s"
      run_scenario "$s" - "$dir/$s.time" || rc=1
    done
  else
    LANE_INDEX_DIR="$GPUFLEET_INDEX_DIR-lane"
    LANE_INDEX_PORT=$((GPUFLEET_INDEX_PORT + 1))
    rm -rf "$LANE_INDEX_DIR"
    cp -al "$GPUFLEET_INDEX_DIR" "$LANE_INDEX_DIR"
    rm -rf "$LANE_INDEX_DIR/run"
    GPUFLEET_INDEX_DIR="$LANE_INDEX_DIR" GPUFLEET_INDEX_PORT="$LANE_INDEX_PORT" GPUFLEET_INDEX_URL='' \
      "$REPO_ROOT/scripts/index.sh" up || return 1
    log "molecule: ${alone[*]} beside ${others[*]} (two lanes; each scenario's output follows once it is done)"
    local pids=() t0 elapsed
    t0=$(now)
    (GPUFLEET_INDEX_DIR="$LANE_INDEX_DIR" GPUFLEET_INDEX_PORT="$LANE_INDEX_PORT"
     GPUFLEET_INDEX_URL="$(GPUFLEET_INDEX_URL='' "$REPO_ROOT/scripts/index.sh" url)"
     export GPUFLEET_INDEX_DIR GPUFLEET_INDEX_PORT GPUFLEET_INDEX_URL
     run_lane "$dir" "${alone[@]}") &
    pids+=($!)
    (run_lane "$dir" "${others[@]}") &
    pids+=($!)
    # a line a minute while both lanes run, so a quiet terminal is not a hung one
    while kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null; do
      sleep 5
      elapsed=$(( $(now) - t0 ))
      if (( elapsed % 60 < 5 )); then
        local f done_list=""
        for f in "$dir"/*.time; do
          [[ -e "$f" ]] && done_list+="$(basename "$f" .time) "
        done
        (flock 9; log "molecule: $((elapsed / 60)) min; done: ${done_list:-none}") 9>"$dir/print.lock"
      fi
    done
    for s in "${pids[@]}"; do wait "$s" || rc=1; done
    GPUFLEET_INDEX_DIR="$LANE_INDEX_DIR" GPUFLEET_INDEX_PORT="$LANE_INDEX_PORT" "$REPO_ROOT/scripts/index.sh" down
    rm -rf "$LANE_INDEX_DIR"
  fi
  "$REPO_ROOT/scripts/index.sh" down
  trap - EXIT
  for s in "${scenarios[@]}"; do
    [[ -f "$dir/$s.time" ]] && SCENARIO_TIMES+=("$(cat "$dir/$s.time")")
  done
  rm -rf "$dir"
  return $rc
}

# bootstrap first: the other stages need what it sets up
run_stage bootstrap "$REPO_ROOT/scripts/bootstrap.sh"
((${#FAILED[@]} == 0)) || die "bootstrap failed: nothing else can run (see above)"
# (podman, which the index's address comes from, may have come with bootstrap)
index_env
GPUFLEET_HOST_IMAGE="$(cat "$GPUFLEET_CACHE/host-image")"
export GPUFLEET_HOST_IMAGE

for stage in "${STAGES[@]}"; do
  case "$stage" in
    unit|engine|lint|sanity|build|molecule) run_stage "$stage" "stage_$stage" ;;
    *) die "unknown stage '$stage' (unit engine lint sanity build molecule)" ;;
  esac
done

TOTAL=$(( $(now) - T_ALL ))
log "summary: $TOTAL s in all ($((TOTAL / 60)) min $((TOTAL % 60)) s)"
printf '  %s\n' "${SUMMARY[@]}" >&2
((${#SCENARIO_TIMES[@]} == 0)) || printf '  %s\n' "${SCENARIO_TIMES[@]}" >&2
if ((${#FAILED[@]})); then
  die "failed stages: ${FAILED[*]}"
fi
