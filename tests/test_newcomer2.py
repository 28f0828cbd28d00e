"""Issue #42 (newcomer2): what a new user tripped on in the first hour, each as it is now."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.boards import board, row
from support.cli import FAST_RETRIES, REPO, eval_args, read_records, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.cli.main import evaluate_cmd
from evaluator.core.secrets import ShortKeyError, api_key_from_env
from evaluator.evaluation.reachability import model_not_found
from evaluator.request.ratelimit import retryable_status
from evaluator.study.sweep_file import SweepFileError, check_key_variables, load_sweep, option_specs


def _data(tmp_path: Path, n: int = 4) -> tuple[str, list[dict[str, Any]]]:
    rows = doccount_rows(n)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    return str(tmp_path / "d" / "*.parquet"), rows


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _free_port() -> int:
    """A port nothing listens on (bound by the OS, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----------------------------------------------------------------------------- 2. the wrong server


class _Counting(SimpleHTTPRequestHandler):
    """The standard library's static file server (`python3 -m http.server`): POST gets 501."""

    seen: list[str] = []

    def log_request(self, code: Any = "-", size: Any = "-") -> None:  # once per request answered
        self.seen.append(self.command)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("H", (_Counting,), {"seen": seen})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(tmp_path)))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_static_file_server_is_no_chat_endpoint_exit_2_without_retries(tmp_path, static_server) -> None:
    url, seen = static_server
    data, _ = _data(tmp_path, 6)
    res = run_cli("evaluate", *eval_args(url, data, tmp_path / "r"), *FAST_RETRIES, "--concurrency", "2")
    assert res.returncode == 2, res.stderr
    [line] = _errors(res.stderr)
    assert f"{url}/chat/completions has no chat completions endpoint" in line, line
    assert "501" in line and "re-run" not in res.stderr
    assert seen.count("POST") <= 2  # the concurrency's worth, none of them retried


def test_a_wrong_model_names_it_and_lists_the_served_ones(tmp_path, server) -> None:
    data, _ = _data(tmp_path)
    server.update_config(strict_model=True)  # vLLM's 404 NotFoundError "The model `x` does not exist."
    res = run_cli("evaluate", *eval_args(server.base_url, data, tmp_path / "r", model="no-such-model"))
    assert res.returncode == 2, res.stderr
    [line] = _errors(res.stderr)
    assert "'no-such-model'" in line and "it serves test-model" in line and "--model" in line, line


def test_a_model_not_found_is_told_from_other_404s() -> None:
    # vLLM (entrypoints/openai/serving_engine.py _check_model) and OpenAI's texts; OpenRouter's is not one
    assert model_not_found(404, "HTTP 404: The model `x` does not exist.")
    assert model_not_found(404, "HTTP 404: The model `x` does not exist or you do not have access to it.")
    assert not model_not_found(404, "HTTP 404: No endpoints found that can handle the requested parameters.")
    assert not model_not_found(404, "HTTP 404: Not Found")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_transient_5xx_is_still_retried(tmp_path, server, status: int) -> None:
    data, rows = _data(tmp_path, 3)
    first = {r["image_sha256"]: [str(status), None] for r in rows}  # one failure, then the answer
    server.update_config(answers=doccount_reply(rows), script=first)
    res = run_cli("evaluate", *eval_args(server.base_url, data, tmp_path / "r"), *FAST_RETRIES)
    assert res.returncode == 0, res.stderr
    assert [r["attempts"] for r in read_records(tmp_path / "r")] == [2, 2, 2]


def test_only_501_of_the_5xx_is_never_retried() -> None:
    assert not retryable_status(501)
    assert all(retryable_status(s) for s in (500, 502, 503, 504, 429, 408))
    assert not any(retryable_status(s) for s in (400, 401, 404, 405, 422))


# ----------------------------------------------------------------------------- 3. the README


def test_the_readme_names_both_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert re.search(r"^make demo\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)
    assert len(readme.splitlines()) < 250


# ----------------------------------------------------------------------------- 4. one run folder


@pytest.fixture
def answered_run(tmp_path, server) -> Path:
    data, rows = _data(tmp_path)
    server.update_config(answers=doccount_reply(rows))
    res = run_cli("evaluate", *eval_args(server.base_url, data, tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    return tmp_path / "run"


def test_score_report_and_archive_take_the_folder_as_an_argument(tmp_path, answered_run) -> None:
    run = str(answered_run)
    res = run_cli("score", run, "--no-report")
    assert res.returncode == 0, res.stderr
    assert (answered_run / "scores" / "summary.json").is_file()
    res = run_cli("report", run, "--no-images", "--output", str(tmp_path / "page.html"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "page.html").is_file()
    res = run_cli("archive", run, "--output", str(tmp_path / "run.tar.gz"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "run.tar.gz").is_file()
    assert run_cli("score", "--run-root", run, "--no-report").returncode == 0  # the README's form too


@pytest.mark.parametrize("command", ["score", "report", "archive"])
def test_no_folder_or_two_different_ones_is_one_usage_line(tmp_path, command: str) -> None:
    extra = ["--output", str(tmp_path / "x.tar.gz")] if command == "archive" else []
    res = run_cli(command, *extra)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: give the run folder: doccount {command} runs/NAME (or --run-root runs/NAME) "
        f"(see `doccount {command} --help`)"
    ]
    res = run_cli(command, str(tmp_path / "a"), "--run-root", str(tmp_path / "b"), *extra)
    assert res.returncode == 2 and "two run folders given" in res.stderr


# ----------------------------------------------------------------------------- 5. MODEL_API_KEY=EMPTY


def test_the_vllm_placeholder_key_means_no_key(tmp_path, server) -> None:
    assert api_key_from_env({"MODEL_API_KEY": "EMPTY"}) is None
    assert api_key_from_env({"MODEL_API_KEY": " EMPTY\r"}) is None
    with pytest.raises(ShortKeyError):
        api_key_from_env({"MODEL_API_KEY": "empty1"})  # only the placeholder itself
    data, rows = _data(tmp_path)
    server.update_config(answers=doccount_reply(rows))
    res = run_cli(
        "evaluate", *eval_args(server.base_url, data, tmp_path / "r"), env={"MODEL_API_KEY": "EMPTY"}
    )
    assert res.returncode == 0, res.stderr


# ----------------------------------------------------------------------------- 6, 7. sweep files

SWEEP = """name = "s"
benchmark = "doccount"

[defaults]
api_key_env = "NO_KEY_SET_HERE"
concurrency = 2
base_url = "http://127.0.0.1:9/v1"

[[runs]]
name = "a"
model = "m-a"

[[runs]]
name = "b"
model = "m-b"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "B_KEY"
"""


def _sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_api_key_env_in_defaults_works_like_in_a_run(tmp_path) -> None:
    specs = option_specs(evaluate_cmd.params)
    sweep = load_sweep(_sweep(tmp_path, SWEEP), specs)
    assert {r.name: r.api_key_env for r in sweep.runs} == {"a": "NO_KEY_SET_HERE", "b": "B_KEY"}
    check_key_variables(sweep, sweep.runs, {"NO_KEY_SET_HERE": "k" * 20, "B_KEY": "k" * 20})
    with pytest.raises(SweepFileError) as info:
        check_key_variables(sweep, sweep.runs, {})
    text = str(info.value)
    assert "\n" not in text
    assert "a (line 5: NO_KEY_SET_HERE)" in text and "b (line 17: B_KEY)" in text and "not set" in text


def test_an_unset_key_variable_is_one_line_from_the_command(tmp_path) -> None:
    res = run_cli("sweep", str(_sweep(tmp_path, SWEEP)), "--run-root", str(tmp_path / "runs"), "--only", "a")
    assert res.returncode == 2
    [line] = res.stderr.strip().splitlines()
    assert "NO_KEY_SET_HERE" in line and "not set" in line and "names a credential" not in line


def test_a_typo_inside_a_run_gets_a_did_you_mean(tmp_path) -> None:
    specs = option_specs(evaluate_cmd.params)
    with pytest.raises(SweepFileError) as info:
        load_sweep(_sweep(tmp_path, SWEEP.replace('model = "m-a"', 'modle = "m-a"')), specs)
    assert "s.toml:11:" in str(info.value) and "did you mean `model`?" in str(info.value)


# ----------------------------------------------------------------------------- 8. ties


def test_identical_results_share_a_rank_everywhere() -> None:
    from evaluator.report.leaderboard import leaderboard_markdown
    from evaluator.report.leaderboard_page import render_page

    same = [row(i, i % 2 == 0) for i in range(8)]
    out = board(("b", same), ("a", list(same)), ("c", [row(i, i < 2) for i in range(8)]))
    assert [(e["name"], e["rank"]) for e in out["runs"]] == [("a", 1), ("b", 1), ("c", 3)]
    out["title"] = "t"
    md = leaderboard_markdown(out)
    assert len(re.findall(r"^\| 1 \| ", md, re.M)) == 2 and re.search(r"^\| 3 \| ", md, re.M)
    assert "| 2 | " not in md
    page = render_page(out)
    assert page.count(">1</td>") >= 2 and ">2</td>" not in page


# ----------------------------------------------------------------------------- 9. nothing answered


def test_nothing_answered_leaves_no_folder_behind(tmp_path) -> None:
    data, _ = _data(tmp_path)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    res = run_cli("evaluate", *eval_args(url, data, tmp_path / "runs" / "x"))
    assert res.returncode == 3 and "nothing answered" in res.stderr
    assert not (tmp_path / "runs" / "x").exists()
    res = run_cli("score", str(tmp_path / "runs" / "x"))
    assert res.returncode == 2 and "does not exist" in res.stderr and "run_config" not in res.stderr


def test_a_folder_that_was_there_stays_as_it_is(tmp_path, answered_run) -> None:
    data = str(tmp_path / "d" / "*.parquet")
    before = {p.name: p.read_bytes() for p in answered_run.iterdir() if p.is_file() and p.name != ".lock"}
    url = f"http://127.0.0.1:{_free_port()}/v1"
    res = run_cli("evaluate", *eval_args(url, data, answered_run))
    assert res.returncode == 3
    after = {p.name: p.read_bytes() for p in answered_run.iterdir() if p.is_file() and p.name != ".lock"}
    assert after == before
    empty = tmp_path / "mine"
    empty.mkdir()  # the user's own (empty) folder is not this command's to remove
    assert run_cli("evaluate", *eval_args(url, data, empty)).returncode == 3
    assert empty.is_dir()


# ----------------------------------------------------------------------------- 10. help


@pytest.mark.parametrize("args", [["--help"], ["batch", "--help"]])
def test_help_cuts_no_summary_mid_sentence(args: list[str]) -> None:
    res = run_cli(*args, env={"COLUMNS": "80"})
    assert res.returncode == 0
    summaries = res.stdout.split("Commands:")[1].splitlines()
    cut = [line for line in summaries if line.rstrip().endswith("...")]
    assert cut == []
