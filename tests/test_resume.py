"""Resumption: a killed run picks up where it stopped without re-sending finished rows; dry runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.cli import FAST_RETRIES, REPO, eval_args, read_records, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount


def test_sigkill_mid_run_then_resume_sends_no_finished_row_again(tmp_path, server) -> None:
    rows = doccount_rows(40)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    server.set_config({"answers": doccount_reply(rows), "latency_s": 0.2})
    args = [
        *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), tmp_path / "r", model="m"),
        "--concurrency",
        "4",
        *FAST_RETRIES,
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaluator.cli", "evaluate", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partial = tmp_path / "r" / "responses.partial.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        not partial.exists() or len(partial.read_bytes().splitlines()) < 10
    ):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {r["sample_id"] for r in read_records(tmp_path / "r")}
    assert 10 <= len(done_before) < 40
    sent_before = len(server.requests())
    server.reset()
    res = run_cli("evaluate", *args)
    assert res.returncode == 0, res.stderr
    resent = {r["image_sha256"] for r in server.requests()}
    finished_hashes = {r["image_sha256"] for r in rows if r["sample_id"] in done_before}
    assert not (resent & finished_hashes), "a finished row was sent again"
    recs = read_records(tmp_path / "r")
    assert sorted(r["sample_id"] for r in recs) == sorted(r["sample_id"] for r in rows)  # once each
    assert sent_before >= len(done_before)
    res = run_cli("score", "--run-root", str(tmp_path / "r"))
    assert res.returncode == 0 and "40 / 40" in res.stdout


def test_errors_and_parse_failures_are_retried_on_rerun_ok_rows_are_not(
    tmp_path, doc_data, doc_rows, server
) -> None:
    answers = doccount_reply(doc_rows)
    bad, unparsable = doc_rows[0]["image_sha256"], doc_rows[1]["image_sha256"]
    answers[unparsable] = "no tag here"
    server.set_config({"answers": answers, "script": {bad: ["400"]}})
    args = [
        "evaluate",
        *eval_args(server.base_url, doc_data, str(tmp_path / "r")),
        *FAST_RETRIES,
    ]
    assert run_cli(*args).returncode == 3
    server.reset()
    answers[unparsable] = f"<answer>{doc_rows[1]['answer']}</answer>"
    server.set_config({"answers": answers})
    assert run_cli(*args).returncode == 0
    assert sorted(r["image_sha256"] for r in server.requests()) == sorted([bad, unparsable])
    server.reset()
    assert run_cli(*args).returncode == 0
    assert server.requests() == []  # everything is done: nothing is sent
    assert run_cli(*args, "--overwrite").returncode == 0
    assert len(server.requests()) == len(doc_rows)


def test_changed_protocol_settings_are_refused_in_the_same_run_folder(tmp_path, doc_data, server) -> None:
    base = [
        "evaluate",
        "--base-url",
        server.base_url,
        "--data-files",
        doc_data,
        "--run-root",
        str(tmp_path / "r"),
        "--limit",
        "2",
    ]
    assert run_cli(*base, "--model", "m").returncode == 0
    res = run_cli(*base, "--model", "other")
    assert res.returncode == 2 and "different model" in res.stderr
    res = run_cli(*base, "--model", "m", "--temperature", "0")
    assert res.returncode == 2 and "sampling" in res.stderr


def test_dry_run_validates_without_calling_a_model(tmp_path, doc_rows, server) -> None:
    write_doccount(tmp_path / "ok" / "test-0.parquet", doc_rows)
    res = run_cli("evaluate", "--model", "m", "--dry-run", "--data-files", str(tmp_path / "ok" / "*.parquet"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK" in res.stdout and "target_class=Table: 3" in res.stdout
    bad = [dict(r) for r in doc_rows]
    bad[4]["image_sha256"] = "f" * 64
    bad[7]["answer"] = -1
    write_doccount(tmp_path / "bad" / "test-0.parquet", bad)
    res = run_cli(
        "evaluate", "--model", "m", "--dry-run", "--data-files", str(tmp_path / "bad" / "*.parquet")
    )
    assert res.returncode == 1
    assert "doc-0004" in res.stdout and "doc-0007" in res.stdout and "2 row(s) failed" in res.stdout
    assert server.requests() == []
    assert not Path(REPO / "runs" / "doccount__m").exists()


def test_relabelled_data_is_refused_in_the_same_run_folder(tmp_path, doc_rows, server) -> None:
    write_doccount(tmp_path / "d" / "test-0.parquet", doc_rows)
    args = [
        "evaluate",
        *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), str(tmp_path / "r")),
    ]
    assert run_cli(*args).returncode == 0
    relabelled = [dict(r) for r in doc_rows]
    relabelled[0]["answer"] += 1  # same images and ids, another ground truth
    write_doccount(tmp_path / "d" / "test-0.parquet", relabelled)
    res = run_cli(*args)
    assert res.returncode == 2 and "ground truth" in res.stderr


def test_every_server_that_served_the_run_is_recorded(tmp_path, doc_data) -> None:
    from support.openai_test_server import TestServer

    args = ["evaluate", "--model", "m", "--data-files", doc_data, "--run-root", str(tmp_path / "r")]
    with TestServer({"served_model": "first", "default_reply": "no tag"}) as a:
        run_cli(*args, "--base-url", a.base_url)
    with TestServer({"served_model": "second"}) as b:
        assert run_cli(*args, "--base-url", b.base_url).returncode == 0
    config = json.loads((tmp_path / "r" / "run_config.json").read_text())
    assert [s["models"] for s in config["server_history"]] == [["first"], ["second"]]
    assert config["invocations"] == 2 and config["server"]["models"] == ["second"]


def test_a_changed_prompt_is_refused_in_the_same_run_folder(tmp_path, doc_rows, server) -> None:
    """Same images, ids and answers, another prompt text for one question: the re-run is refused (no
    finished row answering the old prompt is mixed with new ones), and nothing is sent."""
    write_doccount(tmp_path / "d" / "test-0.parquet", doc_rows)
    args = ["evaluate", *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), str(tmp_path / "r"))]
    assert run_cli(*args).returncode == 0
    manifest = (tmp_path / "r" / "manifest.jsonl").read_text()
    assert all("messages_sha256" in json.loads(line) for line in manifest.splitlines())
    reworded = [dict(r) for r in doc_rows]
    reworded[3]["prompt"] = reworded[3]["prompt"].replace("Question:", "Question (reworded):")
    assert reworded[3]["prompt"] != doc_rows[3]["prompt"]
    write_doccount(tmp_path / "d" / "test-0.parquet", reworded)
    server.reset()
    res = run_cli(*args, "--overwrite")
    assert res.returncode == 2, res.stderr
    assert "1 question(s)" in res.stderr and "doc-0003" in res.stderr and "--run-name" in res.stderr
    assert server.requests() == []
    assert (tmp_path / "r" / "manifest.jsonl").read_text() == manifest


def test_a_later_smaller_limit_never_shrinks_the_question_set(tmp_path, doc_data, doc_rows, server) -> None:
    server.set_config({"answers": doccount_reply(doc_rows)})
    args = ["evaluate", *eval_args(server.base_url, doc_data, str(tmp_path / "r"))]
    assert run_cli(*args).returncode == 0  # all 12
    server.reset()
    res = run_cli(*args, "--limit", "2", "--overwrite")  # re-evaluates the first 2 only
    assert res.returncode == 0, res.stderr
    assert len(server.requests()) == 2 and "of the folder's 12" in res.stderr
    lines = (tmp_path / "r" / "manifest.jsonl").read_text().splitlines()
    assert [json.loads(line)["sample_id"] for line in lines] == [r["sample_id"] for r in doc_rows]
    res = run_cli("score", "--run-root", str(tmp_path / "r"), "--no-report")
    assert res.returncode == 0, res.stderr
    assert "12 / 12" in res.stdout and "2 / 2" not in res.stdout


def test_a_limit_run_grows_into_the_full_set(tmp_path, doc_data, doc_rows, server) -> None:
    server.set_config({"answers": doccount_reply(doc_rows)})
    args = ["evaluate", *eval_args(server.base_url, doc_data, str(tmp_path / "r"))]
    assert run_cli(*args, "--limit", "3").returncode == 0
    assert "3 / 3" in run_cli("score", "--run-root", str(tmp_path / "r"), "--no-report").stdout
    server.reset()
    assert run_cli(*args).returncode == 0
    assert len(server.requests()) == 9  # the 3 done ones are not sent again
    assert "12 / 12" in run_cli("score", "--run-root", str(tmp_path / "r"), "--no-report").stdout
