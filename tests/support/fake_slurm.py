"""A fake Slurm for in-process tests of the Slurm executor: `sbatch`, `srun`, `squeue`, `sacct` and `scancel` as
small executable scripts in a folder put first on PATH (as submitit's own tests fake `sacct`), printing what the
real commands print (docs: /work/shared/notes/slurm.md; the formats below are Slurm 22.05's).

The cluster is a JSON file: each job's name, its successive states (each `squeue` call moves every job it
is asked about one step on, the last state staying: the steps are the fake's clock, not seconds) and the
unit's result, which `sbatch` writes as the job's result pickle the way submitit's job would. A state
`GONE:<STATE>` is a job slurmctld has forgotten: squeue no longer lists it, sacct reports <STATE>.
`plan.json` says, per run name, the states and result its next job gets (default: pending for ever).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

_COMMON = r"""
import json, os, pickle, sys
from pathlib import Path
HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs.json"
def load():
    return json.loads(JOBS.read_text()) if JOBS.is_file() else {}
def save(jobs):
    JOBS.write_text(json.dumps(jobs))
def log(cmd):
    with open(HERE / "calls.log", "a") as f:
        f.write(" ".join([cmd, *sys.argv[1:]]) + "\n")
def ids_after(flag):
    out = []
    for i, a in enumerate(sys.argv):
        if a == flag:
            out += sys.argv[i + 1].split(",")
    return out
"""

SBATCH = r"""
log("sbatch")
script = Path(sys.argv[-1])
name = next(l.split("=", 1)[1].strip() for l in script.read_text().splitlines() if l.startswith("#SBATCH --job-name="))
jobs = load()
job_id = str(101 + len(jobs))
(HERE / f"env.{job_id}.json").write_text(json.dumps(dict(os.environ)))
plan = json.loads((HERE / "plan.json").read_text()) if (HERE / "plan.json").is_file() else {}
run = name.rsplit("-", 1)[-1]
step = plan.get(run, {})
jobs[job_id] = {"name": name, "states": list(step.get("states", ["PENDING"]))}
save(jobs)
if step.get("result") is not None:  # what the job's function returned, where submitit's job puts it
    from evaluator.study.unit import UnitResult
    import msgspec
    folder = script.parent / job_id
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{job_id}_0_result.pkl", "wb") as f:
        pickle.dump(("success", msgspec.convert(step["result"], UnitResult)), f)
print(f"Submitted batch job {job_id}")
"""

SQUEUE = r"""
log("squeue")
jobs = load()
lines = []
for j in ids_after("-j"):
    if j not in jobs:
        continue
    states = jobs[j]["states"]
    state = states.pop(0) if len(states) > 1 else states[0]
    if state.startswith("GONE:"):
        continue
    reason = "Resources" if state == "PENDING" else "None"
    node = "" if state == "PENDING" else "node1"
    elapsed = "0:00" if state == "PENDING" else "1:02"
    lines.append(f"{j}|{state}|{reason}|{node}|{elapsed}|debug")
save(jobs)
if not lines:
    print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
    sys.exit(1)
print("\n".join(lines))
"""

SACCT = r"""
log("sacct")
jobs = load()
fields = sys.argv[sys.argv.index("-o") + 1].split(",")
print("|".join(fields))
for j in ids_after("-j"):
    if j not in jobs:
        continue
    state = jobs[j]["states"][0].removeprefix("GONE:")
    row = {"JobID": j, "State": state, "Reason": "None", "NodeList": "node1", "Elapsed": "00:01:10",
           "Partition": "debug", "ExitCode": "0:0"}
    print("|".join(row.get(f, "") for f in fields))
    step = dict(row, JobID=f"{j}.batch", Partition="", State="CANCELLED" if state == "TIMEOUT" else state)
    print("|".join(step.get(f, "") for f in fields))
"""

# submitit's executor refuses to start where `srun` is not on PATH (it takes that for "not a Slurm cluster");
# the fake sbatch runs no job script, so the fake srun is only there to be found (and logs a call if any).
SRUN = r"""
log("srun")
"""

SCANCEL = r"""
log("scancel")
jobs = load()
for j in sys.argv[1:]:
    if j in jobs:
        jobs[j]["states"] = ["CANCELLED by 0"]
save(jobs)
"""


class FakeSlurm:
    """The fake commands in `folder` (put first on PATH by `path()`), and what they were asked."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for name, body in (
            ("sbatch", SBATCH),
            ("srun", SRUN),
            ("squeue", SQUEUE),
            ("sacct", SACCT),
            ("scancel", SCANCEL),
        ):
            script = folder / name
            script.write_text(f"#!{sys.executable}\n{_COMMON}\n{body}")
            script.chmod(0o755)

    def path(self) -> str:
        return f"{self.folder}{os.pathsep}{os.environ.get('PATH', '')}"

    def plan(self, **runs: dict[str, Any]) -> None:
        """The states and result of each named run's next job."""
        (self.folder / "plan.json").write_text(json.dumps(runs))

    def set_states(self, job_id: str, *states: str) -> None:
        jobs = self.jobs()
        jobs[job_id]["states"] = list(states)
        (self.folder / "jobs.json").write_text(json.dumps(jobs))

    def jobs(self) -> dict[str, Any]:
        path = self.folder / "jobs.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def sbatch_env(self, job_id: str) -> dict[str, str]:
        return json.loads((self.folder / f"env.{job_id}.json").read_text())

    def calls(self, command: str) -> int:
        path = self.folder / "calls.log"
        lines = path.read_text().splitlines() if path.is_file() else []
        return sum(1 for line in lines if line.split()[0] == command)
