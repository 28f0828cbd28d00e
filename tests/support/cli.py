"""The CLI as the tests run it: the real entry points (exit codes and stderr are part of the contract), in
this process (support/inprocess.py) or, where a test's point is a process boundary, in a subprocess; with an
environment cleaned of this machine's keys and hub settings."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from support import launch
from support.datagen import complete_records as read_records  # noqa: F401  (the tests import it from here)

REPO = Path(__file__).resolve().parents[2]
FAST_RETRIES = ["--retry-backoff", "0.01", "--retry-max-wait", "0.05"]

# The console entry points, run by the interpreter that runs the tests.
EVALUATE = [sys.executable, "-c", "from evaluator.cli import evaluate_main; evaluate_main()"]
SCORE = [sys.executable, "-c", "from evaluator.cli import score_main; score_main()"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the variables the evaluator reads (so a developer's own key never leaks in)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL", "RUN_NAME")
    }
    env.update(extra)
    return env


def _cli(
    runner: Callable[..., subprocess.CompletedProcess[str]],
    args: tuple[str, ...],
    env: dict[str, str] | None,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """`doccount ARGS` from the repository, run by `runner`, its output captured as text, in a clean
    environment."""
    return runner(
        doccount(*args),
        capture_output=True,
        text=True,
        env=clean_env(**(env or {})),
        cwd=str(REPO),
        timeout=timeout,
    )


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`doccount ARGS` as its process would run it from the repository (exit code, stdout, stderr), in this
    process unless the environment needs one of its own (support/launch.py); `timeout` bounds a subprocess."""
    return _cli(launch.run, args, env, timeout)


def run_cli_process(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m evaluator.cli ARGS` in a subprocess of its own: for tests whose point is the process
    (signals, children it leaves, its environment, its exit status as a shell sees it)."""
    return _cli(subprocess.run, args, env, timeout)


def fast_eval_cmd(
    base_url: str, data_dir: Path, root: Path, *extra: str, timeout: float = 5, max_retries: int | None = None
) -> list[str]:
    """A doccount-evaluate command line with quick retries, for fault and crash tests."""
    cmd = [
        *EVALUATE,
        *eval_args(base_url, str(data_dir / "*.parquet"), root, model="test-model"),
        *FAST_RETRIES,
    ]
    cmd += ["--timeout", str(timeout)]
    if max_retries is not None:
        cmd += ["--max-retries", str(max_retries)]
    return [*cmd, *extra]


def eval_args(base_url: str, data: str, run: str | Path, model: str = "m") -> list[str]:
    """The usual evaluate arguments: model, endpoint, data glob, run folder."""
    return ["--model", model, "--base-url", base_url, "--data-files", data, "--run-root", str(run)]


def sweep_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 200
) -> subprocess.CompletedProcess[str]:
    """run_cli with the longer bound a whole sweep needs."""
    return run_cli(*args, env=env, timeout=timeout)


def run_script(name: str, env: dict[str, str], tmp_path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MODEL", "RUN_"))}
    # the wrapper execs DOCCOUNT_EVALUATE as one word: a shim forwards to this interpreter's module
    shim = tmp_path / "evaluate-shim.sh"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m evaluator.cli evaluate "$@"\n')
    shim.chmod(0o755)
    clean["DOCCOUNT_EVALUATE"] = str(shim)
    clean.update(env)
    return subprocess.run(
        ["bash", str(REPO / "scripts" / name)],
        env=clean,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def closed_port_url() -> str:
    """An address where nothing listens: connection refused, as on a host without a route to the hub."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def hf(
    cmd: list[str],
    endpoint: str,
    cache: Path,
    offline: bool | None = False,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command with the hub settings given here and no others of this machine (offline None: unset)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGING", "MODEL_API", "RUN_NAME", "DOCCOUNT_IMAGE", "DOCCOUNT_MODEL"))
        and k not in ("DOCCOUNT_SERVED_MODEL", "DOCCOUNT_VLLM_ARGS", "DOCCOUNT_GPUS")
    }
    env.update(extra_env or {})
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(cache.parent / "hf-home"),  # no token or settings of this machine
        HF_HUB_CACHE=str(cache),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    if offline is not None:
        env["HF_HUB_OFFLINE"] = "1" if offline else "0"
    return launch.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO), timeout=120)


def doccount(*args: str) -> list[str]:
    return [sys.executable, "-m", "evaluator.cli", *args]


def processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line names `text` (a run root: the sweep's evaluate children; a
    stand-in's config: its servers), this process left out."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text.encode() in cmdline and state != "Z" and int(proc.name) != os.getpid():
            pids.append(int(proc.name))
    return pids
