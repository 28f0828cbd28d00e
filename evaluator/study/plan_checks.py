"""Checks of a sweep's served runs before any server starts or job is submitted (docs/serving.md,
"Checks before starting"): each problem is one line naming the run and the numbers; the sweep exits 2
with all of them (`--plan` too).

For a run served by vLLM (`vllm serve`, a `python -m vllm...` entry point, scripts/vllm_cpu_serve.py, or
the container launcher): `max_tokens` plus the prompt budget fits its `--max-model-len` (when set);
tensor x pipeline x data parallel sizes equal its `gpus` (not for `gpus = 0`); every flag is one the
pinned `vllm serve` accepts (vllm_serve_flags.txt; the closest is named); its memory need (study.memory)
fits its GPUs, a size that cannot be known being a note line. A custom `command` is not checked.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

from evaluator.data.benchmarks import DEFAULT_BENCHMARK, get_benchmark
from evaluator.study import memory
from evaluator.study.serve_file import ServeTable
from evaluator.study.sweep_file import RunSpec, SweepFileError, SweepSpec

FLAGS_FILE = "vllm_serve_flags.txt"
PARALLEL = (
    ("--tensor-parallel-size", "-tp"),
    ("--pipeline-parallel-size", "-pp"),
    ("--data-parallel-size", "-dp"),
)
MAX_MODEL_LEN = ("--max-model-len",)
KV_CACHE_DTYPE = ("--kv-cache-dtype",)
DTYPE = ("--dtype",)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_LENGTH = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")


class PlanCheckError(SweepFileError):
    """Problems found before starting: one `error:` line each (UserError adds the first prefix)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\nerror: ".join(lines))
        self.lines = lines


@functools.lru_cache(maxsize=1)
def vllm_flags() -> tuple[str, frozenset[str]]:
    """(the pinned vLLM version, the flags its `vllm serve` accepts), from the shipped list."""
    text = (resources.files("evaluator.study") / FLAGS_FILE).read_text(encoding="utf-8")
    version = re.search(r"vLLM (\S+)", text.splitlines()[0])
    flags = frozenset(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))
    return (version.group(1) if version else "?"), flags


def is_vllm(table: ServeTable) -> bool:
    """The sweep's server is vLLM: `vllm serve`, `python -m vllm...`, vllm_cpu_serve.py, or the container."""
    if table.launcher == "container":
        return True
    cmd = table.command
    if Path(cmd[0]).name == "vllm" and cmd[1:2] == ["serve"]:
        return True
    modules = [cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "-m"]
    if any(m == "vllm" or m.startswith("vllm.") for m in modules):
        return True
    return any(Path(a).name == "vllm_cpu_serve.py" for a in cmd)


def options(args: Iterable[str]) -> Iterator[tuple[str, str | None, str]]:
    """Each option of a vLLM argument list: (flag as vLLM reads it, its value, the flag as written).
    vLLM reads `--a_b` as `--a-b`, `--flag=value`, and `--json-flag.key value` as part of `--json-flag`;
    a token that is a number (e.g. `-1`) is a value, not a flag."""
    items = list(args)
    for i, tok in enumerate(items):
        if not _is_flag(tok):
            continue
        name, eq, attached = tok.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        base = name.split(".", 1)[0] if "." in name[2:] or name.startswith("-O.") else name
        nxt = items[i + 1] if i + 1 < len(items) else None
        value = attached if eq else (nxt if nxt is not None and not _is_flag(nxt) else None)
        yield base, value, tok


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and not _NUMBER.match(tok) and tok != "-"


def flag_value(args: Iterable[str], names: Iterable[str]) -> str | None:
    """The value of the last of these flags in the list (argparse: the last one wins); None: absent."""
    wanted, found = set(names), None
    for name, value, _tok in options(args):
        if name in wanted:
            found = value
    return found


def length(text: str | None) -> int | None:
    """A vLLM length as the parser reads it: 4096, 32k (x1000), 32K (x1024); None: unknown (absent,
    -1 or `auto`: the model's own maximum)."""
    m = _LENGTH.match(text or "")
    if not m:
        return None
    scale = {"": 1, "k": 1000, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    value = float(m.group(1)) * scale
    return int(value) if value.is_integer() or m.group(2) else None


def run_max_tokens(run: RunSpec) -> int | None:
    """The output limit the run's requests carry: its `max_tokens`, else its benchmark's default;
    None when none is sent (`max_tokens = "none"`, or a benchmark that sends none)."""
    value = run.options.get("max_tokens")
    if value is None:
        return get_benchmark(str(run.options.get("benchmark", DEFAULT_BENCHMARK))).default_sampling.max_tokens
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_problem(run: RunSpec) -> str | None:
    assert run.serve is not None
    limit = length(flag_value(run.serve.args, MAX_MODEL_LEN))
    max_tokens = run_max_tokens(run)
    if limit is None or max_tokens is None:
        return None
    bench = get_benchmark(str(run.options.get("benchmark", DEFAULT_BENCHMARK)))
    need = max_tokens + bench.prompt_budget
    if need <= limit:
        return None
    room = limit - bench.prompt_budget
    lower = f"lower max_tokens to {room}" if room > 0 else "a longer context is the only way"
    return (
        f"max_tokens {max_tokens} + the {bench.name} prompt budget {bench.prompt_budget} = {need} tokens "
        f"> --max-model-len {limit}: raise --max-model-len to at least {need} (if the model allows it) "
        f"or {lower}"
    )


def parallel_problem(run: RunSpec) -> str | None:
    assert run.serve is not None
    if run.serve.gpus == 0:  # a CPU server
        return None
    sizes = [length(flag_value(run.serve.args, names)) or 1 for names in PARALLEL]
    product = sizes[0] * sizes[1] * sizes[2]
    if product == run.serve.gpus:
        return None
    what = " x ".join(f"{names[0]} {n}" for names, n in zip(PARALLEL, sizes, strict=True))
    return (
        f"{what} = {product} GPU(s), but serve.gpus = {run.serve.gpus}: make them equal "
        "(a GPU the server never uses, or a server that cannot start)"
    )


def flag_problems(run: RunSpec) -> list[str]:
    assert run.serve is not None
    version, known = vllm_flags()
    out = []
    for name, _value, tok in options(run.serve.args):
        # -O3, -O=3 and -O 3 are vLLM's own shorthand for --optimization-level
        if name in known or name.startswith("-O"):
            continue
        written = tok.split("=", 1)[0]
        prefixed = [k for k in known if name.startswith("--") and k.startswith(name)]
        if len(prefixed) == 1:  # argparse takes it, but the checks here (and a later vLLM) may not
            out.append(f"{written} abbreviates {prefixed[0]}: write the flag in full")
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        hint = f": the closest is {close[0]}" if close else " (see `vllm serve --help`)"
        out.append(f"`vllm serve` of vLLM {version} has no flag {written}{hint}")
    return out


def run_problems(sweep: SweepSpec, run: RunSpec) -> list[str]:
    """The problems of one run (none for an endpoint run or a custom server command)."""
    if run.serve is None or not is_vllm(sweep.serve):
        return []
    found = [context_problem(run), parallel_problem(run), *flag_problems(run)]
    where = f"{sweep.path}:{run.line}: " if run.line else f"{sweep.path}: "
    return [f"{where}run {run.name}: {p}" for p in found if p]


def gpu_memory(sweep: SweepSpec) -> tuple[int | None, str]:
    """One GPU's memory in bytes and where it comes from; (None, why) when it is not known here."""
    table = sweep.serve
    if table.gpu_memory_gb is not None:
        return int(table.gpu_memory_gb * memory.GB), "[serve] gpu_memory_gb"
    if table.executor != "local":
        return None, f"the {table.executor} pool's GPU memory is not known here: set [serve] gpu_memory_gb"
    found = memory.pool_memory(memory.nvidia_smi_memory(), table.gpus)
    if found is None:
        return None, "nvidia-smi reports no GPU memory on this host: set [serve] gpu_memory_gb"
    return found, "nvidia-smi memory.total"


def memory_problem(run: RunSpec, per_gpu: int, source: str) -> tuple[str | None, str | None]:
    """(the problem, the note) of a served run's memory need against 0.9 x its GPUs x per_gpu."""
    assert run.serve is not None
    gpus, args = run.serve.gpus, run.serve.args
    found = memory.model_weights(run.model, run.serve.revision)
    if found.size is None:
        return None, f"memory not checked: the size of {run.model} is unknown ({found.why})"
    config = found.config or {}
    tokens = length(flag_value(args, MAX_MODEL_LEN)) or memory.text_config(config).get(
        "max_position_embeddings"
    )
    tp = length(flag_value(args, PARALLEL[0])) or 1
    elem = memory.dtype_bytes(config, flag_value(args, DTYPE), flag_value(args, KV_CACHE_DTYPE))
    kv = memory.kv_cache_bytes(config, tokens, tp, elem) if isinstance(tokens, int) and tokens > 0 else None
    need, cap = memory.need_bytes(found.size, kv, gpus), memory.capacity_bytes(per_gpu, gpus)
    if need <= cap:
        return None, None
    kv_text = (
        f"{memory.gb(kv)} of KV cache for one {tokens:,}-token sequence"
        if kv is not None
        else "no KV cache counted (config.json gives no dimensions)"
    )
    return (
        f"needs {memory.gb(need)} of GPU memory ({memory.gb(found.size)} of weights in {found.where} "
        f"x {memory.HEADROOM} + {kv_text} + {max(gpus, 1)} x 1 GiB) > {memory.gb(cap)} = "
        f"{memory.UTILIZATION} x {gpus} GPU(s) x {memory.gb(per_gpu)} ({source}): serve it on more GPUs "
        "or GPUs with more memory, or a smaller (quantized) checkpoint"
    ), None


def memory_lines(sweep: SweepSpec, runs: Iterable[RunSpec]) -> tuple[list[str], list[str]]:
    """(problems, notes) of the memory of these runs' servers (vLLM's, on GPUs)."""
    served = [r for r in runs if r.serve is not None and r.serve.gpus > 0 and is_vllm(sweep.serve)]
    if not served:
        return [], []
    per_gpu, source = gpu_memory(sweep)
    if per_gpu is None:
        return [], [f"note: the memory of served runs is not checked: {source}"]
    problems, notes = [], []
    for run in served:
        problem, note = memory_problem(run, per_gpu, source)
        where = f"{sweep.path}:{run.line}: " if run.line else f"{sweep.path}: "
        problems += [f"{where}run {run.name}: {problem}"] if problem else []
        notes += [f"note: run {run.name}: {note}"] if note else []
    return problems, notes


def check_runs(sweep: SweepSpec, runs: Iterable[RunSpec]) -> list[str]:
    """Raise PlanCheckError with every problem of these runs (nothing started yet); else the note lines
    (a size that could not be known)."""
    runs = list(runs)
    lines = [line for run in runs for line in run_problems(sweep, run)]
    problems, notes = memory_lines(sweep, runs)
    if lines or problems:
        raise PlanCheckError(lines + problems)
    return notes
