"""Launchers: the argv that starts one model server, as pure functions (no process is started here).

The process launcher runs (docs/serving.md)

    COMMAND... MODEL --host 127.0.0.1 --port PORT --served-model-name NAME [--revision REV] ARGS...

with CUDA_VISIBLE_DEVICES set by the caller; the container launcher hands the same to the bundle's vLLM
image (scripts/serve_vllm.sh) on the host network, with those GPUs as devices, and stops it by name. The
server's token reaches it through the environment only. `free_port` checks the port the kernel gives,
because vLLM can bind one another server listens on (SO_REUSEPORT) and the two would share requests.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path

import msgspec

from evaluator.core.vocab import Launcher

DEFAULT_COMMAND = ("vllm", "serve")
DEFAULT_IMAGE = "doccount-vllm:local"
HOST = "127.0.0.1"


class ServerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What one run serves and how; no secret is ever in it (a key reaches a server only by env name)."""

    model: str
    """The model to load (a Hugging Face id or a folder)."""
    served_name: str
    """The name the server answers to (`--served-model-name`); requests send it as `model`."""
    revision: str | None = None
    """The model revision (branch, tag or commit) passed as `--revision`."""
    args: list[str] = msgspec.field(default_factory=list)
    """More server arguments, after the contract's own."""
    launcher: Launcher = "process"
    """`process` (run `command`) or `container` (run `image` with `runtime`)."""
    command: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_COMMAND))
    """The server program (process launcher)."""
    image: str = DEFAULT_IMAGE
    """The serving image (container launcher)."""
    runtime: str = "docker"
    """The container program: docker or podman (container launcher)."""


def contract_args(spec: ServerSpec, port: int, host: str = HOST) -> list[str]:
    """MODEL --host HOST --port PORT --served-model-name NAME [--revision REV] ARGS..."""
    out = [spec.model, "--host", host, "--port", str(port), "--served-model-name", spec.served_name]
    if spec.revision:
        out += ["--revision", spec.revision]
    return out + list(spec.args)


def process_argv(spec: ServerSpec, port: int, host: str = HOST) -> list[str]:
    return [*spec.command, *contract_args(spec, port, host)]


def container_name(run: str, port: int) -> str:
    """A name unique on the host while the server runs (the port is), so the guard can stop it by name."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in run)[:60]
    return f"doccount-{safe}-{port}"


def gpu_args(runtime: str, gpus: list[str]) -> list[str]:
    """The devices of a container: docker's --gpus "device=0,1"; podman's CDI devices, one each."""
    if not gpus:
        return []
    if Path(runtime).name.startswith("podman"):
        return [a for g in gpus for a in ("--device", f"nvidia.com/gpu={g}")]
    return ["--gpus", f'"device={",".join(gpus)}"']


def container_argv(
    spec: ServerSpec, port: int, gpus: list[str], name: str, hf_cache: str | None = None, host: str = HOST
) -> list[str]:
    """`docker run` of the serving image: the contract's values through the image launcher's variables,
    revision and args on its command line; keys only by name (-e HF_TOKEN), never as values."""
    cache = hf_cache or str(Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")))
    rest = (["--revision", spec.revision] if spec.revision else []) + list(spec.args)
    # a model given as a folder of this host is seen at the same path inside, read-only
    folder = ["-v", f"{spec.model}:{spec.model}:ro"] if spec.model.startswith("/") else []
    return [
        spec.runtime, "run", "--rm", "--name", name, "--network", "host", "--ipc", "host",
        *gpu_args(spec.runtime, gpus),
        "-v", f"{cache}:/root/.cache/huggingface", *folder,
        "-e", f"MODEL={spec.model}", "-e", f"SERVED_MODEL_NAME={spec.served_name}",
        "-e", f"HOST={host}", "-e", f"PORT={port}", "-e", "HF_TOKEN", "-e", "HF_HUB_OFFLINE",
        "-e", "VLLM_API_KEY",  # the server's own token, by name: the unit puts it in the environment
        spec.image, *rest,
    ]  # fmt: skip


def container_stop_argv(spec: ServerSpec, name: str, grace_s: float) -> list[str]:
    return [spec.runtime, "stop", "-t", str(max(1, int(grace_s))), name]


def remove_argv(spec: ServerSpec, run: str, port: int) -> list[str] | None:
    """What removes the server's container once it ended (None for a process): `run --rm` alone leaves it
    to a cleanup process that may finish after the sweep."""
    return [spec.runtime, "rm", "-f", container_name(run, port)] if spec.launcher == "container" else None


def launch_argv(spec: ServerSpec, run: str, port: int, gpus: list[str]) -> tuple[list[str], list[str] | None]:
    """(the argv that starts the server, the argv that stops it, or None: stop its process group)."""
    if spec.launcher == "container":
        name = container_name(run, port)
        return container_argv(spec, port, gpus, name), container_stop_argv(spec, name, 10)
    return process_argv(spec, port), None


PORT_PLACEHOLDER = "$PORT"


def plan_argv(spec: ServerSpec, run: str, gpus: list[str]) -> list[str]:
    """The argv `--plan` shows for a server: what launch_argv would run, with `$PORT` for the port (the
    sweep picks a free one) and, for the process launcher, CUDA_VISIBLE_DEVICES as a shell prefix."""
    if spec.launcher == "container":
        name = container_name(run, 0)
        swap = {"PORT=0": f"PORT={PORT_PLACEHOLDER}", name: name[:-1] + PORT_PLACEHOLDER}
        return [swap.get(a, a) for a in container_argv(spec, 0, gpus, name)]
    argv = process_argv(spec, 0)
    argv[argv.index("--port") + 1] = PORT_PLACEHOLDER
    return ([f"CUDA_VISIBLE_DEVICES={','.join(gpus)}"] if gpus else []) + argv


def missing_program(spec: ServerSpec) -> str | None:
    """The launcher's program when this host has none (else None): a server that cannot start is not tried."""
    program = spec.runtime if spec.launcher == "container" else spec.command[0]
    found = (
        shutil.which(program) if os.sep not in program else (program if os.access(program, os.X_OK) else None)
    )
    return None if found else program


# ----------------------------------------------------------------------------- ports

_taken: set[int] = set()  # handed out by this process and not yet released (two starts racing)
_ports_lock = threading.Lock()


def port_is_free(port: int, host: str = HOST) -> bool:
    """Nothing answers on it and it can be bound without SO_REUSEADDR/SO_REUSEPORT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST, tries: int = 50) -> int:
    """A port nobody listens on and this process has not handed out; release it with release_port."""
    for _ in range(tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        with _ports_lock:
            if port in _taken or not port_is_free(port, host):
                continue
            _taken.add(port)
            return port
    raise OSError(f"no free port on {host} after {tries} tries")


def release_port(port: int) -> None:
    with _ports_lock:
        _taken.discard(port)
