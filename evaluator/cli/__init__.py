"""cli: the command line, the top layer: `doccount <command>` (main), the archive commands (archive) and
the one-line user error (base). Nothing imports it; the console scripts point at the names below.

May import: every other package.
"""

from evaluator.cli.main import entry, evaluate_main, main, score_main

__all__ = ["entry", "evaluate_main", "main", "score_main"]
