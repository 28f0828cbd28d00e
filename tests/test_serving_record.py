"""run_config.json `serving`: what served a self-hosted run (evaluator.runfolder.serving), typed and round
tripped through the file; the parsers of what make hands over (nvidia-smi's CSV, the container's command)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaluator.runfolder.runconfig import RunConfig, RunConfigError, check_compatible
from evaluator.runfolder.serving import Gpu, Serving, parse_args, parse_gpus, serving_record

COMMIT = "0123456789abcdef0123456789abcdef01234567"
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
servings = st.builds(
    Serving,
    model=st.none() | text,
    revision=st.none() | text,
    commit=st.none() | st.from_regex(r"[0-9a-f]{40}", fullmatch=True),
    server_version=st.none() | text,
    image=st.none() | text,
    args=st.lists(text, max_size=5),
    gpus=st.lists(st.builds(Gpu, name=text, memory_total=text, driver_version=text), max_size=3),
)


@given(servings)
def test_serving_round_trips_through_run_config_json(serving: Serving) -> None:
    config = RunConfig(benchmark="doccount", model="m", serving=serving)
    written = json.dumps(config.to_dict())
    back = RunConfig.from_dict(json.loads(written))
    assert back.serving == serving and back == config


def test_absent_serving_leaves_run_config_as_it_was() -> None:
    d = RunConfig(benchmark="doccount", model="m").to_dict()
    assert "serving" not in d and RunConfig.from_dict(d).serving is None
    partial = RunConfig(benchmark="doccount", model="m", serving=Serving(model="org/x")).to_dict()
    assert partial["serving"] == {"model": "org/x"}  # unknown fields are absent, not null


def test_a_wrongly_typed_serving_is_refused() -> None:
    with pytest.raises(RunConfigError):
        RunConfig.from_dict({"benchmark": "doccount", "model": "m", "serving": {"gpus": "A100"}})


def test_nvidia_smi_csv_with_or_without_header() -> None:
    out = (
        "name, memory.total [MiB], driver_version\n"
        "NVIDIA A100-SXM4-80GB, 81920 MiB, 535.104.05\n\n"
        '"NVIDIA H100, PCIe", 81559 MiB, 550.54.15\n'
    )
    assert parse_gpus(out) == [
        Gpu(name="NVIDIA A100-SXM4-80GB", memory_total="81920 MiB", driver_version="535.104.05"),
        Gpu(name="NVIDIA H100, PCIe", memory_total="81559 MiB", driver_version="550.54.15"),
    ]
    assert parse_gpus("") == parse_gpus(None) == []
    assert parse_gpus("NVIDIA-SMI has failed because it couldn't communicate with the driver") == []


def test_server_arguments_from_a_json_command_or_shell_words() -> None:
    cmd = ["--max-model-len", "4096", "--hf-overrides", '{"a": 1}']
    assert parse_args(json.dumps(cmd)) == cmd
    assert parse_args("--max-model-len 4096 --hf-overrides '{\"a\": 1}'") == cmd
    assert parse_args("") == parse_args(None) == parse_args("null") == []


def test_nothing_self_hosted_records_nothing() -> None:
    openai_like = {"models": ["gpt-x"], "version": {"error": "HTTP 404"}}
    assert serving_record(openai_like, "gpt-x", {}) is None


def test_the_server_names_what_it_loaded() -> None:
    vllm = {"models": ["tiny"], "roots": {"tiny": "/models/tiny-vlm"}, "version": {"version": "0.32.0"}}
    got = serving_record(vllm, "tiny", {})
    assert got == Serving(model="/models/tiny-vlm", server_version="0.32.0")
    unnamed = {"models": ["org/x"], "version": {"version": "0.32.0"}}  # no --served-model-name: root == id
    assert serving_record(unnamed, "org/x", {}) == Serving(model="org/x", server_version="0.32.0")
    # A pinned commit needs no cache to be known.
    env = {"DOCCOUNT_MODEL_REVISION": COMMIT}
    assert serving_record(unnamed, "org/x", env) == Serving(
        model="org/x", revision=COMMIT, commit=COMMIT, server_version="0.32.0"
    )


@pytest.mark.parametrize(
    ("old", "new", "refused"),
    [(COMMIT, COMMIT, False), (COMMIT, "f" * 40, True), (COMMIT, None, False), (None, COMMIT, False)],
)
def test_other_weights_may_not_join_a_run_folder(old: str | None, new: str | None, refused: bool) -> None:
    def config(commit: str | None) -> RunConfig:
        return RunConfig(benchmark="doccount", model="m", serving=Serving(model="org/x", commit=commit))

    if refused:
        with pytest.raises(RunConfigError, match=r"different model weights \(commit 0123456789ab\.\.\. then"):
            check_compatible(config(old), config(new), Path("runs/r"))
    else:
        check_compatible(config(old), config(new), Path("runs/r"))


def test_reproduce_names_the_make_lines_that_serve_the_recorded_weights() -> None:
    from evaluator.archive.plan import serve_commands

    def config(**serving: object) -> dict:
        return RunConfig(benchmark="doccount", model="tiny", serving=Serving(**serving)).to_dict()  # type: ignore[arg-type]

    args = ["--tensor-parallel-size=4", "--revision", "main", "--data-parallel-size", "2", "--enforce-eager"]
    lines = serve_commands(config(model="org/x", revision="main", commit=COMMIT, args=args))
    assert lines == [
        f"make model MODEL=org/x MODEL_REVISION={COMMIT}",
        f"make serve MODEL=org/x MODEL_REVISION={COMMIT} SERVED_MODEL_NAME=tiny TENSOR_PARALLEL_SIZE=4 "
        "DATA_PARALLEL_SIZE=2 VLLM_EXTRA_ARGS=--enforce-eager",
    ]
    # A folder has no hub revision to fetch; a run with nothing recorded names nothing.
    assert serve_commands(config(model="/models/tiny")) == [
        "make serve MODEL=/models/tiny SERVED_MODEL_NAME=tiny"
    ]
    assert serve_commands(RunConfig(benchmark="doccount", model="tiny").to_dict()) == []
