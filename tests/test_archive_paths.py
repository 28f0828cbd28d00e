"""Issue 33, archives (points 5 and 6), played as an attacker: a crafted sweep archive whose names climb out
of the folder verify and reproduce work in, and archived files changed with SHA256SUMS recomputed."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.archives import repacked, run_and_sweep, sums
from support.cli import run_cli
from support.once import built_once

from evaluator.archive.base import INDEX, SUMS, ArchiveError, json_bytes
from evaluator.archive.pack import write_tar_gz
from evaluator.archive.sweep import reproduce_sweep, verify_sweep
from evaluator.archive.verify import read_archive

pytestmark = pytest.mark.timeout(180)


def sweep_archive(path: Path, sweep: str, runs: dict[str, str]) -> Path:
    """A sweep archive whose index names `runs` (run name -> entry), SHA256SUMS consistent with it."""
    entries = {entry: b"not an archive" for entry in runs.values() if "/" in entry and ".." not in entry}
    entries["runs/a.tar.gz"] = b"not an archive"
    index = {
        "format": "doccount-sweep-archive",
        "format_version": 1,
        "sweep": sweep,
        "runs": {n: {"archive": e, "sha256": "0" * 64} for n, e in runs.items()},
    }
    entries[INDEX] = json_bytes(index)
    entries[SUMS] = sums(entries)
    with open(path, "wb") as raw:
        write_tar_gz(raw, "s.sweep-archive", entries)
    return path


ESCAPES = ["../../escaped", "../escaped", "/tmp/escaped-abs", "a/../../escaped", "..", ".", "x\\..\\y", ""]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(ESCAPES) | st.just("ok"),
    entry=st.sampled_from(
        ["runs/a.tar.gz", "../../escaped.tar.gz", "runs/../../escaped.tar.gz", "/abs.tar.gz"]
    ),
    sweep=st.sampled_from(["s", "../../escaped-sweep", "/tmp/abs-sweep"]),
)
def test_a_crafted_sweep_archive_writes_nothing_outside_and_is_refused(
    tmp_path: Path, name: str, entry: str, sweep: str
) -> None:
    """verify_sweep and reproduce_sweep (what `doccount verify` and `reproduce` call) on every crafted shape."""
    if (name, entry, sweep) == ("ok", "runs/a.tar.gz", "s"):
        return  # not crafted
    work = tmp_path / "w"
    shutil.rmtree(work, ignore_errors=True)
    (work / "deeper" / "verify").mkdir(parents=True)
    archive = read_archive(sweep_archive(work / "crafted.tar.gz", sweep, {name: entry}))
    before = set(tmp_path.rglob("*"))
    with pytest.raises(ArchiveError, match="ARCHIVE.json"):
        verify_sweep(archive, work / "deeper" / "verify")
    with pytest.raises(ArchiveError, match="ARCHIVE.json"):
        reproduce_sweep(archive, [], work / "deeper" / "out", [], env={})
    assert set(tmp_path.rglob("*")) == before
    assert not Path("/tmp/escaped-abs.tar.gz").exists() and not Path("/abs.tar.gz").exists()


def test_verify_and_reproduce_refuse_a_crafted_sweep_archive_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = sweep_archive(tmp_path / "crafted.tar.gz", "s", {"../../escaped": "runs/a.tar.gz"})
    (tmp_path / "t" / "deeper").mkdir(parents=True)
    env = {"TMPDIR": str(tmp_path / "t" / "deeper")}
    # run_cli runs in this process, where tempfile read TMPDIR long ago: set what it read, as a process would
    monkeypatch.setattr(tempfile, "tempdir", env["TMPDIR"])
    for args in (
        ["verify", str(archive)],
        ["reproduce", str(archive), "--run-root", str(tmp_path / "o" / "r")],
    ):
        res = run_cli(*args, env=env)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and "ARCHIVE.json" in errors[0] and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crafted.tar.gz", "t"]
    assert list((tmp_path / "t" / "deeper").iterdir()) == []


# --- 6: tampering with files verify can rebuild, and with those it cannot ---------------------------------


@pytest.fixture(scope="session")
def sweep_archive_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sweep (run a against a loopback server), scored and archived: made once a session
    (support/archives.py; test_verify_crafted mutates copies of the same archive)."""
    return built_once(tmp_path_factory, "run-and-sweep", run_and_sweep).sweep_path


@pytest.mark.parametrize("entry", ["leaderboard/leaderboard.md", "leaderboard/index.html"])
def test_a_changed_leaderboard_rendering_is_caught_by_verify(
    sweep_archive_file: Path, tmp_path: Path, entry: str
) -> None:
    ok = run_cli("verify", str(sweep_archive_file))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    files = read_archive(sweep_archive_file).files
    forged = files[entry].replace(b"test-model", b"best-model", 1)
    assert forged != files[entry]
    res = run_cli("verify", str(repacked(sweep_archive_file, tmp_path / "t.tar.gz", {entry: forged})))
    assert res.returncode == 1, res.stdout
    assert any(x.startswith("MISMATCH") and entry in x for x in res.stdout.splitlines()), res.stdout


def test_a_changed_report_changes_the_archive_sha256_verify_shows(
    sweep_archive_file: Path, tmp_path: Path
) -> None:
    """A run's report.html needs the data files to be rebuilt: it is covered by the checksums, and verify
    shows the archive's own SHA-256, the one thing a repacker cannot keep."""
    original = hashlib.sha256(sweep_archive_file.read_bytes()).hexdigest()
    inner = read_archive_bytes(read_archive(sweep_archive_file).files["runs/a.tar.gz"], tmp_path / "a.tar.gz")
    report = next(n for n in inner.files if n.endswith("scores/report.html"))
    inner_forged = tmp_path / "a2.tar.gz"
    repacked(
        tmp_path / "a.tar.gz", inner_forged, {report: inner.files[report].replace(b"</body>", b"x</body>")}
    )
    forged = repacked(sweep_archive_file, tmp_path / "t.tar.gz", {"runs/a.tar.gz": inner_forged.read_bytes()})
    for path, digest in (
        (sweep_archive_file, original),
        (forged, hashlib.sha256(forged.read_bytes()).hexdigest()),
    ):
        res = run_cli("verify", str(path))
        assert f"SHA-256 {digest}" in res.stdout, res.stdout
    assert original != hashlib.sha256(forged.read_bytes()).hexdigest()


def read_archive_bytes(data: bytes, path: Path):  # noqa: ANN201
    path.write_bytes(data)
    return read_archive(path)
