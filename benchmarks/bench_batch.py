"""Batch mode against the loopback Files/Batches emulator (tests/support/batch_emulator.py), 200 DocCount rows.

Measures, for the closing note of the batch issue:
- requests the chat server receives online vs through `--batch` (the emulator answers each batch line by
  one request to the same chat test server), and the files and batches used (default --batch-max-mb and a
  small one that splits);
- a SIGKILL while every batch is in flight, then the same command again: what the re-run uploaded or
  created again (should be nothing), and how many requests reached the chat server in all.

    python benchmarks/bench_batch.py [--rows 200]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.batch_emulator import BatchEmulator  # noqa: E402
from support.datagen import doccount_rows, write_doccount  # noqa: E402

FAST = ["--batch-poll-s", "0.1", "--retry-backoff", "0.01", "--retry-max-wait", "0.05", "--quiet"]


def evaluate(base_url: str, data: str, root: Path, *extra: str, wait: bool = True) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "evaluator.cli", "evaluate", "--model", "test-model", "--base-url", base_url]
    cmd += ["--data-files", data, "--run-root", str(root), *FAST, *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if wait:
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"evaluate exit {proc.returncode}:\n{err}")
    return proc


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def run_all(rows: int, work: Path) -> dict:
    write_doccount(work / "data" / "test-00000-of-00001.parquet", doccount_rows(rows))
    data = str(work / "data" / "test-*.parquet")
    out: dict = {"rows": rows}
    with BatchEmulator({"step_s": 0.05}) as emu:
        evaluate(emu.upstream.base_url, data, work / "online")
        out["online_requests"] = len(emu.upstream.requests())
        emu.upstream.reset()
        for label, extra in (("default", []), ("split", ["--batch-max-mb", "0.05"])):
            before = emu.snapshot()["counts"]
            evaluate(emu.base_url, data, work / f"batch-{label}", "--batch", *extra)
            after = emu.snapshot()["counts"]
            recs = lines(work / f"batch-{label}" / "responses.partial.jsonl")
            out[f"batch_{label}"] = {
                "chat_requests": len(emu.upstream.requests()),
                "files_uploaded": after["files_uploaded"] - before["files_uploaded"],
                "batches_created": after["batches_created"] - before["batches_created"],
                "records": len(recs),
                "ok": sum(r["status"] == "ok" for r in recs),
            }
            emu.upstream.reset()
        out["kill_resume"] = kill_and_resume(emu, data, work / "killed")
    return out


def kill_and_resume(emu: BatchEmulator, data: str, root: Path) -> dict:
    emu.update_config(hold=True)
    before = emu.snapshot()["counts"]
    proc = evaluate(emu.base_url, data, root, "--batch", "--batch-max-mb", "0.05", wait=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        book = json.loads((root / "batches.json").read_text()) if (root / "batches.json").exists() else {}
        entries = book.get("batches", [])
        created = entries and all(e.get("state") == "created" for e in entries)
        if created and sum(len(e["rows"]) for e in entries) == len(lines(root / "manifest.jsonl")):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    at_kill = emu.snapshot()["counts"]
    emu.release()
    evaluate(emu.base_url, data, root, "--batch", "--batch-max-mb", "0.05")
    after = emu.snapshot()["counts"]
    recs = lines(root / "responses.partial.jsonl")
    return {
        "files_before_kill": at_kill["files_uploaded"] - before["files_uploaded"],
        "batches_before_kill": at_kill["batches_created"] - before["batches_created"],
        "files_recreated": after["files_uploaded"] - at_kill["files_uploaded"],
        "batches_recreated": after["batches_created"] - at_kill["batches_created"],
        "chat_requests": len(emu.upstream.requests()),
        "records": len(recs),
        "distinct_rows": len({r["sample_id"] for r in recs}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run_all(args.rows, Path(tmp)), indent=2))


if __name__ == "__main__":
    main()
