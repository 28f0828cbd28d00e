"""support/launch.py runs the evaluator's own command lines in this process (support/inprocess.py): each
command here gives the same exit status, stdout and stderr in this process as in a fresh interpreter
(subprocess.run), twice in a row, and leaves this process's environment, working directory, argv and
output handlers as they were; commands that need a process of their own still get one."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support import inprocess, launch
from support.cli import EVALUATE, REPO, SCORE, clean_env, doccount, eval_args
from support.datagen import complete_records, doccount_rows, write_doccount
from support.openai_test_server import TestServer


def both(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    assert launch.cli_command(cmd) is not None, f"{cmd[:3]} would not run in this process"
    here = launch.run(cmd, capture_output=True, text=True, **kw)
    fresh = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return here, fresh


def test_a_usage_error_is_the_same_here_and_in_a_process(tmp_path: Path) -> None:
    cmd = doccount("score", "--run-root", str(tmp_path / "none"), "--nope")
    here, fresh = both(cmd, env=clean_env(), cwd=REPO)
    assert here.returncode == fresh.returncode == 2
    assert here.stdout == fresh.stdout and here.stderr == fresh.stderr and "--nope" in here.stderr


def test_a_user_error_help_and_version_are_the_same_here_and_in_a_process(tmp_path: Path) -> None:
    for cmd in (
        [*SCORE, str(tmp_path / "missing")],
        [*EVALUATE, "--help"],
        doccount("--version"),
        doccount("no-such-command"),
        [sys.executable, "-c", "from evaluator.cli import main; main()", "score", "--nope"],
    ):
        here, fresh = both(cmd, env=clean_env(), cwd=tmp_path)
        assert (here.returncode, here.stdout, here.stderr) == (
            fresh.returncode,
            fresh.stdout,
            fresh.stderr,
        ), cmd


def test_a_whole_evaluation_gives_the_same_records_and_output_twice(tmp_path: Path) -> None:
    write_doccount(tmp_path / "data" / "test-0.parquet", doccount_rows(6))
    data = str(tmp_path / "data" / "*.parquet")
    with TestServer() as srv:
        runs = {}
        for how, run in (("here", launch.run), ("again", launch.run), ("fresh", subprocess.run)):
            cmd = [*EVALUATE, *eval_args(srv.base_url, data, tmp_path / how, model="test-model")]
            done = run(cmd, capture_output=True, text=True, env=clean_env(), timeout=120)
            assert done.returncode == 0, done.stderr[-2000:]
            runs[how] = done
    records = {
        how: sorted(
            (r["sample_id"], r["status"], r["parsed_answer"]) for r in complete_records(tmp_path / how)
        )
        for how in runs
    }
    assert records["here"] == records["again"] == records["fresh"] and len(records["here"]) == 6
    # the last line names the run folder, which differs; the counts before it do not
    last = {how: done.stderr.splitlines()[-1].split("|")[:2] for how, done in runs.items()}
    assert last["here"] == last["again"] == last["fresh"]


def test_the_environment_is_the_childs_and_this_process_is_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_API_KEY", "sk-this-machines-own")
    before = (dict(os.environ), os.getcwd(), list(sys.argv), sys.stdout, sys.stderr)
    root_handlers = list(logging.getLogger().handlers)
    # the key is not in the child's environment: evaluate says it needs one (a local URL needs none, so a
    # remote one), and the message is the same as a process's
    cmd = [*EVALUATE, *eval_args("https://api.example.invalid/v1", "x.parquet", tmp_path / "r")]
    here, fresh = both(cmd, env=clean_env(), cwd=tmp_path)
    assert (here.returncode, here.stderr) == (fresh.returncode, fresh.stderr) and here.returncode != 0
    assert "sk-this-machines-own" not in here.stderr
    assert (dict(os.environ), os.getcwd(), sys.argv, sys.stdout, sys.stderr) == before
    added = [h for h in logging.getLogger().handlers if h not in root_handlers]
    assert all(getattr(h, "stream", None) is sys.stderr for h in added)  # none bound to a finished call's


def test_commands_that_need_a_process_get_one(tmp_path: Path) -> None:
    probe = [sys.executable, "-c", "import os; print(os.getpid())"]
    assert launch.run(probe, capture_output=True, text=True).stdout.strip() != str(os.getpid())
    # a hub setting is read once, when huggingface_hub is imported: such a command is a process of its own
    pid_of = [sys.executable, "-m", "evaluator.cli", "--version"]
    assert launch.cli_command(pid_of) == ("doccount", ["--version"])
    marker = tmp_path / "sitecustomize.py"
    marker.write_text(f"open({str(tmp_path / 'started')!r}, 'w').close()\n")
    launch.run(
        pid_of,
        capture_output=True,
        text=True,
        env=clean_env(HF_HUB_OFFLINE="1", PYTHONPATH=f"{tmp_path}:{REPO}"),
    )
    assert (tmp_path / "started").exists()  # a fresh interpreter ran it (it read sitecustomize)
    # a signal is a negative returncode, as before
    kill = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    assert launch.run(kill, capture_output=True).returncode == -9


def test_a_bug_is_a_traceback_and_exit_1_here_as_in_a_process(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run_config.json").write_text(
        "[]"
    )  # valid JSON, not a config: read as a bug or refused
    here, fresh = both([*SCORE, str(tmp_path / "run")], env=clean_env(), cwd=tmp_path)
    assert here.returncode == fresh.returncode
    assert ("Traceback" in here.stderr) == ("Traceback" in fresh.stderr)


def test_what_other_threads_write_during_a_call_is_not_the_commands_output() -> None:
    """A test's loopback server runs in a thread of this process: its log lines and prints during a call go
    where they went before, not into the command's stderr (as a server in another process would)."""
    from evaluator.cli.base import CurrentStderr, show_warnings

    show_warnings()
    show_warnings()  # as a second command in this process calls it: still one handler, writing to the current stderr
    assert sum(isinstance(h, CurrentStderr) for h in logging.getLogger().handlers) == 1
    go, done = threading.Event(), threading.Event()

    def server() -> None:
        go.wait(10)
        print("server print", file=sys.stderr)
        logging.getLogger("aiohttp.server").error("server log line")
        done.set()

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    texts: list[str] = []
    with inprocess.captured_output(texts):
        go.set()
        assert done.wait(10)
        print("command print", file=sys.stderr)
        logging.getLogger("evaluator.request.client").warning("command log line")
    thread.join(10)
    assert texts == ["", "command print\ncommand log line\n"]
