"""Evaluator vs the bare AsyncOpenAI loop, side by side against the same loopback endpoint.

    python benchmarks/bench_throughput.py                 # the issue's comparison, 3 repeats
    python benchmarks/bench_throughput.py --repeats 5 --rows 800

Both clients are separate processes timed from spawn to exit (start-up included) against one test server
in a third process (tests/support/openai_test_server.py). Runs are interleaved (evaluator, bare, bare, evaluator,
...) so drifting machine load hits both alike; the table shows medians. Per-request overhead is the time
from "row in hand" to "response parsed" minus the endpoint's latency; the evaluator's comes from its records
(started_at/finished_at), the bare loop's from its own clock around the same steps.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    IMAGE_BYTES,
    Endpoint,
    bare_cmd,
    bare_timings,
    clean_env,
    data_dir,
    evaluator_cmd,
    evaluator_timings,
    load_text,
    md_table,
    median,
    pct,
    run_measured,
    sustained_rate,
    workdir,
    write_dataset,
)


def one_run(kind: str, data: str, ep: Endpoint, concurrency: int, tmp: Path, i: int) -> dict[str, Any]:
    if kind == "evaluator":
        root = tmp / f"run-{concurrency}-{i}"
        m = run_measured(evaluator_cmd(data, ep.base_url, root, concurrency), env=clean_env())
        if m.returncode != 0:
            raise RuntimeError(f"evaluator exited {m.returncode}: {m.stderr[-2000:]}")
        t = evaluator_timings(root, ep.latency_s)
        shutil.rmtree(root, ignore_errors=True)
    else:
        out = tmp / f"bare-{concurrency}-{i}.json"
        preload = kind == "bare-preloaded"
        m = run_measured(bare_cmd(data, ep.base_url, concurrency, out, preload=preload), env=clean_env())
        if m.returncode != 0:
            raise RuntimeError(f"bare loop exited {m.returncode}: {m.stderr[-2000:]}")
        t = bare_timings(out, ep.latency_s)
    ep.set_latency(ep.latency_s)  # forget the server's request records between runs
    return {
        "wall_s": m.wall_s,
        "rss_mb": m.peak_rss_mb,
        "cpu_s": m.cpu_s,
        "n": len(t["ends"]),
        "rate": sustained_rate(t["ends"]),
        "startup": min(t["starts"]) - m.extra["spawned_at"],
        "overhead": t["overhead"],
        "http_overhead": t["http_overhead"],
    }


def series(kinds: list[str], data: str, ep: Endpoint, concurrency: int, repeats: int, tmp: Path, log) -> dict:
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(repeats):
        order = kinds if i % 2 == 0 else list(reversed(kinds))
        for kind in order:
            r = one_run(kind, data, ep, concurrency, tmp, i)
            runs[kind].append(r)
            log(
                f"  c={concurrency} latency={ep.latency_s}s {kind:15s} repeat {i + 1}: wall {r['wall_s']:.2f}s "
                f"sustained {r['rate']:.1f} req/s, start-up {r['startup']:.2f}s, peak RSS {r['rss_mb']:.0f} MB, CPU {r['cpu_s']:.1f}s, "
                f"{r['n']} ok"
            )
    return runs


def summarize(runs: dict[str, list[dict[str, Any]]], latency: float, concurrency: int) -> list[list[Any]]:
    bare = runs["bare"]
    rows = []
    for kind, rs in runs.items():
        ratios = [r["wall_s"] / b["wall_s"] for r, b in zip(rs, bare, strict=True)]
        rate_ratios = [r["rate"] / b["rate"] for r, b in zip(rs, bare, strict=True)]
        p50 = median([pct(r["overhead"], 50) * 1000 for r in rs])
        p99 = median([pct(r["overhead"], 99) * 1000 for r in rs])
        rows.append(
            [
                f"{latency:g}s",
                concurrency,
                kind,
                f"{median([r['wall_s'] for r in rs]):.2f}",
                f"{median(ratios):.3f}",
                f"{median([r['rate'] for r in rs]):.1f}",
                f"{median(rate_ratios):.3f}",
                f"{p50:.0f} / {p99:.0f}",
                f"{median([r['startup'] for r in rs]):.2f}",
                f"{median([r['rss_mb'] for r in rs]):.0f}",
                f"{median([r['cpu_s'] for r in rs]):.1f}",
            ]
        )
    return rows


HEADER = [
    "latency",
    "conc.",
    "client",
    "wall s (median)",
    "wall ratio vs bare",
    "sustained req/s",
    "req/s ratio vs bare",
    "overhead p50 / p99 ms",
    "start-up s",
    "peak RSS MB",
    "CPU s",
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=800)
    p.add_argument("--image-bytes", type=int, default=IMAGE_BYTES)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--latency", type=float, default=0.4)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rate-latency", type=float, default=0.1)
    p.add_argument("--rate-concurrency", default="64,128", help="comma list; empty to skip")
    p.add_argument("--preloaded", action="store_true", help="also run the bare loop with every row preloaded")
    args = p.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    path = data_dir("throughput") / "test-00000-of-00001.parquet"
    log(f"data: {args.rows} rows x {args.image_bytes / 1e3:.0f} KB -> {path}")
    write_dataset(path, args.rows, args.image_bytes)
    data = str(path)
    kinds = ["evaluator", "bare"] + (["bare-preloaded"] if args.preloaded else [])
    log(f"before: {load_text()}")
    rows: list[list[Any]] = []
    with workdir() as tmp, Endpoint(args.latency, tmp / "server") as ep:
        runs = series(kinds, data, ep, args.concurrency, args.repeats, tmp, log)
        rows += summarize(runs, args.latency, args.concurrency)
        for c in [int(x) for x in args.rate_concurrency.split(",") if x.strip()]:
            ep.set_latency(args.rate_latency)
            runs = series(kinds, data, ep, c, args.repeats, tmp, log)
            rows += summarize(runs, args.rate_latency, c)
    after = load_text()
    print(
        f"## Throughput: {args.rows} rows x {args.image_bytes / 1e3:.0f} KB JPEG-like images, "
        f"{args.repeats} interleaved repeats, medians\n"
    )
    print(md_table(HEADER, rows))
    print(
        "\nwall = spawn to exit (start-up included); ratio = median of per-repeat evaluator/bare ratios; "
        "sustained req/s = completions between the 10th and 90th percentile completion time; overhead = "
        "per-request time (row in hand -> response parsed) minus the endpoint latency, so it includes "
        "queueing behind the loopback server; start-up = spawn -> first request begun. "
        "The bare loop streams the parquet 4 rows at a time like the evaluator (not preloaded)"
        + (", bare-preloaded reads every row first" if args.preloaded else "")
        + f".\nMachine: {after} at the end."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
