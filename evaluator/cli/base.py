"""What every command shares: option help in groups, the streams the library's messages and answers go to
(evaluator.core.output), the run folder argument. The one-line user error is evaluator.core.errors.UserError,
caught in cli.main.invoke."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from evaluator.core.errors import UserError as UserError  # re-exported: what a command raises
from evaluator.core.output import ANSWERS, MESSAGES


class GroupedCommand(click.Command):
    """A command whose --help lists its options under headings (click has no option groups of its own).

    `groups`: (heading, param names) in order; options in no group come last under "Other options".
    """

    def __init__(self, *args: Any, groups: list[tuple[str, list[str]]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.groups = groups or []

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
        placed: set[str | None] = set()
        for heading, names in self.groups:
            rows = [r for n in names if (r := records.get(n))]
            placed.update(names)
            if rows:
                with formatter.section(heading):
                    formatter.write_dl(rows)
        rest = [r for n, r in records.items() if n not in placed and r]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)


class ConsoleLines(logging.Handler):
    """Each log record's message as one line on sys.stdout or sys.stderr, looked up when it is written (so
    that the terminal guard, click's test runner and pytest, which replace the streams, see it), flushed."""

    def __init__(self, stream: str) -> None:
        super().__init__(logging.INFO)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            out = getattr(sys, self.stream)
            out.write(record.getMessage() + "\n")
            out.flush()
        except Exception:  # noqa: BLE001 - logging's rule: a failed write never raises into the caller
            self.handleError(record)


class CurrentStderr(logging.StreamHandler):
    """logging.basicConfig's handler (`%(message)s`), writing to sys.stderr as it is when a record comes: a
    handler bound to the stream of the first command would write to a closed one in a process that runs
    commands twice (a test, a script calling `.main()`)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:  # StreamHandler.__init__ sets it; sys.stderr is looked up instead
        pass


def show_output() -> None:
    """Show the library's messages on stderr and its answers on stdout (idempotent)."""
    for logger, stream in ((MESSAGES, "stderr"), (ANSWERS, "stdout")):
        if not any(isinstance(h, ConsoleLines) for h in logger.handlers):
            logger.addHandler(ConsoleLines(stream))
        logger.setLevel(logging.INFO)
        logger.propagate = False


def show_warnings() -> None:
    """Other libraries' warnings on stderr, one line each (idempotent; what logging.basicConfig did once)."""
    root = logging.getLogger()
    if not any(isinstance(h, CurrentStderr) for h in root.handlers):
        root.addHandler(CurrentStderr())


def run_folder_arguments(help_text: str) -> Any:
    """The run folder of a one-folder command (`score`, `report`, `archive`): a plain argument, as
    `verify`, `compare` and `leaderboard` take theirs, or `--run-root` (the DocCount README's form)."""

    def decorate(f: Any) -> Any:
        f = click.option("--run-root", type=click.Path(path_type=Path), default=None, help=help_text)(f)
        return click.argument("run_dir", required=False, type=click.Path(path_type=Path))(f)

    return decorate


def one_run_folder(run_dir: Path | None, run_root: Path | None) -> Path:
    """The folder given either way; a usage error when none or two different ones are given."""
    ctx = click.get_current_context()
    if run_dir is not None and run_root is not None and run_dir != run_root:
        raise click.UsageError(
            f"two run folders given ({run_dir} and --run-root {run_root}); give one", ctx=ctx
        )
    folder = run_dir or run_root
    if folder is None:
        raise click.UsageError(
            f"give the run folder: {ctx.command_path} runs/NAME (or --run-root runs/NAME)", ctx=ctx
        )
    return folder


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the block as Ctrl-C does (KeyboardInterrupt: exit 130), so that the `with` blocks inside
    it remove what the command made (an archive's spill folder); Python's default for SIGTERM is to die
    on the spot. Outside the main thread (where no handler can be set) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
