"""The command line's usage error, in a module of its own.

Subcommand modules (``probe``, ``html``, ...) raise it; keeping it out of :mod:`capjudge.cli` means
one class whatever way the command line was started (``python -m capjudge.cli`` runs ``cli.py`` as
``__main__`` and a second import of ``capjudge.cli`` would define a second, different class).
"""

from __future__ import annotations


class UsageError(Exception):
    """A problem with the command line itself (printed without a traceback, exit code 2)."""
