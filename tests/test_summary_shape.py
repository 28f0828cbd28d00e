"""summary.json is what evaluator.scoring.summary_shape.Summary says: every key it writes is declared,
every required key is there, every value has its declared type (read back from the file, nested all the
way down). Over hand-written run folders that reach the optional sections: repeats, rate-limit refusals,
inline reasoning, reported reasoning and cached tokens, failed attempts, missing and errored rows."""

from __future__ import annotations

import collections.abc
import json
import types
import typing
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest

from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.data.parquet import manifest_digest
from evaluator.scoring import score_run
from evaluator.scoring.summary_shape import Summary


def conforms(value: Any, tp: Any, where: str = "summary") -> list[str]:
    """Where `value` (decoded JSON) is not a `tp`: undeclared or missing keys, wrong types."""
    if tp is Any or tp is object:
        return []
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, expected {tp.__name__}"]
        hints = get_type_hints(tp)
        out = [f"{where}.{k}: not declared in {tp.__name__}" for k in value if k not in hints]
        out += [f"{where}.{k}: missing ({tp.__name__})" for k in tp.__required_keys__ if k not in value]
        for k, v in value.items():
            if k in hints:
                out += conforms(v, hints[k], f"{where}.{k}")
        return out
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        tried = [conforms(value, a, where) for a in args]
        return [] if any(not t for t in tried) else [f"{where}: {value!r} is none of {tp}"]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, expected {tp}"]
        return [e for k, v in value.items() for e in conforms(v, args[1], f"{where}[{k!r}]")]
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, expected {tp}"]
        item = args[0] if origin is not tuple else Union[args]  # noqa: UP007 (a runtime Union of the members)
        return [e for i, v in enumerate(value) for e in conforms(v, item, f"{where}[{i}]")]
    if tp is type(None):
        return [] if value is None else [f"{where}: {value!r}, expected null"]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    return [] if ok else [f"{where}: {value!r}, expected {tp.__name__}"]


CLASSES = ["Table", "Photograph", "Chart"]


def entries(n: int) -> list[ManifestEntry]:
    return [
        ManifestEntry(f"s{i}", None, 1 + 7 * i, {"target_class": CLASSES[i % len(CLASSES)]}) for i in range(n)
    ]


def record(e: ManifestEntry, answer: int | None, repeat: int | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "sample_id": e.sample_id,
        "benchmark": "doccount",
        "model": "m",
        "groups": e.groups,
        "ground_truth": e.ground_truth,
        "status": "ok",
        "parsed_answer": answer,
        "parse_status": "ok" if answer is not None else "no_tag",
        "response_text": None if answer is None else f"<answer>{answer}</answer>",
        "finish_reason": "stop",
        "latency_s": 0.5,
        "attempts": 1,
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105},
        **({"repeat": repeat} if repeat is not None else {}),
        **kw,
    }


def write_run(root: Path, items: list[ManifestEntry], records: list[dict[str, Any]], **config: Any) -> Path:
    root.mkdir(parents=True)
    data = {"selection": {"questions": len(items), "manifest_sha256": manifest_digest(items)}}
    body = {"benchmark": "doccount", "model": "m", "backend": "api", "data": data, **config}
    (root / "run_config.json").write_text(json.dumps(body))
    (root / "manifest.jsonl").write_text("".join(json.dumps(e.to_dict()) + "\n" for e in items))
    (root / "responses.partial.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def plain(root: Path) -> Path:
    es = entries(6)
    records = [
        record(es[0], 1),
        record(
            es[1],
            9,
            usage={
                "prompt_tokens": 90,
                "completion_tokens": 3,
                "total_tokens": 93,
                "reasoning_tokens": 2,
                "cached_tokens": 64,
            },
        ),  # fmt: skip
        record(es[2], None),
        {**record(es[3], None), "status": "request_error", "error": "HTTP 500"},
        record(es[4], 29, inline_think=True, response_text="<think>x</think><answer>29</answer>"),
    ]  # es[5]: missing
    return write_run(root, es, records)


def with_refusals(root: Path) -> Path:
    es = entries(3)
    paced = {"attempt": 1, "error": "HTTP 429", "paced": True, "wait_s": 1.5,
             "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}  # fmt: skip
    records = [record(e, e.ground_truth, retry_errors=[paced]) for e in es]
    sampling = {"temperature": 0.0, "max_tokens": 64}
    return write_run(root, es, records, sampling=sampling, strip_tokens=["<|end_of_box|>"])


def with_repeats(root: Path) -> Path:
    es = entries(4)
    records = [
        record(e, e.ground_truth if (i + r) % 2 else 0, repeat=r) for i, e in enumerate(es) for r in range(3)
    ]
    return write_run(root, es, records, repeats=3)


def empty(root: Path) -> Path:
    return write_run(root, entries(2), [])


@pytest.mark.parametrize("make", [plain, with_refusals, with_repeats, empty])
def test_summary_json_is_what_the_summary_type_declares(make: Any, tmp_path: Path) -> None:
    run = make(tmp_path / "run")
    score_run(run)
    written = json.loads((run / "scores" / "summary.json").read_text())
    assert conforms(written, Summary) == []


def test_the_runs_reach_the_optional_sections(tmp_path: Path) -> None:
    """The folders above write every key Summary declares (so the check above looks at each of them)."""
    seen: set[str] = set()
    usage: set[str] = set()
    for make in (plain, with_refusals, with_repeats, empty):
        run = make(tmp_path / make.__name__)
        score_run(run)
        written = json.loads((run / "scores" / "summary.json").read_text())
        seen |= set(written)
        usage |= set(written["usage"])
    assert seen - {"batch"} == set(get_type_hints(Summary)) - {"batch"}  # batches: tests/test_batch.py
    assert {"reasoning_tokens", "cached_tokens", "failed_attempts"} <= usage


def test_the_check_finds_an_undeclared_key_a_missing_one_and_a_wrong_type(tmp_path: Path) -> None:
    run = plain(tmp_path / "run")
    score_run(run)
    written = json.loads((run / "scores" / "summary.json").read_text())
    written["primary"]["surprise"] = 1
    del written["error_anatomy"]["exact"]
    written["outcomes"]["ok"] = "3"
    found = conforms(written, Summary)
    assert any("primary.surprise: not declared" in f for f in found)
    assert any("error_anatomy.exact: missing" in f for f in found)
    assert any("outcomes['ok']" in f for f in found)
