"""The format smoke stop and --strip-token (evaluator/data/reasoning.py, data/parsing.strip_tokens;
docs/evaluate.md "First answers").

Loopback stand-ins for the ways a model's first answers would never count: GLM-4.6V's box markers left
after the tag (`<|begin_of_box|>...<answer>12</answer><|end_of_box|>`, vLLM keeping special tokens in the
text), every answer cut off at the output limit (finish_reason "length"), and fewer rows asked than the
check's 8. Each stops the run with exit 2 and one line; --strip-token and --no-smoke-check are the two
ways on. The pure check and the stripping function are tested apart, hypothesis giving the shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.cli import FAST_RETRIES, eval_args, run_cli
from support.cli import read_records as records
from support.datagen import doccount_rows, write_doccount
from support.provider_emulators import VLLM, ProviderEmulator

from evaluator.core.records import ResponseRecord, Sampling
from evaluator.data.parsing import parse_answer_tag

pytestmark = pytest.mark.timeout(240)

ROWS = doccount_rows(16)
BOX = ("<|begin_of_box|>", "<|end_of_box|>")


def glm_reply(rows: list[dict[str, Any]]) -> dict[str, str]:
    """GLM-4.6V's answers as vLLM returns them with the reasoning parser keeping special tokens: the box
    markers around the final answer, the closing one after the tag."""
    return {
        r["image_sha256"]: f"I count {r['answer']}.\n{BOX[0]}<answer>{r['answer']}</answer>{BOX[1]}"
        for r in rows
    }


@pytest.fixture
def data(tmp_path: Path) -> str:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", ROWS)
    return str(tmp_path / "data" / "*.parquet")


def evaluate(base_url: str, data: str, run: Path, *extra: str) -> Any:
    return run_cli("evaluate", *eval_args(base_url, data, run), *FAST_RETRIES, *extra)


def chats(server: Any) -> list[dict[str, Any]]:
    return [r for r in server.requests() if r["path"].endswith("/chat/completions")]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def score(run: Path) -> dict[str, Any]:
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    return json.loads((run / "scores" / "summary.json").read_text())


# ----------------------------------------------------------------------------- the stop, end to end


def test_leaked_box_tokens_stop_the_run_and_strip_token_lets_it_count(tmp_path, data, server) -> None:
    server.set_config({"answers": glm_reply(ROWS), "latency_s": 0.05})
    run = tmp_path / "r"
    res = evaluate(server.base_url, data, run, "--concurrency", "2")
    assert res.returncode == 2, res.stderr
    [line] = error_lines(res.stderr)
    assert line.startswith("error: format: the first 8 answered responses all failed the strict parser")
    assert "parse status: not_final 8" in line
    assert 'after the tag: "<|end_of_box|>"' in line  # the text that broke the rule, quoted
    assert "--strip-token" in line and "--reasoning-parser" in line and "--max-tokens" in line
    assert "Traceback" not in res.stderr
    sent = chats(server)
    assert 8 <= len(sent) <= 8 + 2  # no new request once the 8th answer came; those in flight recorded
    assert len(records(run)) == len(sent) < len(ROWS)
    # the fix: strip the markers; a new run folder counts every answer, the records keep the raw text
    server.reset()
    fixed = tmp_path / "fixed"
    res = evaluate(server.base_url, data, fixed, "--strip-token", BOX[0], "--strip-token", BOX[1])
    assert res.returncode == 0, res.stderr
    recs = records(fixed)
    assert len(recs) == len(ROWS) and all(r["correct"] and r["parse_status"] == "ok" for r in recs)
    assert all(r["response_text"].endswith(BOX[1]) for r in recs)  # raw text kept
    assert json.loads((fixed / "run_config.json").read_text())["strip_tokens"] == list(BOX)
    summary = score(fixed)
    assert summary["strip_tokens"] == list(BOX) and summary["primary"]["correct"] == len(ROWS)
    assert "stripped before parsing" in (fixed / "scores" / "report.html").read_text()
    # a resume under other tokens is refused like any other changed setting
    res = evaluate(server.base_url, data, fixed, "--strip-token", BOX[1])
    assert res.returncode == 2
    [line] = error_lines(res.stderr)
    assert "strip_tokens" in line and "--run-name" in line


def test_answers_all_cut_off_at_the_output_limit_stop_naming_the_limit(tmp_path, data) -> None:
    """A model that thinks past max_tokens: every answer ends mid-count with finish_reason "length"
    (OpenAI's chat completion object; vLLM the same). The line names the limit and the fix."""
    cut = {r["image_sha256"]: "length" for r in ROWS}
    emu = ProviderEmulator(
        VLLM(reasoning_parser=False), default_reply="Let me count: 1, 2, 3, 4, 5, 6", finish_reasons=cut
    )
    with emu:
        res = evaluate(emu.base_url, data, tmp_path / "r", "--concurrency", "1", "--max-tokens", "64")
        sent = [r for r in emu.requests() if r["path"].endswith("/chat/completions")]
    assert res.returncode == 2, res.stderr
    [line] = error_lines(res.stderr)
    assert "parse status: no_tag 8; 8 of 8 cut off at the output limit" in line
    assert "finish_reason: length" in line and "raise --max-tokens" in line and "--max-model-len" in line
    assert len(sent) == 8 == len(records(tmp_path / "r"))


def test_fewer_rows_than_eight_all_failing_stop_too(tmp_path, data, server) -> None:
    server.set_config({"default_reply": "There are 3 tables.", "answers": {}})
    res = evaluate(server.base_url, data, tmp_path / "r", "--limit", "3", "--concurrency", "1")
    assert res.returncode == 2, res.stderr
    [line] = error_lines(res.stderr)
    assert "the first 3 answered responses all failed" in line and "no_tag 3" in line
    assert 'ending "There are 3 tables."' in line


def test_no_smoke_check_scores_the_answers_as_they_are(tmp_path, data, server) -> None:
    server.set_config({"answers": glm_reply(ROWS)})
    run = tmp_path / "r"
    res = evaluate(server.base_url, data, run, "--no-smoke-check", "--reasoning", "on")
    assert res.returncode == 0, res.stderr  # neither smoke stop (no reasoning shown either)
    assert len(chats(server)) == len(ROWS)
    assert score(run)["parse_status"] == {"not_final": len(ROWS)}
    assert json.loads((run / "run_config.json").read_text())["request_policy"]["smoke_check"] is False


def test_one_parsable_answer_among_the_first_eight_goes_on(tmp_path, data, server) -> None:
    answers = glm_reply(ROWS)
    answers[ROWS[5]["image_sha256"]] = f"<answer>{ROWS[5]['answer']}</answer>"
    server.set_config({"answers": answers})
    res = evaluate(server.base_url, data, tmp_path / "r", "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    assert len(chats(server)) == len(ROWS)


@pytest.mark.parametrize("token", ["<|end_of_box|>1", "</answer>", "<ANSWER>", "x<answer", "", "٣"], ids=repr)
def test_a_token_that_could_change_a_count_is_refused(tmp_path, data, server, token) -> None:
    res = evaluate(server.base_url, data, tmp_path / "r", "--strip-token", token)
    assert res.returncode == 2
    [line] = error_lines(res.stderr)
    assert line.startswith("error: Invalid value for '--strip-token'") and "Traceback" not in res.stderr
    assert any(why in line for why in ("a digit", "could change which answer", "strips nothing"))
    assert not chats(server)


def test_a_sweep_file_passes_strip_token_lists_and_refuses_a_digit(tmp_path, data) -> None:
    from evaluator.cli.main import evaluate_cmd
    from evaluator.study.sweep_file import load_sweep, option_specs, run_args

    sweep = tmp_path / "s.toml"
    body = f'name = "s"\ndata_files = "{data}"\n\n[[runs]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
    sweep.write_text(body + 'strip_token = ["<|begin_of_box|>", "<|end_of_box|>"]\n')
    specs = option_specs(evaluate_cmd.params)
    args = run_args(load_sweep(sweep, specs).runs[0], specs, tmp_path)
    assert [args[i + 1] for i, a in enumerate(args) if a == "--strip-token"] == list(BOX)
    sweep.write_text(body + 'strip_token = ["<|box_2|>"]\n')
    res = run_cli("sweep", str(sweep), "--run-root", str(tmp_path / "runs"), "--plan")
    assert res.returncode == 2
    [line] = error_lines(res.stderr)
    assert f"{sweep}:8:" in line and "holds a digit" in line


# ----------------------------------------------------------------------------- the pure parts


def record(text: str | None, status: str = "ok", finish: str | None = "stop") -> ResponseRecord:
    parsed = parse_answer_tag(text)
    return ResponseRecord(
        sample_id="s", benchmark="doccount", groups={}, ground_truth=1, model="m", backend="api",
        sampling=Sampling(1.0, 0.95, 10), started_at="t", finished_at="t", status=status,  # type: ignore[arg-type]
        response_text=text, parsed_answer=parsed.answer, parse_status=parsed.status, finish_reason=finish,
    )  # fmt: skip


def test_check_decides_on_the_first_answered_only() -> None:
    from evaluator.data.reasoning import FormatCheck, FormatMismatch

    check = FormatCheck(4)
    assert check.see(record(None, status="request_error")) is None  # not an answered response
    assert [check.see(record("<answer>2</answer>\n\x1b[31m")) for _ in range(3)] == [None] * 3
    stop = check.see(record("no tag"))
    assert isinstance(stop, FormatMismatch)
    assert "no_tag 1, not_final 3" in str(stop) and '"\\u001b[31m"' in str(stop)  # escaped, one line
    assert check.see(record("no tag")) is None  # decided once
    mixed = FormatCheck(2)
    assert [mixed.see(record(t)) for t in ("x", "<answer>1</answer>")] == [None, None]
    cut = FormatCheck(2)  # all cut off, though one parsed: still a stop, the fix is the limit
    seen = [cut.see(record(t, finish="length")) for t in ("<answer>1</answer>", "1, 2")]
    assert seen[0] is None and "2 of 2 cut off" in str(seen[1]) and "raise --max-tokens" in str(seen[1])


def test_the_quoted_text_is_clipped() -> None:
    from evaluator.data.reasoning import FormatCheck

    check = FormatCheck(1)
    stop = check.see(record("<answer>1</answer>" + "z" * 5000))
    assert stop is not None and len(str(stop)) < 1200 and 'zzz"…' in str(stop)


def allowed(token: str) -> bool:
    from evaluator.data.parsing import strip_token_problem

    return strip_token_problem(token) is None


tokens = st.text(min_size=1, max_size=8).filter(allowed)


@given(text=st.text(max_size=200), strip=st.lists(tokens, max_size=4))
def test_stripping_never_touches_a_digit_or_an_answer_tag(text: str, strip: list[str]) -> None:
    from evaluator.data.parsing import strip_tokens

    out = strip_tokens(text, strip)
    assert out is not None
    assert [c for c in out if c.isdigit()] == [c for c in text if c.isdigit()]
    assert out.count("<answer>") >= text.count("<answer>") and out.count("</answer>") >= text.count(
        "</answer>"
    )


@given(answer=st.integers(0, 10**6), before=st.lists(st.sampled_from(BOX), max_size=3))
def test_stripped_box_markers_leave_the_tag_final(answer: int, before: list[str]) -> None:
    from evaluator.data.parsing import strip_tokens

    text = "".join(before) + f"<answer>{answer}</answer>" + BOX[1]
    assert parse_answer_tag(text).status == "not_final"
    assert parse_answer_tag(strip_tokens(text, BOX)).answer == answer
    assert strip_tokens(text, ()) == text and strip_tokens(None, BOX) is None


# ----------------------------------------------------------------------------- in a sweep


def test_in_a_sweep_the_run_is_stopped_with_its_line_and_the_other_goes_on(tmp_path: Path) -> None:
    """Two served runs on a one-GPU pool: the one whose server leaks the box markers is "stopped" with the
    format line (sweep.json, --status), its server stops and the other run, stripping them, finishes."""
    from support.study import Study

    study = Study(tmp_path, rows=12, name="boxes")
    config = {"answers": glm_reply(study.rows)}
    (tmp_path / "glm.json").write_text(json.dumps(config))
    args = json.dumps(["--config", str(tmp_path / "glm.json")])
    command = json.dumps(study.command("--request-log", str(study.requests)))
    text = study.header(concurrency=2) + f"[serve]\ngpus = [0]\ncommand = {command}\n"
    for name, extra in (
        ("leaky", ""),
        ("stripped", 'strip_token = ["<|begin_of_box|>", "<|end_of_box|>"]\n'),
    ):
        text += f'\n[[runs]]\nname = "{name}"\nmodel = "org/{name}"\nserve = {{ gpus = 1, args = {args} }}\n{extra}'
    study.file.write_text(text)
    res = study.sweep(timeout=360)
    assert res.returncode == 3, res.stderr
    state = study.state()
    assert state["leaky"]["state"] == "stopped" and state["leaky"]["exit_code"] == 2
    assert state["leaky"]["message"].startswith("error: format: the first 8 answered responses all failed")
    assert state["stripped"]["state"] == "done", state["stripped"]
    assert not study.servers_alive()
    status = run_cli("sweep", str(study.file), "--run-root", str(study.root), "--status")
    [line] = [x for x in (status.stdout + status.stderr).splitlines() if x.startswith("leaky ")]
    assert " stopped " in line and "error: format:" in line


def test_a_reproduction_strips_the_same_tokens_and_keeps_the_check_as_it_was() -> None:
    """`doccount reproduce` repeats the archived run's settings (archive.plan.evaluate_args): the tokens
    stripped before parsing, --no-smoke-check, and the preset (which says whether reasoning shows)."""
    from evaluator.archive.plan import evaluate_args
    from evaluator.evaluation.options import options_from_args

    config = {
        "benchmark": "doccount", "model": "claude-opus-4-5", "reasoning": "on", "strip_tokens": list(BOX),
        "preset": {"name": "anthropic-compat", "sha256": "0" * 64, "flags": {"top_p": "none"},
                   "reasoning_observable": False},
        "request_policy": {"concurrency": 2, "smoke_check": False},
    }  # fmt: skip
    args = evaluate_args(config, ["--data-files", "d/*.parquet"], ["http://127.0.0.1:9/v1"], "r")
    opts = options_from_args(args)
    assert opts.strip_token == BOX and opts.no_smoke_check and opts.preset == "anthropic-compat"
    plain = options_from_args(evaluate_args({"benchmark": "doccount", "model": "m"}, [], [], "r"))
    assert plain.strip_token == () and not plain.no_smoke_check and plain.preset is None


@given(text=st.text(max_size=300), status=st.sampled_from(["not_final", "no_tag", "no_response", None]))
def test_the_offending_text_is_one_escaped_line_of_bounded_length(text: str, status: str | None) -> None:
    from evaluator.data.reasoning import offending_text

    shown = offending_text(text, status, "stop")
    assert "\n" not in shown and "\x1b" not in shown and len(shown) < 60 * 12 + 60  # \uXXXX\uXXXX at most
    assert shown.isascii() or "…" in shown and shown.replace("…", "").isascii()
