"""The package's exceptions have one root, and the errors a user can fix one base: a command ends in one
`error:` line (the message, the key redacted) and its exit code, never a traceback. The command line
catches UserError in one place (cli.main.run_command); a sweep's unit records it as the outcome's cause
(evaluation.ending). Nothing keeps a list of such classes: a class is one by deriving from UserError."""

from __future__ import annotations

from evaluator.core.exitcode import ExitCode


class EvaluatorError(Exception):
    """Every exception the package raises on purpose (a stop, a refusal, a bound reached)."""


class UserError(EvaluatorError):
    """Bad input or settings the user can fix: one `error:` line naming the input and the fix, exit 2."""

    exit_code: ExitCode = ExitCode.USAGE


class NotFinished(UserError):
    """The work could not go on (nothing listening, the endpoint down, the provider's batch API failing):
    one `error:` line, exit 3; what finished is kept and a re-run continues."""

    exit_code = ExitCode.INCOMPLETE
