"""The batch ledger (evaluator/runfolder/batches.py): a ledger names only files of its own run folder.

A crafted `batches.json` (in a run folder, or in an archive that verifies) once had an online resume delete,
and a `--batch` resume upload, any file it named. Each case below plants a victim file outside the run folder
and checks it survives, is never uploaded, and the folder is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.batch_emulator import BatchEmulator
from support.batchrun import evaluate

from evaluator.runfolder.batches import LedgerError, check_input_name, load_ledger

pytestmark = pytest.mark.timeout(180)


def plant(root: Path, name: str, state: str = "written") -> None:
    root.mkdir(parents=True, exist_ok=True)
    entry = {"input": name, "rows": [["x-0", "s0", 0, "0" * 64]], "state": state}
    (root / "batches.json").write_text(json.dumps({"format": 1, "batches": [entry]}))


def victim_paths(tmp_path: Path) -> list[tuple[str, Path]]:
    victim = tmp_path / "home" / "notes.txt"
    return [("../home/notes.txt", victim), ("batch/../../home/notes.txt", victim), (str(victim), victim)]


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_ledger_naming_a_file_outside_the_folder_deletes_and_uploads_nothing(
    tmp_path: Path, emu: BatchEmulator, data12: str, batch: bool
) -> None:
    for i, (name, victim) in enumerate(victim_paths(tmp_path)):
        victim.parent.mkdir(parents=True, exist_ok=True)
        victim.write_text("precious")
        root = tmp_path / f"run{i}"
        plant(root, name, state="written")
        got = evaluate(emu.base_url, data12, root, *(["--batch"] if batch else []))
        assert victim.read_text() == "precious", f"{name!r} deleted a file outside the run folder"
        assert got.returncode == 2, got.stderr
        assert "batches.json" in got.stderr and repr(name) in got.stderr, got.stderr
        assert len([x for x in got.stderr.splitlines() if x.startswith("error:")]) == 1, got.stderr
        assert emu.snapshot()["counts"].get("files_uploaded", 0) == 0
        assert emu.upstream.requests() == [], "a refused folder still sent rows"


def test_a_batch_folder_that_is_a_link_out_of_the_run_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x-0001.jsonl").write_text("keep")
    root = tmp_path / "run"
    plant(root, "batch/x-0001.jsonl")
    (root / "batch").symlink_to(outside)
    with pytest.raises(LedgerError, match="batch/x-0001.jsonl"):
        load_ledger(root)
    (root / "batch").unlink()
    (root / "batch").mkdir()
    (root / "batch" / "x-0001.jsonl").symlink_to(outside / "x-0001.jsonl")
    with pytest.raises(LedgerError):
        load_ledger(root)


def test_the_names_a_run_writes_are_accepted(tmp_path: Path) -> None:
    for name in ("batch/batch-0001.jsonl", "batch/offline-0012.jsonl"):
        check_input_name(tmp_path, name)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab./\\\0~", max_size=14))
def test_an_accepted_name_always_resolves_to_a_file_directly_under_batch(name: str) -> None:
    root = Path("/nonexistent-run")
    try:
        check_input_name(root, name)
    except LedgerError:
        return
    resolved = (root / name).resolve()
    assert resolved.parent == root / "batch", name
    assert not Path(name).is_absolute()
