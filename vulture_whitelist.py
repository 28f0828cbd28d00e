"""Names vulture (`make lint`, confidence 60) cannot see being used: each one is read by a library, by its
name, outside our code. Nothing else belongs here: code no one calls is deleted, not listed."""

# ruff: noqa: F821, B018 - vulture's whitelist form: bare attribute uses on a placeholder `_`

# tarfile writes these TarInfo fields into each member's header (archive/pack.py, deterministic bytes).
_.mtime
_.uid
_.gid
_.gname

# click calls Command.format_options by name to render --help (cli/base.py GroupedCommand).
_.format_options

# click reads Command.short_help for a group's command list in --help (cli/main.py SHORT_HELP).
_.short_help

# The io text-stream protocol (writelines) and the warnings module's hook (showwarning): cli/guard.py.
_.writelines
_.showwarning

# msgspec encodes and decodes Struct fields by name: fields written to records, run_config.json, the batch
# ledger and sweep files that no Python code reads back (people and other tools do).
_.schema_version  # core/records.py ResponseRecord, runfolder/runconfig.py RunConfig
_.retry_after_s  # core/records.py RetryError
_.fallback_answer  # core/records.py ResponseRecord
_.inline_think  # core/records.py ResponseRecord
_.protocol_anomalies  # core/records.py ResponseRecord
_.input_bytes  # runfolder/batches.py BatchEntry
_.request_counts  # runfolder/batches.py BatchEntry (set by evaluation/batch.py)
_.resend  # runfolder/batches.py BatchEntry
_.memory_total  # runfolder/serving.py Gpu
_.driver_version  # runfolder/serving.py Gpu
_.cached_input  # study/sweep_file.py Price (read as a dict by scoring.leaderboard)
_.batch_input  # study/sweep_file.py Price
_.batch_output  # study/sweep_file.py Price
_.account  # study/serve_file.py ServeTable's Slurm settings (read by name: ServeTable.slurm)
_.qos
_.constraint
_.reservation
_.gpus_per_node
_.cpus_per_gpu
_.mem_per_gpu

# The Jinja2 templates read these by name (report/templates/*.html).
_.is_filter  # report/pieces.py Select
_.repeats_note  # report/pieces.py run-page question row
_.verdict_label  # report/pieces.py compare-page question row

# A child process runs it by name (scoring/plot_worker.py _CHILD).
_.child_main
