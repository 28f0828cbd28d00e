"""The guard's `--remove`: a container server's `rm -f NAME` runs after the server has ended, whether it
was stopped or exited by itself, so no exited container is listed once the sweep is done (podman removes a
`run --rm` container in a cleanup process of its own, which may finish after `stop` returned)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from evaluator.study.launch import ServerSpec, container_name, remove_argv

REPO = Path(__file__).resolve().parents[1]
# a stand-in `rm` that notes it ran, and when: after the server's own marker file
RECORD = "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.write_text(str(pathlib.Path(sys.argv[2]).exists()))"


def run_guard(tmp: Path, server: str, stop: bool) -> str:
    ran, done = tmp / "removed", tmp / "server-ended"
    remove = [sys.executable, "-c", RECORD, str(ran), str(done)]
    child = f"import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(done)!r}).write_text('x'), sys.exit(0))); {server}; pathlib.Path({str(done)!r}).write_text('x')"  # noqa: E501
    cmd = [sys.executable, "-m", "evaluator.study.guard", "--parent", str(os.getpid()), "--grace", "2"]
    cmd += ["--remove", json.dumps(remove), "--", sys.executable, "-c", child]
    g = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, stdout=subprocess.PIPE, text=True)
    if stop:
        assert g.stdout is not None and g.stdout.readline().strip() == "up"
        os.killpg(g.pid, signal.SIGTERM)
    g.wait(30)
    return ran.read_text() if ran.exists() else "not run"


def test_remove_runs_after_a_server_that_was_stopped(tmp_path: Path) -> None:
    assert run_guard(tmp_path, "print('up', flush=True); time.sleep(600)", stop=True) == "True"


def test_remove_runs_after_a_server_that_exited_by_itself(tmp_path: Path) -> None:
    assert run_guard(tmp_path, "pass", stop=False) == "True"


def test_only_a_container_launch_has_a_remove_command() -> None:
    container = ServerSpec(model="m", served_name="m", launcher="container", runtime="podman")
    assert remove_argv(container, "r", 9000) == ["podman", "rm", "-f", container_name("r", 9000)]
    assert remove_argv(ServerSpec(model="m", served_name="m"), "r", 9000) is None
