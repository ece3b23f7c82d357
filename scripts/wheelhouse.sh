#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Fill the local wheelhouse (the fleet's "mirror") from a requirements file:
#   scripts/wheelhouse.sh requirements/wheelhouse-hosts.txt [--with-deps]
# Wheels are downloaded into a temporary directory and moved into the
# wheelhouse only when the whole download succeeded; a stamp named after the
# requirements file's hash records the wheels and their sizes, so a later run
# checks them in a moment and an interrupted or damaged one is redone.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REQ="${1:?usage: wheelhouse.sh REQUIREMENTS_FILE [--with-deps]}"
DEPS="--no-deps"
[[ "${2:-}" == "--with-deps" ]] && DEPS=""
PY="$VENV/bin/python"
[[ -x "$PY" ]] || PY=python3

HASH="$(requirements_hash "$REQ" "$DEPS")"
STAMP="$GPUFLEET_WHEELHOUSE/.complete-$(basename "$REQ" .txt)-$HASH"
mkdir -p "$GPUFLEET_WHEELHOUSE"

stamp_ok() {
  [[ -s "$STAMP" ]] || return 1
  local name size
  while read -r name size; do
    [[ -f "$GPUFLEET_WHEELHOUSE/$name" ]] || return 1
    [[ "$(stat -c %s "$GPUFLEET_WHEELHOUSE/$name")" == "$size" ]] || return 1
  done <"$STAMP"
}

if stamp_ok; then
  echo "wheelhouse up to date for $(basename "$REQ") ($(wc -l <"$STAMP") wheels)" >&2
  exit 0
fi

TMP="$(mktemp -d "$GPUFLEET_WHEELHOUSE/.partial.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# The hosts are Debian bookworm (CPython 3.11, glibc 2.36, x86_64). pip takes
# --platform tags literally (manylinux_2_36 does not imply manylinux_2_31), so
# every glibc level the hosts can run is listed.
PLATFORMS=()
for minor in $(seq 36 -1 17); do
  PLATFORMS+=(--platform "manylinux_2_${minor}_x86_64")
done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform linux_x86_64 --platform any)
WANTED="$(grep -cEv '^[[:space:]]*(#|$)' "$REQ")"
# pip downloads into its temporary directory and copies a wheel to -d when
# it is whole: with that directory inside $TMP, the progress line counts the
# wheels being downloaded too
mkdir -p "$TMP/.pip-tmp"
# shellcheck disable=SC2086
step "downloading $WANTED wheels for $(basename "$REQ") ${DEPS:-with dependencies} into $GPUFLEET_WHEELHOUSE" \
  "$GPUFLEET_CACHE/logs/wheelhouse-$(basename "$REQ" .txt).log" --size "$TMP" \
  --fail "could not download the wheels of $REQ (is the package index reachable?)" -- \
  env TMPDIR="$TMP/.pip-tmp" "$PY" -m pip download $DEPS --progress-bar off --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    "${PLATFORMS[@]}" \
    -r "$REQ" -d "$TMP"
rm -rf "$TMP/.pip-tmp"
: >"$TMP/.stamp"
for whl in "$TMP"/*.whl; do
  "$PY" - "$whl" <<'PYEOF' || die "downloaded file $whl is not a readable wheel"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    assert any(n.endswith(".dist-info/RECORD") for n in z.namelist())
PYEOF
  printf '%s %s\n' "$(basename "$whl")" "$(stat -c %s "$whl")" >>"$TMP/.stamp"
  mv -f "$whl" "$GPUFLEET_WHEELHOUSE/"
done
mv "$TMP/.stamp" "$STAMP"
echo "wheelhouse: $(wc -l <"$STAMP") wheels for $(basename "$REQ")" >&2
