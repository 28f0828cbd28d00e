"""score_run: merge a run folder and write responses.jsonl, scores/summary.{json,md} and the plots."""

from __future__ import annotations

import hashlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evaluator.core.atomic import atomic_file, write_atomic
from evaluator.core.jsonl import encode_rows, utf8_json, utf8_text
from evaluator.runfolder.files import MERGED, PARTIAL, gc_paused
from evaluator.scoring.base import SCORES_DIR, SUMMARY_JSON, SUMMARY_MD, ScoreError, ScoreResult
from evaluator.scoring.markdown import render_markdown
from evaluator.scoring.merge import merge_run
from evaluator.scoring.plot_worker import PlotWorker, child_pays_off
from evaluator.scoring.row import ScoredRow


def merged_jsonl(rows: list[ScoredRow], lenient_rows: set[int] | frozenset[int] = frozenset()) -> bytes:
    """responses.jsonl: each row's line in the form of evaluator.core.jsonl (compact, sorted keys, UTF-8)."""
    return encode_rows([r.line for r in rows], lenient_rows)


MERGED_CHUNK_ROWS = 5000


def _write_merged_atomic(
    path: Path, rows: list[ScoredRow], lenient_rows: set[int] | frozenset[int] = frozenset()
) -> str:
    """Write merged_jsonl(rows, lenient_rows) to path atomically; return its SHA-256 (hex).

    Encoded in chunks of rows while a writer thread writes and hashes the previous chunk (file writes and
    hashing release the GIL), so a large run is not encoded, then written, then hashed.
    """
    digest = hashlib.sha256()

    def write(f: Any, chunk: bytes) -> None:
        f.write(chunk)
        digest.update(chunk)

    with atomic_file(path) as f, ThreadPoolExecutor(max_workers=1) as writer:
        pending = None
        for start in range(0, len(rows), MERGED_CHUNK_ROWS):
            stop = start + MERGED_CHUNK_ROWS
            marked = [i - start for i in lenient_rows if start <= i < stop] if lenient_rows else ()
            chunk = encode_rows([r.line for r in rows[start:stop]], marked)
            if pending is not None:
                pending.result()
            pending = writer.submit(write, f, chunk)
        if pending is not None:
            pending.result()
    return digest.hexdigest()


def answer_pairs(rows: list[ScoredRow]) -> Counter[tuple[int, int]]:
    """How many questions have each (true, predicted) pair, over parsed answers with a known truth."""
    return Counter(
        (r.ground_truth, r.parsed_answer)
        for r in rows
        if r.outcome == "ok" and r.ground_truth is not None and r.parsed_answer is not None
    )


def score_run(run_root: Path, keep_merged: bool = False) -> ScoreResult:
    """Merge and score a run folder; write responses.jsonl, scores/summary.{json,md} and the plots.

    keep_merged: also return the merged run (its summary as written), e.g. to write the report from it.
    """
    with gc_paused():
        return _score_run(Path(run_root), keep_merged)


def _score_run(run_root: Path, keep_merged: bool = False) -> ScoreResult:
    # For a large run, a child process imports matplotlib while the records are merged, and draws.
    plotter = PlotWorker(child=child_pays_off(run_root / PARTIAL))
    try:
        merged = merge_run(run_root)
    except BaseException:
        plotter.cancel()
        raise
    root = merged.run_root
    scores = root / SCORES_DIR
    summary, warnings = merged.summary, merged.warnings
    try:
        scores.mkdir(exist_ok=True)
        plotter.submit(summary, answer_pairs(merged.rows), len(merged.rows), scores)
        responses_sha256 = _write_merged_atomic(root / MERGED, merged.rows, merged.lenient_rows)
    except BaseException as exc:
        plotter.cancel()
        if isinstance(exc, OSError):
            raise ScoreError(_write_failed(root, exc)) from None
        raise
    # Drop the rows before anything else runs: reference cycles through stack frames (matplotlib makes
    # them when it draws in-process) would keep a frame that holds the rows, and so every row, alive
    # until a full collection walked them all (1 s at 100k rows). Unless the caller wants them back.
    kept = merged if keep_merged else None
    del merged
    written, problems = plotter.result()
    try:
        summary["plots"] = written
        summary["warnings"].extend(problems)
        warnings.extend(problems)
        summary["outputs"] = {"responses_sha256": responses_sha256}
        md = render_markdown(summary)
        write_atomic(scores / SUMMARY_JSON, utf8_json(summary, indent=2, sort_keys=True) + b"\n")
        write_atomic(scores / SUMMARY_MD, utf8_text(md))
    except OSError as exc:
        raise ScoreError(_write_failed(root, exc)) from None
    return ScoreResult(summary, md, warnings, kept)


def _write_failed(root: Path, exc: OSError) -> str:
    return f"cannot write the scores into {root} ({exc.strerror}); check permissions and disk space"
