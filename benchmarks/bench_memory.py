"""Peak RSS of the evaluator: as the dataset grows, as images grow, and what loading local parquet costs.

    python benchmarks/bench_memory.py                  # 800 and 8000 rows, 5 MB images, a 442-row load
    python benchmarks/bench_memory.py --scale 4 --repeats 1

Every client is a separate process (peak RSS = its VmHWM, polled from /proc) against one loopback test
server in another process.

1. Scaling with N: the same run over N and scale*N rows of 750 KB JPEG-like images (latency 0,
   concurrency 32). Streaming means the peak does not grow with N.
2. Large images: 5 MB images at concurrency 8 and 32 (endpoint latency 1 s, so that all of them are in
   flight together). The growth per extra in-flight request, in units of
   one request body (base64: 4/3 of the image), tells how many copies of a body each in-flight request
   holds: ~1 is the floor (the body has to exist while it is sent).
3. Loading local parquet: a DocCount-sized release (442 rows x 750 KB, ~330 MB): time from spawn to the
   first request reaching the server, and the bytes written anywhere but the run folder (HF_HOME,
   HF_DATASETS_CACHE and XDG_CACHE_HOME point at an empty folder that must stay empty).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    IMAGE_BYTES,
    Endpoint,
    bare_cmd,
    clean_env,
    data_dir,
    evaluator_cmd,
    load_text,
    md_table,
    median,
    run_measured,
    workdir,
    write_dataset,
)

CONCURRENCY = 32


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def run(
    kind: str,
    data: str,
    ep: Endpoint,
    concurrency: int,
    tmp: Path,
    env: dict[str, str] | None = None,
    first_request: bool = False,
):
    root = tmp / "run"
    shutil.rmtree(root, ignore_errors=True)
    if kind == "evaluator":
        cmd = evaluator_cmd(data, ep.base_url, root, concurrency)
    else:
        cmd = bare_cmd(data, ep.base_url, concurrency, tmp / "bare.json")
    m = run_measured(cmd, env=env or clean_env())
    if m.returncode != 0:
        raise RuntimeError(f"{kind} exited {m.returncode}: {m.stderr[-2000:]}")
    if first_request:
        m.extra["first_request_s"] = min(r["time"] for r in ep.requests()) - m.extra["spawned_at"]
    m.extra["run_bytes"] = dir_bytes(root)
    shutil.rmtree(root, ignore_errors=True)
    ep.set_latency(ep.latency_s)  # forget the server's request records
    return m


def scaling(args: argparse.Namespace, ep: Endpoint, tmp: Path) -> list[list[Any]]:
    rows = []
    sizes = [args.rows, args.rows * args.scale]
    peaks: dict[int, float] = {}
    for n in sizes:
        path = data_dir(f"memory-{n}") / "test-00000-of-00001.parquet"
        log(f"data: {n} rows x {IMAGE_BYTES / 1e3:.0f} KB -> {path}")
        write_dataset(path, n)
        kinds = ["evaluator", "bare"] if n == sizes[0] else ["evaluator"]
        results: dict[str, list[Any]] = {k: [] for k in kinds}
        for i in range(args.repeats):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                m = run(kind, str(path), ep, CONCURRENCY, tmp)
                results[kind].append(m)
                log(f"  N={n} {kind}: peak RSS {m.peak_rss_mb:.0f} MB, wall {m.wall_s:.1f}s")
        for kind, ms in results.items():
            peak = median([m.peak_rss_mb for m in ms])
            if kind == "evaluator":
                peaks[n] = peak
            rows.append(
                [
                    f"{n} rows x 750 KB ({n * IMAGE_BYTES / 1e9:.1f} GB), c={CONCURRENCY}",
                    kind,
                    f"{peak:.0f}",
                    f"{median([m.wall_s for m in ms]):.1f}",
                    "< 400 MB" if kind == "evaluator" and n == sizes[0] else "",
                    ("yes" if peak < 400 else "NO") if kind == "evaluator" and n == sizes[0] else "",
                ]
            )
        if os.environ.get("BENCH_KEEP_DATA") != "1" and n != sizes[0]:
            shutil.rmtree(path.parent, ignore_errors=True)  # 6 GB: do not leave it behind
    growth = peaks[sizes[1]] / peaks[sizes[0]]
    rows.append(
        [
            f"growth {sizes[0]} -> {sizes[1]} rows",
            "evaluator",
            f"x{growth:.2f}",
            "",
            "nearly flat",
            "yes" if growth < 1.15 else "NO",
        ]
    )
    return rows


def large_images(args: argparse.Namespace, ep: Endpoint, tmp: Path) -> list[list[Any]]:
    size = args.large_mb * 1_000_000
    path = data_dir(f"memory-large-{args.large_mb}mb") / "test-00000-of-00001.parquet"
    log(f"data: {args.large_rows} rows x {args.large_mb} MB -> {path}")
    write_dataset(path, args.large_rows, image_bytes=size)
    body_mb = size * 4 / 3 / 1e6
    rows = []
    lo, hi = args.large_concurrency
    ep.set_latency(1.0)  # long enough that all c requests are in flight at once
    for kind in ("evaluator", "bare"):
        peak = {}
        for c in (lo, hi):
            ms = []
            for _ in range(args.repeats):
                m = run(kind, str(path), ep, c, tmp)
                ms.append(m)
                log(f"  {args.large_mb} MB images c={c} {kind}: peak RSS {m.peak_rss_mb:.0f} MB")
            peak[c] = median([m.peak_rss_mb for m in ms])
            rows.append([f"{args.large_mb} MB images, c={c}", kind, f"{peak[c]:.0f}", "", "", ""])
        copies = (peak[hi] - peak[lo]) / (hi - lo) / body_mb
        valid = args.large_rows >= 2 * hi  # otherwise fewer than `hi` requests are ever in flight
        rows.append(
            [
                f"bodies held per extra in-flight request (c={lo} -> {hi}, body {body_mb:.1f} MB)",
                kind,
                f"{copies:.2f}" if valid else f"n/a (needs --large-rows >= {2 * hi})",
                "",
                "about 1" if kind == "evaluator" else "",
                ("yes" if copies < 1.6 else "NO") if kind == "evaluator" and valid else "",
            ]
        )
    ep.set_latency(0.0)
    return rows


def loading(args: argparse.Namespace, ep: Endpoint, tmp: Path) -> list[list[Any]]:
    path = data_dir("memory-release") / "test-00000-of-00001.parquet"
    write_dataset(path, 442)
    size_mb = path.stat().st_size / 1e6
    cache = tmp / "cache"
    cache.mkdir()
    env = clean_env(HF_HOME=str(cache / "hf"), HF_DATASETS_CACHE=str(cache / "ds"), XDG_CACHE_HOME=str(cache))
    firsts, walls, run_bytes, peaks = [], [], [], []
    for _ in range(args.repeats):
        m = run("evaluator", str(path), ep, CONCURRENCY, tmp, env, first_request=True)
        walls.append(m.wall_s)
        peaks.append(m.peak_rss_mb)
        run_bytes.append(m.extra["run_bytes"])
        firsts.append(m.extra["first_request_s"])
    cache_bytes = dir_bytes(cache)
    first = median(firsts)
    return [
        [
            f"DocCount-sized release: 442 rows, {size_mb:.0f} MB parquet",
            "evaluator",
            f"{median(peaks):.0f}",
            f"{median(walls):.1f}",
            "",
            "",
        ],
        [
            "  spawn -> first request at the server (s)",
            "evaluator",
            "",
            f"{first:.2f}",
            "< ~2 s",
            _yes(first < 2.5),
        ],
        [
            "  bytes written to cache folders (HF_HOME, XDG_CACHE_HOME)",
            "evaluator",
            "",
            f"{cache_bytes}",
            "0",
            _yes(cache_bytes == 0),
        ],
        [
            "  run folder size after the run (MB)",
            "evaluator",
            "",
            f"{median(run_bytes) / 1e6:.2f}",
            "<< data",
            _yes(median(run_bytes) < 0.05 * size_mb * 1e6),
        ],
    ]


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=800)
    p.add_argument("--scale", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--large-mb", type=int, default=5)
    p.add_argument("--large-rows", type=int, default=96)
    p.add_argument("--large-concurrency", type=int, nargs=2, default=[8, 32])
    p.add_argument("--skip", default="", help="comma list of parts to skip: scaling,large,loading")
    args = p.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    log(f"before: {load_text()}")
    rows: list[list[Any]] = []
    with workdir() as tmp, Endpoint(0.0, tmp / "server") as ep:
        if "loading" not in skip:
            rows += loading(args, ep, tmp)
        if "large" not in skip:
            rows += large_images(args, ep, tmp)
        if "scaling" not in skip:
            rows += scaling(args, ep, tmp)
    print(f"## Memory: peak RSS (VmHWM), {args.repeats} repeat(s), medians\n")
    print(md_table(["case", "client", "peak RSS MB / value", "wall s", "target", "met"], rows))
    print(
        "\nEndpoint latency 0, except 1 s for the large images. Images are random bytes behind a JPEG header (they "
        "do not compress), written with pyarrow's default parquet settings in ~75 MB row groups. "
        f"Machine: {load_text()} at the end."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
