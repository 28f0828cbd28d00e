"""Issue 40 point 8: an archive is read and parsed once. `doccount verify` and `doccount reproduce`, run
in-process on a real archive (made by `doccount evaluate`, `score` and `archive`), read the archive file
once, parse its run_config.json member once and type it as a RunConfig once; a sweep archive likewise.

Counted with spies that change nothing: gzip.open (each read of an archive file), json.loads given the
run_config member's bytes (each parse of that member), msgspec.convert to RunConfig whose caller is in
evaluator/archive (each decode of an archive's config; the re-score of the extracted copy is scoring's)."""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from support.archives import members, sums
from support.cli import FAST_RETRIES, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive.base import INDEX, SUMS, json_bytes
from evaluator.archive.pack import write_tar_gz
from evaluator.cli.main import main
from evaluator.runfolder.runconfig import RunConfig

pytestmark = pytest.mark.timeout(240)
N = 4
ARCHIVE_CODE = str(Path(__file__).resolve().parents[1] / "evaluator" / "archive")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """A real run archive and a sweep archive holding it twice (runs a and b); the server stays up."""
    base = tmp_path_factory.mktemp("once")
    rows = doccount_rows(N)
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    data = str(base / "data" / "test-*.parquet")
    with TestServer({"answers": doccount_reply(rows)}) as srv:
        run = base / "orig"
        res = run_cli(
            "evaluate", "--model", "test-model", "--base-url", srv.base_url, "--data-files", data,
            "--run-root", str(run), "--quiet", *FAST_RETRIES,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert run_cli("score", "--run-root", str(run)).returncode == 0
        archive = base / "orig.tar.gz"
        res = run_cli("archive", "--run-root", str(run), "--output", str(archive))
        assert res.returncode == 0, res.stderr
        files = {n.split("/", 1)[1]: d for n, d in members(archive).items()}
        config = files["runs/orig/run_config.json"]
        sweep = _sweep(base, archive)
        watched = {config: "run_config", files[INDEX]: "index"}
        watched[{n.split("/", 1)[1]: d for n, d in members(sweep).items()}[INDEX]] = "sweep index"
        yield SimpleNamespace(
            base=base, data=data, archive=archive, config=config, server=srv, sweep=sweep, watched=watched
        )


def _sweep(base: Path, run_archive: Path) -> Path:
    """A sweep archive as `doccount archive` lays one out, its runs the real run archive (no leaderboard)."""
    blob = run_archive.read_bytes()
    entries = {f"runs/{n}.tar.gz": blob for n in ("a", "b")}
    index = {
        "format": "doccount-sweep-archive",
        "format_version": 1,
        "sweep": "sw",
        "runs": {n: {"archive": f"runs/{n}.tar.gz", "sha256": ""} for n in ("a", "b")},
    }
    entries[INDEX] = json_bytes(index)
    entries[SUMS] = sums(entries)
    path = base / "sw.tar.gz"
    with open(path, "wb") as raw:
        write_tar_gz(raw, "sw.sweep-archive", entries)
    return path


class Counts:
    """Spies that pass every call through unchanged and count what an archive costs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, watched: dict[bytes, str]) -> None:
        self.opens: Counter[str] = Counter()  # archive files read (by name)
        self.parses: Counter[str] = Counter()  # JSON parses of the watched members' bytes
        self.decodes = 0  # RunConfig built from an archive's config (caller in evaluator/archive)
        real_open, real_loads, real_convert = gzip.open, json.loads, msgspec.convert

        def spy_open(filename: Any, *args: Any, **kwargs: Any) -> Any:
            self.opens[Path(filename).name] += 1
            return real_open(filename, *args, **kwargs)

        def spy_loads(s: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(s, bytes) and s in watched:
                self.parses[watched[s]] += 1
            return real_loads(s, *args, **kwargs)

        def spy_convert(obj: Any, type: Any, *args: Any, **kwargs: Any) -> Any:
            # frame 1 is RunConfig.from_dict, frame 2 its caller
            if type is RunConfig and sys._getframe(2).f_code.co_filename.startswith(ARCHIVE_CODE):
                self.decodes += 1
            return real_convert(obj, type, *args, **kwargs)

        monkeypatch.setattr(gzip, "open", spy_open)
        monkeypatch.setattr(json, "loads", spy_loads)
        monkeypatch.setattr(msgspec, "convert", spy_convert)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), env={"MODEL_API_KEY": "", "MODEL_API_BASE_URL": ""})


def test_verify_reads_and_parses_the_archive_once(
    made: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = Counts(monkeypatch, made.watched)
    result = invoke("verify", str(made.archive))
    assert result.exit_code == 0, result.output
    assert f"OK: {made.archive} verified" in result.output
    assert counts.opens == {made.archive.name: 1}  # before: 1
    assert counts.parses == {"index": 1, "run_config": 1}  # before: index 3
    assert counts.decodes == 1


def test_reproduce_reads_and_parses_the_archive_once(
    made: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = Counts(monkeypatch, made.watched)
    new = made.base / "repro"
    result = invoke(
        "reproduce", str(made.archive), "--base-url", made.server.base_url, "--data-files", made.data,
        "--run-root", str(new), "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"Same parsed answer: {N} / {N}" in result.output
    assert counts.opens == {made.archive.name: 1}  # before: 2
    assert counts.parses == {"index": 1, "run_config": 1}  # before: index 6, run_config 2
    assert counts.decodes == 1  # before: 3


def test_a_sweep_archive_and_each_run_in_it_are_read_once(
    made: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = Counts(monkeypatch, made.watched)
    result = invoke("verify", str(made.sweep))
    assert result.exit_code == 0, result.output
    assert "a: re-score" in result.output and "b: re-score" in result.output
    assert counts.opens == {made.sweep.name: 1, "a.tar.gz": 1, "b.tar.gz": 1}
    # one parse of each per archive read; before: index 4, sweep index 3
    assert counts.parses == {"sweep index": 1, "index": 2, "run_config": 2}
    assert counts.decodes == 2


def test_a_sweep_reproduction_reads_the_sweep_archive_once(
    made: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent reads the sweep archive once and each run's archive once (its endpoint); the runs
    themselves are re-run by child processes (`doccount reproduce`), refused here before any starts."""
    counts = Counts(monkeypatch, made.watched)
    result = invoke("reproduce", str(made.sweep), "--only", "a", "--base-url", "c=http://127.0.0.1:9/v1")
    assert result.exit_code == 2 and "names no run of the archive: c" in result.output, result.output
    assert counts.opens == {made.sweep.name: 1}  # before: 2
    assert counts.parses == {"sweep index": 1} and counts.decodes == 0  # before: sweep index 5


def test_a_sweep_reproduction_reads_each_run_archive_once(
    made: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a re-run by its child process: the parent read the sweep archive and a's archive once each."""
    counts = Counts(monkeypatch, made.watched)
    result = invoke(
        "reproduce", str(made.sweep), "--only", "a", "--base-url", f"a={made.server.base_url}",
        "--data-files", made.data, "--run-root", str(made.base / "sweep-repro"), "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (made.base / "sweep-repro" / "a" / "scores" / "summary.json").is_file()
    assert counts.opens == {made.sweep.name: 1, "a.tar.gz": 1}  # before: sweep 2
    assert counts.parses == {"sweep index": 1, "index": 1, "run_config": 1}  # before: sweep index 5
    assert counts.decodes == 1  # the run archive opened once, its config typed then
