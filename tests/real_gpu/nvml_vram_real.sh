#!/usr/bin/env bash
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Run the gpufleet.vllm.nvml_vram_info module against the REAL NVIDIA driver of
# this machine (no fake NVML library) and print its JSON result.  The output
# is the evidence kept in docs/real-gpu.md.
#
# Usage: tests/real_gpu/nvml_vram_real.sh [COUNT] [COMPUTE_CAPABILITY]
#   defaults: 1 and 9.0 (one H200).  For an 8x RTX PRO 6000 host: 8 12.0
#
# Environment:
#   PYTHON        interpreter to use (default python3). If it cannot import
#                 ansible-core and pynvml, a temporary venv is made and
#                 ansible-core + nvidia-ml-py are installed into it.
#   WHEELHOUSE    install those from this directory only (air-gapped host)
#   OUT           also write the JSON result to this file
#
# The module runs as Ansible runs it on a host: its file executed by Python
# with the arguments as JSON.  Exit status: the module's (0 = expectation met).
set -euo pipefail

COUNT="${1:-1}"
CC="${2:-9.0}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

# Never the fake library: drop its state and any fakenvml directory from the
# loader path.
unset FAKE_NVML_STATE
if [ -n "${LD_LIBRARY_PATH:-}" ]; then
    LD_LIBRARY_PATH="$(printf '%s' "${LD_LIBRARY_PATH}" | tr ':' '\n' | grep -v fakenvml | paste -sd: - || true)"
    export LD_LIBRARY_PATH
fi

if ! "${PY}" -c 'import ansible.module_utils.basic, pynvml' >/dev/null 2>&1; then
    echo "== ${PY} lacks ansible-core or nvidia-ml-py: making a venv in ${WORK}/venv" >&2
    "${PY}" -m venv "${WORK}/venv"
    PIP_ARGS=(--disable-pip-version-check --quiet)
    if [ -n "${WHEELHOUSE:-}" ]; then
        PIP_ARGS+=(--no-index --find-links "${WHEELHOUSE}")
    fi
    "${WORK}/venv/bin/python" -m pip install "${PIP_ARGS[@]}" ansible-core nvidia-ml-py >&2
    PY="${WORK}/venv/bin/python"
fi

# the collection as ansible_collections.gpufleet.vllm
mkdir -p "${WORK}/collections/ansible_collections/gpufleet"
ln -s "${REPO}" "${WORK}/collections/ansible_collections/gpufleet/vllm"

echo "== host: $(uname -n), kernel $(uname -r), python: $("${PY}" -c 'import sys; print(sys.version.split()[0])')," \
     "nvidia-ml-py: $("${PY}" -c 'import importlib.metadata as m; print(m.version("nvidia-ml-py"))' 2>/dev/null || echo '?')" >&2
# which libnvidia-ml.so.1 pynvml loads (the driver's, not the fake)
"${PY}" - >&2 <<'EOF' || true
import pynvml
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as exc:
    print("== nvmlInit failed: %s" % exc)
else:
    with open("/proc/self/maps") as maps:
        libs = sorted(set(line.split()[-1] for line in maps if "libnvidia-ml" in line))
    print("== NVML library: %s" % ", ".join(libs))
    pynvml.nvmlShutdown()
EOF

cat >"${WORK}/args.json" <<EOF
{"ANSIBLE_MODULE_ARGS": {"expect": {"count": ${COUNT}, "compute_capability": "${CC}"}, "register_facts": true}}
EOF
echo "== args: $(cat "${WORK}/args.json")" >&2

set +e
PYTHONPATH="${WORK}/collections" "${PY}" "${REPO}/plugins/modules/nvml_vram_info.py" "${WORK}/args.json" >"${WORK}/result.json"
RC=$?
set -e
"${PY}" -m json.tool "${WORK}/result.json" || cat "${WORK}/result.json"
if [ -n "${OUT:-}" ]; then
    cp "${WORK}/result.json" "${OUT}"
fi
echo "== module exit status: ${RC}" >&2
exit "${RC}"
