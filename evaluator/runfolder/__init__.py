"""runfolder: the run folder on disk. Its files, lock and record writer (files), run_config.json
(runconfig), the record built from a sent request (record_builder), which records count (selection),
the question set and its changes (question_set), manifest.jsonl (manifest) and provenance.

May import: core, data, request.
"""
