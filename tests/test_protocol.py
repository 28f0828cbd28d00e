"""What goes over the wire, checked at a real loopback server: shape, order, bytes, defaults, hashes."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import FAST_RETRIES, eval_args, run_cli
from support.cli import read_records as records
from support.datagen import countqa_rows, doccount_reply, sha, write_countqa

from evaluator.data.benchmarks.base import prompts_dir


def test_payload_is_exactly_image_then_verbatim_prompt(tmp_path, doc_data, doc_rows, server) -> None:
    server.set_config({"answers": doccount_reply(doc_rows)})
    run = tmp_path / "run"
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url, doc_data, run, model="test-model"),
    )
    assert res.returncode == 0, res.stderr
    reqs = {r["image_sha256"]: r for r in server.requests()}
    assert len(server.requests()) == len(doc_rows)
    for row in doc_rows:
        body = reqs[row["image_sha256"]]["body"]
        assert body["model"] == "test-model"
        # defaults of the protocol
        assert (body["temperature"], body["top_p"], body["max_tokens"]) == (1.0, 0.95, 32768)
        assert "stream" not in body and "n" not in body
        messages = body["messages"]
        assert len(messages) == 1 and messages[0]["role"] == "user"  # no system message
        content = messages[0]["content"]
        assert [p["type"] for p in content] == ["image_url", "text"]
        image = content[0]["image_url"]["url"]
        assert image["mime"] == "image/jpeg"
        assert image["sha256"] == sha(row["image"]["bytes"])  # byte-identical, never re-encoded
        assert image["len"] == len(row["image"]["bytes"])
        assert content[1]["text"] == row["prompt"]  # verbatim
    # request_sha256 is the hash of the exact bytes the server received
    by_id = {r["sample_id"]: r for r in records(run)}
    for row in doc_rows:
        rec = by_id[row["sample_id"]]
        assert rec["request_sha256"] == reqs[row["image_sha256"]]["body_sha256"]
        assert rec["status"] == "ok" and rec["correct"] is True
        assert rec["target_class"] == row["target_class"]


def test_sampling_flags_and_extra_body(tmp_path, doc_data, server) -> None:
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url + "/chat/completions", doc_data, str(tmp_path / "r")),
        "--limit",
        "2",
        "--temperature",
        "0.6",
        "--top-p",
        "0.8",
        "--max-tokens",
        "512",
        "--extra-body-json",
        '{"top_k": 20, "chat_template_kwargs": {"enable_thinking": true}}',
    )
    assert res.returncode == 0, res.stderr
    body = server.requests()[0]["body"]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.6, 0.8, 512)
    assert body["top_k"] == 20 and body["chat_template_kwargs"] == {"enable_thinking": True}
    config = json.loads((tmp_path / "r" / "run_config.json").read_text())
    assert config["sampling"]["extra_body"] == {
        "top_k": 20,
        "chat_template_kwargs": {"enable_thinking": True},
    }
    assert config["endpoint"] == server.base_url


def test_reserved_extra_body_keys_are_refused(tmp_path, doc_data, server) -> None:
    for key in ("model", "messages", "stream", "n", "temperature", "top_p", "max_tokens"):
        res = run_cli(
            "evaluate",
            *eval_args(server.base_url, doc_data, str(tmp_path / "r")),
            "--extra-body-json",
            json.dumps({key: 1}),
        )
        assert res.returncode == 2
        assert key in res.stderr and "owns" in res.stderr and "Traceback" not in res.stderr
    assert server.requests() == []


def test_base_url_spellings_reach_the_same_endpoint(tmp_path, doc_data, server) -> None:
    for i, url in enumerate(
        [server.url, server.url + "/", server.base_url + "/", server.base_url + "/chat/completions"]
    ):
        res = run_cli(
            "evaluate",
            *eval_args(url, doc_data, str(tmp_path / f"r{i}")),
            "--limit",
            "1",
        )
        assert res.returncode == 0, res.stderr
    assert [r["path"] for r in server.requests()] == ["/v1/chat/completions"] * 4


def test_env_base_url_and_vllm_default(tmp_path, doc_data, server) -> None:
    res = run_cli(
        "evaluate",
        "--model",
        "m",
        "--data-files",
        doc_data,
        "--run-root",
        str(tmp_path / "r"),
        "--limit",
        "1",
        env={"MODEL_API_BASE_URL": server.url},
    )
    assert res.returncode == 0, res.stderr
    res = run_cli("evaluate", "--model", "m", "--data-files", doc_data, "--run-root", str(tmp_path / "r2"))
    assert res.returncode == 2 and "MODEL_API_BASE_URL" in res.stderr
    # --backend vllm defaults to localhost:8000 (nothing listens there in tests: one line naming it, exit 3)
    res = run_cli(
        "evaluate",
        "--backend",
        "vllm",
        "--model",
        "m",
        "--data-files",
        doc_data,
        "--run-root",
        str(tmp_path / "r3"),
        "--limit",
        "1",
        "--max-retries",
        "0",
        "--timeout",
        "2",
    )
    assert res.returncode == 3 and "nothing answered at localhost:8000" in res.stderr, res.stderr


def test_api_key_sent_as_header_only(tmp_path, doc_data, server) -> None:
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url, doc_data, str(tmp_path / "r")),
        "--limit",
        "2",
        env={"MODEL_API_KEY": "sk-test-KEY-9931"},
    )
    assert res.returncode == 0, res.stderr
    req = server.requests()[0]
    assert req["headers"]["has_authorization"] is True
    assert req["headers"]["authorization_sha256"] == sha(b"Bearer sk-test-KEY-9931")
    for f in (tmp_path / "r").rglob("*"):
        if f.is_file():
            assert b"sk-test-KEY-9931" not in f.read_bytes(), f
    assert "sk-test-KEY-9931" not in res.stdout + res.stderr


def test_countqa_messages_and_mime(tmp_path, server) -> None:
    rows = countqa_rows(4)
    write_countqa(tmp_path / "data" / "test-0.parquet", rows)
    server.set_config({"default_reply": "5"})
    res = run_cli(
        "evaluate",
        "--benchmark",
        "countqa",
        *eval_args(server.base_url, str(tmp_path / "data" / "*.parquet"), tmp_path / "r", model="m"),
    )
    assert res.returncode == 0, res.stderr
    reqs = server.requests()
    n_questions = sum(len(r["questions"]) for r in rows)
    assert len(reqs) == n_questions
    system = (prompts_dir() / "countqa_system.txt").read_text()
    mimes = set()
    for req in reqs:
        messages = req["body"]["messages"]
        assert messages[0] == {"role": "system", "content": system}
        assert [p["type"] for p in messages[1]["content"]] == ["image_url", "text"]
        mimes.add(messages[1]["content"][0]["image_url"]["url"]["mime"])
        # the reference adapter's default generation config: temperature 0.0 and no other sampling field
        assert {k: v for k, v in req["body"].items() if k not in ("model", "messages")} == {
            "temperature": 0.0
        }
    assert mimes == {"image/jpeg", "image/png"}
    recs = records(tmp_path / "r")
    ids = sorted(r["sample_id"] for r in recs)
    assert ids[0] == "countqa-00000-q0" and len(set(ids)) == n_questions
    texts = {r["sample_id"]: r for r in recs}
    assert texts["countqa-00002-q2"]["ground_truth"] == 22
    config = json.loads((tmp_path / "r" / "run_config.json").read_text())
    assert len(config["data"]["manifest_sha256"]) == 64
    assert config["prompts"]["countqa_system.txt"] == sha(system.encode())


def test_reasoning_fields_are_kept_apart_from_visible_text(tmp_path, doc_data, doc_rows, server) -> None:
    for field in ("reasoning", "reasoning_content"):
        server.set_config(
            {
                "answers": doccount_reply(doc_rows),
                "reasoning": "thinking <answer>99</answer>",
                "reasoning_field": field,
            }
        )
        run = tmp_path / field
        res = run_cli(
            "evaluate",
            *eval_args(server.base_url, doc_data, str(run)),
            "--limit",
            "3",
        )
        assert res.returncode == 0, res.stderr
        for rec in records(run):
            assert rec["reasoning_text"] == "thinking <answer>99</answer>"
            assert rec["parsed_answer"] == rec["ground_truth"]  # only the visible content is parsed


def test_run_config_records_what_affects_the_number(tmp_path, doc_data, server) -> None:
    res = run_cli(
        "evaluate",
        *eval_args(server.base_url, doc_data, tmp_path / "r", model="test-model"),
        "--limit",
        "3",
        *FAST_RETRIES,
    )
    assert res.returncode == 0, res.stderr
    c = json.loads((tmp_path / "r" / "run_config.json").read_text())
    assert c["benchmark"] == "doccount" and c["model"] == "test-model"
    assert c["sampling"] == {"temperature": 1.0, "top_p": 0.95, "max_tokens": 32768, "extra_body": {}}
    data_file = next(Path(doc_data).parent.glob("*.parquet"))
    assert c["data"]["files"] == [
        {"name": data_file.name, "sha256": sha(data_file.read_bytes()), "bytes": data_file.stat().st_size}
    ]
    assert c["data"]["questions"] == 12 and c["data"]["selection"]["questions"] == 3
    assert c["prompts"]["counting_protocol.md"] == sha((prompts_dir() / "counting_protocol.md").read_bytes())
    assert c["server"]["models"] == ["test-model"] and c["server"]["version"] == {"version": "test-server-0"}
    env = c["environment"]
    assert env["evaluator_version"] and env["python"] and env["packages"]["openai"]
    assert str(tmp_path) not in json.dumps(c["data"]["files"])  # no machine paths for files
