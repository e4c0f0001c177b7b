"""``capjudge score --ray [ADDRESS] --ray-actors N --ray-gpus-per-actor G``: the command-line side.

The command keeps its flow (resume from ``--out``, records written as they arrive, input order at
the end, summary, exit codes); only the function that judges a list of rows changes: the rows go
to judges on Ray actors (:func:`capjudge.distributed.ray_run.score_stream`), one Ray session for
the whole command.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from capjudge.core.errors import UsageError


def check_ray_args(args: argparse.Namespace) -> None:
    """Usage errors of ``--ray`` (found before the backend is built): Ray missing, a bad number of
    actors or GPUs, a budget (``--max-cost`` cannot be shared between actors)."""
    from capjudge.distributed.ray_run import RayUnavailable, import_ray

    if args.ray_actors is not None and args.ray_actors < 1:
        raise UsageError(f"--ray-actors must be at least 1, got {args.ray_actors}")
    if args.ray_gpus_per_actor is not None and args.ray_gpus_per_actor < 0:
        raise UsageError(f"--ray-gpus-per-actor must be >= 0, got {args.ray_gpus_per_actor:g}")
    if getattr(args, "max_cost", None) is not None:
        raise UsageError(
            "--max-cost cannot be used with --ray: each actor counts its own spending, so no budget holds for "
            "the run as a whole; run without --ray, or set a spending limit at the provider"
        )
    try:
        import_ray()
    except RayUnavailable as exc:
        raise UsageError(str(exc)) from None


def describe(actors: int, gpus: float, judge: Any, cache_dir: str | None) -> list[str]:
    """What the run will do, said once the plan is known (stderr)."""
    lines = [f"Ray: {actors} actor(s), each with its own judge" + (f" and {gpus:g} GPU(s)" if gpus else "") + "."]
    concurrency = int(getattr(judge.backend.capabilities, "concurrency", 0) or 0)
    if concurrency > 0:
        lines.append(
            f"Ray: --concurrency {concurrency} applies to each actor: up to {actors} x {concurrency} = "
            f"{actors * concurrency} requests in flight at the server."
        )
    if cache_dir is not None:
        lines.append(f"Ray: the actors share the response cache {cache_dir} (one machine; on a cluster give each node its own, see docs/ray.md).")
    return lines


@contextlib.contextmanager
def ray_score_stream(args: argparse.Namespace, judge: Any, method: Any, judge_kwargs: dict[str, Any], console: Any) -> Iterator[Callable[[list[Any]], Iterator[tuple[int, Any]]]]:
    """A Ray session for the command and the function that judges a list of rows on its actors
    (the records ``judge.score_stream`` would make). ``--retry-errors`` bypasses the cache in the
    actors too (read from the driver judge's cache at each call)."""
    from capjudge.distributed.config import JudgeConfig
    from capjudge.distributed.ray_run import RayOptions, RayPlanError, connected, score_stream

    options = RayOptions(address=args.ray or None, actors=args.ray_actors, gpus_per_actor=args.ray_gpus_per_actor)
    config = JudgeConfig.from_judge_args(method, args.backend, **judge_kwargs)
    said: list[bool] = []

    def announce(actors: int, gpus: float) -> None:
        if not said and not args.quiet:
            for line in describe(actors, gpus, judge, config.options.get("cache_dir")):
                console.print(line, markup=False, highlight=False)
        said.append(True)

    opened: list[bool] = []
    with contextlib.ExitStack() as session:

        def stream(rows: list[Any]) -> Iterator[tuple[int, Any]]:
            if not rows:
                return  # everything kept from --out: no Ray needed
            if not opened:
                session.enter_context(connected(options))  # one Ray session for the command
                opened.append(True)
            reads = bool(getattr(judge.backend, "read", True))
            try:
                yield from score_stream(rows, config.with_cache_reads(reads), options, judge=judge, on_plan=announce)
            except RayPlanError as exc:
                raise UsageError(str(exc)) from None

        yield stream


__all__ = ["check_ray_args", "ray_score_stream"]
