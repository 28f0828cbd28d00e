"""The outcome file an evaluate child writes for its sweep never holds the key: a user error whose line
carries it (whole, base64-encoded, or an 8-character piece of it) is written with the key removed."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.core.errors import NotFinished
from evaluator.evaluation.ending import recording
from evaluator.runfolder.handoff import HANDOFF_ENV, LaunchContract, encode_contract, read_outcome

KEY = "sk-outcome-" + "q" * 24


def forms(key: str) -> list[str]:
    return [key, base64.b64encode(key.encode()).decode(), key[3:14]]  # whole, base64, a piece


@settings(max_examples=20, deadline=None)
@given(form=st.integers(0, 2), before=st.text(max_size=30), after=st.text(max_size=30))
def test_an_error_line_carrying_the_key_is_written_without_it(
    tmp_path_factory: pytest.TempPathFactory, form: int, before: str, after: str
) -> None:
    folder = tmp_path_factory.mktemp("outcome")
    outcome, contract = folder / "o.json", folder / "c.json"
    contract.write_bytes(encode_contract(LaunchContract(outcome=str(outcome))))
    env = {HANDOFF_ENV: str(contract), "MODEL_API_KEY": KEY}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODEL_API_KEY", KEY)
        with pytest.raises(NotFinished), recording(env=env):
            raise NotFinished(f"the server said {before.strip()}{forms(KEY)[form]}{after.strip()}")
    written = outcome.read_bytes()
    assert read_outcome(outcome) is not None
    assert not any(f.encode() in written for f in forms(KEY)), written
    assert b"error: the server said" in written
