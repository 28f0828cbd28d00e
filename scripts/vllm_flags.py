"""Write (or check) the flag list of `vllm serve` that the bundle ships: evaluator/study/vllm_serve_flags.txt.

Run it with the python of a venv where vLLM is installed (scripts/vllm_cpu_env.sh makes one):

    "$(bash scripts/vllm_cpu_env.sh)" scripts/vllm_flags.py            # rewrite the list
    "$(bash scripts/vllm_cpu_env.sh)" scripts/vllm_flags.py --check    # exit 1 when it differs

The flags come from the argument parser `vllm serve` itself builds (vllm.entrypoints.cli.serve's
subcommand, over vllm.entrypoints.openai.cli_args.make_arg_parser): every option string of every
action, long and short forms, `--no-...` forms included. The first line names the vLLM version; the
sweep's checks (evaluator/study/plan_checks.py) read both. Nothing is imported from the bundle, so the
vLLM venv needs nothing else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "evaluator" / "study" / "vllm_serve_flags.txt"


def serve_parser() -> argparse.ArgumentParser:
    """The parser of `vllm serve`, built as vLLM's own CLI builds it."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older layouts
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
    from vllm.entrypoints.cli import serve

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(dest="subparser")
    for cmd in serve.cmd_init():
        if cmd.name == "serve":
            return cmd.subparser_init(subparsers)
    raise SystemExit("vllm.entrypoints.cli.serve has no `serve` subcommand")


def flag_list() -> str:
    import vllm

    parser = serve_parser()
    flags = sorted({o for a in parser._actions for o in a.option_strings})
    head = (
        f"# `vllm serve` flags of vLLM {vllm.__version__} (one per line), written by scripts/vllm_flags.py "
        "from the installed parser; tests/test_vllm_flags.py keeps them equal.\n"
    )
    return head + "".join(f"{f}\n" for f in flags)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the shipped list differs")
    ap.add_argument("--output", type=Path, default=OUT)
    ns = ap.parse_args()
    text = flag_list()
    if ns.check:
        same = ns.output.is_file() and ns.output.read_text(encoding="utf-8") == text
        print("the shipped flag list matches" if same else f"{ns.output} differs from the installed vLLM")
        return 0 if same else 1
    ns.output.write_text(text, encoding="utf-8")
    print(f"wrote {ns.output} ({text.count(chr(10)) - 1} flags)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
