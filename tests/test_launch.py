"""support/launch.py forks the tests' CLI processes from a pre-warmed interpreter: each command here
gives the same exit status, stdout and stderr that a fresh interpreter gives (subprocess.run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import launch
from support.cli import EVALUATE, REPO, clean_env, eval_args
from support.datagen import complete_records, doccount_rows, write_doccount
from support.openai_test_server import TestServer

PROBE = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'path0': sys.path[0],"
    " 'env': os.environ.get('PROBE_VAR'), 'stdin': sys.stdin.read(), 'openai': 'openai' in sys.modules}));"
    " print('to stderr', file=sys.stderr); sys.exit(int(os.environ.get('PROBE_EXIT', '0')))"
)


@pytest.fixture(autouse=True)
def warm_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare the two ways, also in a `DOCCOUNT_TEST_COLD=1` run of the suite."""
    monkeypatch.delenv("DOCCOUNT_TEST_COLD", raising=False)


def both(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    assert launch.zygote() is not None, "the warm interpreter did not start: every test here would be cold"
    warm = launch.run(cmd, capture_output=True, **kw)
    cold = subprocess.run(cmd, capture_output=True, **kw)
    return warm, cold


def test_a_warm_child_has_its_own_argv_env_cwd_stdin_and_exit_status(tmp_path: Path) -> None:
    env = clean_env(PROBE_VAR="given", PROBE_EXIT="7")
    warm, cold = both([sys.executable, "-c", PROBE, "a b", "--x"], env=env, cwd=tmp_path, input=b"in\r\n")
    assert (warm.returncode, warm.stderr) == (cold.returncode, cold.stderr) == (7, b"to stderr\n")
    seen = json.loads(warm.stdout)
    assert seen == {**json.loads(cold.stdout), "openai": True}  # only what was imported before differs
    assert seen["argv"] == ["-c", "a b", "--x"] and seen["cwd"] == str(tmp_path) and seen["env"] == "given"
    assert seen["path0"] == "" and seen["stdin"] == "in\r\n"


def test_module_mode_text_mode_and_a_usage_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "evaluator.cli", "score", "--run-root", str(tmp_path / "none"), "--nope"]
    warm, cold = both(cmd, env=clean_env(), cwd=REPO, text=True)
    assert warm.returncode == cold.returncode == 2
    assert warm.stdout == cold.stdout and warm.stderr == cold.stderr and "--nope" in warm.stderr


def test_a_whole_evaluation_gives_the_same_records_and_output(tmp_path: Path) -> None:
    write_doccount(tmp_path / "data" / "test-0.parquet", doccount_rows(6))
    data = str(tmp_path / "data" / "*.parquet")
    with TestServer() as srv:
        runs = {}
        for how, run in (("warm", launch.run), ("cold", subprocess.run)):
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
    assert records["warm"] == records["cold"] and len(records["warm"]) == 6
    # the last line names the run folder, which differs; the counts before it do not
    assert (
        runs["warm"].stderr.splitlines()[-1].split("|")[:2]
        == runs["cold"].stderr.splitlines()[-1].split("|")[:2]
    )


def test_a_timeout_kills_the_warm_child_as_subprocess_would(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired):
        launch.run([sys.executable, "-c", code], capture_output=True, timeout=2, env=clean_env())
    pid = int(marker.read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text():
            break
        os.sched_yield()
        __import__("time").sleep(0.1)
    else:
        pytest.fail(f"the timed-out child {pid} still runs")


def test_a_signal_is_a_negative_returncode_and_startup_settings_go_cold(tmp_path: Path) -> None:
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    warm, cold = both([sys.executable, "-c", kill], env=clean_env())
    assert warm.returncode == cold.returncode == -9
    # PYTHONHASHSEED changes how the interpreter starts: such a command gets a fresh interpreter
    probe = "import sys; print('openai' in sys.modules)"
    fresh = launch.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       env=clean_env(PYTHONHASHSEED="123"))  # fmt: skip
    assert fresh.stdout.strip() == "False"
    # a child that watches its parent (evaluation/ending.py) is the caller's own child
    parent = "import os; print(os.getppid())"
    watched = launch.run([sys.executable, "-c", parent], capture_output=True, text=True,
                         env=clean_env(DOCCOUNT_PARENT_PID=str(os.getpid())))  # fmt: skip
    assert watched.stdout.strip() == str(os.getpid())


def test_a_dead_warm_interpreter_is_replaced_and_the_command_still_runs(tmp_path: Path) -> None:
    probe = [sys.executable, "-c", "import os, sys; print('openai' in sys.modules, os.getppid())"]
    first = launch.zygote()
    assert first is not None
    first["proc"].kill()
    first["proc"].wait()
    with pytest.warns(UserWarning, match="warm interpreter is gone"):
        fresh = launch.run(probe, capture_output=True, text=True, env=clean_env())
    assert fresh.returncode == 0 and fresh.stdout.split()[0] == "False"  # a fresh interpreter ran it
    again = launch.run(probe, capture_output=True, text=True, env=clean_env())
    second = launch.zygote()
    assert second is not None and second["proc"].pid != first["proc"].pid
    assert again.stdout.split() == ["True", str(second["proc"].pid)]  # forked from the new one


def test_doccount_test_cold_starts_every_command_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = [sys.executable, "-c", "import sys; print('openai' in sys.modules)"]
    assert launch.run(probe, capture_output=True, text=True, env=clean_env()).stdout.strip() == "True"
    monkeypatch.setenv("DOCCOUNT_TEST_COLD", "1")
    assert launch.run(probe, capture_output=True, text=True, env=clean_env()).stdout.strip() == "False"
