"""The serve-and-evaluate unit: one run of a sweep, in any process (a thread of the sweep, or a Slurm job).

`serve_and_evaluate(task) -> UnitResult`; a `UnitTask` holds no secret (the run's key is read from the
environment by the variable's name; the GPUs are its CUDA_VISIBLE_DEVICES). A served run's server gets a
fresh token by environment only (VLLM_API_KEY: vLLM then answers /v1 only to requests carrying it; the
user's key never goes there), a free port and its guard; once it is ready and serves the right name (an
early exit is tried again, up to `task.tries`), the evaluate child runs while the server is watched.
The child speaks through runfolder.handoff, never stderr: a LaunchContract beside the run's log, named in
DOCCOUNT_HANDOFF, and its Outcome, which gives the run's state (a killed child: its exit code alone).
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from evaluator.core.atomic import no_follow, write_atomic
from evaluator.core.errors import ExitCode
from evaluator.core.secrets import Redactor
from evaluator.core.vocab import UnitEnd, UnitPhase
from evaluator.evaluation.ending import PARENT_PID_ENV
from evaluator.runfolder.handoff import (
    HANDOFF_ENV,
    STATES,
    LaunchContract,
    Outcome,
    encode_contract,
    read_outcome,
)
from evaluator.runfolder.runconfig import Launch
from evaluator.runfolder.serving import Serving, parse_gpus
from evaluator.study.launch import ServerSpec, missing_program
from evaluator.study.server import Server, ServerFailure, Stopped, last_error_line, server_environment

IMAGE_ID_RE = re.compile(r"[0-9a-f]{64}")

# what `make eval` tells an evaluate about its server (runfolder.serving reads them): a unit's child has
# its launch contract instead and never inherits them from the sweep's own environment
SERVING_ENV = (
    "DOCCOUNT_SERVED_MODEL", "DOCCOUNT_MODEL_REVISION", "DOCCOUNT_MODEL_COMMIT", "DOCCOUNT_VLLM_ARGS",
    "DOCCOUNT_GPUS", "DOCCOUNT_IMAGE_VLLM",
)  # fmt: skip
# variables a child must not inherit: the unit sets the key and passes the URL and folder itself; a
# server gets only the token the unit made for it (SERVER_TOKEN_ENV), never one from the sweep's environment
SERVER_TOKEN_ENV = "VLLM_API_KEY"
CHILD_DROPS = (
    "MODEL_API_KEY",
    "MODEL_API_BASE_URL",
    "RUN_NAME",
    "REASONING",
    SERVER_TOKEN_ENV,
    HANDOFF_ENV,
    "DOCCOUNT_SERVER_LAUNCH",  # the launch variable of before the contract file: never passed on
    *SERVING_ENV,
)


class UnitTask(msgspec.Struct, frozen=True, kw_only=True):
    """One run to serve and evaluate. Picklable and JSON-able; never holds a secret."""

    run: str
    """The run's name (its folder's)."""
    evaluate_args: list[str]
    """evaluate's arguments, --run-root included; a served run's --base-url is added by the unit."""
    evaluate_log: str
    """`runs/<sweep>/logs/<run>.log`: evaluate's stderr, redacted."""
    server: ServerSpec | None = None
    """What to serve; None for a run against an existing endpoint."""
    server_log: str | None = None
    """`runs/<sweep>/logs/<run>.server.log` (a served run)."""
    gpus: int = 0
    """GPUs the server needs (what an executor allots; the unit reads the ids from CUDA_VISIBLE_DEVICES)."""
    api_key_env: str | None = None
    """The NAME of the variable holding this run's key; its value goes to evaluate as MODEL_API_KEY (an
    endpoint run only: a served run's requests carry its server's own token, never the user's key)."""
    drop_env: list[str] = msgspec.field(default_factory=list)
    """Variables no child may inherit (the other runs' key variables)."""
    python: str = sys.executable
    tries: int = 3
    """Starts of a server that exits before it is ready."""
    ready_timeout_s: float = 1800.0
    """How long one start may take to be ready (download and load included)."""
    grace_s: float = 10.0
    """Between SIGTERM and SIGKILL when stopping a server."""
    watch_s: float = 1.0
    """How often a running server is checked."""


class UnitResult(msgspec.Struct, kw_only=True):
    state: UnitEnd
    """done, failed, error, refused, stopped (a reasoning smoke stop), interrupted (evaluate's exit code as a
    state), or not-started."""
    exit_code: int | None = None
    """evaluate's exit code (None when it did not run)."""
    message: str | None = None
    """The last error line: evaluate's, or the server's (redacted)."""
    launch: Launch | None = None


class UnitStatus(msgspec.Struct, kw_only=True):
    """What the unit itself reports (a scheduler's word for its job is apart: executors.base.Poll)."""

    phase: UnitPhase
    """queued, starting, starting server, evaluating, stopping server, finished"""
    detail: str = ""
    result: UnitResult | None = None
    """Set once the unit has finished."""


Report = Callable[[UnitStatus], None]


def serve_and_evaluate(
    task: UnitTask,
    env: Mapping[str, str] | None = None,
    report: Report | None = None,
    stop: threading.Event | None = None,
) -> UnitResult:
    """Serve (when the run is served), evaluate, stop the server: the run's result. `stop` ends it early
    (the evaluate child saves its rows and exits 130; the server is stopped)."""
    env = dict(os.environ if env is None else env)
    report = report or (lambda _s: None)
    stop = stop or threading.Event()
    if task.server is None:
        return _evaluate(task, env, [], report, stop, None, None)
    started = _start_server(task, env, report, stop)
    if isinstance(started, UnitResult):
        return started
    server, launch = started
    try:
        return _evaluate(task, env, ["--base-url", server.base_url], report, stop, server, launch)
    finally:
        report(UnitStatus(phase="stopping server"))
        server.stop()


def _start_server(
    task: UnitTask, env: dict[str, str], report: Report, stop: threading.Event
) -> tuple[Server, Launch] | UnitResult:
    """A ready server that serves the run's name, or the result of a run whose server never was."""
    assert task.server is not None and task.server_log is not None
    missing = missing_program(task.server)
    if missing:
        key = "image's runtime" if task.server.launcher == "container" else "command"
        return UnitResult(
            state="failed", message=f"server: {missing} is not found on this host ([serve] {key})"
        )
    gpus = [g.strip() for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    server_env = server_environment(env, (*CHILD_DROPS, *task.drop_env, task.api_key_env or ""))
    message = "not started"
    for attempt in range(1, task.tries + 1):
        if stop.is_set():
            return UnitResult(state="interrupted", message="stopped while the server was starting")
        # a fresh token for each server, by environment only (a command line is visible to every user of
        # the node): the server then answers /v1 only to requests that carry it (vLLM's VLLM_API_KEY)
        token = secrets.token_urlsafe(32)
        server = Server(
            task.server, task.run, gpus, Path(task.server_log), {**server_env, SERVER_TOKEN_ENV: token}
        )
        report(
            UnitStatus(
                phase="starting server", detail=f"try {attempt}/{task.tries} on GPUs {','.join(gpus) or '-'}"
            )
        )
        server.start(attempt, task.grace_s)
        try:
            server.wait_ready(task.ready_timeout_s, stop)
        except Stopped:
            server.stop()
            return UnitResult(state="interrupted", message="stopped while the server was starting")
        except ServerFailure as exc:
            server.stop()
            message = f"server: {exc.message} (log: {task.server_log})"
            if not exc.retry:
                return UnitResult(state="failed", message=message)
            continue
        return server, _launch(task.server, server, gpus, attempt)
    return UnitResult(state="failed", message=f"{message}; gave up after {task.tries} tries")


def _launch(spec: ServerSpec, server: Server, gpus: list[str], tries: int) -> Launch:
    return Launch(
        launcher=spec.launcher,
        command=server.argv,
        gpus=gpus,
        image=spec.image if spec.launcher == "container" else None,
        tries=tries,
        host=socket.gethostname(),
        job_id=os.environ.get("SLURM_JOB_ID"),  # set when the unit runs in a Slurm job
        partition=os.environ.get("SLURM_JOB_PARTITION"),
    )


def served(spec: ServerSpec, gpus: list[str]) -> Serving:
    """What was served (run_config.json `serving`, by the contract): the weights, the args, the image id,
    the GPUs as nvidia-smi names them."""
    return Serving(
        model=spec.model.strip() or None,
        revision=(spec.revision or "").strip() or None,
        args=list(spec.args),
        gpus=parse_gpus(_nvidia_smi_gpus(gpus)),
        image=_image_id(spec) if spec.launcher == "container" else None,
    )


def _image_id(spec: ServerSpec) -> str | None:
    """The serving image's id (a tag can move): docker prints sha256:HEX, podman bare HEX."""
    query = [spec.runtime, "image", "inspect", "--format", "{{.Id}}", spec.image]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    found = out.stdout.strip().removeprefix("sha256:")
    return f"sha256:{found}" if out.returncode == 0 and IMAGE_ID_RE.fullmatch(found) else None


def _nvidia_smi_gpus(gpus: list[str]) -> str | None:
    if not gpus:
        return None
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    try:
        out = subprocess.run([*query, f"--id={','.join(gpus)}"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def _hand_off(task: UnitTask, launch: Launch | None) -> tuple[Path, Path]:
    """Write the run's launch contract beside its log, clear an earlier outcome: (contract, outcome)."""
    stem = task.evaluate_log.removesuffix(".log")
    contract, outcome = Path(f"{stem}.launch.json"), Path(f"{stem}.outcome.json")
    outcome.unlink(missing_ok=True)  # an earlier invocation's must not be read as this one's
    what = served(task.server, launch.gpus) if launch is not None and task.server is not None else None
    write_atomic(contract, encode_contract(LaunchContract(outcome=str(outcome), launch=launch, served=what)))
    return contract, outcome


def _child_env(
    task: UnitTask, env: Mapping[str, str], contract: Path, server: Server | None
) -> dict[str, str]:
    """evaluate's environment: the key (its server's token, or the user's), the contract by name."""
    out = {k: v for k, v in env.items() if k not in (*CHILD_DROPS, *task.drop_env, task.api_key_env or "")}
    if server is not None:
        if server.token:  # always set by _start_server; None only for a Server made elsewhere
            out["MODEL_API_KEY"] = server.token
    elif task.api_key_env and env.get(task.api_key_env, "").strip():
        out["MODEL_API_KEY"] = env[task.api_key_env].strip()
    out[PARENT_PID_ENV] = str(os.getpid())  # the child stops if this process dies (evaluation.ending)
    out[HANDOFF_ENV] = str(contract)
    return out


def _evaluate(
    task: UnitTask,
    env: dict[str, str],
    extra: list[str],
    report: Report,
    stop: threading.Event,
    server: Server | None,
    launch: Launch | None,
) -> UnitResult:
    """evaluate as a child, its stderr to the log (redacted) and the status; the server watched meanwhile."""
    keys = [Redactor(env.get(task.api_key_env or "") or None), Redactor(server.token if server else None)]
    cmd = [task.python, "-m", "evaluator.cli", "evaluate", *task.evaluate_args, *extra]
    report(UnitStatus(phase="evaluating", detail="starting"))
    contract, outcome_path = _hand_off(task, launch)
    child = subprocess.Popen(
        cmd, env=_child_env(task, env, contract, server), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    died: list[str] = []
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(child, server, stop, done, died, task), daemon=True)
    watcher.start()
    _follow(child, task.evaluate_log, lambda t: keys[1](keys[0](t)), report)
    code = child.wait()
    done.set()
    watcher.join()
    if not died and code != ExitCode.OK and server is not None and not stop.is_set() and _exits_soon(server):
        died.append(_death_message(server, task))  # evaluate saw the refused connections first
    if died:
        return UnitResult(state="failed", exit_code=code, message=died[0], launch=launch)
    if stop.is_set() and code == -signal.SIGTERM:  # our stop came before evaluate set its handler
        why = f"stopped while evaluate was starting; see {task.evaluate_log}"
        return UnitResult(state="interrupted", exit_code=code, message=why, launch=launch)
    return _ended(code, read_outcome(outcome_path), lambda t: keys[1](keys[0](t)), task, launch)


def _ended(
    code: int, outcome: Outcome | None, redact: Callable[[str], str], task: UnitTask, launch: Launch | None
) -> UnitResult:
    """The run's result from the child's outcome file; from its exit code alone when it left none (or one
    that is not this exit's: a child killed after writing it)."""
    if outcome is not None and outcome.exit_code == code:
        state, cause = outcome.state, redact(outcome.cause) if outcome.cause else None
    else:
        state, cause = STATES.get(code, "error"), None
    if code != ExitCode.OK and cause is None:
        cause = f"evaluate exited {code}; see {task.evaluate_log}"
    return UnitResult(state=state, exit_code=code, message=cause if code else None, launch=launch)


def _follow(
    child: subprocess.Popen[bytes], log_path: str, redact: Callable[[str], str], report: Report
) -> None:
    """The child's stderr, line by line, to the log and the status (the run's state is from its outcome)."""
    assert child.stderr is not None
    with open(log_path, "ab", opener=no_follow) as log:
        for raw in child.stderr:
            for piece in raw.decode("utf-8", "replace").replace("\r", "\n").split("\n"):
                line = redact(piece.strip())
                if not line:
                    continue
                log.write(line.encode("utf-8") + b"\n")
                log.flush()
                report(UnitStatus(phase="evaluating", detail=line))


def _watch(
    child: subprocess.Popen[bytes],
    server: Server | None,
    stop: threading.Event,
    done: threading.Event,
    died: list[str],
    task: UnitTask,
) -> None:
    """Stop the evaluate child (as Ctrl-C does: rows kept) when the sweep stops or the server dies."""
    while not done.wait(task.watch_s):
        if stop.is_set() or (server is not None and not server.alive()):
            if server is not None and not server.alive() and not stop.is_set():
                died.append(_death_message(server, task))
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            return


def _exits_soon(server: Server, within_s: float = 3.0) -> bool:
    """Whether the server's guard has exited or does within a few seconds (it notices a dead server)."""
    assert server.proc is not None
    try:
        server.proc.wait(within_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _death_message(server: Server, task: UnitTask) -> str:
    code = server.proc.returncode if server.proc else None
    why = last_error_line(server.log) or "no output"
    return f"server: exited mid-run ({code}): {why} (log: {task.server_log})"
