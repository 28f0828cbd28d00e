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

# TypedDict keys of summary.json, leaderboard.json and compare.json (scoring/board.py, scoring/metrics.py,
# core/usage.py, data/reasoning.py, request/ratelimit.py, report/leaderboard_page.py): written to JSON or
# read by the templates by name, and read in Python as string keys (e["accuracy"]), which vulture does not see.
_.accuracy
_.accuracy_a
_.accuracy_b
_.attempts_with_usage
_.batch_default
_.ci95
_.class_size_mismatches
_.class_sizes_match
_.classes_differ
_.comparable
_.complete
_.correct_only_with_fallback
_.correct_only_with_primary_parser
_.cost_usd
_.difference
_.difference_ci95
_.exact_rate
_.leaderboard
_.mcnemar_exact_p
_.mean_absolute_error
_.mean_signed_error
_.median_absolute_error
_.observed_share
_.off_by_one
_.off_by_one_rate
_.over_count
_.over_count_rate
_.p_holm
_.p_test
_.p_value
_.provider
_.ptext
_.question_set_sha256
_.reasoning_note
_.reproduced_accuracy
_.reproduced_correct
_.reproduced_questions
_.reproduced_reasoning
_.size_matches
_.under_count
_.under_count_rate
_.waited_s
