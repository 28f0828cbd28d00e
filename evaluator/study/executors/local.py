"""The local executor: units run as threads of the sweep process, servers on a GPU pool of this host.

The pool is `[serve] gpus` (default: every GPU `nvidia-smi -L` lists). Greedy first-fit in file order
with backfill: whenever a unit ends, every queued run that fits the free GPUs (and `--parallel`) starts
on the lowest free ids, so later, smaller runs may pass one that waits; overlapping servers never share
a GPU. A run asking more GPUs than the pool has is refused by `check`.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from evaluator.core.vocab import ExecutorName
from evaluator.runfolder.handoff import RunState
from evaluator.study.executors.base import ExecutorError, PlanRow, Poll, StatusRow, recorded_status
from evaluator.study.launch import plan_argv
from evaluator.study.unit import UnitResult, UnitStatus, UnitTask, serve_and_evaluate

Runner = Callable[..., UnitResult]
DEFAULT_PARALLEL = 4


def detect_gpus() -> list[str]:
    """The GPU ids `nvidia-smi -L` lists ("GPU 0: ..."), or none when there is no nvidia-smi."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(":")[0].split()[1] for line in out.splitlines() if line.startswith("GPU ")]


def first_fit(needs: Sequence[int], free: Sequence[str], slots: int) -> list[tuple[int, list[str]]]:
    """Which queued runs start now (queue index, GPU ids), walking the queue in order. Pure."""
    left, out = list(free), list[tuple[int, list[str]]]()
    for i, need in enumerate(needs):
        if len(out) >= slots:
            break
        if need <= len(left):
            out.append((i, left[:need]))
            left = left[need:]
    return out


def simulate(
    needs: Sequence[int], pool: Sequence[str], slots: int, durations: Sequence[float] | None = None
) -> list[tuple[int, float, float, list[str]]]:
    """The packing as it would unfold: [(run index, start, end, gpu ids)] in start order. Equal run times
    when none are given (what --plan assumes). Pure."""
    durations = list(durations or [1.0] * len(needs))
    queue, free, now = list(range(len(needs))), sorted(pool, key=_gpu_key), 0.0
    running: list[tuple[float, int, list[str]]] = []  # (end, run index, gpu ids)
    out: list[tuple[int, float, float, list[str]]] = []
    while queue or running:
        for qi, gpus in first_fit([needs[i] for i in queue], free, slots - len(running)):
            i = queue[qi]
            running.append((now + durations[i], i, gpus))
            out.append((i, now, now + durations[i], gpus))
        taken = {g for _, _, gs in running for g in gs}
        queue = [i for i in queue if i not in {r[1] for r in running}]
        free = [g for g in sorted(pool, key=_gpu_key) if g not in taken]
        if not running:
            break  # what is left can never fit (check refuses it first)
        running.sort()
        end, _, gpus = running.pop(0)
        now = end
        free = sorted([*free, *gpus], key=_gpu_key)
    return out


def _gpu_key(g: str) -> tuple[int, str]:
    return (int(g), g) if g.isdigit() else (1 << 30, g)


class LocalHandle:
    """A unit of this process: its latest status, its stop event, its GPUs while it runs."""

    job_id: str | None = None

    def __init__(self, task: UnitTask, executor: LocalExecutor) -> None:
        self.task, self.executor = task, executor
        self.status: UnitStatus | None = None
        self.stop = threading.Event()
        self.gpus: list[str] = []
        self.thread: threading.Thread | None = None

    def poll(self) -> Poll | None:
        """None while it waits for GPUs or a slot; then what the unit reports (no queue word here)."""
        status = self.status
        return Poll(unit=status) if status is not None else None

    def cancel(self) -> None:
        self.executor.cancel(self)

    def report(self, status: UnitStatus) -> None:
        self.status = status


class LocalExecutor:
    name: ExecutorName = "local"
    can_detach = False  # its units are threads of the sweep: they end with it

    def __init__(
        self, gpus: Sequence[str], parallel: int, env: Mapping[str, str], run: Runner = serve_and_evaluate
    ) -> None:
        self.pool = sorted((str(g) for g in gpus), key=_gpu_key)
        self.free = list(self.pool)
        # parallel 0 (no --parallel): 4 runs at once, or one per GPU of a larger pool
        self.parallel = parallel if parallel > 0 else max(DEFAULT_PARALLEL, len(self.pool))
        self.env, self.run = dict(env), run
        self.queue: list[LocalHandle] = []
        self.running: list[LocalHandle] = []
        self.lock = threading.Lock()

    def check(self, tasks: Sequence[UnitTask]) -> None:
        for t in tasks:
            if t.gpus > len(self.pool):
                have = (
                    f"{len(self.pool)} ({', '.join(self.pool)})"
                    if self.pool
                    else "none (nvidia-smi lists none)"
                )
                raise ExecutorError(
                    f"run {t.run} asks for {t.gpus} GPU(s); the pool ([serve] gpus) has {have}: lower its "
                    "serve.gpus, add GPUs to [serve] gpus, or leave the run out with --only"
                )

    def plan_header(self) -> list[str]:
        pool = f"{','.join(self.pool)} ({len(self.pool)} GPUs)" if self.pool else "none (endpoint runs only)"
        return [
            f"executor local; GPU pool {pool}; --parallel {self.parallel} (runs at once)",
            "start order: the file's order, each server on the lowest free GPUs once enough are free, "
            "assuming every run takes the same time (real runs differ, so later starts can come in "
            "another order)",
        ]

    def plan(self, tasks: Sequence[UnitTask]) -> list[PlanRow]:
        steps = simulate([t.gpus for t in tasks], self.pool, self.parallel)
        ends = {i: (start, end, gpus) for i, start, end, gpus in steps}
        order = {i: n for n, (i, *_rest) in enumerate(s for s in steps if tasks[s[0]].server is not None)}
        rows = []
        for i, t in enumerate(tasks):
            start, _, gpus = ends.get(i, (0.0, 0.0, []))
            # the runs whose end frees the GPUs it starts on (a run without GPUs waits for a slot)
            after = [tasks[j].run for j, (_s, e, g) in ends.items() if e == start and set(g) & set(gpus)]
            slot = start > 0 and not after
            rows.append(PlanRow(run=t.run, where=_url(t) if t.server is None else "", gpus=gpus,
                                order=order[i] + 1 if i in order else None, after=after if start > 0 else [],
                                slot=slot, command=plan_argv(t.server, t.run, gpus) if t.server else []))  # fmt: skip
        return rows

    def submit(self, task: UnitTask) -> LocalHandle:
        handle = LocalHandle(task, self)
        with self.lock:
            self.queue.append(handle)
            self._start_what_fits()
        return handle

    def cancel(self, handle: LocalHandle) -> None:
        with self.lock:
            if handle in self.queue:
                self.queue.remove(handle)
                handle.status = UnitStatus(phase="finished", result=UnitResult(state="not-started"))
        handle.stop.set()

    def close(self) -> None:
        with self.lock:
            handles = list(self.queue) + list(self.running)
        for h in handles:
            h.cancel()
        for h in handles:
            if h.thread is not None:
                h.thread.join()

    def status(self, runs: Sequence[str], states: Mapping[str, RunState], folder: Path) -> list[StatusRow]:
        """What sweep.json recorded: a local unit lives only as long as the sweep that ran it."""
        return [recorded_status(run, states.get(run)) for run in runs]

    def _start_what_fits(self) -> None:
        """Under the lock: first-fit over the queue in file order, backfilling what fits."""
        starts = first_fit([h.task.gpus for h in self.queue], self.free, self.parallel - len(self.running))
        chosen = [(self.queue[i], gpus) for i, gpus in starts]
        for handle, gpus in chosen:
            self.queue.remove(handle)
            self.free = [g for g in self.free if g not in gpus]
            handle.gpus = gpus
            handle.status = UnitStatus(phase="starting", detail=f"GPUs {','.join(gpus)}" if gpus else "")
            self.running.append(handle)
            handle.thread = threading.Thread(
                target=self._unit, args=(handle,), name=f"unit-{handle.task.run}"
            )
            handle.thread.start()

    def _unit(self, handle: LocalHandle) -> None:
        env = {**self.env, "CUDA_VISIBLE_DEVICES": ",".join(handle.gpus)}
        try:
            result = self.run(handle.task, env=env, report=handle.report, stop=handle.stop)
        except Exception as exc:  # noqa: BLE001 - a unit's bug ends that run, never the sweep
            result = UnitResult(state="error", message=f"error: {type(exc).__name__}: {exc}")
        with self.lock:
            self.running.remove(handle)
            self.free = sorted([*self.free, *handle.gpus], key=_gpu_key)
            handle.status = UnitStatus(phase="finished", result=result)
            if not handle.stop.is_set():
                self._start_what_fits()


def _url(task: UnitTask) -> str:
    args = task.evaluate_args
    return args[args.index("--base-url") + 1] if "--base-url" in args else "(backend vllm default)"
