"""Issue 33, batch money and state (points 9, 11, 12, 13), played as an attacker or an unlucky user against
the loopback Files/Batches emulator (tests/support/batch_emulator.py): an interrupted batch run followed by an
online re-run, batch ids that are not ids, a batch that never ends, output files with duplicate lines."""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.batch_emulator import BatchEmulator
from support.batchrun import evaluate, interrupt_batch_run, ledger, records

from evaluator.evaluation.batch import BatchProgress
from evaluator.request.batch_api import BatchInfo, batch_info, usable_batch_id
from evaluator.runfolder.batches import BatchEntry, LedgerRow

pytestmark = pytest.mark.timeout(180)


def keys_of(recs: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    return Counter((r["sample_id"], r.get("repeat") or 0) for r in recs)


# --- 9: a row in a live batch is never sent again, by either path ----------------------------------------


def test_rows_of_a_live_batch_are_not_sent_online_nor_recorded_twice(
    tmp_path: Path, emu: BatchEmulator, data12: str
) -> None:
    emu.update_config(hold=True)
    root = tmp_path / "run"
    interrupt_batch_run(emu, data12, root)
    # the same folder online, while its batch is live at the provider
    online = evaluate(emu.upstream.base_url, data12, root)
    assert emu.upstream.requests() == [], "a row in a live batch was sent again online"
    assert online.returncode == 3, online.stderr
    assert "live batch" in online.stderr and "--batch" in online.stderr
    assert records(root) == []
    # the batch ends; a --batch re-run collects it: one record per question, each row sent once
    emu.release()
    again = evaluate(emu.base_url, data12, root, "--batch")
    assert again.returncode == 0, again.stderr
    assert set(keys_of(records(root)).values()) == {1} and len(records(root)) == 12
    assert len(emu.upstream.requests()) == 12
    assert emu.snapshot()["counts"]["batches_created"] == 1


# --- 11: a batch id that is not a usable id ------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    ident=JSON_VALUES | st.text(alphabet=st.characters(), max_size=300),
    rest=st.dictionaries(
        st.sampled_from(["status", "request_counts", "errors", "output_file_id"]), JSON_VALUES
    ),
)
def test_a_batch_object_of_any_shape_gives_a_usable_id_or_none(ident: Any, rest: dict[str, Any]) -> None:
    info = batch_info({**rest, "id": ident}, lambda s: s)
    assert isinstance(info, BatchInfo)
    assert info.id == "" or (info.id == ident and usable_batch_id(info.id))
    assert all(isinstance(v, int) and v >= 0 for v in info.counts.values())
    for text in (info.status, *info.errors):
        assert not re.search("[\x00-\x1f\x7f-\x9f]", text), text  # one line, nothing a terminal acts on


@pytest.mark.parametrize("bad_id", [["{key}"], "", "../../batches/x", None])
def test_a_batch_id_that_is_not_an_id_is_refused_and_a_rerun_goes_on(
    tmp_path: Path, emu: BatchEmulator, data12: str, bad_id: Any
) -> None:
    emu.update_config(batch_fields={"id": bad_id})
    root = tmp_path / "run"
    res = evaluate(emu.base_url, data12, root, "--batch")
    assert res.returncode == 3, res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "usable batch id" in errors[0], res.stderr
    assert "Traceback" not in res.stderr
    assert not [e for e in ledger(root)["batches"] if e["state"] == "created"]
    # the provider mends its ways: the re-run adopts the batch made from the same file, nothing is sent twice
    emu.update_config(batch_fields={})
    again = evaluate(emu.base_url, data12, root, "--batch")
    assert again.returncode == 0, again.stderr
    assert len(records(root)) == 12 and emu.snapshot()["counts"]["batches_created"] == 1


def test_a_ledger_an_older_version_left_with_an_empty_id_goes_on(
    tmp_path: Path, emu: BatchEmulator, data12: str
) -> None:
    emu.update_config(hold=True)
    root = tmp_path / "run"
    interrupt_batch_run(emu, data12, root)
    book = ledger(root)
    book["batches"][0]["batch_id"] = ""  # what the code before issue 33 saved for an id that was a list
    (root / "batches.json").write_text(json.dumps(book))
    emu.release()
    res = evaluate(emu.base_url, data12, root, "--batch")
    assert res.returncode == 0, res.stderr
    assert len(records(root)) == 12 and emu.snapshot()["counts"]["batches_created"] == 1


# --- 12: waiting is bounded and shown ------------------------------------------------------------------


def test_batch_max_wait_stops_with_exit_3_and_a_rerun_collects(
    tmp_path: Path, emu: BatchEmulator, data12: str
) -> None:
    emu.update_config(hold=True)
    root = tmp_path / "run"
    t0 = time.monotonic()
    res = evaluate(emu.base_url, data12, root, "--batch", "--batch-max-wait", "1")
    assert res.returncode == 3, res.stderr
    assert time.monotonic() - t0 < 30
    assert "--batch-max-wait" in res.stderr and "re-run" in res.stderr.lower()
    waited = [x for x in res.stderr.splitlines() if x.startswith("[batch]") and "waiting" in x]
    assert waited and "0/12 done" in waited[-1], res.stderr
    assert [e["state"] for e in ledger(root)["batches"]] == ["created"]  # the id is kept
    policy = json.loads((root / "run_config.json").read_text())["request_policy"]
    assert policy["batch"]["max_wait_s"] == 1
    emu.release()
    again = evaluate(emu.base_url, data12, root, "--batch", "--batch-max-wait", "1")
    assert again.returncode == 0, again.stderr
    assert len(records(root)) == 12 and emu.snapshot()["counts"]["batches_created"] == 1


def test_progress_is_shown_at_least_once_a_minute_while_nothing_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="doccount")
    clock = [0.0]
    progress = BatchProgress(clock=lambda: clock[0])
    entry = BatchEntry(input="batch/run-0001.jsonl", rows=[LedgerRow("a#0#0", "a", 0, "0" * 64)])
    info = BatchInfo(id="batch_1", status="in_progress", counts={"total": 1, "completed": 0})
    shown = []
    for t in range(0, 301, 5):  # a poll every 5 s for 5 minutes, the batch never changing
        clock[0] = float(t)
        progress.update(entry, info, 1)
        if caplog.records:
            shown.append(t)
            caplog.clear()
    assert shown[0] == 0 and all(b - a <= 60 for a, b in zip(shown, shown[1:], strict=False))
    assert shown[-1] >= 240 and len(shown) <= 7


# --- 13: duplicate custom_id lines ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["error", "answer"])
def test_duplicate_lines_are_reported_and_an_answer_is_never_replaced(
    tmp_path: Path, emu: BatchEmulator, data12: str, kind: str
) -> None:
    emu.update_config(duplicate_lines={"doc-0003": kind})
    root = tmp_path / "run"
    res = evaluate(emu.base_url, data12, root, "--batch")
    assert res.returncode == 0, res.stderr
    recs = {r["sample_id"]: r for r in records(root)}
    assert len(records(root)) == 12
    rec = recs["doc-0003"]
    assert rec["status"] == "ok" and rec["attempts"] == 1 and rec["retry_errors"] == []
    assert "99" not in rec["response_text"]  # the first answer is kept
    dup = [x for x in res.stderr.splitlines() if x.startswith("[batch]") and "duplicate lines" in x]
    assert len(dup) == 1 and "doc-0003#0#0" in dup[0], res.stderr
