"""Judging with many model copies at once through Ray Data: the driver side.

One :class:`~capjudge.distributed.worker.JudgeWorker` per Ray actor (``map_batches`` with an
``ActorPoolStrategy``: one model load per actor, ``num_gpus`` per actor), each call a unit of whole
image groups, so prefix reuse works inside each actor. Ray retries the work of an actor that dies
(the actor is restarted, its tasks asked again, up to ``task_retries`` times each).

- :func:`score_stream` / :func:`score_list`: samples the driver holds (what ``capjudge score --ray``
  uses). Results are yielded as they arrive, ``(input index, result)``; a unit that still fails
  after its retries becomes error records that a re-run asks again (``details.resumable``), so no
  sample is ever missing from the output.
- :func:`score_dataset`: a ``ray.data.Dataset`` of samples in, a Dataset of results out (lazy;
  grouped by image with ``groupby(...).map_groups``, sorted back into input order by ``row``).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capjudge.backends import kinds
from capjudge.backends.base import BackendError
from capjudge.core.errors import UsageError
from capjudge.core.redact import get_logger
from capjudge.distributed.config import JudgeConfig, plan_units

if TYPE_CHECKING:
    from capjudge.backends.base import Backend
    from capjudge.data.types import ScoreResult
    from capjudge.judges.judge import Judge
    from capjudge.prompts.registry import Method

log = get_logger(__name__)



class RayUnavailable(UsageError, ImportError):
    """Ray (``pip install 'capjudge[ray]'``) is not installed (a usage error: the command line
    exits 2)."""


class RayStartError(BackendError):
    """Ray could not be started or reached (the run cannot go on: exit code 1)."""


class RayPlanError(UsageError, ValueError):
    """The actors asked for do not fit the cluster (Ray would wait for them forever; a usage
    error: the command line exits 2)."""


@dataclass(frozen=True)
class RayOptions:
    """How a run uses Ray.

    ``address``: a running cluster (``"auto"``, ``"HOST:6379"``, ``"ray://HOST:10001"``); ``None``
    uses ``RAY_ADDRESS`` or starts a local instance (shut down when the run ends). A Ray already
    initialised in this process is used as it is. ``actors``: judges running at once (default:
    the cluster's GPUs divided by ``gpus_per_actor``, or 1 without GPUs). ``gpus_per_actor``:
    default 1 for local models (``hf:``, ``llamacpp:``) on a cluster with GPUs, else 0.
    ``task_retries``: how often the unit of a dead actor is asked again before its samples
    become error records. ``init``: more ``ray.init`` keyword arguments (e.g. ``runtime_env``).
    """

    address: str | None = None
    actors: int | None = None
    gpus_per_actor: float | None = None
    cpus_per_actor: float = 1.0
    task_retries: int = 3
    init: dict[str, Any] = field(default_factory=dict)


def import_ray() -> Any:
    """The ``ray`` module with Ray Data, or :class:`RayUnavailable` saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401 - Ray Data is a separate extra of ray
    except ImportError as exc:
        raise RayUnavailable(f"Ray Data is not installed ({exc}): pip install 'capjudge[ray]'") from exc
    return ray


@contextlib.contextmanager
def connected(options: RayOptions) -> Iterator[Any]:
    """Ray, initialised: the instance this process already has, else ``ray.init(address)`` (a
    local instance when there is no address and no ``RAY_ADDRESS``), shut down on exit if started here."""
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=options.address or None, logging_level=logging.WARNING, **options.init)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError ... by Ray version
            where = f"the Ray cluster at {options.address!r}" if options.address else "a local Ray instance"
            raise RayStartError(f"could not start or reach {where}: {type(exc).__name__}: {exc}") from exc
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _backend_kind(config: JudgeConfig) -> str | None:
    return config.backend.split(":", 1)[0].lower() if isinstance(config.backend, str) else None


def plan_actors(ray: Any, config: JudgeConfig, options: RayOptions) -> tuple[int, float]:
    """``(actors, gpus per actor)`` for this cluster; :class:`RayPlanError` when they cannot fit."""
    resources = ray.cluster_resources()
    gpus, cpus = float(resources.get("GPU", 0.0)), float(resources.get("CPU", 0.0))
    per = options.gpus_per_actor
    if per is None:
        per = 1.0 if gpus >= 1 and kinds.is_local(_backend_kind(config) or "") else 0.0
    if per < 0:
        raise RayPlanError(f"GPUs per actor must be >= 0, got {per:g}")
    actors = options.actors if options.actors is not None else (max(1, int(gpus // per)) if per > 0 else 1)
    if actors < 1:
        raise RayPlanError(f"the number of Ray actors must be at least 1, got {actors}")
    if per > 0 and actors * per > gpus:
        raise RayPlanError(
            f"{actors} actor(s) x {per:g} GPU(s) need {actors * per:g} GPUs; the Ray cluster has {gpus:g}: "
            "pass fewer --ray-actors or --ray-gpus-per-actor (Ray would wait for the GPUs forever)"
        )
    if actors * options.cpus_per_actor > cpus:
        raise RayPlanError(
            f"{actors} actor(s) x {options.cpus_per_actor:g} CPU(s) need {actors * options.cpus_per_actor:g} CPUs; "
            f"the Ray cluster has {cpus:g}: pass fewer --ray-actors"
        )
    return actors, per


def _judge_units(ray: Any, units: Any, config: JudgeConfig, actors: int, gpus: float, options: RayOptions, *, records: bool = False) -> Any:
    """The units judged by an actor pool: one JudgeWorker (one judge, one model) per actor."""
    from capjudge.distributed.worker import JudgeWorker

    with warnings.catch_warnings():
        # Ray 2.5x warns that actor options given as keywords (max_restarts, max_task_retries)
        # will need named parameters in 2.64; the extra pins ray below 2.64.
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*")
        return units.map_batches(
            JudgeWorker,
            fn_constructor_kwargs={"config": config, "records": records},
            batch_size=1,  # one unit (whole image groups) per call: a lost call loses one unit
            batch_format="numpy",
            # One unit at a time per actor: units queued on an actor that dies would fail with it
            # and spend their retries on another unit's fault.
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
            num_gpus=gpus,
            num_cpus=options.cpus_per_actor,
            # A dead actor is restarted and its calls asked again, a bounded number of times (a
            # sample that kills the process every time must not loop for ever).
            max_restarts=-1,
            max_task_retries=options.task_retries,
        )


def unit_size(config: JudgeConfig, judge: Judge) -> int:
    """Samples per unit: the judge's ``batch_size``; for a backend with concurrent requests at
    least four times its ``concurrency``, so that an actor's window of requests rarely drains
    at the end of a unit (an actor judges its units one after the other)."""
    concurrency = int(getattr(judge.backend.capabilities, "concurrency", 0) or 0)
    return max(config.batch_size, 4 * concurrency)


def score_stream(
    samples: Sequence[Any],
    config: JudgeConfig,
    options: RayOptions | None = None,
    *,
    judge: Judge | None = None,
    on_plan: Callable[[int, float], None] | None = None,
) -> Iterator[tuple[int, ScoreResult]]:
    """Judge ``samples`` on Ray actors, yielding ``(input index, result)`` as results arrive.

    Every sample gets exactly one result: the records a single process makes, or, for the samples
    of a unit that failed after its retries, an error record with ``details.resumable`` (a re-run
    asks them again). ``judge`` (default: one built from ``config``, models not loaded) makes those
    records. ``on_plan(actors, gpus_per_actor)`` is called once the plan is known. Raises
    :class:`~capjudge.backends.lazy.BackendLoadError` when an actor cannot load the model.
    """
    options = options or RayOptions()
    maker = judge if judge is not None else config.build()  # records of lost samples; nothing loads
    try:
        yield from _stream(samples, config, options, maker, on_plan)
    finally:
        if judge is None:
            maker.close()


def _stream(samples: Sequence[Any], config: JudgeConfig, options: RayOptions, maker: Judge, on_plan: Callable[[int, float], None] | None) -> Iterator[tuple[int, ScoreResult]]:
    from capjudge.backends.lazy import BackendLoadError
    from capjudge.distributed.worker import lost_record

    units = list(plan_units(samples, unit_size(config, maker)))
    with connected(options) as ray:
        actors, gpus = plan_actors(ray, config, options)
        if on_plan is not None:
            on_plan(actors, gpus)
        if not units:
            return
        ds = ray.data.from_items([{"unit": pickle.dumps(u)} for u in units], override_num_blocks=len(units))
        ctx = ds.context  # this dataset's own copy of the context
        ctx.max_errored_blocks = -1  # a unit that fails after its retries: its samples become error records
        ctx.enable_progress_bars = False  # the caller shows progress
        ctx.print_on_execution_start = False
        ctx.enable_auto_log_stats = False
        seen: set[int] = set()
        for batch in _judge_units(ray, ds, config, actors, gpus, options).iter_batches(batch_size=None, batch_format="numpy"):
            for row, blob, load_error in zip(batch["row"], batch["result"], batch["load_error"]):
                if load_error:
                    raise BackendLoadError(str(load_error))
                index = int(row)
                if index in seen:
                    continue  # a retried unit answered twice: the first answer stands
                seen.add(index)
                yield index, pickle.loads(blob)
    lost = [i for i in range(len(samples)) if i not in seen]
    if lost:
        message = (
            f"not judged: the Ray task that judged its batch failed {options.task_retries + 1} time(s) "
            "(an actor died or a node was lost: see the Ray logs); re-run the same command to resume"
        )
        for i in lost:
            yield i, lost_record(maker, i, samples[i], message)


def score_list(
    samples: Sequence[Any],
    method: str | Method,
    backend: str | Callable[[], Backend],
    *,
    address: str | None = None,
    actors: int | None = None,
    gpus_per_actor: float | None = None,
    **judge_options: Any,
) -> list[ScoreResult]:
    """Score ``samples`` on Ray actors; the results in input order, the records one process makes.

    ``method``, ``backend`` and ``judge_options`` are :class:`~capjudge.judges.judge.Judge`'s
    arguments (``backend`` a spec string, or a picklable function that returns a backend, called
    once per actor); ``address``, ``actors``, ``gpus_per_actor``: see :class:`RayOptions`.
    """
    from capjudge.judges.dispatch import in_input_order

    config = JudgeConfig.from_judge_args(method, backend, **judge_options)
    options = RayOptions(address=address, actors=actors, gpus_per_actor=gpus_per_actor)
    return list(in_input_order(score_stream(samples, config, options)))


# ------------------------------------------------------------------------------ Dataset in, Dataset out
_SAMPLE_FIELDS = ("image", "caption", "references", "id")


def _sample_of(row: dict[str, Any]) -> dict[str, Any]:
    """A sample dict from a Dataset row (its sample fields, as plain Python values)."""
    out: dict[str, Any] = {}
    for k in _SAMPLE_FIELDS:
        value = row.get(k)
        if value is None:
            continue
        if k == "references" and not isinstance(value, (str, bytes)):
            value = [str(r) for r in value]
        elif k == "id":
            value = str(value)
        out[k] = value
    return out


def score_dataset(
    ds: Any,
    method: str | Method,
    backend: str | Callable[[], Backend],
    *,
    actors: int | None = None,
    gpus_per_actor: float | None = None,
    cpus_per_actor: float = 1.0,
    task_retries: int = 3,
    image_column: str = "image",
    **judge_options: Any,
) -> Any:
    """Score a ``ray.data.Dataset`` of samples (``image``, ``caption``, optional ``references``,
    ``id``) on an actor pool; returns a lazy Dataset of results in input order.

    Input order is the order in which ``ds`` yields its rows (for a deterministic order, e.g. the
    order of the files read, set ``preserve_order`` in the DataContext you create ``ds`` with). The
    sample rows (paths and texts, not results) are read once by the driver, numbered, grouped by
    ``image_column`` over the whole dataset and cut into units of whole image groups (up to
    ``batch_size`` samples); the actors judge whole units, and the results stay in the cluster.
    Result rows (:data:`~capjudge.distributed.worker.RESULT_COLUMNS`): ``row`` (1-based input
    position), ``id``, ``image``, ``caption``, ``score``, ``status``, ``error`` and ``record`` (the
    results-file record a single process writes, as JSON text). A unit that still fails after
    ``task_retries`` fails the dataset's execution, unless its ``DataContext.max_errored_blocks``
    allows it (its rows are then absent: :func:`score_stream` turns them into error records).
    Uses the Ray instance this process has initialised.
    """
    ray = import_ray()
    config = JudgeConfig.from_judge_args(method, backend, **judge_options)
    options = RayOptions(actors=actors, gpus_per_actor=gpus_per_actor, cpus_per_actor=cpus_per_actor, task_retries=task_retries)
    samples = [_sample_of({**row, "image": row.get(image_column)}) for row in ds.iter_rows()]
    probe = config.build()
    try:
        units = list(plan_units(samples, unit_size(config, probe)))
    finally:
        probe.close()
    actors_n, gpus = plan_actors(ray, config, options)
    source = ray.data.from_items([{"unit": pickle.dumps(u)} for u in units], override_num_blocks=max(1, len(units)))
    judged = _judge_units(ray, source, config, actors_n, gpus, options, records=True)
    return judged.sort("row")


__all__ = [
    "RayOptions",
    "RayPlanError",
    "RayStartError",
    "RayUnavailable",
    "connected",
    "import_ray",
    "plan_actors",
    "score_dataset",
    "score_list",
    "score_stream",
    "unit_size",
]
