"""``make_reward(method, backend, ...)`` and ``make_async_reward``: a caption judge as a TRL reward.

>>> from capjudge.reward import make_reward
>>> reward = make_reward("fleur", "hf:llava-hf/llava-1.5-7b-hf")      # doctest: +SKIP
>>> trainer = GRPOTrainer(model=policy, reward_funcs=reward, ...)   # doctest: +SKIP

The judge is built once, when the reward is made (its model loads at the first call). A policy
samples, so no two completions repeat: there is no response cache unless ``cache`` asks for one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capjudge.data.imagesources import LOCAL_SOURCES, ImageSources
from capjudge.reward.core import AsyncCaptionReward, CaptionReward, RewardJudge
from capjudge.reward.inputs import CaptionFrom


def build_judge(method: str | None, backend: Any, *, cache: bool | str | Path = False, **judge_options: Any) -> Any:
    """The :class:`capjudge.Judge` a reward asks: ``method`` (default ``"fleur"``) on ``backend``
    (a spec string or a :class:`capjudge.backends.base.Backend`); ``cache=True`` uses the response
    cache folder (``$CAPJUDGE_CACHE_DIR`` or ``~/.cache/capjudge``), a path that folder."""
    from capjudge.judges.judge import Judge

    if backend is None:
        raise ValueError("make_reward needs a backend (a spec such as 'hf:llava-hf/llava-1.5-7b-hf') or judge=...")
    cache_dir: str | Path | None = None
    if cache is True:
        from capjudge.backends.cache import default_cache_dir

        cache_dir = default_cache_dir()
    elif cache:
        cache_dir = cache  # type: ignore[assignment]  # a path (str or Path)
    judge = Judge(method or "fleur", backend, cache_dir=cache_dir, **judge_options)
    if judge.method.pairwise:
        judge.close()
        raise ValueError(f"method {judge.method.name!r} compares two captions; a reward scores each completion: choose a scoring method")
    return judge


def remote_judge(url: str, method: str | None = None, *, token: str | None = None, **client_options: Any) -> Any:
    """The judge of ``capjudge serve`` at ``url`` (:class:`capjudge.serve.RemoteJudge`; the token
    from ``token`` or ``$CAPJUDGE_TOKEN``), checked to score single captions (and to serve
    ``method`` when given)."""
    from capjudge.serve.client import RemoteJudge

    judge = RemoteJudge(url, token=token, **client_options)
    served = judge.method
    problem = None
    if method is not None and method != served.name:
        problem = f"the server at {url} serves {served.name!r}, not {method!r}"
    elif served.pairwise:
        problem = f"the server at {url} serves {served.name!r}, which compares two captions; a reward scores each completion"
    if problem is not None:
        judge.close()
        raise ValueError(problem)
    return judge


def _options(method: str | None, backend: Any, judge: RewardJudge | None, cache: bool | str | Path, judge_options: dict[str, Any], remote: str | None = None, token: str | None = None) -> tuple[RewardJudge, bool]:
    if remote is not None:
        if backend is not None or judge is not None or cache:
            raise ValueError("remote= is a judge server: its backend and cache are the server's; give no backend, judge or cache")
        return remote_judge(remote, method, token=token, **judge_options), True
    if token is not None:
        raise ValueError("token= goes with remote=URL")
    if judge is not None:
        if method is not None or backend is not None or cache or judge_options:
            raise ValueError("judge= is a ready judge: give method, backend, cache and judge options to it, not to make_reward")
        if not callable(getattr(judge, "score_many", None)):
            raise TypeError(f"judge= needs a score_many(samples) method, got {type(judge).__name__}")
        return judge, False
    return build_judge(method, backend, cache=cache, **judge_options), True


def make_reward(
    method: str | None = None,
    backend: Any = None,
    *,
    judge: RewardJudge | None = None,
    normalize: bool = True,
    cache: bool | str | Path = False,
    image_column: str | None = None,
    references_column: str | None = "references",
    caption_from: CaptionFrom | None = None,
    name: str | None = None,
    remote: str | None = None,
    token: str | None = None,
    image_sources: ImageSources = LOCAL_SOURCES,
    **judge_options: Any,
) -> CaptionReward:
    """A TRL reward function that scores each completion (a caption) of an image with a judge.

    Parameters
    ----------
    method, backend:
        The judging method (default ``"fleur"``; any scoring method) and the backend spec
        (``"hf:..."``, ``"llamacpp:..."``, ``"openai:gpt-4o"``, ``"scripted:0.8"``, ...) or a
        :class:`~capjudge.backends.base.Backend`.
    judge:
        Instead of method and backend: a ready judge, any object with :class:`capjudge.Judge`'s
        ``score_many`` (a :class:`capjudge.Judge`, or a judge served elsewhere).
    normalize:
        Rewards on ``[0, 1]`` (the method's scale mapped onto it, clipped); ``False``: the
        scores on the method's scale.
    cache:
        ``False`` (default: a policy samples, answers never repeat), ``True`` (the response cache
        folder) or a folder.
    image_column:
        The dataset column of the images; default ``image``, else ``images`` (its first image).
        A cell holds a PIL image, a path, an ``http(s)``/``data:`` URL or encoded bytes.
    references_column:
        The column of reference captions, read when present (reference-based methods).
    caption_from:
        A function from a completion's text to the caption to judge (e.g. cut a preamble);
        ``None`` from it makes that completion's reward ``None``.
    name:
        The name TRL logs the reward under (default ``capjudge_<method>``).
    remote, token:
        Instead of a backend: the URL of a ``capjudge serve`` judge server (its method and backend;
        ``method``, when given, must be the one it serves) and its token (default
        ``$CAPJUDGE_TOKEN``); ``judge_options`` then go to :class:`capjudge.serve.RemoteJudge`
        (``images_root``, ``batch_size``, ...).
    image_sources:
        Which image cells are read (:class:`capjudge.data.imagesources.ImageSources`). The default
        reads every path and URL a cell names, as a local run does: right for a training job's own
        dataset. A reward inside a service that takes other people's requests should pass
        ``ImageSources.shared()`` (inline images only: bytes, PIL images, ``data:`` URLs), widened
        with ``paths=True`` (with ``images_root`` to confine them) or ``urls=True`` (public
        addresses, each redirect re-checked; ``private_urls=True`` also private ones): a refused
        cell's reward is ``None``, its cause logged.
    judge_options:
        Options of :class:`capjudge.Judge` (``images_root``, ``batch_size``, ``system``,
        ``method_options``, ``backend_options``, ``preset``, image limits, ...).
    """
    chosen, owns = _options(method, backend, judge, cache, judge_options, remote, token)
    return CaptionReward(
        chosen, normalize=normalize, image_column=image_column, references_column=references_column, caption_from=caption_from, name=name, owns_judge=owns,
        image_sources=image_sources,
    )


def make_async_reward(
    method: str | None = None,
    backend: Any = None,
    *,
    judge: RewardJudge | None = None,
    normalize: bool = True,
    cache: bool | str | Path = False,
    image_column: str | None = None,
    references_column: str | None = "references",
    caption_from: CaptionFrom | None = None,
    name: str | None = None,
    remote: str | None = None,
    token: str | None = None,
    batch_window: float = 0.01,
    max_batch: int = 256,
    image_sources: ImageSources = LOCAL_SOURCES,
    **judge_options: Any,
) -> AsyncCaptionReward:
    """:func:`make_reward` as an ``async`` reward function (TRL awaits it). Concurrent calls that
    arrive within ``batch_window`` seconds are judged as one batch of at most ``max_batch``
    completions (sent at once when full); batches run one at a time in a worker thread. The URL
    images that ``image_sources`` fetches are downloaded in a thread, off the event loop."""
    chosen, owns = _options(method, backend, judge, cache, judge_options, remote, token)
    return AsyncCaptionReward(
        chosen, batch_window=batch_window, max_batch=max_batch, normalize=normalize, image_column=image_column,
        references_column=references_column, caption_from=caption_from, name=name, owns_judge=owns, image_sources=image_sources,
    )


__all__ = ["build_judge", "make_async_reward", "make_reward", "remote_judge"]
