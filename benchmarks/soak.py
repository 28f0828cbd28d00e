"""Soak: randomized chaos + kill rounds against the loopback test server, bounded in time.

Each round makes a fresh small DocCount-schema dataset and a fresh server (its own seed, a random fault
rate and fault mix, including responses slower than the timeout), then runs the real evaluator CLI
again and again on one run folder until it finishes: each launch may be SIGKILLed, SIGTERMed or
SIGINTed at a random moment, and the last record line may be torn between launches. After each launch
and at the end of each round it checks, from the server's request log and the record file:

* no row that was finished when a launch started is sent again in that launch;
* the end state holds exactly one ok record per row, correct exactly where the endpoint is right;
* every record's retry errors are exactly the faults the server injected into that row's requests
  during the launch that wrote it (kind and status, in order);
* a torn line is reported by the next launch and that row is evaluated again;
* SIGTERM/SIGINT exit with 130, no traceback, and leave no half-written line;
* doccount-score merges exactly one row per question.

    python benchmarks/soak.py --duration 300          # about five minutes
    python benchmarks/soak.py --duration 60 --seed 7  # reproduce a round sequence

Prints a summary; exit status 1 when any check failed (the work folder is then kept).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support import datagen  # noqa: E402
from support.openai_test_server import RETRY_ERROR_OF_FAULT  # noqa: E402

SERVER = [sys.executable, str(REPO / "tests" / "support" / "openai_test_server.py")]
EVALUATE = [sys.executable, "-c", "from evaluator.cli import evaluate_main; evaluate_main()"]
SCORE = [sys.executable, "-c", "from evaluator.cli import score_main; score_main()"]
PARTIAL = "responses.partial.jsonl"
TIMEOUT_S = 2.0


@dataclass
class Totals:
    rounds: int = 0
    launches: int = 0
    stops: Counter[str] = field(default_factory=Counter)  # how each launch ended
    torn_lines: int = 0
    rows: int = 0
    requests: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)


def clean_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL", "RUN_NAME")
    }


class Server:
    """The test server as a subprocess, with its request log as a file."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / "requests.jsonl"
        config_path = folder / "server.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        port_file = folder / "port"
        self.proc = subprocess.Popen(
            [*SERVER, "--port", "0", "--port-file", str(port_file), "--config", str(config_path)]
            + ["--request-log", str(self.log)],
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "server.err", "wb"),  # noqa: SIM115 - lives as long as the server
        )
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"test server did not start; see {folder / 'server.err'}")
            time.sleep(0.05)
        self.base_url = f"http://127.0.0.1:{int(port_file.read_text())}/v1"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def done_ids(records: list[dict[str, Any]]) -> set[str]:
    latest = {r["sample_id"]: r for r in records}
    return {s for s, r in latest.items() if r["status"] == "ok" and r["parsed_answer"] is not None}


def record_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    return (rec["sample_id"], rec.get("started_at") or "", rec.get("finished_at") or "")


def run_round(rnd: int, rng: random.Random, work: Path, deadline: float, t: Totals, verbose: bool) -> None:
    n_rows = rng.randint(40, 160)
    rows = datagen.doccount_rows(n_rows, start=rng.randint(0, 500))
    sha_of = {r["sample_id"]: r["image_sha256"] for r in rows}
    id_of = {v: k for k, v in sha_of.items()}
    wrong = {r["sample_id"] for r in rows if rng.random() < 0.1}
    folder = work / f"round-{rnd:03d}"
    data = folder / "data"
    datagen.write_doccount(data / "test-00000-of-00001.parquet", rows)
    faults = rng.sample(sorted(RETRY_ERROR_OF_FAULT), rng.randint(3, len(RETRY_ERROR_OF_FAULT)))
    config = {
        "answers": datagen.doccount_reply(rows, wrong=wrong),
        "fault_rate": round(rng.uniform(0.1, 0.4), 2),
        "faults": faults,
        "retry_after": 0.2,
        "slow_s": TIMEOUT_S + 3,
        "latency_s": round(rng.uniform(0.0, 0.05), 3),
        "seed": rng.randrange(1, 10**9),
    }
    root = folder / "run"
    concurrency = rng.choice([2, 4, 8, 16])
    cmd = [
        *EVALUATE,
        "--model",
        "soak-model",
        "--base-url",
        "",
        "--data-files",
        str(data / "*.parquet"),
        "--run-root",
        str(root),
        "--concurrency",
        str(concurrency),
        "--timeout",
        str(TIMEOUT_S),
        "--max-retries",
        "15",
        "--retry-backoff",
        "0.01",
        "--retry-max-wait",
        "0.05",
        "--quiet",
    ]
    server = Server(folder / "server", config)
    cmd[cmd.index("--base-url") + 1] = server.base_url

    def violation(msg: str) -> None:
        t.violations.append(f"round {rnd} ({folder.name}): {msg}")

    windows: dict[tuple[str, str, str], tuple[int, int]] = {}  # record -> request-log window of its launch
    torn_id: str | None = None
    try:
        for launch in range(60):
            t.launches += 1
            before = datagen.complete_records(root)
            partial = root / PARTIAL
            whole_before = (
                not partial.exists() or partial.read_bytes().endswith(b"\n") or not partial.stat().st_size
            )
            done_before = done_ids(before)
            n0 = max((q["n"] for q in server.requests()), default=0)
            err_path = folder / f"launch-{launch:02d}.err"
            with open(err_path, "wb") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=clean_env())
            # The last launches of a round, and any launch after the deadline, run to the end.
            stop = (
                None
                if launch >= 8 or time.monotonic() > deadline
                else rng.choice(["SIGKILL", "SIGKILL", "SIGKILL", "SIGTERM", "SIGINT", None])
            )
            if stop is not None:
                if rng.random() < 0.25:  # any moment, most likely during start-up
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(rng.uniform(0.1, 2.5))
                else:  # while rows are in flight: after the header, a random delay
                    until = time.monotonic() + 60
                    while proc.poll() is None and time.monotonic() < until:
                        if b"to evaluate | run folder" in err_path.read_bytes():
                            break
                        time.sleep(0.02)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(rng.uniform(0.0, 1.5))
                if proc.poll() is None:
                    proc.send_signal(getattr(signal, stop))
                else:
                    stop = None
            try:
                code = proc.wait(300)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                violation(f"launch {launch} did not finish within 300 s")
                return
            time.sleep(0.3)  # let the server log anything still in flight
            stderr = err_path.read_text(errors="replace")
            started = "to evaluate | run folder" in stderr  # the header: past imports, lock and config
            # The loop ran to its end before the signal landed (its summary is out and it was not interrupted).
            finished_loop = "[evaluate] recorded " in stderr and "interrupted" not in stderr
            phase = (
                ""
                if stop is None
                else " (start-up)"
                if not started
                else " (after the loop)"
                if finished_loop
                else ""
            )
            t.stops[f"{stop or 'none'} -> exit {code}{phase}"] += 1
            after = datagen.complete_records(root)
            n1 = max((q["n"] for q in server.requests()), default=0)
            new = [q for q in server.requests() if n0 < q["n"] <= n1]
            resent = {id_of.get(q["image_sha256"]) for q in new} & done_before
            if resent:
                violation(f"launch {launch}: finished rows sent again: {sorted(resent)[:5]}")
            # A signal during Python's own start-up (imports) gives Python's KeyboardInterrupt; nothing is
            # written then. Any other traceback is a failure.
            startup_interrupt = (
                stop == "SIGINT" and not started and stderr.rstrip().endswith("KeyboardInterrupt")
            )
            if "Traceback" in stderr and not startup_interrupt:
                violation(f"launch {launch}: traceback on stderr ({err_path.name})")
            if torn_id is not None and started:
                if "torn" not in stderr:
                    violation(f"launch {launch}: a torn last line was not reported")
                if code == 0 and sha_of[torn_id] not in {q["image_sha256"] for q in new}:
                    violation(f"launch {launch}: the torn row {torn_id} was not evaluated again")
                torn_id = None
            # Once requests are in flight, SIGTERM/SIGINT must stop cleanly with 130. Earlier (imports, data
            # checks, run_config) or after the loop has finished (its summary line is out) the default
            # action applies: the process ends as a crash would, with every finished row on disk.
            if stop in ("SIGTERM", "SIGINT") and new and code != 130 and not finished_loop:
                violation(f"launch {launch}: {stop} while requests were in flight gave exit {code}, not 130")
            if stop is not None:
                blob = (root / PARTIAL).read_bytes() if (root / PARTIAL).exists() else b""
                if stop != "SIGKILL" and whole_before and blob and not blob.endswith(b"\n"):
                    violation(f"launch {launch}: {stop} left a half-written line")
            elif code not in (0, 3):
                violation(f"launch {launch}: exit {code}: {stderr.strip().splitlines()[-1:]}")
            old = {record_key(r) for r in before}
            for rec in after:
                if record_key(rec) not in old:
                    windows[record_key(rec)] = (n0, n1)
            if stop is None and code == 0:
                break
            if after and rng.random() < 0.3 and torn_id is None:  # tear the last line, as a kill mid-write
                blob = (root / PARTIAL).read_bytes()
                if blob.endswith(b"\n") and len(blob) > 2:
                    start = blob.rstrip(b"\n").rfind(b"\n") + 1
                    with contextlib.suppress(ValueError):
                        torn_id = json.loads(blob[start:])["sample_id"]
                        os.truncate(root / PARTIAL, rng.randint(start + 1, len(blob) - 2))
                        t.torn_lines += 1
        else:
            violation("no launch finished the round")
            return

        # ---- end-of-round invariants
        records = datagen.complete_records(root)
        ok = Counter(r["sample_id"] for r in records if r["status"] == "ok")
        if ok != Counter(dict.fromkeys(sha_of, 1)):
            extra = sorted(s for s, c in ok.items() if c != 1)
            missing = sorted(set(sha_of) - set(ok))
            violation(f"ok records per row: duplicated {extra[:5]}, missing {missing[:5]}")
        requests = server.requests()
        by_image: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for q in sorted(requests, key=lambda q: q["n"]):
            by_image[q["image_sha256"]].append(q)
        for rec in records:
            sid = rec["sample_id"]
            if rec["status"] == "ok" and rec["correct"] is not (sid not in wrong):
                violation(
                    f"{sid}: correct={rec['correct']} but the endpoint answered it {'wrongly' if sid in wrong else 'right'}"
                )
            lo, hi = windows.get(record_key(rec), (None, None))
            if lo is None:
                continue
            reqs = [q for q in by_image[sha_of[sid]] if lo < q["n"] <= hi]
            # The launch may have sent this row before (killed in flight) only as earlier requests; the
            # record covers its last `attempts` requests.
            mine = reqs[-rec["attempts"] :] if rec["attempts"] else []
            expected = [RETRY_ERROR_OF_FAULT.get(q["fault"], (q["fault"], None)) for q in mine if q["fault"]]
            got = [(e["kind"], e["status_code"]) for e in rec["retry_errors"]]
            if rec["status"] == "ok" and got != expected:
                violation(f"{sid}: retry errors {got} but the server injected {expected}")
        t.requests += len(requests)
        t.faults.update(q["fault"] for q in requests if q["fault"])
        t.rows += n_rows

        score = subprocess.run(
            [*SCORE, "--run-root", str(root)], capture_output=True, text=True, env=clean_env()
        )
        if score.returncode != 0:
            violation(f"score exit {score.returncode}: {score.stderr.strip()[-300:]}")
        else:
            merged = [json.loads(line) for line in (root / "responses.jsonl").read_text().splitlines()]
            if sorted(r["sample_id"] for r in merged) != sorted(sha_of):
                violation("responses.jsonl does not hold exactly one row per question")
        if verbose:
            print(
                f"round {rnd}: {n_rows} rows, concurrency {concurrency}, fault rate {config['fault_rate']}, "
                f"{len(requests)} requests, {t.launches} launches so far, {len(t.violations)} violation(s)",
                flush=True,
            )
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds; no new round starts after")
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed; default: random)")
    parser.add_argument("--workdir", type=Path, default=None, help="work folder (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder even when all checks pass")
    parser.add_argument("--verbose", action="store_true", help="one line per round")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1, 10**9)
    rng = random.Random(seed)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="doccount-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    t = Totals()
    t0 = time.monotonic()
    deadline = t0 + args.duration
    print(f"soak: seed {seed}, duration {args.duration:.0f} s, work folder {work}", flush=True)
    try:
        while time.monotonic() < deadline:
            t.rounds += 1
            run_round(t.rounds, rng, work, deadline, t, args.verbose)
    except KeyboardInterrupt:
        print("soak: interrupted", flush=True)
    elapsed = time.monotonic() - t0
    print(f"soak summary (seed {seed}, {elapsed:.0f} s)")
    print(f"  rounds {t.rounds}, rows {t.rows}, evaluator launches {t.launches}, requests {t.requests}")
    print(f"  launch endings: {dict(sorted(t.stops.items()))}")
    print(f"  torn lines injected: {t.torn_lines}")
    print(f"  faults injected ({sum(t.faults.values())}): {dict(sorted(t.faults.items()))}")
    if t.violations:
        print(f"  FAILED: {len(t.violations)} violation(s); work folder kept: {work}")
        for v in t.violations[:50]:
            print(f"    {v}")
        return 1
    print("  OK: every check held")
    if not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
