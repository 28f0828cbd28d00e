"""Which tests pytest-xdist keeps on one worker (`make test`: --dist loadgroup; the scheduler is
pytest_xdist_make_scheduler in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

# Modules whose tests share one costly module- or session-scoped setup (runs evaluated and scored through
# the CLI, a wheel built and installed, a model loaded), each with its group: a group's tests run on one
# worker, so that the setup is made once, not once per worker. Any other test goes to whichever is free.
SHARED_SETUP = {
    "test_archive": "archive",
    "test_compare": "compare",
    "test_demo_data": "demo_data",
    "test_hub": "hub",
    "test_reference_server": "reference_server",
    "test_report": "report",
    "test_report_browser": "report",  # the same two runs (conftest's report_runs)
    "test_report_counts": "report_counts",
    "test_scoring": "scoring",
    "test_sweep_readme": "sweep_readme",
    "test_trust_archive": "trust_archive",
    "test_wheel": "wheel",
}


def shared_setup_scope(nodeid: str) -> str:
    """The work unit a test belongs to: its module's group, or the test alone."""
    group = SHARED_SETUP.get(Path(nodeid.split("::", 1)[0]).stem)
    return f"group:{group}" if group else nodeid
