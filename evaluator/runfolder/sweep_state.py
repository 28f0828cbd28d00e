"""A sweep's state on disk, `<run-root>/<sweep>/sweep.json`: the file's SHA-256 and each run's state and
arguments digest (never a key). One type to write it (the sweep, evaluator.study.sweep) and to read it (the
leaderboard, the sweep archive). The run folders themselves stay the truth: a sweep that cannot read its
state file starts afresh and evaluate resumes each folder.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.vocab import QUEUE_RUN_STATE, RunStateWord

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
        """sweep.json's parsed JSON, typed; msgspec.ValidationError (a ValueError) saying what is wrong."""
        return msgspec.convert(_queue_words_mapped(raw), cls)

    def run_state(self, name: str) -> str | None:
        """The run's recorded state, or None when none was written (`pending` is the unwritten default)."""
        st = self.runs.get(name)
        return st.state if st is not None and st.state != "pending" else None


def decode_sweep_state(data: bytes) -> SweepState:
    """sweep.json's bytes, typed; ValueError (msgspec's) saying what is wrong when they are not a state."""
    return SweepState.from_object(msgspec.json.decode(data))


def read_sweep_state(path: Path) -> SweepState:
    """sweep.json of a sweep folder; OSError or ValueError when it cannot be read as one."""
    return decode_sweep_state(path.read_bytes())


def args_digest(args: list[str], key_env: str | None) -> str:
    return hashlib.sha256("\0".join([*args, f"key:{key_env or ''}"]).encode("utf-8")).hexdigest()


def _queue_words_mapped(raw: Any) -> Any:
    """A sweep.json written before the queue words were mapped may hold `submitted`: read it as its run
    state, so the job ids in it are kept (an unreadable file would resubmit every job)."""
    runs = raw.get("runs") if isinstance(raw, dict) else None
    for st in runs.values() if isinstance(runs, dict) else ():
        if isinstance(st, dict) and st.get("state") in QUEUE_RUN_STATE:
            st["state"] = QUEUE_RUN_STATE[st["state"]]
    return raw
