"""evaluation: one evaluation end to end, `evaluate(options)`: options (the typed evaluate options and
their parsing from command words), evaluate (plan, run folder, provenance), runner and loop (sending the
questions), check (one-row endpoint check).

May import: core, data, request, runfolder, scoring, report.
"""
