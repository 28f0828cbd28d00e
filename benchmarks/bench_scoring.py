"""Scoring and resuming a 100,000-record run.

    python benchmarks/bench_scoring.py                 # 100k records, 3 repeats
    python benchmarks/bench_scoring.py --records 20000 --repeats 1

The run folder is made the real way as far as it can be: `doccount-evaluate --limit 1` against the loopback
server writes run_config.json, the manifest and one record; then the manifest is rewritten for every row
(evaluator.runfolder.files.write_manifest) with the selection digest in run_config.json to match, and one
record per question is appended with evaluator.core.records.ResponseRecord.to_line (the writer's own format):
~94% ok, 3% parse failures, 2% request errors (with a retry error each), 1% duplicates from a re-run.
Response texts are ~1 KB rationales ending in <answer>N</answer>.

Timed (medians): `doccount-score --no-report` (what "scoring" means: merge + summary + responses.jsonl +
plots), `doccount-score` with its default HTML report (for information), and a resume of the finished run
with the same `doccount-evaluate` command (reads the data's manifest, finds every row done, sends nothing),
all as subprocesses from spawn to exit; plus in-process timings of the steps they are made of.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    MODEL,
    Endpoint,
    clean_env,
    console_script,
    data_dir,
    evaluator_cmd,
    load_text,
    md_table,
    median,
    run_measured,
    workdir,
    write_dataset,
)

FILLER = (
    "The page shows a header band, two columns of body text and several framed regions. I go through the "
    "regions from top left to bottom right and check each one against the definition: a region counts only "
    "when it is a distinct instance of the target class, not decoration or a caption. "
)


def response_text(i: int, answer: int, rng: random.Random) -> str:
    body = (FILLER * 4)[: 800 + rng.randrange(400)]
    return f"{body}\nRegion count for question {i}: {answer}.\n<answer>{answer}</answer>"


def build_run(root: Path, data: str, records: int, seed: int = 0) -> dict[str, int]:
    """Turn the one-row run folder in `root` into a finished run of `records` questions."""
    from evaluator.core.records import ResponseRecord, RetryError, Sampling, Usage
    from evaluator.data.benchmarks import get_benchmark
    from evaluator.data.parquet import build_manifest, manifest_digest, resolve_local
    from evaluator.runfolder.files import CONFIG, PARTIAL, read_json, write_json_atomic, write_manifest

    bench = get_benchmark("doccount")
    manifest = build_manifest(bench, resolve_local(data))[:records]
    write_manifest(root, manifest)
    config = read_json(root / CONFIG)
    config["data"]["selection"] = {"questions": len(manifest), "manifest_sha256": manifest_digest(manifest)}
    write_json_atomic(root / CONFIG, config)
    sampling = Sampling(**config["sampling"])
    rng = random.Random(seed)
    counts = {"ok": 0, "parse_failure": 0, "request_error": 0, "duplicates": 0}
    lines: list[str] = []
    for i, e in enumerate(manifest):
        kind = rng.random()
        answer = e.ground_truth if rng.random() < 0.6 else (e.ground_truth or 0) + 1
        rec = ResponseRecord(
            sample_id=e.sample_id,
            benchmark=bench.name,
            groups=e.groups,
            ground_truth=e.ground_truth,
            model=MODEL,
            backend="api",
            sampling=sampling,
            started_at="2026-01-01T00:00:00.000Z",
            finished_at="2026-01-01T00:00:09.000Z",
            status="ok",
            image_sha256=e.image_sha256,
            endpoint="http://127.0.0.1:8000/v1",
            attempts=1,
            request_sha256=f"{i:064x}",
        )
        if kind < 0.02:
            rec.status = "request_error"
            rec.attempts = 5
            rec.request_error = "HTTP 503: Service Unavailable after 5 attempt(s)"
            rec.retry_errors = [
                RetryError(attempt=1, kind="http_status", message="HTTP 503", status_code=503)
            ]
            counts["request_error"] += 1
        else:
            text = response_text(i, answer, rng)
            parsed = bench.parse(text)
            if kind < 0.05:  # a rationale without the final tag
                text = text.rsplit("\n", 1)[0]
                parsed = bench.parse(text)
                counts["parse_failure"] += 1
            else:
                counts["ok"] += 1
            rec.response_text = text
            rec.parsed_answer = parsed.answer
            rec.parse_status = parsed.status
            rec.fallback_answer = bench.fallback(text)
            rec.correct = bench.is_correct(parsed.answer, e.ground_truth)
            rec.finish_reason = "stop"
            rec.latency_s = round(5 + 10 * rng.random(), 4)
            rec.usage = Usage(prompt_tokens=1800, completion_tokens=300, total_tokens=2100)
            rec.response_id = f"chatcmpl-{i}"
        lines.append(rec.to_line().decode("utf-8").rstrip("\n"))
        if rng.random() < 0.01:  # an earlier attempt of the same row, superseded by a later line
            lines.insert(max(0, len(lines) - 50), rec.to_line().decode("utf-8").rstrip("\n"))
            counts["duplicates"] += 1
    with open(root / PARTIAL, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    counts["bytes"] = (root / PARTIAL).stat().st_size
    return counts


SCORE = "doccount-score --no-report"
SCORE_REPORT = "doccount-score (default: with the HTML report)"
RESUME = "resume: doccount-evaluate, every row done"
RESUME_REDO = "first resume: re-sends the 5% failed rows (latency 0)"


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def in_process(root: Path) -> dict[str, float]:
    """Step timings in this process (warm imports)."""
    from evaluator.runfolder.files import PARTIAL, done_keys, read_jsonl
    from evaluator.scoring import merge_run, score_run

    out = {}
    out["read_jsonl"], _ = timed(read_jsonl, root / PARTIAL)
    out["done_keys"], _ = timed(done_keys, root)
    out["merge_run"], _ = timed(merge_run, root)
    out["score_run"], _ = timed(score_run, root)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the run folder (printed)")
    args = p.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    path = data_dir(f"scoring-{args.records}") / "test-00000-of-00001.parquet"
    log(f"data: {args.records} rows with 64-byte images -> {path}")
    write_dataset(path, args.records, image_bytes=64)
    data = str(path)
    log(f"before: {load_text()}")
    with workdir(keep=args.keep) as tmp, Endpoint(0.0, tmp / "server") as ep:
        root = tmp / "run"
        m = run_measured(evaluator_cmd(data, ep.base_url, root, 4, "--limit", "1"), env=clean_env())
        if m.returncode != 0:
            raise RuntimeError(f"evaluate --limit 1 failed: {m.stderr[-2000:]}")
        t0 = time.perf_counter()
        counts = build_run(root, data, args.records)
        log(f"built {args.records} records ({counts}) in {time.perf_counter() - t0:.1f}s -> {root}")
        score_cli = [console_script("doccount-score"), "--run-root"]
        resume = evaluator_cmd(data, ep.base_url, root, 32)
        results: dict[str, list[float]] = {}
        steps: dict[str, list[float]] = {}

        def measure(name: str, cmd: list[str], i: int) -> str:
            m = run_measured(cmd, env=clean_env())
            if m.returncode != 0:
                raise RuntimeError(f"{name} exited {m.returncode}: {m.stderr[-2000:]}")
            results.setdefault(name, []).append(m.wall_s)
            results.setdefault(name + " RSS", []).append(m.peak_rss_mb)
            log(f"  repeat {i + 1}: {name}: {m.wall_s:.2f}s, peak RSS {m.peak_rss_mb:.0f} MB")
            return m.stderr

        for i in range(args.repeats):
            measure(SCORE, [*score_cli, str(root), "--no-report"], i)
            measure(SCORE_REPORT, [*score_cli, str(root)], i)
            for k, v in in_process(root).items():
                steps.setdefault(k, []).append(v)
        # the first resume re-sends the request errors and parse failures (latency 0); then every row is done
        measure(RESUME_REDO, resume, 0)
        for i in range(args.repeats):
            err = measure(RESUME, resume, i)
            if " 0 to evaluate" not in err:
                raise RuntimeError(f"the resume did not find every row done: {err[-1000:]}")
        from evaluator.runfolder.files import done_keys

        steps["done_keys (after the resume)"] = [timed(done_keys, root)[0]]
        if args.keep:
            log(f"kept {tmp}")
    rows = []
    for name in (SCORE, RESUME):
        wall = median(results[name])
        rss = median(results[name + " RSS"])
        rows.append([name, f"{wall:.2f}", f"{rss:.0f}", "< 5 s", "yes" if wall < 5 else "NO"])
    for name in (SCORE_REPORT, RESUME_REDO):
        rows.append([name, f"{median(results[name]):.2f}", f"{median(results[name + ' RSS']):.0f}", "-", "-"])
    for k, v in steps.items():
        rows.append([f"in-process {k}", f"{median(v):.2f}", "", "", ""])
    print(
        f"## Scoring and resume: {args.records} records ({counts['bytes'] / 1e6:.0f} MB "
        f"responses.partial.jsonl), {args.repeats} repeats, medians\n"
    )
    print(md_table(["what", "wall s", "peak RSS MB", "target", "met"], rows))
    print(
        "\nSubprocess rows are spawn to exit (interpreter start-up and imports included). "
        f"Machine: {load_text()} at the end."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
