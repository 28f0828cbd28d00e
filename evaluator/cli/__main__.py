"""`python -m evaluator.cli`: the `doccount` command group."""

from evaluator.cli.main import entry

entry()
