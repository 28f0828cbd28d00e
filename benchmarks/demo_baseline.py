"""Measure the demo reference model directly (no HTTP): exact-count accuracy and CPU time per page.

    python benchmarks/demo_baseline.py [--pages 40] [--seed 0] [--json out.json]

The counter sees only the JPEG bytes and the target class; the generator's answer is used
afterwards, for scoring only.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.demo.layout_counter import LayoutCounter, decode_image  # noqa: E402
from evaluator.demo.sample_data import CLASSES, render_sample_pages  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # rapid-layout logs every model load at INFO

    pages = render_sample_pages(args.pages, args.seed)
    t_load = time.perf_counter()
    counter = LayoutCounter()
    load_s = time.perf_counter() - t_load

    rows = []
    for page in pages:
        t0 = time.perf_counter()
        result = counter.count_array(decode_image(page.jpeg), page.target_class)
        seconds = time.perf_counter() - t0
        # Scoring happens here, after the count: the counter never saw the answer.
        rows.append(
            {
                "sample_id": page.sample_id,
                "target_class": page.target_class,
                "answer": page.answer,
                "predicted": result.count,
                "correct": result.count == page.answer,
                "seconds": round(seconds, 4),
            }
        )

    def acc(rs: list[dict]) -> float:
        return sum(r["correct"] for r in rs) / len(rs) if rs else float("nan")

    per_class = {c: [r for r in rows if r["target_class"] == c] for c in CLASSES}
    secs = [r["seconds"] for r in rows]
    summary = {
        "pages": len(rows),
        "seed": args.seed,
        "accuracy": acc(rows),
        "correct": sum(r["correct"] for r in rows),
        "per_class": {
            c: {"n": len(rs), "correct": sum(r["correct"] for r in rs), "accuracy": acc(rs)}
            for c, rs in per_class.items()
        },
        "mean_abs_error": statistics.fmean(abs(r["predicted"] - r["answer"]) for r in rows),
        "seconds_per_page_mean": statistics.fmean(secs),
        "seconds_per_page_median": statistics.median(secs),
        "model_load_seconds": load_s,
        "machine": {
            "cpus": __import__("os").cpu_count(),
            "processor": platform.machine(),
            "python": platform.python_version(),
        },
    }
    print(
        f"pages {summary['pages']} (seed {args.seed}): exact-count accuracy {summary['correct']}/{len(rows)} = {summary['accuracy']:.1%}"
    )
    for c, v in summary["per_class"].items():
        print(f"  {c:<14} {v['correct']:>3}/{v['n']:<3} {v['accuracy']:.1%}")
    print(f"mean |error| {summary['mean_abs_error']:.2f}")
    print(
        f"seconds/page: mean {summary['seconds_per_page_mean']:.3f}, median {summary['seconds_per_page_median']:.3f}; model load {load_s:.2f} s"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "rows": rows}, indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
