"""The sweep-to-evaluate contract (evaluator.study.unit and its evaluate child), nothing read from stderr:
a `LaunchContract` the unit writes and names in HANDOFF_ENV (the launch and what was served, recorded in
run_config.json, and where the outcome goes), and the `Outcome` the child writes atomically however it
ends (none: the unit goes by the exit code). And sweep.json, the sweep's state (`SweepState`, never a key),
one type for the sweep that writes it and the leaderboard and archive that read it; the run folders stay
the truth: an unreadable state file starts afresh.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.errors import ExitCode
from evaluator.core.vocab import QUEUE_RUN_STATE, RunStateWord, UnitEnd
from evaluator.runfolder.runconfig import Launch, RunConfigError
from evaluator.runfolder.serving import Serving

HANDOFF_ENV = "DOCCOUNT_HANDOFF"
"""The variable naming the LaunchContract file; set by a sweep's unit only, never inherited."""

# evaluate's exit codes as run states; an exit 2 that is a reasoning smoke stop is "stopped"
STATES: dict[int, UnitEnd] = {
    ExitCode.OK: "done",
    ExitCode.NOT_VERIFIED: "error",
    ExitCode.USAGE: "refused",
    ExitCode.INCOMPLETE: "failed",
    ExitCode.INTERRUPTED: "interrupted",
}


class LaunchContract(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a sweep's unit tells its evaluate child. No secret: the key goes by the environment."""

    outcome: str
    """The file the child writes its Outcome to (the unit removes a stale one before the start)."""

    launch: Launch | None = None
    """How the server was started (command, GPU ids, tries, host, launcher, image, job id, partition);
    None for a run against an existing endpoint. Recorded as run_config.json `launch`."""

    served: Serving | None = None
    """What was served (model, revision, commit, args, GPUs as nvidia-smi names them, image id); the
    server's version is asked of the server itself. None for an endpoint run. Becomes run_config.json
    `serving`, in place of the DOCCOUNT_* variables a Make run passes."""


class Rows(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The rows this invocation recorded, by status."""

    ok: int = 0
    """Rows with an answer."""

    request_error: int = 0
    """Rows whose request failed after the retries (a re-run sends them again)."""

    data_error: int = 0
    """Rows whose data could not be sent (a bad image, a missing column)."""


class Outcome(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How an evaluate child ended, for its unit."""

    state: UnitEnd
    """The run's state: done, failed, error, refused, stopped (a reasoning smoke stop), interrupted."""

    exit_code: ExitCode
    """The code the child exits with (the unit checks it against the one it sees)."""

    cause: str | None = None
    """The one `error:` line that ended the run (the last one said), when there was one."""

    smoke_stop: bool = False
    """Whether the run was stopped by the reasoning smoke check (data.reasoning)."""

    rows: Rows | None = None
    """What was recorded; None when the run ended before sending (or sent through a Batch API)."""


def outcome_state(code: int, smoke_stop: bool = False) -> UnitEnd:
    """An exit code (and whether it was a smoke stop) as a run state; an unknown code is an error."""
    return "stopped" if smoke_stop and code == ExitCode.USAGE else STATES.get(code, "error")


def encode_contract(contract: LaunchContract) -> bytes:
    return msgspec.json.encode(contract)


def decode_contract(data: bytes) -> LaunchContract:
    return msgspec.json.decode(data, type=LaunchContract)


def encode_outcome(outcome: Outcome) -> bytes:
    return msgspec.json.encode(outcome)


def decode_outcome(data: bytes) -> Outcome:
    return msgspec.json.decode(data, type=Outcome)


def read_contract(env: Mapping[str, str] = os.environ) -> LaunchContract | None:
    """The contract HANDOFF_ENV names; None when evaluate was not started by a sweep's unit."""
    name = env.get(HANDOFF_ENV, "")
    if not name:
        return None
    try:
        return decode_contract(Path(name).read_bytes())
    except OSError as exc:
        raise RunConfigError(f"{HANDOFF_ENV} names {name}, which cannot be read ({exc.strerror})") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RunConfigError(f"{HANDOFF_ENV} names {name}, which is not a launch contract ({exc})") from None


def read_outcome(path: Path) -> Outcome | None:
    """The outcome a child wrote; None when there is none (a killed child) or it does not decode."""
    try:
        return decode_outcome(path.read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


SWEEP_STATE = "sweep.json"
SWEEP_COPY = "sweep.toml"  # the sweep file as the sweep's latest invocation read it (it holds no key)


class RunState(msgspec.Struct, omit_defaults=True):
    state: RunStateWord = "pending"  # a Slurm job's queue word is mapped (vocab.QUEUE_RUN_STATE)
    exit_code: int | None = None
    message: str | None = None  # the child's last error line (the key redacted)
    args_sha256: str | None = None  # of the evaluate arguments (no key is ever in them)
    api_key_env: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    job_id: str | None = None  # the scheduler's (Slurm), saved as soon as it exists
    server_log: str | None = None  # a served run's server log
    gpus: list[str] | None = None  # the GPU ids its server had


class SweepState(msgspec.Struct):
    sweep: str
    file: str
    sha256: str
    pricing: dict[str, Any] = msgspec.field(default_factory=dict)
    published: dict[str, Any] = msgspec.field(default_factory=dict)  # run -> the result it reproduces
    runs: dict[str, RunState] = msgspec.field(default_factory=dict)
    updated_at: str | None = None
    invocations: int = 0

    @classmethod
    def from_object(cls, raw: Any) -> SweepState:
        """sweep.json's parsed JSON, typed; msgspec.ValidationError (a ValueError) saying what is wrong. An
        older file's `submitted` is read as its run state, so its job ids are kept (not resubmitted)."""
        runs = raw.get("runs") if isinstance(raw, dict) else None
        for st in runs.values() if isinstance(runs, dict) else ():
            if isinstance(st, dict) and st.get("state") in QUEUE_RUN_STATE:
                st["state"] = QUEUE_RUN_STATE[st["state"]]
        return msgspec.convert(raw, cls)

    def run_state(self, name: str) -> str | None:
        """The run's recorded state, or None when none was written (`pending` is the unwritten default)."""
        st = self.runs.get(name)
        return st.state if st is not None and st.state != "pending" else None


def read_sweep_state(path: Path) -> SweepState:
    """sweep.json of a sweep folder; OSError or ValueError (msgspec's) when it cannot be read as one."""
    return SweepState.from_object(msgspec.json.decode(path.read_bytes()))


def args_digest(args: list[str], key_env: str | None) -> str:
    return hashlib.sha256("\0".join([*args, f"key:{key_env or ''}"]).encode("utf-8")).hexdigest()
