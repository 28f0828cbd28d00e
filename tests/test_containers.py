"""Container checks (scripts/test_containers.sh) as a pytest test: `pytest -m containers`.

Needs root on Debian 12 with apt and PyPI reachable (the script installs podman & co when they are
missing). Deselected by `make test` (-m "not vllm and not containers").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "test_containers.sh"

pytestmark = pytest.mark.containers


@pytest.mark.timeout(3600)  # a cold build of the CPU vLLM image alone takes 7-9 min
def test_container_bundle() -> None:
    if sys.platform != "linux" or shutil.which("apt-get") is None:
        pytest.skip("needs a Debian-like Linux host")
    if os.geteuid() != 0:
        pytest.skip("needs root (podman storage, debootstrap)")
    proc = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=3500,
    )
    # The script prints a timing table and its checks; show them with -s or on failure.
    print(proc.stdout[-20000:])
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "all container checks passed" in proc.stdout
