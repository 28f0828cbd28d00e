"""A crafted archive never makes `verify` or `reproduce` print a traceback: it does not verify (exit 1, the
usual report) or cannot be read (exit 2, one `error:` line).

Real archives (a run's and a sweep's, made once per session by `doccount evaluate` against the loopback
test server, `score` and `archive`: support/archives.py) are mutated by hypothesis the ways an attacker
would: truncated, a member's bytes replaced (random, deeply nested JSON, JSON of the wrong type, one field of the wrong type),
members added (duplicates, folders, symlinks, hard links, devices, a file where a folder is, a batches.json
naming a file outside the run folder, the archive itself nested in a member's place), members removed, and
SHA256SUMS recomputed so the checksums pass; in a sweep archive the same is done to a run's archive inside
it.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.archives import run_and_sweep
from support.cli import run_cli
from support.once import built_once

from evaluator.cli.main import main

Entry = tuple[tarfile.TarInfo, bytes]
SUMS = "SHA256SUMS"


@pytest.fixture(scope="session")
def real(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A run archive and a one-run sweep archive, both made by the CLI from real runs (support/archives.py;
    once a session: test_archive_paths reads the same sweep archive)."""
    return built_once(tmp_path_factory, "run-and-sweep", run_and_sweep)


# ----------------------------------------------------------------------------- tar surgery


def entries_of(blob: bytes) -> list[Entry]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        out = []
        for m in tar:
            f = tar.extractfile(m) if m.isfile() else None
            out.append((m, f.read() if f else b""))
        return out


def pack(entries: list[Entry]) -> bytes:
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for info, data in entries:
            info = copy.copy(info)
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def top_of(entries: list[Entry]) -> str:
    return entries[0][0].name.split("/")[0]


def rel(info: tarfile.TarInfo) -> str:
    return info.name.split("/", 1)[1] if "/" in info.name else ""


def resum(entries: list[Entry]) -> list[Entry]:
    """SHA256SUMS (and a sweep index's run hashes) recomputed, as someone who edits an archive would."""
    files = {rel(i): d for i, d in entries if i.isfile() and rel(i)}
    index = files.get("ARCHIVE.json", b"")
    try:
        obj = json.loads(index)
        for run in obj["runs"].values():
            run["sha256"] = hashlib.sha256(files[run["archive"]]).hexdigest()
        files["ARCHIVE.json"] = json.dumps(obj).encode()
    except Exception:  # noqa: BLE001 - a mutated index keeps its mutation
        pass
    sums = "".join(
        f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in sorted(files.items()) if n != SUMS
    ).encode()
    out = []
    for info, data in entries:
        name = rel(info)
        if info.isfile() and name in files:
            data = sums if name == SUMS else files[name]
        out.append((info, data))
    return out


def file_info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def deep(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


WRONG_TYPES = [None, [], {}, 0, -1, 1.5, "x", True, [1, "a"], {"runs": []}, {"a": {"b": None}}]
PAYLOADS = st.one_of(
    st.binary(max_size=64),
    st.builds(deep, st.sampled_from([40, 70, 1000, 100_000]), st.sampled_from(["list", "dict"])),
    st.sampled_from(WRONG_TYPES).map(lambda v: json.dumps(v).encode()),
    st.just(b"\xff\xfe{not utf-8"),
)


def with_field(data: bytes, pick: int, value: Any) -> bytes:
    """One field of a JSON object (or of one JSONL line) given a value of another type."""
    lines = data.split(b"\n")
    for n in range(len(lines)):
        i = (pick + n) % len(lines)
        try:
            obj = json.loads(lines[i])
        except ValueError:
            continue
        if isinstance(obj, dict) and obj:
            keys = sorted(obj)
            obj[keys[pick % len(keys)]] = value
            lines[i] = json.dumps(obj).encode()
            return b"\n".join(lines)
    return data


@st.composite
def mutation(draw: st.DrawFn, entries: list[Entry]) -> list[Entry]:
    """The archive's entries after one or two changes an attacker could make."""
    out = list(entries)
    top = top_of(entries)
    files = [i for i, (info, _) in enumerate(out) if info.isfile() and rel(info)]
    deleted: set[int] = set()
    for _ in range(draw(st.integers(1, 2))):
        i = draw(st.sampled_from(files))
        info, data = out[i]
        kind = draw(
            st.sampled_from(
                [
                    "payload",
                    "field",
                    "duplicate",
                    "delete",
                    "folder-over-file",
                    "file-over-folder",
                    "link",
                    "device",
                    "ledger",
                    "nested",
                ]
            )
        )
        if kind == "payload":
            out[i] = (info, draw(PAYLOADS))
        elif kind == "field":
            out[i] = (info, with_field(data, draw(st.integers(0, 50)), draw(st.sampled_from(WRONG_TYPES))))
        elif kind == "duplicate":
            out.append((info, draw(PAYLOADS)))
        elif kind == "delete":
            deleted.add(i)
        elif kind == "folder-over-file":
            out.append((file_info(info.name, tarfile.DIRTYPE), b""))
        elif kind == "file-over-folder":  # `scores` beside `scores/summary.json`, `runs/x` beside `runs/x/`
            folders = sorted({e.name.rsplit("/", 1)[0] for e, _ in entries if "/" in rel(e)})
            out.append((file_info(draw(st.sampled_from(folders))), b"{}"))
        elif kind == "link":
            target = draw(st.sampled_from(["/etc/passwd", "../../../etc/passwd", info.name, f"{top}/{SUMS}"]))
            ltype = draw(st.sampled_from([tarfile.SYMTYPE, tarfile.LNKTYPE]))
            out.append((file_info(f"{top}/{draw(st.sampled_from(['l', rel(info)]))}", ltype, target), b""))
        elif kind == "ledger":  # batches.json naming a file outside the run folder (issue 46 point 1)
            run_dirs = sorted(
                {rel(e).rsplit("/", 1)[0] for e, _ in entries if rel(e).endswith("/run_config.json")}
            )
            folder = draw(st.sampled_from(run_dirs or ["runs/r"]))
            out.append((file_info(f"{top}/{folder}/batches.json"), draw(LEDGERS)))
        elif (
            kind == "nested"
        ):  # an archive inside: the archive itself in a member's place (a sweep in a sweep)
            out.append((file_info(info.name), pack(entries)))
            deleted.add(i)
        else:
            out.append(
                (file_info(f"{top}/dev", draw(st.sampled_from([tarfile.CHRTYPE, tarfile.FIFOTYPE]))), b"")
            )
    return [e for i, e in enumerate(out) if i not in deleted]


OUTSIDE = [
    "../../../etc/passwd",
    "/etc/passwd",
    "batch/../../notes.txt",
    "batch/.hidden",
    "x.jsonl",
    "batch/",
]
LEDGERS = st.builds(
    lambda name, state: json.dumps(
        {"format": 1, "batches": [{"input": name, "rows": [], "state": state}]}
    ).encode(),
    st.sampled_from(OUTSIDE),
    st.sampled_from(["written", "created", "ended"]),
)


def crafted(draw: st.DrawFn, blob: bytes, nested: bool) -> bytes:
    entries = entries_of(blob)
    if nested:  # the change made to the run archive inside a sweep archive, the outer sums recomputed
        i = next(i for i, (info, _) in enumerate(entries) if info.name.endswith(".tar.gz"))
        inner = crafted(draw, entries[i][1], False)
        entries[i] = (entries[i][0], inner)
        return pack(resum(entries))
    mutated = draw(mutation(entries))
    blob = pack(resum(mutated) if draw(st.booleans()) else mutated)
    if draw(st.integers(0, 9)) == 0:
        blob = blob[: draw(st.integers(0, len(blob) - 1))]
    return blob


# ----------------------------------------------------------------------------- the property


def check_outcome(code: int, out: str, err: str, exception: BaseException | None) -> None:
    """0 (a harmless change), 1 with the usual report, or 2 with exactly one `error:` line; no traceback."""
    assert exception is None or isinstance(exception, SystemExit), repr(exception)
    assert "Traceback" not in out + err, out + err
    assert "evaluator error" not in err, err  # the last-resort guard must not be what answered
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), err
    elif code == 1:
        assert out.rstrip().splitlines()[-1].startswith("FAILED:") or err.startswith("error: "), out + err
    else:
        assert code == 0 and "OK:" in out, (code, out, err)


def verify_in_process(path: Path) -> None:
    result = CliRunner().invoke(main, ["verify", str(path)])
    check_outcome(result.exit_code, result.stdout, result.stderr, result.exception)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_verify_of_a_mutated_run_archive_never_shows_a_traceback(
    real: SimpleNamespace, tmp_path: Path, data: st.DataObject
) -> None:
    path = tmp_path / "m.tar.gz"
    path.write_bytes(crafted(data.draw, real.run, False))
    verify_in_process(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), nested=st.booleans())
def test_verify_of_a_mutated_sweep_archive_never_shows_a_traceback(
    real: SimpleNamespace, tmp_path: Path, data: st.DataObject, nested: bool
) -> None:
    path = tmp_path / "m.tar.gz"
    path.write_bytes(crafted(data.draw, real.sweep, nested))
    verify_in_process(path)


# ----------------------------------------------------------------------------- the cases of issue 39


def replaced(blob: bytes, change: dict[str, bytes], add: list[Entry] = ()) -> bytes:
    entries = [(i, change.get(rel(i), d)) for i, d in entries_of(blob)]
    return pack(resum([*entries, *add]))


def named_cases(real: SimpleNamespace) -> dict[str, bytes]:
    top = top_of(entries_of(real.run))
    return {
        "deep summary.json": replaced(real.run, {"runs/r/scores/summary.json": deep(100_000, "list")}),
        "deep run_config.json": replaced(real.run, {"runs/r/run_config.json": deep(100_000, "dict")}),
        "scores beside scores/": replaced(real.run, {}, [(file_info(f"{top}/runs/r/scores"), b"x")]),
        "sweep.json []": replaced(real.sweep, {"sweep.json": b"[]"}),
        "leaderboard.json not JSON": replaced(real.sweep, {"leaderboard/leaderboard.json": b"<html>"}),
        "leaderboard runs [3]": replaced(real.sweep, {"leaderboard/leaderboard.json": b'{"runs": [3]}'}),
        "index []": replaced(real.run, {"ARCHIVE.json": b"[]"}),
        "manifest null": replaced(real.run, {"runs/r/manifest.jsonl": b"null"}),
        "ledger outside": replaced(
            real.run,
            {},
            [
                (
                    file_info(f"{top}/runs/r/batches.json"),
                    json.dumps({"batches": [{"input": "../../../etc/passwd", "rows": []}]}).encode(),
                )
            ],
        ),
    }


CASES = [
    "deep summary.json",
    "deep run_config.json",
    "scores beside scores/",
    "sweep.json []",
    "leaderboard.json not JSON",
    "leaderboard runs [3]",  # a board of the wrong shape: a problem reported, not an AttributeError
    "index []",
    "manifest null",  # found by the property test after the merge (AttributeError in dataset.json's check)
    "ledger outside",  # issue 46: a ledger naming a file outside the run folder does not verify
]


@pytest.mark.parametrize("case", CASES)
def test_the_crafted_archives_of_issue_39_fail_in_one_line(
    real: SimpleNamespace, tmp_path: Path, case: str
) -> None:
    """The real CLI (support.cli.run_cli): verify, then reproduce (which must refuse before sending anything)."""
    path = tmp_path / "c.tar.gz"
    path.write_bytes(named_cases(real)[case])
    res = run_cli("verify", str(path))
    assert res.returncode in (1, 2), res.stdout + res.stderr
    check_outcome(res.returncode, res.stdout, res.stderr, None)
    res = run_cli(
        "reproduce", str(path), "--base-url", "http://127.0.0.1:9/v1", "--run-root", str(tmp_path / "n")
    )
    # a sweep's runs are each reproduced by a child that verifies its own archive (here: no data, exit 3)
    assert res.returncode in (1, 2, 3), res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr, res.stderr
    assert [x for x in res.stderr.splitlines() if x.startswith("error: ")], res.stderr
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize("in_memory", [0, 1 << 20])
def test_members_spilled_to_disk_verify_like_members_kept_in_memory(
    real: SimpleNamespace, tmp_path: Path, in_memory: int
) -> None:
    """Large members go to a temporary folder (here every one, with in_memory 0): same checks, same verdict;
    a duplicate gets its own file and is reported."""
    from evaluator.archive import verify_archive
    from evaluator.archive.read import Limits, read_archive

    path = tmp_path / "r.tar.gz"
    path.write_bytes(real.run)
    result = verify_archive(read_archive(path, Limits(in_memory=in_memory)), tmp_path / "w")
    assert result.ok, result.problems
    entries = entries_of(real.run)
    config = next(e for e in entries if e[0].name.endswith("/run_config.json"))
    path.write_bytes(pack([*entries, (config[0], b"{}")]))
    result = verify_archive(read_archive(path, Limits(in_memory=in_memory)), tmp_path / "w2")
    assert "runs/r/run_config.json" in {p.path for p in result.problems}, result.problems
    assert any("more than once" in p.reason for p in result.problems), result.problems
