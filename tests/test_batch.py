"""`doccount-evaluate --batch` and `doccount batch prepare|collect|cancel` against the loopback Files/Batches
emulator (tests/support/batch_emulator.py), the CLI run as a process."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest
from support.batch_emulator import BatchEmulator
from support.batchrun import FAST, evaluate, interrupt_batch_run, ledger, records
from support.cli import REPO, clean_env, run_cli
from support.datagen import image_bytes
from support.openai_test_server import TestServer

pytestmark = pytest.mark.timeout(120)

KEY = "sk-batch-SECRET-0123456789abcdef"


def line_bodies(root: Path) -> dict[str, bytes]:
    """custom_id -> the exact bytes of each input line's body (the line is written around them)."""
    out = {}
    for path in sorted((root / "batch").glob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            head, sep, body = raw.partition(b', "body": ')
            assert sep and body.endswith(b"}")
            out[json.loads(head + b"}")["custom_id"]] = body[:-1]
    return out


def test_split_run_records_the_online_request_bytes(tmp_path: Path, emu: BatchEmulator, data12: str) -> None:
    flags = ["--seed", "7", "--repeats", "2", "--max-tokens", "64"]
    split = ["--batch", "--batch-max-mb", "0.005", "--concurrency", "3"]
    emu.update_config(step_s=0.3)  # batches live long enough that a missing cap would show
    res = evaluate(emu.base_url, data12, tmp_path / "b", *split, *flags)
    assert res.returncode == 0, res.stderr
    batch = records(tmp_path / "b")
    assert len(batch) == 24 and {r["status"] for r in batch} == {"ok"}
    entries = ledger(tmp_path / "b")["batches"]
    counts = emu.snapshot()["counts"]
    assert len(entries) >= 3, "5 kB files must split 24 rows"
    assert counts["files_uploaded"] == counts["batches_created"] == len(entries)
    assert counts["max_live"] == 3  # --concurrency caps the batches in flight
    assert all(e["state"] == "collected" for e in entries)
    assert all(e["input_bytes"] <= 5_000 for e in entries)
    assert {r["batch_id"] for r in batch} == {e["batch_id"] for e in entries}
    # each line's body is the request the record hashes, byte for byte
    bodies = line_bodies(tmp_path / "b")
    by_key = {(r["sample_id"], r["repeat"]): r for r in batch}
    for cid, body in bodies.items():
        sid, repeat, _ = cid.rsplit("#", 2)
        assert hashlib.sha256(body).hexdigest() == by_key[(sid, int(repeat))]["request_sha256"]
    # and the same settings online send the same bytes, row for row
    online = evaluate(emu.upstream.base_url, data12, tmp_path / "o", *flags)
    assert online.returncode == 0, online.stderr
    on = {(r["sample_id"], r["repeat"]): r["request_sha256"] for r in records(tmp_path / "o")}
    assert on == {k: r["request_sha256"] for k, r in by_key.items()}
    assert all("batch_id" not in r for r in records(tmp_path / "o"))
    upstream = Counter(r["body_sha256"] for r in emu.upstream.requests())
    assert set(upstream.values()) == {2}  # every body once through the batch, once online
    scored = run_cli("score", "--run-root", str(tmp_path / "b"))
    assert scored.returncode == 0, scored.stderr
    summary = json.loads((tmp_path / "b" / "scores" / "summary.json").read_text())["batch"]
    assert summary["mode"] == "batch_api" and summary["batch_ids"] == [e["batch_id"] for e in entries]
    assert summary["responses_from_batches"] == 24 and summary["seconds"] >= 0
    md = [x for x in (tmp_path / "b" / "scores" / "summary.md").read_text().splitlines() if "batch API" in x]
    assert len(md) == 1 and f"{len(entries)} batch(es)" in md[0] and "submission to completion" in md[0]
    assert "Sent through a batch API" in (tmp_path / "b" / "scores" / "report.html").read_text()
    policy = json.loads((tmp_path / "b" / "run_config.json").read_text())["request_policy"]
    assert policy["batch"] == {"mode": "batch_api", "max_mb": 0.005, "poll_s": 0.05}


def test_sigkill_with_batches_in_flight_then_rerun(tmp_path: Path, emu: BatchEmulator, data12: str) -> None:
    emu.update_config(hold=True)
    root = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "evaluator.cli",
        "evaluate",
        "--model",
        "test-model",
        "--base-url",
        emu.base_url,
    ]
    cmd += ["--data-files", data12, "--run-root", str(root), "--batch", "--batch-max-mb", "0.005", *FAST]
    proc = subprocess.Popen(cmd, env=clean_env(), cwd=str(REPO), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            entries = ledger(root)["batches"] if (root / "batches.json").exists() else []
            if (
                entries
                and all(e.get("state") == "created" for e in entries)
                and sum(len(e["rows"]) for e in entries) == 12
            ):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the batches were never all created")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    before = emu.snapshot()["counts"]
    assert records(root) == []
    # as if the kill had come between the create call and saving its id: the batch is found by its file
    book = ledger(root)
    book["batches"][0]["state"] = "uploaded"
    del book["batches"][0]["batch_id"]
    (root / "batches.json").write_text(json.dumps(book))
    emu.release()
    res = evaluate(emu.base_url, data12, root, "--batch", "--batch-max-mb", "0.005")
    assert res.returncode == 0, res.stderr
    after = emu.snapshot()["counts"]
    assert (after["files_uploaded"], after["batches_created"]) == (
        before["files_uploaded"],
        before["batches_created"],
    )
    assert after["lists"] >= 1
    recs = records(root)
    assert sorted(r["sample_id"] for r in recs) == sorted(f"doc-{i:04d}" for i in range(12))
    assert len(emu.upstream.requests()) == 12  # no row sent twice


def test_failed_lines_are_sent_again_in_a_later_batch(
    tmp_path: Path, emu: BatchEmulator, data12: str
) -> None:
    # every non-200 line goes again (issue 26), a 4xx too, until --max-retries is spent
    script = {hashlib.sha256(image_bytes(i)).hexdigest(): ["500"] for i in (2, 5)}
    script[hashlib.sha256(image_bytes(7)).hexdigest()] = ["400"]
    script[hashlib.sha256(image_bytes(9)).hexdigest()] = ["400", "400", "400"]
    emu.upstream.update_config(script=script)
    res = evaluate(emu.base_url, data12, tmp_path / "r", "--batch", "--max-retries", "2")
    assert res.returncode == 3, res.stderr  # doc-0009 failed all 3 of its attempts
    recs = {r["sample_id"]: r for r in records(tmp_path / "r")}
    assert len(recs) == 12 and len(records(tmp_path / "r")) == 12
    entries = ledger(tmp_path / "r")["batches"]
    assert [len(e["rows"]) for e in entries] == [12, 4, 1]
    for sid, code in (("doc-0002", 500), ("doc-0005", 500), ("doc-0007", 400)):
        rec = recs[sid]
        assert rec["status"] == "ok" and rec["batch_id"] == entries[1]["batch_id"] and rec["attempts"] == 2
        assert [(e["kind"], e["status_code"]) for e in rec["retry_errors"]] == [("http_status", code)]
    bad = recs["doc-0009"]
    assert bad["status"] == "request_error" and "HTTP 400" in bad["request_error"]
    assert bad["batch_id"] == entries[2]["batch_id"]
    assert [e["status_code"] for e in bad["retry_errors"]] == [400, 400, 400]


def test_expired_batch_is_resent_without_spending_retries(
    tmp_path: Path, emu: BatchEmulator, data12: str
) -> None:
    emu.update_config(expire=[1], expire_after=5)
    res = evaluate(
        emu.base_url, data12, tmp_path / "x", "--batch", "--max-retries", "1", "--concurrency", "1"
    )
    assert res.returncode == 0, res.stderr
    recs = records(tmp_path / "x")
    assert len(recs) == 12 and {r["status"] for r in recs} == {"ok"}
    entries = ledger(tmp_path / "x")["batches"]
    assert [e["status"] for e in entries] == ["expired", "completed"] and len(entries[1]["rows"]) == 7
    resent = [r for r in recs if r["batch_id"] == entries[1]["batch_id"]]
    assert len(resent) == 7
    assert all([e["kind"] for e in r["retry_errors"]] == ["batch_unfinished"] for r in resent)


def test_failed_validation_records_the_providers_message(
    tmp_path: Path, emu: BatchEmulator, data12: str
) -> None:
    emu.update_config(validation_error="model 'test-model' is not available for batch")
    res = evaluate(emu.base_url, data12, tmp_path / "v", "--batch")
    assert res.returncode == 3, res.stderr
    recs = records(tmp_path / "v")
    assert len(recs) == 12 and {r["status"] for r in recs} == {"request_error"}
    assert all("not available for batch" in r["request_error"] for r in recs)
    assert emu.snapshot()["counts"]["batches_created"] == 1


def test_endpoint_without_batch_api_gives_one_line(tmp_path: Path, data12: str) -> None:
    with TestServer() as srv:
        res = evaluate(srv.base_url, data12, tmp_path / "n", "--batch")
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "has no OpenAI batch API" in errors[0] and "404" in errors[0]
    assert "Traceback" not in res.stderr
    assert json.loads((tmp_path / "n" / "batches.json").read_text())["batches"] == []
    assert list((tmp_path / "n" / "batch").glob("*")) == []


def test_key_never_reaches_a_file(tmp_path: Path, data12: str) -> None:
    with BatchEmulator(
        {
            "step_s": 0.02,
            "api_key": KEY,
            "echo_key": True,
            "error_lines": {"doc-0003": {"code": "server_error", "message": "boom"}},
        }
    ) as emu:
        emu.upstream.update_config(echo_key=True)
        res = evaluate(
            emu.base_url, data12, tmp_path / "k", "--batch", "--max-retries", "1", env={"MODEL_API_KEY": KEY}
        )
    assert KEY not in res.stderr + res.stdout
    for path in (tmp_path / "k").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_max_total_tokens_stops_new_batches(tmp_path: Path, emu: BatchEmulator, data12: str) -> None:
    args = ["--batch", "--batch-max-mb", "0.005", "--concurrency", "1", "--max-total-tokens", "10"]
    res = evaluate(emu.base_url, data12, tmp_path / "t", *args)
    assert res.returncode == 3, res.stderr
    assert emu.snapshot()["counts"]["batches_created"] == 1
    assert "--max-total-tokens" in res.stderr


def test_interrupt_then_cancel_then_rerun(tmp_path: Path, emu: BatchEmulator, data12: str) -> None:
    emu.update_config(hold=True)
    root = tmp_path / "c"
    err = interrupt_batch_run(emu, data12, root)
    assert "doccount batch cancel" in err and emu.snapshot()["batches"][0]["id"] in err
    res = run_cli("batch", "cancel", "--run-root", str(root))
    assert res.returncode == 0, res.stderr
    emu.wait_until(lambda s: s["batches"][0]["status"] == "cancelled")
    emu.release()
    res = evaluate(emu.base_url, data12, root, "--batch")
    assert res.returncode == 0, res.stderr
    assert len(records(root)) == 12 and emu.snapshot()["counts"]["batches_created"] == 2


def test_prepare_then_collect_offline(tmp_path: Path, data12: str) -> None:
    root = tmp_path / "p"
    args = ["--model", "test-model", "--backend", "vllm", "--data-files", data12, "--run-root", str(root)]
    # make eval-batch names the weights run-batch will load (STACK_PROVENANCE): they are recorded
    served = {"DOCCOUNT_SERVED_MODEL": "org/tiny", "DOCCOUNT_MODEL_REVISION": "v1"}
    res = run_cli("batch", "prepare", *args, "--batch-max-mb", "0.005", env=served)
    assert res.returncode == 0, res.stderr
    serving = json.loads((root / "run_config.json").read_text())["serving"]
    assert (serving["model"], serving["revision"]) == ("org/tiny", "v1")
    files = [Path(p) for p in res.stdout.split()]
    assert len(files) >= 3 and all(p.exists() and p.suffix == ".jsonl" for p in files)
    again = run_cli("batch", "prepare", *args)
    assert again.stdout.strip() == ""  # every row is in a file not collected yet
    outputs = []
    with TestServer() as srv:  # answers each line as `vllm run-batch` would, in its output format
        import openai

        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
        for path in files:
            out = path.with_suffix(".output.jsonl")
            with open(out, "w") as f:
                for raw in path.read_text().splitlines():
                    line = json.loads(raw)
                    body = client.chat.completions.create(**line["body"]).model_dump()
                    response = {"status_code": 200, "request_id": "r", "body": body}
                    f.write(
                        json.dumps(
                            {"id": "x", "custom_id": line["custom_id"], "response": response, "error": None}
                        )
                        + "\n"
                    )
            outputs.append(out)
    res = run_cli("batch", "collect", "--run-root", str(root), *map(str, outputs))
    assert res.returncode == 0, res.stderr
    recs = records(root)
    assert len(recs) == 12 and {r["status"] for r in recs} == {"ok"}
    assert all(r["batch_id"].startswith("file:batch/prepared-") for r in recs)
    res = run_cli("batch", "collect", "--run-root", str(root), *map(str, outputs))
    assert len(records(root)) == 12  # collecting twice records nothing twice


def test_collect_parses_under_the_runs_strip_tokens(tmp_path: Path, data12: str) -> None:
    """`batch collect` reads the run's settings from run_config.json, all of them: the tokens the run
    strips before the strict parser are stripped from collected answers too (they were not, before
    the settings became one value)."""
    root = tmp_path / "p"
    args = ["--model", "m", "--backend", "vllm", "--data-files", data12, "--run-root", str(root)]
    res = run_cli("batch", "prepare", *args, "--strip-token", "<|end|>", "--limit", "2")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out.jsonl"
    with open(out, "w") as f:
        for path in res.stdout.split():
            for raw in Path(path).read_text().splitlines():
                message = {"role": "assistant", "content": "<answer>3</answer><|end|>"}
                body = {
                    "id": "c",
                    "object": "chat.completion",
                    "model": "m",
                    "created": 0,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
                response = {"status_code": 200, "request_id": "r", "body": body}
                f.write(
                    json.dumps(
                        {
                            "id": "x",
                            "custom_id": json.loads(raw)["custom_id"],
                            "response": response,
                            "error": None,
                        }
                    )
                    + "\n"
                )
    res = run_cli("batch", "collect", "--run-root", str(root), str(out))
    assert res.returncode == 0, res.stderr
    recs = records(root)
    assert len(recs) == 2
    assert {(r["parsed_answer"], r["response_text"]) for r in recs} == {(3, "<answer>3</answer><|end|>")}


def test_archive_of_a_batch_run_verifies(tmp_path: Path, emu: BatchEmulator, data12: str) -> None:
    root = tmp_path / "a"
    assert evaluate(emu.base_url, data12, root, "--batch").returncode == 0
    assert run_cli("score", "--run-root", str(root), "--no-report").returncode == 0
    archive = tmp_path / "a.tar.gz"
    res = run_cli("archive", "--run-root", str(root), "--output", str(archive))
    assert res.returncode == 0, res.stderr
    res = run_cli("verify", str(archive))
    assert res.returncode == 0, res.stdout + res.stderr  # the summary's batch section re-scores the same
    with tarfile.open(archive) as tar:
        assert any(n.endswith("/batches.json") for n in tar.getnames())


def test_parse_failure_is_resampled_in_a_later_batch(tmp_path: Path, emu: BatchEmulator, data12: str) -> None:
    emu.upstream.update_config(answers={hashlib.sha256(image_bytes(4)).hexdigest(): "I cannot tell."})
    res = evaluate(emu.base_url, data12, tmp_path / "p", "--batch", "--retry-parse-failures", "1")
    assert res.returncode == 0, res.stderr  # a parse failure is an answer: the row is done, as online
    entries = ledger(tmp_path / "p")["batches"]
    assert [len(e["rows"]) for e in entries] == [12, 1]
    rec = next(r for r in records(tmp_path / "p") if r["sample_id"] == "doc-0004")
    assert (
        rec["status"] == "ok" and rec["parsed_answer"] is None and rec["batch_id"] == entries[1]["batch_id"]
    )
    assert [a["response_text"] for a in rec["earlier_attempts"]] == ["I cannot tell."]
    assert len(records(tmp_path / "p")) == 12


def test_collect_takes_a_providers_output_file_downloaded_by_hand(
    tmp_path: Path, emu: BatchEmulator, data12: str
) -> None:
    emu.update_config(hold=True)
    root = tmp_path / "h"
    interrupt_batch_run(emu, data12, root)
    emu.release()
    done = emu.wait_until(lambda s: s["batches"][0]["status"] == "completed")["batches"][0]
    out = tmp_path / "downloaded.jsonl"
    out.write_bytes(emu.file_bytes(done["output_file_id"]))
    res = run_cli("batch", "collect", "--run-root", str(root), str(out))
    assert res.returncode == 0, res.stderr
    recs = records(root)
    assert len(recs) == 12 and {r["batch_id"] for r in recs} == {done["id"]}
    res = evaluate(emu.base_url, data12, root, "--batch")  # nothing left: no new batch, no second record
    assert res.returncode == 0, res.stderr
    assert len(records(root)) == 12 and emu.snapshot()["counts"]["batches_created"] == 1


def test_strip_token_applies_to_batch_answers(tmp_path: Path, emu: BatchEmulator, data12: str) -> None:
    """A batch answer is parsed as an online one: the --strip-token markers removed, the raw text kept."""
    emu.upstream.update_config(answers={}, default_reply="I count 3.\n<answer>3</answer><|end_of_box|>")
    res = evaluate(emu.base_url, data12, tmp_path / "s", "--batch", "--strip-token", "<|end_of_box|>")
    assert res.returncode == 0, res.stderr
    recs = records(tmp_path / "s")
    assert len(recs) == 12 and all(r["parse_status"] == "ok" and r["parsed_answer"] == 3 for r in recs)
    assert all(r["response_text"].endswith("<|end_of_box|>") for r in recs)


# Bounds (trust3 #5): an output file over the 16 MiB reply cap is streamed to disk and collected (before:
# ReplyTooLarge with a traceback on every re-run, so a paid batch could never be collected); a poll that
# drips ends within --batch-max-wait (before: it hung for good).
MiB = 2**20


def test_an_output_file_over_the_reply_cap_is_collected(tmp_path: Path, data12: str) -> None:
    reply = "x" * (int(1.8 * MiB)) + "\n<answer>3</answer>"  # 12 lines: a 21 MiB output file
    with TestServer({"default_reply": reply}) as upstream, BatchEmulator({"step_s": 0.02}, upstream) as emu:
        root = tmp_path / "run"
        res = evaluate(emu.base_url, data12, root, "--batch")
        sizes = [len(emu.file_bytes(b["output_file_id"])) for b in emu.snapshot()["batches"]]
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert sum(sizes) > 20 * MiB, sizes
    rows = records(root)
    assert len(rows) == 12 and all(r["status"] == "ok" and r["parsed_answer"] == 3 for r in rows), rows[0]
    assert [e["state"] for e in ledger(root)["batches"]] == ["collected"]
    assert not [p for p in (root / "batch").iterdir() if not p.name.endswith(".jsonl")]  # nothing left over


def test_a_dripping_poll_ends_within_batch_max_wait(tmp_path: Path, data12: str) -> None:
    with BatchEmulator({"step_s": 0.02, "drip_polls": True}) as emu:
        root = tmp_path / "run"
        t0 = time.monotonic()
        res = evaluate(emu.base_url, data12, root, "--batch", "--batch-max-wait", "3", "--timeout", "600")
        took = time.monotonic() - t0
    assert res.returncode == 3, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert "past --batch-max-wait 3" in res.stderr and "not answering polls" in res.stderr, res.stderr
    assert took < 3 + 20, took  # the CLI's start and the upload besides the 3 s (the drip alone: 5 minutes)
    assert [e["state"] for e in ledger(root)["batches"]] == ["created"]  # collected by a later run
