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

# the package's face: what the cli and the tests take from `evaluator.archive`
from evaluator.archive.base import ArchiveError  # noqa: F401
from evaluator.archive.pack import create_archive  # noqa: F401
from evaluator.archive.read import read_archive  # noqa: F401
from evaluator.archive.reproduce import reproduce  # noqa: F401
from evaluator.archive.verify import verify_archive  # noqa: F401
