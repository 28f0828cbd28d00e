"""The worker loop of `evaluate`: one reader feeding a short queue, N workers, and the run's stop rules
(request.breaker, and a refusal no wait fixes). The rows finished so far are on disk; a re-run resumes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from evaluator.core.errors import EvaluatorError
from evaluator.core.records import Key, ResponseRecord
from evaluator.data.benchmarks.base import Sample

Unit = tuple[Sample, int]  # a sample and the repeat index to send it as


class RunStopped(EvaluatorError):
    """A refusal that no wait fixes (quota, billing, a request above the per-minute budget)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"stopped: {reason}. Finished rows are saved; re-run the same command to resume once that is fixed"
        )


class Gatekeeper(Protocol):
    stopping: bool  # final: no new request is sent (the spend guard, the reasoning smoke check)

    async def admit(self) -> None: ...
    def release(self) -> None: ...
    def outcome(self, record: ResponseRecord) -> None: ...


@dataclass
class RowLoop:
    """Runs `evaluate` over the wanted units with `workers` in flight; `sink` writes and counts each record."""

    evaluate: Callable[[Sample, int], Awaitable[ResponseRecord]]
    sink: Callable[[ResponseRecord], Awaitable[None]]
    stop_reason: Callable[[], str | None]
    workers: int
    breaker: Gatekeeper
    read_ahead: int = 8

    async def run(self, samples: Callable[[], Iterator[Sample]], wanted: dict[str, list[int]]) -> None:
        # A short read-ahead keeps every worker busy; a long one would hold images for nothing.
        queue: asyncio.Queue[Unit | None] = asyncio.Queue(maxsize=min(self.read_ahead, self.workers))
        producer = asyncio.create_task(self._produce(samples, wanted, queue))
        tasks = [asyncio.create_task(self._work(queue)) for _ in range(self.workers)]
        try:
            await asyncio.gather(producer, *tasks)
        finally:
            for t in [producer, *tasks]:
                t.cancel()
            await asyncio.gather(producer, *tasks, return_exceptions=True)

    async def _produce(
        self, samples: Callable[[], Iterator[Sample]], wanted: dict[str, list[int]], queue: asyncio.Queue
    ) -> None:
        it = samples()
        remaining = set(wanted)
        while remaining:
            sample = await asyncio.to_thread(next, it, None)
            if sample is None:
                break
            if sample.sample_id in remaining:
                remaining.discard(sample.sample_id)
                for r in wanted[sample.sample_id]:
                    await queue.put((sample, r))
                del sample  # the queue holds it until its last repeat is taken
        for _ in range(self.workers):
            await queue.put(None)

    async def _work(self, queue: asyncio.Queue[Unit | None]) -> None:
        while True:
            await self.breaker.admit()
            try:
                # the sample is never bound here, so its image is freed once its request body exists
                record = await self.evaluate(*(await _next_unit(queue, self.breaker)))
            except StopAsyncIteration:
                self.breaker.release()
                return
            reason = self.stop_reason()
            if reason is not None and record.status == "request_error" and not record.attempts:
                raise RunStopped(reason)  # never sent: not recorded, a resume sends it
            await self.sink(record)
            if reason is not None:
                raise RunStopped(reason)
            self.breaker.outcome(record)


def still_to_do(units: Iterable[Key], skip: Container[Key]) -> dict[str, list[int]]:
    """Sample id -> its repeats not in `skip`, in the units' order."""
    wanted: dict[str, list[int]] = {}
    for sid, r in units:
        if (sid, r) not in skip:
            wanted.setdefault(sid, []).append(r)
    return wanted


async def _next_unit(queue: asyncio.Queue[Unit | None], breaker: Gatekeeper) -> Unit:
    item = await queue.get()
    # admitted before the run began to stop, taken after: not sent (not recorded; a resume sends it)
    if item is None or breaker.stopping:
        raise StopAsyncIteration
    return item
