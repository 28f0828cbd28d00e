"""The package's exceptions have one root, and the errors a user can fix one base: a command ends in one
`error:` line (the message, the key redacted) and its exit code, never a traceback. The command line
catches UserError in one place (cli.main.run_command); a sweep's unit records it as the outcome's cause
(evaluation.ending). Nothing keeps a list of such classes: a class is one by deriving from UserError.

The exit codes every command, the sweep and the unit share (the contract's numbers, docs/contract).

An IntEnum: a member is its int everywhere an int goes (sys.exit, JSON through msgspec, comparisons), so
outputs stay the same bytes while the code names what each number means.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    """Done: every selected row recorded, the check passed, the archive verified."""
    NOT_VERIFIED = 1
    """A check did not pass: an archive that does not verify, a dry run's data integrity failure."""
    USAGE = 2
    """Bad input or settings, refused before (or instead of) sending: one `error:` line names the fix."""
    INCOMPLETE = 3
    """Not finished (request errors, an early stop, a spend guard, a server down): a re-run continues."""
    INTERRUPTED = 130
    """Ctrl-C or SIGTERM: what finished is saved; a re-run resumes."""


class EvaluatorError(Exception):
    """Every exception the package raises on purpose (a stop, a refusal, a bound reached)."""


class UserError(EvaluatorError):
    """Bad input or settings the user can fix: one `error:` line naming the input and the fix, exit 2."""

    exit_code: ExitCode = ExitCode.USAGE


class NotFinished(UserError):
    """The work could not go on (nothing listening, the endpoint down, the provider's batch API failing):
    one `error:` line, exit 3; what finished is kept and a re-run continues."""

    exit_code = ExitCode.INCOMPLETE
