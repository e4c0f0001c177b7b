"""The command line of batch mode: the ``--batch*`` options of ``score`` and ``compare``, the run
around their final pass, and ``capjudge batch status|collect|cancel RESULTS.jsonl``.

Only the standard library is imported at module level (``capjudge --help`` stays fast). Exit codes
as ``score``, plus :data:`EXIT_SUBMITTED` (4): batches were submitted, or are still in progress;
run the same command again (or ``capjudge batch collect``) to collect them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

EXIT_SUBMITTED = 4
SUBMITTED_MESSAGE = "submitted; run the same command again to collect"
BATCH_KINDS = ("openai", "azure", "openai-compatible")


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
    from capjudge.cli_errors import UsageError

    if not wants_batch(args):
        if getattr(args, "wait", False):
            raise UsageError("--wait applies to --batch runs")
        return
    if getattr(args, "ray", None) is not None:
        raise UsageError("--batch, --batch-export and --batch-import run in one process: use them without --ray")
    kind = args.backend.split(":", 1)[0].lower()
    if kind not in BATCH_KINDS:
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
    from capjudge.redact import scrub

    def say(message: str) -> None:
        if not quiet:
            print(f"capjudge: {scrub(message)}", file=sys.stderr)

    return say


def planning_pass(judge: Any, rows: Sequence[Any], plan: Any, stream: Callable[[list[Any]], Iterator[tuple[int, Any]]]) -> Callable[[], None]:
    """The pass a batch session runs with its planning backend in place: the rows the final pass
    will judge (as ``cli._run_rows`` selects them), their records discarded."""
    from capjudge.backends.cache import bypass_cache
    from capjudge.io import BadRow

    todo = [pos for pos in range(len(rows)) if pos not in plan.kept and not isinstance(rows[pos], BadRow)]
    retry = [pos for pos in todo if pos in plan.retry]
    fresh = [pos for pos in todo if pos not in plan.retry]

    def run() -> None:
        if retry:
            with bypass_cache(judge.backend):
                for _ in stream([rows[pos] for pos in retry]):
                    pass
        for _ in stream([rows[pos] for pos in fresh]):
            pass

    return run


def session_for(args: argparse.Namespace, judge: Any, fields: dict[str, Any], backend_options: dict[str, Any]) -> Any:
    """The :class:`~capjudge.backends.openai.batch_run.BatchSession` of a run, or ``None``. An
    online run of an ``--out`` whose batches are pending is refused: it would ask them again."""
    from capjudge.backends.openai.batch import BatchLimits, BatchStateError, state_paths
    from capjudge.cli_errors import UsageError

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


@contextlib.contextmanager
def batch_run(session: Any, args: argparse.Namespace, pass_: Callable[[], None]) -> Iterator[str]:
    """Around the final pass: yields ``"ready"`` (run the final pass inside the block, which
    answers from the batches), ``"pending"`` or ``"exported"`` (skip it). The state is removed
    once a final pass has finished; a failure or interrupt keeps it for the next run."""
    if session is None:
        yield "ready"
        return
    try:
        outcome = session.prepare(pass_, say=_say(args.quiet))
        if outcome != "ready":
            yield outcome
            if outcome == "exported" and session.state is None:
                session.finish()  # no batch run here: nothing to keep
            else:
                session.close()
            return
        with session.replaying():
            yield outcome
    except BaseException:
        session.close()
        raise
    session.finish()


def pending_exit(session: Any, outcome: str) -> int:
    """The exit code and message of a run that did not reach its final pass."""
    from capjudge.cli import EXIT_OK

    if outcome == "exported":
        return EXIT_OK
    jobs = session.state.in_flight if session.state is not None else []
    print(f"capjudge: {len(jobs)} batch(es) in progress ({', '.join(str(j.batch_id) for j in jobs[:5])}{' ...' if len(jobs) > 5 else ''}): {SUBMITTED_MESSAGE}", file=sys.stderr)
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
            q.add_argument("--json", action="store_true", help="print the state as one JSON object")
        if name == "collect":
            q.add_argument("--wait", action="store_true", help="poll until every batch is done")
            q.add_argument("--poll-interval", type=float, default=None, metavar="SECONDS", help="with --wait: seconds between polls")
        q.set_defaults(func=func)


def _load(out: str) -> Any:
    from capjudge.backends.openai.batch import BatchState, BatchStateError, state_paths
    from capjudge.cli_errors import UsageError

    path, _ = state_paths(out)
    if not path.exists():
        raise UsageError(f"no batch run for {out}: {path} does not exist (the run finished, or never used --batch)")
    try:
        return BatchState.load(path)
    except BatchStateError as exc:
        raise UsageError(str(exc)) from None


def _given_options(args: argparse.Namespace) -> dict[str, str]:
    from capjudge.cli_errors import UsageError

    options: dict[str, str] = {}
    for item in getattr(args, "backend_opt", None) or ():
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--backend-opt {key.strip() or item!r}: expected KEY=VALUE")
        options[key.strip()] = value
    return options


def _require_credentials(state: Any, args: argparse.Namespace) -> dict[str, str]:
    """The ``--backend-opt`` options given here; a usage error naming what to give when the run
    was given credentials on the command line (the state file never holds them) and they are
    not given again."""
    from capjudge.backends.openai.batch_run import COMMAND_LINE_KEY
    from capjudge.cli_errors import UsageError

    given = _given_options(args)
    missing: list[str] = []
    if state.credentials.get("api_key") == COMMAND_LINE_KEY and not given.get("api_key"):
        missing.append("--backend-opt api_key=KEY")
    if state.credentials.get("url") and not args.backend:
        missing.append(f"--backend SPEC (the run's spec, whose URL carried {', '.join(state.credentials['url'])})")
    if missing:
        raise UsageError(
            f"the batch run of {args.out} was given credentials on the command line, which capjudge never writes to disk: "
            f"give them again: capjudge batch {args.batch_command} {args.out} {' '.join(missing)} (or run the run's own command again)"
        )
    return given


def _provider(state: Any, args: argparse.Namespace) -> Any:
    from capjudge.backends.openai.batch import Provider
    from capjudge.backends.registry import load_backend

    given = _require_credentials(state, args)
    backend: Any = load_backend(args.backend or state.backend, **{**state.backend_options, **given})
    return Provider(backend.batch_client(), backend.batch_url), backend


def _restore_command(argv: list[str], backend: str | None, given: dict[str, str]) -> list[str]:
    """The recorded command with the credentials given again: ``--backend`` replaced, the
    ``--backend-opt`` options named in ``given`` replaced by the given values."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        step = 1 if eq else 2
        if flag == "--backend" and backend is not None:
            out += ["--backend", backend]
            i += step
            continue
        if flag == "--backend-opt" and value.partition("=")[0].strip() in given:
            i += step
            continue
        out.append(arg)
        i += 1
    for key, value in given.items():
        out += ["--backend-opt", f"{key}={value}"]
    return out


def cmd_status(args: argparse.Namespace) -> int:
    """``capjudge batch status RESULTS.jsonl``."""
    import json
    from dataclasses import asdict

    from capjudge.backends.openai.batch import TERMINAL, apply_status
    from capjudge.backends.openai.batch_run import provider_errors

    state = _load(args.out)
    provider, backend = _provider(state, args)
    try:
        with provider_errors():
            for job in state.in_flight:
                if job.batch_id and job.status not in TERMINAL:
                    apply_status(job, provider.retrieve(job.batch_id))
        state.save()
    finally:
        provider.close()
        backend.close()
    if args.json:
        print(json.dumps({"state": str(state.path), "jobs": [asdict(j) for j in state.jobs], "stats": asdict(state.stats)}))
        return 0
    print(f"batch run of {args.out} ({state.path}), backend {state.backend}")
    for job in state.jobs:
        c = job.counts
        done = f"{c.get('completed', 0)} done, {c.get('failed', 0)} failed of {c.get('total', job.lines)}" if c else f"{job.lines} requests"
        errs = f"  [{'; '.join(job.errors)}]" if job.errors else ""
        print(f"  round {job.round}  {job.batch_id or '(not created)'}  {job.status:<11} {done}{errs}")
    waiting = [j for j in state.in_flight if j.status not in TERMINAL]
    if waiting:
        print(f"{len(waiting)} batch(es) in progress; `capjudge batch collect {args.out}` (or the same command) collects them when they end")
    else:
        print(f"nothing in progress; `capjudge batch collect {args.out}` (or the same command) collects and writes the results")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    """``capjudge batch collect RESULTS.jsonl``: the run's own command again (from its folder)."""
    from capjudge.cli import main
    from capjudge.cli_errors import UsageError

    state = _load(args.out)
    given = _require_credentials(state, args)
    argv = _restore_command(list(state.command), args.backend, given)
    if not argv:
        raise UsageError(f"{state.path} does not record the command of the run: run it again yourself")
    if args.wait and "--wait" not in argv:
        argv.append("--wait")
    if args.poll_interval is not None:
        argv += ["--poll-interval", str(args.poll_interval)]
    old = os.getcwd()
    os.chdir(state.cwd)
    try:
        return main(argv)
    finally:
        os.chdir(old)


def cmd_cancel(args: argparse.Namespace) -> int:
    """``capjudge batch cancel RESULTS.jsonl``."""
    from capjudge.backends.openai.batch import TERMINAL, apply_status
    from capjudge.backends.openai.batch_run import provider_errors

    state = _load(args.out)
    provider, backend = _provider(state, args)
    cancelled = 0
    try:
        with provider_errors():
            for job in state.in_flight:
                if job.batch_id is None and job.status == "creating":
                    found = provider.find_batch(job)
                    if found is not None:
                        apply_status(job, found)
                if job.batch_id is None:
                    job.status = "collected"  # never submitted: its requests are asked again by the next run
                elif job.status not in TERMINAL and job.status != "cancelling":
                    apply_status(job, provider.cancel(job.batch_id))
                    cancelled += 1
                state.save()
    finally:
        provider.close()
        backend.close()
    print(f"capjudge: asked the provider to cancel {cancelled} batch(es); the next run of the same command collects what they answered and asks the rest again")
    return 0
