"""The sweep file (evaluator.study.sweep_file): read, checked against evaluate's own options, and
refused by line before anything is sent. Pure: no server, no process."""

from __future__ import annotations

import re
import secrets
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.study.secrets import looks_like_secret
from evaluator.study.sweep_file import SweepFileError, check_key_variables, load_sweep, run_args, select_runs

REPO = Path(__file__).resolve().parent.parent
SECRET = "sk-proj-" + "Ab3dE6gH9jK2mN5pQ8rS1tU4"


@pytest.fixture(scope="module")
def specs():
    from evaluator.cli.main import evaluate_cmd
    from evaluator.study.sweep_file import option_specs

    return option_specs(evaluate_cmd.params)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    return path


BASE = """name = "t"
benchmark = "doccount"

[defaults]
concurrency = 4

[[runs]]
name = "a"
model = "m-a"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "A_KEY"

[[runs]]
name = "b"
model = "m-b"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "B_KEY"
"""


def refused(tmp_path: Path, specs, text: str) -> str:
    with pytest.raises(SweepFileError) as info:
        load_sweep(write(tmp_path, text), specs)
    return str(info.value)


def line_of(text: str, needle: str) -> int:
    """The last line holding needle (the additions below go at the end of the file)."""
    return max(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_a_good_file_becomes_evaluate_arguments(tmp_path: Path, specs) -> None:
    text = BASE + 'top_p = "none"\nrepeats = 2\nextra_body = { provider = { require_parameters = true } }\n'
    sweep = load_sweep(write(tmp_path, text), specs)
    assert [r.name for r in sweep.runs] == ["a", "b"]
    args = run_args(sweep.runs[1], specs, tmp_path / "runs" / "t" / "b")
    assert args[args.index("--concurrency") + 1] == "4"  # from [defaults]
    assert args[args.index("--top-p") + 1] == "none" and args[args.index("--repeats") + 1] == "2"
    assert args[args.index("--extra-body-json") + 1] == '{"provider":{"require_parameters":true}}'
    assert args[-2:] == ["--run-root", str(tmp_path / "runs" / "t" / "b")]
    batch = load_sweep(write(tmp_path, BASE + "batch = true\n"), specs)  # evaluate's --batch passes through
    assert "--batch" in run_args(batch.runs[1], specs, tmp_path) and "--batch" not in run_args(
        batch.runs[0], specs, tmp_path
    )
    assert len(sweep.sha256) == 64


@pytest.mark.parametrize(
    ("addition", "needle", "message"),
    [
        ("tempreature = 0.5\n", "tempreature", "unknown key `tempreature`"),
        ("temperature = 5\n", "temperature", "`temperature`"),
        ("run_root = 'x'\n", "run_root", "set by the sweep"),
        ("overwrite = true\n", "overwrite", "never re-sends finished rows"),
        ("preset = 'no-such'\n", "preset", "`preset`"),
        ("concurrency = true\n", "concurrency", "`concurrency`"),
        ("api_key = 'x'\n", "api_key =", "names a credential"),
        (f"seed_note = '{SECRET}'\n", "seed_note", "looks like a secret"),
        ("extra_body = { auth = { token = 'x' } }\n", "extra_body", "names a credential"),
        ("preset = 'Bearer abcdefghijklmnop'\n", "Bearer", "looks like a secret"),
    ],
)
def test_refused_naming_the_line_and_never_the_value(
    tmp_path: Path, specs, addition: str, needle: str, message: str
):
    text = BASE + addition
    msg = refused(tmp_path, specs, text)
    assert f"s.toml:{line_of(text, needle)}:" in msg, msg
    assert message in msg
    assert SECRET not in msg and "abcdefghijklmnop" not in msg


def test_a_key_pasted_as_the_variable_name_is_refused_without_echo(tmp_path: Path, specs) -> None:
    text = BASE.replace('api_key_env = "B_KEY"', f'api_key_env = "{SECRET}"')
    msg = refused(tmp_path, specs, text)
    assert f"s.toml:{line_of(text, SECRET)}:" in msg and SECRET not in msg


def test_a_credential_in_a_url_is_refused(tmp_path: Path, specs) -> None:
    text = BASE.replace(
        'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "B_KEY"', 'base_url = "https://h/v1?key=zz"'
    )
    assert "carries a credential" in refused(tmp_path, specs, text)


def test_structure_errors_name_their_line(tmp_path: Path, specs) -> None:
    text = BASE + "\n[colour]\nx = 1\n"
    assert f"s.toml:{line_of(text, '[colour]')}: unknown key `colour`" in refused(tmp_path, specs, text)
    dup = BASE + '\n[[runs]]\nname = "A"\nmodel = "x"\nbase_url = "http://h/v1"\n'
    msg = refused(tmp_path, specs, dup)
    dup_line = line_of(dup, 'name = "A"')
    assert "two runs are named A" in msg and f":{dup_line}:" in msg
    assert "not valid TOML" in refused(tmp_path, specs, BASE + "oops = \n")
    assert "needs `model" in refused(
        tmp_path, specs, BASE + '\n[[runs]]\nname = "c"\nbase_url = "http://h/v1"\n'
    )
    assert "[pricing" in refused(
        tmp_path, specs, BASE.replace("[defaults]", '[pricing."m-a"]\ninput = 1\n\n[defaults]')
    )
    assert "at least one [[runs]]" in refused(tmp_path, specs, 'name = "t"\n')
    assert "names a folder" in refused(tmp_path, specs, BASE.replace('name = "a"', 'name = "../x"'))


def test_key_variables_are_checked_for_the_selected_runs_only(tmp_path: Path, specs) -> None:
    sweep = load_sweep(write(tmp_path, BASE), specs)
    with pytest.raises(SweepFileError) as info:
        check_key_variables(sweep, select_runs(sweep, []), {"A_KEY": "k"})
    assert f"line {line_of(BASE, 'B_KEY')}: B_KEY" in str(info.value)
    check_key_variables(sweep, select_runs(sweep, ["a"]), {"A_KEY": "k"})
    with pytest.raises(SweepFileError, match="--only names no run"):
        select_runs(sweep, ["zz"])


def test_the_shipped_readme_sweep_has_the_eight_models_and_their_recipes(specs) -> None:
    sweep = load_sweep(REPO / "sweeps" / "doccount-readme.toml", specs)
    models = {r.model for r in sweep.runs}
    assert (
        len(sweep.runs) == 8
        and {"gpt-5.5", "gpt-5.2", "claude-sonnet-4-5", "kimi-k2.5", "glm-4.6v"} <= models
    )
    by_name = {r.name: r for r in sweep.runs}
    assert by_name["gpt-5.5"].options["preset"] == "openai-reasoning"
    assert by_name["claude-sonnet-4.5"].options["preset"] == "anthropic-compat"
    assert by_name["qwen3.5-397b-a17b"].options["extra_body"] == {"provider": {"require_parameters": True}}
    assert all(r.api_key_env and re.fullmatch(r"[A-Z_]+", r.api_key_env) for r in sweep.runs)


def test_option_keys_come_from_evaluate_itself(specs) -> None:
    from evaluator.cli.main import evaluate_cmd

    longs = {o for p in evaluate_cmd.params for o in p.opts if o.startswith("--")}
    assert {s.flag for s in specs.values()} == longs


# ----------------------------------------------------------------------------- secrets

KEYS = st.text(string.ascii_letters + string.digits, min_size=24, max_size=48)
PREFIXES = st.sampled_from(
    ["sk-", "sk-proj-", "sk-ant-api03-", "sk-or-v1-", "AIza", "fw_", "hf_", "gsk_", "xai-"]
)


@settings(max_examples=300, deadline=None)
@given(PREFIXES, KEYS)
def test_provider_key_formats_look_like_secrets(prefix: str, body: str) -> None:
    assert looks_like_secret(prefix + body)
    assert looks_like_secret(f"Bearer {prefix}{body}")


MODEL_IDS = [
    "gpt-5.5", "claude-sonnet-4-5-20250929", "gemini-2.5-flash-preview-05-20", "Qwen/Qwen3.6-35B-A3B",
    "qwen/qwen3.5-397b-a17b", "accounts/fireworks/models/qwen3-vl-235b-a22b-instruct", "kimi-k2.5",
    "meta-llama/Llama-3.2-90B-Vision-Instruct", "OpenGVLab/InternVL3_5-30B-A3B", "data/test-*.parquet",
    "https://generativelanguage.googleapis.com/v1beta/openai/", "0123456789abcdef0123456789abcdef01234567",
]  # fmt: skip


@pytest.mark.parametrize("value", MODEL_IDS)
def test_model_ids_urls_and_commits_do_not(value: str) -> None:
    assert not looks_like_secret(value)


def test_random_tokens_without_a_prefix_mostly_do() -> None:
    hexes = sum(looks_like_secret(secrets.token_hex(32)) for _ in range(200))
    zhipu = sum(looks_like_secret(f"{secrets.token_hex(16)}.{secrets.token_urlsafe(12)}") for _ in range(200))
    assert hexes == 200 and zhipu >= 195


def test_a_misspelt_key_gets_the_closest_valid_one_with_file_and_line(tmp_path: Path, specs) -> None:
    text = BASE + "concurency = 2\n"
    msg = refused(tmp_path, specs, text)
    assert (
        f"s.toml:{line_of(text, 'concurency')}: unknown key `concurency` in run #2: did you mean `concurrency`?"
        in msg
    )
    valid = msg[msg.index("valid keys: ") :]
    for key in ("name", "api_key_env", "extra_body", "published", "concurrency", "model", "base_url"):
        assert re.search(rf"\b{key}\b", valid), key
    top = refused(tmp_path, specs, BASE.replace('benchmark = "doccount"', 'benchmrk = "doccount"'))
    assert "s.toml:2: unknown key `benchmrk` in a sweep file's top level: did you mean `benchmark`?" in top


def test_a_typo_through_the_command_line_is_one_line_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evaluator.cli.main import main

    text = BASE + "concurency = 2\n"
    res = CliRunner().invoke(
        main, ["sweep", str(write(tmp_path, text)), "--run-root", str(tmp_path / "runs")]
    )
    assert res.exit_code == 2, res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 's.toml'}:{line_of(text, 'concurency')}: unknown key")
    assert "did you mean `concurrency`?" in line and not (tmp_path / "runs").exists()


PUB = (
    'published = { correct = 322, questions = 442, source = "README", per_class = { "Table" = [44, 75] } }\n'
)


def test_a_published_result_is_read_and_checked(tmp_path: Path, specs) -> None:
    sweep = load_sweep(write(tmp_path, BASE + PUB), specs)
    assert sweep.runs[1].published == {
        "correct": 322,
        "questions": 442,
        "source": "README",
        "per_class": {"Table": [44, 75]},
    }
    assert sweep.runs[0].published is None
    assert (
        "--published" not in run_args(sweep.runs[1], specs, tmp_path)
        and "published" not in sweep.runs[1].options
    )
    for bad, message in [
        ("published = { correct = 500, questions = 442 }\n", "0 <= correct <= questions"),
        ("published = { correct = 3, questions = 4, sourse = 'x' }\n", "unknown key `sourse`"),
        ("published = { correct = 3, questions = 4, per_class = { T = [5, 4] } }\n", 'per_class."T"'),
        ("published = 322\n", "must be a table"),
    ]:
        text = BASE + bad
        msg = refused(tmp_path, specs, text)
        assert f"s.toml:{line_of(text, 'published')}: run b: `published`" in msg and message in msg, msg


def test_the_shipped_files_carry_the_published_numbers(specs) -> None:
    readme = {r.name: r.published for r in load_sweep(REPO / "sweeps" / "doccount-readme.toml", specs).runs}
    assert sorted(p["correct"] for p in readme.values()) == [269, 285, 293, 301, 304, 313, 319, 322]
    assert all(p["questions"] == 442 for p in readme.values())
    assert (
        "304 / 442" in readme["qwen3.6-35b-a3b"]["note"]
        and "293 / 442" in readme["claude-sonnet-4.5"]["note"]
    )
    table5 = {
        r.name: r.published for r in load_sweep(REPO / "sweeps" / "doccount-paper-table5.toml", specs).runs
    }
    assert len(table5) == 11 and {"gpt-5.2", "claude-sonnet-4.5", "gemini-2.5-pro", "mimo-vl-7b"} <= set(
        table5
    )
    paper = {  # Table 5 as printed: Brand Logo, Photograph, Table, Chart / Graph, Acc. (%)
        "kimi-k2.5": (63.80, 87.78, 58.67, 66.67, 72.85),
        "qwen3.6-35b-a3b": (55.83, 85.00, 56.00, 75.00, 68.78),
        "cosmos3-super-64b": (28.22, 52.22, 16.00, 58.33, 37.56),
        "gemini-2.5-pro": (50.92, 80.56, 42.67, 66.67, 62.44),
    }
    for name, pub in table5.items():
        pairs = list(pub["per_class"].values())
        assert [n for _, n in pairs] == [163, 180, 75, 24]
        assert sum(c for c, _ in pairs) == pub["correct"] and pub["questions"] == 442
        if name in paper:
            got = [round(100 * c / n, 2) for c, n in pairs] + [round(100 * pub["correct"] / 442, 2)]
            assert got == list(paper[name]), name
    assert "319 / 442" in table5["qwen3.6-35b-a3b"]["note"] and table5["qwen3.6-35b-a3b"]["correct"] == 304


def test_strip_token_is_a_runs_list_of_strings_not_a_credential(specs, tmp_path: Path) -> None:
    # the name has a credential's word (token); its values are what a model writes (--strip-token)
    run = 'strip_token = ["<|begin_of_box|>", "<|end_of_box|>"]\n'
    sweep = load_sweep(write(tmp_path, BASE.replace('name = "b"\n', f'name = "b"\n{run}')), specs)
    by_name = {r.name: r for r in sweep.runs}
    tokens = ["<|begin_of_box|>", "<|end_of_box|>"]
    assert by_name["b"].options.get("strip_token") == tokens
    assert "strip_token" not in by_name["a"].options
    # its values are still looked at: a key pasted into it is refused, and not repeated
    bad = BASE.replace('name = "b"\n', f'name = "b"\nstrip_token = ["{SECRET}"]\n')
    with pytest.raises(SweepFileError) as err:
        load_sweep(write(tmp_path, bad), specs)
    assert "looks like a secret" in str(err.value) and SECRET not in str(err.value)


# ----------------------------------------------------------------------------- trust3 #7: keys go beside
# their endpoint: [defaults]' api_key_env only to the runs whose endpoint is [defaults]' base_url, a run's
# only to its own base_url; `--plan` shows each run's key variable and host.

PROVIDER_KEY = "provider-key-0123456789-only-for-its-endpoint"


def _auth(server) -> set:
    """The Authorization headers (SHA-256) the server received (/health and /version are asked without)."""
    return {a["authorization_sha256"] for a in server.state.access} - {None}


def test_a_defaults_key_never_reaches_the_local_default_port(tmp_path: Path) -> None:
    """A backend = "vllm" run without base_url goes to localhost:8000: the defaults' key must not."""
    from support.cli import run_cli
    from support.openai_test_server import TestServer
    from support.study import Study

    study = Study(tmp_path, rows=2)
    text = study.header(1) + 'api_key_env = "PROVIDER_KEY"\n\n[[runs]]\nname = "local"\nmodel = "m"\n'
    study.file.write_text(text + 'backend = "vllm"\n')
    try:
        listener = TestServer({"served_model": "m"}, port=8000, api_key="the-local-servers-own").start()
    except OSError as exc:
        pytest.fail(f"this test needs 127.0.0.1:8000, the vllm default endpoint, free: {exc}")
    try:
        res = run_cli(
            "sweep", str(study.file), "--run-root", str(study.root), env={"PROVIDER_KEY": PROVIDER_KEY}
        )
        seen = _auth(listener)
    finally:
        listener.stop()
    assert seen == set(), "the provider key went to the local default port"
    assert res.returncode == 2, res.stderr
    [line] = res.stderr.strip().splitlines()
    assert (
        line.startswith(f"error: {study.file}:")
        and "[defaults] names `api_key_env` but not `base_url`" in line
    )


def test_a_run_naming_its_own_endpoint_gets_no_defaults_key(tmp_path: Path) -> None:
    import hashlib

    from support.cli import run_cli
    from support.datagen import doccount_reply
    from support.openai_test_server import TestServer
    from support.study import Study

    study = Study(tmp_path, rows=2)
    cfg = {"answers": doccount_reply(study.rows), "served_model": "m"}
    with TestServer(cfg, api_key=PROVIDER_KEY) as provider, TestServer(cfg, api_key="EMPTY") as other:
        text = study.header(1) + f'base_url = "{provider.base_url}"\napi_key_env = "PROVIDER_KEY"\n'
        text += '\n[[runs]]\nname = "provider"\nmodel = "m"\n'
        text += f'\n[[runs]]\nname = "other"\nmodel = "m"\nbase_url = "{other.base_url}"\n'
        study.file.write_text(text)
        res = run_cli(
            "sweep", str(study.file), "--run-root", str(study.root), env={"PROVIDER_KEY": PROVIDER_KEY}
        )
        to_provider, to_other = _auth(provider), _auth(other)
    sha = lambda s: hashlib.sha256(f"Bearer {s}".encode()).hexdigest()  # noqa: E731
    assert to_provider == {sha(PROVIDER_KEY)}  # named beside its endpoint: sent there
    assert to_other == {sha("EMPTY")}, "the defaults' key went to an endpoint not named with it"
    assert res.returncode == 0, res.stderr


def test_a_runs_own_key_without_its_own_endpoint_is_refused(tmp_path: Path, specs) -> None:
    text = (
        'name = "t"\nbenchmark = "doccount"\n\n[defaults]\nbase_url = "http://127.0.0.1:9/v1"\n\n'
        '[[runs]]\nname = "a"\nmodel = "m"\napi_key_env = "A_KEY"\n'
    )
    msg = refused(tmp_path, specs, text)
    assert "s.toml:10:" in msg and "run a names `api_key_env` but not its `base_url`" in msg, msg
    vllm = 'name = "t"\nbenchmark = "doccount"\n\n[[runs]]\nname = "a"\nmodel = "m"\nbackend = "vllm"\n'
    msg = refused(tmp_path, specs, vllm + 'api_key_env = "A_KEY"\n')
    assert "s.toml:8:" in msg and "not its `base_url`" in msg, msg


def test_plan_shows_each_runs_key_variable_and_host(tmp_path: Path) -> None:
    from support.cli import run_cli

    text = (
        'name = "t"\nbenchmark = "doccount"\n\n[defaults]\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "PROVIDER_KEY"\n\n[[runs]]\nname = "inherits"\nmodel = "m"\n\n'
        '[[runs]]\nname = "own"\nmodel = "m"\nbase_url = "https://api.example.org/v1"\napi_key_env = "OWN_KEY"\n\n'
        '[[runs]]\nname = "keyless"\nmodel = "m"\nbase_url = "http://localhost:8001/v1"\n'
    )
    path = write(tmp_path, text)
    env = {"PROVIDER_KEY": PROVIDER_KEY, "OWN_KEY": "own-key-0123456789-abcdefghij"}
    res = run_cli("sweep", str(path), "--plan", "--run-root", str(tmp_path / "runs"), env=env)
    assert res.returncode == 0, res.stderr
    lines = [ln.strip() for ln in res.stdout.splitlines()]
    for run, key in [("inherits", "key: $PROVIDER_KEY to 127.0.0.1:9"), ("own", "key: $OWN_KEY to api.example.org"),
                     ("keyless", "key: none (EMPTY) to localhost:8001")]:  # fmt: skip
        row = next(i for i, ln in enumerate(lines) if ln.startswith(f"{run} "))
        assert lines[row + 1] == key, res.stdout
    assert PROVIDER_KEY not in res.stdout + res.stderr and "own-key-0123" not in res.stdout + res.stderr


@settings(max_examples=60, deadline=None)
@given(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_key_is_only_ever_beside_the_url_it_goes_to(
    defaults_url: bool, defaults_key: bool, run_url: bool, run_key: bool, vllm: bool
) -> None:
    """Every shape of where base_url and api_key_env are written: the run's key variable is the one named
    in the table that also names the URL it goes to; a key with no URL beside it is refused."""
    from evaluator.cli.main import evaluate_cmd
    from evaluator.study.sweep_file import option_specs

    specs = option_specs(evaluate_cmd.params)
    defaults = ('base_url = "http://d.example/v1"\n' * defaults_url) + (
        'api_key_env = "D_KEY"\n' * defaults_key
    )
    run = ('base_url = "http://r.example/v1"\n' * run_url) + ('api_key_env = "R_KEY"\n' * run_key)
    run += 'backend = "vllm"\n' * vllm
    text = f'name = "t"\nbenchmark = "doccount"\n\n[defaults]\n{defaults}\n[[runs]]\nname = "a"\nmodel = "m"\n{run}'
    path = Path(tempfile.mkdtemp()) / "s.toml"
    path.write_text(text, encoding="utf-8")
    lonely = (defaults_key and not defaults_url) or (run_key and not run_url)
    no_endpoint = not (defaults_url or run_url or vllm)
    if lonely or no_endpoint:
        with pytest.raises(SweepFileError):
            load_sweep(path, specs)
        return
    [spec] = load_sweep(path, specs).runs
    url = spec.options.get("base_url")
    expected = "R_KEY" if run_key else "D_KEY" if defaults_key and not run_url else None
    assert spec.api_key_env == expected, (text, spec.api_key_env)
    if spec.api_key_env == "D_KEY":
        assert url == "http://d.example/v1"
    if spec.api_key_env == "R_KEY":
        assert url == "http://r.example/v1"
    if url is None:
        assert spec.api_key_env is None  # the vllm default endpoint gets no key
