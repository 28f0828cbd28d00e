"""`python -m evaluator`: the `doccount` command group."""

from evaluator.cli.main import entry

entry()
