"""Caption judges as reward functions for reinforcement learning (TRL's ``GRPOTrainer`` and any
trainer with its reward-function signature).

>>> from capjudge.reward import make_reward
>>> reward = make_reward("fleur", "hf:llava-hf/llava-1.5-7b-hf")     # doctest: +SKIP
>>> reward(prompts=["Describe the image."], completions=["two cats on a bed"],
...        image=["cats.jpg"])                                       # doctest: +SKIP
[0.71]

Modules, one job each: :mod:`~capjudge.reward.factory` (:func:`make_reward`,
:func:`make_async_reward`: the judge built once), :mod:`~capjudge.reward.core` (the callables:
normalising, ``None`` for what cannot be judged, one log line per cause),
:mod:`~capjudge.reward.inputs` (completions and image columns into samples),
:mod:`~capjudge.reward.batching` (concurrent async calls gathered into one batch).
"""

from __future__ import annotations

from capjudge.core.lazyexport import lazy_attributes

_LAZY = {
    "make_reward": "capjudge.reward.factory",
    "make_async_reward": "capjudge.reward.factory",
    "CaptionReward": "capjudge.reward.core",
    "AsyncCaptionReward": "capjudge.reward.core",
    "RewardJudge": "capjudge.reward.core",
    "ImageSources": "capjudge.data.imagesources",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
