"""The test cluster itself (scripts/slurm_ci.sh): Slurm's accounting (slurmdbd) answers sacct, so
submitit reads real job states; pretend GPUs are handed out as CUDA_VISIBLE_DEVICES; what sbatch
exports is what the submitting environment holds."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import submitit
from support.slurm_cluster import queue_empty, slurm_fixture  # noqa: F401  (the `slurm` fixture)

pytestmark = pytest.mark.slurm


def job_facts() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_PARTITION", "PROBE_VAR")}


def fail_on_purpose() -> None:
    raise RuntimeError("this job fails on purpose")


def test_sacct_reports_states_through_slurmdbd(slurm: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PROBE_VAR", "visible")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # the job unpickles this module's functions
    ex = submitit.AutoExecutor(folder=tmp_path / "%j")
    assert ex.cluster == "slurm"
    ex.update_parameters(timeout_min=2, slurm_mem="256M", gpus_per_node=2)
    ok, bad = ex.submit(job_facts), ex.submit(fail_on_purpose)
    facts = ok.result()
    assert facts["CUDA_VISIBLE_DEVICES"] in ("0,1", "2,3")
    assert facts["SLURM_JOB_PARTITION"] == "debug"
    assert facts["PROBE_VAR"] == "visible"  # sbatch exports the whole environment by default
    with pytest.raises(submitit.core.utils.FailedJobError, match="on purpose"):
        bad.result()
    # The states come from sacct, i.e. from slurmdbd's database (without it they stay UNKNOWN).
    states = {}
    for job in (ok, bad):
        for _ in range(60):
            job.done(force_check=True)
            if job.state in ("COMPLETED", "FAILED"):
                break
            time.sleep(0.5)
        states[job.job_id] = job.state
    assert states == {ok.job_id: "COMPLETED", bad.job_id: "FAILED"}
    assert queue_empty()
