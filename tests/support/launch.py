"""`run`: subprocess.run for the tests' command lines, with the evaluator's own (`python -m evaluator.cli
...`, EVALUATE, SCORE) run in this process instead (support/inprocess.py): most of a fresh interpreter's
start-up is importing openai, numpy and matplotlib, about a second of CPU each time, hundreds of times a
suite.

A command that needs a process of its own goes to subprocess.run unchanged: another program, interpreter
options, an environment that changes how Python or a library starts (read once, when imported), stdin
given, output not captured, or a child that watches its parent. Tests whose point is a process boundary
(signals, killed children, what reaches a child's environment or the process list, the console scripts,
locks between two processes) call subprocess.run or support.cli.run_cli_process themselves.
tests/test_launch.py checks that both ways give the same exit status, stdout and stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from support import inprocess

# variables that change how the interpreter starts or decodes, and those a library the evaluator imports
# reads once, when imported (huggingface_hub's HF_*; openai's; numpy's OpenBLAS; matplotlib's config and
# cache folders): a command whose environment sets them differently from this process gets a process
EXCLUSIVE_VARS = ("PYTHON", "LANG", "LC_", "HF_", "HUGGING", "OPENAI_", "AZURE_OPENAI", "OPENBLAS", "OMP_",
                  "MPL", "HOME", "XDG_", "DOCCOUNT_PARENT_PID")  # fmt: skip


def _exclusive(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(EXCLUSIVE_VARS)}


def cli_command(cmd: Sequence[Any]) -> tuple[str, list[str]] | None:
    """(entry point, arguments) when `cmd` is one of the evaluator's command lines run by this interpreter."""
    args = [str(a) for a in cmd]
    if len(args) < 3 or args[0] != sys.executable:
        return None
    if args[1:3] == ["-m", "evaluator.cli"] or args[1:3] == ["-m", "evaluator"]:
        return "doccount", args[3:]
    if args[1] == "-c":
        for name in inprocess.ENTRY_POINTS:
            if args[2] == f"from evaluator.cli import {name}; {name}()":
                return name, args[3:]
    return None


def run(
    cmd: Sequence[Any],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float | None = None,
    text: bool = False,
    capture_output: bool = False,
    input: bytes | str | None = None,  # noqa: A002 - subprocess.run's name
    stdin: int | None = None,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, ...); the evaluator's own command lines in this process where they can be."""
    run_env = dict(os.environ if env is None else env)
    known = cli_command(cmd) if capture_output and not kwargs and input is None and stdin is None else None
    if known is None or _exclusive(run_env) != _exclusive(dict(os.environ)):
        return subprocess.run(
            cmd, env=env, cwd=cwd, timeout=timeout, text=text, capture_output=capture_output,
            input=input, stdin=stdin, **kwargs,
        )  # fmt: skip
    done = inprocess.run(known[0], known[1], env=run_env, cwd=Path(cwd or os.getcwd()))
    if text:
        return done
    return subprocess.CompletedProcess(cmd, done.returncode, done.stdout.encode(), done.stderr.encode())


def in_this_process(cmd: Sequence[Any], env: dict[str, str]) -> bool:
    """Whether run(cmd, env=env, capture_output=True) runs the command in this process (the rule of `run`)."""
    return cli_command(cmd) is not None and _exclusive(dict(env)) == _exclusive(dict(os.environ))
