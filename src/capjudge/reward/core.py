"""The reward callables: :class:`CaptionReward` (sync) and :class:`AsyncCaptionReward`.

Both have TRL's reward-function signature: ``reward(prompts=..., completions=...,
completion_ids=..., trainer_state=..., **columns) -> list[float | None]``. One call's completions go
to the judge together, so the G completions of one image are one image group (one image prefill on
``hf:``); the async form also gathers concurrent calls into one batch (:mod:`.batching`).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from capjudge.core.redact import get_logger, stable
from capjudge.data.images import DEFAULT_LIMITS
from capjudge.data.imagesources import LOCAL_SOURCES, ImageSources
from capjudge.data.recordcheck import unit_score
from capjudge.data.types import Sample, ScoreResult
from capjudge.reward.batching import CallBatcher
from capjudge.reward.inputs import CaptionFrom, Skip, build_samples

log = get_logger("capjudge.reward")

# "sample 3: backend error: ..." -> the cause without the sample's name, for one log line per cause.
_SAMPLE_PREFIX = re.compile(r"^sample [^:]*: (?:backend error: )?")
_MAX_CAUSES = 1000
TRL_ARGUMENTS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})
"""Keyword arguments TRL passes that are not dataset columns."""


@runtime_checkable
class RewardJudge(Protocol):
    """What a reward needs of a judge: :meth:`capjudge.Judge.score_many` (results in input order,
    one per sample, an ``error`` result for a sample that failed). A judge served elsewhere (a
    remote judge) fits here as well as a local :class:`capjudge.Judge`."""

    def score_many(self, samples: Iterable[Sample]) -> Iterable[ScoreResult]:
        """Score samples; one result per sample, in input order."""
        ...


class CaptionReward:
    """A caption judge as a TRL reward function (synchronous). Build it with
    :func:`capjudge.reward.make_reward`.

    ``reward(prompts, completions, **columns)`` returns one reward per completion: the judge's
    score, on ``[0, 1]`` when ``normalize`` (the method's scale mapped onto it, clipped), else on the
    method's scale; ``None`` for a completion that could not be judged (TRL leaves it out), with
    one log line per cause.
    """

    def __init__(
        self,
        judge: RewardJudge,
        *,
        normalize: bool = True,
        image_column: str | None = None,
        references_column: str | None = "references",
        caption_from: CaptionFrom | None = None,
        name: str | None = None,
        owns_judge: bool = False,
        image_sources: ImageSources = LOCAL_SOURCES,
    ) -> None:
        self.judge = judge
        self.image_sources = image_sources
        """Which image cells are read (:class:`~capjudge.data.imagesources.ImageSources`)."""
        self.normalize = bool(normalize)
        self.image_column = image_column
        self.references_column = references_column
        self.caption_from = caption_from
        self.__name__ = name or _default_name(judge)
        """The name TRL logs the reward under (``rewards/<name>/mean``)."""
        self._owns_judge = owns_judge
        self._lock = threading.Lock()  # one judge call at a time
        self._causes_lock = threading.Lock()  # apart: the async form notes causes while a batch runs
        self._causes: set[str] = set()

    # ------------------------------------------------------------------ the call
    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, completion_ids: Any = None, **kwargs: Any) -> list[float | None]:
        """TRL's reward-function call: one reward (or ``None``) per completion, in order."""
        items = self.samples(prompts, completions, kwargs)
        return self.rewards(items, self.score([s for s in items if isinstance(s, Sample)]))

    def samples(self, prompts: Sequence[Any] | None, completions: Sequence[Any] | None, kwargs: dict[str, Any]) -> list[Sample | Skip]:
        """The call's completions as samples, a :class:`Skip` for each one that cannot be judged.
        A call that breaks TRL's contract (no completions, columns of another length, no image
        column) is a ``ValueError``: it is the caller's mistake, not one sample's."""
        if completions is None:
            raise TypeError("the reward needs completions=[...] (TRL passes prompts=..., completions=...)")
        if isinstance(completions, (str, bytes)):
            raise TypeError("completions must be a list (one entry per completion), not a single string")
        completions = list(completions)
        if prompts is not None and len(prompts) != len(completions):
            raise ValueError(f"prompts ({len(prompts)}) and completions ({len(completions)}) differ in length")
        columns = {k: v for k, v in kwargs.items() if k not in TRL_ARGUMENTS}
        return build_samples(
            completions, columns, image_column=self.image_column, references_column=self.references_column, caption_from=self.caption_from,
            sources=self.image_sources, limits=getattr(self.judge, "image_limits", DEFAULT_LIMITS),
        )

    def score(self, samples: Sequence[Sample]) -> list[ScoreResult]:
        """The judge's results of ``samples``, in order (one judge call at a time)."""
        if not samples:
            return []
        with self._lock:
            results = list(self.judge.score_many(samples))
        if len(results) != len(samples):
            raise RuntimeError(f"the judge returned {len(results)} results for {len(samples)} samples")
        return results

    def rewards(self, items: Sequence[Sample | Skip], results: Sequence[ScoreResult]) -> list[float | None]:
        """Rewards in the order of ``items``: each sample's result in turn, ``None`` for a skip."""
        found = iter(results)
        out: list[float | None] = []
        for item in items:
            if isinstance(item, Skip):
                self._note(item.cause)
                out.append(None)
            else:
                out.append(self.value(next(found)))
        return out

    def value(self, result: ScoreResult) -> float | None:
        """One result's reward: its score (normalised unless raw was asked), ``None`` on failure."""
        if not result.ok or result.score is None or not math.isfinite(result.score):
            self._note(result.error or "no score")
            return None
        if not self.normalize:
            return float(result.score)
        value = unit_score(result.score, result.scale)
        if value is None:
            self._note(f"the method's scale {result.scale!r} cannot be normalised")
        return value

    def _note(self, cause: str) -> None:
        """Log a cause of a ``None`` reward the first time it is seen (secrets scrubbed)."""
        key = _SAMPLE_PREFIX.sub("", stable(str(cause)))
        with self._causes_lock:
            if key in self._causes or len(self._causes) >= _MAX_CAUSES:
                return
            self._causes.add(key)
        log.warning("capjudge reward: a completion could not be judged, its reward is None (TRL leaves it out): %s (logged once per cause)", key)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release the judge (its model) when the reward built it."""
        close = getattr(self.judge, "close", None)
        if self._owns_judge and callable(close):
            close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.judge!r}, normalize={self.normalize})"


class AsyncCaptionReward(CaptionReward):
    """The same reward as an ``async`` callable (TRL awaits it on its event loop, beside other async
    reward functions). Calls that arrive within ``batch_window`` seconds of each other are judged
    as one batch (up to ``max_batch`` completions; the judge still groups by image), one batch at a
    time, in a worker thread, so that the event loop is never blocked."""

    def __init__(self, judge: RewardJudge, *, batch_window: float = 0.01, max_batch: int = 256, **options: Any) -> None:
        super().__init__(judge, **options)
        self.batcher = CallBatcher(self.score, window=batch_window, max_items=max_batch)

    async def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, completion_ids: Any = None, **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        """TRL's reward-function call, awaited: one reward (or ``None``) per completion."""
        if self.image_sources.checks_urls:  # its URL images are downloaded: not on the event loop
            items = await asyncio.to_thread(self.samples, prompts, completions, kwargs)
        else:
            items = self.samples(prompts, completions, kwargs)
        results = await self.batcher.submit([s for s in items if isinstance(s, Sample)])
        return self.rewards(items, results)

    def close(self) -> None:
        """Stop the worker thread and release the judge (when the reward built it)."""
        self.batcher.close()
        super().close()


def _default_name(judge: Any) -> str:
    method = getattr(judge, "method", None)
    name = getattr(method, "name", None)
    return f"capjudge_{name}".replace("-", "_") if isinstance(name, str) else "capjudge"


__all__ = ["TRL_ARGUMENTS", "AsyncCaptionReward", "CaptionReward", "RewardJudge"]
