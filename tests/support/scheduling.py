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
    "test_demo_pipeline": "demo",  # one `doccount demo` (conftest's demo_run), read by both
    "test_hub": "hub",
    "test_readme": "demo",
    "test_reference_server": "reference_server",
    "test_report": "report",
    "test_report_browser": "report",  # the same two runs (conftest's report_runs)
    "test_report_counts": "report_counts",
    "test_scoring": "scoring",
    "test_sweep_readme": "sweep_readme",
    "test_trust_archive": "trust_archive",
    "test_wheel": "wheel",
}


# The longest tests and groups (seconds of CPU each: many CLI processes, a demo, hundreds of hypothesis examples),
# longest first: they are handed out before everything else, so that none of them starts last and leaves
# the other workers idle at the end of `make test`. A name here that no longer matches costs nothing.
LONG_FIRST = (
    "test_adversarial.py::test_a_hostile_server_cannot_get_the_key_into_anything",
    "test_perf_paths.py::test_scoring_fast_paths_agree_with_the_plain_code",
    "test_hub.py::",  # one group (SHARED_SETUP) of about ten tests of seconds each
    "test_readme.py::test_the_demo_prints_what_the_readme_quotes",
    "test_sweep.py::test_four_providers_at_once_own_keys_a_spent_quota_then_resume",
    "test_hub_model.py::test_a_run_records_the_commit_of_the_weights_that_served_it",
    "test_countqa_pipeline.py::test_countqa_evaluate_score_compare_archive",
    "test_sweep.py::test_a_run_added_a_repeat_added_and_changed_settings",
    "test_adversarial.py::test_every_field_explicitly_carries_the_key_and_nothing_leaks",
    "test_reliability_crash.py::test_sigkill_repeatedly_then_resume",
    "test_protocol.py::test_reserved_extra_body_keys_are_refused",
    "test_sweep.py::test_children_stop_when_the_sweep_alone_is_killed",
    "test_serve_sweep.py::test_nine_runs_pack_onto_four_gpus_without_sharing_one",
    "test_batch.py::test_archive_of_a_batch_run_verifies",
)


def start_order(nodeid: str) -> int:
    """Where a test goes in the order work is handed out: a LONG_FIRST test by its place there, the tests
    of a SHARED_SETUP group next (a group is one long unit of work), then the rest."""
    name = nodeid.rsplit("/", 1)[-1]
    for rank, prefix in enumerate(LONG_FIRST):
        if name.startswith(prefix):
            return rank
    return len(LONG_FIRST) + (0 if shared_setup_scope(nodeid).startswith("group:") else 1)


def shared_setup_scope(nodeid: str) -> str:
    """The work unit a test belongs to: its module's group, or the test alone."""
    group = SHARED_SETUP.get(Path(nodeid.split("::", 1)[0]).stem)
    return f"group:{group}" if group else nodeid
