"""The sweep file's serving parts, declared (docs/serving.md): `[serve]`, a run's `serve = { revision,
gpus, args }` and `served_model_name`; the Slurm executor's settings (`[serve]` keys of an `executor =
"slurm"` sweep), typed, each with its one default, and the submitit parameters of one run's job built
from them. No submitit import here: the sweep file is read, and a local sweep runs, without it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Collection
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from evaluator.core.vocab import ExecutorName, Launcher
from evaluator.study.launch import DEFAULT_COMMAND, DEFAULT_IMAGE, ServerSpec
from evaluator.study.unit import UnitTask

NO_KEY = "never a key of yours; remove `api_key_env`"
Fail = Callable[[str, str], Exception]  # an error naming the file and the line of a key (sweep_file's)
Text = Annotated[str, Meta(description="a string")]
AtLeastOne = Annotated[int, Meta(ge=1, description="an integer >= 1")]
GpuIds = Annotated[list["GpuId"], Meta(description="a list of distinct GPU ids, e.g. [0, 1, 2, 3]")]
Command = Annotated[list[str], Meta(min_length=1, description='a non-empty list of strings, e.g. ["vllm", "serve"]')]  # fmt: skip
Program = Annotated[str, Meta(pattern=r"\S", description='a container program, e.g. "podman"')]
MemSize = Annotated[str | AtLeastOne, Meta(description='a Slurm memory size, e.g. "64G"')]


class GpuId(str):
    """A GPU's id as the file writes it, an index >= 0 or a non-empty string (checked_serve: a plain str)."""


def gpu_id(tp: type, value: Any) -> Any:  # msgspec's dec_hook
    if tp is not GpuId:
        raise NotImplementedError
    if (type(value) is int and value >= 0) or (type(value) is str and value.strip()):
        return GpuId(value)
    raise ValueError("not a GPU id")


class ServeTable(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[serve]. `gpus` None: every GPU nvidia-smi lists (asked only when a run is served)."""

    executor: ExecutorName = "local"
    gpus: GpuIds | None = None
    command: Command = msgspec.field(default_factory=lambda: list(DEFAULT_COMMAND))
    launcher: Launcher = "process"
    image: Annotated[str, Meta(pattern=r"\S", description="an image name")] = DEFAULT_IMAGE
    runtime: Program | None = None  # a path to a program, too
    # one GPU's memory, for the memory check (study.memory) where nvidia-smi here does not see the pool
    gpu_memory_gb: (
        Annotated[float, Meta(gt=0, le=100_000, description="a number of GB > 0, e.g. 80")] | None
    ) = None
    partition: Text | None = None
    account: Text | None = None
    qos: Text | None = None
    constraint: Annotated[str, Meta(description='a Slurm feature expression, e.g. "a100|h100"')] | None = None
    reservation: Text | None = None
    time: Annotated[str, Meta(description='a Slurm time limit string, e.g. "04:00:00"')] | None = None
    gpus_per_node: AtLeastOne | None = None
    cpus_per_gpu: AtLeastOne | None = None
    mem_per_gpu: MemSize | None = None
    setup: Annotated[list[str], Meta(description="a list of shell lines")] | None = None

    @property
    def slurm(self) -> SlurmSettings:
        """The Slurm executor's settings: those the file gives, the others their one default."""
        given = {k: v for k in SLURM_KEYS if (v := getattr(self, k)) is not None}
        return msgspec.convert(given, SlurmSettings)


SLURM_KEYS = ServeTable.__struct_fields__[ServeTable.__struct_fields__.index("partition") :]


class ServeRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A run's `serve = { revision, gpus, args }`."""

    revision: Annotated[str, Meta(pattern=r"\S", description="a branch, tag or commit")] | None = None
    gpus: Annotated[int, Meta(ge=0, description="an integer >= 0 (GPUs of its server)")] = 1
    args: Annotated[list[str], Meta(description='a list of strings, e.g. ["--max-model-len", "32768"]')] = []  # noqa: E501


class RunServe(ServeRequest, frozen=True, kw_only=True):
    """A served run's server: its request and the name its requests use."""

    served_name: str


def checked_serve(table: ServeTable, given: Collection[str], fail: Fail) -> ServeTable:
    """What a schema cannot say about [serve]; the GPU ids as plain strs (encodable wherever they go)."""
    gpus = None if table.gpus is None else [str(g) for g in table.gpus]
    if gpus is not None and len(set(gpus)) < len(gpus):
        raise fail("gpus", "[serve] `gpus` must be a list of distinct GPU ids, e.g. [0, 1, 2, 3]")
    key = next((k for k in given if k in SLURM_KEYS), None)
    if key and table.executor != "slurm":
        raise fail(key, f'`{key}` is a Slurm setting: set executor = "slurm"')
    if "command" in given and table.launcher == "container":
        raise fail("command", '[serve] has `command` and launcher = "container": give one of them')
    for key in ("image", "runtime"):
        if key in given and table.launcher != "container":
            raise fail(key, f'[serve] `{key}` needs launcher = "container"')
    return msgspec.structs.replace(table, gpus=gpus)


def run_serve(
    name: str, model: str, serve: ServeRequest | None, served: str | None, given: Collection[str], fail: Fail
) -> RunServe | None:
    """A run's server (None: the run has an endpoint), checked against its other keys."""
    if serve is None:
        if served is not None:
            raise fail("served_model_name", f"run {name}: `served_model_name` needs `serve = {{...}}`")
        return None
    if "base_url" in given:
        raise fail("base_url", f"run {name} has `serve` and `base_url`: a served run's URL is its server's")
    if "api_key_env" in given:  # its requests carry its own server's token (study.unit)
        raise fail("api_key_env", f"run {name}: a served run sends its own server's fresh token, {NO_KEY}")
    return RunServe(served_name=served or model, **msgspec.structs.asdict(serve))


def server_spec(table: ServeTable, model: str, serve: RunServe | None) -> ServerSpec | None:
    """What a served run's unit starts: its request under [serve]'s launcher; None for an endpoint run."""
    if serve is None:
        return None
    # a docker client without an engine is common (podman hosts): the file's `runtime` settles it
    runtime = table.runtime or (
        "docker" if shutil.which("docker") or not shutil.which("podman") else "podman"
    )
    return ServerSpec(
        model=model,
        served_name=serve.served_name,
        revision=serve.revision,
        args=serve.args,
        launcher=table.launcher,
        command=table.command,
        image=table.image,
        runtime=runtime,
    )


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
    params.update({k: v for k in ("partition", "account", "qos", "constraint") if (v := getattr(slurm, k))})
    if slurm.reservation:
        params["additional_parameters"] = {"reservation": slurm.reservation}
    return params
