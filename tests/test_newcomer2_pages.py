"""Issue #42, "also seen": the forest plot's long names, the report's badge beside a wrong answer, the docs'
commands, help texts from an install without docs/, and the archive's notes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import click
from support.boards import board, row, typed
from support.cli import REPO, eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.cli.main import main
from evaluator.report.leaderboard_page import LABEL_CHARS
from evaluator.report.pieces import status_bits

LONG = "anthropic-claude-sonnet-4.5-reasoning-high-temperature-1-top-p-none-repeat-3"


def test_a_long_run_name_is_shortened_in_the_forest_plot_and_whole_in_its_tooltip() -> None:
    from evaluator.report.leaderboard_page import render_page

    out = board((LONG, [row(i, True) for i in range(4)]), ("b", [row(i, False) for i in range(4)]))
    out["title"] = "t"
    page = render_page(out)
    labels = re.findall(r'<text class="label"[^>]*>([^<]*)</text>', page)
    assert len(labels) == 2 and all(len(label) <= LABEL_CHARS for label in labels), labels
    assert labels[0].endswith("…") and labels[1] == "2. b"
    assert f"<title>1. {LONG}</title>" in page


def test_a_wrong_answer_has_no_green_ok_badge_beside_it() -> None:
    wrong, right = typed([row(0, False), row(1, True)])
    assert status_bits(wrong)[0] == ("badge st-wrong", "wrong")
    assert status_bits(right)[0] == ("badge st-right", "right")
    assert ("detail", "request ok, answer parsed") in status_bits(wrong)  # the request's status, apart
    failed = typed([row(2, False, status="request_error", parsed_answer=None)])[0]
    assert status_bits(failed)[0] == ("badge st-request_error", "request error")


# ----------------------------------------------------------------------------- docs


def _doc_commands(text: str) -> list[tuple[str, list[str]]]:
    """Each `doccount ...` command in the fenced blocks (continuation lines joined, comments cut)."""
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split(" #")[0]
            for m in re.finditer(r"(?:^|[;&|(]|\s)(doccount(?:-evaluate|-score)?)\s+([^;&|)]*)", line):
                out.append((m.group(1), m.group(2).split()))
    return out


def _command(prog: str, words: list[str]) -> tuple[click.Command | None, list[str]]:
    if prog != "doccount":
        return main.commands["evaluate" if prog.endswith("evaluate") else "score"], words
    cmd: click.Command | None = main
    while isinstance(cmd, click.Group) and words and not words[0].startswith("-"):
        cmd, words = cmd.commands.get(words[0]), words[1:]
    return cmd, words


def test_every_documented_command_and_option_exists() -> None:
    bad = []
    for page in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]:
        for prog, words in _doc_commands(page.read_text()):
            cmd, rest = _command(prog, words)
            if cmd is None:
                bad.append((page.name, prog, words))
                continue
            known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
            flags = [w.split("=")[0] for w in rest if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]
            bad += [(page.name, prog, f) for f in flags if f not in known]
    assert bad == []


def test_the_demo_and_evaluate_docs_start_with_the_readmes_commands() -> None:
    demo = (REPO / "docs" / "demo.md").read_text()
    first = re.search(r"```[a-z]*\n(.*?)```", demo, re.S)
    assert first and first.group(1).startswith("doccount demo")
    assert "python -m evaluator.demo.reference_server" not in demo
    assert ("doccount", ["serve-reference", "--port", "0", "--port-file", "ref.port"]) in _doc_commands(demo)
    evaluate = (REPO / "docs" / "evaluate.md").read_text()
    quick = evaluate[evaluate.index("## A remote API") :].split("```")[1]
    assert "scripts/" not in quick and "doccount-score" not in quick
    assert "doccount evaluate --model" in quick and "doccount score runs/" in quick


# ----------------------------------------------------------------------------- outside a checkout


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


def test_archive_without_the_container_files_says_so_in_one_line(tmp_path, server) -> None:
    rows = doccount_rows(4)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    server.update_config(answers=doccount_reply(rows))
    run = tmp_path / "run"
    res = run_cli("evaluate", *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), run))
    assert res.returncode == 0, res.stderr
    assert run_cli("score", str(run), "--no-report").returncode == 0
    (tmp_path / "empty").mkdir()
    res = run_cli(
        "archive", str(run), "--output", str(tmp_path / "a.tar.gz"), "--bundle-root", str(tmp_path / "empty")
    )
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "Dockerfile.eval" in notes[0] and "--bundle-root" in notes[0], notes
