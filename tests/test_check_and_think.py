"""`check-endpoint` (one real row, nothing written) and inline <think> blocks (flagged; CountQA strips)."""

from __future__ import annotations

import json

from support.cli import eval_args, run_cli
from support.cli import read_records as records
from support.datagen import countqa_rows, doccount_reply, write_countqa

MAX_TOKENS_REFUSED = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
DETAILS = {
    "completion_tokens_details": {"reasoning_tokens": 50},
    "prompt_tokens_details": {"cached_tokens": 8},
}


def test_check_endpoint_shows_the_exchange_and_writes_nothing(tmp_path, doc_data, doc_rows, server) -> None:
    server.update_config(
        answers=doccount_reply(doc_rows),
        reasoning="Counting the tables first.",
        reasoning_field="reasoning_content",
        usage_extra=DETAILS,
    )
    run = tmp_path / "r"
    res = run_cli("check-endpoint", *eval_args(server.base_url, doc_data, run), "--top-p", "none")
    assert res.returncode == 0, res.stderr + res.stdout
    out = res.stdout
    assert f"endpoint: {server.base_url}/chat/completions" in out
    assert "status: HTTP 200" in out and "finish reason: stop" in out
    assert "field 'reasoning_content'" in out and "Counting the tables first." in out
    first = doc_rows[0]
    assert f"parsed answer: {first['answer']} (parse status ok); correct: True" in out
    assert "reasoning 50" in out and "cached 8" in out
    assert "inline <think> in the visible text: no" in out
    assert not run.exists()
    [req] = server.requests()
    assert "top_p" not in req["body"] and req["body_sha256"] in out


def test_check_endpoint_names_the_fix_for_a_refusal(tmp_path, doc_data, server) -> None:
    server.update_config(refuse_fields={"max_tokens": MAX_TOKENS_REFUSED})
    res = run_cli("check-endpoint", *eval_args(server.base_url, doc_data, tmp_path / "r"))
    assert res.returncode == 3
    assert "status: HTTP 400" in res.stdout and MAX_TOKENS_REFUSED in res.stdout
    assert "--max-tokens-field max_completion_tokens" in res.stdout
    assert len(server.requests()) == 1


def test_check_endpoint_redacts_the_key(tmp_path, doc_data, server) -> None:
    server.update_config(always_fault="echo_secret")
    key = "sk-check-SECRET-123"
    res = run_cli(
        "check-endpoint", *eval_args(server.base_url, doc_data, tmp_path / "r"), env={"MODEL_API_KEY": key}
    )
    assert res.returncode == 3 and "HTTP 401" in res.stdout and "[REDACTED]" in res.stdout
    assert key not in res.stdout + res.stderr


def test_inline_think_is_flagged_kept_and_warned_about(tmp_path, doc_data, doc_rows, server) -> None:
    answers = doccount_reply(doc_rows)
    thinking = {k: f"<think>Let me count. 99?</think>{v}" for k, v in list(answers.items())[:3]}
    server.update_config(answers={**answers, **thinking})
    run = tmp_path / "r"
    res = run_cli("evaluate", *eval_args(server.base_url, doc_data, run))
    assert res.returncode == 0, res.stderr
    recs = records(run)
    flagged = [r for r in recs if r.get("inline_think")]
    assert len(flagged) == 3 and all(r["inline_think"] is True for r in flagged)
    assert all("inline_think" not in r for r in recs if r not in flagged)
    assert {r["response_text"] for r in flagged} == set(thinking.values())  # exactly as sent
    assert all(r["correct"] for r in recs)
    res = run_cli("score", "--run-root", str(run), "--no-report")
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "scores" / "summary.json").read_text())
    assert summary["inline_think_responses"] == 3
    md = (run / "scores" / "summary.md").read_text()
    assert "3 response(s) carry a &lt;think> block" in md and "--reasoning-parser" in md


def test_countqa_strips_the_think_block_before_parsing(tmp_path, server) -> None:
    rows = countqa_rows(2)
    write_countqa(tmp_path / "d" / "test-0.parquet", rows)
    # each question's answer is 10 * image + question index; the think block mentions a wrong number first
    server.update_config(default_reply="<think>\nMaybe 999 of them.\n</think>\n\n7")
    run = tmp_path / "r"
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), run),
        "--benchmark",
        "countqa",
    )
    assert res.returncode == 0, res.stderr
    recs = records(run)
    assert recs and all(r["parsed_answer"] == 7 and r["inline_think"] is True for r in recs)
    assert all(r["response_text"].startswith("<think>") for r in recs)


def test_think_helpers() -> None:
    from evaluator.data.reasoning import has_inline_think, strip_think_block

    assert strip_think_block("<think>a 5</think> 3") == "3"
    assert strip_think_block('x <think signature="s">a</think> y') == "x  y"
    assert strip_think_block("no block 4") == "no block 4"
    assert strip_think_block("only a closing tag </think> 4") == "only a closing tag </think> 4"
    assert has_inline_think("reasoning</think><answer>3</answer>") and not has_inline_think(
        "<answer>3</answer>"
    )
    assert not has_inline_think(None)
