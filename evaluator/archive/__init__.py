"""Pack a scored run into one reproducible .tar.gz, verify such an archive offline, and plan its re-run.

Every entry sits under one top folder ``<run name>.archive/``: ARCHIVE.json (the index), REPRODUCE.md,
SHA256SUMS, dataset.json, environment.json, the bundle files, prompts/ and runs/<run name>/ (the run
folder's files, so `doccount score` works inside the extracted folder). The bytes are deterministic;
docs/archive.md gives the layout and the checks.

May import: core, data, request, runfolder, scoring, report, evaluation, study.
"""

# the package's face: what the cli and the tests take from `evaluator.archive`
from evaluator.archive.base import ArchiveError  # noqa: F401
from evaluator.archive.pack import create_archive  # noqa: F401
from evaluator.archive.read import read_archive  # noqa: F401
from evaluator.archive.reproduce import reproduce  # noqa: F401
from evaluator.archive.verify import verify_archive  # noqa: F401
