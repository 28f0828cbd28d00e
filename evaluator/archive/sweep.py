"""The archive of a whole sweep: the sweep file, every run as its own archive, and the leaderboard.

Layout (under one top folder ``<sweep>.sweep-archive/``)::

    ARCHIVE.json         index: format doccount-sweep-archive, the sweep, each run's archive and its SHA-256
    SHA256SUMS           over every other entry
    sweep.toml           the sweep file as the last invocation read it (it never holds a key)
    sweep.json           each run's state and arguments digest (never a key)
    leaderboard/         index.html, leaderboard.md, leaderboard.json as written
    runs/<run>.tar.gz    each run's archive exactly as `doccount archive --run-root <run>` writes it

Deterministic like a run's archive (sorted entries, fixed metadata). `verify_sweep` checks the outer
checksums, verifies every run archive as `doccount verify` does, and recomputes the leaderboard's numbers
from the re-scored records. `reproduce_sweep` re-runs the runs (all, or the ones named) each with its
own key variable, through `doccount reproduce` in a child process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaluator.archive.base import (
    INDEX,
    SUMS,
    Archive,
    ArchiveError,
    ArchiveInfo,
    Problem,
    VerifyResult,
    json_bytes,
    secret_hits,
    sha256_hex,
)
from evaluator.archive.endpoints import Confirm, key_endpoints
from evaluator.archive.opened import SWEEP_FORMAT, SWEEP_STATE, OpenedArchive, config_of
from evaluator.archive.pack import create_archive, write_tar_gz
from evaluator.archive.read import read_archive
from evaluator.archive.verify import check_sums, verify_archive
from evaluator.core.atomic import atomic_file
from evaluator.core.boundary import clip

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SWEEP_FORMAT_VERSION = 1
SWEEP_TOP_SUFFIX = ".sweep-archive"
BOARD_FILES = ("index.html", "leaderboard.md", "leaderboard.json")
STATE, COPY, BOARD = SWEEP_STATE, "sweep.toml", "leaderboard"


def is_sweep_folder(root: Path) -> bool:
    return (root / STATE).is_file() and not (root / "run_config.json").is_file()


def is_sweep_archive(archive: OpenedArchive) -> bool:
    return (archive.index or {}).get("format") == SWEEP_FORMAT


def _state(root: Path) -> dict[str, Any]:
    try:
        data = json.loads((root / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArchiveError(f"cannot read {root / STATE} ({exc}); is it a sweep folder?") from None
    return data if isinstance(data, dict) else {}


def create_sweep_archive(
    root: Path, output: Path, bundle_root: Path | None = None, env: Mapping[str, str] | None = None
) -> ArchiveInfo:
    """Write the deterministic archive of a sweep folder (each run archived as `doccount archive` does)."""
    env = os.environ if env is None else env
    state = _state(root)
    runs = sorted(p for p in root.iterdir() if (p / "run_config.json").is_file())
    if not runs:
        raise ArchiveError(f"{root} holds no run folder; run the sweep first")
    keys = {
        name: env.get(str((s or {}).get("api_key_env") or ""), "")
        for name, s in (state.get("runs") or {}).items()
    }
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
    name = str(state.get("sweep") or root.resolve().name)
    entries[INDEX] = json_bytes(
        {"format": SWEEP_FORMAT, "format_version": SWEEP_FORMAT_VERSION, "sweep": name, "runs": index_runs}
    )
    entries[SUMS] = "".join(f"{sha256_hex(entries[n])}  {n}\n" for n in sorted(entries)).encode("utf-8")
    try:
        with atomic_file(output) as raw:
            write_tar_gz(raw, f"{name}{SWEEP_TOP_SUFFIX}", entries)
    except OSError as exc:
        raise ArchiveError(f"cannot write {output} ({exc.strerror})") from None
    blob = output.read_bytes()
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
    rescored: dict[str, Path] = {}
    for name, entry in runs.items():
        path = workdir / f"{name}.tar.gz"
        archive.copy_to(entry, path)
        try:
            with read_archive(path) as inner:  # its spill folder removed before the next run's is made
                result = verify_archive(inner, workdir / name)
        except ArchiveError as exc:
            problems.append(Problem(entry, str(exc)))
            continue
        checks += [f"{name}: {c}" for c in result.checks]
        problems += [Problem(f"{entry}:{p.path}", p.reason) for p in result.problems]
        if result.ok and result.run_dir is not None:
            rescored[name] = result.run_dir
    _check_board(archive, rescored, problems, checks)
    return VerifyResult(archive, problems, checks, None)


def _check_board(
    archive: OpenedArchive, rescored: dict[str, Path], problems: list[Problem], checks: list[str]
) -> None:
    """The archived leaderboard.json's numbers against a leaderboard rebuilt from the re-scored runs."""
    from evaluator.scoring import merge_run
    from evaluator.scoring.leaderboard import BoardRun, build_leaderboard

    entry = f"{BOARD}/leaderboard.json"
    if entry not in archive.files or not rescored:
        checks.append("leaderboard: not archived or no run re-scored; not checked")
        return
    try:
        state = _object(archive)
        archived = archive.json_object(entry)
    except ArchiveError as exc:
        problems.append(Problem(entry, f"cannot be checked: {exc}"))
        return
    states, published = _dict(state.get("runs")), _dict(state.get("published"))
    runs = [
        BoardRun(n, merge_run(p), None, _dict(states.get(n)).get("state"), published.get(n))
        for n, p in sorted(rescored.items())
    ]
    fresh = build_leaderboard(runs, _dict(state.get("pricing")))
    if _numbers(fresh) != _numbers(archived):
        problems.append(
            Problem(entry, "its numbers differ from a leaderboard rebuilt from the archived records")
        )
    else:
        checks.append(
            f"leaderboard: {len(runs)} runs and {len(fresh['pairwise'])} pairs match the archived records"
        )
    _check_renderings(archive, archived, problems, checks)


def _check_renderings(
    archive: Archive, board: dict[str, Any], problems: list[Problem], checks: list[str]
) -> None:
    """leaderboard.md and index.html rebuilt from the archived leaderboard.json (whose numbers were just
    checked against the re-scored records) and compared byte for byte: an edited rendering is caught even
    when SHA256SUMS was recomputed."""
    from evaluator.report.leaderboard_markdown import leaderboard_markdown
    from evaluator.report.leaderboard_page import render_page

    # the page's footer says which version wrote it and when: taken from the archived page itself
    page = archive.whole(f"{BOARD}/index.html", b"").decode("utf-8", "replace")
    found = re.search(r"Written by doccount-eval (\S+) on (\d{4}-\d\d-\d\d \d\d:\d\d UTC)\.", page)
    stamp = (found.group(1), found.group(2)) if found else None
    rebuilt = {
        f"{BOARD}/leaderboard.md": lambda: leaderboard_markdown(board).encode("utf-8"),
        f"{BOARD}/index.html": lambda: render_page(board, stamp).encode("utf-8"),
    }
    same = 0
    for entry, build in rebuilt.items():
        if entry not in archive.files:
            continue
        try:
            fresh = build()
        except (KeyError, TypeError, ValueError):  # a leaderboard.json this evaluator cannot render
            fresh = None
        if fresh != archive.whole(entry):
            problems.append(
                Problem(entry, "does not match the page rebuilt from leaderboard/leaderboard.json")
            )
        else:
            same += 1
    checks.append(f"leaderboard: {same} rendering(s) match the ones rebuilt from leaderboard.json")


def _archived_state(archive: OpenedArchive) -> Any:
    """sweep.json as parsed when the archive was read ({} when absent); ArchiveError when it is not JSON."""
    return archive.sweep_state.get() if archive.sweep_state is not None else {}


def _object(archive: OpenedArchive) -> dict[str, Any]:
    state = _archived_state(archive)
    if not isinstance(state, dict):
        raise ArchiveError(f"{STATE} is not a JSON object")
    return state


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _numbers(board: dict[str, Any]) -> Any:
    runs = [{k: v for k, v in e.items() if k != "report"} for e in board.get("runs") or []]
    return json.loads(json.dumps({"runs": runs, "pairwise": board.get("pairwise")}))


def key_variables(archive: OpenedArchive, runs: Mapping[str, str]) -> dict[str, str | None]:
    """Each run's key variable, from sweep.json checked against the archived sweep file (sweep.toml):
    ArchiveError in one line when they differ (a crafted sweep.json naming another variable, with its
    checksum recomputed) or when a run names a variable the archive has no sweep file to check against."""
    try:
        state = _archived_state(archive)
        states = state.get("runs") if isinstance(state, dict) else None
        toml = tomllib.loads(archive.whole(COPY).decode("utf-8")) if COPY in archive.files else None
    except (ValueError, UnicodeDecodeError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ArchiveError(
            f"{archive.source}: cannot read {STATE} or {COPY} ({clip(str(exc), 120)})"
        ) from None
    states = states if isinstance(states, dict) else {}
    toml_runs = toml.get("runs") if isinstance(toml, dict) else None
    declared = {
        str(r.get("name")): r.get("api_key_env") for r in toml_runs or [] if isinstance(r, dict)
    }  # fmt: skip
    out: dict[str, str | None] = {}
    for name in runs:
        st = states.get(name)
        var = st.get("api_key_env") if isinstance(st, dict) else None
        if var != declared.get(name) and (var is not None or name in declared):
            raise ArchiveError(
                f"{archive.source}: {STATE} names the key variable {clip(repr(var), 60)} for run {name} where the "
                f"archived sweep file ({COPY}) names {clip(repr(declared.get(name)), 60)}; refusing to reproduce "
                "from it (nothing was read or sent)"
            )
        out[name] = var if isinstance(var, str) and var else None
    return out


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
            urls = key_endpoints(name, var or "", has_key, named, _recorded(path), confirm, how)
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


def _recorded(path: Path) -> list[str]:
    """The endpoints a run's archive recorded (what its reproduction would use when none is named)."""
    with read_archive(path) as inner:
        config = config_of(inner)
    return [str(u) for u in (config.get("endpoints") or [config.get("endpoint")]) if u]
