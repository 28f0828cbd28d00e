"""The runs one `doccount sweep` invocation starts: those --only names, each with its key variable set."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from evaluator.study.sweep_file import RunSpec, SweepFileError, SweepSpec


def select_runs(sweep: SweepSpec, only: Iterable[str]) -> list[RunSpec]:
    """The runs named by --only (all when none is named), in file order."""
    wanted = list(only)
    known = {r.name for r in sweep.runs}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SweepFileError(
            f"--only names no run of {sweep.path}: {', '.join(unknown)} (runs: {', '.join(sorted(known))})"
        )
    return [r for r in sweep.runs if not wanted or r.name in wanted]


def check_key_variables(sweep: SweepSpec, runs: Iterable[RunSpec], env: Mapping[str, str]) -> None:
    """Every run about to start has its key variable set (a run without api_key_env sends no key)."""
    missing: dict[tuple[str, int | None], list[str]] = {}
    for r in runs:
        if r.api_key_env and not env.get(r.api_key_env, "").strip():
            missing.setdefault((r.api_key_env, r.key_line), []).append(r.name)
    if missing:  # one line, each unset variable once, with the line that names it and its runs
        where = "; ".join(
            f"{', '.join(names)} (line {line}: {var})" for (var, line), names in missing.items()
        )
        count = sum(len(names) for names in missing.values())
        raise SweepFileError(
            f"{sweep.path}: the key variable of {count} run(s) is not set: {where}; export it "
            "(read -rsp 'key: ' VAR; export VAR) or leave the run out with --only"
        )
