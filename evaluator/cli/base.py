"""What every command shares: option help in groups, the streams the library's messages and answers go to
(evaluator.core.output), the run folder argument, and the terminal guard (`install_terminal_guard`): no
escape sequence or control character a server sent (ids, statuses, error texts, a reply) reaches the
terminal through any print, log line or traceback (core.boundary.terminal_text), and a library's warning
is shown by its category and origin only, never its text (it may quote a server's key). The one-line user
error is evaluator.core.errors.UserError, caught in cli.main.invoke.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import click

from evaluator.core.boundary import terminal_text
from evaluator.core.errors import UserError as UserError  # re-exported: what a command raises
from evaluator.core.output import ANSWERS, MESSAGES


class GroupedCommand(click.Command):
    """A command whose --help lists its options under `groups`, (heading, param names), in order; the rest
    last under "Other options" (click has no option groups)."""

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
    """SIGTERM ends the block as Ctrl-C does (exit 130), so that the `with` blocks inside remove what the
    command made (Python's default is to die on the spot); outside the main thread it runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


KEEP = "\n\t\r"


class TerminalGuard:
    """A text stream that writes through `terminal_text`; every other attribute is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes with b"" to tell text streams from binary ones
            raise TypeError("TerminalGuard writes text")
        self._stream.write(terminal_text(text, KEEP))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def show_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, *_: Any, **__: Any
) -> None:
    """warnings.showwarning: the category and where it came from; the text may quote what a server sent."""
    sys.stderr.write(
        f"warning: {category.__name__} from {filename}:{lineno} (its text is not shown: a library's warning "
        "may quote what a server sent)\n"
    )


def install_terminal_guard() -> None:
    """Wrap stdout and stderr once; route warnings through show_warning."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, TerminalGuard):
            setattr(sys, name, TerminalGuard(stream))
    warnings.showwarning = show_warning
