"""What ``capjudge batch status|collect|cancel`` and the ``--batch`` runs do with a run's batches,
as plain functions (the command line prints and picks the exit codes): the run around a command's
final pass, the state of an ``--out``, the credentials given again, polling and cancelling, and the
command that collects a run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.core.errors import UsageError

SUBMITTED_MESSAGE = "submitted; run the same command again to collect"
"""What a run that left batches in progress says (its exit code is :data:`capjudge.core.errors.EXIT_PENDING`)."""


@contextlib.contextmanager
def batch_run(session: Any, pass_: Callable[[], None], say: Callable[[str], None]) -> Iterator[str]:
    """Around the final pass: yields ``"ready"`` (run the final pass inside the block, which
    answers from the batches), ``"pending"`` or ``"exported"`` (skip it). The state is removed
    once a final pass has finished; a failure or interrupt keeps it for the next run."""
    if session is None:
        yield "ready"
        return
    try:
        outcome = session.prepare(pass_, say=say)
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


def pending_message(session: Any) -> str:
    """What a run whose batches are still in progress says (after ``capjudge: ``)."""
    jobs = session.state.in_flight if session.state is not None else []
    return f"{len(jobs)} batch(es) in progress ({', '.join(str(j.batch_id) for j in jobs[:5])}{' ...' if len(jobs) > 5 else ''}): {SUBMITTED_MESSAGE}"


def load_state(out: str) -> Any:
    """The :class:`~capjudge.backends.openai.batch.BatchState` of the ``--batch`` run of ``out``
    (a usage error when there is none or it cannot be read)."""
    from capjudge.backends.openai.batch import BatchState, BatchStateError, state_paths

    path, _ = state_paths(out)
    if not path.exists():
        raise UsageError(f"no batch run for {out}: {path} does not exist (the run finished, or never used --batch)")
    try:
        return BatchState.load(path)
    except BatchStateError as exc:
        raise UsageError(str(exc)) from None


def given_options(items: Sequence[str] | None) -> dict[str, str]:
    """``--backend-opt KEY=VALUE`` items as a dict (a usage error for an item without ``=``)."""
    options: dict[str, str] = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--backend-opt {key.strip() or item!r}: expected KEY=VALUE")
        options[key.strip()] = value
    return options


def require_credentials(state: Any, out: str, backend: str | None, given: dict[str, str], command: str) -> dict[str, str]:
    """``given`` (the ``--backend-opt`` options given again); a usage error naming what to give
    when the run was given credentials on the command line (the state file never holds them) and
    they are not given again. ``command`` is the batch command (``status``, ``collect``, ...)."""
    from capjudge.backends.openai.batch_run import COMMAND_LINE_KEY

    missing: list[str] = []
    if state.credentials.get("api_key") == COMMAND_LINE_KEY and not given.get("api_key"):
        missing.append("--backend-opt api_key=KEY")
    if state.credentials.get("url") and not backend:
        missing.append(f"--backend SPEC (the run's spec, whose URL carried {', '.join(state.credentials['url'])})")
    if missing:
        raise UsageError(
            f"the batch run of {out} was given credentials on the command line, which capjudge never writes to disk: "
            f"give them again: capjudge batch {command} {out} {' '.join(missing)} (or run the run's own command again)"
        )
    return given


def open_provider(state: Any, backend: str | None, given: Mapping[str, str]) -> tuple[Any, Any]:
    """The provider of the run's batches and the backend it came from (close both)."""
    from capjudge.backends.openai.batch import Provider
    from capjudge.backends.registry import load_backend

    loaded: Any = load_backend(backend or state.backend, **{**state.backend_options, **given})
    return Provider(loaded.batch_client(), loaded.batch_url), loaded


def restore_command(argv: list[str], backend: str | None, given: dict[str, str]) -> list[str]:
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


@dataclass(frozen=True)
class Collect:
    """The command that collects a ``--batch`` run: ``argv`` (without ``capjudge``), run from ``cwd``."""

    cwd: str
    argv: list[str]


def collect_command(out: str, *, backend: str | None, backend_opt: Sequence[str] | None, wait: bool, poll_interval: float | None) -> Collect:
    """What ``capjudge batch collect OUT`` runs: the run's own command again, with the credentials
    given again (``backend``, the ``--backend-opt`` items ``backend_opt``), from the run's folder
    (the caller runs it)."""
    state = load_state(out)
    given = require_credentials(state, out, backend, given_options(backend_opt), "collect")
    argv = restore_command(list(state.command), backend, given)
    if not argv:
        raise UsageError(f"{state.path} does not record the command of the run: run it again yourself")
    if wait and "--wait" not in argv:
        argv.append("--wait")
    if poll_interval is not None:
        argv += ["--poll-interval", str(poll_interval)]
    return Collect(state.cwd, argv)


def refresh_status(state: Any, provider: Any) -> None:
    """Poll the provider for each batch in flight and save the state."""
    from capjudge.backends.openai.batch import TERMINAL, apply_status
    from capjudge.backends.openai.batch_run import provider_errors

    with provider_errors():
        for job in state.in_flight:
            if job.batch_id and job.status not in TERMINAL:
                apply_status(job, provider.retrieve(job.batch_id))
    state.save()


def cancel_batches(state: Any, provider: Any) -> int:
    """Ask the provider to cancel the run's batches in progress (saving the state after each);
    batches never submitted are marked collected (the next run asks their requests again).
    Returns how many were asked to cancel."""
    from capjudge.backends.openai.batch import TERMINAL, apply_status
    from capjudge.backends.openai.batch_run import provider_errors

    cancelled = 0
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
    return cancelled
