"""Shared pieces of the benchmarks: synthetic DocCount data, the loopback endpoint, measured subprocesses,
the bare AsyncOpenAI loop (the floor) and small statistics.

Nothing here touches the network beyond 127.0.0.1, and every loop is bounded by the dataset size.

The bare loop also runs as a script: ``python benchmarks/common.py bare --data GLOB --base-url URL ...``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SERVER_SCRIPT = REPO / "tests" / "support" / "openai_test_server.py"
sys.path.insert(0, str(REPO / "tests"))
from support import datagen  # noqa: E402  (the tests' DocCount rows and schema)

MODEL = "bench-model"
REPLY = "I looked at every region of the page.\n<answer>3</answer>"
# The evaluator's DocCount defaults; the bare loop sends the same sampling fields.
SAMPLING = {"temperature": 1.0, "top_p": 0.95, "max_tokens": 32768}
IMAGE_BYTES = 750_000  # a typical DocCount page JPEG
ROW_GROUP = 100  # what `datasets` writes for image datasets
ROW_GROUP_BYTES = 75_000_000  # ... i.e. ~75 MB of DocCount images; larger images get fewer rows per group


# ----------------------------------------------------------------------------- data


def jpeg_like(rng: Any, size: int) -> bytes:
    """`size` bytes that sniff as JPEG (SOI + JFIF APP0 header, EOI at the end), random in between."""
    head = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    return head + rng.bytes(max(0, size - len(head) - 2)) + b"\xff\xd9"


def write_dataset(path: Path, n: int, image_bytes: int = IMAGE_BYTES, seed: int = 0) -> Path:
    """A DocCount-schema parquet file of n rows, written a row group at a time (bounded memory).

    Correct image_sha256 values, so the evaluator's hash check passes. pyarrow's default writer settings,
    as `datasets` uses them: each row group's image column ends up one ~75 MB dictionary page, which a
    reader must hold whole (the reading floor). Reused when it already exists.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    marker = path.with_name(path.name + f".{n}x{image_bytes}s{seed}.ok")
    if path.exists() and marker.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tmp = path.with_name(path.name + ".tmp")
    with pq.ParquetWriter(tmp, datagen.DOCCOUNT_SCHEMA) as writer:
        group = min(ROW_GROUP, max(1, ROW_GROUP_BYTES // image_bytes))
        for start in range(0, n, group):
            rows = [
                datagen.doccount_row(i, jpeg_like(rng, image_bytes), id_digits=6)
                for i in range(start, min(n, start + group))
            ]
            writer.write_table(pa.Table.from_pylist(rows, schema=datagen.DOCCOUNT_SCHEMA))
    os.replace(tmp, path)
    for old in path.parent.glob(path.name + ".*.ok"):
        old.unlink()
    marker.write_text("")
    return path


def data_dir(name: str) -> Path:
    """Where generated data lives between runs (BENCH_DATA_DIR, default a folder in the temp dir)."""
    root = Path(os.environ.get("BENCH_DATA_DIR") or Path(tempfile.gettempdir()) / "doccount-bench-data")
    return root / name


# ----------------------------------------------------------------------------- the endpoint


class Endpoint:
    """tests/support/openai_test_server.py in its own process (its CPU is not the client's)."""

    def __init__(self, latency_s: float, workdir: Path) -> None:
        self.latency_s = latency_s
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    def __enter__(self) -> Endpoint:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.json"
        config.write_text(json.dumps({"latency_s": self.latency_s, "default_reply": REPLY}))
        port_file = self.workdir / "server.port"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "--port", "0", "--port-file", str(port_file)]
            + ["--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                self.__exit__()
                raise RuntimeError(f"test server did not start: {err}")
            time.sleep(0.02)
        self.port = int(port_file.read_text().strip())
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> list[dict[str, Any]]:
        """The server's request records (time received, image sha256, ...), oldest first."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_requests", timeout=60) as resp:
            return json.loads(resp.read())

    def set_latency(self, latency_s: float) -> None:
        """Change the latency (also forgets the server's request records, which otherwise keep growing)."""
        import urllib.request

        self.latency_s = latency_s
        body = json.dumps({"latency_s": latency_s, "default_reply": REPLY}).encode()
        for path, data in (("/_config", body), ("/_reset", b"{}")):
            req = urllib.request.Request(
                f"http://127.0.0.1:{self.port}{path}", data=data, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# ----------------------------------------------------------------------------- measured processes


@dataclass
class Measured:
    wall_s: float
    peak_rss_mb: float
    cpu_s: float
    returncode: int
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _vm_hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def run_measured(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 1800) -> Measured:
    """Run one process to the end: wall time from spawn to exit, peak RSS, CPU.

    Peak RSS is the process's VmHWM polled from /proc every 5 ms (the high-water mark of its own address
    space). wait4's ru_maxrss is not used: after fork+exec Linux reports the larger of the parent's RSS at
    fork time and the child's own, so a big benchmark parent would hide the child's figure.
    """
    with tempfile.TemporaryFile() as err:
        spawned_at = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        hwm_kb = 0
        while True:
            hwm_kb = max(hwm_kb, _vm_hwm_kb(proc.pid))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return Measured(
        wall_s=wall,
        peak_rss_mb=hwm_kb / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
        returncode=proc.returncode,
        stderr=text,
        extra={"spawned_at": spawned_at},
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL", "RUN_NAME", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    }
    env.update(extra)
    return env


def console_script(name: str) -> str:
    """An installed console script next to this interpreter (no pyenv shim start-up in the timing)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def evaluate_script() -> str:
    return console_script("doccount-evaluate")


def evaluator_cmd(data: str, base_url: str, run_root: Path, concurrency: int, *more: str) -> list[str]:
    return [
        evaluate_script(),
        "--model",
        MODEL,
        "--base-url",
        base_url,
        "--data-files",
        data,
        "--run-root",
        str(run_root),
        "--concurrency",
        str(concurrency),
        "--quiet",
        *more,
    ]


def bare_cmd(data: str, base_url: str, concurrency: int, out: Path, preload: bool = False) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "bare", "--data", data, "--base-url", base_url]
    cmd += ["--concurrency", str(concurrency), "--out", str(out)]
    return cmd + (["--preload"] if preload else [])


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def evaluator_timings(run_root: Path, latency_s: float) -> dict[str, Any]:
    """Per-request timings from the records: (finished_at - started_at) and the HTTP latency."""
    starts, ends, overhead, http = [], [], [], []
    with open(run_root / "responses.partial.jsonl", "rb") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("status") != "ok":
                continue
            s, e = _ts(rec["started_at"]), _ts(rec["finished_at"])
            starts.append(s)
            ends.append(e)
            overhead.append(e - s - latency_s)
            http.append(rec["latency_s"] - latency_s)
    return {"starts": starts, "ends": ends, "overhead": overhead, "http_overhead": http}


def sustained_rate(ends: list[float]) -> float:
    """Completions per second between the 10th and the 90th percentile completion (no ramp-up/down)."""
    if len(ends) < 10:
        return float("nan")
    e = sorted(ends)
    lo, hi = int(0.1 * len(e)), int(0.9 * len(e))
    span = e[hi] - e[lo]
    return (hi - lo) / span if span > 0 else float("nan")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    k = min(len(v) - 1, max(0, round(q / 100 * (len(v) - 1))))
    return v[k]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def load_text() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} CPU(s)"


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


@contextmanager
def workdir(keep: bool = False) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="doccount-bench-"))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- the bare loop (the floor)


def _iter_rows(pattern: str) -> Iterator[tuple[bytes, str]]:
    """(image bytes, prompt) in file order, 4 rows at a time, as the evaluator reads them."""
    import glob

    import pyarrow.parquet as pq

    for path in sorted(glob.glob(pattern)):
        pf = pq.ParquetFile(
            path, pre_buffer=False, buffer_size=1 << 20
        )  # as evaluator.data.parquet.open_parquet
        for batch in pf.iter_batches(batch_size=4, columns=["image", "prompt"], use_threads=False):
            images = batch.column("image").field("bytes").to_pylist()
            prompts = batch.column("prompt").to_pylist()
            yield from zip(images, prompts, strict=True)


def _messages(image: bytes, prompt: str) -> list[dict[str, Any]]:
    url = f"data:image/jpeg;base64,{base64.b64encode(image).decode('ascii')}"
    return [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": prompt}],
        }
    ]


async def _bare(args: argparse.Namespace) -> dict[str, Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=args.base_url, api_key="EMPTY", max_retries=0, timeout=600)
    timings: list[tuple[float, float, float]] = []  # (start, end, http seconds)
    errors = 0
    if args.preload:
        rows = list(_iter_rows(args.data))
        source: Iterator[tuple[bytes, str]] = iter(rows)
        del rows
    else:
        source = _iter_rows(args.data)
    queue: asyncio.Queue[tuple[bytes, str] | None] = asyncio.Queue(maxsize=min(8, args.concurrency))

    async def produce() -> None:
        while (row := await asyncio.to_thread(next, source, None)) is not None:
            await queue.put(row)
        for _ in range(args.concurrency):
            await queue.put(None)

    async def work() -> None:
        nonlocal errors
        while (row := await queue.get()) is not None:
            t0 = time.time()
            messages = _messages(*row)
            del row
            t1 = time.perf_counter()
            try:
                resp = await client.chat.completions.create(model=MODEL, messages=messages, **SAMPLING)
                del messages
                ok = bool(resp.choices and resp.choices[0].message.content)
            except openai.OpenAIError:
                ok = False
            http = time.perf_counter() - t1
            if ok:
                timings.append((t0, time.time(), http))
            else:
                errors += 1

    await asyncio.gather(produce(), *(work() for _ in range(args.concurrency)))
    await client.close()
    return {"timings": timings, "errors": errors}


def bare_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="common.py bare", description="bare AsyncOpenAI loop (the floor)")
    p.add_argument("--data", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--preload", action="store_true", help="read every row into memory first")
    args = p.parse_args(argv)
    result = asyncio.run(_bare(args))
    Path(args.out).write_text(json.dumps(result))
    return 1 if result["errors"] else 0


def bare_timings(out: Path, latency_s: float) -> dict[str, Any]:
    data = json.loads(out.read_text())
    t = data["timings"]
    return {
        "starts": [s for s, _, _ in t],
        "ends": [e for _, e, _ in t],
        "overhead": [e - s - latency_s for s, e, _ in t],
        "http_overhead": [h - latency_s for _, _, h in t],
        "errors": data["errors"],
    }


def self_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "bare":
        sys.exit(bare_main(sys.argv[2:]))
    print(__doc__)
