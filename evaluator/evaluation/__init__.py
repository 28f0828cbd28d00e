"""evaluation: one evaluation end to end, `evaluate(options)`: options (the typed evaluate options and
their parsing from command words), evaluate (plan, run folder, provenance), runner and loop (sending the
questions), check (one-row endpoint check); and a sweep of many evaluations: sweep_file and
sweep_secrets (the TOML file, checked), sweep and sweep_progress (one evaluate child per run).

May import: core, data, request, runfolder, scoring, report.
"""
