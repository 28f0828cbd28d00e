"""The `doccount-evaluate` options: their click declarations and the typed value they make (by name)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import click

from evaluator.core.text import see_docs
from evaluator.data.benchmarks import DEFAULT_BENCHMARK, REGISTRY
from evaluator.evaluation.recorded import Recorded
from evaluator.request.shape import FiniteRange, NumberOrNone, StripToken, preset_names
from evaluator.runfolder.runconfig import BatchPolicy


@dataclass(frozen=True, kw_only=True)
class EvaluateOptions:
    """What `doccount-evaluate` was asked to do; evaluator.evaluation.evaluate.evaluate takes one of these."""

    backend: str
    model: str
    base_urls: tuple[str, ...]
    benchmark: str
    data_files: str | None
    dataset: str | None
    revision: str | None
    run_root: Path | None
    run_name: str | None
    dry_run: bool
    concurrency: int
    temperature: float | str | None
    top_p: float | str | None
    max_tokens: int | str | None
    max_tokens_field: str | None
    preset: str | None
    timeout: float
    max_retries: int
    retry_backoff: float
    retry_max_wait: float
    extra_body_json: str | None
    overwrite: bool
    retry_parse_failures: int
    seed: int | None
    repeats: int
    limit: int | None
    max_total_tokens: int | None
    max_requests_per_minute: float | None
    max_tokens_per_minute: float | None
    quiet: bool
    # --batch: the provider's OpenAI-format Batch API instead of one request per row (evaluation.batch)
    batch: bool = False
    batch_max_mb: float = 190.0
    batch_poll_s: float = 30.0
    batch_max_wait: float | None = None
    rate_limit_patience: float = 600.0
    reasoning: str | None = None  # --reasoning on|off (env REASONING): the declared mode; None: not declared
    strip_token: tuple[str, ...] = ()  # --strip-token (repeatable): removed before the strict parser
    no_smoke_check: bool = False  # --no-smoke-check: neither smoke check (reasoning, format) stops the run


# The `doccount evaluate` options, in --help order (top first). cli.main declares the evaluate and
# check-endpoint commands with them; options_from_args parses the same words without the command line.
_EVALUATE_OPTIONS = [
    click.option(
        "--backend",
        type=click.Choice(["api", "vllm"]),
        default="api",
        show_default=True,
        help="api: a remote OpenAI-compatible endpoint (--base-url); vllm: your own vLLM server, "
        "http://localhost:8000/v1 unless --base-url says otherwise.",
    ),
    click.option("--model", required=True, help="Model id sent in requests."),
    click.option(
        "--base-url",
        "base_urls",
        multiple=True,
        help="Endpoint (env MODEL_API_BASE_URL, comma-separated for several); vllm: http://localhost:8000/v1. "
        "Repeat to spread requests over several servers.",
    ),
    click.option(
        "--benchmark",
        type=click.Choice(sorted(REGISTRY)),
        default=DEFAULT_BENCHMARK,
        show_default=True,
        help="Which benchmark the data is: its schema, prompt, answer parser and subgroups.",
    ),
    click.option(
        "--data-files", default=None, help="Local parquet glob, e.g. 'data/test-*.parquet' (quote it)."
    ),
    click.option("--dataset", default=None, help="Hub dataset id (default: the benchmark's)."),
    click.option("--revision", default=None, help="Hub dataset revision (branch, tag or commit) to pin."),
    click.option(
        "--run-root",
        type=click.Path(path_type=Path),
        default=None,
        help="Run folder (default runs/<run name>).",
    ),
    click.option("--run-name", default=None, help="Run name (env RUN_NAME; default <benchmark>__<model>)."),
    click.option("--dry-run", is_flag=True, help="Validate the data without calling a model."),
    click.option(
        "--temperature", type=NumberOrNone(float, 0, 2), default=None, help="Default 1; 'none': not sent."
    ),
    click.option(
        "--top-p",
        type=NumberOrNone(float, 0, 1, low_open=True),
        default=None,
        help="Default 0.95; 'none': not sent.",
    ),
    click.option(
        "--max-tokens",
        type=NumberOrNone(int, 1),
        default=None,
        help="Default 32768 (DocCount); 'none': not sent.",
    ),
    click.option(
        "--max-tokens-field",
        type=click.Choice(["max_tokens", "max_completion_tokens"]),
        default=None,
        help="Name of the output-limit field sent (default max_tokens).",
    ),
    click.option(
        "--retry-parse-failures",
        cls=Recorded,
        record="retry_parse_failures",
        omit=(),
        type=click.IntRange(0, 100),
        default=0,
        show_default=True,
        help="Ask again this many times when an answer has no parsable count (earlier answers are kept).",
    ),
    click.option(
        "--seed",
        cls=Recorded,
        record="seed",
        type=int,
        default=None,
        help="Send an integer seed per request, derived from this, the sample id and the repeat (default: none).",
    ),
    click.option(
        "--repeats",
        cls=Recorded,
        record="repeats",
        omit=(None, 1),
        type=click.IntRange(1, 1000),
        default=1,
        show_default=True,
        help="Sample every question K times.",
    ),
    click.option(
        "--reasoning",
        cls=Recorded,
        record="reasoning",
        type=click.Choice(["on", "off"]),
        envvar="REASONING",
        default=None,
        help="The reasoning mode the run claims (env REASONING; default: not declared). The first 4 answered "
        "responses are checked: if all contradict it, the run stops (exit 2) with a line naming the fix.",
    ),
    click.option(
        "--preset",
        cls=Recorded,
        record="preset.name",
        type=click.Choice(preset_names()),
        default=None,
        help="A shipped set of the request-shape flags above (evaluator/request/presets/); explicit flags win.",
    ),
    click.option(
        "--strip-token",
        cls=Recorded,
        record="strip_tokens",
        omit=(None, ()),
        callback=lambda _ctx, _param, tokens: tuple(dict.fromkeys(tokens)),  # each once, in order
        type=StripToken(),
        multiple=True,
        help="Remove this exact string from each answer before the strict parser (repeatable; records keep "
        "the raw text), e.g. a special token the server leaves after the tag. A token with a digit or "
        "<answer / </answer is refused.",
    ),
    click.option(
        "--concurrency",
        cls=Recorded,
        record="request_policy.concurrency",
        reproduce="always",
        type=click.IntRange(1, 4096),
        default=16,
        show_default=True,
        help="Requests in flight at once (lowered by itself while the endpoint answers 429).",
    ),
    click.option(
        "--timeout",
        cls=Recorded,
        record="request_policy.timeout_s",
        reproduce="always",
        type=FiniteRange(0, min_open=True),
        default=600.0,
        show_default=True,
        help="Seconds one request may take before it counts as failed (and is retried).",
    ),
    click.option(
        "--max-retries",
        cls=Recorded,
        record="request_policy.max_retries",
        reproduce="always",
        type=click.IntRange(0, 100),
        default=4,
        show_default=True,
        help="Retries of a failed request (connection, timeout, 429, 5xx) after the first attempt.",
    ),
    click.option(
        "--retry-backoff",
        cls=Recorded,
        record="request_policy.backoff_base_s",
        reproduce="always",
        type=FiniteRange(0),
        default=1.0,
        show_default=True,
        help="First backoff (s).",
    ),
    click.option(
        "--retry-max-wait",
        cls=Recorded,
        record="request_policy.backoff_max_s",
        reproduce="always",
        type=FiniteRange(0),
        default=60.0,
        show_default=True,
        help="Longest wait between retries (s); the backoff doubles up to it.",
    ),
    click.option(
        "--rate-limit-patience",
        cls=Recorded,
        record="request_policy.rate_limit_patience_s",
        reproduce="always",
        type=FiniteRange(0, min_open=True),
        default=600.0,
        show_default=True,
        help="Give an endpoint up when nothing has succeeded for this many seconds while it keeps refusing "
        "(429/402 with a wait); with one endpoint the run stops (exit 3) and a re-run continues.",
    ),
    click.option(
        "--no-smoke-check",
        cls=Recorded,
        record="request_policy.smoke_check",
        invert=True,
        omit=(True,),
        is_flag=True,
        help="Do not stop when the first answers contradict --reasoning (first 4) or all fail the strict "
        "parser (first 8): score them as they are.",
    ),
    click.option(
        "--max-requests-per-minute",
        cls=Recorded,
        record="request_policy.max_requests_per_minute",
        omit=(),
        reproduce=None,
        type=FiniteRange(0, min_open=True),
        default=None,
        help="Pace requests under this rate (all endpoints together); the endpoint's own limit headers and "
        "429s are honoured either way.",
    ),
    click.option(
        "--max-tokens-per-minute",
        cls=Recorded,
        record="request_policy.max_tokens_per_minute",
        omit=(),
        reproduce=None,
        type=FiniteRange(0, min_open=True),
        default=None,
        help="Pace requests under this many tokens per minute, estimated from the usage recorded so far.",
    ),
    click.option(
        "--max-total-tokens",
        cls=Recorded,
        record="request_policy.max_total_tokens",
        reproduce=None,
        type=click.IntRange(1),
        default=None,
        help="Spend guard: stop once this invocation's records report more tokens (resume continues).",
    ),
    click.option("--extra-body-json", default=None, help="Extra request fields as a JSON object."),
    click.option("--overwrite", is_flag=True, help="Re-evaluate every selected row."),
    click.option(
        "--limit", type=click.IntRange(1), default=None, help="First N questions only (smoke runs)."
    ),
    click.option(
        "--quiet", is_flag=True, help="No progress line (errors and the closing summary still print)."
    ),
    click.option(
        "--batch",
        is_flag=True,
        help="Send through the provider's OpenAI-format Batch API (files + batches) instead of one request "
        f"per row: about half the price, within 24 h{see_docs('batch.md')}.",
    ),
    click.option(
        "--batch-max-mb",
        type=click.FloatRange(0, min_open=True),
        default=190.0,
        show_default=True,
        help="Batch input files stay under this many MB (10^6 bytes) and 50,000 requests.",
    ),
    click.option(
        "--batch-poll-s",
        type=click.FloatRange(0, min_open=True),
        default=30.0,
        show_default=True,
        help="Seconds between polls of the batches in flight.",
    ),
    click.option(
        "--batch-max-wait",
        type=click.FloatRange(0, min_open=True),
        default=None,
        help="Stop waiting on batches after S seconds (exit 3): their ids stay in the run folder and a re-run "
        "of the same command goes on collecting them. Default: wait until they end.",
    ),
]


# --help shows the options under these headings, in this order (cli.base.GroupedCommand); params by name.
OPTION_GROUPS: list[tuple[str, list[str]]] = [
    ("Endpoint", ["backend", "model", "base_urls"]),
    ("Data", ["benchmark", "data_files", "dataset", "revision", "limit", "dry_run"]),
    (
        "Sampling and request shape",
        [
            "temperature",
            "top_p",
            "max_tokens",
            "max_tokens_field",
            "preset",
            "reasoning",
            "strip_token",
            "no_smoke_check",
            "extra_body_json",
            "seed",
            "repeats",
        ],
    ),
    ("Run folder", ["run_root", "run_name", "overwrite", "quiet"]),
    (
        "Retries and rate limits",
        [
            "concurrency",
            "timeout",
            "max_retries",
            "retry_backoff",
            "retry_max_wait",
            "retry_parse_failures",
            "max_requests_per_minute",
            "max_tokens_per_minute",
            "rate_limit_patience",
            "max_total_tokens",
        ],
    ),
    ("Batch (the provider's Batch API)", ["batch", "batch_max_mb", "batch_poll_s", "batch_max_wait"]),
]


def evaluate_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a click command with every `doccount evaluate` option."""
    for decorator in reversed(_EVALUATE_OPTIONS):
        f = decorator(f)
    return f


def options_from_args(args: list[str], prog_name: str = "doccount evaluate") -> EvaluateOptions:
    """The EvaluateOptions of `doccount evaluate ARGS`, parsed by click (click.UsageError on a bad word)."""
    command = click.Command(prog_name, callback=None)
    evaluate_options(command)  # click's option decorators add their parameters to a Command in place
    with command.make_context(prog_name, list(args)) as ctx:
        return EvaluateOptions(**ctx.params)


@cache
def evaluate_params() -> tuple[click.Parameter, ...]:
    """The evaluate options as click parameters, in their declared order (what `Recorded` reads)."""
    return tuple(click.command("evaluate")(evaluate_options(lambda **_: None)).params)


def batch_settings(opts: EvaluateOptions, prepare: bool) -> BatchPolicy | None:
    """run_config.json request_policy.batch: how rows are sent (never what a request holds)."""
    if prepare:
        return {"mode": "offline_files", "max_mb": opts.batch_max_mb}
    if opts.batch:
        wait: BatchPolicy = {} if opts.batch_max_wait is None else {"max_wait_s": opts.batch_max_wait}
        return {"mode": "batch_api", "max_mb": opts.batch_max_mb, "poll_s": opts.batch_poll_s, **wait}
    return None
