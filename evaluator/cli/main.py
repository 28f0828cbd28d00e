"""Command line: `doccount <command>`, plus the `doccount-evaluate` / `doccount-score` scripts."""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from evaluator.cli.archive import archive_cmd, reproduce_cmd, verify_cmd
from evaluator.cli.base import (
    GroupedCommand,
    install_terminal_guard,
    one_run_folder,
    run_folder_arguments,
    show_output,
    show_warnings,
)
from evaluator.cli.batch import add_batch_commands
from evaluator.cli.demo import demo_cmd, serve_reference_cmd
from evaluator.cli.sweep import leaderboard_cmd, sweep_command
from evaluator.core.errors import ExitCode, UserError
from evaluator.core.jsonl import printable
from evaluator.core.secrets import redactor_from_env
from evaluator.data.benchmarks import DEFAULT_BENCHMARK, REGISTRY, get_benchmark
from evaluator.evaluation.options import OPTION_GROUPS, EvaluateOptions, evaluate_options


class Standalone(click.Command):
    """A command that is run on its own (a console script, click's CliRunner in a test, a script calling
    `.main()`) ends as the contract says, through `invoke`: exit code, one `error:` line, no traceback."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        sys.exit(int(invoke(self, prog_name, args)))


class Commands(Standalone, click.Group):
    """The `doccount` group."""


class StandaloneGrouped(Standalone, GroupedCommand):
    """`doccount-evaluate`: the evaluate options under headings, run on its own."""


def invoke(command: click.Command, prog_name: str | None, args: Sequence[str] | None = None) -> int:
    """Run a command with the contract's error style, without exiting: its exit code. The one place a
    UserError becomes its `error:` line (the key redacted) and exit code; a usage error is one line with no
    usage dump; nothing prints a traceback but a bug. A command returns its ExitCode (None: OK)."""
    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except UserError as exc:
        click.echo(f"error: {redactor_from_env()(str(exc))}", err=True)
        return exc.exit_code
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        return ExitCode.USAGE
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (KeyboardInterrupt, click.Abort):
        click.echo("interrupted", err=True)
        return ExitCode.INTERRUPTED
    except SystemExit as exc:
        if isinstance(exc.code, str):
            click.echo(exc.code, err=True)
            return ExitCode.NOT_VERIFIED
        return exc.code or ExitCode.OK
    # click returns 0 for --help and --version (standalone_mode=False), else what the callback returned
    return code if isinstance(code, int) else ExitCode.OK


@click.command("evaluate", cls=StandaloneGrouped, groups=OPTION_GROUPS)
@evaluate_options
def evaluate_cmd(**opts: Any) -> ExitCode:
    """Evaluate a model on a counting benchmark; resumable; writes runs/<name>/."""
    from evaluator.evaluation.ending import recording
    from evaluator.evaluation.evaluate import evaluate

    with recording() as ending:  # a sweep's unit reads how it ended from the outcome file its contract names
        ending.code = evaluate(EvaluateOptions(**opts))
    return ExitCode(ending.code)


def _check_endpoint(**opts: Any) -> ExitCode:
    from evaluator.evaluation.evaluate import evaluate

    return ExitCode(evaluate(EvaluateOptions(**opts), check_only=True))


check_endpoint_cmd = GroupedCommand(
    "check-endpoint",
    groups=OPTION_GROUPS,
    params=list(evaluate_cmd.params),  # the evaluate options, so that a run's command line can be checked
    callback=_check_endpoint,
    help="Send one real row with the evaluate options and show what came back (status, visible text, "
    "reasoning field, parsed answer, usage, finish reason). Nothing is written.",
)


@click.command("score", cls=Standalone)
@run_folder_arguments("The run folder to score (or give it as the argument).")
@click.option("--report/--no-report", default=True, show_default=True, help="Also write scores/report.html.")
@click.option(
    "--report-images/--no-report-images", default=True, show_default=True, help="Thumbnails in the report."
)
def score_cmd(run_dir: Path | None, run_root: Path | None, report: bool, report_images: bool) -> None:
    """Score a run folder over its full question set; writes responses.jsonl and scores/."""
    from evaluator.report.run_page import score_and_report  # here: numpy is not needed to start every command

    run_root = one_run_folder(run_dir, run_root)
    result = score_and_report(run_root, lambda line: click.echo(line, err=True), report, report_images)
    click.echo(printable(result.markdown))


@click.group(cls=Commands)
@click.version_option(package_name="doccount-eval")
def main() -> None:
    """Reproducible semantic-counting evaluation (DocCount, CountQA)."""
    show_warnings()
    show_output()


main.add_command(evaluate_cmd)
main.add_command(check_endpoint_cmd)
main.add_command(score_cmd)
add_batch_commands(main, list(evaluate_cmd.params))
main.add_command(sweep_command(evaluate_cmd))
main.add_command(leaderboard_cmd)


@click.command("compare")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write the comparison (leaderboard, paired statistics) as JSON to this file.",
)
@click.option(
    "--intersect",
    is_flag=True,
    help="Compare on the questions all runs share instead of refusing different sets.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Two runs only: also write a side-by-side HTML page, the questions they disagree on first.",
)
@click.option(
    "--data-files", default=None, help="Parquet glob for the page's thumbnails (default: as recorded)."
)
def compare_cmd(
    run_dirs: tuple[Path, ...],
    output: Path | None,
    intersect: bool,
    html_path: Path | None,
    data_files: str | None,
) -> None:
    """Compare run folders over the same questions: leaderboard with 95% intervals; for two runs the
    paired table, a paired-bootstrap interval of the difference and the exact McNemar p-value."""
    from evaluator.scoring.compare import compare_json, compare_runs

    result = compare_runs(list(run_dirs), intersect=intersect)
    if output is not None:
        try:
            output.write_bytes(compare_json(result.data))
        except OSError as exc:
            raise UserError(f"cannot write {output} ({exc.strerror})") from None
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo(printable(result.markdown))
    if html_path is not None:
        if len(run_dirs) != 2:
            raise UserError("--html compares exactly two runs side by side; pass two run folders")
        from evaluator.report import write_compare_report

        page = write_compare_report(run_dirs[0], run_dirs[1], html_path, data_files=data_files)
        click.echo(f"side-by-side page: {page}", err=True)


main.add_command(compare_cmd)


def run_command(command: click.Command, prog_name: str) -> None:
    """The console scripts: the terminal guard (cli.base), then the command, then an ordinary exit (the
    temporary folders and files a command opened are closed on the way out, atexit handlers run)."""
    install_terminal_guard()
    show_output()
    try:
        command.main(prog_name=prog_name)  # always ends in SystemExit (Standalone.main)
    finally:
        # every `with` block has ended: what the interpreter's teardown then does is free the imported
        # modules' objects, about 0.5 s of CPU of garbage collection with openai, numpy, pyarrow and
        # matplotlib loaded; frozen objects are left to the operating system instead
        gc.freeze()


def entry() -> None:
    run_command(main, "doccount")


def evaluate_main() -> None:
    run_command(evaluate_cmd, "doccount-evaluate")


def score_main() -> None:
    run_command(score_cmd, "doccount-score")


@click.command("report")
@run_folder_arguments("The run folder to report on (or give it as the argument).")
@click.option(
    "--data-files",
    default=None,
    help="Parquet glob for the thumbnails (default: the data recorded in run_config.json).",
)
@click.option("--no-images", is_flag=True, help="Write the report without thumbnails (a small file).")
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="HTML file (default <run-root>/scores/report.html).",
)
def report_cmd(
    run_dir: Path | None, run_root: Path | None, data_files: str | None, no_images: bool, output: Path | None
) -> None:
    """Write the self-contained HTML report of a run: one row per question, filters, thumbnails."""
    from evaluator.report import write_report

    run_root = one_run_folder(run_dir, run_root)
    path = write_report(run_root, data_files=data_files, images=not no_images, output=output)
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


main.add_command(report_cmd)


main.add_command(archive_cmd)
main.add_command(verify_cmd)
main.add_command(reproduce_cmd)


@click.command("data")
@click.option(
    "--benchmark", type=click.Choice(sorted(REGISTRY)), default=DEFAULT_BENCHMARK, show_default=True
)
@click.option("--dataset", default=None, help="Hub dataset id (default: the benchmark's).")
@click.option("--revision", default=None, help="Branch, tag or commit to fetch (default: main).")
@click.option("--local-dir", default=None, help="Copy the files into this folder instead of the HF cache.")
def data_cmd(benchmark: str, dataset: str | None, revision: str | None, local_dir: str | None) -> None:
    """Fetch a pinned revision of the benchmark's parquet files once (HF cache); print its commit."""
    from evaluator.data.hub import fetch, fetch_report

    bench = get_benchmark(benchmark)
    snap = fetch(bench, dataset, revision, local_dir=local_dir)
    click.echo("\n".join(fetch_report(snap, bench, local_dir)))


@click.command("model")
@click.argument("model_id")
@click.option("--revision", default=None, help="Branch, tag or commit to fetch (default: main).")
@click.option("--include", multiple=True, help="Fetch only files matching this glob (repeatable).")
@click.option(
    "--exclude", multiple=True, help="Skip files matching this glob (repeatable), e.g. 'original/*'."
)
def model_cmd(
    model_id: str, revision: str | None, include: tuple[str, ...], exclude: tuple[str, ...]
) -> None:
    """Fetch a model's weights at one revision into the HF cache (for vLLM); print the commit."""
    from evaluator.data.hub import fetch_model, model_report

    snap = fetch_model(model_id, revision, list(include) or None, list(exclude) or None)
    click.echo("\n".join(model_report(snap)))


main.add_command(demo_cmd)
main.add_command(serve_reference_cmd)
main.add_command(data_cmd)
main.add_command(model_cmd)


# `doccount --help`'s one line per command: click cuts a longer docstring's first sentence with "...", so
# each command has a summary that fits an 80-column terminal beside the longest name (under 57 chars).
SHORT_HELP = {
    "archive": "Pack a scored run or sweep into one archive.",
    "batch": "Batch files for vllm run-batch: prepare, collect, cancel.",
    "check-endpoint": "Send one real row and show what came back.",
    "compare": "Compare runs: intervals, paired difference, McNemar.",
    "data": "Fetch a pinned revision of a benchmark (HF cache).",
    "demo": "The whole pipeline on a CPU with a reference model.",
    "evaluate": "Evaluate a model on a benchmark; resumable.",
    "leaderboard": "Rank a sweep's runs, or any run folders.",
    "model": "Fetch a model's weights at a pinned revision.",
    "report": "Write a run's HTML report (scores/report.html).",
    "reproduce": "Re-run an archived evaluation and compare.",
    "score": "Score a run folder: responses.jsonl and scores/.",
    "serve-reference": "Serve the CPU reference model (OpenAI-compatible).",
    "sweep": "Evaluate every run of a sweep file, then rank them.",
    "verify": "Check an archive offline: checksums and a re-score.",
}
BATCH_SHORT_HELP = {
    "prepare": "Write the input files of the rows not yet done.",
    "collect": "Read output files in OpenAI's batch format.",
    "cancel": "Cancel the batches a --batch run left running.",
}
for _group, _texts in ((main, SHORT_HELP), (main.commands["batch"], BATCH_SHORT_HELP)):
    for _name, _text in _texts.items():
        _group.commands[_name].short_help = _text  # type: ignore[attr-defined]


if __name__ == "__main__":
    entry()
