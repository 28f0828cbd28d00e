"""runfolder: the run folder on disk: files, lock and record writer (files), run_config.json (runconfig),
the record built from a sent request (record_builder), which records count (selection), the question set
(manifest), provenance, serving, the batch ledger (batches), and the sweep-to-evaluate contract with a
sweep's sweep.json (handoff).

May import: core, data, request.
"""
