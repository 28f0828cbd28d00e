"""Where a reproduction may send a key: only to an endpoint the user named on the command line
(`--base-url URL`, or `--base-url RUN=URL` for a run of a sweep archive) or confirmed at a prompt.

An archive records the endpoints its run used, and a crafted archive can record any URL (and, for a sweep,
any key variable). So an endpoint that comes from the archive (or from MODEL_API_BASE_URL, which the
command line did not name) is used as it is only when no key would go with it; with a key it needs the
user's yes at an interactive prompt that shows the run, the key's variable and the hosts, and without a
terminal it is refused before anything is sent (one line saying how to name the endpoint).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from evaluator.archive.base import ArchiveError

# (run, the key's variable, the endpoints) -> the user's yes; None where there is no terminal to ask on
Confirm = Callable[[str, str, list[str]], bool]

# RUN=URL: a run name as a sweep can have one (sweep.SAFE_NAME), then the URL; a plain URL has "://" first
_RUN_URL = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,99})=(.+)")


def parse_base_urls(values: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The plain `--base-url URL` values and the `--base-url RUN=URL` ones, per run, in the order given."""
    plain: list[str] = []
    per_run: dict[str, list[str]] = {}
    for value in values:
        found = _RUN_URL.fullmatch(value.strip())
        if found and "://" not in found.group(1):
            per_run.setdefault(found.group(1), []).append(found.group(2))
        else:
            plain.append(value.strip())
    return plain, per_run


def endpoint_hosts(urls: Sequence[str]) -> str:
    """The endpoints as scheme://host[:port], terminal-safe (a crafted URL may hold control characters)."""
    shown = []
    for url in urls:
        try:
            parts = urlsplit(url)
            where = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        except ValueError:
            where = url
        shown.append(re.sub(r"[^\x21-\x7e]", "?", where)[:120])
    return ", ".join(shown) or "no endpoint"


def key_endpoints(
    run: str,
    variable: str,
    has_key: bool,
    named: list[str],
    recorded: list[str],
    confirm: Confirm | None,
    how: str,
) -> list[str]:
    """The endpoints to send the run's requests to: the ones the user named; else the recorded ones when no
    key goes with them or when the user confirmed them. ArchiveError (nothing sent) otherwise; `how` says
    how to name the endpoint (`--base-url URL` or `--base-url RUN=URL`, and the way out)."""
    if named:
        return named
    if not has_key:
        return recorded
    hosts = endpoint_hosts(recorded)
    if recorded and confirm is not None and confirm(run, variable, recorded):
        return recorded
    why = "was not confirmed" if confirm is not None and recorded else "comes from the archive, not from you"
    raise ArchiveError(
        f"run {run}: {variable} is set and its endpoint ({hosts}) {why}; name the endpoint with {how}; "
        "nothing was sent"
    )
