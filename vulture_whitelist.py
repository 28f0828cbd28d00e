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

# The io text-stream protocol (writelines) and the warnings module's hook (showwarning): cli/base.py.
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

# TypedDict keys of summary.json, leaderboard.json and compare.json (scoring/board.py, scoring/summary_shape.py,
# core/usage.py, data/reasoning.py, request/ratelimit.py, runfolder/batches.py, report/leaderboard_page.py), of
# run_config.json (runfolder/runconfig.py), of the chat messages (data/benchmarks/base.py) and of the pages'
# values (report/leaderboard_page.py, scoring/identity.py): written to JSON or read by the templates by name,
# and read in Python as string keys (e["accuracy"]), which vulture does not see.
_.accuracy
_.accuracy_a
_.accuracy_b
_.agreement
_.always_right
_.answered_after_timeout
_.attempts_with_usage
_.axis_y
_.batch_default
_.batch_ids
_.bootstrap_resamples
_.bootstrap_seed
_.ci95
_.class_size_mismatches
_.class_sizes_match
_.classes_differ
_.comparable
_.compared
_.complete
_.completed_at
_.correct_only_with_fallback
_.correct_only_with_primary_parser
_.cost_usd
_.count_buckets
_.counts_over
_.dataset_questions
_.diagnostic
_.difference
_.difference_ci95
_.differences
_.evaluator_version
_.exact_rate
_.finish_reasons
_.full_manifest_sha256
_.has_published
_.http_attempts
_.inline_think_responses
_.labels_sha256
_.last_attempt_timed_out
_.leaderboard
_.majority_vote
_.manifest_sha256
_.manifest_verified
_.mcnemar_exact_p
_.mean_absolute_error
_.mean_accuracy
_.mean_signed_error
_.median_absolute_error
_.metric
_.mismatches
_.multi_valued
_.never_right
_.observed_share
_.off_by_one
_.off_by_one_rate
_.over_count
_.over_count_rate
_.p_holm
_.p_test
_.p_value
_.partial_bad_lines
_.partial_torn_tail
_.percentile_points
_.percentiles
_.primary_metric
_.provider
_.ptext
_.question_set_sha256
_.rate_limits
_.reasoning_note
_.records_malformed
_.records_valid
_.reproduced
_.reproduced_accuracy
_.reproduced_correct
_.reproduced_questions
_.reproduced_reasoning
_.requested_revision
_.responses_from_batches
_.right_count_histogram
_.role
_.rows_retried
_.sample_ids_outside
_.selection_manifest_sha256
_.short
_.size_matches
_.sometimes_right
_.std_accuracy
_.timeouts
_.token_definition
_.under_count
_.under_count_rate
_.verdict_class
_.verdict_note
_.waited_s
_.without_response

# The benchmark classes: evaluator/data/benchmarks/__init__.py finds them by module (Benchmark subclasses).
DocCount
CountQA

# EvaluateOptions fields read by their option's name: evaluation/options.py recorded_settings (getattr over
# the options declared Recorded) writes them into run_config.json, from which the runner reads them.
_.retry_backoff
_.retry_max_wait
_.rate_limit_patience
_.no_smoke_check
