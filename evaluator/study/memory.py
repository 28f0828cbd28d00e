"""Memory before anything starts (docs/serving.md, "Memory"): a served run whose need exceeds
0.9 x its GPUs x the memory of one GPU is refused, naming the run and both sizes.

The need of a run, in bytes:

    weights x 1.2  +  the KV cache of one --max-model-len sequence  +  gpus x 1 GiB

- weights: the safetensors files of the model at its revision in the local Hugging Face cache, else the
  Hub's file list (when the Hub may be asked); a snapshot missing a shard its index names is unknown.
- x 1.2: the vLLM recipes' sizing rule, `vram_minimum_gb = ceil(params x bytes_per_param x 1.2)`
  (github.com/vllm-project/recipes, "VRAM formula"; Kimi-K2.5's ~595 GB of INT4 weights give its 714 GB):
  activations, workspaces and CUDA graphs grow with the model.
- KV cache: what vLLM 0.31.0 allocates for one sequence, from config.json (its `text_config` for a VLM),
  summed over the tensor-parallel ranks: layers x kv_heads_per_rank x (head_size + head_size_v) x dtype
  bytes per rank and token (vllm/v1/kv_cache_interface.py:509-529), kv_heads_per_rank = max(1,
  num_key_value_heads // tp) (vllm/config/model.py:1624-1628); MLA (kv_lora_rank): head_size =
  kv_lora_rank + qk_rope_head_dim, head_size_v = 0, one latent per rank, replicated
  (model_arch_config_convertor.py:86-93, kv_cache_interface.py:675-676, model.py:1618-1620). dtype bytes:
  1 for --kv-cache-dtype fp8*, else the model's. Without the dimensions the KV cache is left out.
- gpus x 1 GiB: what every worker holds besides (the CUDA context, NCCL buffers).

The GPU memory: `[serve] gpu_memory_gb`, else the smallest `memory.total` nvidia-smi reports in the pool.
0.9 is vLLM's default --gpu-memory-utilization. Data parallel replicas are not counted: the need is a
lower bound, so a refusal is never wrong for that. A size that cannot be known is a note, not a refusal.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

GIB = 1 << 30
GB = 10**9
MIB = 1 << 20
UTILIZATION = 0.9  # vLLM's default --gpu-memory-utilization
HEADROOM = 1.2  # the vLLM recipes' weights x 1.2 (see the module's text)
PER_GPU = GIB  # the per-GPU allowance (see the module's text)
DTYPE_BYTES = {"float16": 2, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float32": 4, "float": 4}
INDEX = "model.safetensors.index.json"
HUB_TIMEOUT = 20.0


class Weights(msgspec.Struct, frozen=True):
    """A model's weights: their bytes (None: unknown, `why` says why) and its config.json."""

    size: int | None
    config: dict[str, Any] | None
    where: str  # "the local Hugging Face cache" or "the Hub's file list"
    why: str = ""


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config.json (a vision-language model nests it)."""
    inner = config.get("text_config") or config.get("language_config") or config.get("llm_config")
    return inner if isinstance(inner, Mapping) else config


def _int(cfg: Mapping[str, Any], key: str) -> int | None:
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def dtype_bytes(config: Mapping[str, Any], dtype_flag: str | None, kv_dtype_flag: str | None) -> int:
    """Bytes per KV cache element: 1 for an fp8 KV cache, else the model's dtype (2 when unknown)."""
    if kv_dtype_flag and kv_dtype_flag.lower().startswith("fp8"):
        return 1
    cfg = text_config(config)
    for name in (dtype_flag, cfg.get("torch_dtype"), cfg.get("dtype"), config.get("torch_dtype")):
        if isinstance(name, str) and name.lower() in DTYPE_BYTES:
            return DTYPE_BYTES[name.lower()]
    return 2


def kv_cache_bytes(config: Mapping[str, Any], tokens: int, tp: int, elem: int) -> int | None:
    """The KV cache of one sequence of `tokens` tokens over `tp` tensor-parallel ranks, as vLLM sizes it
    (the module's text cites the lines); None when config.json does not give the dimensions. Pure."""
    cfg = text_config(config)
    layers = _int(cfg, "num_hidden_layers")
    if layers is None:
        return None
    tp = max(tp, 1)
    lora = _int(cfg, "kv_lora_rank")
    if lora is not None:  # MLA: one latent of kv_lora_rank + qk_rope_head_dim, on every rank
        per_rank = lora + (_int(cfg, "qk_rope_head_dim") or 0)
        return layers * per_rank * elem * tokens * tp
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    head_dim = _int(cfg, "head_dim")
    hidden = _int(cfg, "hidden_size")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    if kv_heads is None or head_dim is None:
        return None
    per_rank = max(1, kv_heads // tp)
    return layers * per_rank * 2 * head_dim * elem * tokens * tp


def need_bytes(weights: int, kv: int | None, gpus: int) -> int:
    """What a run needs: weights x 1.2 + its KV cache + the per-GPU allowance. Pure."""
    return int(weights * HEADROOM) + (kv or 0) + max(gpus, 1) * PER_GPU


def capacity_bytes(per_gpu: int, gpus: int) -> int:
    """0.9 x gpus x the memory of one GPU. Pure."""
    return int(UTILIZATION * max(gpus, 1) * per_gpu)


def gb(n: int | float) -> str:
    return f"{n / GB:,.1f} GB"


# --------------------------------------------------------------------------- what the host says


def parse_memory_total(text: str) -> dict[str, int]:
    """nvidia-smi `--query-gpu=index,memory.total --format=csv,noheader,nounits` (MiB): {id: bytes}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 2 and cells[0] and cells[1].isdigit():
            out[cells[0]] = int(cells[1]) * MIB
    return out


def nvidia_smi_memory() -> dict[str, int]:
    """Each GPU's total memory as nvidia-smi reports it (none: no nvidia-smi, or it failed)."""
    query = ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_memory_total(out.stdout) if out.returncode == 0 else {}


def pool_memory(by_id: Mapping[str, int], pool: Sequence[str] | None) -> int | None:
    """The smallest memory among the pool's GPUs (all listed when the pool is not named)."""
    found = [by_id[g] for g in pool if g in by_id] if pool is not None else list(by_id.values())
    return min(found) if found else None


# --------------------------------------------------------------------------- what the weights are


def _snapshot(repo_folder: Path, revision: str | None) -> Path | None:
    """The snapshot folder a revision resolves to in the cache (refs/<branch>, or the commit)."""
    rev = revision or "main"
    if ".." in Path(rev).parts or Path(rev).is_absolute():
        return None  # a revision names a ref or a commit inside the repo's folder, nothing else
    ref = repo_folder / "refs" / rev
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else rev
    except OSError:
        return None
    folder = repo_folder / "snapshots" / commit
    return folder if commit and "/" not in commit and folder.is_dir() else None


def _json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def snapshot_weights(folder: Path) -> tuple[int | None, str]:
    """The bytes of a snapshot's safetensors files (symlinks to blobs followed); None and why when none
    are there or the index names a shard that is missing."""
    files = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*.safetensors")}
    index = _json(folder / INDEX)
    weight_map = index.get("weight_map") if index else None
    shards = set(weight_map.values()) if isinstance(weight_map, dict) else set()
    missing = sorted(s for s in shards if s not in files)
    if missing:
        return None, f"{len(missing)} of its {len(shards)} safetensors shards are not in the cache"
    if not files:
        return None, "no safetensors file in the cache"
    try:
        return sum(p.stat().st_size for p in files.values()), ""
    except OSError as exc:
        return None, f"a weights file cannot be read ({exc.strerror or exc})"


def cached_weights(cache_dir: str, model: str, revision: str | None) -> Weights:
    """The weights and config.json of `model` at `revision` in the local Hugging Face cache."""
    from evaluator.data.hub import repo_folder

    local = Path(model).is_dir()  # a local folder, served as it is
    folder = Path(model) if local else _snapshot(repo_folder(cache_dir, model, "model"), revision)
    where = "the local Hugging Face cache"
    if folder is None:
        return Weights(None, None, where, f"revision {revision or 'main'} is not in {cache_dir}")
    size, why = snapshot_weights(folder)
    return Weights(size, _json(folder / "config.json"), where, why)


def hub_weights(model: str, revision: str | None) -> Weights:
    """The weights' bytes from the Hub's file list and its config.json (HfApi; HF_ENDPOINT is honoured)."""
    from huggingface_hub import HfApi, hf_hub_download

    where = "the Hub's file list"
    try:
        info = HfApi().model_info(model, revision=revision, files_metadata=True, timeout=HUB_TIMEOUT)
        sizes = [s.size for s in info.siblings or [] if s.rfilename.endswith(".safetensors")]
        config = _json(Path(hf_hub_download(model, "config.json", revision=info.sha or revision)))
    except Exception as exc:  # any failure of the Hub is an unknown size, never a refusal
        return Weights(None, None, where, f"the Hub did not answer ({type(exc).__name__})")
    if not sizes or any(s is None for s in sizes):
        return Weights(None, config, where, "the Hub lists no safetensors sizes")
    return Weights(sum(s for s in sizes if s is not None), config, where)


def model_weights(model: str, revision: str | None, env: Mapping[str, str] | None = None) -> Weights:
    """The cache first; the Hub when the cache does not have them and HF_HUB_OFFLINE is not set."""
    from evaluator.data.hub import hub_cache_dir

    env = os.environ if env is None else env
    found = cached_weights(hub_cache_dir(), model, revision)
    if found.size is not None or env.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return found
    online = hub_weights(model, revision)
    return online if online.size is not None else found
