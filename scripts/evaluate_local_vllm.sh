#!/usr/bin/env bash
# Evaluate against a self-hosted vLLM server (default http://localhost:8000/v1; started with
# scripts/serve_vllm.sh). Thin wrapper over `doccount-evaluate --backend vllm`.
# Environment: MODEL (required: the served model name), MODEL_API_BASE_URL (optional), RUN_NAME,
# BENCHMARK, DATA_FILES, CONCURRENCY, TEMPERATURE, TOP_P, MAX_TOKENS, TIMEOUT, MAX_RETRIES,
# EXTRA_BODY_JSON, RETRY_PARSE_FAILURES, LIMIT. Extra arguments are passed through.
set -euo pipefail
: "${MODEL:?set MODEL to the model name the vLLM server serves}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec env BACKEND=vllm bash "$here/_evaluate.sh" "$@"
