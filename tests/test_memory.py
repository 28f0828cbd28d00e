"""The memory check before anything starts (evaluator/study/memory.py, wired in study.plan_checks): a fake
Hugging Face cache in the real layout with sparse weight files (their size, no bytes), a fake nvidia-smi
on PATH, and `doccount sweep --plan` / `doccount sweep` through the command line."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cli import run_cli

from evaluator.study import memory

COMMIT = "a" * 40
# Kimi-K2.5's config.json, the parts the check reads (huggingface.co/moonshotai/Kimi-K2.5, config.json:
# a DeepSeek-V3 text model with MLA)
KIMI_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": {
        "model_type": "kimi_k2",
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "hidden_size": 7168,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    },
}
KIMI_WEIGHTS = 595 * 10**9  # the recipe's "~595 GB on disk"
H100_MIB, H200_MIB = 81559, 143771  # nvidia-smi memory.total of an H100 80GB and an H200


def fake_cache(root: Path, repo: str, config: dict | None, shards: int, total: int, drop: int = 0) -> Path:
    """models--org--name/{blobs, refs/main, snapshots/<commit>/...} as huggingface_hub writes it, each
    file a symlink to its blob; the safetensors blobs are sparse files of `total` bytes in all."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    snap, blobs = folder / "snapshots" / COMMIT, folder / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    files: dict[str, bytes | int] = {n: total // shards for n in names[drop:]}
    files["model.safetensors.index.json"] = json.dumps(
        {"weight_map": {f"w{i}": n for i, n in enumerate(names)}}
    ).encode()
    if config is not None:
        files["config.json"] = json.dumps(config).encode()
    for name, body in files.items():
        blob = blobs / hashlib.sha256(name.encode()).hexdigest()
        if isinstance(body, int):
            with open(blob, "wb") as f:
                f.truncate(body)  # sparse: the size without the bytes
        else:
            blob.write_bytes(body)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return folder


def fake_nvidia_smi(bindir: Path, mib: int, count: int = 8) -> Path:
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "nvidia-smi"
    rows = "\\n".join(f"{i}, {mib}" for i in range(count))
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *index,memory.total*) printf "{rows}\\n" ;; -L) exit 0 ;; *) exit 9 ;; esac\n'
    )
    script.chmod(0o755)
    return bindir


KIMI_RUN = (
    '[[runs]]\nname = "kimi-k2.5"\nmodel = "moonshotai/Kimi-K2.5"\n'
    'serve = { gpus = 8, args = ["--tensor-parallel-size", "8", "--max-model-len", "65536"] }\n'
)


def sweep(tmp: Path, serve: str = "", runs: str = KIMI_RUN) -> Path:
    path = tmp / "sweep.toml"
    path.write_text(
        'name = "mem"\nbenchmark = "doccount"\n[serve]\ngpus = [0, 1, 2, 3, 4, 5, 6, 7]\n'
        f'command = ["vllm", "serve"]\n{serve}\n{runs}'
    )
    return path


def env(tmp: Path, mib: int | None) -> dict[str, str]:
    out = {"HF_HUB_CACHE": str(tmp / "hub"), "HF_HUB_OFFLINE": "1"}
    path = os.environ.get("PATH", "")
    if mib is not None:
        path = f"{fake_nvidia_smi(tmp / 'bin', mib)}{os.pathsep}{path}"
    out["PATH"] = path
    return out


@pytest.fixture
def kimi_cache(tmp_path: Path) -> Path:
    return fake_cache(tmp_path / "hub", "moonshotai/Kimi-K2.5", KIMI_CONFIG, 8, KIMI_WEIGHTS)


# ----------------------------------------------------------------------------- through the command line


def test_kimi_is_refused_on_eight_80gb_gpus_before_anything_starts(tmp_path: Path, kimi_cache: Path) -> None:
    for args in (["--plan"], []):
        res = run_cli(
            "sweep",
            str(sweep(tmp_path)),
            "--run-root",
            str(tmp_path / "runs"),
            *args,
            env=env(tmp_path, H100_MIB),
        )
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr
        line = lines[0]
        assert "run kimi-k2.5: needs" in line and "595.0 GB of weights" in line, line
        assert "0.9 x 8 GPU(s) x 85.5 GB (nvidia-smi memory.total)" in line, line
        need = float(line.split("needs ")[1].split(" GB")[0].replace(",", ""))
        assert need >= 714  # the recipe's minimum is in it
        assert not (tmp_path / "runs" / "mem").exists() or not any((tmp_path / "runs" / "mem").glob("kimi*"))


def test_kimi_fits_eight_h200(tmp_path: Path, kimi_cache: Path) -> None:
    res = run_cli(
        "sweep",
        str(sweep(tmp_path)),
        "--run-root",
        str(tmp_path / "runs"),
        "--plan",
        env=env(tmp_path, H200_MIB),
    )
    assert res.returncode == 0, res.stderr
    assert "kimi-k2.5" in res.stdout and "note:" not in res.stderr


@pytest.mark.parametrize(("gb", "code"), [(80, 2), (141, 0)])
def test_gpu_memory_gb_plans_a_pool_elsewhere(tmp_path: Path, kimi_cache: Path, gb: int, code: int) -> None:
    path = sweep(tmp_path, serve=f"gpu_memory_gb = {gb}")
    res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), "--plan", env=env(tmp_path, None))
    assert res.returncode == code, res.stderr
    if code:
        assert "x 80.0 GB ([serve] gpu_memory_gb)" in res.stderr and "run kimi-k2.5" in res.stderr


def test_an_unknown_size_is_one_note_not_a_refusal(tmp_path: Path) -> None:
    # no weights in the cache, and the Hub may not be asked (HF_HUB_OFFLINE)
    res = run_cli(
        "sweep",
        str(sweep(tmp_path)),
        "--run-root",
        str(tmp_path / "runs"),
        "--plan",
        env=env(tmp_path, H100_MIB),
    )
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note:")]
    assert res.returncode == 0, res.stderr
    assert len(notes) == 1 and "run kimi-k2.5: memory not checked" in notes[0], res.stderr


def test_a_snapshot_missing_shards_is_an_unknown_size(tmp_path: Path) -> None:
    fake_cache(tmp_path / "hub", "moonshotai/Kimi-K2.5", KIMI_CONFIG, 8, KIMI_WEIGHTS, drop=3)
    res = run_cli(
        "sweep",
        str(sweep(tmp_path)),
        "--run-root",
        str(tmp_path / "runs"),
        "--plan",
        env=env(tmp_path, H100_MIB),
    )
    assert res.returncode == 0, res.stderr
    assert "3 of its 8 safetensors shards are not in the cache" in res.stderr


def test_no_gpu_memory_known_is_one_note(tmp_path: Path, kimi_cache: Path) -> None:
    e = env(tmp_path, None)
    e["PATH"] = str(tmp_path / "empty")  # no nvidia-smi
    e["PATH"] += os.pathsep + os.path.dirname(os.path.realpath("/bin/sh"))
    res = run_cli("sweep", str(sweep(tmp_path)), "--run-root", str(tmp_path / "runs"), "--plan", env=e)
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note:")]
    assert res.returncode == 0 and len(notes) == 1 and "gpu_memory_gb" in notes[0], res.stderr


# ----------------------------------------------------------------------------- the arithmetic


def test_the_mla_kv_cache_is_vllms_latent_on_every_rank() -> None:
    # one latent of kv_lora_rank + qk_rope_head_dim per layer and token, bf16, replicated on 8 ranks
    assert memory.kv_cache_bytes(KIMI_CONFIG, 65536, 8, 2) == 61 * (512 + 64) * 2 * 65536 * 8


def test_the_gqa_kv_cache_is_k_and_v_of_each_ranks_heads() -> None:
    cfg = {"num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
    assert memory.kv_cache_bytes(cfg, 40960, 2, 2) == 48 * 2 * (2 * 128) * 2 * 40960 * 2
    # fewer kv heads than ranks: vLLM replicates one head on each rank
    assert memory.kv_cache_bytes(cfg, 1000, 8, 2) == 48 * 1 * (2 * 128) * 2 * 1000 * 8
    no_head_dim = {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 1024}
    assert memory.kv_cache_bytes(no_head_dim, 10, 1, 2) == 2 * 8 * 2 * 128 * 2 * 10
    assert memory.kv_cache_bytes({"hidden_size": 8}, 10, 1, 2) is None


@settings(max_examples=100, deadline=None)
@given(
    layers=st.integers(1, 128),
    kv=st.sampled_from([1, 2, 4, 8, 16, 64]),
    head=st.sampled_from([64, 128, 256]),
    tokens=st.integers(1, 1 << 20),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_the_kv_cache_is_linear_in_tokens(layers: int, kv: int, head: int, tokens: int, tp: int) -> None:
    cfg = {
        "num_hidden_layers": layers,
        "num_attention_heads": 64,
        "num_key_value_heads": kv,
        "head_dim": head,
    }
    one = memory.kv_cache_bytes(cfg, 1, tp, 2)
    assert one is not None and memory.kv_cache_bytes(cfg, tokens, tp, 2) == one * tokens
    assert one == layers * max(1, kv // tp) * tp * 2 * head * 2  # vllm/config/model.py:1628


def test_the_need_holds_the_recipes_minimum_for_kimi() -> None:
    # recipes: vram_minimum_gb = ceil(weights x 1.2): 595 GB -> 714 GB
    assert memory.need_bytes(KIMI_WEIGHTS, 0, 8) >= 714 * 10**9
    assert (
        memory.capacity_bytes(H100_MIB * memory.MIB, 8)
        < 714 * 10**9
        < memory.capacity_bytes(H200_MIB * memory.MIB, 8)
    )


def test_nvidia_smi_memory_lines_are_read() -> None:
    text = "0, 81559\n1, 81559\n\n2, [N/A]\n"
    got = memory.parse_memory_total(text)
    assert got == {"0": 81559 * memory.MIB, "1": 81559 * memory.MIB}
    assert memory.pool_memory(got, ["1"]) == 81559 * memory.MIB and memory.pool_memory(got, ["7"]) is None


def test_fp8_kv_cache_and_dtypes() -> None:
    assert memory.dtype_bytes(KIMI_CONFIG, None, "fp8_e4m3") == 1
    assert memory.dtype_bytes(KIMI_CONFIG, None, None) == 2
    assert memory.dtype_bytes({"torch_dtype": "float32"}, None, "auto") == 4
    assert memory.dtype_bytes({"torch_dtype": "float32"}, "bfloat16", None) == 2


def test_the_hubs_file_list_gives_the_size_when_the_cache_does_not(tmp_path: Path) -> None:
    from support.hub_test_server import HubRepo, HubTestServer

    commit = "c" * 40
    files = {"config.json": json.dumps(KIMI_CONFIG).encode(), "model.safetensors": b"\0" * 4096}
    repo = HubRepo("moonshotai/Kimi-K2.5", {commit: files}, {"main": commit}, "model")
    path = sweep(tmp_path, serve="gpu_memory_gb = 0.5")  # 1 GiB per GPU alone exceeds 0.9 x 8 x 0.5 GB
    with HubTestServer([repo]) as hub:
        e = {**env(tmp_path, None), "HF_ENDPOINT": hub.url}
        offline = run_cli("sweep", str(path), "--run-root", str(tmp_path / "r"), "--plan", env=e)
        e.pop("HF_HUB_OFFLINE")
        online = run_cli("sweep", str(path), "--run-root", str(tmp_path / "r"), "--plan", env=e)
    assert offline.returncode == 0 and "memory not checked" in offline.stderr, offline.stderr
    assert online.returncode == 2, online.stderr
    assert (
        "0.0 GB of weights in the Hub's file list" in online.stderr
        and "KV cache for one 65,536" in online.stderr
    )


def test_the_shipped_table5_sweep_refuses_kimi_on_80gb_gpus_and_plans_the_rest(tmp_path: Path) -> None:
    from support.cli import REPO

    fake_cache(tmp_path / "hub", "moonshotai/Kimi-K2.5", KIMI_CONFIG, 8, KIMI_WEIGHTS)
    table5 = str(REPO / "sweeps" / "doccount-paper-table5.toml")
    e = env(tmp_path, H100_MIB)
    res = run_cli("sweep", table5, "--run-root", str(tmp_path / "r"), "--plan", env=e)
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "run kimi-k2.5: needs" in errors[0], res.stderr
    others = [a for name in ("qwen3.6-35b-a3b", "glm-4.6v", "gemma-4-31b") for a in ("--only", name)]
    res = run_cli("sweep", table5, "--run-root", str(tmp_path / "r"), "--plan", *others, env=e)
    assert res.returncode == 0, res.stderr
    e = env(tmp_path, H200_MIB)
    res = run_cli("sweep", table5, "--run-root", str(tmp_path / "r"), "--plan", "--only", "kimi-k2.5", env=e)
    assert res.returncode == 0, res.stderr


def test_a_revision_names_a_ref_or_commit_inside_the_repos_folder(tmp_path: Path, kimi_cache: Path) -> None:
    cache = str(tmp_path / "hub")
    assert memory.cached_weights(cache, "moonshotai/Kimi-K2.5", None).size == KIMI_WEIGHTS  # refs/main
    assert memory.cached_weights(cache, "moonshotai/Kimi-K2.5", COMMIT).size == KIMI_WEIGHTS
    for rev in ("../../../etc", "/etc/passwd", "b" * 40, "no-such-branch"):
        found = memory.cached_weights(cache, "moonshotai/Kimi-K2.5", rev)
        assert found.size is None and "is not in" in found.why
