"""``capjudge tiny list|build``, and the ``hf:tiny-*`` backend names of every command.

Every command that takes a backend spec (``--backend``, several for a panel; parity's ``--a`` /
``--b``; ``demo --backend``; a ``--panel FILE`` entry's ``backend``) accepts ``hf:tiny-llava``, ``hf:tiny-thinking``, ... : the tiny
random-weight test models of :mod:`capjudge.testing.tiny_models`, built offline on first use.
:func:`resolve_tiny_backends` rewrites them to their folders before the command runs; nothing is
imported unless a spec names one (the parser stays fast).
"""

from __future__ import annotations

import argparse
from typing import Any

from capjudge.core.errors import EXIT_OK, UsageError

# The attributes of a parsed command line that hold backend specs.
SPEC_ATTRS = ("backend", "a", "b")


def register(sub: Any) -> None:
    """Add ``tiny list`` and ``tiny build`` to an argparse subparsers object."""
    p = sub.add_parser("tiny", help="tiny random-weight test models (hf:tiny-llava, hf:tiny-thinking, ...): list, build; their scores are meaningless")
    q = p.add_subparsers(dest="tiny_command", required=True)
    ls = q.add_parser("list", help="the tiny models, where each is built, and whether it is")
    ls.set_defaults(func=cmd_list)
    b = q.add_parser("build", help="build a tiny model (offline, seconds) and print its folder; hf:NAME builds it on first use too")
    b.add_argument("name", metavar="NAME", help="a name of `capjudge tiny list`, e.g. tiny-llava")
    b.add_argument("--dir", default=None, metavar="DIR", help="build into DIR (then use hf:DIR) instead of the cache folder")
    b.set_defaults(func=cmd_build)


def cmd_list(args: argparse.Namespace) -> int:
    """``capjudge tiny list``."""
    from capjudge.testing.tiny_models import TINY_MODELS, is_built, tiny_path

    for name, model in TINY_MODELS.items():
        path = tiny_path(name)
        print(f"hf:{name:<22} {model.title}\n    {path} ({'built' if is_built(path) else 'built on first use'})")
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    """``capjudge tiny build NAME [--dir DIR]``: prints the folder (stdout), for ``hf:FOLDER``."""
    from capjudge.testing.tiny_models import UnknownTinyModelError, ensure_tiny

    try:
        folder = ensure_tiny(args.name, args.dir)
    except UnknownTinyModelError as exc:
        raise UsageError(str(exc)) from None
    print(folder)
    return EXIT_OK


def resolve_tiny(spec: str, where: str = "--backend") -> str:
    """One spec: an ``hf:tiny-*`` one as its model's folder (built if need be), any other unchanged;
    an unknown ``tiny-*`` name is a usage error naming ``where`` and the known names."""
    if not spec.startswith("hf:tiny-"):
        return spec
    from capjudge.testing.tiny_models import UnknownTinyModelError, resolve_spec

    try:
        return resolve_spec(spec)
    except UnknownTinyModelError as exc:
        raise UsageError(f"{where}: {exc}") from None


def resolve_tiny_backends(args: argparse.Namespace) -> None:
    """Replace each ``hf:tiny-*`` spec of ``args`` by the folder of its model, built if need be
    (an unknown ``tiny-*`` name is a usage error listing the known ones)."""
    for attr in SPEC_ATTRS:
        value = getattr(args, attr, None)
        if isinstance(value, str):
            setattr(args, attr, resolve_tiny(value, "--backend" if attr == "backend" else f"--{attr}"))
    if getattr(args, "backends", None):  # a panel: args.backend is its first spec, resolved above
        args.backends = [args.backend if k == 0 else resolve_tiny(s, f"--backend {k + 1}") for k, s in enumerate(args.backends)]
