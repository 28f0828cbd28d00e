"""The real Slurm the `slurm` tests run against (`make test-slurm` starts it with scripts/slurm_ci.sh).

Under `make test-slurm` (DOCCOUNT_REQUIRE_SLURM=1) a Slurm that does not answer fails the tests; run
alone without one, they are skipped with the command that starts it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

START = "make test-slurm (or: bash scripts/slurm_ci.sh start; eval $(bash scripts/slurm_ci.sh env))"


def slurm_answers() -> str | None:
    """None when sinfo lists an idle or mixed node and sacctmgr reaches slurmdbd, else why not."""
    if not shutil.which("sinfo") or not os.environ.get("SLURM_CONF"):
        return "no Slurm client configured (SLURM_CONF unset)"
    for cmd in (["sinfo", "-h", "-N", "-o", "%T"], ["sacctmgr", "-n", "-P", "list", "cluster"]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0 or not done.stdout.strip():
            return f"{' '.join(cmd)} failed: {done.stderr.strip()[:200]}"
    return None


@pytest.fixture(scope="session", name="slurm")
def slurm_fixture() -> str:
    """The cluster's node name, once Slurm answers (skip, or fail under make test-slurm)."""
    problem = slurm_answers()
    if problem:
        if os.environ.get("DOCCOUNT_REQUIRE_SLURM") == "1":
            pytest.fail(f"Slurm is not up: {problem}")
        pytest.skip(f"needs a running Slurm: {START}")
    return subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()[0]


def queue_empty(timeout: float = 30) -> bool:
    """True once squeue lists no pending or running job (the tests leave the cluster as they found it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
        if not out.strip():
            return True
        time.sleep(0.5)
    return False
