"""What every command shares: the one-line user error (exit code 2, the API key redacted)."""

from __future__ import annotations

import os
from typing import Any

import click

from evaluator.core.secrets import Redactor


class UserError(click.ClickException):
    """One line on stderr, exit code 2, no traceback."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        # A key pasted into the wrong place (e.g. --base-url) must not be echoed back into logs.
        click.echo(f"error: {Redactor(os.environ.get('MODEL_API_KEY'))(self.message)}", err=True)
