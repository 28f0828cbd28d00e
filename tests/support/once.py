"""A session fixture's work done once per test session, whatever the number of pytest-xdist workers.

Under `--dist loadfile` a session fixture is built once per worker that needs it: the demo (about 40 s of
CPU) was built by every worker that ran test_readme or test_demo_pipeline. Here the first worker to ask
builds it under a file lock in the session's own folder (the workers' common parent) and pickles the result;
the others wait on the lock and read it. For results the tests only read."""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """build(folder) for the whole session; every worker gets the same (unpickled) result."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-N/: the session's folder, above each worker's popen-gwK/
    done = root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder = root / name
            shutil.rmtree(folder, ignore_errors=True)  # what a worker that raised while building left
            folder.mkdir()
            done.write_bytes(pickle.dumps(build(folder)))
        return pickle.loads(done.read_bytes())
