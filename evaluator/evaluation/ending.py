"""How an evaluate invocation ended, written for a sweep's unit as its Outcome file (runfolder.handoff).

`recording(env)` wraps a whole `doccount evaluate`: when a launch contract is handed over, the Outcome is
written atomically as the block ends, on every path; its cause is the exception's (a UserError's exit
code and `error:` line, a smoke stop). Outside `recording` the notes do nothing.

A sweep's child also ends when its sweep dies, even by `kill -9` (`stop_when_orphaned`: re-parented, it
sends itself SIGTERM), so it never runs on unseen holding its run folder's lock against the resume.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from evaluator.core.atomic import write_atomic
from evaluator.core.errors import ExitCode, UserError
from evaluator.core.secrets import redactor_from_env
from evaluator.data.reasoning import SmokeStop
from evaluator.runfolder.handoff import Outcome, Rows, encode_outcome, outcome_state, read_contract


@dataclass
class Ending:
    """What is known so far of how this invocation ends."""

    code: int = ExitCode.OK
    cause: str | None = None
    smoke_stop: bool = False
    rows: Rows | None = None

    def outcome(self) -> Outcome:
        code = ExitCode(self.code) if self.code in set(ExitCode) else ExitCode.NOT_VERIFIED
        return Outcome(
            state=outcome_state(code, self.smoke_stop),
            exit_code=code,
            cause=self.cause if code != ExitCode.OK else None,
            smoke_stop=self.smoke_stop and code == ExitCode.USAGE,
            rows=self.rows,
        )


_current: Ending | None = None


def note_rows(recorded: Mapping[str, int]) -> Mapping[str, int]:
    """Note the rows recorded by status (ok, request_error, data_error); returns them."""
    if _current is not None:
        _current.rows = Rows(
            ok=recorded.get("ok", 0),
            request_error=recorded.get("request_error", 0),
            data_error=recorded.get("data_error", 0),
        )
    return recorded


def _exit_of(exc: BaseException) -> tuple[int, str | None]:
    """The exit code an exception leaving evaluate ends in (cli.main.invoke), and its error line."""
    if isinstance(exc, SystemExit):
        code = exc.code
        return (code if isinstance(code, int) else ExitCode.NOT_VERIFIED if code else ExitCode.OK), None
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED, None
    if isinstance(exc, UserError):  # the one-line errors a user can fix, as cli.main.invoke prints them
        return exc.exit_code, f"error: {redactor_from_env()(str(exc))}".splitlines()[0]
    return ExitCode.NOT_VERIFIED, None  # a crash: its traceback is in the log


@contextlib.contextmanager
def recording(env: Mapping[str, str] = os.environ) -> Iterator[Ending]:
    """Note how the block ends; write it as the Outcome the launch contract asks for, if one does."""
    global _current
    contract = read_contract(env)
    ending = _current = Ending()
    try:
        yield ending
    except BaseException as exc:
        ending.code, ending.cause = _exit_of(exc)
        ending.smoke_stop = isinstance(exc, SmokeStop)
        raise
    finally:
        _current = None
        if contract is not None:
            with contextlib.suppress(OSError):  # a folder gone: the unit goes by the exit code
                write_atomic(Path(contract.outcome), encode_outcome(ending.outcome()))


PARENT_PID_ENV = "DOCCOUNT_PARENT_PID"
POLL_S = 0.5


def stop_when_orphaned(env: Mapping[str, str] = os.environ, poll_s: float = POLL_S) -> bool:
    """Start the watch when the environment names a parent; whether it was started."""
    want = env.get(PARENT_PID_ENV, "")
    if not want.isdigit():
        return False

    def watch() -> None:
        while os.getppid() == int(want):
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return True
