"""The sweep commands (`doccount sweep`, `doccount leaderboard`): thin adapters over
evaluator.study.sweep and evaluator.report.leaderboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from evaluator.core.errors import ExitCode, UserError
from evaluator.core.text import see_docs

SMOKE_OPTION = click.option(
    "--smoke",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="A dress rehearsal: every run answers its first N questions in its own folder (the full run "
    "resumes from them), servers started and stopped as in the sweep; then one table (state, reasoning, "
    "parsed, latency, tokens/s, the full run's projected time, the stop line). Exit 0 only if every run "
    "would count.",
)


def sweep_command(evaluate_cmd: click.Command) -> click.Command:
    """`doccount sweep`, its file's option keys taken from `evaluate_cmd`'s own parameters (so every
    evaluate option, `--batch` included, is a sweep key with no second list to keep)."""

    @click.command(
        "sweep",
        help="Evaluate every run of a sweep file (TOML), resumably, then write its leaderboard"
        f"{see_docs('sweeps.md')}; runs with `serve = {{...}}` get their own server{see_docs('serving.md')}.",
    )
    @click.argument("sweep_file", type=click.Path(path_type=Path, dir_okay=False))
    @click.option(
        "--run-root",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path("runs"),
        show_default=True,
        help="Runs go to <run-root>/<sweep name>/<run name>.",
    )
    @click.option("--only", multiple=True, metavar="NAME", help="Run only this run of the file (repeatable).")
    @click.option(
        "--parallel",
        type=click.IntRange(1, 64),
        default=None,
        help="Runs evaluated at once [default: 4, or the GPU pool's size when the sweep serves models on more].",
    )
    @click.option(
        "--plan",
        is_flag=True,
        help="Print each run's endpoint or server, its GPUs and the order servers start; start nothing.",
    )
    @click.option(
        "--detach",
        is_flag=True,
        help='executor = "slurm": submit the runs\' jobs, print the queue and exit (the jobs go on).',
    )
    @SMOKE_OPTION
    @click.option(
        "--status",
        is_flag=True,
        help="Print each run's state (a Slurm job's place in the queue, rows recorded); submit nothing.",
    )
    def sweep_cmd(**options: Any) -> ExitCode:
        # the help text is the command's `help` above: docs/ is named only where it exists
        return ExitCode(_run_file(evaluate_cmd, **options))

    return sweep_cmd


def _run_file(
    evaluate_cmd: click.Command,
    sweep_file: Path,
    run_root: Path,
    only: tuple[str, ...],
    parallel: int | None,
    plan: bool,
    detach: bool,
    status: bool,
    smoke: int | None,
) -> int:
    """The sweep file loaded and run (or planned, or its status shown), by the command's options (given by
    name); its exit code. A bad file, run folder or executor setting is a UserError."""
    from evaluator.study.sweep import plan_sweep, run_sweep, sweep_status
    from evaluator.study.sweep_file import load_sweep, option_specs

    specs = option_specs(evaluate_cmd.params)
    sweep = load_sweep(sweep_file, specs)
    if status:
        return sweep_status(sweep, specs, run_root, list(only))
    if plan:
        return plan_sweep(sweep, specs, run_root, list(only), parallel)
    return run_sweep(sweep, specs, run_root, list(only), parallel, detach=detach, smoke=smoke)


@click.command("leaderboard")
@click.argument(
    "dirs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, file_okay=False)
)
@click.option(
    "--output",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for index.html, leaderboard.md, leaderboard.json (default: <sweep folder>/leaderboard).",
)
def leaderboard_cmd(dirs: tuple[Path, ...], output: Path | None) -> None:
    """Rank a sweep folder's runs, or any run folders: index.html, leaderboard.md, leaderboard.json."""
    from evaluator.report.leaderboard import write_leaderboard
    from evaluator.scoring.base import BOARD_PAGE, LEADERBOARD_MD

    try:
        folder = write_leaderboard(list(dirs), output)
    except OSError as exc:
        raise UserError(str(exc)) from None
    click.echo((folder / LEADERBOARD_MD).read_text(encoding="utf-8"))
    click.echo(f"leaderboard: {folder / BOARD_PAGE}", err=True)
