"""The sweep-to-evaluate contract (evaluator.runfolder.handoff): a LaunchContract file in, an Outcome file
out. The Structs round-trip and refuse what is not theirs; a real unit (serve_and_evaluate) against a
stand-in server on loopback records `launch` and `serving` from the contract, and takes its state and
cause from the child's outcome file, not from its stderr (a child whose stderr is thrown away still
tells why it stopped); a child that leaves no outcome is judged by its exit code, never by a stale file."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.core.errors import ExitCode
from evaluator.core.vocab import UnitEnd
from evaluator.runfolder.handoff import (
    HANDOFF_ENV,
    LaunchContract,
    Outcome,
    Rows,
    decode_contract,
    decode_outcome,
    encode_contract,
    encode_outcome,
    outcome_state,
)
from evaluator.runfolder.runconfig import Launch
from evaluator.runfolder.serving import Gpu, Serving
from evaluator.study.launch import ServerSpec
from evaluator.study.unit import UnitResult, UnitTask, serve_and_evaluate

pytestmark = pytest.mark.timeout(240)

STANDIN = str(Path(__file__).resolve().parent / "support" / "standin_server.py")
IMAGE_ID = "sha256:" + "5e" * 32
GPU_LINE = "NVIDIA Stand-in 80GB, 81559 MiB, 550.54.15"
# a container runtime on this host: `image inspect` prints the image id; `run` serves with the stand-in
# (the launcher's variables MODEL, SERVED_MODEL_NAME, HOST, PORT; revision and args after the image)
FAKE_RUNTIME = """#!{python}
import os, sys
a = sys.argv[1:]
if a[:2] == ["image", "inspect"]:
    print("{image}")
elif a[:1] == ["run"]:
    env = dict(x.split("=", 1) for x in a[a.index("--rm"):] if "=" in x and x.split("=")[0].isupper())
    rest = a[a.index("{tag}") + 1:]
    os.execv(sys.executable, [sys.executable, "{standin}", env["MODEL"], "--host", env["HOST"],
             "--port", env["PORT"], "--served-model-name", env["SERVED_MODEL_NAME"], *rest])
"""
STOP = "error: reasoning declared on, but 0 of 4 answered responses showed reasoning"

# ----------------------------------------------------------------------------- the Structs

text = st.text(max_size=20)
maybe = st.none() | text
launches = st.builds(
    Launch,
    launcher=st.sampled_from(["process", "container"]),
    command=st.lists(text, max_size=5),
    gpus=st.lists(text, max_size=4),
    image=maybe,
    tries=st.integers(1, 3),
    host=maybe,
    job_id=maybe,
    partition=maybe,
)
gpus = st.builds(Gpu, name=text, memory_total=text, driver_version=text)
serving = st.builds(
    Serving,
    model=maybe,
    revision=maybe,
    commit=maybe,
    image=maybe,
    args=st.lists(text, max_size=5),
    gpus=st.lists(gpus, max_size=3),
)
contracts = st.builds(LaunchContract, outcome=text, launch=st.none() | launches, served=st.none() | serving)
outcomes = st.builds(
    Outcome,
    state=st.sampled_from(["done", "failed", "error", "refused", "stopped", "interrupted"]),
    exit_code=st.sampled_from(list(ExitCode)),
    cause=maybe,
    smoke_stop=st.booleans(),
    rows=st.none() | st.builds(Rows, ok=st.integers(0, 10**6), request_error=st.integers(0, 10**6)),
)


@settings(max_examples=60, deadline=None)
@given(contracts, outcomes)
def test_the_contract_and_the_outcome_round_trip(contract: LaunchContract, outcome: Outcome) -> None:
    assert decode_contract(encode_contract(contract)) == contract
    back = decode_outcome(encode_outcome(outcome))
    assert back == outcome and type(back.exit_code) is ExitCode


def test_what_is_not_a_contract_or_an_outcome_is_refused() -> None:
    bad_contracts = [b'{"outcome": "o", "extra": 1}', b'{"launch": null}', b'{"outcome": 3}', b"[", b""]
    for raw in bad_contracts:
        with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
            decode_contract(raw)
    bad_outcomes = [
        b'{"state": "pending", "exit_code": 0}',  # a run state no unit ends in
        b'{"state": "done", "exit_code": 4}',  # no such exit code
        b'{"state": "done", "exit_code": "0"}',
        b'{"state": "done", "exit_code": 0, "secret": "x"}',
    ]
    for raw in bad_outcomes:
        with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
            decode_outcome(raw)


def test_exit_codes_map_to_states_and_only_an_exit_2_is_a_smoke_stop() -> None:
    assert [outcome_state(c) for c in ExitCode] == ["done", "error", "refused", "failed", "interrupted"]
    assert outcome_state(ExitCode.USAGE, smoke_stop=True) == "stopped"
    assert outcome_state(ExitCode.INCOMPLETE, smoke_stop=True) == "failed"
    assert outcome_state(-15) == "error"


# ----------------------------------------------------------------------------- a real unit


def unit(
    tmp: Path, rows: int, config: dict, *args: str, python: str = sys.executable, serve: tuple[str, ...] = ()
) -> UnitTask:
    """A served run's unit: the stand-in server (answers per `config`, `serve` its more arguments),
    evaluate with `args`."""
    data = doccount_rows(rows)
    write_doccount(tmp / "data" / "test-00000-of-00001.parquet", data)
    (tmp / "cfg.json").write_text(json.dumps({"answers": doccount_reply(data), **config}))
    (tmp / "logs").mkdir(exist_ok=True)
    spec = ServerSpec(
        model="org/tiny", served_name="tiny", revision="v1", args=list(serve or ("--hold-s", "0")),
        command=[sys.executable, STANDIN, "--config", str(tmp / "cfg.json")],
    )  # fmt: skip
    evaluate_args = [
        "--data-files", str(tmp / "data" / "*.parquet"), "--model", "tiny", "--concurrency", "1",
        "--max-retries", "1", "--retry-backoff", "0.01", "--timeout", "60", "--quiet", *args,
        "--run-root", str(tmp / "run"),
    ]  # fmt: skip
    return UnitTask(
        run="r", evaluate_args=evaluate_args, evaluate_log=str(tmp / "logs" / "r.log"), server=spec,
        server_log=str(tmp / "logs" / "r.server.log"), python=python, ready_timeout_s=60,
    )  # fmt: skip


def fake_host(tmp: Path) -> tuple[str, str]:
    """A container runtime and an nvidia-smi on a PATH folder: (the runtime's path, the folder)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    runtime = bin_dir / "fakedocker"
    runtime.write_text(
        FAKE_RUNTIME.format(python=sys.executable, image=IMAGE_ID.removeprefix("sha256:"), tag="img:1",
                            standin=STANDIN)
    )  # fmt: skip
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho '{GPU_LINE}'\n")
    for path in (runtime, bin_dir / "nvidia-smi"):
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(runtime), str(bin_dir)


def run_unit(task: UnitTask, stop: threading.Event | None = None, **env: str) -> UnitResult:
    base = {k: v for k, v in os.environ.items() if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL")}
    return serve_and_evaluate(task, env={**base, "CUDA_VISIBLE_DEVICES": "", **env}, stop=stop)


def silent_python(tmp: Path) -> str:
    """An interpreter whose stderr goes nowhere: what the unit learns then comes from the outcome file."""
    path = tmp / "silent-python"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@" 2>/dev/null\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def outcome_of(tmp: Path) -> Outcome:
    return decode_outcome((tmp / "logs" / "r.outcome.json").read_bytes())


def test_a_served_run_records_launch_and_serving_from_the_contract(tmp_path: Path) -> None:
    # the sweep's own serving variables never reach the child: the contract says what was served
    result = run_unit(unit(tmp_path, 3, {}), DOCCOUNT_SERVED_MODEL="wrong/model", DOCCOUNT_SERVER_LAUNCH="{")
    assert result.state == "done" and result.exit_code == 0 and result.message is None, result
    config = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert result.launch is not None and config["launch"] == msgspec.to_builtins(result.launch)
    assert config["launch"]["command"][:3] == [sys.executable, STANDIN, "--config"]
    assert config["launch"]["tries"] == 1 and config["launch"]["launcher"] == "process"
    assert config["serving"]["model"] == "org/tiny" and config["serving"]["revision"] == "v1"
    assert config["serving"]["args"] == ["--hold-s", "0"] and "gpus" not in config["serving"]
    contract = decode_contract((tmp_path / "logs" / "r.launch.json").read_bytes())
    assert contract.launch == result.launch and contract.served is not None
    assert outcome_of(tmp_path) == Outcome(state="done", exit_code=ExitCode.OK, rows=Rows(ok=3))
    assert HANDOFF_ENV not in (tmp_path / "logs" / "r.launch.json").read_text()


def test_a_smoke_stop_with_stderr_thrown_away_is_still_stopped_with_its_cause(tmp_path: Path) -> None:
    task = unit(tmp_path, 6, {}, "--reasoning", "on", python=silent_python(tmp_path))
    result = run_unit(task)
    assert (tmp_path / "logs" / "r.log").read_text() == ""  # nothing came through stderr
    assert result.state == "stopped" and result.exit_code == ExitCode.USAGE, result
    assert (result.message or "").startswith(STOP)
    got = outcome_of(tmp_path)
    assert got.smoke_stop and got.state == "stopped" and (got.cause or "").startswith(STOP)
    assert got.rows is None  # the run stopped before its closing count


def test_a_refused_run_with_stderr_thrown_away_shows_its_one_line_cause(tmp_path: Path) -> None:
    # an option evaluate refuses once it runs (not click's parsing): exit 2 and one error line
    task = unit(tmp_path, 3, {}, "--extra-body-json", "[1]", python=silent_python(tmp_path))
    result = run_unit(task)
    assert result.state == "refused" and result.exit_code == ExitCode.USAGE, result
    assert (result.message or "").startswith("error: ") and "extra-body" in (result.message or "")
    assert outcome_of(tmp_path).cause == result.message


def test_no_outcome_means_the_exit_code_alone_and_a_stale_one_is_never_read(tmp_path: Path) -> None:
    stale: UnitEnd = "done"
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "r.outcome.json").write_bytes(
        encode_outcome(Outcome(state=stale, exit_code=ExitCode.INCOMPLETE, cause="error: stale"))
    )
    dies = tmp_path / "dies"  # a child killed before it could write anything: exit 3, nothing said
    dies.write_text("#!/bin/sh\nexit 3\n")
    dies.chmod(dies.stat().st_mode | stat.S_IXUSR)
    result = run_unit(unit(tmp_path, 3, {}, python=str(dies)))
    assert result.state == "failed" and result.exit_code == 3, result
    assert result.message == f"evaluate exited 3; see {tmp_path / 'logs' / 'r.log'}"
    assert not (tmp_path / "logs" / "r.outcome.json").exists()


def test_a_sweep_stopping_its_run_mid_request_reads_interrupted_from_the_outcome(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    serve = ("--hold-s", "3", "--request-log", str(requests))
    task = unit(tmp_path, 8, {}, python=silent_python(tmp_path), serve=serve)
    stop = threading.Event()

    def stop_once_sending() -> None:  # past start-up: the child answers SIGTERM as it answers Ctrl-C
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (requests.exists() and requests.read_text().strip()):
            time.sleep(0.05)
        stop.set()

    threading.Thread(target=stop_once_sending, daemon=True).start()
    result = run_unit(task, stop=stop)
    assert result.state == "interrupted" and result.exit_code == ExitCode.INTERRUPTED, result
    got = outcome_of(tmp_path)
    assert got.state == "interrupted" and got.exit_code == ExitCode.INTERRUPTED and got.rows is not None


def test_a_sweep_stopping_its_run_while_evaluate_starts_is_interrupted_not_an_error(tmp_path: Path) -> None:
    started = tmp_path / "started"
    slow = tmp_path / "slow-python"  # still importing: SIGTERM's default action ends it (exit -15)
    slow.write_text(f'#!/bin/sh\ntouch "{started}"\nexec sleep 60\n')
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    stop = threading.Event()

    def stop_once_started() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not started.exists():
            time.sleep(0.05)
        stop.set()

    threading.Thread(target=stop_once_started, daemon=True).start()
    result = run_unit(unit(tmp_path, 3, {}, python=str(slow)), stop=stop)
    assert result.state == "interrupted" and result.exit_code == -15, result
    assert result.message == f"stopped while evaluate was starting; see {tmp_path / 'logs' / 'r.log'}"


def test_a_container_run_records_its_image_id_and_gpus_from_the_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, bin_dir = fake_host(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")  # the unit asks nvidia-smi
    task = unit(tmp_path, 3, {}, serve=("--config", str(tmp_path / "cfg.json")))
    container = ServerSpec(**{**msgspec.structs.asdict(task.server), "launcher": "container",  # type: ignore[arg-type]
                              "image": "img:1", "runtime": runtime})  # fmt: skip
    task = msgspec.structs.replace(task, server=container)
    # the sweep's own image variable never reaches the child: the id comes from the runtime
    result = serve_and_evaluate(
        task, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0", "DOCCOUNT_IMAGE_VLLM": "sha256:stale"}
    )
    assert result.state == "done", (result, (tmp_path / "logs" / "r.log").read_text())
    config = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert config["launch"]["launcher"] == "container" and config["launch"]["image"] == "img:1"
    assert config["launch"]["gpus"] == ["0"]
    assert config["serving"]["image"] == IMAGE_ID
    assert config["environment"]["containers"]["DOCCOUNT_IMAGE_VLLM"] == IMAGE_ID
    name, memory, driver = GPU_LINE.split(", ")
    assert config["serving"]["gpus"] == [{"name": name, "memory_total": memory, "driver_version": driver}]
