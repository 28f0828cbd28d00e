"""Benchmark registry: adding a benchmark is one module here plus its prompt file."""

from __future__ import annotations

from evaluator.data.benchmarks.base import Benchmark, ManifestEntry, Sample
from evaluator.data.benchmarks.countqa import CountQA
from evaluator.data.benchmarks.doccount import DocCount

REGISTRY: dict[str, type[Benchmark]] = {"doccount": DocCount, "countqa": CountQA}


def get_benchmark(name: str) -> Benchmark:
    try:
        return REGISTRY[name]()
    except KeyError:
        raise ValueError(
            f"unknown benchmark {name!r}; choose one of: {', '.join(sorted(REGISTRY))}"
        ) from None


__all__ = ["REGISTRY", "Benchmark", "ManifestEntry", "Sample", "get_benchmark"]
