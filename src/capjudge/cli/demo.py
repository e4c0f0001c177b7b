"""``capjudge demo``: the full pipeline on the bundled example images."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add ``demo`` to an argparse subparsers object."""
    p = sub.add_parser("demo", help="run the full pipeline on the bundled example images")
    p.add_argument("--backend", default=None, help="a real backend to use (default: a tiny random model built offline; its scores are meaningless)")
    p.add_argument("--out-dir", default="out/demo", help="where the demo writes its inputs and results (default out/demo)")
    p.add_argument("--cache-dir", default=None, help="response cache (default: none for the tiny model)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """``capjudge demo``."""
    from capjudge.cli.demo_run import run_demo

    return run_demo(backend=args.backend, out_dir=Path(args.out_dir), cache_dir=args.cache_dir)
