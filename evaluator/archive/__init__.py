"""Pack a scored run into one reproducible .tar.gz, verify such an archive offline, and plan its re-run.

Layout (every path under one top folder ``<run name>.archive/``)::

    ARCHIVE.json          index: format, run name, every entry with its role, files that were missing
    REPRODUCE.md          the exact commands to verify and re-run
    SHA256SUMS            `sha256sum -c` format, over every other entry
    dataset.json          data origin (local pattern or hub dataset + revision), data file SHA-256s,
                          manifest digests and the selected sample ids with image SHA-256s (no images)
    environment.json      versions, packages, git commit, container image ids and file hashes, server info
    Dockerfile.eval  Dockerfile.vllm  compose.yaml  Makefile  requirements.lock   (those that exist)
    prompts/<file>        the prompt files whose hashes run_config.json records
    runs/<run name>/      run_config.json manifest.jsonl responses.partial.jsonl responses.jsonl scores/...

The layout mirrors the repository, so inside the extracted folder `doccount score --run-root runs/<name>`
rewrites the archived scores. Archives are byte-for-byte deterministic: entries sorted, mtime 0,
uid/gid 0, empty user/group names, mode 0644, PAX tar, gzip with mtime 0 and no file name.

May import: core, data, request, runfolder, scoring, report, evaluation, study.
"""

from evaluator.archive.base import (  # noqa: F401  (the package's face)
    DATASET,
    ENVIRONMENT,
    FORMAT,
    FORMAT_VERSION,
    INDEX,
    PROMPTS,
    REPRODUCE,
    RUN_FILES,
    RUNS,
    SUMS,
    TOP_SUFFIX,
    Archive,
    ArchiveError,
    ArchiveInfo,
    Problem,
    VerifyResult,
    default_bundle_root,
    json_bytes,
    secret_hits,
    sha256_hex,
)
from evaluator.archive.opened import OpenedArchive, config_of, parse_archive  # noqa: F401  (the package's face)
from evaluator.archive.pack import create_archive, dataset_record, environment_record, write_tar_gz  # noqa: F401  (the package's face)
from evaluator.archive.plan import data_args_for, evaluate_args, format_command, reproduce_md  # noqa: F401
from evaluator.archive.reproduce import (  # noqa: F401  (the package's face)
    check_reproduction_data,
    render_comparison,
    reproduce,
    reproduction_check,
)
from evaluator.archive.verify import extract_prompts, parse_sums, read_archive, verify_archive  # noqa: F401  (the package's face)
