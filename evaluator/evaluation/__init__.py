"""evaluation: one evaluation end to end, `evaluate(options)`: options (the typed evaluate options and
their parsing from command words), evaluate (plan, run folder, provenance), runner and loop (sending the
questions), check (one-row endpoint check), batch mode, and ending (an evaluate child's Outcome for its sweep,
and its stop when the sweep that started it dies). Many evaluations (a sweep) are the `study` package above this one.

May import: core, data, request, runfolder, scoring, report.
"""
