"""The ``capjudge`` application: the parser of every command, ``main`` and its error handling.

Commands: score, compare, explain, demo, methods, meta-eval, agree, calibrate, cascade, cache, probe, html, arena, batch, serve, tiny.

Exit codes (:data:`EXIT_CODES_HELP`): 0 the run completed, also with per-sample errors (records in
the results file, counted in the summary); 3 samples failed for backend reasons (server gone,
retries exhausted, budget spent: re-running resumes); 1 the backend could not start; 2 a usage
error, found before any backend is built (paths, columns, backend spec and options: see
:mod:`capjudge.run.preflight`); 4 ``--batch``: batches submitted or in progress
(:mod:`capjudge.cli.batch`); 6 no sample succeeded (every record an error, their most common causes
printed; 3 wins when samples failed for backend reasons); 130 interrupted. Every message, log line and summary passes through
:mod:`capjudge.core.redact`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from capjudge.cli.common import EXAMPLES_HELP, EXIT_CODES_HELP
from capjudge.core.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_USAGE

# The command modules of capjudge.cli, in the order `capjudge --help` lists their commands. Each
# has ``register(subparsers)``; they import only light modules (heavy ones inside the commands).
COMMANDS = ("score", "compare", "explain", "catalog", "demo", "metaeval", "agree", "calibrate", "cascade", "cache", "probe", "html", "arena", "parity", "batch", "serve", "tiny", "capability")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    from capjudge._version import __version__

    parser = argparse.ArgumentParser(
        prog="capjudge",
        description="Turn a vision-language model into a judge of image captions.",
        epilog=EXAMPLES_HELP + "\n\n" + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"capjudge {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    for name in COMMANDS:
        import_module(f"capjudge.cli.{name}").register(sub)
    return parser


def setup_logging(verbose: int) -> Callable[[], None]:
    """Send log records to stderr (warnings; -v info; -vv debug), every one of them scrubbed of
    secrets, whichever library logged it; returns the function that undoes it (``main`` may be
    called in-process, e.g. by tests)."""
    from capjudge.cli.terminal import VisibleFormatter
    from capjudge.core.redact import install_scrubber

    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(VisibleFormatter("%(levelname)s %(name)s: %(message)s"))  # data's control characters escaped
    install_scrubber(handler)
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING - 10 * min(verbose, 2))

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(level)

    return undo


def _error(prefix: str, exc: BaseException | str) -> None:
    from capjudge.cli.terminal import visible
    from capjudge.core.redact import scrub

    # Plain print: error messages hold paths that must not be wrapped; their control characters
    # (a file named "\x1b[2J...") are escaped.
    print(f"capjudge: {prefix}: {visible(scrub(str(exc)))}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``capjudge`` command (exit codes: :data:`EXIT_CODES_HELP`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # batch mode keeps the command
    undo_logging = setup_logging(args.verbose)
    try:
        return run(args)
    finally:
        undo_logging()


def run(args: argparse.Namespace) -> int:
    """Run the command of parsed ``args``: its exit code, or the one of the error that stopped it
    (printed as ``capjudge: LABEL: message``, scrubbed of secrets)."""
    from capjudge.cli.tiny import resolve_tiny_backends
    from capjudge.core.errors import CapjudgeError

    try:
        resolve_tiny_backends(args)  # hf:tiny-llava and the like: built on first use
        with contextlib.ExitStack() as held:  # what a command holds until it returns: the lock on --out
            args.held = held
            return int(args.func(args) or 0)
    except CapjudgeError as exc:
        _error(exc.label, exc)
        return exc.exit_code
    except FileNotFoundError as exc:  # a file named on the command line: a usage error
        _error("error", exc)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("capjudge: interrupted: results written so far are kept; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug: still no secret in the traceback
        import traceback

        from capjudge.core.redact import scrub

        sys.stderr.write(scrub(traceback.format_exc()))
        _error("internal error", f"{type(exc).__name__}: {exc}")
        return EXIT_FAIL
