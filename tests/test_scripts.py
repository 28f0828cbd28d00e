"""The README's wrapper scripts honour their environment variables."""

from __future__ import annotations

import json
import os
import subprocess

from support.cli import REPO, run_script


def test_remote_script_maps_env_to_flags(tmp_path, doc_data, server) -> None:
    res = run_script(
        "evaluate_remote_api.sh",
        tmp_path=tmp_path,
        env={
            "MODEL": "test-model",
            "MODEL_API_BASE_URL": server.base_url,
            "RUN_ROOT": str(tmp_path / "r"),
            "DATA_FILES": doc_data,
            "CONCURRENCY": "3",
            "MAX_TOKENS": "77",
            "TEMPERATURE": "0.5",
            "TOP_P": "0.9",
            "LIMIT": "2",
            "EXTRA_BODY_JSON": '{"top_k": 5}',
            "MODEL_API_KEY": "sk-script-SECRET",
            "SEED": "5",
            "REPEATS": "2",
        },
    )
    assert res.returncode == 0, res.stderr
    body = server.requests()[0]["body"]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"]) == (77, 0.5, 0.9, 5)
    assert len(server.requests()) == 4 and all(isinstance(r["body"]["seed"], int) for r in server.requests())
    config = json.loads((tmp_path / "r" / "run_config.json").read_text())
    assert config["seed"] == 5 and config["repeats"] == 2
    assert config["backend"] == "api" and config["request_policy"]["concurrency"] == 3
    assert "sk-script-SECRET" not in (tmp_path / "r" / "run_config.json").read_text()


def test_scripts_refuse_without_model(tmp_path) -> None:
    res = run_script("evaluate_remote_api.sh", {}, tmp_path)
    assert res.returncode != 0 and "MODEL" in res.stderr
    res = run_script("evaluate_local_vllm.sh", {}, tmp_path)
    assert res.returncode != 0 and "MODEL" in res.stderr


def test_local_script_uses_vllm_backend(tmp_path, doc_data, server) -> None:
    res = run_script(
        "evaluate_local_vllm.sh",
        {
            "MODEL": "m",
            "MODEL_API_BASE_URL": server.url,
            "LIMIT": "1",
            "RUN_NAME": "ignored",
            "RUN_ROOT": str(tmp_path / "r"),
            "DATA_FILES": doc_data,
        },
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "r" / "run_config.json").read_text())["backend"] == "vllm"


def run_launcher(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    """scripts/serve_vllm.sh with a stand-in `vllm` that prints the arguments it was given, one a line."""
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    drop = ("MODEL", "MODEL_REVISION", "REASONING_PARSER", "VLLM_API_KEY")
    clean = {k: v for k, v in os.environ.items() if k not in drop}
    clean.update({"VLLM_ENTRYPOINT": "cli", "VLLM_BIN": str(fake), "MODEL": "org/model", **env})
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "serve_vllm.sh"), "--max-model-len", "4096"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_launcher_passes_the_reasoning_parser_only_when_set(tmp_path) -> None:
    plain = run_launcher(tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "--reasoning-parser" not in plain.stdout.split("\n")
    res = run_launcher(tmp_path, REASONING_PARSER="qwen3")
    assert res.returncode == 0, res.stderr
    args = res.stdout.split("\n")
    i = args.index("--reasoning-parser")
    assert args[i + 1] == "qwen3" and args.index("--max-model-len") > i  # user arguments still come last
    assert "--reasoning-parser qwen3" in res.stderr  # the printed command shows it
    bad = run_launcher(tmp_path, REASONING_PARSER="qwen3 --api-key x")
    assert bad.returncode == 2 and "REASONING_PARSER must be a vLLM parser name" in bad.stderr


def test_launcher_pins_the_weights_revision_only_when_set(tmp_path) -> None:
    """MODEL_REVISION (make serve MODEL_REVISION=...) becomes vLLM's --revision and --tokenizer-revision."""
    plain = run_launcher(tmp_path)
    assert plain.returncode == 0 and "--revision" not in plain.stdout.split("\n"), plain.stderr
    commit = "0123456789abcdef0123456789abcdef01234567"
    res = run_launcher(tmp_path, MODEL_REVISION=commit)
    assert res.returncode == 0, res.stderr
    args = res.stdout.split("\n")
    i = args.index("--revision")
    assert args[i : i + 4] == ["--revision", commit, "--tokenizer-revision", commit]
    assert args[:2] == ["serve", "org/model"] and args.index("--max-model-len") > i  # user arguments last
    bad = run_launcher(tmp_path, MODEL_REVISION="main --trust-remote-code")
    assert bad.returncode == 2 and "MODEL_REVISION must be a branch, tag or commit id" in bad.stderr


def test_serve_script_passes_batch_invariance_through(tmp_path) -> None:
    """VLLM_BATCH_INVARIANT reaches vLLM's environment unchanged and is shown in the launch line."""
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\necho "batch_invariant=${VLLM_BATCH_INVARIANT:-unset} args=$*"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM")}
    env.update({"MODEL": "m", "VLLM_ENTRYPOINT": "cli", "VLLM_BIN": str(fake)})
    for value, shown in ((None, "unset"), ("1", "1")):
        run_env = env if value is None else {**env, "VLLM_BATCH_INVARIANT": value}
        res = subprocess.run(
            ["bash", str(REPO / "scripts" / "serve_vllm.sh"), "--max-model-len", "64"],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith(f"batch_invariant={shown} args=serve m "), res.stdout
        assert f"VLLM_BATCH_INVARIANT={value or 0}" in res.stderr
