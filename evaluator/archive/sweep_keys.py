"""A sweep archive's key variables (archive.sweep.reproduce_sweep): sweep.json's, checked against the
archived sweep file, so that a crafted sweep.json cannot name another variable (its checksum recomputed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaluator.archive.base import ArchiveError
from evaluator.archive.opened import OpenedArchive
from evaluator.core.boundary import clip
from evaluator.runfolder.sweep_state import SWEEP_COPY, SWEEP_STATE

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

STATE, COPY = SWEEP_STATE, SWEEP_COPY


def _declared(toml: Any) -> tuple[dict[str, Any], Any]:
    """The key variable each run of the archived sweep file names itself, and its [defaults]' one."""
    toml = toml if isinstance(toml, dict) else {}
    runs = toml.get("runs") if isinstance(toml.get("runs"), list) else []
    own = {str(r.get("name")): r.get("api_key_env") for r in runs if isinstance(r, dict)}
    defaults = toml.get("defaults")
    return own, defaults.get("api_key_env") if isinstance(defaults, dict) else None


def key_variables(archive: OpenedArchive, runs: Mapping[str, str]) -> dict[str, str | None]:
    """Each run's key variable, from sweep.json checked against the archived sweep file (sweep.toml): the
    variable the run names itself, or, when it names none, the one of [defaults] (which a run inherits; a
    run that does not, e.g. a served one, records none). ArchiveError in one line when they differ (a crafted
    sweep.json naming another variable, with its checksum recomputed) or when a run names a variable the
    archive has no sweep file to check against."""
    try:
        state = archive.sweep_state.get() if archive.sweep_state is not None else None
        toml = tomllib.loads(archive.whole(COPY).decode("utf-8")) if COPY in archive.files else None
    except (ValueError, UnicodeDecodeError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ArchiveError(
            f"{archive.source}: cannot read {STATE} or {COPY} ({clip(str(exc), 120)})"
        ) from None
    states = state.runs if state else {}
    own, default = _declared(toml)
    out: dict[str, str | None] = {}
    for name in runs:
        st = states.get(name)
        var = st.api_key_env if st else None
        allowed = [own[name]] if own.get(name) is not None else [None, default]
        if var not in allowed:
            declared = own.get(name) if own.get(name) is not None else default
            raise ArchiveError(
                f"{archive.source}: {STATE} names the key variable {clip(repr(var), 60)} for run {name} where the "
                f"archived sweep file ({COPY}) names {clip(repr(declared), 60)}; refusing to reproduce "
                "from it (nothing was read or sent)"
            )
        out[name] = var if isinstance(var, str) and var else None
    return out
