"""The ``capjudge`` command line (console script ``capjudge = capjudge.cli:main``).

:mod:`~capjudge.cli.app` builds the parser and runs a command (``main``: one ``except`` for
:class:`capjudge.core.errors.CapjudgeError`); :mod:`~capjudge.cli.common` holds what the commands share;
each command group has its module (``score``, ``compare``, ``explain``, ``catalog``, ``demo``,
``metaeval``, ``agree``, ``cache``, ``probe``, ``html``, ``arena``, ``parity``, ``batch``, and
``ray`` for ``score --ray``). Heavy modules are imported inside the commands: ``capjudge --help``
imports no model library.
"""

from __future__ import annotations

from capjudge.cli.app import build_parser, main
from capjudge.cli.common import (
    EXAMPLES_HELP,
    EXIT_CODES_HELP,
    add_image_options,
    hold_out_lock,
    image_options,
    progress_bar,
)
from capjudge.core.errors import EXIT_BACKEND, EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

__all__ = [
    "EXAMPLES_HELP",
    "EXIT_BACKEND",
    "EXIT_CODES_HELP",
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "add_image_options",
    "build_parser",
    "hold_out_lock",
    "image_options",
    "main",
    "progress_bar",
]
