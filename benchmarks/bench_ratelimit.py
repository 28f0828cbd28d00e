"""The evaluator against rate-limited endpoints: every row ok, near the limit's own pace, few 429s.

    python benchmarks/bench_ratelimit.py                  # the issue's cases, ~3 min
    python benchmarks/bench_ratelimit.py --cases 4:4:80:openai --two-endpoints ''

Each endpoint is tests/support/ratelimit_server.py in its own process: a token bucket of R requests per second with
bursts of B, in front of the loopback test server (0.05 s per answer). The evaluator runs with its defaults
(concurrency 16, --max-retries 4) from spawn to exit. The bound is the bucket's own: after the burst, one
request per 1/R, so (N - B) / R seconds for N rows. "wall" is spawn to exit, so it includes the evaluator's
start-up (spawn to the first request the endpoint saw: 1.3-2.0 s on a quiet machine, most of it the
openai package's import; several seconds on a loaded one), shown on its own; "first to last request" is
what the endpoint saw.

Header styles: openai (x-ratelimit-* on every answer, integer Retry-After on a 429), anthropic
(anthropic-ratelimit-*), gemini (no headers; the wait only in the body), none (only Retry-After).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPLY,
    REPO,
    clean_env,
    data_dir,
    evaluator_cmd,
    md_table,
    run_measured,
    workdir,
    write_dataset,
)

SERVER = REPO / "tests" / "support" / "ratelimit_server.py"


class Bucket:
    """tests/support/ratelimit_server.py in its own process."""

    def __init__(self, tmp: Path, name: str, limits: dict[str, Any]) -> None:
        self.tmp, self.name, self.limits = tmp, name, limits
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> Bucket:
        config = self.tmp / f"{self.name}.json"
        config.write_text(
            json.dumps({"limits": self.limits, "server": {"latency_s": 0.05, "default_reply": REPLY}})
        )
        port_file = self.tmp / f"{self.name}.port"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port-file", str(port_file), "--config", str(config)],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rate-limited test server did not start")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def counters(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_bucket", timeout=30) as resp:
            return json.loads(resp.read())

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def records(run: Path) -> list[dict[str, Any]]:
    path = run / "responses.partial.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def one_case(tmp: Path, data: str, rows: int, endpoints: list[dict[str, Any]], label: str) -> list[Any]:
    buckets = [Bucket(tmp, f"{label}-{i}", e) for i, e in enumerate(endpoints)]
    for b in buckets:
        b.__enter__()
    try:
        run = tmp / f"run-{label}"
        urls = [b.base_url for b in buckets]
        extra = [x for u in urls[1:] for x in ("--base-url", u)]
        spawned = time.monotonic()  # CLOCK_MONOTONIC is one clock for every process on Linux
        m = run_measured(evaluator_cmd(data, urls[0], run, 16, *extra), env=clean_env())
        counters = [b.counters() for b in buckets]
    finally:
        for b in buckets:
            b.__exit__()
    recs = records(run)
    ok = sum(r["status"] == "ok" for r in recs)
    charged = sum(1 for r in recs for e in r["retry_errors"] if not e.get("paced"))
    requests = sum(c["requests"] for c in counters)
    refused = sum(c["refused"] for c in counters)
    times = sorted(e["t"] for c in counters for e in c["log"])
    rate = sum(float(e["rps"]) for e in endpoints)
    burst = sum(float(e["burst"]) for e in endpoints)
    bound = (rows - burst) / rate
    sending = times[-1] - times[0]
    startup = times[0] - spawned
    summary = next((ln for ln in reversed(m.stderr.splitlines()) if "recorded" in ln), m.stderr[-300:])
    shares = " / ".join(f"{c['answered']}" for c in counters)
    print(f"  {label}: exit {m.returncode}, {summary}", file=sys.stderr)
    return [
        label,
        f"{ok}/{rows}",
        charged,
        f"{m.wall_s:.2f}",
        f"{bound:.2f}",
        f"{m.wall_s / bound:.3f}",
        f"{startup:.2f}",
        f"{(m.wall_s - startup) / bound:.3f}",
        f"{sending / bound:.3f}",
        f"{refused}/{requests} ({100 * refused / max(1, requests):.1f}%)",
        shares,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        default="4:4:80:openai,10:10:300:openai,4:4:80:anthropic,4:4:80:gemini,4:4:80:none",
        help="comma-separated R:B:N:headers",
    )
    parser.add_argument("--two-endpoints", default="4:4,1:1:100", help="R1:B1,R2:B2:N (empty: skip)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    table: list[list[Any]] = []
    with workdir(keep=args.keep) as tmp:
        for case in filter(None, args.cases.split(",")):
            r, b, n, style = case.split(":")
            data = str(write_dataset(data_dir("ratelimit") / f"rows-{n}.parquet", int(n), image_bytes=20_000))
            limits = {"rps": float(r), "burst": float(b), "headers": style}
            table.append(one_case(tmp, data, int(n), [limits], f"R={r} B={b} N={n} {style}"))
        if args.two_endpoints:
            first, second = args.two_endpoints.split(",")
            r1, b1 = first.split(":")
            r2, b2, n = second.split(":")
            data = str(write_dataset(data_dir("ratelimit") / f"rows-{n}.parquet", int(n), image_bytes=20_000))
            eps = [{"rps": float(r1), "burst": float(b1)}, {"rps": float(r2), "burst": float(b2)}]
            label = f"two endpoints R={r1}+{r2} B={b1}+{b2} N={n} openai"
            table.append(one_case(tmp, data, int(n), eps, label))
    header = [
        "case",
        "rows ok",
        "protocol retries used",
        "wall s",
        "bound (N-B)/R s",
        "wall / bound",
        "start-up s",
        "(wall - start-up) / bound",
        "first to last request / bound",
        "refused (429/402)",
        "answered per endpoint",
    ]
    print(md_table(header, table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
