"""run_config.json as one type (evaluator.runfolder.runconfig.RunConfig): seed, repeats and preset are its
fields; `extra` holds only the keys a newer version wrote; a file written before reads the same."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaluator.runfolder.files import write_json_atomic
from evaluator.runfolder.runconfig import RunConfig, RunConfigError, check_compatible, load_run_config

# Written by main's code before seed, repeats and preset were fields (the demo's run_config.json with
# --seed 7 --repeats 3 --preset openai-reasoning, and one key of a newer version).
MAIN_FILE = Path(__file__).parent / "fixtures" / "run_config_main_seed_repeats_preset.json"
PACKAGE = Path(__file__).parent.parent / "evaluator"


def test_a_run_config_written_before_reads_its_settings_as_fields_and_writes_back_the_same(
    tmp_path: Path,
) -> None:
    config = load_run_config(MAIN_FILE)
    assert (config.seed, config.repeats, config.repeat_count) == (7, 3, 3)
    assert config.preset is not None and config.preset["name"] == "openai-reasoning"
    assert config.extra == {"written_by_newer": {"x": 1}}  # only what this version does not know
    write_json_atomic(tmp_path / "run_config.json", config.to_dict())
    assert (tmp_path / "run_config.json").read_bytes() == MAIN_FILE.read_bytes()


def test_settings_not_used_stay_out_of_the_file() -> None:
    d = load_run_config(MAIN_FILE).to_dict()
    for key in ("seed", "repeats", "preset", "written_by_newer"):
        d.pop(key)
    config = RunConfig.from_dict(d)
    assert (config.seed, config.repeats, config.preset, config.repeat_count, config.extra) == (
        None,
        None,
        None,
        1,
        {},
    )
    assert config.to_dict() == d


@given(
    seed=st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    repeats=st.none() | st.integers(min_value=2, max_value=10_000),
)
def test_seed_and_repeats_round_trip(seed: int | None, repeats: int | None) -> None:
    d = {**load_run_config(MAIN_FILE).to_dict(), "seed": seed, "repeats": repeats}
    d = {k: v for k, v in d.items() if v is not None}
    config = RunConfig.from_dict(d)
    assert (config.seed, config.repeats, config.repeat_count) == (seed, repeats, repeats or 1)
    assert msgspec.json.encode(config.to_dict(), order="sorted") == msgspec.json.encode(d, order="sorted")


@pytest.mark.parametrize("bad", [{"seed": "7"}, {"repeats": True}, {"preset": {"name": "x"}}])
def test_a_setting_of_the_wrong_type_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(RunConfigError, match="does not hold a valid run configuration"):
        RunConfig.from_dict({**load_run_config(MAIN_FILE).to_dict(), **bad})


def test_another_seed_or_fewer_repeats_is_refused_more_repeats_continue(tmp_path: Path) -> None:
    old = load_run_config(MAIN_FILE)
    check_compatible(old, msgspec.structs.replace(old, repeats=5), tmp_path)  # K may grow
    for changed, word in (
        (dict(seed=8), "seed"),
        (dict(repeats=2), "repeats"),
        (dict(repeats=None), "repeats"),
    ):
        with pytest.raises(RunConfigError, match=f"different {word}"):
            check_compatible(old, msgspec.structs.replace(old, **changed), tmp_path)


def test_no_module_reads_a_setting_from_extra() -> None:
    readers = [str(p) for p in PACKAGE.rglob("*.py") if re.search(r"\.extra\.get\(|\.extra\[", p.read_text())]
    assert readers == []
