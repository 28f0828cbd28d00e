"""The serving parts of a study, each on its own: the launchers' argv (the contract), free ports, the
packing (first-fit with backfill, pure), the server guard (real processes), and the sweep file's
[serve] table and per-run serve (refused by line)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.study.executors.local import first_fit, simulate
from evaluator.study.launch import (
    ServerSpec,
    container_argv,
    free_port,
    gpu_args,
    missing_program,
    port_is_free,
    process_argv,
)
from evaluator.study.serve_file import SlurmSettings
from evaluator.study.sweep_file import SweepFileError, load_sweep, option_specs
from evaluator.study.unit import UnitTask, serve_and_evaluate

REPO = Path(__file__).resolve().parents[1]


def test_the_process_launcher_builds_the_contract_argv() -> None:
    spec = ServerSpec(
        model="org/m", served_name="m", revision="abc", args=["--tp", "2"], command=["vllm", "serve"]
    )
    assert process_argv(spec, 8123) == [
        "vllm", "serve", "org/m", "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "m",
        "--revision", "abc", "--tp", "2",
    ]  # fmt: skip
    assert "--revision" not in process_argv(ServerSpec(model="org/m", served_name="m"), 1)


def test_the_container_launcher_passes_the_same_values_and_devices() -> None:
    spec = ServerSpec(model="org/m", served_name="m", revision="abc", args=["--x"], launcher="container")
    argv = container_argv(spec, 9000, ["0", "2"], "doccount-r-9000", hf_cache="/hf")
    assert argv[:5] == ["docker", "run", "--rm", "--name", "doccount-r-9000"]
    assert argv[argv.index("--gpus") + 1] == '"device=0,2"' and "/hf:/root/.cache/huggingface" in argv
    assert {"MODEL=org/m", "SERVED_MODEL_NAME=m", "HOST=127.0.0.1", "PORT=9000"} <= set(argv)
    assert argv[-3:] == ["--revision", "abc", "--x"] and argv[-4] == spec.image
    assert gpu_args("podman", ["1"]) == ["--device", "nvidia.com/gpu=1"] and gpu_args("docker", []) == []
    local = container_argv(
        ServerSpec(model="/models/tiny", served_name="t", launcher="container"), 1, [], "n"
    )
    assert "/models/tiny:/models/tiny:ro" in local and "--gpus" not in local and "MODEL=/models/tiny" in local


def test_a_server_program_that_does_not_exist_fails_its_run_at_once(tmp_path: Path) -> None:
    spec = ServerSpec(model="org/m", served_name="m", command=["no-such-server-program-xyz"])
    assert missing_program(spec) == "no-such-server-program-xyz"
    assert missing_program(ServerSpec(model="m", served_name="m", command=[sys.executable])) is None
    task = UnitTask(run="r", evaluate_args=[], evaluate_log=str(tmp_path / "r.log"), server=spec,
                    server_log=str(tmp_path / "r.server.log"))  # fmt: skip
    result = serve_and_evaluate(task, env={})
    assert result.state == "failed" and "no-such-server-program-xyz is not found" in (result.message or "")
    assert not (tmp_path / "r.server.log").exists()  # nothing was started


def test_a_port_something_listens_on_is_not_free_and_free_port_never_hands_it_out() -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as a server that shares ports would
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert not port_is_free(taken)
        ports = {free_port() for _ in range(20)}
        assert taken not in ports and len(ports) == 20  # handed out ports are not handed out again


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.floats(0.1, 10)), min_size=1, max_size=12),
    st.integers(1, 8),
)
def test_packing_never_shares_a_gpu_and_gives_each_run_its_gpus(runs: list, slots: int) -> None:
    pool = ["0", "1", "2", "3"]
    needs, durations = [n for n, _ in runs], [d for _, d in runs]
    steps = simulate(needs, pool, slots, durations)
    assert sorted(i for i, *_ in steps) == list(range(len(runs)))
    for i, _start, _end, gpus in steps:
        assert len(gpus) == needs[i] and set(gpus) <= set(pool)
    for a in steps:
        overlapping = [b for b in steps if b is not a and a[1] < b[2] and b[1] < a[2]]
        assert all(not set(a[3]) & set(b[3]) for b in overlapping)
        assert sum(1 for b in steps if b[1] <= a[1] < b[2]) <= slots  # at most `slots` at once
    makespan = max(end for _, _, end, _ in steps)
    assert makespan >= max(sum(n * d for n, d in runs) / 4, max(durations)) - 1e-9


def test_first_fit_backfills_later_runs_that_fit() -> None:
    assert first_fit([3, 2, 1], ["0", "1", "2", "3"], 8) == [(0, ["0", "1", "2"]), (2, ["3"])]
    assert first_fit([1, 1, 1], ["0", "1", "2"], 2) == [(0, ["0"]), (1, ["1"])]


# ----------------------------------------------------------------------------- the guard


def guard(tmp: Path, *child: str, parent: int | None = None, grace: float = 1.0, **popen) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "evaluator.study.guard", "--parent", str(parent or os.getpid())]
    return subprocess.Popen([*cmd, "--grace", str(grace), "--", *child], cwd=REPO, **popen)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


STUBBORN = "import signal, time, os, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(os.getpid(), flush=True); time.sleep(600)"  # noqa: E501
TREE = "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print(c.pid, flush=True); time.sleep(600)"  # noqa: E501


def test_the_guard_kills_a_server_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    g = guard(
        tmp_path, sys.executable, "-c", STUBBORN, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    server = int(g.stdout.readline())
    t0 = time.monotonic()
    os.killpg(g.pid, signal.SIGTERM)
    g.wait(15)
    assert not alive(server) and time.monotonic() - t0 < 8


def test_the_guard_stops_the_server_tree_when_its_parent_dies_by_sigkill(tmp_path: Path) -> None:
    # a parent that starts the guard and is then killed: the guard is re-parented and stops its server
    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, subprocess, sys, time; "
         f"subprocess.Popen([sys.executable, '-m', 'evaluator.study.guard', '--parent', str(os.getpid()), '--grace', '1', '--', sys.executable, '-c', {TREE!r}], start_new_session=True); time.sleep(600)"],  # noqa: E501
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    grandchild = int(parent.stdout.readline())
    assert alive(grandchild)
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 10
    while alive(grandchild):
        assert time.monotonic() < deadline, "the server's child outlived the sweep"
        time.sleep(0.1)


# ----------------------------------------------------------------------------- the sweep file


@pytest.fixture(scope="module")
def specs() -> dict:
    from evaluator.cli.main import main as cli

    return option_specs(cli.commands["evaluate"].params)


def load(tmp_path: Path, specs: dict, text: str):
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\ndata_files = "d/*.parquet"\n' + text)
    return load_sweep(path, specs)


@pytest.mark.parametrize(
    "text, message, line",
    [
        ('[serve]\ngpus = [0, 1]\nport = 9\n[[runs]]\nname = "a"\nmodel = "m"\nserve = {}\n', "unknown key `port` in [serve]", 5),
        ('[serve]\npartition = "gpu"\n[[runs]]\nname = "a"\nmodel = "m"\nserve = {}\n', 'set executor = "slurm"', 4),
        ('[serve]\ngpus = [0, 0]\n[[runs]]\nname = "a"\nmodel = "m"\nserve = {}\n', "distinct GPU ids", 4),
        ('[serve]\nlauncher = "container"\ncommand = ["x"]\n[[runs]]\nname = "a"\nmodel = "m"\nserve = {}\n', "give one of them", 5),
        ('[serve]\nruntime = "podman"\n[[runs]]\nname = "a"\nmodel = "m"\nserve = {}\n', '`runtime` needs launcher = "container"', 4),
        ('[[runs]]\nname = "a"\nmodel = "m"\nbase_url = "http://h/v1"\nserve = { gpus = 1 }\n', "has `serve` and `base_url`", 6),
        ('[[runs]]\nname = "a"\nmodel = "m"\nserve = { gpu = 1 }\n', "unknown key `gpu` in serve", 6),
        ('[[runs]]\nname = "a"\nmodel = "m"\nserve = { gpus = -1 }\n', "serve.gpus must be an integer >= 0", 6),
        ('[[runs]]\nname = "a"\nmodel = "m"\nserve = { args = ["--api-key", "sk-abcdefghijklmnop1234"] }\n', "looks like a secret", 6),
        ('[[runs]]\nname = "a"\nmodel = "m"\nserved_model_name = "x"\nbase_url = "http://h/v1"\n', "needs `serve", 6),
    ],
)  # fmt: skip
def test_serve_mistakes_are_refused_by_line(
    tmp_path: Path, specs: dict, text: str, message: str, line: int
) -> None:
    with pytest.raises(SweepFileError) as err:
        load(tmp_path, specs, text)
    assert message in str(err.value) and f"s.toml:{line}:" in str(err.value)
    assert "sk-abcdefghijklmnop1234" not in str(err.value)


def test_a_served_run_sends_its_served_name_and_no_url_of_the_defaults(tmp_path: Path, specs: dict) -> None:
    sweep = load(tmp_path, specs, '[defaults]\nbase_url = "http://h/v1"\n[serve]\ngpus = ["0", "1"]\n'
                 '[[runs]]\nname = "a"\nmodel = "org/m"\nserved_model_name = "mm"\nserve = { revision = "r1", gpus = 2 }\n'
                 '[[runs]]\nname = "b"\nmodel = "api-model"\n')  # fmt: skip
    a, b = sweep.runs
    assert (
        a.serve is not None and a.serve.served_name == "mm" and a.serve.revision == "r1" and a.serve.gpus == 2
    )
    assert a.options["model"] == "mm" and "base_url" not in a.options and a.options["backend"] == "vllm"
    assert b.serve is None and b.options["base_url"] == "http://h/v1"
    assert sweep.serve.gpus == ["0", "1"] and sweep.serve.command == ["vllm", "serve"]
    assert sweep.serve.slurm == SlurmSettings()  # no Slurm key: each its one default


def test_the_container_runtime_is_the_files_choice(tmp_path: Path, specs: dict) -> None:
    sweep = load(tmp_path, specs, '[serve]\nlauncher = "container"\nruntime = "podman"\nimage = "img:1"\n'
                 '[[runs]]\nname = "a"\nmodel = "org/m"\nserve = { gpus = 0 }\n')  # fmt: skip
    assert (sweep.serve.launcher, sweep.serve.runtime, sweep.serve.image) == ("container", "podman", "img:1")
    unset = load(
        tmp_path, specs, '[serve]\nlauncher = "container"\n[[runs]]\nname = "a"\nmodel = "m"\nserve = {}\n'
    )
    assert unset.serve.runtime is None
