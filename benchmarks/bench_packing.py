"""Packing of a sweep that serves its own models: makespan against the lower bound.

    python benchmarks/bench_packing.py                  # 12 runs on a pretend pool of 4 GPU ids
    python benchmarks/bench_packing.py --runs 8 --rows 4

A real `doccount sweep` whose `[serve] command` is the stand-in server (tests/support/standin_server.py: the
contract's arguments, answers after `--hold-s`), each run asking 1-4 GPUs of a pool of 4 ids. Each server
records when it listened and when it stopped; from those intervals:
- makespan: first server up to last server down;
- lower bound: max(GPU-seconds / pool size, the longest server), what any packing needs;
- one after another: the sum of the servers' lifetimes (no packing at all);
- the same durations replayed through the executor's own packing (executors.local.simulate): what the
  greedy first-fit with backfill gives when start-up costs nothing, against the bound.
Server lifetimes include the evaluate child's start-up and the rows' answers; on a loaded 2-core machine
that start-up, not the packing, is most of the gap to the bound.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from support.datagen import doccount_reply, doccount_rows, write_doccount  # noqa: E402

from evaluator.study.executors.local import simulate  # noqa: E402

POOL = ["0", "1", "2", "3"]


def sweep_file(tmp: Path, needs: list[int], holds: list[float], rows: int) -> Path:
    data = doccount_rows(rows)
    write_doccount(tmp / "data" / "test-00000-of-00001.parquet", data)
    (tmp / "cfg.json").write_text(json.dumps({"answers": doccount_reply(data)}))
    command = [
        sys.executable,
        str(REPO / "tests" / "support" / "standin_server.py"),
        "--config",
        str(tmp / "cfg.json"),
    ]
    command += ["--record", str(tmp / "servers.jsonl")]
    text = (
        f'name = "packing"\ndata_files = "{tmp / "data" / "*.parquet"}"\n[defaults]\nconcurrency = 2\n'
        f"timeout = 60\n[serve]\ngpus = {json.dumps([int(g) for g in POOL])}\ncommand = {json.dumps(command)}\n"
    )
    for i, (need, hold) in enumerate(zip(needs, holds, strict=True)):
        text += f'\n[[runs]]\nname = "r{i}"\nmodel = "org/r{i}"\nserve = {{ gpus = {need}, args = ["--hold-s", "{hold}"] }}\n'
    path = tmp / "sweep.toml"
    path.write_text(text)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=12)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--seed", type=int, default=7)
    ns = p.parse_args()
    rng = random.Random(ns.seed)
    needs = [rng.choice([1, 1, 1, 2, 2, 3, 4]) for _ in range(ns.runs)]
    holds = [round(rng.uniform(0.2, 1.2), 2) for _ in range(ns.runs)]
    with tempfile.TemporaryDirectory(prefix="doccount-packing-") as d:
        tmp = Path(d)
        path = sweep_file(tmp, needs, holds, ns.rows)
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "evaluator.cli", "sweep", str(path), "--run-root", str(tmp / "runs")]
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        if res.returncode != 0:
            print(res.stderr[-3000:], file=sys.stderr)
            return 1
        ends = [json.loads(x) for x in (tmp / "servers.jsonl").read_text().splitlines()]
    got = [r for r in ends if r["end"] is not None]
    order = {f"org/r{i}": i for i in range(ns.runs)}
    lifetimes = {order[r["name"]]: r["end"] - r["start"] for r in got}
    makespan = max(r["end"] for r in got) - min(r["start"] for r in got)
    area = sum(len(r["gpus"].split(",")) * (r["end"] - r["start"]) for r in got)
    bound = max(area / len(POOL), max(lifetimes.values()))
    replay = simulate(needs, POOL, len(POOL), [lifetimes[i] for i in range(ns.runs)])
    replay_span = max(end for _, _, end, _ in replay)
    print(
        f"{ns.runs} served runs on a pool of {len(POOL)} GPU ids (needs {needs}); sweep wall time {wall:.1f} s"
    )
    print("| measure | seconds | / lower bound |\n| --- | ---: | ---: |")
    for name, value in (
        ("makespan (first server up to last down)", makespan),
        ("lower bound: max(GPU-seconds / 4, longest)", bound),
        ("one after another (sum of lifetimes)", sum(lifetimes.values())),
        ("executor's packing replayed, zero start-up", replay_span),
    ):
        print(f"| {name} | {value:.1f} | {value / bound:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
