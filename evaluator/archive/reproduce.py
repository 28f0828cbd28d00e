"""Plan and compare the re-run of an archived evaluation (doccount reproduce).

A key goes only to an endpoint the user named (`--base-url URL`, or `--base-url RUN=URL` for a run of a
sweep archive) or confirmed at a prompt: a crafted archive can record any URL (and key variable), so an
endpoint from the archive (or MODEL_API_BASE_URL) is used as it is only when no key would go with it;
without a terminal to ask on, it is refused before anything is sent.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evaluator.archive.base import ArchiveError
from evaluator.archive.opened import ArchivedData, OpenedArchive, archived_data, local_pattern
from evaluator.archive.plan import evaluate_args, format_command, serve_commands
from evaluator.archive.verify import extract_prompts, verify_archive
from evaluator.core.boundary import clip
from evaluator.core.errors import ExitCode, NotFinished, UserError
from evaluator.core.jsonl import printable
from evaluator.core.output import answer, say
from evaluator.core.secrets import redactor_from_env
from evaluator.data.benchmarks import Benchmark, get_benchmark
from evaluator.data.benchmarks.base import PROMPTS_ENV
from evaluator.data.parquet import (
    DataError,
    DataSource,
    build_manifest,
    check_schema,
    file_sha256,
    manifest_digest,
    resolve_hub,
    resolve_local,
)
from evaluator.evaluation.evaluate import evaluate
from evaluator.evaluation.options import options_from_args
from evaluator.runfolder.files import MERGED
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring import score_run
from evaluator.scoring.compare import compare_runs, paired_table
from evaluator.scoring.identity import render_identity, response_identity
from evaluator.scoring.row import ScoredRow, read_scored_rows
from evaluator.scoring.stats import mcnemar_exact


def _data_source(
    data: ArchivedData, bench: Benchmark, data_files: str | None
) -> tuple[DataSource, list[str]]:
    """Where the data is: the user's --data-files; else the recorded local pattern, used only when it names
    files under the working folder and they are as many (and as large) as the archive lists, so no other
    file is ever read; else the recorded hub dataset and revision (checked when the archive was read)."""
    wanted = ", ".join(f"{f.name} (SHA-256 {f.sha256})" for f in data.files)
    if data_files is not None:
        return resolve_local(data_files), ["--data-files", data_files]
    if data.source == "hub":
        args = ["--dataset", str(data.dataset)] + (["--revision", data.revision] if data.revision else [])
        return resolve_hub(bench, data.dataset, data.revision), args
    pattern = local_pattern(data.pattern)
    if pattern is None:
        raise ArchiveError(
            f"the archive records the data pattern {clip(repr(data.pattern), 80)}, which names no files under "
            f"this folder, so it is not read; pass --data-files GLOB with the original files: {wanted}"
        )
    try:
        source = resolve_local(pattern)
    except DataError:
        source = DataSource([])
    sizes = sorted(f.bytes for f in data.files if f.bytes is not None)
    found = sorted(p.stat().st_size for p in source.files)
    if not source.files or len(found) != len(data.files) or (sizes and sizes != found):
        raise ArchiveError(
            f"the original run read local files ({pattern!r}) that are not here; pass --data-files GLOB "
            f"with the same files: {wanted}"
        )
    return source, ["--data-files", pattern]


def check_reproduction_data(config: RunConfig, data_files: str | None) -> tuple[list[str], str]:
    """The data arguments for evaluate, after checking file SHA-256s and manifest digests against the archive."""
    data = archived_data(config.data)
    bench = get_benchmark(config.benchmark)
    source, args = _data_source(data, bench, data_files)
    got = [(p.name, file_sha256(p)) for p in source.files]
    want = sorted(f.sha256 for f in data.files)
    if sorted(s for _, s in got) != want:
        unknown = [f"{n} (SHA-256 {s[:12]}...)" for n, s in got if s not in want]
        absent = [
            f"{f.name} (SHA-256 {f.sha256[:12]}...)"
            for f in data.files
            if f.sha256 not in {s for _, s in got}
        ]
        raise ArchiveError(
            "the data files do not match the archive"
            + (f"; not archived: {', '.join(unknown)}" if unknown else "")
            + (f"; missing: {', '.join(absent)}" if absent else "")
            + " (see dataset.json)"
        )
    check_schema(bench, source)
    manifest = build_manifest(bench, source)
    if manifest_digest(manifest) != data.manifest_sha256:
        raise ArchiveError(
            "the data's question set (manifest SHA-256) does not match the archive's dataset.json"
        )
    n = data.selection.questions
    sel = manifest[:n] if n is not None else manifest
    if data.selection.manifest_sha256 and manifest_digest(sel) != data.selection.manifest_sha256:
        raise ArchiveError(
            "the selected questions (selection manifest SHA-256) do not match the archive's dataset.json"
        )
    where = f"{len(source.files)} file(s), SHA-256s and manifest {str(data.manifest_sha256)[:12]}... match"
    return args, where


def reproduction_check(original: list[ScoredRow], new: list[ScoredRow]) -> dict[str, Any]:
    """The original and the reproduced rows paired by (sample_id, repeat): the paired right/wrong table
    (scoring.compare.paired_table), its exact McNemar p, and how many answers and request bytes match."""
    by_id = {r.key: r for r in new}
    pairs = [(o, by_id[o.key]) for o in original if o.key in by_id]
    t = paired_table([o.correct for o, _ in pairs], [r.correct for _, r in pairs])
    table = {
        "both_right": t["both_correct"],
        "only_original": t["only_a"],
        "only_reproduction": t["only_b"],
        "both_wrong": t["neither"],
    }
    same_answer = sum(
        1 for o, r in pairs if o.parsed_answer is not None and o.parsed_answer == r.parsed_answer
    )
    same_request = sum(1 for o, r in pairs if o.request_sha256 and o.request_sha256 == r.request_sha256)
    repeated = any(o.repeat is not None for o, _ in pairs)  # --repeats: pairs are (question, repeat)
    return {
        "questions": len(pairs),
        "unit": "responses (question, repeat)" if repeated else "questions",
        "original_correct": sum(1 for o in original if o.correct),
        "reproduction_correct": sum(1 for r in new if r.correct),
        "table": table,
        "mcnemar_p": mcnemar_exact(table["only_original"], table["only_reproduction"]),
        "same_answer": same_answer,
        "same_request_bytes": same_request,
    }


def render_comparison(c: dict[str, Any], original: str, reproduction: str, table: bool = True) -> str:
    """The reproduction check; with `table`, also the paired table and McNemar p (when compare.py is absent)."""
    n = c["questions"]
    t = c["table"]

    def pct(k: int) -> str:
        return f"{100 * k / n:.2f}%" if n else "n/a"

    unit = c.get("unit", "questions")
    out = [f"## Reproduction of `{original}` as `{reproduction}` ({n} paired {unit})", ""]
    if table:
        diff = (c["reproduction_correct"] - c["original_correct"]) / n * 100 if n else 0.0
        out += [
            f"original: {c['original_correct']} / {n} = {pct(c['original_correct'])}; reproduction: "
            f"{c['reproduction_correct']} / {n} = {pct(c['reproduction_correct'])} (difference {diff:+.2f} points)",
            "",
            "| | reproduction right | reproduction wrong |",
            "| --- | ---: | ---: |",
            f"| original right | {t['both_right']} | {t['only_original']} |",
            f"| original wrong | {t['only_reproduction']} | {t['both_wrong']} |",
            "",
        ]
    out += [
        f"Exact McNemar p = {c['mcnemar_p']:.4g} (discordant pairs: {t['only_original']} right only in the "
        f"original, {t['only_reproduction']} right only in the reproduction).",
        f"Same parsed answer: {c['same_answer']} / {n}; byte-identical requests (request_sha256): "
        f"{c['same_request_bytes']} / {n}.",
        "",
    ]
    return "\n".join(out)


def reproduce(
    archive: OpenedArchive,
    base_url: list[str],
    data_files: str | None,
    run_root: Path | None,
    concurrency: int | None,
    quiet: bool,
    confirm: Confirm | None = None,
) -> int:
    """`doccount reproduce`: verify the archive, re-run it with the recorded settings into a new folder,
    score it and print the comparison; the exit code (1: the archive does not verify)."""
    archive_file = archive.source
    with tempfile.TemporaryDirectory(prefix="doccount-reproduce-") as work:
        result = verify_archive(archive, Path(work))
        if not result.ok or result.run_dir is None or archive.run is None or archive.run.config is None:
            for problem in result.problems:
                say(f"MISMATCH {problem}")
            say(f"error: {archive_file} does not verify; refusing to reproduce from it")
            return ExitCode.NOT_VERIFIED
        run, config = archive.run, archive.run.config  # verified: a valid run configuration
        serve = serve_commands(config)  # a serving value no make line may carry is refused here, first
        urls = _endpoints(config, run.name, base_url, confirm)
        data_args, data_note = check_reproduction_data(config, data_files)
        new_root = run_root or Path("runs") / f"{run.name}-reproduce"
        args = evaluate_args(config, data_args, urls, str(new_root), concurrency=concurrency)
        if quiet:
            args.append("--quiet")
        say(f"[reproduce] {archive_file} verified; data: {data_note}")
        for line in serve:
            say(f"[reproduce] serve the run's weights with: {line}")
        say(f"[reproduce] {format_command(['doccount', 'evaluate', *args])}")
        code = _evaluate_with_prompts(args, extract_prompts(archive, Path(work) / "bundle"))
        if code not in (0, 3):
            return code
        score_run(new_root)
        _print_comparison(result.run_dir, new_root, run.name)
    return code


def _endpoints(config: RunConfig, run: str, named: list[str], confirm: Confirm | None) -> list[str]:
    """The endpoints to re-run against: the named ones, else the recorded ones (a key only once confirmed)."""
    listed: list[str | None] = [*config.endpoints] or [config.endpoint]
    recorded = [str(u) for u in listed if u]
    fallback = [u for u in os.environ.get("MODEL_API_BASE_URL", "").split(",") if u] or recorded
    key = os.environ.get("MODEL_API_KEY", "").strip()
    has_key = bool(key) and key != "EMPTY"  # EMPTY: vLLM's placeholder for no key
    how = "--base-url URL (or unset MODEL_API_KEY for an endpoint that needs no key)"
    return key_endpoints(run, "MODEL_API_KEY", has_key, list(named), fallback, confirm, how)


def _evaluate_with_prompts(args: list[str], prompts: Path) -> int:
    """`doccount evaluate ARGS`, run in this process with the archived prompt files; its exit code."""
    options = options_from_args(args)
    old_prompts = os.environ.get(PROMPTS_ENV)
    os.environ[PROMPTS_ENV] = str(prompts)
    try:
        return evaluate(options)
    except NotFinished as exc:  # nothing listening, the endpoint down: what is done is compared
        say(f"error: {redactor_from_env()(str(exc))}")
        return exc.exit_code
    finally:
        if old_prompts is None:
            os.environ.pop(PROMPTS_ENV, None)
        else:
            os.environ[PROMPTS_ENV] = old_prompts


def _print_comparison(original_dir: Path, new_root: Path, name: str | None) -> None:
    original, new = read_scored_rows(original_dir / MERGED), read_scored_rows(new_root / MERGED)
    paired = reproduction_check(original, new)
    full = True
    try:
        answer(printable(compare_runs([original_dir, new_root]).markdown))
    except UserError as exc:
        say(f"warning: the full comparison failed ({exc})")
        full = False
    answer(render_comparison(paired, name or "original", new_root.name, table=not full))
    answer(render_identity(response_identity(original, new)))


# (run, the key's variable, the endpoints) -> the user's yes; None where there is no terminal to ask on
Confirm = Callable[[str, str, list[str]], bool]

# RUN=URL: a run name as a sweep can have one (sweep.SAFE_NAME), then the URL; a plain URL has "://" first
_RUN_URL = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,99})=(.+)")


def parse_base_urls(values: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The plain `--base-url URL` values and the `--base-url RUN=URL` ones, per run, in the order given."""
    plain: list[str] = []
    per_run: dict[str, list[str]] = {}
    for value in values:
        found = _RUN_URL.fullmatch(value.strip())
        if found and "://" not in found.group(1):
            per_run.setdefault(found.group(1), []).append(found.group(2))
        else:
            plain.append(value.strip())
    return plain, per_run


def endpoint_hosts(urls: Sequence[str]) -> str:
    """The endpoints as scheme://host[:port], terminal-safe (a crafted URL may hold control characters)."""
    shown = []
    for url in urls:
        try:
            parts = urlsplit(url)
            where = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        except ValueError:
            where = url
        shown.append(re.sub(r"[^\x21-\x7e]", "?", where)[:120])
    return ", ".join(shown) or "no endpoint"


def key_endpoints(
    run: str,
    variable: str,
    has_key: bool,
    named: list[str],
    recorded: list[str],
    confirm: Confirm | None,
    how: str,
) -> list[str]:
    """The endpoints to send the run's requests to: the ones the user named; else the recorded ones when no
    key goes with them or when the user confirmed them. ArchiveError (nothing sent) otherwise; `how` says
    how to name the endpoint (`--base-url URL` or `--base-url RUN=URL`, and the way out)."""
    if named:
        return named
    if not has_key:
        return recorded
    hosts = endpoint_hosts(recorded)
    if recorded and confirm is not None and confirm(run, variable, recorded):
        return recorded
    why = "was not confirmed" if confirm is not None and recorded else "comes from the archive, not from you"
    raise ArchiveError(
        f"run {run}: {variable} is set and its endpoint ({hosts}) {why}; name the endpoint with {how}; "
        "nothing was sent"
    )
