"""What the command line says to a newcomer: `evaluate --help` grouped with every option described,
progress lines in words (through the real command line), command summaries never cut mid-sentence, and
no help text naming a docs/ file an install without the checkout lacks."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from support.cli import REPO, eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.cli.main import evaluate_cmd
from evaluator.request.pacing import PacingSummary

HEADINGS = [
    "Endpoint:",
    "Data:",
    "Sampling and request shape:",
    "Run folder:",
    "Retries and rate limits:",
    "Batch (the provider's Batch API):",
    "Other options:",
]


def _options(help_text: str) -> dict[str, str]:
    """Each --option of the help and the text that describes it (to the next option or heading)."""
    out: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        m = re.match(r"^  (--[a-z0-9-]+)(.*)$", line)
        if m:
            current = m.group(1)
            rest = re.sub(r"^(\s\S+)?\s{2,}", "", m.group(2), count=1) if m.group(2).strip() else ""
            out[current] = rest.strip()
        elif current and line.startswith("   "):
            out[current] += " " + line.strip()
        elif not line.strip() or not line.startswith(" "):
            current = None
    return out


def test_evaluate_help_groups_the_options_and_describes_every_one() -> None:
    for command in ("evaluate", "check-endpoint"):
        res = run_cli(command, "--help")
        assert res.returncode == 0, res.stderr
        text = res.stdout
        positions = [text.index(h) for h in HEADINGS]
        assert positions == sorted(positions), "headings out of order"
        options = _options(text)
        assert len(options) == len(evaluate_cmd.params) + 1, sorted(options)  # every option and --help
        undescribed = [o for o, d in options.items() if not re.search(r"[a-z]{3}", re.sub(r"\[.*?\]", "", d))]
        assert undescribed == [], undescribed
    endpoint = text[text.index("Endpoint:") : text.index("Data:")]
    assert "--base-url" in endpoint and "--model" in endpoint and "--backend" in endpoint
    batch = text[text.index("Batch (") : text.index("Other options:")]
    batch_options = {o for o in options if o.startswith("--batch")}
    assert {"--batch", "--batch-max-mb", "--batch-poll-s"} <= batch_options
    assert batch_options == set(re.findall(r"^  (--[a-z-]+)", batch, re.M))


def test_the_progress_lines_say_requests_at_once_in_words(tmp_path, server) -> None:
    rows = doccount_rows(6)
    write_doccount(tmp_path / "d" / "t.parquet", rows)
    server.update_config(answers=doccount_reply(rows))
    res = run_cli("evaluate", *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), tmp_path / "r"),
                  "--concurrency", "4")  # fmt: skip
    assert res.returncode == 0, res.stderr
    progress = [line for line in res.stderr.splitlines() if line.startswith("[evaluate] 6/6 rows")]
    assert progress and re.search(r"\| up to [1-4] requests at once \(--concurrency 4\)$", progress[-1])
    summary = [line for line in res.stderr.splitlines() if line.startswith("[evaluate] recorded")]
    assert "(--concurrency 4; never narrowed by rate limits)" in summary[0]
    assert "lowest" not in res.stderr and "concurrency 4/4" not in res.stderr


def test_a_narrowed_window_says_how_far() -> None:
    line = PacingSummary(concurrency=12, lowest=4, ceiling=16, refusals=3, held_s=2.0, sent={}).line()
    assert line.startswith(
        "up to 12 requests at once at the end (--concurrency 16; rate limits narrowed it to 4"
    )


@pytest.mark.parametrize("args", [["--help"], ["batch", "--help"]])
def test_help_cuts_no_summary_mid_sentence(args: list[str]) -> None:
    res = run_cli(*args, env={"COLUMNS": "80"})
    assert res.returncode == 0
    summaries = res.stdout.split("Commands:")[1].splitlines()
    cut = [line for line in summaries if line.rstrip().endswith("...")]
    assert cut == []


def test_help_names_no_docs_file_an_install_without_them_lacks(tmp_path) -> None:
    """The package alone (as a wheel installs it, no docs/ beside it): no help text names docs/."""
    shutil.copytree(REPO / "evaluator", tmp_path / "evaluator", ignore=shutil.ignore_patterns("__pycache__"))
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import click\n"
        "from evaluator.cli.main import main\n"
        "ctx = click.Context(main, info_name='doccount')\n"
        "def walk(cmd, ctx):\n"
        "    print(cmd.get_help(ctx))\n"
        "    for sub in getattr(cmd, 'commands', {}).values():\n"
        "        walk(sub, click.Context(sub, info_name=sub.name, parent=ctx))\n"
        "walk(main, ctx)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "Usage: doccount sweep" in res.stdout and "docs/" not in res.stdout
