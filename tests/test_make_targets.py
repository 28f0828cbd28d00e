"""Issue #42, point 1: `make eval` / `make serve` say what is missing before any image is built. Real make,
the container engine replaced by a stand-in script that records how it was called."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from support.cli import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")

STAND_IN = """#!/bin/sh
echo "$*" >> "$STUB_LOG"
case "$1" in info) exit "${STUB_INFO_RC:-0}";; esac
exit 0
"""


def _make(tmp_path: Path, *args: str, info_rc: int = 0) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    engine = tmp_path / "bin" / "engine"
    engine.parent.mkdir(exist_ok=True)
    engine.write_text(STAND_IN)
    engine.chmod(0o755)
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    with socket.socket() as s:  # a port nothing listens on, for the health wait
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("MODEL", "MAKEFLAGS", "MAKELEVEL")}
    env.update(STUB_LOG=str(log), STUB_INFO_RC=str(info_rc))
    res = subprocess.run(
        ["make", "--no-print-directory", *args, f"DOCKER={engine}", f"COMPOSE={engine}",
         f"HF_CACHE_DIR={tmp_path / 'hf'}", "HEALTH_TIMEOUT=0", f"VLLM_PORT={port}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    calls = log.read_text().splitlines() if log.exists() else []
    return res, calls


@pytest.mark.parametrize("goal", ["eval", "serve", "eval-remote", "eval-batch"])
def test_no_model_is_one_line_before_anything_is_built(tmp_path, goal: str) -> None:
    res, calls = _make(tmp_path, goal)
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: set MODEL=<model id>, e.g. make {goal} MODEL=Qwen/Qwen2.5-VL-7B-Instruct"]
    assert not any(c.startswith("build") for c in calls), calls


def test_no_model_under_make_j_builds_nothing_either(tmp_path) -> None:
    res, calls = _make(tmp_path, "-j4", "eval")
    assert res.returncode == 2 and "error: set MODEL=" in res.stderr
    assert not any(c.startswith("build") for c in calls), calls


@pytest.mark.parametrize("goal", ["eval", "serve"])
def test_no_engine_is_one_line_naming_the_fix_before_building(tmp_path, goal: str) -> None:
    res, calls = _make(tmp_path, goal, "MODEL=org/m", info_rc=1)
    assert res.returncode == 2
    [line] = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert "no container engine answers" in line and "start Docker" in line
    assert "DOCKER=podman COMPOSE=podman-compose" in line
    assert calls == ["info"]


def test_with_both_the_engine_is_asked_first_then_the_images_are_built(tmp_path) -> None:
    res, calls = _make(tmp_path, "eval", "MODEL=org/m")
    assert calls[0] == "info" and calls[1].startswith("build -f Dockerfile.eval"), calls
    assert "error: set MODEL" not in res.stderr and "no container engine" not in res.stderr
