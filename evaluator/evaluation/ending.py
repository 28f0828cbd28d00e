"""How an evaluate invocation ended, written for a sweep's unit as its Outcome file (runfolder.handoff).

`recording(env)` wraps a whole `doccount evaluate`: when a launch contract is handed over (HANDOFF_ENV),
the Outcome is written atomically as the block ends, on every path (an exit code returned, a user error,
Ctrl-C or SIGTERM as 130, a crash as 1). What it holds is noted where it is known: the last `error:` line
said (through the `doccount` logger or the root one, as every error line is), the recorded rows
(`note_rows`), a reasoning smoke stop (`smoke_stop_line`). Outside `recording` the notes do nothing, so a
library call of evaluate() is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from evaluator.core.atomic import write_atomic
from evaluator.core.exitcode import ExitCode
from evaluator.core.output import MESSAGES
from evaluator.core.secrets import redactor_from_env
from evaluator.runfolder.handoff import Outcome, Rows, encode_outcome, outcome_state, read_contract


class Ending:
    """What is known so far of how this invocation ends."""

    def __init__(self) -> None:
        self.code: int = ExitCode.OK
        self.cause: str | None = None
        self.smoke_stop = False
        self.rows: Rows | None = None

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


class _LastError(logging.Handler):
    """Keeps the last `error:` line logged (its first line: a cause is one line), the key removed: the
    outcome is a file, and a file never holds the key, whatever a line that reached here carried."""

    def __init__(self, ending: Ending) -> None:
        super().__init__(logging.INFO)
        self.ending, self.redact = ending, redactor_from_env()

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # logging's rule: never raise into the caller
            text = record.getMessage().strip()
            if text.startswith("error:"):
                self.ending.cause = self.redact(text.splitlines()[0])


def note_rows(recorded: Mapping[str, int]) -> Mapping[str, int]:
    """Note the rows recorded by status (ok, request_error, data_error); returns them."""
    if _current is not None:
        _current.rows = Rows(
            ok=recorded.get("ok", 0),
            request_error=recorded.get("request_error", 0),
            data_error=recorded.get("data_error", 0),
        )
    return recorded


def smoke_stop_line(stop: Exception) -> str:
    """The `error:` line of a smoke stop (data.reasoning.SmokeStop: reasoning or format), noted as one."""
    if _current is not None:
        _current.smoke_stop = True
    return f"error: {stop}"


def _exit_of(exc: BaseException, refusals: tuple[type[Exception], ...]) -> tuple[int, str | None]:
    """The exit code an exception leaving evaluate ends in (cli.main.run_command), and its error line."""
    if isinstance(exc, SystemExit):
        code = exc.code
        return (code if isinstance(code, int) else ExitCode.NOT_VERIFIED if code else ExitCode.OK), None
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED, None
    if isinstance(exc, refusals):  # the cli's one-line user errors (cli.base.user_errors)
        return ExitCode.USAGE, f"error: {redactor_from_env()(str(exc))}".splitlines()[0]
    return ExitCode.NOT_VERIFIED, None  # a crash: its traceback is in the log


@contextlib.contextmanager
def recording(
    refusals: tuple[type[Exception], ...] = (), env: Mapping[str, str] = os.environ
) -> Iterator[Ending]:
    """Note how the block ends; write it as the Outcome the launch contract asks for, if one does.
    `refusals`: the exceptions the caller turns into a one-line error and exit 2."""
    global _current
    contract = read_contract(env)
    ending = _current = Ending()
    catcher, root = _LastError(ending), logging.getLogger()
    # say() lines, and library loggers' (propagated to root); a root with no handler of its own keeps
    # printing through logging's last resort as it did, which a handler added to it would silence
    added: list[tuple[logging.Logger, logging.Handler]] = (
        [(MESSAGES, catcher), (root, catcher)] if contract else []
    )
    if added and not root.handlers and logging.lastResort is not None:
        added.append((root, logging.lastResort))
    for logger, handler in added:
        logger.addHandler(handler)
    try:
        yield ending
    except BaseException as exc:
        ending.code, line = _exit_of(exc, refusals)
        ending.cause = line or ending.cause
        raise
    finally:
        _current = None
        for logger, handler in added:
            logger.removeHandler(handler)
        if contract is not None:
            with contextlib.suppress(OSError):  # a folder gone: the unit goes by the exit code
                write_atomic(Path(contract.outcome), encode_outcome(ending.outcome()))
