"""``capjudge cache stats|clear [--cache-dir D]``: the response cache (:mod:`capjudge.backends.cache`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from capjudge.cli.aliases import add_format
from capjudge.cli.terminal import visible


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def cmd_stats(args: argparse.Namespace) -> int:
    """``capjudge cache stats``."""
    from capjudge.backends.cache import ResponseCache, default_cache_dir

    directory = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    if not directory.exists():
        print(visible(f"cache {directory}: empty (no directory)"))
        return 0
    stats = ResponseCache(directory).stats()
    if args.format == "json":
        import json

        print(json.dumps(stats))
    else:
        print(visible(f"cache {stats['directory']}: {stats['entries']} entries, {_human(stats['size_bytes'])} on disk"))
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    """``capjudge cache clear``."""
    from capjudge.backends.cache import ResponseCache, default_cache_dir

    directory = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    if not directory.exists():
        print(visible(f"cache {directory}: nothing to clear"))
        return 0
    removed = ResponseCache(directory).clear()
    print(visible(f"cache {directory}: removed {removed} entries"))
    return 0


def register(subparsers: Any) -> None:
    """Add ``capjudge cache stats|clear [--cache-dir D]`` to an argparse subparsers object."""
    parser = subparsers.add_parser("cache", help="inspect or clear the response cache")
    sub = parser.add_subparsers(dest="cache_command", required=True)
    for name, func, help_text in (
        ("stats", cmd_stats, "entries and size of the cache"),
        ("clear", cmd_clear, "remove every cached answer"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--cache-dir", default=None, help="cache directory (default: $CAPJUDGE_CACHE_DIR or ~/.cache/capjudge)")
        if name == "stats":
            add_format(p, help="table (default) or json: the statistics as one JSON object", json_alias=True)
        p.set_defaults(func=func)
