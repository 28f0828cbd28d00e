"""A command of the evaluator run in this process, as a test reads a finished process: exit code, stdout,
stderr (subprocess.CompletedProcess, text mode). What `python -m evaluator.cli` does before its command
runs is done here too (the terminal guard, the library's output handlers), in the environment, working
directory, argv and warning settings the process would have had, all restored afterwards.

Output is captured at the file descriptors, not only at sys.stdout and sys.stderr: a child the command
starts (a reproduce's per-run verifier, a plot worker) inherits fds 1 and 2 and writes there, into the
same stream as the command, in the order written, as it would into a process's pipes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import click

import evaluator.cli.base as cli_base
from evaluator.cli.base import show_output
from evaluator.cli.main import evaluate_cmd, invoke, main, score_cmd

# the entry points by the names tests start them by (`-c "from evaluator.cli import NAME; NAME()"`): the
# command, the program name click gives it, and whether it is a console script (run_command: the terminal
# guard first); `main()` called bare names itself after sys.argv[0], which is "-c" there
ENTRY_POINTS: dict[str, tuple[click.Command, str, bool]] = {
    "doccount": (main, "doccount", True),
    "entry": (main, "doccount", True),
    "evaluate_main": (evaluate_cmd, "doccount-evaluate", True),
    "score_main": (score_cmd, "doccount-score", True),
    "main": (main, "-c", False),
}
ARGV0 = str(Path(cli_base.__file__).with_name("__main__.py"))  # what runpy puts in sys.argv[0] for -m


@contextlib.contextmanager
def process_state(env: dict[str, str], cwd: Path, argv: list[str]) -> Iterator[None]:
    """The environment (exactly `env`), working directory, argv and warning settings of a fresh
    interpreter, restored on the way out."""
    old_env, old_cwd, old_argv = dict(os.environ), os.getcwd(), sys.argv
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = argv
    try:
        with (
            warnings.catch_warnings()
        ):  # restores the filters and warnings.showwarning (install_terminal_guard sets it)
            warnings.resetwarnings()  # Python's defaults, not pytest's (which show every DeprecationWarning)
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            yield
    finally:
        os.chdir(old_cwd)
        sys.argv = old_argv
        os.environ.clear()
        os.environ.update(old_env)


def _decode(data: bytes) -> str:
    # as subprocess.run(text=True) reads a pipe: universal newlines (a progress line's \r is a newline)
    return data.decode("utf-8", "backslashreplace").replace("\r\n", "\n").replace("\r", "\n")


class ThreadRouted:
    """sys.stdout or sys.stderr during a call: what the threads that ran before it write (a test's loopback
    server, its aiohttp log lines) goes where it went before; the rest (the command, its threads) is the
    command's output. In a real run those servers are other processes, their lines never in the command's."""

    def __init__(self, mine: TextIO, theirs: TextIO, foreign: set[int]) -> None:
        self._mine, self._theirs, self._foreign = mine, theirs, foreign

    def write(self, text: str) -> int:
        return (self._theirs if threading.get_ident() in self._foreign else self._mine).write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mine, name)


@contextlib.contextmanager
def captured_output(texts: list[str]) -> Iterator[None]:
    """fds 1 and 2, and sys.stdout and sys.stderr over them, on two files for the block; their texts are
    appended to `texts` (stdout, stderr) at its end, and the streams and fds restored."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    old_streams, saved = (sys.stdout, sys.stderr), (os.dup(1), os.dup(2))
    opened: list[Any] = []
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            # a process's streams: strict stdout, stderr with backslashreplace; written through, so that what
            # a child writes to the same fd stays in order with them
            new_out = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - flushed below
            new_err = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
            opened += [new_out, new_err]
            for stream in opened:
                stream.reconfigure(write_through=True)
            # the fds are this call's now; what other threads write goes to the streams they wrote to
            # before (pytest's capture, a file object of its own), not into the command's output
            foreign = {
                t.ident for t in threading.enumerate() if t is not threading.current_thread() and t.ident
            }
            sys.stdout = ThreadRouted(new_out, old_streams[0], foreign)
            sys.stderr = ThreadRouted(new_err, old_streams[1], foreign)
            yield
        finally:
            for stream in opened:
                with contextlib.suppress(Exception):  # a command may have closed it
                    stream.flush()
            sys.stdout, sys.stderr = old_streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        for f in (out, err):
            f.seek(0)
            texts.append(_decode(f.read()))


def run(entry: str, args: list[str], *, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run one entry point with `args` in `env` (the whole environment) and `cwd`, as its process would."""
    command, prog_name, console_script = ENTRY_POINTS[entry]
    texts: list[str] = []
    with (
        captured_output(texts),
        process_state(env, cwd, [ARGV0 if entry == "doccount" else "-c", *args]),
    ):
        if console_script:
            cli_base.install_terminal_guard()  # wraps this call's streams, as run_command wraps a process's
            show_output()
        try:
            code = int(invoke(command, prog_name, args))
        except Exception:  # noqa: BLE001 - a bug: its traceback on stderr and exit 1, as the interpreter does
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess([prog_name, *args], code, texts[0], texts[1])
