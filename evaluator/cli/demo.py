"""`doccount demo` and `doccount serve-reference`: the CPU pipeline and its reference model (the `demo` extra)."""

from __future__ import annotations

from pathlib import Path

import click

from evaluator.core.errors import ExitCode, UserError

# What `doccount demo` and `serve-reference` import beyond the base install (the `demo` extra)
DEMO_MODULES = {"rapid_layout": "rapid-layout", "onnxruntime": "onnxruntime", "skimage": "scikit-image"}


def require_demo_extra(command: str) -> None:
    """One line naming the extra to install, instead of a ModuleNotFoundError traceback mid-run."""
    import importlib.util

    missing = [pkg for module, pkg in DEMO_MODULES.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise UserError(
            f"`doccount {command}` needs the demo extra (missing: {', '.join(missing)}); install it with "
            "pip install 'doccount-eval[demo]' (from a checkout: pip install -e '.[demo]')"
        )


@click.command("demo")
@click.option(
    "--run-root",
    type=click.Path(path_type=Path),
    default=Path("runs/demo"),
    show_default=True,
    help="The run folder; the sample pages and the reference server's log go inside it too.",
)
@click.option(
    "--data-root",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the sample pages go (default: <run-root>/demo-data).",
)
@click.option("--pages", type=click.IntRange(4, 2000), default=40, show_default=True, help="Sample pages.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample pages.")
@click.option(
    "--concurrency", type=click.IntRange(1, 64), default=2, show_default=True, help="Requests in flight."
)
def demo_cmd(run_root: Path, data_root: Path | None, pages: int, seed: int, concurrency: int) -> ExitCode:
    """Run the whole pipeline on a CPU: sample pages, a reference model on loopback, evaluate, score."""
    require_demo_extra("demo")
    from evaluator.demo.pipeline import run_demo

    return ExitCode(run_demo(run_root, data_root or run_root / "demo-data", pages, seed, concurrency))


@click.command("serve-reference")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--model-name", default="reference-layout-cdla", show_default=True)
@click.option(
    "--port-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the port to this file once listening (with --port 0: a free port).",
)
def serve_reference_cmd(host: str, port: int, model_name: str, port_file: Path | None) -> None:
    """Serve the CPU reference model (a document-layout detector) as an OpenAI-compatible endpoint."""
    require_demo_extra("serve-reference")
    from evaluator.demo.reference_server import run_reference_server

    run_reference_server(host, port, model_name, port_file)
