"""The benchmarks: each module of this package that defines a `Benchmark` subclass with a `name` is one.
Adding a benchmark is that module plus its prompt file (prompts/); nothing else names it."""

from __future__ import annotations

import importlib
import pkgutil

from evaluator.data.benchmarks.base import Benchmark

DEFAULT_BENCHMARK = "doccount"


def _discover() -> dict[str, type[Benchmark]]:
    found: dict[str, type[Benchmark]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Benchmark) and "name" in vars(value):
                found[value.name] = value
    return dict(sorted(found.items()))


REGISTRY: dict[str, type[Benchmark]] = _discover()


def get_benchmark(name: str) -> Benchmark:
    try:
        return REGISTRY[name]()
    except KeyError:
        raise ValueError(
            f"unknown benchmark {name!r}; choose one of: {', '.join(sorted(REGISTRY))}"
        ) from None


def title_of(name: str) -> str:
    """A benchmark's title, or its name as it was recorded when this version does not know it."""
    known = REGISTRY.get(name)
    return known.title if known else name


__all__ = ["DEFAULT_BENCHMARK", "REGISTRY", "Benchmark", "get_benchmark", "title_of"]
