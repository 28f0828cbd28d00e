"""The archive of a whole sweep: the sweep file, every run as its own archive, and the leaderboard.

Under one top folder ``<sweep>.sweep-archive/``: ARCHIVE.json (the index), SHA256SUMS, sweep.toml and
sweep.json (neither ever holds a key), leaderboard/ and runs/<run>.tar.gz, each run's archive exactly as
`doccount archive` writes it (docs/sweeps.md); deterministic like a run's archive. `verify_sweep` verifies
every run archive and recomputes the leaderboard from the re-scored records; `reproduce_sweep` re-runs
runs in child processes, each with its own key variable (sweep.json's, checked against the archived sweep
file, so a crafted one names no other).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluator.archive.base import (
    INDEX,
    Archive,
    ArchiveError,
    ArchiveInfo,
    ArchiveLimitError,
    Budget,
    Problem,
    VerifyResult,
    json_bytes,
    secret_hits,
    sha256_hex,
)
from evaluator.archive.images import check_images
from evaluator.archive.opened import SWEEP_FORMAT, OpenedArchive, config_of
from evaluator.archive.pack import create_archive, write_archive
from evaluator.archive.read import read_archive
from evaluator.archive.reproduce import Confirm, key_endpoints
from evaluator.archive.verify import check_sums, verify_archive
from evaluator.core.boundary import clip
from evaluator.runfolder.files import CONFIG
from evaluator.runfolder.handoff import SWEEP_COPY, SWEEP_STATE, SweepState, read_sweep_state
from evaluator.scoring.base import BOARD_DIR, BOARD_FILES
from evaluator.scoring.board import Board, is_board

if TYPE_CHECKING:
    from evaluator.scoring import MergedRun


SWEEP_FORMAT_VERSION = 1
SWEEP_TOP_SUFFIX = ".sweep-archive"
STATE, COPY, BOARD = SWEEP_STATE, SWEEP_COPY, BOARD_DIR


def is_sweep_folder(root: Path) -> bool:
    return (root / STATE).is_file() and not (root / CONFIG).is_file()


def is_sweep_archive(archive: OpenedArchive) -> bool:
    return (archive.index or {}).get("format") == SWEEP_FORMAT


def _state(root: Path) -> SweepState:
    try:
        return read_sweep_state(root / STATE)
    except (OSError, ValueError) as exc:
        raise ArchiveError(f"cannot read {root / STATE} ({exc}); is it a sweep folder?") from None


def create_sweep_archive(
    root: Path, output: Path, bundle_root: Path | None = None, env: Mapping[str, str] | None = None
) -> ArchiveInfo:
    """Write the deterministic archive of a sweep folder (each run archived as `doccount archive` does)."""
    env = os.environ if env is None else env
    state = _state(root)
    runs = sorted(p for p in root.iterdir() if (p / CONFIG).is_file())
    if not runs:
        raise ArchiveError(f"{root} holds no run folder; run the sweep first")
    keys = {name: env.get(s.api_key_env or "", "") for name, s in state.runs.items()}
    entries: dict[str, bytes] = {}
    index_runs = {}
    with tempfile.TemporaryDirectory(prefix="doccount-sweep-archive-") as work:
        for run in runs:
            out = Path(work) / f"{run.name}.tar.gz"
            create_archive(run, out, bundle_root=bundle_root, secret=keys.get(run.name) or None)
            entries[f"runs/{run.name}.tar.gz"] = blob = out.read_bytes()
            index_runs[run.name] = {"archive": f"runs/{run.name}.tar.gz", "sha256": sha256_hex(blob)}
    for name in (STATE, COPY):
        if (root / name).is_file():
            entries[name] = (root / name).read_bytes()
    for name in BOARD_FILES:
        if (root / BOARD / name).is_file():
            entries[f"{BOARD}/{name}"] = (root / BOARD / name).read_bytes()
    hits = [h for key in set(keys.values()) if key.strip() for h in secret_hits(entries, key)]
    if hits:
        raise ArchiveError(f"refusing to archive: a run's key occurs in {', '.join(sorted(set(hits)))}")
    name = state.sweep or root.resolve().name
    entries[INDEX] = json_bytes(
        {"format": SWEEP_FORMAT, "format_version": SWEEP_FORMAT_VERSION, "sweep": name, "runs": index_runs}
    )
    blob = write_archive(output, f"{name}{SWEEP_TOP_SUFFIX}", entries)
    return ArchiveInfo(output, sorted(entries), {}, sha256_hex(blob), len(blob))


# A sweep's run and sweep names, as the sweep file allows them (study.sweep_file.NAME_RE): one path segment
# of plain characters, so a name from an archive can never climb out of the folder it is written in.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def sweep_name(archive: OpenedArchive) -> str:
    """The archive's sweep name, checked like its run names (ArchiveError for one a sweep cannot have)."""
    name = (archive.index or {}).get("sweep", "sweep")
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise ArchiveError(_layout_error(archive, [name]))
    return name


def run_archives(archive: OpenedArchive) -> dict[str, str]:
    """run name -> entry of its archive, from the index, every pair checked against the archive's own layout
    before anything is written: the name is a run name a sweep can have, its entry is `runs/<name>.tar.gz`
    and is in the archive. ArchiveError naming the offenders otherwise."""
    runs = (archive.index or {}).get("runs")
    runs = runs if isinstance(runs, dict) else {}
    bad = [
        n
        for n, r in runs.items()
        if not SAFE_NAME.fullmatch(n)
        or not isinstance(r, dict)
        or r.get("archive") != f"runs/{n}.tar.gz"
        or r["archive"] not in archive.files
    ]
    if bad or not runs:
        raise ArchiveError(_layout_error(archive, bad))
    return {n: r["archive"] for n, r in sorted(runs.items())}


def _layout_error(archive: Archive, bad: list[Any]) -> str:
    shown = ", ".join(clip(repr(n), 80) for n in bad[:5]) or "no run"
    return (
        f"{archive.source} is not a sweep archive doccount wrote: its {INDEX} names {shown} where a sweep archive "
        "has run names of letters, digits and ._- each archived as runs/<name>.tar.gz; refusing it (nothing "
        "was written)"
    )


def verify_sweep(archive: OpenedArchive, workdir: Path) -> VerifyResult:
    """Outer checksums, then every run archive verified, then the leaderboard recomputed and compared."""
    problems: list[Problem] = []
    checks: list[str] = []
    runs = run_archives(archive)  # names checked before anything is written
    sweep_name(archive)
    check_sums(archive, problems, checks)
    check_images(archive, problems, checks, skip=runs.values())  # each run archive: as it is verified
    rescored: dict[str, MergedRun] = {}
    for name, entry in runs.items():
        merged = _verify_run(archive, name, entry, workdir, problems, checks)
        if merged is not None:
            rescored[name] = merged
    _check_board(archive, rescored, problems, checks)
    return VerifyResult(archive, problems, checks, None)


def _verify_run(
    archive: OpenedArchive, name: str, entry: str, workdir: Path, problems: list[Problem], checks: list[str]
) -> MergedRun | None:
    """One run archive verified as `doccount verify` does, read under the sweep archive's budget; what it
    put on the temporary disk removed before the next. The re-scored run, merged, when it verifies."""
    from evaluator.scoring import merge_run

    path, folder = workdir / f"{name}.tar.gz", workdir / name
    inner: OpenedArchive | None = None
    try:
        archive.copy_to(entry, path)
        inner = read_archive(path, budget=archive.budget)
        result = verify_archive(inner, folder)
        checks += [f"{name}: {c}" for c in result.checks]
        problems += [Problem(f"{entry}:{p.path}", p.reason) for p in result.problems]
        return merge_run(result.run_dir) if result.ok and result.run_dir is not None else None
    except ArchiveLimitError:
        raise  # the one budget is spent: the whole archive is refused, in one line
    except ArchiveError as exc:
        problems.append(Problem(entry, str(exc)))
        return None
    finally:
        if inner is not None:
            inner.close()
        path.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def _check_board(
    archive: OpenedArchive, rescored: dict[str, MergedRun], problems: list[Problem], checks: list[str]
) -> None:
    """The archived leaderboard.json's numbers against a leaderboard rebuilt from the re-scored runs."""
    from evaluator.scoring.leaderboard import BoardRun, build_leaderboard

    entry = f"{BOARD}/leaderboard.json"
    if entry not in archive.files or not rescored:
        checks.append("leaderboard: not archived or no run re-scored; not checked")
        return
    try:
        state = _archived_state(archive) or SweepState("", "", "")
        archived = archive.json_object(entry)
    except ArchiveError as exc:
        problems.append(Problem(entry, f"cannot be checked: {exc}"))
        return
    if not is_board(archived):
        problems.append(Problem(entry, "cannot be checked: it is not a leaderboard this evaluator writes"))
        return
    runs = [
        BoardRun(n, merged, None, state.run_state(n), state.published.get(n))
        for n, merged in sorted(rescored.items())
    ]
    fresh = build_leaderboard(runs, state.pricing)
    if _numbers(fresh) != _numbers(archived):
        problems.append(
            Problem(entry, "its numbers differ from a leaderboard rebuilt from the archived records")
        )
    else:
        checks.append(
            f"leaderboard: {len(runs)} runs and {len(fresh['pairwise'])} pairs match the archived records"
        )
    _check_renderings(archive, archived, problems, checks)


def _check_renderings(archive: Archive, board: Board, problems: list[Problem], checks: list[str]) -> None:
    """leaderboard.md and index.html rebuilt from the archived leaderboard.json (whose numbers were just
    checked against the re-scored records) and compared byte for byte: an edited rendering is caught even
    when SHA256SUMS was recomputed."""
    from evaluator.report.leaderboard import leaderboard_markdown
    from evaluator.report.leaderboard_page import render_page

    # the page's footer says which version wrote it and when: taken from the archived page itself
    page = archive.whole(f"{BOARD}/index.html", b"").decode("utf-8", "replace")
    found = re.search(r"Written by doccount-eval (\S+) on (\d{4}-\d\d-\d\d \d\d:\d\d UTC)\.", page)
    stamp = (found.group(1), found.group(2)) if found else None
    rebuilt: dict[str, Callable[[Board], bytes]] = {
        f"{BOARD}/leaderboard.md": lambda b: leaderboard_markdown(b).encode("utf-8"),
        f"{BOARD}/index.html": lambda b: render_page(b, stamp).encode("utf-8"),
    }
    same = 0
    for entry, build in rebuilt.items():
        if entry not in archive.files:
            continue
        try:
            fresh = build(board)
        except (KeyError, TypeError, ValueError):  # a leaderboard.json this evaluator cannot render
            fresh = None
        if fresh != archive.whole(entry):
            problems.append(
                Problem(entry, "does not match the page rebuilt from leaderboard/leaderboard.json")
            )
        else:
            same += 1
    checks.append(f"leaderboard: {same} rendering(s) match the ones rebuilt from leaderboard.json")


def _archived_state(archive: OpenedArchive) -> SweepState | None:
    """sweep.json as read when the archive was (None when absent); ArchiveError when it is not a state."""
    return archive.sweep_state.get() if archive.sweep_state is not None else None


def _numbers(board: Mapping[str, Any]) -> Any:
    runs = [{k: v for k, v in e.items() if k != "report"} for e in board.get("runs") or []]
    return json.loads(json.dumps({"runs": runs, "pairwise": board.get("pairwise")}))


def reproduce_sweep(
    archive: OpenedArchive,
    only: list[str],
    run_root: Path,
    passthrough: list[str],
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    base_urls: Mapping[str, list[str]] | None = None,
    confirm: Confirm | None = None,
) -> list[tuple[str, int]]:
    """Re-run each selected run with `doccount reproduce` (a child, its own key); (name, exit code) each.
    A run's key variable is read only for an endpoint named in `base_urls` (RUN -> URLs) or confirmed;
    every run's endpoint is settled before the first starts (ArchiveError: nothing is sent)."""
    env = os.environ if env is None else env
    base_urls = base_urls or {}
    runs = run_archives(archive)  # names checked before anything is written
    sweep_name(archive)
    unknown = [n for n in [*only, *base_urls] if n not in runs]
    if unknown:
        raise ArchiveError(
            f"--only or --base-url RUN=URL names no run of the archive: {', '.join(unknown)} "
            f"(runs: {', '.join(runs)})"
        )
    variables = key_variables(archive, runs)
    drop = {v for v in variables.values() if v} | {"MODEL_API_KEY", "MODEL_API_BASE_URL"}
    results = []
    with tempfile.TemporaryDirectory(prefix="doccount-sweep-reproduce-") as work:
        plans = []
        for name, entry in runs.items():
            if only and name not in only:
                continue
            path = Path(work) / f"{name}.tar.gz"
            archive.copy_to(entry, path)
            var = variables[name]
            has_key = bool(var and env.get(var, "").strip())
            named = list(base_urls.get(name, []))
            how = f"--base-url {name}=URL, or leave the run out with --only"
            urls = key_endpoints(
                name, var or "", has_key, named, _recorded(path, archive.budget), confirm, how
            )
            plans.append((name, path, named or (urls if has_key else []), has_key))
        for name, path, urls, has_key in plans:
            child_env = {k: v for k, v in env.items() if k not in drop}
            if has_key:  # only now, for an endpoint the user named or confirmed
                child_env["MODEL_API_KEY"] = env[str(variables[name])].strip()
            cmd = [python, "-m", "evaluator.cli", "reproduce", str(path), "--run-root", str(run_root / name)]
            cmd += [a for u in urls for a in ("--base-url", u)]
            code = subprocess.run(
                [*cmd, *passthrough], env=child_env, stdin=subprocess.DEVNULL, check=False
            ).returncode
            results.append((name, code))
    return results


def _recorded(path: Path, budget: Budget | None) -> list[str]:
    """The endpoints a run's archive recorded, read under the sweep archive's budget."""
    inner = read_archive(path, budget=budget)
    try:
        config = config_of(inner)
    finally:
        inner.close()
    return [str(u) for u in (config.get("endpoints") or [config.get("endpoint")]) if u]


try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def _declared(toml: Any) -> tuple[dict[str, Any], Any]:
    """The key variable each run of the archived sweep file names itself, and its [defaults]' one."""
    toml = toml if isinstance(toml, dict) else {}
    runs = toml.get("runs") if isinstance(toml.get("runs"), list) else []
    own = {str(r.get("name")): r.get("api_key_env") for r in runs if isinstance(r, dict)}
    defaults = toml.get("defaults")
    return own, defaults.get("api_key_env") if isinstance(defaults, dict) else None


def key_variables(archive: OpenedArchive, runs: Mapping[str, str]) -> dict[str, str | None]:
    """Each run's key variable, from sweep.json checked against the archived sweep file (the run's own, or
    the one of [defaults]). ArchiveError when they differ (a crafted sweep.json naming another variable) or
    when there is no sweep file to check against."""
    try:
        state = _archived_state(archive)
        toml = tomllib.loads(archive.whole(COPY).decode("utf-8")) if COPY in archive.files else None
    except (ValueError, UnicodeDecodeError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ArchiveError(
            f"{archive.source}: cannot read {STATE} or {COPY} ({clip(str(exc), 120)})"
        ) from None
    states = state.runs if state else {}
    own, default = _declared(toml)
    out: dict[str, str | None] = {}
    for name in runs:
        st = states.get(name)
        var = st.api_key_env if st else None
        allowed = [own[name]] if own.get(name) is not None else [None, default]
        if var not in allowed:
            declared = own.get(name) if own.get(name) is not None else default
            raise ArchiveError(
                f"{archive.source}: {STATE} names the key variable {clip(repr(var), 60)} for run {name} where the "
                f"archived sweep file ({COPY}) names {clip(repr(declared), 60)}; refusing to reproduce "
                "from it (nothing was read or sent)"
            )
        out[name] = var if isinstance(var, str) and var else None
    return out
