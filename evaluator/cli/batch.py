"""`doccount batch prepare | collect | cancel`: OpenAI-format batch files around a run folder (docs/batch.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from evaluator.core.errors import ExitCode


@click.group("batch")
def batch_group() -> None:
    """OpenAI-format batch files: prepare them for `vllm run-batch`, collect its output, cancel a run's
    batches (`doccount-evaluate --batch` sends them through a provider's Batch API itself)."""


def _prepare(**opts: Any) -> ExitCode:
    from evaluator.evaluation.evaluate import evaluate
    from evaluator.evaluation.options import EvaluateOptions

    return ExitCode(evaluate(EvaluateOptions(**opts), batch_prepare=True))


@click.command("collect")
@click.option("--run-root", type=click.Path(path_type=Path), required=True, help="The run folder.")
@click.argument("outputs", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
def collect_cmd(run_root: Path, outputs: tuple[Path, ...]) -> ExitCode:
    """Read output files in OpenAI's batch format (as OpenAI or `vllm run-batch` write them) into records."""
    from evaluator.evaluation.batch_offline import collect_outputs

    return ExitCode(collect_outputs(run_root, list(outputs)))


@click.command("cancel")
@click.option("--run-root", type=click.Path(path_type=Path), required=True, help="The run folder.")
def cancel_cmd(run_root: Path) -> ExitCode:
    """Cancel the batches a `--batch` run left running (the key from MODEL_API_KEY)."""
    from evaluator.evaluation.batch_offline import cancel_batches

    return ExitCode(cancel_batches(run_root))


def add_batch_commands(group: click.Group, evaluate_params: list[click.Parameter]) -> None:
    prepare = click.Command(
        "prepare",
        params=list(evaluate_params),  # every evaluate option: the run it prepares is that evaluate run
        callback=_prepare,
        help="Write the input JSONL files (under RUN/batch/) for the rows not yet done, with the evaluate "
        "options; print each file's path on its own line. Nothing is sent.",
    )
    batch_group.add_command(prepare)
    batch_group.add_command(collect_cmd)
    batch_group.add_command(cancel_cmd)
    group.add_command(batch_group)
