"""One name per concept on the command line, and the old names kept for one release.

The canonical names (docs/cli.md, "Option names"): ``--input FILE`` for the rows a command judges,
``--images DIR`` for the folder image paths are read against (thumbnails included),
``--format table|json`` (``markdown`` too where a report is Markdown) for what is printed,
``--out FILE`` for a results JSONL, ``--html FILE`` for an HTML report (``capjudge html -o`` is
its short form), ``--out-json`` / ``--markdown`` / ``--plot FILE`` for the other report files.

An old name (``probe --captions``, ``--json``, ``--html-images``, ``html --out``) is added with
:func:`add_alias`: it stores into the canonical option's destination, is hidden from ``--help``,
and says once on stderr which name replaces it. Only the standard library is imported here
(building the parser must stay fast).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

# Each alias used in this process, so that the note is printed once per name.
_NOTED: set[str] = set()


def deprecation_note(old: str, new: str) -> str:
    """The note printed when ``old`` is used."""
    return f"capjudge: note: {old} is deprecated, use {new} (the old name works until the next release)"


class _AliasAction(argparse.Action):
    """Store like the canonical option (a value, or ``const`` when the alias takes none) and note the rename."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, canonical: str, **kwargs: Any) -> None:
        self.canonical = canonical
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        name = option_string or self.option_strings[0]
        if name not in _NOTED:
            _NOTED.add(name)
            print(deprecation_note(name, self.canonical), file=sys.stderr)


def add_alias(container: Any, old: str, canonical: str, *, dest: str, const: Any = None, **kwargs: Any) -> argparse.Action:
    """Add ``old`` as a hidden alias of ``canonical`` to a parser or argument group.

    ``dest`` is the canonical option's destination. With ``const`` the alias takes no value and
    stores ``const`` (``--json`` for ``--format json``); otherwise it takes one value like the
    canonical option (``type`` and ``metavar`` may be passed on). Put a required option and its
    alias in a required mutually exclusive group: argparse then asks for the canonical name only.
    """
    if const is not None:
        kwargs.update(nargs=0, const=const)
    action: argparse.Action = container.add_argument(old, dest=dest, action=_AliasAction, canonical=canonical, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)
    return action


def add_format(p: argparse.ArgumentParser, choices: Sequence[str] = ("table", "json"), *, help: str, json_alias: bool = False) -> None:
    """Add ``--format`` (default: the first choice) and, where the command had one, the hidden ``--json`` alias."""
    p.add_argument("--format", choices=tuple(choices), default=choices[0], help=help)
    if json_alias:
        add_alias(p, "--json", "--format json", dest="format", const="json")
