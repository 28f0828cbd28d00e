"""Values that look like credentials, for files that must never hold one (a sweep file). Pure.

A key in such a file is refused without repeating it: the messages name the key, never the value.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

# Key names whose value would be a credential (api_key_env names a variable, so it is allowed).
SECRET_KEY_PARTS = {
    "key", "apikey", "token", "secret", "password", "passwd", "authorization", "bearer", "auth", "credential",
    "credentials", "cookie",
}  # fmt: skip
# Keys whose name has such a part but whose value is no credential (their values are still checked):
# api_key_env names a variable; strip_token lists markers removed from answers (--strip-token).
NOT_CREDENTIAL_NAMES = ("api_key_env", "strip_token")
# Prefixes of providers' key formats (OpenAI/Moonshot/DeepSeek sk-, Anthropic sk-ant-, OpenRouter sk-or-,
# Google AIza, Fireworks fw_, Hugging Face hf_, GitHub ghp_..., Groq gsk_, xAI xai-, Replicate r8_, ...).
SECRET_PREFIX_RE = re.compile(
    r"(?:^|[^A-Za-z0-9])(?:sk-|sk_|AIza|fw_|hf_|gh[pousr]_|gsk_|xai-|r8_|pplx-|nvapi-|xox[abp]-)"
    r"[A-Za-z0-9_\-]{12,}"
)
BEARER_RE = re.compile(r"(?i)\bbearer\s+\S{8,}")
TOKEN_CHARS_RE = re.compile(r"^[A-Za-z0-9_\-+=./]{20,}$")
HEX_RE = re.compile(r"^[0-9a-fA-F]{40}$")  # a git commit (a `revision` may pin one)


def credential_named(name: str) -> bool:
    """A variable named like a credential (AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, SSH_AUTH_SOCK): the one rule
    for what a process the sweep starts does not inherit (executors.slurm, study.server)."""
    return bool(set(re.split(r"[_\-.]+", name.lower())) & SECRET_KEY_PARTS)


def looks_like_secret(value: str) -> bool:
    """A provider key format, a `Bearer ...` header value, or a long random-looking token (keys without a
    known prefix: Zhipu's id.secret, Together's hex), which model ids, paths, URLs and commits are not."""
    s = value.strip()
    if SECRET_PREFIX_RE.search(s) or BEARER_RE.search(s):
        return True
    if not TOKEN_CHARS_RE.match(s) or HEX_RE.match(s):
        return False
    return any(_random_run(part) for part in re.split(r"[-_./]", s))


def _random_run(part: str) -> bool:
    """12+ characters mixing letters and digits that switch class often, as random text does."""
    if len(part) < 12:
        return False
    switches = sum(a.isdigit() != b.isdigit() for a, b in zip(part, part[1:], strict=False))
    return switches >= 4 and _entropy(part) >= 3.2


def url_carries_credential(value: str) -> bool:
    """user:password@ in an http(s) URL, or a query parameter named like a key (?key=, ?api_key=, ...)."""
    if not value.lower().startswith(("http://", "https://")):
        return False
    parts = urlsplit(value)
    if parts.password:
        return True
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    return any(set(re.split(r"[_\-.]+", n.lower())) & SECRET_KEY_PARTS for n in names)


def _entropy(s: str) -> float:
    counts = Counter(s)
    return -sum(c / len(s) * math.log2(c / len(s)) for c in counts.values())


def secret_problem(key: str, value: Any, allow_key_names: tuple[str, ...] = ()) -> str | None:
    """What makes a key/value pair look like a credential, or None; nested tables and lists included."""
    parts = set(re.split(r"[_\-.\s]+", key.lower()))
    if key not in allow_key_names and parts & SECRET_KEY_PARTS:
        return f"`{key}` names a credential"
    if isinstance(value, str) and looks_like_secret(value):
        return f"the value of `{key}` looks like a secret (an API key or token)"
    if isinstance(value, str) and url_carries_credential(value):
        return f"the URL in `{key}` carries a credential (a password or a key in its query string)"
    if isinstance(value, dict):
        for k, v in value.items():
            problem = secret_problem(str(k), v)
            if problem:
                return problem
    if isinstance(value, list):
        for v in value:
            problem = secret_problem(key, v, (key,))
            if problem:
                return problem
    return None


def secret_places(data: Any, path: list[Any], skip: list[Any]) -> Iterator[tuple[list[Any], str]]:
    """Where a parsed file holds a credential (its path, the problem), tables and lists walked; of the keys
    in NOT_CREDENTIAL_NAMES only the values are checked; paths in `skip` are not walked."""
    items = enumerate(data) if isinstance(data, list) else data.items() if isinstance(data, dict) else ()
    for key, value in items:
        here, name = [*path, key], key if isinstance(key, str) else str(path[-1])
        nested = isinstance(value, (dict, list))  # a list item is checked under its list's key
        found = secret_problem(
            name, None if nested else value, NOT_CREDENTIAL_NAMES if name == key else (name,)
        )
        if found:
            yield here, found
        if nested and here != skip:
            yield from secret_places(value, here, skip)
