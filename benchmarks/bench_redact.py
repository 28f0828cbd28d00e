"""Key redaction (evaluator.core.boundary.KeyFilter) of a server text holding the key many times, each
copy percent-encoded: CPU time against the number of copies. Every copy is found in a decoded view and
mapped back to the source; the map from view to source is built once per view, so the time grows with
the text's length, not with its length times the number of copies.

At the reply size cap (`--cap`): a 15 MiB text repeating the key (whole, a 20-character piece of it, or
with an escape in every copy), CPU time and peak RSS each in a fresh interpreter (resource.getrusage).
Measured on the 2-core test machine (trust3 #14): before, the whole key took 19.4 s and 1,885 MiB; now
about 2.5-3.5 s and 110 MiB (the piece: 5-7.5 s, 110 MiB; with escapes: 9-12 s and 140 MiB, was 13.5 s and
1,559 MiB). The cover is one byte per character, and each run of back-to-back copies is one step.

    python benchmarks/bench_redact.py              # --copies 50,200,1000,5000 --repeats 3
    python benchmarks/bench_redact.py --cap        # the 15 MiB cases
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
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


CAP_UNITS = {
    "the key": "KEY + ' '",
    "a 20-character piece": "KEY[:20] + ' '",
    "an escape per copy": "'%41' + KEY + ' '",
}
CAP_RUN = """
import json, resource, time
from evaluator.core.boundary import KeyFilter
KEY = {key!r}
unit = {unit}
text = unit * (15 * 2**20 // len(unit))
kf = KeyFilter(KEY)
t0 = time.process_time()
out = kf(text)
cpu = time.process_time() - t0
assert KEY[3:11] not in out
print(json.dumps([cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))
"""


def at_the_cap() -> None:
    print("| 15 MiB repeating | CPU s | peak RSS MiB |")
    print("| --- | ---: | ---: |")
    for name, unit in CAP_UNITS.items():
        code = CAP_RUN.format(key=KEY, unit=unit)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        cpu, peak = json.loads(done.stdout)
        print(f"| {name} | {cpu:.2f} | {peak:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", default="50,200,1000,5000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap", action="store_true", help="the 15 MiB cases, each in a fresh interpreter")
    args = parser.parse_args()
    if args.cap:
        return at_the_cap()
    print("| copies | text (chars) | CPU s (median) | CPU us per copy |")
    print("| ---: | ---: | ---: | ---: |")
    for copies in (int(c) for c in args.copies.split(",")):
        text = text_with(copies)
        median = statistics.median(cpu_seconds(text) for _ in range(args.repeats))
        print(f"| {copies:,} | {len(text):,} | {median:.3f} | {median / copies * 1e6:.0f} |")


if __name__ == "__main__":
    main()
