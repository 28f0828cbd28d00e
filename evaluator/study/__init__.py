"""study: many evaluations, a sweep, in the order of its flow: the sweep file and its checks (`sweep_file`,
`serve_file` for [serve] and a run's `serve`, `secrets`), the sweep's state on disk (sweep.json: `runfolder.sweep_state`),
the orchestrator (`sweep`: one unit per run on an executor, then the leaderboard) and its display
(`progress`); the serve-and-evaluate unit (`unit`), one model server (`server`), the launchers' argv and
ports (`launch`), the server guard (`guard`); where units run (`executors`: `base` is the interface,
`local` the GPU pool of this host).

May import: core, data, request, runfolder, scoring, report, evaluation.
"""
