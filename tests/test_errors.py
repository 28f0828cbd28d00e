"""evaluator/core/errors.py: one base for the errors a user can fix, caught in one place (cli.main.invoke),
which a command run in-process (click's CliRunner) meets the same way a console script does."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from evaluator.archive.base import ArchiveError
from evaluator.cli.main import invoke, main
from evaluator.core.errors import EvaluatorError, ExitCode, NotFinished, UserError
from evaluator.data.parquet import DataError
from evaluator.request.endpoint import EndpointError
from evaluator.runfolder.runconfig import RunConfigError
from evaluator.scoring import ScoreError
from evaluator.study.sweep_file import SweepFileError

PACKAGE = Path(__file__).resolve().parents[1] / "evaluator"
BUILTIN_EXCEPTIONS = {
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
}


def classes_on_builtins() -> list[str]:
    """The classes in evaluator/ with a built-in exception among their bases."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id in BUILTIN_EXCEPTIONS for b in node.bases
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    return found


def test_at_most_four_exception_classes_derive_from_built_ins() -> None:
    found = classes_on_builtins()
    assert "core/errors.py:EvaluatorError" in found
    assert len(found) <= 4, found


def test_no_hand_kept_list_of_user_errors() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    assert "USER_ERRORS" not in text and "def user_errors" not in text and "os._exit" not in text


@pytest.mark.parametrize(
    "cls", [ArchiveError, DataError, EndpointError, RunConfigError, ScoreError, SweepFileError]
)
def test_the_packages_refusals_are_user_errors(cls: type[Exception]) -> None:
    assert issubclass(cls, UserError) and issubclass(cls, EvaluatorError)


def test_a_user_error_in_process_is_one_redacted_line_and_its_exit_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-errors-" + "k" * 24
    monkeypatch.setenv("MODEL_API_KEY", key)

    @click.command("boom")
    @click.argument("kind")
    def boom(kind: str) -> ExitCode:
        if kind == "user":
            raise UserError(f"bad --base-url http://{key}@h; pass the key in MODEL_API_KEY")
        if kind == "stop":
            raise NotFinished("nothing is listening at http://127.0.0.1:9/v1; start the server and re-run")
        return ExitCode.INCOMPLETE

    runner = CliRunner()
    with runner.isolation() as (_, err, _both):
        assert invoke(boom, "boom", ["user"]) == ExitCode.USAGE
        assert invoke(boom, "boom", ["stop"]) == ExitCode.INCOMPLETE
        assert invoke(boom, "boom", ["other"]) == ExitCode.INCOMPLETE
    lines = err.getvalue().decode().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), lines
    assert key not in lines[0] and "pass the key in MODEL_API_KEY" in lines[0]


def test_the_doccount_group_in_click_s_runner_ends_as_the_console_script_does(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["verify", str(tmp_path / "missing.tar.gz")])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr == f"error: {tmp_path / 'missing.tar.gz'} does not exist\n"
    result = CliRunner().invoke(main, ["verify", "--bogus"])
    assert result.exit_code == ExitCode.USAGE
    assert (
        result.stderr.startswith("error: No such option '--bogus'") and len(result.stderr.splitlines()) == 1
    )
