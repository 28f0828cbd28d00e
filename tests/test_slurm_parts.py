"""The Slurm executor's pure parts (no cluster needed; the cluster tests are test_slurm_sweep.py): time
limits, job parameters, the variables withheld from sbatch, squeue's lines, the queue display, and the
plan-time refusals through the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.cli import run_cli
from support.datagen import doccount_rows, write_doccount

from evaluator.study.executors.slurm import withheld_variables
from evaluator.study.executors.slurm_queue import JobView, describe, parse_squeue
from evaluator.study.serve_file import SlurmSettings, job_parameters, mem_scaled, time_minutes
from evaluator.study.unit import UnitTask


@pytest.mark.parametrize(
    ("value", "minutes"),
    [("90", 90), ("1:30", 2), ("04:00:00", 240), ("1-0", 1440), ("2-12:30", 3630), ("0-0:0:1", 1)],
)
def test_slurm_time_formats_in_minutes(value: str, minutes: int) -> None:
    assert time_minutes(value) == minutes


@given(st.integers(0, 30), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_days_hours_minutes_seconds_round_up_to_whole_minutes(d: int, h: int, m: int, s: int) -> None:
    seconds = ((d * 24 + h) * 60 + m) * 60 + s
    assert time_minutes(f"{d}-{h:02d}:{m:02d}:{s:02d}") == max(1, -(-seconds // 60))


@pytest.mark.parametrize("bad", ["", "4h", "04:00:00:00", "1-", "-5", "soon"])
def test_what_is_not_a_slurm_time_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        time_minutes(bad)


def test_memory_scales_with_the_gpus() -> None:
    assert (
        mem_scaled("64G", 4) == "256G" and mem_scaled("512M", 2) == "1024M" and mem_scaled(4096, 2) == "8192M"
    )
    with pytest.raises(ValueError):
        mem_scaled("lots", 1)


def task(gpus: int, key: str | None = None) -> UnitTask:
    return UnitTask(
        run="r", evaluate_args=["--run-root", "x"], evaluate_log="logs/r.log", gpus=gpus, api_key_env=key
    )


def test_a_jobs_parameters_ask_for_its_runs_gpus_and_scale_cpus_and_memory() -> None:
    slurm = {"partition": "gpu", "account": "lab", "qos": "high", "time": "08:00:00", "cpus_per_gpu": 8}
    slurm |= {"mem_per_gpu": "64G", "setup": ["module load cuda"], "constraint": "h100", "reservation": "r1"}
    p = job_parameters(SlurmSettings(**slurm), task(4), "table5")
    assert p["gpus_per_node"] == 4 and p["cpus_per_task"] == 32 and p["mem"] == "256G"
    assert p["time"] == 480 and p["signal_delay_s"] == 90 and p["job_name"] == "doccount-table5-r"
    assert (p["partition"], p["account"], p["qos"], p["constraint"]) == ("gpu", "lab", "high", "h100")
    assert p["additional_parameters"] == {"reservation": "r1"} and p["setup"] == ["module load cuda"]
    endpoint = job_parameters(SlurmSettings(time="1"), task(0), "s")
    assert "gpus_per_node" not in endpoint and "partition" not in endpoint
    assert endpoint["signal_delay_s"] == 30  # half a 1-minute limit: never before the job's Python is up


def test_sbatch_runs_without_credentials_but_the_runs_own_key() -> None:
    env = {"PATH": "/bin", "HF_TOKEN": "x", "OPENAI_API_KEY": "x", "MY_SECRET": "x", "HOME": "/root"}
    env |= {"MOONSHOT_KEY": "x", "MODEL_API_KEY": "x", "KEYBOARD": "us"}
    dropped = withheld_variables(env, ["MOONSHOT_KEY", "OPENAI_API_KEY"], "OPENAI_API_KEY")
    assert "OPENAI_API_KEY" not in dropped
    assert {"HF_TOKEN", "MY_SECRET", "MOONSHOT_KEY", "MODEL_API_KEY"} <= set(dropped)
    assert not {"PATH", "HOME", "KEYBOARD"} & set(dropped)


def test_squeue_lines_and_what_the_display_makes_of_them() -> None:
    views = parse_squeue("12|PENDING|Resources||0:00|gpu\n13|RUNNING|None|node7|1:02:03|gpu\nbroken line\n")
    assert views["12"] == JobView(
        job_id="12", state="PENDING", reason="Resources", elapsed="0:00", partition="gpu"
    )
    assert views["13"].node == "node7" and views["13"].reason == "" and views["13"].live
    assert describe(views["12"], "0/442") == ("pending", "pending (Resources)")
    assert describe(views["13"], "120/442") == ("running", "on node7, 1:02:03 elapsed, 120/442 rows recorded")
    ended = JobView(job_id="9", state="TIMEOUT", elapsed="08:00:12")
    assert describe(ended, "300/442") == ("failed", "TIMEOUT after 08:00:12, 300/442 rows recorded")
    assert describe(JobView(job_id="9"), "0")[0] == "submitted"


def slurm_sweep(tmp: Path, gpus: list[int]) -> Path:
    write_doccount(tmp / "data" / "test-00000-of-00001.parquet", doccount_rows(2))
    text = (
        f'name = "cl"\ndata_files = "{tmp / "data" / "*.parquet"}"\n[serve]\nexecutor = "slurm"\n'
        'partition = "gpu"\ntime = "01:00:00"\ngpus_per_node = 4\n'
    )
    for i, g in enumerate(gpus):
        # vLLM's tensor parallelism over the run's GPUs (the checks before starting compare the two)
        args = f'["--tensor-parallel-size", "{g}"]'
        text += f'\n[[runs]]\nname = "r{i}"\nmodel = "org/m{i}"\nserve = {{ gpus = {g}, args = {args} }}\n'
    (tmp / "sweep.toml").write_text(text)
    return tmp / "sweep.toml"


def test_plan_prints_each_jobs_request_and_refuses_more_gpus_than_a_node_has(tmp_path: Path) -> None:
    ok = run_cli("sweep", str(slurm_sweep(tmp_path, [1, 4])), "--run-root", str(tmp_path / "runs"), "--plan")
    assert ok.returncode == 0, ok.stderr
    assert "4 per job" in ok.stderr + ok.stdout and "partition gpu" in ok.stderr + ok.stdout
    big = run_cli("sweep", str(slurm_sweep(tmp_path, [1, 8])), "--run-root", str(tmp_path / "runs"), "--plan")
    assert big.returncode == 2 and "run r1 asks for 8 GPU(s); a node has 4" in big.stderr


def test_a_bad_time_limit_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    path = slurm_sweep(tmp_path, [1])
    path.write_text(path.read_text().replace('time = "01:00:00"', 'time = "4h"'))
    res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), "--plan")
    assert res.returncode == 2 and '"4h" is not a Slurm time limit' in res.stderr


def test_detach_needs_the_slurm_executor(tmp_path: Path) -> None:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doccount_rows(2))
    path = tmp_path / "local.toml"
    path.write_text(
        f'name = "local"\ndata_files = "{tmp_path / "data" / "*.parquet"}"\n[serve]\ngpus = [0]\n'
        '[[runs]]\nname = "a"\nmodel = "org/a"\nserve = { gpus = 1 }\n'
    )
    res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), "--detach")
    assert res.returncode == 2 and '--detach needs executor = "slurm"' in res.stderr
