#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# The execution environment (execution-environment.yml) without an image:
# what ansible-builder would install into the image, installed into a venv,
# so that CI runs the playbooks from the EE's own requirements and nothing
# else (no registry and no container engine needed for that).
#   scripts/ee.sh install            make GPUFLEET_EE_VENV (scripts/bootstrap.sh
#                                    runs it; PyPI, once per set of inputs)
#   scripts/ee.sh playbook ARG...    ansible-playbook from that venv, with this
#                                    checkout's collection built and installed
#                                    as the image's last step installs it
# `install` follows the build context that `ansible-builder create` writes:
# the Containerfile's ANSIBLE_INSTALL_REFS (ansible-core, ansible-runner)
# with pip, the Galaxy requirements (_build/requirements.yml, when there are
# any) into the venv's collections directory, then ansible-builder's own
# introspection script (_build/scripts/introspect.py) over those collections
# and the EE's Python requirements (_build/requirements.txt), and pip install
# of what it writes.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

EE="$GPUFLEET_EE_VENV"

# The inputs of the venv: the EE definition, the Python requirements it
# names, and the ansible-builder that writes the context from them.
ee_hash() {
  {
    cat "$REPO_ROOT/execution-environment.yml" "$REPO_ROOT/requirements/runtime.txt"
    grep -E '^ansible-builder==' "$REPO_ROOT/requirements/control.txt"
  } | sha256sum | cut -c1-16
}

ee_install() {
  local ctx="$EE/context" refs
  "$HOST_PYTHON" -m venv "$EE"
  ansible-builder create -f "$REPO_ROOT/execution-environment.yml" -c "$ctx"
  refs="$(sed -n 's/^ARG ANSIBLE_INSTALL_REFS="\(.*\)"$/\1/p' "$ctx/Containerfile")"
  [[ -n "$refs" ]] || { echo "no ANSIBLE_INSTALL_REFS in $ctx/Containerfile" >&2; return 1; }
  # shellcheck disable=SC2086  # (a list of requirements, as the Containerfile's RUN splits it)
  "$EE/bin/python" -m pip install --no-cache-dir $refs
  mkdir -p "$EE/collections"
  if [[ -f "$ctx/_build/requirements.yml" ]]; then
    (cd "$ctx/_build" &&
     "$EE/bin/ansible-galaxy" role install -r requirements.yml --roles-path "$EE/roles" &&
     ANSIBLE_GALAXY_DISABLE_GPG_VERIFY=1 "$EE/bin/ansible-galaxy" collection install \
       -r requirements.yml --collections-path "$EE/collections")
  fi
  # (the builder stage runs it with bindep, pyyaml and packaging installed
  # beside; the control node's venv has the last two, and the EE venv stays
  # as the final image is, without them)
  (cd "$ctx/_build" &&
   "$VENV/bin/python" scripts/introspect.py introspect "$EE/collections" \
     --user-pip=requirements.txt --write-bindep="$ctx/bindep.txt" --write-pip="$ctx/requirements.txt")
  if [[ -s "$ctx/bindep.txt" ]]; then
    echo "the EE needs system packages ($(tr '\n' ' ' <"$ctx/bindep.txt")): a venv cannot prove them" >&2
    return 1
  fi
  if [[ -s "$ctx/requirements.txt" ]]; then
    "$EE/bin/python" -m pip install -r "$ctx/requirements.txt"
  fi
  "$EE/bin/ansible" --version
}

cmd_install() {
  local hash
  hash="$(ee_hash)"
  if [[ -f "$EE/.installed-$hash" ]]; then
    return 0
  fi
  # (made where it stays: pip's scripts name the venv's python by its path;
  # the stamp comes last, so an interrupted install is redone)
  rm -rf "$EE"
  step "installing the execution environment's requirements (execution-environment.yml) into $EE" \
    "$GPUFLEET_CACHE/logs/ee-venv.log" --size "$EE" \
    --fail "could not install the execution environment's requirements into $EE" -- ee_install
  touch "$EE/.installed-$hash"
}

cmd_playbook() {
  local hash tmp rc name
  hash="$(ee_hash)"
  [[ -f "$EE/.installed-$hash" ]] \
    || die "the execution environment's venv is missing or stale ($EE): run scripts/bootstrap.sh"
  tmp="$(mktemp -d)"
  # Nothing of the control node's environment comes along but the test
  # world's settings: no ANSIBLE_* setting of the caller (molecule's plugin
  # paths), no collection but the EE's own, and two that reach the simulated
  # hosts (an EE reaches real hosts over SSH): the test world's connection
  # (tests/sim/collections) and the podman connection it builds on
  # (containers.podman, from the control node's `ansible` package).
  mkdir -p "$tmp/connection/ansible_collections/containers"
  ln -s "$("$VENV/bin/python" -c 'import ansible_collections.containers.podman as p; print(list(p.__path__)[0])')" \
    "$tmp/connection/ansible_collections/containers/podman"
  local ee_env=(env -i HOME="$HOME" USER="${USER:-root}" LANG=C.UTF-8 PATH="$EE/bin:/usr/sbin:/usr/bin:/sbin:/bin")
  while IFS= read -r name; do
    ee_env+=("$name=${!name}")
  done < <(compgen -e | grep -E '^(GPUFLEET_|CONTAINERS_CONF$|XDG_)' || true)
  ee_env+=(ANSIBLE_CONFIG="$REPO_ROOT/ansible.cfg" ANSIBLE_NOCOLOR=1
           ANSIBLE_COLLECTIONS_PATH="$tmp/collections:$EE/collections:$REPO_ROOT/tests/sim/collections:$tmp/connection")
  # this checkout as a tarball, installed where the image's last step puts it
  if ! "${ee_env[@]}" ansible-galaxy collection build --output-path "$tmp" "$REPO_ROOT" >"$tmp/build.log" 2>&1 ||
     ! "${ee_env[@]}" ansible-galaxy collection install --force --collections-path "$tmp/collections" \
       "$tmp"/gpufleet-vllm-*.tar.gz >>"$tmp/build.log" 2>&1 ||
     [[ ! -f "$tmp/collections/ansible_collections/gpufleet/vllm/MANIFEST.json" ]]; then
    cat "$tmp/build.log" >&2
    rm -rf "$tmp"
    die "could not build and install the collection for the execution environment"
  fi
  rc=0
  "${ee_env[@]}" ansible-playbook "$@" || rc=$?
  rm -rf "$tmp"
  return "$rc"
}

case "${1:-}" in
  install) cmd_install ;;
  playbook) shift; cmd_playbook "$@" ;;
  *) die "usage: scripts/ee.sh install | playbook ARG..." ;;
esac
