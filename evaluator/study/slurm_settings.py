"""The Slurm executor's settings (`[serve]` keys of an `executor = "slurm"` sweep), typed, each with its one
default, and the submitit parameters of one run's job built from them. No submitit import here: the sweep
file is read, and a local sweep runs, without it.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from evaluator.study.unit import UnitTask

TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class SlurmSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[serve] for Slurm (serve_file checks each value's type and names the line of a bad one)."""

    partition: str = ""
    """"" : the cluster's default partition."""
    account: str = ""
    qos: str = ""
    constraint: str = ""
    reservation: str = ""
    time: str = "01:00:00"
    """A job's time limit (submitit's own default would be 5 minutes)."""
    gpus_per_node: int | None = None
    """None: not checked before submission (Slurm refuses a job no node can hold)."""
    cpus_per_gpu: int | None = None
    mem_per_gpu: str | int | None = None
    """A Slurm size ("64G"), or an integer of MB."""
    setup: list[str] = msgspec.field(default_factory=list)
    """Lines of the batch script before the job starts (module load ...)."""


def time_minutes(value: str) -> int:
    """Slurm's time limit formats (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in whole minutes, rounded up."""
    m = TIME_RE.match(value.strip())
    if not m:
        raise ValueError(value)
    days, a, b, c = m.groups()
    if days is None:
        # M, M:S or H:M:S
        h, mi, s = (int(a), int(b), int(c)) if c is not None else (0, int(a), int(b or 0))
    else:
        h, mi, s = int(a), int(b or 0), int(c or 0)
    seconds = (int(days or 0) * 24 + h) * 3600 + mi * 60 + s
    return max(1, -(-seconds // 60))


def mem_scaled(mem: str | int, n: int) -> str:
    """`mem_per_gpu` ("64G", 65536 MB as an integer) times `n`, for a job's --mem. Pure."""
    m = re.match(r"^(\d+)([KMGT]?)B?$", str(mem).strip().upper())
    if not m:
        raise ValueError(mem)
    return f"{int(m.group(1)) * n}{m.group(2) or 'M'}"


def job_parameters(slurm: SlurmSettings, task: UnitTask, sweep_name: str) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters for one run's job. Pure."""
    gpus = task.gpus
    minutes = time_minutes(slurm.time)
    params: dict[str, Any] = {
        "job_name": f"doccount-{sweep_name}-{task.run}",
        "time": minutes,
        # submitit's USR2 comes 90 s before the limit; for a short limit that is at the job's start,
        # before the job's Python can ignore it: then at most half the limit before it.
        "signal_delay_s": min(90, minutes * 30),
        "nodes": 1,
        "ntasks_per_node": 1,
        "setup": list(slurm.setup),
    }
    if gpus:
        params["gpus_per_node"] = gpus
    if slurm.cpus_per_gpu is not None:
        params["cpus_per_task"] = slurm.cpus_per_gpu * max(1, gpus)
    if slurm.mem_per_gpu is not None:
        params["mem"] = mem_scaled(slurm.mem_per_gpu, max(1, gpus))
    named = {"partition": slurm.partition, "account": slurm.account, "qos": slurm.qos}
    for key, value in {**named, "constraint": slurm.constraint}.items():
        if value:
            params[key] = value
    if slurm.reservation:
        params["additional_parameters"] = {"reservation": slurm.reservation}
    return params
