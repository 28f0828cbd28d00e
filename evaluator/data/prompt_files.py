"""The benchmarks' prompt files: shipped inside the package (evaluator/data/prompts/, package data read
with importlib.resources), or from the folder named by DOCCOUNT_PROMPTS_DIR (the container image, a
`doccount reproduce` of an archive).

The repository's top-level prompts/ is where people read and edit them; tests/test_wheel.py fails when
the package copy differs from it (copy them over after an edit).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from evaluator.core.errors import UserError

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; the package supports 3.10
    from importlib.abc import Traversable

PROMPTS_ENV = "DOCCOUNT_PROMPTS_DIR"


class PromptError(UserError):
    """A prompt file is missing or unreadable (a one-line message for the user)."""


def prompts_dir() -> Traversable:
    """DOCCOUNT_PROMPTS_DIR when set, else the prompts shipped in the package."""
    env = os.environ.get(PROMPTS_ENV)
    if env:
        return Path(env)
    return resources.files("evaluator.data").joinpath("prompts")


def prompt_bytes(name: str) -> bytes:
    folder = prompts_dir()
    try:
        return folder.joinpath(name).read_bytes()
    except OSError as exc:
        where = f"{PROMPTS_ENV}={folder}" if os.environ.get(PROMPTS_ENV) else str(folder)
        raise PromptError(
            f"prompt file {name} cannot be read from {where} ({exc.strerror or type(exc).__name__}); "
            f"point {PROMPTS_ENV} at a folder that has it, or reinstall the package"
        ) from None


def prompt_text(name: str) -> str:
    return prompt_bytes(name).decode("utf-8")
