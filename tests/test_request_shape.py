"""Request shape: `none` values, the output-limit field's name and presets, checked at a loopback server."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest
from support.cli import eval_args, run_cli, run_script
from support.cli import read_records as records

from evaluator.core.records import ResponseAttempt, ResponseRecord, RetryError, Sampling, Usage
from evaluator.data.benchmarks import get_benchmark
from evaluator.data.benchmarks.base import Sample
from evaluator.request.body import build_body, canonical_json, request_bytes
from evaluator.request.shape import load_preset, preset_names, resolve_sampling

SAMPLE = Sample(
    "s1", 0, b"\xff\xd8\xff\xe0" + bytes(range(40)), None, 3, {}, "How many tables are on this page?"
)


def test_default_request_bytes_are_unchanged() -> None:
    """The protocol's default body, byte for byte (hash taken before the request-shape flags existed)."""
    bench = get_benchmark("doccount")
    body = request_bytes(bench, SAMPLE, "org/model", bench.default_sampling)
    assert body == canonical_json(build_body(bench, SAMPLE, "org/model", bench.default_sampling))
    assert (
        hashlib.sha256(body).hexdigest() == "9f0df6176e666e7964d6f1c3cbe27ad94bbacd2efc7fdfead823a131c146da72"
    )


def test_default_record_bytes_are_unchanged() -> None:
    rec = ResponseRecord(
        sample_id="x",
        benchmark="doccount",
        groups={"target_class": "Table"},
        ground_truth=3,
        model="m",
        backend="api",
        sampling=get_benchmark("doccount").default_sampling,
        started_at="t0",
        finished_at="t1",
        status="ok",
        response_text="<answer>3</answer>",
        usage=Usage(1, 2, 3),
        retry_errors=[RetryError(1, "empty_content", "empty", None)],
        earlier_attempts=[ResponseAttempt("a", None, "no_tag", "stop", "id", Usage(1, 1, 2), 0.1, 1)],
    )
    line = rec.to_line()
    assert (
        hashlib.sha256(line).hexdigest() == "019bc1297b239055f7a201933f5f171603d2a9d40bbb483e676d9f88551e625b"
    )
    assert msgspec.convert(json.loads(line), ResponseRecord).to_line() == line


@pytest.mark.parametrize(
    ("sampling", "expected"),
    [
        (Sampling(None, 0.9, 100), {"top_p": 0.9, "max_tokens": 100}),
        (Sampling(1.0, None, None), {"temperature": 1.0}),
        (
            Sampling(1.0, None, 64, max_tokens_field="max_completion_tokens"),
            {"temperature": 1.0, "max_completion_tokens": 64},
        ),
    ],
)
def test_body_leaves_out_none_and_renames_the_limit(sampling: Sampling, expected: dict) -> None:
    bench = get_benchmark("doccount")
    body = build_body(bench, SAMPLE, "m", sampling)
    assert {k: v for k, v in body.items() if k not in ("model", "messages")} == expected
    assert request_bytes(bench, SAMPLE, "m", sampling) == canonical_json(body)


def test_explicit_flags_win_over_a_preset() -> None:
    default = get_benchmark("doccount").default_sampling
    preset = load_preset("openai-reasoning")
    s = resolve_sampling(default, {}, preset=preset)
    assert (s.temperature, s.top_p, s.max_tokens, s.max_tokens_field) == (
        1.0,
        None,
        32768,
        "max_completion_tokens",
    )
    s = resolve_sampling(default, {}, top_p=0.5, max_tokens_field="max_tokens", preset=preset)
    assert (s.top_p, s.max_tokens_field) == (0.5, "max_tokens")
    assert {"openai-reasoning", "anthropic-compat"} <= set(preset_names())


def _config(run: Path) -> dict:
    return json.loads((run / "run_config.json").read_text())


def test_none_and_field_name_reach_the_server_and_the_run_identity(tmp_path, doc_data, server) -> None:
    server.update_config(keep_raw_bodies=True)
    run = tmp_path / "r"
    shape = ["--temperature", "none", "--top-p", "NONE", "--max-tokens-field", "max_completion_tokens"]
    res = run_cli("evaluate", *eval_args(server.base_url, doc_data, run), "--limit", "3", *shape)
    assert res.returncode == 0, res.stderr
    reqs = server.requests()
    assert len(reqs) == 3
    for r in reqs:
        keys = set(r["body"])
        assert keys == {"model", "messages", "max_completion_tokens"}, keys
        assert r["body"]["max_completion_tokens"] == 32768
    sent = {r["body_sha256"] for r in reqs}
    assert {rec["request_sha256"] for rec in records(run)} == sent
    sampling = _config(run)["sampling"]
    assert sampling == {
        "temperature": None,
        "top_p": None,
        "max_tokens": 32768,
        "max_tokens_field": "max_completion_tokens",
        "extra_body": {},
    }
    assert records(run)[0]["sampling"] == sampling
    # another request shape must not share the folder
    res = run_cli("evaluate", *eval_args(server.base_url, doc_data, run), "--limit", "3")
    assert res.returncode == 2 and "sampling" in res.stderr, res.stderr
    res = run_cli(
        "evaluate", *eval_args(server.base_url, doc_data, run), "--limit", "3", "--max-tokens", "none"
    )
    assert res.returncode == 2 and "sampling" in res.stderr, res.stderr


def test_max_tokens_none_and_bad_values(tmp_path, doc_data, server) -> None:
    run = tmp_path / "r"
    res = run_cli(
        "evaluate", *eval_args(server.base_url, doc_data, run), "--limit", "1", "--max-tokens", "none"
    )
    assert res.returncode == 0, res.stderr
    assert set(server.requests()[0]["body"]) == {"model", "messages", "temperature", "top_p"}
    res = run_cli("evaluate", *eval_args(server.base_url, doc_data, tmp_path / "x"), "--top-p", "nan?")
    assert res.returncode == 2 and "--top-p" in res.stderr and "'none'" in res.stderr, res.stderr
    res = run_cli("evaluate", *eval_args(server.base_url, doc_data, tmp_path / "x"), "--temperature", "3")
    assert res.returncode == 2 and "out of range" in res.stderr, res.stderr


def test_preset_is_recorded_and_expands_to_its_flags(tmp_path, doc_data, server) -> None:
    run = tmp_path / "r"
    res = run_cli(
        "evaluate", *eval_args(server.base_url, doc_data, run), "--limit", "1", "--preset", "openai-reasoning"
    )
    assert res.returncode == 0, res.stderr
    assert set(server.requests()[0]["body"]) == {"model", "messages", "temperature", "max_completion_tokens"}
    preset = _config(run)["preset"]
    shipped = (
        Path(__file__).resolve().parents[1] / "evaluator" / "request" / "presets" / "openai-reasoning.json"
    )
    assert preset["name"] == "openai-reasoning"
    assert preset["sha256"] == hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert preset["flags"] == json.loads(shipped.read_text())["flags"]
    # the same shape spelled out as flags is the same run
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url, doc_data, run),
        "--limit",
        "2",
        "--top-p",
        "none",
        "--max-tokens-field",
        "max_completion_tokens",
    )
    assert res.returncode == 0, res.stderr
    assert "preset" not in _config(run)
    res = run_cli("evaluate", *eval_args(server.base_url, doc_data, run), "--preset", "nope")
    assert res.returncode == 2 and "openai-reasoning" in res.stderr


def test_environment_takes_none(tmp_path, doc_data, server) -> None:
    res = run_script(
        "evaluate_remote_api.sh",
        tmp_path=tmp_path,
        env={
            "MODEL": "test-model",
            "MODEL_API_BASE_URL": server.base_url,
            "RUN_ROOT": str(tmp_path / "r"),
            "DATA_FILES": doc_data,
            "LIMIT": "1",
            "TEMPERATURE": "none",
            "MAX_TOKENS": "none",
            "PRESET": "anthropic-compat",
        },
    )
    assert res.returncode == 0, res.stderr
    assert set(server.requests()[0]["body"]) == {"model", "messages"}
    assert _config(tmp_path / "r")["preset"]["name"] == "anthropic-compat"


def test_recorded_shape_turns_back_into_flags() -> None:
    from evaluator.request.shape import shape_flags

    recorded = {
        "temperature": None,
        "top_p": 0.95,
        "max_tokens": 64,
        "max_tokens_field": "max_completion_tokens",
    }
    assert shape_flags(recorded) == [
        "--temperature",
        "none",
        "--top-p",
        "0.95",
        "--max-tokens",
        "64",
        "--max-tokens-field",
        "max_completion_tokens",
    ]
    assert shape_flags({"temperature": 1.0, "top_p": 0.95, "max_tokens": 32768}) == [
        "--temperature",
        "1.0",
        "--top-p",
        "0.95",
        "--max-tokens",
        "32768",
    ]
