"""A sweep's evaluate child stops when its sweep dies, even by `kill -9`.

The sweep names its own pid in the child's environment (PARENT_PID_ENV). The child watches it: once
its parent is gone (the child is re-parented), it sends itself SIGTERM, which an evaluation answers as
it answers Ctrl-C (finished rows are already on disk, the run folder is unlocked, a re-run continues).
Without the watch such a child would run on unseen and hold its run folder's lock against the resume.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping

PARENT_PID_ENV = "DOCCOUNT_PARENT_PID"
POLL_S = 0.5


def stop_when_orphaned(env: Mapping[str, str] = os.environ, poll_s: float = POLL_S) -> bool:
    """Start the watch when the environment names a parent; whether it was started."""
    want = env.get(PARENT_PID_ENV, "")
    if not want.isdigit():
        return False

    def watch() -> None:
        while os.getppid() == int(want):
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return True
