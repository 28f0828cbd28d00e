"""Key redaction (evaluator.core.boundary.KeyFilter) of a server text holding the key many times, each
copy percent-encoded: CPU time against the number of copies. Every copy is found in a decoded view and
mapped back to the source; the map from view to source is built once per view, so the time grows with
the text's length, not with its length times the number of copies.

    python benchmarks/bench_redact.py              # --copies 50,200,1000,5000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.parse

from evaluator.core.boundary import KeyFilter

KEY = "sk-bench-abcdefghijklmnopqrstuvwxyzABCDEF"


def text_with(copies: int) -> str:
    encoded = urllib.parse.quote(KEY, safe="").replace("-", "%2D")
    return ("error: " + encoded + " ") * copies


def cpu_seconds(text: str) -> float:
    kf = KeyFilter(KEY)
    started = time.process_time()
    out = kf(text)
    spent = time.process_time() - started
    if KEY[3:11] in urllib.parse.unquote(out):
        raise SystemExit("the key survived redaction")
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", default="50,200,1000,5000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| copies | text (chars) | CPU s (median) | CPU us per copy |")
    print("| ---: | ---: | ---: | ---: |")
    for copies in (int(c) for c in args.copies.split(",")):
        text = text_with(copies)
        median = statistics.median(cpu_seconds(text) for _ in range(args.repeats))
        print(f"| {copies:,} | {len(text):,} | {median:.3f} | {median / copies * 1e6:.0f} |")


if __name__ == "__main__":
    main()
