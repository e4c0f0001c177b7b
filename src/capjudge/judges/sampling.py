"""The G-Eval sampling estimate: a judge's expected score from N answers sampled at temperature 1,
for answers that carry no log-probabilities (the FLEUR paper, Sec. 5.2.2).

A judge built with ``estimate_by_sampling=N`` (``Judge(..., estimate_by_sampling=N)`` or the backend
option ``--backend-opt estimate_by_sampling=N``) asks, for every scoring answer of a smoothing
method that came back without usable log-probabilities (refused by the server, or missing), N more
answers to the same request at temperature 1 without log-probabilities, each with its own
``sample_index`` (so each is cached), through its backend, whatever its kind. The estimate goes into
the answer's ``meta["sampling_estimate"]`` (the record's ``details.backend_meta.sampling_estimate``),
and the judge's score is its ``mean``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from capjudge.backends.base import Backend, Completion, GenerationConfig, Request
from capjudge.backends.options import as_int
from capjudge.judges.dispatch import Answer, Callback
from capjudge.judges.reasoning import answer_text
from capjudge.judges.smoothing import SCORE_PATTERN
from capjudge.parsing import parse_score

OPTION = "estimate_by_sampling"
"""The backend option (``--backend-opt estimate_by_sampling=N``) that the judge takes for itself."""


def fleur_score(text: str) -> float | None:
    """The 0.0-1.0 score of an answer (the default parser of sampling estimates)."""
    return parse_score(text, low=0.0, high=1.0)


def sampling_requests(request: Request, n: int, *, temperature: float = 1.0) -> list[Request]:
    """``n`` copies of ``request`` sampled at ``temperature`` without logprobs, each with its own
    ``sample_index`` (so each is cached separately)."""
    cfg: GenerationConfig = replace(request.config, temperature=temperature, top_logprobs=0, n=1)
    return [replace(request, config=cfg, sample_index=i) for i in range(n)]


@dataclass
class SamplingEstimate:
    """A score distribution estimated from sampled answers (G-Eval: ``sum p(s) * s``).

    ``mean`` is the average parsed score; ``first``/``second`` the empirical distributions of the
    first and second decimal digits over answers written as ``0.xy`` (FLEUR's format); ``calls`` the
    number of calls made (the cost, with ``cost_usd`` when the price is known).
    """

    n: int
    scores: list[float | None] = field(default_factory=list)
    mean: float | None = None
    first: list[float] | None = None
    second: list[float] | None = None
    calls: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None

    @classmethod
    def from_outputs(cls, outputs: Sequence[Completion | BaseException], parse: Callable[[str], float | None] = fleur_score) -> SamplingEstimate:
        """Summarise sampled completions (errors are counted, not fatal)."""
        est = cls(n=len(outputs))
        firsts: list[int] = []
        seconds: list[int] = []
        costs: list[float] = []
        for out in outputs:
            if isinstance(out, BaseException):
                est.errors += 1
                est.scores.append(None)
                continue
            if not out.cached:
                est.calls += 1
            if out.usage:
                est.prompt_tokens += out.usage.prompt_tokens
                est.completion_tokens += out.usage.completion_tokens
            if isinstance(out.meta.get("cost_usd"), (int, float)):
                costs.append(float(out.meta["cost_usd"]))
            text = answer_text(out)  # the final answer, after any reasoning
            est.scores.append(parse(text))
            m = SCORE_PATTERN.search(text or "")
            if m and m.group(1) == "0":
                firsts.append(int(m.group(2)))
                if m.group(3) is not None:
                    seconds.append(int(m.group(3)))
        parsed = [s for s in est.scores if s is not None]
        est.mean = sum(parsed) / len(parsed) if parsed else None
        est.first = [firsts.count(d) / len(firsts) for d in range(10)] if firsts else None
        est.second = [seconds.count(d) / len(seconds) for d in range(10)] if seconds else None
        est.cost_usd = sum(costs) if costs else None
        return est

    def to_dict(self) -> dict[str, Any]:
        """JSON form (stored in ``Completion.meta["sampling_estimate"]``)."""
        return asdict(self)


def estimate_by_sampling(backend: Backend, request: Request, n: int = 20, *, temperature: float = 1.0, parse: Callable[[str], float | None] = fleur_score) -> SamplingEstimate:
    """Estimate a judge's score distribution by sampling ``n`` answers at ``temperature`` (G-Eval,
    the FLEUR paper Sec. 5.2.2): the fallback for models that give no log-probabilities. Costs ``n`` calls
    (fewer when a :class:`~capjudge.backends.cache.CachedBackend` holds some)."""
    return SamplingEstimate.from_outputs(backend.generate(sampling_requests(request, n, temperature=temperature)), parse)


# -- in a judge's run ------------------------------------------------------------------------------
def take_option(options: dict[str, Any]) -> int:
    """Remove ``estimate_by_sampling`` from backend ``options`` and return it as N (0: none);
    :class:`~capjudge.backends.options.OptionError` for a value that is not an integer."""
    return as_count(options.pop(OPTION, None))


def as_count(value: Any) -> int:
    """``estimate_by_sampling``'s N from an option value (``None``, ``""``, 0 or less: none)."""
    return max(0, as_int(value, OPTION) or 0)


def has_logprobs(out: Completion) -> bool:
    """Whether the answer carries token log-probabilities that smoothing can read."""
    return any(step.top or step.digits is not None for step in out.steps)


def wants_estimate(request: Request, out: Completion, n: int) -> bool:
    """Whether the answer to ``request`` is estimated by sampling: N > 0, the request asked for
    log-probabilities (a smoothing method's score), the answer has none (refused by the server or
    missing) and no estimate yet (an answer of an older capjudge, whose backend made it)."""
    return n > 0 and request.config.top_logprobs > 0 and not has_logprobs(out) and "sampling_estimate" not in (out.meta or {})


def with_estimate(out: Completion, samples: Sequence[Completion | BaseException], parse: Callable[[str], float | None] = fleur_score) -> Completion:
    """``out`` with the estimate of ``samples`` (each read by ``parse``) in ``meta["sampling_estimate"]``."""
    return replace(out, meta={**(out.meta or {}), "sampling_estimate": SamplingEstimate.from_outputs(samples, parse).to_dict()})


def ask_estimate(add: Callable[[Request, Callback], None], request: Request, out: Completion, n: int, then: Callback, parse: Callable[[str], float | None] = fleur_score) -> None:
    """Queue ``n`` sampled copies of ``request`` with ``add`` (an executor's); once all are
    answered, ``then`` gets ``out`` with their estimate (:func:`with_estimate`; ``parse`` reads a
    sampled answer's score: the method's reader for ``score=expected``)."""
    samples = sampling_requests(request, n)
    got: list[Answer | None] = [None] * len(samples)

    def answered(k: int, answer: Answer) -> None:
        got[k] = answer
        if all(a is not None for a in got):
            then(with_estimate(out, [a for a in got if a is not None], parse))

    for k, sample in enumerate(samples):
        add(sample, functools.partial(answered, k))


__all__ = [
    "OPTION",
    "SamplingEstimate",
    "as_count",
    "ask_estimate",
    "estimate_by_sampling",
    "fleur_score",
    "has_logprobs",
    "sampling_requests",
    "take_option",
    "wants_estimate",
    "with_estimate",
]
