"""study: many evaluations, a sweep: the sweep file and its checks (`sweep_file`, `serve_file`, `secrets`,
`plan_checks`), the orchestrator (`sweep`) and its display (`progress`, `plan_text`, `rehearsal`); the
serve-and-evaluate unit (`unit`), one model server (`server`, `launch`, `guard`); where units run
(`executors`).

May import: core, data, request, runfolder, scoring, report, evaluation.
"""
