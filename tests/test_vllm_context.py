"""A `max_tokens` that does not fit the served context (`make test-vllm`): the real vLLM CPU server answers
such a request with its own 400, and the sweep's checks refuse the same configuration before any server
starts (evaluator/study/plan_checks.py).

Marked `vllm`; the venv, the tiny model and the server come from test_vllm_real.py's `stack` fixture (a
server of this module's own, started once, with test_vllm_real's flags: --max-model-len 2048).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from datagen import doccount_rows, write_doccount
from test_vllm_real import SERVED_NAME, SERVER_FLAGS, VllmStack, stack  # noqa: F401 (stack: the fixture)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

LIMIT = int(SERVER_FLAGS[SERVER_FLAGS.index("--max-model-len") + 1])


def chat(st: VllmStack, max_tokens: int) -> tuple[int, str]:
    """(HTTP status, body) of one chat completion against the stack's server."""
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": "How many logos are on this page?"}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    req = urllib.request.Request(
        f"{st.base_url}/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def sweep_file(tmp: Path, st: VllmStack, max_tokens: int) -> Path:
    """The stack's server as a sweep would start it: the same program, model and flags."""
    write_doccount(tmp / "data" / "test-00000-of-00001.parquet", doccount_rows(2))
    command = [str(st.python), str(REPO / "scripts" / "vllm_cpu_serve.py")]
    args = [*SERVER_FLAGS, "--limit-mm-per-prompt", '{"image":1}']
    path = tmp / "sweep.toml"
    path.write_text(
        f'name = "ctx"\ndata_files = "{tmp / "data" / "*.parquet"}"\n[defaults]\nmax_tokens = {max_tokens}\n'
        f'[serve]\ngpus = []\ncommand = {json.dumps(command)}\n\n[[runs]]\nname = "tiny"\n'
        f'model = "{st.model}"\nserved_model_name = "{SERVED_NAME}"\n'
        f"serve = {{ gpus = 0, args = {json.dumps(args)} }}\n"
    )
    return path


def test_a_max_tokens_over_the_context_is_the_engines_400_and_the_plan_refuses_it(
    stack: VllmStack,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    stack.ensure_running()
    too_many = LIMIT * 2
    status, text = chat(stack, too_many)
    assert status == 400, text
    message = json.loads(text)["error"]["message"]
    assert f"max_tokens={too_many}" in message and f"max_model_len={LIMIT}" in message, message
    print(f"\nvLLM {stack.vllm_version}, max_tokens {too_many} on --max-model-len {LIMIT}: 400 {message!r}")
    # max_tokens equal to the context (the old Table 5 file's 32768 on 32768, scaled down)
    # max_tokens equal to the context (the old Table 5 file's 32768 on 32768, scaled down): also a 400, as
    # the prompt leaves it no room (measured on 0.31.0: "maximum context length is 2048 tokens")
    status, text = chat(stack, LIMIT)
    print(f"max_tokens {LIMIT} on --max-model-len {LIMIT}: {status} {text[:300]!r}")
    assert status == 400 and f"maximum context length is {LIMIT} tokens" in text, text

    # the same configuration as a sweep: refused, exit 2, before any server starts
    for max_tokens, extra in ((too_many, ["--plan"]), (too_many, []), (LIMIT, ["--plan"])):
        path = sweep_file(tmp_path, stack, max_tokens)
        res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), *extra)
        assert res.returncode == 2, res.stdout + res.stderr
        line = f"run tiny: max_tokens {max_tokens} + the doccount prompt budget 8192 = {max_tokens + 8192} tokens"
        assert line in res.stderr and f"> --max-model-len {LIMIT}" in res.stderr, res.stderr
        assert not (tmp_path / "runs").exists()  # no server log, no run folder: nothing started
    # a custom command is not vLLM: no check (its own early stop is the run's, not the plan's)
    custom = path.read_text().replace("vllm_cpu_serve.py", "some_server.py")
    path.write_text(custom)
    assert run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), "--plan").returncode == 0
