"""The command line of batch mode: the ``--batch*`` options of ``score`` and ``compare``, the run
around their final pass, and ``capjudge batch status|collect|cancel RESULTS.jsonl`` (what they do
is :mod:`capjudge.backends.openai.batch_control`).

Only the standard library is imported at module level (``capjudge --help`` stays fast). Exit codes
as ``score``, plus :data:`EXIT_SUBMITTED` (4): batches were submitted, or are still in progress;
run the same command again (or ``capjudge batch collect``) to collect them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capjudge.backends.openai.batch_control import SUBMITTED_MESSAGE as SUBMITTED_MESSAGE
from capjudge.cli.aliases import add_format
from capjudge.cli.terminal import visible
from capjudge.core.errors import EXIT_OK, EXIT_PENDING, UsageError

EXIT_SUBMITTED = EXIT_PENDING
"""Batches were submitted, or are still in progress (``capjudge.core.errors.EXIT_PENDING``)."""


def add_batch_options(p: argparse.ArgumentParser) -> None:
    """The ``--batch*`` options of ``score`` and ``compare``."""
    from capjudge.backends.openai.batch import DEFAULT_MAX_BYTES, DEFAULT_MAX_REQUESTS

    g = p.add_argument_group("batch mode (openai, azure, openai-compatible; see docs/batch.md)")
    g.add_argument("--batch", action="store_true", help="send the requests as provider batches (half price, results within 24 h); exits 4 while they run")
    g.add_argument("--wait", action="store_true", help="with --batch: poll until every batch is done instead of exiting 4")
    g.add_argument("--poll-interval", type=float, default=60.0, metavar="SECONDS", help="with --wait: seconds between polls (default 60)")
    g.add_argument("--batch-max-requests", type=int, default=DEFAULT_MAX_REQUESTS, metavar="N", help=f"requests per batch (default {DEFAULT_MAX_REQUESTS}, OpenAI's limit)")
    g.add_argument("--batch-max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="BYTES", help=f"bytes per batch input file (default {DEFAULT_MAX_BYTES}, 200 MB, OpenAI's limit)")
    g.add_argument("--batch-failed", choices=("resubmit", "online"), default="resubmit", help="lines that expired or failed for a transient cause: in a new batch (default) or as online requests")
    g.add_argument("--batch-attempts", type=int, default=3, metavar="N", help="batches a line may expire or fail in before its record is a resumable error (default 3)")
    g.add_argument("--batch-export", default=None, metavar="FILE", help="write the batch JSONL of every request not yet answered to FILE and stop (nothing is submitted)")
    g.add_argument("--batch-import", default=None, metavar="FILE", help="read a batch output JSONL (custom_id -> response) into the cache, then run")


def wants_batch(args: argparse.Namespace) -> bool:
    """Whether any batch option is in use."""
    return bool(getattr(args, "batch", False) or getattr(args, "batch_export", None) or getattr(args, "batch_import", None))


def check_batch_args(args: argparse.Namespace) -> None:
    """Usage errors of the batch options, found before the backend is built."""
    if not wants_batch(args):
        if getattr(args, "wait", False):
            raise UsageError("--wait applies to --batch runs")
        return
    if getattr(args, "ray", None) is not None:
        raise UsageError("--batch, --batch-export and --batch-import run in one process: use them without --ray")
    from capjudge.backends import kinds

    if not kinds.of_spec(args.backend).batch:
        from capjudge.backends.credentials import mask_argv

        raise UsageError(f"batch mode needs an openai:, azure: or openai-compatible: backend, not {mask_argv([args.backend])[0]!r}")
    if args.batch_export and (args.batch or args.batch_import):
        raise UsageError("--batch-export writes the requests and stops: use it without --batch and --batch-import")
    if args.batch_import and not Path(args.batch_import).is_file():
        raise UsageError(f"--batch-import {args.batch_import!r}: no such file")
    if args.batch_max_requests < 1 or args.batch_max_bytes < 1024:
        raise UsageError("--batch-max-requests must be at least 1 and --batch-max-bytes at least 1024")
    if args.batch_attempts < 1:
        raise UsageError("--batch-attempts must be at least 1")
    if args.poll_interval <= 0:
        raise UsageError("--poll-interval must be positive")
    if args.max_cost is not None and args.batch:
        raise UsageError("--max-cost is not available with --batch (a batch is billed when it runs); the summary gives the cost at batch prices")
    opts = " ".join(args.backend_opt or ())
    if "estimate_by_sampling" in opts or "estimate-by-sampling" in opts:
        raise UsageError("estimate_by_sampling is not available with --batch")


def _say(quiet: bool) -> Callable[[str], None]:
    from capjudge.core.redact import scrub

    def say(message: str) -> None:
        if not quiet:
            print(visible(f"capjudge: {scrub(message)}"), file=sys.stderr)

    return say


def session_for(args: argparse.Namespace, judge: Any, fields: dict[str, Any], backend_options: dict[str, Any]) -> Any:
    """The :class:`~capjudge.backends.openai.batch_run.BatchSession` of a run, or ``None``. An
    online run of an ``--out`` whose batches are pending is refused: it would ask them again."""
    from capjudge.backends.openai.batch import BatchLimits, BatchStateError, state_paths

    if not wants_batch(args):
        state_path, _ = state_paths(args.out)
        if state_path.exists():
            raise UsageError(
                f"{args.out} has a batch run in progress ({state_path}): add --batch to collect it, or cancel it "
                f"(`capjudge batch cancel {args.out}`) and delete {state_path.name} and {state_path.name[: -len('.json')]}/ to run online"
            )
        return None
    from capjudge.backends.openai.batch_run import BatchOptions, BatchSession

    options = BatchOptions(
        submit=bool(args.batch),
        wait=bool(args.wait),
        poll_interval=float(args.poll_interval),
        limits=BatchLimits(args.batch_max_requests, args.batch_max_bytes),
        failed=args.batch_failed,
        attempts=args.batch_attempts,
        export=Path(args.batch_export) if args.batch_export else None,
        import_=Path(args.batch_import) if args.batch_import else None,
    )
    command = list(getattr(args, "argv", None) or sys.argv[1:])
    try:
        return BatchSession(judge, args.out, options, command=command, fields=fields, backend_options=backend_options)
    except BatchStateError as exc:
        raise UsageError(str(exc)) from None


def batch_run(session: Any, args: argparse.Namespace, pass_: Callable[[], None]) -> contextlib.AbstractContextManager[str]:
    """Around the final pass (:func:`capjudge.backends.openai.batch_control.batch_run`): yields
    ``"ready"``, ``"pending"`` or ``"exported"``; progress messages unless ``--quiet``."""
    from capjudge.backends.openai.batch_control import batch_run as run

    return run(session, pass_, _say(args.quiet))


def pending_exit(session: Any, outcome: str) -> int:
    """The exit code and message of a run that did not reach its final pass."""
    from capjudge.backends.openai.batch_control import pending_message

    if outcome == "exported":
        return EXIT_OK
    print(visible(f"capjudge: {pending_message(session)}"), file=sys.stderr)
    return EXIT_SUBMITTED


# ------------------------------------------------------------------------------ capjudge batch ...
def register(subparsers: Any) -> None:
    """Add ``batch status|collect|cancel`` to an argparse subparsers object."""
    p = subparsers.add_parser("batch", help="the provider batches of a --batch run: status, collect, cancel (docs/batch.md)")
    sub = p.add_subparsers(dest="batch_command", required=True)
    for name, func, help_text in (
        ("status", cmd_status, "poll the run's batches and show where they are"),
        ("collect", cmd_collect, "run the run's own command again: collect what finished, write --out when all is done"),
        ("cancel", cmd_cancel, "cancel the run's batches in progress (the next run collects what finished and asks the rest again)"),
    ):
        q = sub.add_parser(name, help=help_text)
        q.add_argument("out", metavar="RESULTS.jsonl", help="the --out of the --batch run")
        # Credentials are never written to the state file: those the run was given on the command
        # line are given again here (a key from an environment variable is read again).
        q.add_argument("--backend", default=None, metavar="SPEC", help="the run's --backend again, when its URL carried credentials (never stored)")
        q.add_argument("--backend-opt", action="append", default=[], metavar="KEY=VALUE", help="backend option, e.g. api_key=... when the run was given its key so (never stored)")
        if name == "status":
            add_format(q, help="table (default) or json: the state as one JSON object", json_alias=True)
        if name == "collect":
            q.add_argument("--wait", action="store_true", help="poll until every batch is done")
            q.add_argument("--poll-interval", type=float, default=None, metavar="SECONDS", help="with --wait: seconds between polls")
        q.set_defaults(func=func)


def _provider(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The run's state, its batch provider and backend (credentials given again)."""
    from capjudge.backends.openai.batch_control import (
        given_options,
        load_state,
        open_provider,
        require_credentials,
    )

    state = load_state(args.out)
    given = require_credentials(state, args.out, args.backend, given_options(args.backend_opt), args.batch_command)
    provider, backend = open_provider(state, args.backend, given)
    return state, provider, backend


def cmd_status(args: argparse.Namespace) -> int:
    """``capjudge batch status RESULTS.jsonl``."""
    import json
    from dataclasses import asdict

    from capjudge.backends.openai.batch import TERMINAL
    from capjudge.backends.openai.batch_control import refresh_status

    state, provider, backend = _provider(args)
    try:
        refresh_status(state, provider)
    finally:
        provider.close()
        backend.close()
    if args.format == "json":
        print(json.dumps({"state": str(state.path), "jobs": [asdict(j) for j in state.jobs], "stats": asdict(state.stats)}))
        return 0
    print(visible(f"batch run of {args.out} ({state.path}), backend {state.backend}"))
    for job in state.jobs:
        c = job.counts
        done = f"{c.get('completed', 0)} done, {c.get('failed', 0)} failed of {c.get('total', job.lines)}" if c else f"{job.lines} requests"
        errs = f"  [{'; '.join(job.errors)}]" if job.errors else ""
        print(visible(f"  round {job.round}  {job.batch_id or '(not created)'}  {job.status:<11} {done}{errs}"))
    waiting = [j for j in state.in_flight if j.status not in TERMINAL]
    if waiting:
        print(visible(f"{len(waiting)} batch(es) in progress; `capjudge batch collect {args.out}` (or the same command) collects them when they end"))
    else:
        print(visible(f"nothing in progress; `capjudge batch collect {args.out}` (or the same command) collects and writes the results"))
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    """``capjudge batch collect RESULTS.jsonl``: the run's own command again (from its folder)."""
    from capjudge.backends.openai.batch_control import collect_command
    from capjudge.cli.app import main

    todo = collect_command(args.out, backend=args.backend, backend_opt=args.backend_opt, wait=args.wait, poll_interval=args.poll_interval)
    old = os.getcwd()
    os.chdir(todo.cwd)
    try:
        return main(todo.argv)
    finally:
        os.chdir(old)


def cmd_cancel(args: argparse.Namespace) -> int:
    """``capjudge batch cancel RESULTS.jsonl``."""
    from capjudge.backends.openai.batch_control import cancel_batches

    state, provider, backend = _provider(args)
    try:
        cancelled = cancel_batches(state, provider)
    finally:
        provider.close()
        backend.close()
    print(visible(f"capjudge: asked the provider to cancel {cancelled} batch(es); the next run of the same command collects what they answered and asks the rest again"))
    return 0
