"""capjudge's exception tree and exit codes.

Every error capjudge raises for a user to read derives from :class:`CapjudgeError`, and carries the
exit code the command line ends with when it stops a command (``exit_code``) and the word its
message is printed after (``label``). The command line catches :class:`CapjudgeError` once, instead
of a list of types; a new error picks its place in the tree, nothing else changes.

Errors that stop only one sample (an unreadable image, an answer with no score) are caught where
the sample is judged and become that sample's error record: their exit code matters only when a
library user lets one escape.

Classes keep the built-in base they had before the tree (``ValueError``, ``RuntimeError``, ...),
so ``except ValueError`` in a user's code still catches them.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_OK = 0
"""The run completed (samples that failed on their own are error records)."""
EXIT_FAIL = 1
"""The backend could not start, or nothing could be measured."""
EXIT_USAGE = 2
"""A usage error found before any model loads."""
EXIT_BACKEND = 3
"""Samples failed for backend reasons; re-running the same command resumes."""
EXIT_PENDING = 4
"""``--batch``: batches submitted or still in progress."""
EXIT_DIFFER = 5
"""``parity --tolerance``: the two backends differ beyond the tolerance."""
EXIT_ALL_FAILED = 6
"""The run completed but not one sample succeeded: every record is an error (their causes are
printed). Exit 3 takes precedence when a failure is for backend reasons (re-running resumes), and
4 (``--batch``: batches pending) ends a run before any record is tallied."""
EXIT_INTERRUPTED = 130
"""Interrupted; results written so far are kept."""


class CapjudgeError(Exception):
    """The root of capjudge's errors: ``exit_code`` ends a command it stops, after ``label: message``."""

    exit_code: ClassVar[int] = EXIT_FAIL
    label: ClassVar[str] = "error"


class UsageError(CapjudgeError):
    """A problem with the command line or its inputs, found before any model loads (exit 2)."""

    exit_code: ClassVar[int] = EXIT_USAGE


class BackendError(CapjudgeError, RuntimeError):
    """A request failed in the backend (model error, server refusal, prompt too long, ...), or the
    backend could not start (exit 1 where it stops a command).

    ``resumable`` is true for failures that a re-run of the same command may cure (the server is
    gone, retries ran out, the budget was spent), false for failures of the request itself.
    """

    resumable: bool = False

    exit_code: ClassVar[int] = EXIT_FAIL
    label: ClassVar[str] = "backend error"


class SampleFailure(CapjudgeError, ValueError):
    """One sample cannot be judged (its image, its text): it becomes that sample's error record."""
