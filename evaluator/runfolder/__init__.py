"""runfolder: the run folder on disk. Its files, lock and record writer (files), run_config.json
(runconfig), the record built from a sent request (record_builder), which records count (selection),
the question set and its changes (question_set), manifest.jsonl (manifest), provenance, and a sweep's
sweep.json (sweep_state: written by the sweep, read by the leaderboard and the sweep archive).

May import: core, data, request.
"""
