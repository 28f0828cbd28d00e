"""`doccount sweep FILE --smoke N` (evaluator.study.rehearsal): a dress rehearsal over served stand-ins
(tests/support/standin_server.py through `[serve] command`, one GPU, so the servers start one after the
other). Three runs declared `reasoning = "on"`: `fine` answers with reasoning, `plain` answers without it
(the reasoning smoke stop: "stopped"), `broken`'s server never starts ("failed"). The table says so, with
each stop line; every server is stopped; the exit is not 0. The full run of `fine` afterwards sends only
the rows the rehearsal did not answer; a rehearsal of a finished run starts nothing and exits 0."""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path

import pytest
from support.datagen import doccount_reply
from support.study import Study

from evaluator.study.rehearsal import figures, warm_latencies

pytestmark = pytest.mark.timeout(500)

ROWS, SMOKE = 12, 4
STOP = "error: reasoning declared on, but 0 of 4 answered responses showed reasoning"


def write_sweep(study: Study) -> Path:
    answers = doccount_reply(study.rows)
    configs = {"fine": {"answers": answers, "reasoning": "Rows: 1, 2, 3."}, "plain": {"answers": answers}}
    text = study.header(concurrency=2) + 'reasoning = "on"\n'
    command = study.command("--state", str(study.tmp / "state"), "--request-log", str(study.requests))
    text += f"\n[serve]\ngpus = [0]\ncommand = {json.dumps(command)}\n"
    serve_args = {name: ["--config", str(study.tmp / f"{name}.json")] for name in configs}
    serve_args["broken"] = ["--fail-starts", "99"]  # every start exits before it is ready
    for name, config in configs.items():
        (study.tmp / f"{name}.json").write_text(json.dumps(config))
    for name, args in serve_args.items():
        text += f'\n[[runs]]\nname = "{name}"\nmodel = "org/{name}"\nserve = {{ gpus = 1, args = {json.dumps(args)} }}\n'
    study.file.write_text(text)
    return study.file


def sent(study: Study, model: str) -> list[str]:
    """The image of every chat request the stand-ins received for `model`, in order."""
    lines = (
        [json.loads(x) for x in study.requests.read_text().splitlines()] if study.requests.exists() else []
    )
    return [r["image_sha256"] for r in lines if (r.get("body") or {}).get("model") == model]


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def table_row(stdout: str, run: str) -> str:
    [line] = [x for x in stdout.splitlines() if x.startswith(f"{run} ")]
    return line


def test_a_rehearsal_tells_which_runs_would_count_and_the_full_run_resumes_from_it(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=ROWS, name="rehearsal")
    write_sweep(study)
    res = study.sweep("--smoke", str(SMOKE), timeout=400)
    print("\n" + res.stdout)  # the rehearsal's table (pytest -s shows it)
    assert res.returncode == 3, res.stderr  # not every run would count
    assert "Traceback" not in res.stderr
    fine, plain, broken = (table_row(res.stdout, r) for r in ("fine", "plain", "broken"))
    assert " done " in fine and f"on / {SMOKE} of {SMOKE}" in fine and f"{SMOKE} / {SMOKE}" in fine
    assert f"{ROWS} rows at 2: " in fine and f"({ROWS - SMOKE} left: " in fine
    assert " stopped " in plain and STOP in plain and f"on / 0 of {SMOKE}" in plain
    assert " failed " in broken and "server: " in broken and "gave up after 3 tries" in broken
    assert "on / -" in broken  # the mode its file declares, though it never answered
    assert "2 run(s) would not count (plain, broken)" in res.stdout
    assert not (study.folder / "leaderboard").exists()  # N questions are not a result
    assert not study.servers_alive()
    # each run answered only its first N questions, in its own folder
    first = [r["image_sha256"] for r in study.rows[:SMOKE]]
    assert sorted(sent(study, "org/fine")) == sorted(first)
    assert len(sent(study, "org/plain")) <= SMOKE and set(sent(study, "org/plain")) <= set(first)
    assert sent(study, "org/broken") == []
    # rehearsal.json: the same rows; the projection is rows x mean latency / concurrency
    rehearsal = json.loads((study.folder / "rehearsal.json").read_text())
    runs = {r["run"]: r for r in rehearsal["runs"]}
    assert rehearsal["smoke"] == SMOKE and runs["plain"]["stop_line"].startswith(STOP)
    records = [
        json.loads(x) for x in (study.folder / "fine" / "responses.partial.jsonl").read_text().splitlines()
    ]
    assert len(records) == SMOKE
    latencies = [r["latency_s"] for r in records]
    # warm: sent (finished_at - latency) after the first wave (the first 2 answers, concurrency 2) came back
    ends = sorted(seconds(r["finished_at"]) for r in records)
    warm = [r["latency_s"] for r in records if seconds(r["finished_at"]) - r["latency_s"] >= ends[1]]
    assert runs["fine"]["projected_from"] == len(warm or latencies)
    assert runs["fine"]["projected_s"] == pytest.approx(ROWS * statistics.fmean(warm or latencies) / 2)
    assert runs["fine"]["median_latency_s"] == pytest.approx(statistics.median(latencies))
    tokens = sum(r["usage"]["completion_tokens"] for r in records)
    assert runs["fine"]["output_tokens_per_s"] == pytest.approx(tokens / sum(latencies))
    assert (runs["fine"]["rows_total"], runs["fine"]["rows_remaining"]) == (ROWS, ROWS - SMOKE)

    # the full run resumes from the rehearsal's answers: only the other rows are sent
    full = study.sweep("--only", "fine", timeout=300)
    assert full.returncode == 0, full.stderr
    after = sent(study, "org/fine")[SMOKE:]
    assert sorted(after) == sorted(r["image_sha256"] for r in study.rows[SMOKE:])
    assert study.state()["fine"]["state"] == "done"

    # a rehearsal of a run that finished starts no server, sends nothing, and would count: exit 0
    starts = len(study.server_records())
    again = study.sweep("--smoke", str(SMOKE), "--only", "fine", timeout=120)
    assert again.returncode == 0, again.stderr
    assert "every run would count" in again.stdout and f"{ROWS} / {ROWS}" in table_row(again.stdout, "fine")
    assert len(study.server_records()) == starts and len(sent(study, "org/fine")) == ROWS


def test_smoke_and_detach_together_are_refused_with_one_line(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=2, name="refused")
    write_sweep(study)
    res = study.sweep("--smoke", "1", "--detach", timeout=60)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: --smoke follows each run to the end of its rehearsal: leave out --detach"
    ]
    assert not study.requests.exists()


# The first 8 answers of a rehearsal on the vLLM CPU server (tiny Qwen2-VL, concurrency 4, a structured-output
# regex of 60 words): (finished_at, latency_s). The first request paid the fresh server's one-time costs.
MEASURED = [
    ("2026-12-07T05:15:07.987Z", 38.1544),
    ("2026-12-07T05:15:15.857Z", 7.8686),
    ("2026-12-07T05:15:16.143Z", 7.6437),
    ("2026-12-07T05:15:16.158Z", 7.4069),
    ("2026-12-07T05:15:16.197Z", 7.9488),
    ("2026-12-07T05:15:16.961Z", 1.0963),
    ("2026-12-07T05:15:17.377Z", 1.148),
    ("2026-12-07T05:15:17.429Z", 1.2596),
]


def test_the_projection_leaves_out_the_first_wave_of_a_fresh_server() -> None:
    records = [
        {"status": "ok", "finished_at": end, "latency_s": lat, "usage": {"completion_tokens": 70}}
        for end, lat in MEASURED
    ]
    # the fourth answer came back at 16.158: only the requests sent after it are warm
    assert warm_latencies(records, 4) == [1.148, 1.2596]
    got = figures(records, 96, 4)
    assert got["projected_from"] == 2 and got["projected_s"] == pytest.approx(96 * (1.148 + 1.2596) / 2 / 4)
    assert got["median_latency_s"] == pytest.approx(7.5253)
    # no answer after the first wave (N not above the concurrency): every answer is used
    assert warm_latencies(records[:4], 4) == []
    few = figures(records[:4], 96, 4)
    assert few["projected_from"] == 4
    assert few["projected_s"] == pytest.approx(96 * statistics.fmean(lat for _, lat in MEASURED[:4]) / 4)
