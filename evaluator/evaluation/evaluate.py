"""evaluate as a library call: the `doccount-evaluate` options in (one EvaluateOptions), a run folder
written, an exit code out. The steps, each a function: load and check the data, resolve endpoints and
sampling, build the RunConfig and check it against the folder's, grow the question set, send the rest."""

from __future__ import annotations

import asyncio
import json
import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.errors import ExitCode, NotFinished, UserError
from evaluator.core.jsonl import JSONObject
from evaluator.core.output import say
from evaluator.core.secrets import api_key_from_env
from evaluator.core.text import examples, utc_now
from evaluator.data.benchmarks import Benchmark, get_benchmark
from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.data.parquet import DataError, DataSource, build_manifest, manifest_digest
from evaluator.evaluation.data_check import (
    data_record,
    duplicate_ids,
    duplicates_message,
    load_source,
    validate_data,
)
from evaluator.evaluation.ending import note_rows, stop_when_orphaned
from evaluator.evaluation.options import EvaluateOptions, batch_settings, evaluate_params
from evaluator.evaluation.reachability import nothing_listening, refusal_line, unreachable
from evaluator.evaluation.recorded import recorded_settings
from evaluator.evaluation.runner import RunPlan, RunStats, settings_from_config
from evaluator.request.body import RequestBuildError, validate_extra_body
from evaluator.request.endpoint import VLLM_DEFAULT_BASE_URL, EndpointError, normalize_base_url
from evaluator.request.ratelimit import RetryPolicy
from evaluator.request.shape import Preset, load_preset, resolve_sampling
from evaluator.runfolder.batches import held_by_batches
from evaluator.runfolder.files import (
    CONFIG,
    MANIFEST,
    RecordWriter,
    RunFolderError,
    RunLock,
    discard_unused,
    done_keys,
    ensure_run_root,
    write_json_atomic,
    write_manifest,
)
from evaluator.runfolder.manifest import (
    ManifestError,
    changed_questions,
    changed_text_message,
    folder_question_set,
    load_manifest,
)
from evaluator.runfolder.provenance import environment_info, served_provenance, server_info
from evaluator.runfolder.runconfig import (
    RunConfig,
    build_run_config,
    check_compatible,
    continue_run,
    load_run_config,
)


def default_run_name(benchmark: str, model: str) -> str:
    return f"{benchmark}__" + re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_")


def parse_extra_body(extra_body_json: str | None) -> JSONObject:
    if not extra_body_json:
        return {}
    try:
        extra = json.loads(extra_body_json, parse_constant=_not_json)
    except ValueError as exc:
        raise RequestBuildError(
            f"--extra-body-json is not valid JSON ({exc}); pass an object such as '{{\"top_k\": 20}}'"
        ) from None
    return validate_extra_body(extra)


def _not_json(constant: str) -> Any:
    """NaN and Infinity: Python's json reads them, but they are not JSON and a server would refuse them."""
    raise ValueError(f"{constant} is not a JSON number")


def resolve_urls(
    backend: str, base_urls: tuple[str, ...], env_value: str, api_key: str | None = None
) -> list[str]:
    """The endpoints: --base-url, else MODEL_API_BASE_URL (comma-separated), else vLLM's; normalized."""
    urls = list(base_urls) or [u for u in env_value.split(",") if u.strip()]
    if not urls:
        if backend != "vllm":
            raise EndpointError("--backend api needs an endpoint: pass --base-url or set MODEL_API_BASE_URL")
        urls = [VLLM_DEFAULT_BASE_URL]
    return list(dict.fromkeys(normalize_base_url(u, api_key) for u in urls))


def existing_questions(root: Path) -> list[ManifestEntry]:
    """The folder's question set so far (none for a new or unreadable folder)."""
    if not (root / MANIFEST).exists():
        return []
    try:
        return load_manifest(root)
    except ManifestError as exc:
        say(f"warning: {exc}; it is rewritten from this run's selection")
        return []


def prepare_folder(
    root: Path, config: RunConfig, data: list[ManifestEntry], selection: list[ManifestEntry]
) -> list[ManifestEntry]:
    """Check the folder against this run, write run_config.json and the grown manifest; its questions."""
    existing = existing_questions(root)
    config_path = root / CONFIG
    if config_path.exists():
        old = load_run_config(config_path)
        changed = changed_questions(existing, data)
        if changed:  # named one by one; check_compatible's data digest would only say "some"
            raise RunFolderError(changed_text_message(root, changed))
        check_compatible(old, config, root)
        config, warning = continue_run(old, config)
        if warning:
            say(f"warning: {warning}")
    folder = folder_question_set(data, selection, existing)
    config.data["selection"] = {"questions": len(folder), "manifest_sha256": manifest_digest(folder)}
    write_json_atomic(config_path, config.to_dict())
    write_manifest(root, folder)
    return folder


def evaluate(opts: EvaluateOptions, check_only: bool = False, batch_prepare: bool = False) -> int:
    """Run `doccount-evaluate` (check_only: `doccount check-endpoint`; batch_prepare: `doccount batch
    prepare`); the exit code: 0 done, 1 dry-run failure, 2 a configuration the first answers refuse or
    contradict, 3 request errors, an early stop or nothing listening (a re-run continues), 130 interrupted."""
    stop_when_orphaned()  # a sweep's child: stop with the sweep
    extra = parse_extra_body(opts.extra_body_json)
    if opts.seed is not None and "seed" in extra:
        raise RequestBuildError(
            "--extra-body-json sets seed and --seed is given; drop one (--seed derives one per question)"
        )
    bench, source = load_source(opts.benchmark, opts.data_files, opts.dataset, opts.revision)
    manifest = build_manifest(bench, source)
    if not manifest:
        raise DataError("the data has no rows")
    selection = manifest[: opts.limit] if opts.limit else manifest
    if opts.dry_run:
        return validate_data(bench, source, manifest, selection)
    dups = duplicate_ids(manifest)
    if dups:
        raise DataError(duplicates_message(dups))
    shape_preset = load_preset(opts.preset) if opts.preset else None
    servers = None if check_only or batch_prepare else ask_servers(opts)
    recorded = run_settings(opts, bench, extra, shape_preset, batch_prepare)
    settings = settings_from_config(RunConfig.from_dict(recorded), api_key_from_env())
    if check_only:  # doccount check-endpoint: one row, nothing written
        from evaluator.evaluation.check import check_endpoint

        return check_endpoint(settings, source, selection)
    name = opts.run_name or os.environ.get("RUN_NAME") or default_run_name(bench.name, opts.model)
    root = opts.run_root or Path("runs") / name
    created = not root.exists()
    root = ensure_run_root(root)
    with RunLock(root):
        asked = servers.result() if servers is not None else {}
        down = unreachable(asked)
        if down:  # a re-run once the server is up continues: exit 3, not a configuration error
            if created:  # nothing was sent: leave no folder that holds only a lock file behind
                discard_unused(root)
            raise NotFinished(nothing_listening(down))
        config = fresh_run_config(recorded, source, manifest, selection, asked)
        folder = prepare_folder(root, config, manifest, selection)
        plan = RunPlan(settings, source, root, folder, selection, opts.overwrite, opts.quiet)
        if batch_prepare or opts.batch:
            return send_as_batches(opts, plan, batch_prepare)
        return send_pending(plan)


def send_as_batches(opts: EvaluateOptions, plan: RunPlan, prepare: bool) -> int:
    """--batch (the provider's Batch API) or `batch prepare` (input files for vllm run-batch)."""
    if prepare:
        from evaluator.evaluation.batch_offline import prepare_files

        return prepare_files(plan, opts.batch_max_mb)
    from evaluator.evaluation.batch import send_batches

    return send_batches(plan, opts.batch_max_mb, opts.batch_poll_s, opts.batch_max_wait)


def endpoint_access(opts: EvaluateOptions) -> tuple[list[str], str | None]:
    """The endpoints and the API key: --base-url, env MODEL_API_BASE_URL / MODEL_API_KEY."""
    api_key = api_key_from_env()
    urls = resolve_urls(opts.backend, opts.base_urls, os.environ.get("MODEL_API_BASE_URL", ""), api_key)
    return urls, api_key


def ask_servers(opts: EvaluateOptions) -> Future[JSONObject]:
    """What each endpoint says about itself (provenance.server_info), asked in a thread: its round trips
    overlap the HTTP client's import, about a second."""
    urls, api_key = endpoint_access(opts)
    pool = ThreadPoolExecutor(max_workers=1)
    # each ask within --timeout (at most server_info's own 10 s), from connect to the last byte
    wait_s = min(opts.timeout, 10.0)
    asked = pool.submit(lambda: {u: server_info(u, api_key, wait_s) for u in urls})
    pool.shutdown(wait=False)  # the thread ends with its task; the caller waits on the result
    return asked


def run_settings(
    opts: EvaluateOptions,
    bench: Benchmark,
    extra: JSONObject,
    shape_preset: Preset | None,
    batch_prepare: bool,
) -> JSONObject:
    """What run_config.json records of the options: the endpoints (--base-url, env MODEL_API_BASE_URL),
    the sampling as resolved, the preset, the batch policy, and every Recorded option."""
    urls, _ = endpoint_access(opts)
    sampling = resolve_sampling(
        bench.default_sampling,
        extra,
        temperature=opts.temperature,
        top_p=opts.top_p,
        max_tokens=opts.max_tokens,
        max_tokens_field=opts.max_tokens_field,
        preset=shape_preset,
    )
    settings = recorded_settings(opts, evaluate_params())
    policy = settings.setdefault("request_policy", {})
    policy["retry_after_max_s"] = RetryPolicy().retry_after_max_s
    if batch := batch_settings(opts, batch_prepare):
        policy["batch"] = batch
    if shape_preset:  # the whole record (name, file hash, flags), not only the name the option gave
        settings["preset"] = shape_preset.record()
    return {
        "benchmark": bench.name,
        "model": opts.model,
        "backend": opts.backend,
        "endpoint": urls[0],
        "endpoints": urls,
        "sampling": msgspec.to_builtins(sampling),
        **settings,
    }


def fresh_run_config(
    settings: JSONObject,
    source: DataSource,
    manifest: list[ManifestEntry],
    selection: list[ManifestEntry],
    servers: JSONObject,
) -> RunConfig:
    """This invocation's RunConfig: the settings, the data, prompt hashes, environment, servers, now."""
    first: JSONObject = next(iter(servers.values()), {})
    serving, launch, containers = served_provenance(first, settings["model"])  # a sweep's contract, or Make's
    return build_run_config(
        settings,
        data_record(source, manifest, selection),
        get_benchmark(settings["benchmark"]).prompt_hashes(),
        environment_info(containers),
        servers,
        utc_now(),
        serving=serving,
        launch=launch,
    )


def send_pending(plan: RunPlan) -> int:
    """Send this run's selected questions that are not done yet; report and return the exit code."""
    settings, root, selection = plan.settings, plan.root, plan.selection
    from evaluator.evaluation.runner import Evaluator, Progress, RunStopped, run_with_signals
    from evaluator.request.breaker import BudgetReached, EndpointDown, EndpointRefused

    skip, held, holders = _rows_to_skip(root, plan.overwrite)
    repeats = settings.repeats
    units = len(selection) * repeats
    pending = sum(1 for e in selection for r in range(repeats) if (e.sample_id, r) not in skip)
    what = f"{len(selection)} questions" + (f" x {repeats} repeats" if repeats > 1 else "")
    more = f" (of the folder's {len(plan.folder)})" if len(plan.folder) > len(selection) else ""
    say(
        f"[evaluate] {settings.benchmark.name} | model {settings.model} | {', '.join(settings.base_urls)} | "
        f"{what}{more}, {units - pending} already done, {pending} to evaluate | run folder {root}"
    )
    ev = Evaluator(settings, RecordWriter(root))
    progress = Progress(pending, enabled=not plan.quiet)
    try:
        stats = asyncio.run(run_with_signals(ev, plan.source, selection, skip, progress))
    except EndpointRefused as exc:
        progress.close()
        code, line = refusal_line(exc, settings.base_urls[0], settings.model, settings.api_key)
        raise (NotFinished if code == ExitCode.INCOMPLETE else UserError)(line) from None
    except (EndpointDown, RunStopped) as exc:
        progress.close()
        raise NotFinished(str(exc)) from None
    except BudgetReached as exc:
        progress.close()
        say(f"[evaluate] {exc}")
        return ExitCode.INCOMPLETE
    finally:  # a smoke stop (reasoning or format: the first answers show the run would not count) goes on up: exit 2
        progress.close()
    code = exit_code(stats, root)
    waiting = sum(1 for e in selection for r in range(repeats) if (e.sample_id, r) in held)
    if waiting and code != ExitCode.INTERRUPTED:
        say(
            f"[evaluate] {waiting} row(s) were not sent: they are in live batch(es) at the provider "
            f"({examples(holders)}). Re-run with --batch to collect them, or cancel them with "
            f"`doccount batch cancel --run-root {root}` and re-run"
        )
        return code or ExitCode.INCOMPLETE
    return code


def _rows_to_skip(
    root: Path, overwrite: bool
) -> tuple[set[tuple[str, int]], set[tuple[str, int]], list[str]]:
    """The rows not to send (done unless `overwrite`, held by a live batch), the held ones, their batches."""
    done, report = done_keys(root)
    if report.torn_tail:
        say("note: the last record line was torn by an earlier crash; that row will be re-evaluated")
    # a row in a batch that may still answer is never sent online too (it would be paid twice)
    held, holders = held_by_batches(root)
    held -= done
    return (set() if overwrite else done) | held, held, holders


def exit_code(stats: RunStats, root: Path) -> int:
    rec = note_rows(stats.recorded)  # for a sweep's unit (evaluation.ending)
    say(
        f"[evaluate] recorded {sum(rec.values())} row(s): ok {rec['ok']}, request errors {rec['request_error']}, "
        f"data errors {rec['data_error']} | {stats.pacing.line() if stats.pacing else 'nothing sent'} "
        f"| run folder {root}"
    )
    if stats.interrupted:
        say("[evaluate] interrupted: finished rows are saved; re-run the same command to resume")
        return ExitCode.INTERRUPTED
    if rec["request_error"]:
        say(
            f"[evaluate] {rec['request_error']} request(s) failed after retries (see request_error in the "
            "records); re-run the same command to retry them"
        )
        return ExitCode.INCOMPLETE
    return ExitCode.OK
