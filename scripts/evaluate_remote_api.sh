#!/usr/bin/env bash
# Evaluate against a remote OpenAI-compatible endpoint. Thin wrapper over `doccount-evaluate`.
# Environment: MODEL (required), MODEL_API_BASE_URL (required), MODEL_API_KEY (read by the evaluator
# from the environment only), RUN_NAME, BENCHMARK, DATA_FILES, CONCURRENCY, TEMPERATURE, TOP_P,
# MAX_TOKENS, TIMEOUT, MAX_RETRIES, EXTRA_BODY_JSON, RETRY_PARSE_FAILURES, LIMIT.
# Extra arguments are passed through to doccount-evaluate.
set -euo pipefail
: "${MODEL:?set MODEL to the model id the endpoint exposes}"
: "${MODEL_API_BASE_URL:?set MODEL_API_BASE_URL, e.g. https://api.example.com/v1}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec env BACKEND=api bash "$here/_evaluate.sh" "$@"
