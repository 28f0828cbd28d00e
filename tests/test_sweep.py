"""`doccount sweep` end to end: the real CLI against several provider emulators at once, each with its
own key and URL layout, one of them with a spent quota; a sweep killed and resumed; a run added to the
file; a run whose settings changed; the archive of the whole sweep."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.cli import REPO, clean_env, processes_naming, sweep_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer
from support.provider_emulators import (
    AnthropicCompat,
    GeminiCompat,
    Moonshot,
    OpenAIReasoning,
    ProviderEmulator,
)

pytestmark = pytest.mark.timeout(240)

ROWS = doccount_rows(4)
# no name starting OPENAI_ (support/launch.py EXCLUSIVE_VARS): a command whose environment sets one runs as a
# process of its own, a second of imports for each sweep, archive and reproduce here
KEYS = {
    "GPT_KEY": "sk-emu-openai-KEY-0000000000001",
    "MOONSHOT_KEY": "sk-emu-moonshot-KEY-00000000002",
    "GEMINI_KEY": "AIza-emu-gemini-KEY-000000000003",
    "ANTHROPIC_KEY": "sk-ant-emu-KEY-0000000000000004",
}


def run_block(name: str, model: str, url: str, key_env: str | None, extra: str = "") -> str:
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    return f'\n[[runs]]\nname = "{name}"\nmodel = "{model}"\nbase_url = "{url}"\n{key}{extra}'


def header(data: str, name: str = "emu") -> str:
    return (
        f'name = "{name}"\ndata_files = "{data}"\n\n[defaults]\nconcurrency = 2\nmax_retries = 1\n'
        'retry_backoff = 0.01\nretry_max_wait = 0.05\ntimeout = 20\n\n[pricing."gpt-5.5"]\ninput = 1.25\n'
        "output = 10.0\ncached_input = 0.125\n"
    )


@pytest.fixture
def data(tmp_path: Path) -> str:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", ROWS)
    return str(tmp_path / "data" / "*.parquet")


def auth_hashes(emu: Any) -> set[str]:
    return {
        r["headers"]["authorization_sha256"] for r in emu.requests() if r["path"].endswith("/completions")
    }


def bearer(key: str) -> str:
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()


def files_text(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_four_providers_at_once_own_keys_a_spent_quota_then_resume(tmp_path: Path, data: str) -> None:
    wrong = doccount_reply(ROWS, wrong={ROWS[1]["sample_id"]})
    with (
        ProviderEmulator(OpenAIReasoning(), answers=wrong) as oa,
        ProviderEmulator(Moonshot(), answers=doccount_reply(ROWS)) as ms,
        ProviderEmulator(GeminiCompat(), answers=wrong, script=["daily_quota"] * 3) as gm,
        ProviderEmulator(AnthropicCompat(), answers=doccount_reply(ROWS)) as an,
    ):
        text = header(data)
        text += run_block("gpt-5.5", "gpt-5.5", oa.base_url, "GPT_KEY", 'preset = "openai-reasoning"\n')
        text += run_block("kimi", "kimi-k2.5", ms.base_url, "MOONSHOT_KEY", "concurrency = 1\n")
        text += run_block("gemma", "gemma-4-31b-it", gm.base_url + "/", "GEMINI_KEY")
        text += run_block(
            "claude", "claude-sonnet-4-5", an.base_url + "/", "ANTHROPIC_KEY", 'top_p = "none"\n'
        )
        sweep_file = tmp_path / "s.toml"
        sweep_file.write_text(text)
        root = tmp_path / "runs"
        res = sweep_cli("sweep", str(sweep_file), "--run-root", str(root), "--parallel", "3", env=KEYS)
        assert res.returncode == 3, res.stderr  # the spent quota: one run did not finish
        for emu, var in ((oa, "GPT_KEY"), (ms, "MOONSHOT_KEY"), (gm, "GEMINI_KEY"), (an, "ANTHROPIC_KEY")):
            assert auth_hashes(emu) == {bearer(KEYS[var])}, var  # each key only to its own endpoint
        state = json.loads((root / "emu" / "sweep.json").read_text())
        assert {n: r["state"] for n, r in state["runs"].items()} == {
            "gpt-5.5": "done", "kimi": "done", "gemma": "failed", "claude": "done",
        }  # fmt: skip
        assert "per-day quota" in state["runs"]["gemma"]["message"]
        for line in ("gemma", "failed", "did not finish"):
            assert line in res.stderr
        board = json.loads((root / "emu" / "leaderboard" / "leaderboard.json").read_text())
        names = [e["name"] for e in board["runs"]]
        assert names[:2] == ["claude", "kimi"] and names[-1] == "gemma"
        gemma = board["runs"][-1]
        assert gemma["complete"] is False and gemma["questions"] == len(ROWS) and gemma["correct"] == 0
        gpt = next(e for e in board["runs"] if e["name"] == "gpt-5.5")
        assert gpt["tokens"]["reasoning"] > 0 and gpt["cost_usd"] and gpt["cost_usd"] > 0
        assert gpt["report"] == "../gpt-5.5/scores/report.html"
        assert (root / "emu" / "gpt-5.5" / "scores" / "report.html").is_file()
        assert len(board["pairwise"]) == 6 and all(p["comparable"] for p in board["pairwise"])
        blob = files_text(root)
        assert not any(k.encode() in blob for k in KEYS.values())

        # resume: only gemma is sent again; the finished runs get nothing, not even a probe
        before = {n: len(e.requests()) for n, e in (("oa", oa), ("ms", ms), ("an", an))}
        gm_before = len(gm.requests())
        gm.set_script([])  # the quota is back
        res2 = sweep_cli("sweep", str(sweep_file), "--run-root", str(root), env=KEYS)
        assert res2.returncode == 0, res2.stderr
        assert {n: len(e.requests()) for n, e in (("oa", oa), ("ms", ms), ("an", an))} == before
        chats = [r for r in gm.requests()[gm_before:] if r["path"].endswith("/completions")]
        assert len(chats) == len(ROWS)
        board = json.loads((root / "emu" / "leaderboard" / "leaderboard.json").read_text())
        assert all(e["complete"] for e in board["runs"])

        # archive, verify
        out = tmp_path / "emu.tar.gz"
        res3 = sweep_cli("archive", "--run-root", str(root / "emu"), "--output", str(out), env=KEYS)
        assert res3.returncode == 0, res3.stderr
        first = out.read_bytes()
        sweep_cli("archive", "--run-root", str(root / "emu"), "--output", str(out), env=KEYS)
        assert out.read_bytes() == first  # deterministic
        res4 = sweep_cli("verify", str(out))
        assert res4.returncode == 0, res4.stdout + res4.stderr
        assert "leaderboard: 4 runs and 6 pairs match" in res4.stdout

        # reproduce one run of the sweep archive: its own key, to the endpoint named for it, a new folder
        n = len(ms.requests())
        again = tmp_path / "again"
        res5 = sweep_cli(
            "reproduce", str(out), "--only", "kimi", "--base-url", f"kimi={ms.base_url}",
            "--run-root", str(again), "--data-files", data, env=KEYS,
        )  # fmt: skip
        assert res5.returncode == 0, res5.stderr
        assert (again / "kimi" / "scores" / "summary.json").is_file() and not (again / "gemma").exists()
        assert {r["headers"]["authorization_sha256"] for r in ms.requests()[n:] if r.get("body")} == {
            bearer(KEYS["MOONSHOT_KEY"])
        }


def test_refused_before_anything_is_sent(tmp_path: Path, data: str) -> None:
    with ProviderEmulator(Moonshot(), answers=doccount_reply(ROWS)) as ms:
        text = header(data) + run_block("a", "kimi-k2.5", ms.base_url, "MOONSHOT_KEY")
        text += run_block("b", "kimi-k2.5", ms.base_url, "OTHER_KEY")
        (tmp_path / "s.toml").write_text(text)
        res = sweep_cli("sweep", str(tmp_path / "s.toml"), "--run-root", str(tmp_path / "runs"), env=KEYS)
        assert res.returncode == 2 and "OTHER_KEY" in res.stderr and "not set" in res.stderr
        (tmp_path / "s.toml").write_text(
            text.replace("concurrency = 2", f'concurrency = 2\nnote = "{KEYS["GPT_KEY"]}"')
        )
        res = sweep_cli("sweep", str(tmp_path / "s.toml"), "--run-root", str(tmp_path / "runs"), env=KEYS)
        assert res.returncode == 2 and "s.toml:6:" in res.stderr and KEYS["GPT_KEY"] not in res.stderr
        assert ms.requests() == []


def test_a_run_added_a_repeat_added_and_changed_settings(tmp_path: Path, data: str) -> None:
    with ProviderEmulator(Moonshot(), answers=doccount_reply(ROWS)) as ms:
        sweep_file = tmp_path / "s.toml"
        root = tmp_path / "runs"
        text = header(data) + run_block("a", "kimi-k2.5", ms.base_url, "MOONSHOT_KEY")
        sweep_file.write_text(text)
        assert sweep_cli("sweep", str(sweep_file), "--run-root", str(root), env=KEYS).returncode == 0
        n = len(ms.requests())
        # amend: run b added, run a gets a second repeat: only b's rows and a's repeat 1 are sent
        text = text + "repeats = 2\n" + run_block("b", "kimi-k2.5", ms.base_url, "MOONSHOT_KEY", "seed = 7\n")
        sweep_file.write_text(text)
        res = sweep_cli("sweep", str(sweep_file), "--run-root", str(root), env=KEYS)
        assert res.returncode == 0, res.stderr
        chats = [r for r in ms.requests()[n:] if r["path"].endswith("/completions")]
        assert len(chats) == 2 * len(ROWS)
        records = [
            json.loads(x) for x in (root / "emu" / "a" / "responses.partial.jsonl").read_text().splitlines()
        ]
        assert sorted(r.get("repeat", 0) for r in records) == [0] * len(ROWS) + [1] * len(ROWS)
        board = json.loads((root / "emu" / "leaderboard" / "leaderboard.json").read_text())
        assert {e["name"] for e in board["runs"]} == {"a", "b"}
        assert next(e for e in board["runs"] if e["name"] == "a")["repeats"]["k"] == 2
        # doccount leaderboard over run folders (not a sweep folder) needs --output
        runs = [str(root / "emu" / "a"), str(root / "emu" / "b")]
        res = sweep_cli("leaderboard", *runs)
        assert res.returncode == 2 and "--output" in res.stderr
        res = sweep_cli("leaderboard", *runs, "--output", str(tmp_path / "board"))
        assert res.returncode == 0 and res.stdout.startswith("# Leaderboard") and "| a |" in res.stdout
        assert json.loads((tmp_path / "board" / "leaderboard.json").read_text())["runs"][0][
            "report"
        ].startswith("../")
        # a changed setting is refused by evaluate: the run's state says so, the others are untouched
        n = len(ms.requests())
        sweep_file.write_text(
            text.replace('model = "kimi-k2.5"', 'model = "kimi-k2.5"\ntemperature = 0.5', 1)
        )
        res = sweep_cli("sweep", str(sweep_file), "--run-root", str(root), env=KEYS)
        assert res.returncode == 3
        assert "refused" in res.stderr and "error:" in res.stderr
        state = json.loads((root / "emu" / "sweep.json").read_text())
        assert state["runs"]["a"]["state"] == "refused" and state["runs"]["b"]["state"] == "done"
        assert [r for r in ms.requests()[n:] if r["path"].endswith("/completions")] == []


def two_run_sweep(tmp_path: Path, srv: TestServer, name: str, second_key: str | None) -> tuple[Path, Path]:
    """A sweep file of two one-at-a-time runs, one (GPT_KEY) and two, on one test server: (file, root)."""
    text = header(str(tmp_path / "data" / "*.parquet"), name).replace("concurrency = 2", "concurrency = 1")
    text += run_block("one", "m1", srv.base_url, "GPT_KEY") + run_block("two", "m2", srv.base_url, second_key)
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(text)
    return sweep_file, tmp_path / "runs"


def start_sweep(sweep_file: Path, root: Path, **popen: Any) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "evaluator.cli", "sweep", str(sweep_file), "--run-root", str(root)]
    return subprocess.Popen(cmd, env=clean_env(**KEYS), cwd=str(REPO), **popen)


def recorded(partial: Path) -> int:
    return partial.read_text().count("\n") if partial.is_file() else 0


def wait_for_rows(partials: list[Path], rows: int | list[int], proc: subprocess.Popen) -> None:
    """Until each run folder has recorded `rows` rows (one count for all, or one per folder), the sweep
    still running."""
    want = rows if isinstance(rows, list) else [rows] * len(partials)
    deadline = time.monotonic() + 60
    while not all(recorded(p) >= n for p, n in zip(partials, want, strict=True)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)


def test_killed_sweep_resumes_without_resending_finished_rows(tmp_path: Path) -> None:
    rows = doccount_rows(6)
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    with TestServer({"answers": doccount_reply(rows), "latency_s": 0.4}) as srv:
        sweep_file, root = two_run_sweep(tmp_path, srv, "kill", "MOONSHOT_KEY")
        proc = start_sweep(
            sweep_file, root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        partials = [root / "kill" / n / "responses.partial.jsonl" for n in ("one", "two")]
        wait_for_rows(partials, 2, proc)
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its evaluate children, as a crash would
        proc.wait(10)
        done_before = {
            (p.parent.name, json.loads(x)["sample_id"]) for p in partials for x in p.read_text().splitlines()
        }
        n = len(srv.requests())
        res = sweep_cli("sweep", str(sweep_file), "--run-root", str(root), env=KEYS)
        assert res.returncode == 0, res.stderr
        resent = [(r["body"]["model"], r["image_sha256"]) for r in srv.requests()[n:]]
        by_sha = {r["image_sha256"]: r["sample_id"] for r in rows}
        assert not {("one" if m == "m1" else "two", by_sha[s]) for m, s in resent} & done_before
        assert len(resent) == 2 * len(rows) - len(done_before)
        board = json.loads((root / "kill" / "leaderboard" / "leaderboard.json").read_text())
        assert [e["correct"] for e in board["runs"]] == [len(rows), len(rows)]


def test_sigterm_stops_every_run_then_children_stop_when_the_resumed_sweep_alone_is_killed(
    tmp_path: Path,
) -> None:
    """SIGTERM to a sweep (it passes the stop on to its children), then SIGKILL to the sweep alone that
    resumes it (its children are not told, and stop by themselves); a last re-run finishes both runs. One
    folder for both: a re-run after each cost two more evaluate and score children."""
    rows = doccount_rows(12)  # enough that the resumed sweep is killed long before it could finish
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    with TestServer({"answers": doccount_reply(rows), "latency_s": 0.4}) as srv:
        sweep_file, root = two_run_sweep(tmp_path, srv, "term", None)
        partials = [root / "term" / n / "responses.partial.jsonl" for n in ("one", "two")]
        # SIGTERM
        proc = start_sweep(sweep_file, root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # both runs past their start: an evaluate child still importing when the stop reaches it dies of
        # the SIGTERM (exit -15, the run "error", not "interrupted"; seen once run two started slowly)
        wait_for_rows(partials, 1, proc)
        proc.send_signal(signal.SIGTERM)  # the sweep only: it passes the stop on to its children
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        state = json.loads((root / "term" / "sweep.json").read_text())
        assert {r["state"] for r in state["runs"].values()} == {"interrupted"}, err
        no_key = [r for r in srv.requests() if r["body"]["model"] == "m2"]
        # a run without api_key_env sends the client's placeholder, never another run's key
        assert no_key and {r["headers"]["authorization_sha256"] for r in no_key} == {bearer("EMPTY")}
        # the resumed sweep alone killed by SIGKILL, once each run recorded a row more
        proc = start_sweep(sweep_file, root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_rows(partials, [recorded(p) + 1 for p in partials], proc)
        children = processes_naming(str(root / "term" / "one"))
        assert children, "the sweep's evaluate child for run one is not running"
        proc.kill()  # the sweep alone, by SIGKILL: its children are not told
        proc.wait(10)
        deadline = time.monotonic() + 20
        while processes_naming(str(root / "term")):
            assert time.monotonic() < deadline, "evaluate children ran on after their sweep was killed"
            time.sleep(0.1)
        assert len(srv.requests()) < 2 * len(rows)  # they stopped early, not by finishing
        res = sweep_cli("sweep", str(sweep_file), "--run-root", str(root), env=KEYS)
        assert res.returncode == 0, res.stderr
        assert len({(r["body"]["model"], r["image_sha256"]) for r in srv.requests()}) == 2 * len(rows)


def test_a_planted_log_link_refuses_the_sweep_and_leaves_its_target(tmp_path: Path) -> None:
    """Issue #46 point 11: the sweep writes logs/<run>.log by name; a link planted there (a shared runs
    folder) is refused with one line before anything is sent, and its target is never written."""
    from support.study import Study

    study = Study(tmp_path, rows=2)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"untouched\n")
    (study.folder / "logs").mkdir(parents=True)
    (study.folder / "logs" / "a.log").symlink_to(victim)
    with TestServer({"answers": doccount_reply(study.rows)}) as server:
        text = (
            study.header(1)
            + f'\n[[runs]]\nname = "a"\nmodel = "test-model"\nbase_url = "{server.base_url}"\n'
        )
        study.file.write_text(text)
        res = sweep_cli("sweep", str(study.file), "--run-root", str(study.root))
        sent = server.requests()
    assert res.returncode == 2, res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith("error: ") and "a.log is a symbolic link" in line, line
    assert victim.read_bytes() == b"untouched\n" and sent == []
