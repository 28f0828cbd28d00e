"""The archive commands (`doccount archive`, `verify`, `reproduce`): thin adapters over evaluator.archive."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evaluator.cli.base import one_run_folder, run_folder_arguments, sigterm_as_interrupt
from evaluator.core.errors import ExitCode, UserError
from evaluator.core.secrets import api_key_from_env

if TYPE_CHECKING:
    from evaluator.archive.opened import OpenedArchive


@click.command("archive")
@run_folder_arguments("The scored run (or sweep) folder to archive (or give it as the argument).")
@click.option(
    "--output", type=click.Path(path_type=Path), required=True, help="The archive to write, e.g. run.tar.gz."
)
@click.option(
    "--bundle-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder with Dockerfile.eval, Dockerfile.vllm, compose.yaml, Makefile, requirements.lock "
    "(default: the checkout the evaluator runs from).",
)
def archive_cmd(run_dir: Path | None, run_root: Path | None, output: Path, bundle_root: Path | None) -> None:
    """Pack a scored run, its prompts, lock and container files into one deterministic .tar.gz."""
    from evaluator.archive import create_archive
    from evaluator.archive.sweep import create_sweep_archive, is_sweep_folder

    run_root = one_run_folder(run_dir, run_root)
    if is_sweep_folder(run_root):  # a sweep: every run's archive, the sweep file, the leaderboard
        info = create_sweep_archive(run_root, output, bundle_root=bundle_root)
    else:
        info = create_archive(run_root, output, bundle_root=bundle_root, secret=api_key_from_env())
    if info.missing:  # one line: from a wheel install every container file is missing at once
        from evaluator.archive.base import default_bundle_root

        where = bundle_root or default_bundle_root()
        click.echo(
            f"note: not archived, absent from {where}: {', '.join(sorted(info.missing))}; pass "
            "--bundle-root CHECKOUT to include them",
            err=True,
        )
    if info.left_out:  # e.g. a copy of the run's page written into scores/: it shows the data's images
        click.echo(
            f"note: not archived, not a file doccount score writes: {', '.join(info.left_out)} (an archive "
            "holds no image of the data)",
            err=True,
        )
    click.echo(f"wrote {info.output} ({len(info.entries)} entries, {info.size} bytes, sha256 {info.sha256})")


@click.command("verify")
@click.argument("archive_file", type=click.Path(path_type=Path))
def verify_cmd(archive_file: Path) -> ExitCode:
    """Check an archive offline: checksums, recorded hashes, and a re-score of the archived records."""
    import tempfile

    from evaluator.archive import read_archive, verify_archive
    from evaluator.archive.sweep import is_sweep_archive, verify_sweep

    try:  # every way out (an error, Ctrl-C, SIGTERM) removes the spill folder and the work folder
        with (
            sigterm_as_interrupt(),
            read_archive(archive_file) as archive,
            tempfile.TemporaryDirectory(prefix="doccount-verify-") as work,
        ):
            verify = verify_sweep if is_sweep_archive(archive) else verify_archive  # a sweep: every run
            result = verify(archive, Path(work))
    except UserError:
        raise
    except Exception as exc:  # last resort: what a crafted archive still reaches is a bug
        raise UserError(
            f"{archive_file} could not be verified (evaluator error {type(exc).__name__}); treat it as "
            "not verified and report the archive"
        ) from None
    for line in result.checks:
        click.echo(line)
    # the checksums inside an archive guard against damage; against a deliberate change (SHA256SUMS
    # recomputed) the anchor is the archive's own SHA-256, published with it
    with open(archive_file, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    click.echo(f"archive SHA-256 {digest}: compare it with the one published with the archive")
    if result.ok:
        click.echo(f"OK: {archive_file} verified")
        return ExitCode.OK
    for problem in result.problems:
        click.echo(f"MISMATCH {problem}")
    names = list(dict.fromkeys(p.path for p in result.problems))
    click.echo(f"FAILED: {len(names)} file(s) do not match: {', '.join(names)}")
    return ExitCode.NOT_VERIFIED


@click.command("reproduce")
@click.argument("archive_file", type=click.Path(path_type=Path))
@click.option(
    "--base-url",
    "base_url",
    multiple=True,
    metavar="URL|RUN=URL",
    help="Endpoint to re-run against (repeatable: replicas); a sweep archive: RUN=URL, per run. The key "
    "(MODEL_API_KEY; a sweep run's own variable) goes only to an endpoint named here or confirmed at a "
    "prompt. Default: MODEL_API_BASE_URL, else the recorded endpoint (with no key unless confirmed).",
)
@click.option(
    "--data-files", default=None, help="Local parquet glob with the archived data files (quote it)."
)
@click.option(
    "--run-root",
    type=click.Path(path_type=Path),
    default=None,
    help="New run folder (default runs/<name>-reproduce).",
)
@click.option("--concurrency", type=click.IntRange(1, 4096), default=None, help="Default: the recorded one.")
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.option(
    "--only", multiple=True, metavar="NAME", help="A sweep archive: re-run only this run (repeatable)."
)
def reproduce_cmd(only: tuple[str, ...], **opts: Any) -> ExitCode:
    """Re-run an archived evaluation with the same settings, data and prompts, then compare with it."""
    from evaluator.archive import read_archive

    archive_file = opts.pop("archive_file")
    try:  # read and parsed once, handed down; every way out (an error, Ctrl-C, SIGTERM) removes its spill folder
        with sigterm_as_interrupt(), read_archive(archive_file) as archive:
            return ExitCode(_reproduce(archive, list(only), **opts))
    except (UserError, click.ClickException):
        raise
    except Exception as exc:  # last resort, as verify has: what a crafted archive still reaches is a bug
        raise UserError(
            f"{archive_file} could not be reproduced (evaluator error {type(exc).__name__}); nothing more was "
            "sent; treat the archive as not verified and report it"
        ) from None


def _reproduce(archive: OpenedArchive, only: list[str], **opts: Any) -> int:
    from evaluator.archive import ArchiveError, reproduce
    from evaluator.archive.reproduce import parse_base_urls
    from evaluator.archive.sweep import is_sweep_archive

    if is_sweep_archive(archive):
        return _reproduce_sweep(archive, only, **opts)
    if only:
        raise ArchiveError("--only names runs of a sweep archive; this is the archive of one run")
    plain, per_run = parse_base_urls(opts.pop("base_url"))
    if per_run:
        raise ArchiveError(
            f"--base-url {next(iter(per_run))}=URL names a run of a sweep archive; this is the archive of "
            "one run: pass --base-url URL"
        )
    # data_files, run_root, concurrency, quiet
    return reproduce(archive, base_url=plain, confirm=_confirm(), **opts)


def _reproduce_sweep(archive: OpenedArchive, only: list[str], run_root: Path | None, **opts: Any) -> int:
    """Each (or each named) run of a sweep archive re-run by `doccount reproduce`; 0 when all finished."""
    from evaluator.archive import ArchiveError
    from evaluator.archive.reproduce import parse_base_urls
    from evaluator.archive.sweep import reproduce_sweep, run_archives, sweep_name

    runs = run_archives(archive)  # the archive's names checked before any is used in a path
    name = sweep_name(archive)
    selected = only or list(runs)
    plain, per_run = parse_base_urls(opts.pop("base_url"))
    if plain and len(selected) != 1:
        raise ArchiveError(
            "--base-url URL applies to one run: pass --base-url RUN=URL for each run (each has its own "
            "endpoint), or name the run with --only"
        )
    if plain:
        per_run.setdefault(selected[0], []).extend(plain)
    passthrough = [f for k, v in opts.items() if v for f in _flag(k, v)]
    root = run_root or Path("runs") / f"{name}-reproduce"
    results = reproduce_sweep(archive, only, root, passthrough, base_urls=per_run, confirm=_confirm())
    for run, code in results:
        click.echo(f"[reproduce] {run}: exit {code}", err=True)
    return ExitCode.OK if all(code == ExitCode.OK for _, code in results) else ExitCode.INCOMPLETE


def _confirm() -> Any:
    """The prompt that lets a key go to an endpoint the archive recorded: only on a terminal (None, so
    refused, otherwise). It names the run, the key's variable and the hosts."""
    if not sys.stdin.isatty():
        return None
    from evaluator.archive.reproduce import endpoint_hosts

    def ask(run: str, variable: str, urls: list[str]) -> bool:
        return click.confirm(
            f"run {run}: send the key in {variable} to {endpoint_hosts(urls)} (the endpoint the archive "
            "recorded, not one you named with --base-url)?",
            default=False,
            err=True,
        )

    return ask


def _flag(key: str, value: Any) -> list[str]:
    flag = "--" + key.replace("_", "-")
    return [flag] if value is True else [flag, str(value)]
