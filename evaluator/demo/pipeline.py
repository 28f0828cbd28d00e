"""`doccount demo`: sample pages -> reference endpoint on loopback -> evaluate -> score -> summary.

Every step is the real one a user runs (the evaluate and score commands run as subprocesses of this
interpreter), only the data and the model are local stand-ins.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click


def _start_reference_server(log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port_file = log_path.with_suffix(".port")
    port_file.unlink(missing_ok=True)
    with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evaluator.demo.reference_server",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--log-level",
                "WARNING",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"the reference server exited at start-up; see {log_path}")
        if port_file.exists() and port_file.read_text().strip():
            port = int(port_file.read_text())
            port_file.unlink(missing_ok=True)
            return proc, f"http://127.0.0.1:{port}/v1"
        time.sleep(0.1)
    proc.kill()
    raise click.ClickException(f"the reference server did not start within 120 s; see {log_path}")


def run_demo(run_root: Path, data_root: Path, pages: int, seed: int, concurrency: int) -> int:
    from evaluator.demo.reference_server import DEFAULT_MODEL_NAME
    from evaluator.demo.sample_data import generate_sample_set
    from evaluator.report.base import REPORT_FILE
    from evaluator.scoring.base import SCORES_DIR

    t0 = time.monotonic()
    click.echo(f"[demo] 1/4 generating {pages} sample pages (seed {seed}) into {data_root}", err=True)
    generate_sample_set(data_root, n_pages=pages, seed=seed)
    run_root.mkdir(parents=True, exist_ok=True)
    click.echo("[demo] 2/4 starting the reference model (layout detector, CPU) on 127.0.0.1", err=True)
    server, base_url = _start_reference_server(run_root / "reference-server.log")
    try:
        click.echo(f"[demo] 3/4 evaluating with the DocCount protocol against {base_url}", err=True)
        env = {k: v for k, v in os.environ.items() if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL")}
        evaluate = subprocess.run(
            [
                sys.executable,
                "-m",
                "evaluator.cli",
                "evaluate",
                "--backend",
                "api",
                "--model",
                DEFAULT_MODEL_NAME,
                "--base-url",
                base_url,
                "--data-files",
                str(data_root / "data" / "test-*.parquet"),
                "--run-root",
                str(run_root),
                "--concurrency",
                str(concurrency),
            ],
            env=env,
        )
        if evaluate.returncode not in (0, 3):
            return evaluate.returncode
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    click.echo("[demo] 4/4 scoring", err=True)
    score = subprocess.run(
        [sys.executable, "-m", "evaluator.cli", "score", "--run-root", str(run_root)], env=env
    )
    if score.returncode != 0:
        return score.returncode
    click.echo(f"[demo] done in {time.monotonic() - t0:.0f} s. Run folder: {run_root}", err=True)
    click.echo(f"[demo] browse every page: {run_root / SCORES_DIR / REPORT_FILE}", err=True)
    return 0
