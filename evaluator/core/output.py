"""How library code reports to a person: two loggers, never a print (only cli/ and demo/ write to the streams).

- `say(text)`: progress, notes, warnings and errors, one line each (logger `doccount`);
- `answer(text)`: what a command answers, its result (a verdict, a table, file names) (logger
  `doccount.answer`, a child of `doccount`).

Both log at INFO, below Python's default WARNING, so a program that has not attached a handler (a notebook,
a test, another tool using the library) sees nothing. The command line attaches two
(evaluator.cli.base.show_output): `say` lines go to stderr and `answer` lines to stdout, each exactly as
given. To see them elsewhere: `logging.getLogger("doccount").setLevel(logging.INFO)` plus a handler.
"""

from __future__ import annotations

import logging

MESSAGES = logging.getLogger("doccount")
ANSWERS = logging.getLogger("doccount.answer")


def say(text: str) -> None:
    """A progress line, note, warning or error for the person running the command (stderr on the cli)."""
    MESSAGES.info("%s", text)


def answer(text: str) -> None:
    """A line of the command's result (stdout on the cli)."""
    ANSWERS.info("%s", text)
