"""The reasoning smoke stop in a sweep: two served runs on a one-GPU pool (tests/support/standin_server.py through
`[serve] command`), both declared `reasoning = "on"`; the one whose server answers without reasoning is
"stopped" with its line (sweep.json, the end table, --status), its server is stopped and its GPU goes to
the other run, which finishes. The leaderboard carries each run's declared and observed mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_cli
from support.datagen import doccount_reply
from support.study import Study

pytestmark = pytest.mark.timeout(400)

STOP = "error: reasoning declared on, but 0 of 4 answered responses showed reasoning"


def write_sweep(study: Study) -> Path:
    answers = doccount_reply(study.rows)
    configs = {"plain": {"answers": answers}, "thinks": {"answers": answers, "reasoning": "Rows: 1, 2, 3."}}
    text = (
        f'name = "{study.name}"\ndata_files = "{study.tmp / "data" / "*.parquet"}"\n\n[defaults]\n'
        'concurrency = 2\nmax_retries = 1\nretry_backoff = 0.01\nretry_max_wait = 0.05\ntimeout = 60\nreasoning = "on"\n'
        f"\n[serve]\ngpus = [0]\ncommand = {json.dumps(study.command('--request-log', str(study.requests)))}\n"
    )
    for name, config in configs.items():  # the run's own stand-in config: a later --config wins
        (study.tmp / f"{name}.json").write_text(json.dumps(config))
        args = json.dumps(["--config", str(study.tmp / f"{name}.json")])
        text += f'\n[[runs]]\nname = "{name}"\nmodel = "org/{name}"\nserve = {{ gpus = 1, args = {args} }}\n'
    study.file.write_text(text)
    return study.file


def test_a_stopped_run_frees_its_gpu_and_the_other_run_finishes(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=12, name="modes")
    write_sweep(study)
    res = study.sweep(timeout=360)
    assert res.returncode == 3, res.stderr  # not every run finished
    state = study.state()
    assert state["plain"]["state"] == "stopped" and state["plain"]["exit_code"] == 2
    assert state["plain"]["message"].startswith(STOP)
    assert state["thinks"]["state"] == "done", state["thinks"]
    [table_line] = [x for x in res.stderr.splitlines() if x.startswith("plain ")]
    assert " stopped " in table_line and STOP in table_line  # the end table
    # its server was stopped before the other one started on the same GPU
    servers = {r["name"]: r for r in study.intervals()}
    assert servers["org/plain"]["gpus"] == servers["org/thinks"]["gpus"] == "0"
    assert servers["org/plain"]["end"] <= servers["org/thinks"]["start"]
    assert not study.servers_alive()
    plain = [json.loads(x) for x in study.requests.read_text().splitlines()]
    assert len([r for r in plain if r["body"]["model"] == "org/plain"]) <= 2 + 4
    status = run_cli("sweep", str(study.file), "--run-root", str(study.root), "--status")
    [line] = [x for x in (status.stdout + status.stderr).splitlines() if x.startswith("plain ")]
    assert " stopped " in line and STOP in line
    board = json.loads((study.folder / "leaderboard" / "leaderboard.json").read_text())
    modes = {e["name"]: e["reasoning"] for e in board["runs"]}
    assert modes == {
        "plain": {"declared": "on", "observed_share": 0.0, "observable": True},
        "thinks": {"declared": "on", "observed_share": 1.0, "observable": True},
    }
    page = (study.folder / "leaderboard" / "index.html").read_text()
    assert "Reasoning declared / seen" in page and "100% seen" in page
    report = (study.folder / "plain" / "scores" / "report.html").read_text()
    assert "declared on; 0 of " in report and "answered responses showed reasoning (0.0%)" in report
