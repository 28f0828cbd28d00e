"""`doccount sweep`: every run of a sweep file as its own `evaluate` process, then the leaderboard.

Each run is `python -m evaluator.cli evaluate <its flags> --run-root <run-root>/<sweep>/<run>` in a child
process, at most `parallel` at once, so each has its own pacing, lock, records and exit code; the key
goes only into that child's environment, as MODEL_API_KEY, read from the run's `api_key_env` (never in
argv, never written). The child's exit code is the run's state. A finished run is scored (`score`
writes its summary and report.html). One run's failure never stops the others.

Resume and amend: the sweep's state is in `<run-root>/<sweep>/sweep.json` (the file's SHA-256 and each
run's state and arguments digest, never a key). A run that finished with the same arguments is not
started again (nothing is sent); any other run is evaluated again, and evaluate itself resumes the
folder, adds only what is new (a run added to the file, more repeats) and refuses a folder whose
settings changed: that refusal is the run's state and its message is shown.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.atomic import write_atomic
from evaluator.core.secrets import Redactor
from evaluator.core.text import utc_now
from evaluator.evaluation.orphan import PARENT_PID_ENV
from evaluator.evaluation.sweep_file import (
    OptionSpec,
    RunSpec,
    SweepSpec,
    check_key_variables,
    run_args,
    select_runs,
)
from evaluator.evaluation.sweep_progress import SweepProgress, end_table
from evaluator.runfolder.files import RunLock

SWEEP_STATE = "sweep.json"
SWEEP_COPY = "sweep.toml"  # the sweep file as this invocation read it (it holds no key: see sweep_file)
LOGS = "logs"
# evaluate's exit codes (evaluator.evaluation.evaluate) as run states
STATES = {0: "done", 1: "error", 2: "refused", 3: "failed", 130: "interrupted"}
# variables a child must not inherit: the sweep sets the key and passes the URL and folder itself
CHILD_DROPS = ("MODEL_API_KEY", "MODEL_API_BASE_URL", "RUN_NAME")


class RunState(msgspec.Struct, omit_defaults=True):
    state: str = "pending"  # pending, running, done, failed, refused, interrupted, error
    exit_code: int | None = None
    message: str | None = None  # the child's last error line (the key redacted)
    args_sha256: str | None = None  # of the evaluate arguments (no key is ever in them)
    api_key_env: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


class SweepState(msgspec.Struct):
    sweep: str
    file: str
    sha256: str
    pricing: dict[str, Any] = msgspec.field(default_factory=dict)
    runs: dict[str, RunState] = msgspec.field(default_factory=dict)
    updated_at: str | None = None
    invocations: int = 0


def args_digest(args: list[str], key_env: str | None) -> str:
    return hashlib.sha256("\0".join([*args, f"key:{key_env or ''}"]).encode("utf-8")).hexdigest()


def load_state(path: Path, sweep: SweepSpec) -> SweepState:
    fresh = SweepState(sweep.name, sweep.path, sweep.sha256, msgspec.to_builtins(sweep.pricing))
    try:
        old = msgspec.json.decode(path.read_bytes(), type=SweepState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return fresh  # first run (or an unreadable file: the run folders themselves are the truth)
    fresh.runs = old.runs
    fresh.invocations = old.invocations
    return fresh


class Sweep:
    """One `doccount sweep` invocation: the runs to start, their states, the lock on the sweep folder."""

    def __init__(
        self,
        sweep: SweepSpec,
        specs: Mapping[str, OptionSpec],
        run_root: Path,
        env: Mapping[str, str],
        python: str = sys.executable,
    ) -> None:
        self.sweep, self.specs, self.env, self.python = sweep, specs, dict(env), python
        self.folder = Path(run_root) / sweep.name
        self.state = load_state(self.folder / SWEEP_STATE, sweep)
        self.lock = threading.RLock()  # re-entrant: stop() may run in a signal handler on a thread holding it
        keys = {sweep_run.api_key_env for sweep_run in sweep.runs if sweep_run.api_key_env}
        self.key_vars = sorted(keys)
        self.redactors = [Redactor(self.env.get(k)) for k in self.key_vars]
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = False

    # ----------------------------------------------------------------- state
    def save(self) -> None:
        with self.lock:
            self.state.updated_at = utc_now()
            data = msgspec.json.format(msgspec.json.encode(self.state), indent=2) + b"\n"
            write_atomic(self.folder / SWEEP_STATE, data)

    def redact(self, text: str) -> str:
        for r in self.redactors:
            text = r(text)
        return text

    def child_env(self, run: RunSpec) -> dict[str, str]:
        """The parent's environment without any key variable of the sweep; the run's own key as MODEL_API_KEY."""
        env = {k: v for k, v in self.env.items() if k not in CHILD_DROPS and k not in self.key_vars}
        if run.api_key_env:
            env["MODEL_API_KEY"] = self.env[run.api_key_env].strip()
        env[PARENT_PID_ENV] = str(os.getpid())  # the child stops if this sweep dies (evaluation.orphan)
        return env

    # ----------------------------------------------------------------- one run
    def plan(self, run: RunSpec) -> tuple[list[str], str, bool]:
        """The run's evaluate arguments, their digest, and whether it finished with them already."""
        folder = self.folder / run.name
        args = run_args(run, self.specs, folder)
        digest = args_digest(args, run.api_key_env)
        old = self.state.runs.get(run.name)
        finished = old is not None and old.state == "done" and old.args_sha256 == digest
        return args, digest, finished and (folder / "run_config.json").is_file()

    def run_one(self, run: RunSpec, progress: SweepProgress) -> None:
        args, digest, finished = self.plan(run)
        if finished:
            progress.update(run.name, "done", "finished earlier with the same settings: nothing sent")
            return
        if self.stopping:
            return
        st = RunState("running", None, None, digest, run.api_key_env, utc_now())
        with self.lock:
            self.state.runs[run.name] = st
        self.save()
        progress.update(run.name, "running", "starting")
        code, last_error = self.evaluate(run, args, progress)
        st.exit_code = code
        st.state = STATES.get(code, "error")
        st.message = last_error if code != 0 else None
        if (self.folder / run.name / "run_config.json").is_file() and code in (0, 3, 130):
            progress.update(run.name, st.state, "scoring")
            self.score(run)
        st.finished_at = utc_now()
        self.save()
        progress.update(run.name, st.state, st.message or f"exit {code}")

    def evaluate(self, run: RunSpec, args: list[str], progress: SweepProgress) -> tuple[int, str | None]:
        """Run evaluate as a child; its stderr goes to logs/<run>.log (redacted) and the progress line."""
        cmd = [self.python, "-m", "evaluator.cli", "evaluate", *args]
        log_path = self.folder / LOGS / f"{run.name}.log"
        last_error: str | None = None
        with open(log_path, "ab") as log:
            child = subprocess.Popen(
                cmd,
                env=self.child_env(run),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            with self.lock:
                self.children[run.name] = child
                if self.stopping:  # stop() came between this run's start and now: it missed this child
                    child.terminate()
            assert child.stderr is not None
            for raw in child.stderr:
                for piece in raw.decode("utf-8", "replace").replace("\r", "\n").split("\n"):
                    line = self.redact(piece.strip())
                    if not line:
                        continue
                    log.write(line.encode("utf-8") + b"\n")
                    if line.startswith("error:"):
                        last_error = line
                    progress.update(run.name, "running", line)
            code = child.wait()
            with self.lock:
                self.children.pop(run.name, None)
        if code != 0 and last_error is None:
            last_error = f"evaluate exited {code}; see {log_path}"
        return code, last_error

    def score(self, run: RunSpec) -> None:
        """`score` on the run folder: summary.json, summary.md and report.html, for the leaderboard."""
        cmd = [self.python, "-m", "evaluator.cli", "score", "--run-root", str(self.folder / run.name)]
        env = {k: v for k, v in self.env.items() if k not in CHILD_DROPS and k not in self.key_vars}
        with open(self.folder / LOGS / f"{run.name}.log", "ab") as log:
            subprocess.run(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, check=False
            )

    def stop(self) -> None:
        """Forward an interrupt to every child: each saves its finished rows and exits 130."""
        self.stopping = True
        with self.lock:
            children = list(self.children.values())
        for child in children:
            if child.poll() is None:
                child.terminate()


def run_sweep(
    sweep: SweepSpec,
    specs: Mapping[str, OptionSpec],
    run_root: Path,
    only: list[str],
    parallel: int,
    env: Mapping[str, str] | None = None,
    out: Any = None,
) -> int:
    """Run the selected runs (at most `parallel` at once), write the leaderboard; 0 if every run finished,
    3 if some did not, 130 when interrupted."""
    env = os.environ if env is None else env
    runs = select_runs(sweep, only)
    check_key_variables(sweep, runs, env)
    sw = Sweep(sweep, specs, run_root, env)
    (sw.folder / LOGS).mkdir(parents=True, exist_ok=True)
    out = out or sys.stderr
    with RunLock(sw.folder), _forward_signals(sw):
        sw.state.invocations += 1
        write_atomic(sw.folder / SWEEP_COPY, sweep.raw)
        sw.save()
        progress = SweepProgress([r.name for r in runs], out)
        interrupted = _run_all(sw, runs, parallel, progress)
        progress.close()
        board = _write_board(sw, out)
    for line in end_table(sweep, sw.state, runs, board):
        print(line, file=out)
    if interrupted:
        return 130
    return 0 if all(sw.state.runs.get(r.name, RunState()).state == "done" for r in runs) else 3


@contextlib.contextmanager
def _forward_signals(sw: Sweep) -> Iterator[None]:
    """SIGTERM stops the sweep as Ctrl-C does: every child is told to stop and saves its finished rows."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, lambda *_: sw.stop())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _run_all(sw: Sweep, runs: list[RunSpec], parallel: int, progress: SweepProgress) -> bool:
    pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="sweep-run")
    futures = [pool.submit(sw.run_one, r, progress) for r in runs]
    try:
        for f in futures:
            f.result()
    except KeyboardInterrupt:
        sw.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        return True
    pool.shutdown(wait=True)
    return sw.stopping


def _write_board(sw: Sweep, out: Any) -> Path | None:
    """The leaderboard over every run folder the sweep has (a failure here never fails the sweep)."""
    from evaluator.report.leaderboard import write_leaderboard
    from evaluator.scoring import ScoreError

    names = [r.name for r in sw.sweep.runs if (sw.folder / r.name / "run_config.json").is_file()]
    if not names:
        return None
    try:
        return write_leaderboard([sw.folder])
    except (ScoreError, OSError) as exc:
        print(f"warning: the leaderboard was not written ({sw.redact(str(exc))})", file=out)
        return None
