"""How sure a judge is of one judgment (method option ``confidence=on``): ``details.confidence``
and the rule that gave it, ``details.confidence_rule``, on every record.

Pair verdicts (rule ``logprobs``): the answer's verdict is decided at one token (``"A"`` in
``[[A]]``, ``"1"`` in ``Answer 1``, ``"Tie"``). That token is found as the last one (of the last
:data:`MAX_CANDIDATES` tokens that spell a label) whose swap for another label (A for B, 1 for 2,
first for second, ...) changes what the method's reader reads. Each alternative the backend gave at
that token is put in its place and read by the method's reader; the probabilities of the
alternatives read as ``A``, ``B`` or ``tie`` are added up per verdict and renormalised over their
sum (``verdict_mass``). One order: the confidence is the probability of the record's verdict.
Both orders (dual-sided): the two orders' distributions (mapped back to the original labels) are
taken as independent and the confidence is the probability that the dual-sided vote
(:func:`capjudge.judges.voting.dual_sided_vote`) gives the record's verdict,
``sum over (v1, v2) with vote(v1, v2) = verdict of p1(v1) * p2(v2)``; ``order_agreement`` is the
probability that the two orders say the same, ``sum_v p1(v) * p2(v)``.

Without log-probabilities (rule ``sampling``, ``estimate_by_sampling=N``): each order's distribution
is the share of its N sampled answers (temperature 1) that read as each verdict (answers without a
verdict left out), combined as above: one order, the share of sampled answers agreeing with the
verdict (Trust or Escalate's simulated annotators). A panel's records (rule ``panel``): the share of
its answering judges whose verdict is the panel's.

Scores: ``score_sd``, the standard deviation of the score's distribution at the printed number's
tokens (:mod:`capjudge.judges.expected`'s distribution, on the method's scale), and ``confidence``,
the probability of the printed number itself; by sampling, the standard deviation of the sampled
scores and the share of them equal to the printed one. The distribution itself is kept as
``score_distribution`` (``[value, probability]`` pairs, up to :data:`MAX_STORED_VALUES`). A pair
by grading: the probability of its verdict under the two captions' distributions (independent):
P(score A > score B) for ``A``, P(score B > score A) for ``B``, P(equal) for ``tie``.

A record whose confidence cannot be taken says why in ``details.confidence_missing``
(``confidence`` and ``confidence_rule`` are then ``null``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from capjudge.backends.base import Completion, Request, TokenStep
from capjudge.judges.dispatch import Answer, Callback
from capjudge.judges.expected import (
    Expected,
    Printed,
    expected_score,
    has_logprobs,
    printed_by_rules,
    printed_first_integer,
)
from capjudge.judges.reasoning import answer_text
from capjudge.judges.sampling import sampling_requests
from capjudge.judges.smoothing import decoded_steps, token_text
from capjudge.judges.voting import VERDICTS, dual_sided_vote, flip
from capjudge.parsing import parse_score_details
from capjudge.prompts.registry import Method

LOGPROBS = "logprobs"
SAMPLING = "sampling"
PANEL = "panel"

MAX_CANDIDATES = 16
"""How many label tokens, from the end of the answer, are tried as the verdict's token."""

_SWAPS: dict[str, str] = {
    "a": "b", "b": "a", "c": "a", "1": "2", "2": "1",
    "first": "second", "second": "first", "former": "latter", "latter": "former",
    "tie": "a", "tied": "a",
}  # fmt: skip
_CORE = re.compile(r"[A-Za-z0-9]+")

VerdictReader = Callable[[str], Any]
"""A method's verdict reader: ``"A"`` / ``"B"`` / ``"tie"`` or ``None`` from an answer's text."""


@dataclass(frozen=True)
class VerdictProbs:
    """One order's verdict distribution on the captions as shown (``A``, ``B``, ``tie``, summing
    to 1), the share of the alternatives (or sampled answers) it stands on, and its rule."""

    probs: dict[str, float]
    mass: float
    rule: str

    def flipped(self) -> VerdictProbs:
        """The distribution with A and B swapped (an order with the captions swapped, mapped back)."""
        return VerdictProbs({v: self.probs[flip(v) or v] for v in VERDICTS}, self.mass, self.rule)


def _swapped(token: str) -> str | None:
    """``token`` with its label swapped for another (case kept), or ``None`` when it is no label."""
    text = token_text(token)
    m = _CORE.search(text)
    if m is None or _CORE.search(text, m.end()) is not None:
        return None
    core = m.group()
    other = _SWAPS.get(core.lower())
    if other is None:
        return None
    if core.isupper():
        other = other.upper()
    elif core[0].isupper():
        other = other.capitalize()
    return text[: m.start()] + other + text[m.end() :]


def verdict_probs(steps: Sequence[TokenStep], read: VerdictReader, verdict: str) -> VerdictProbs | str:
    """The verdict distribution of an answer's token ``steps`` (module doc), or why there is none."""
    if not any(s.top for s in steps):
        return "the answer has no token log-probabilities"
    text, owner, _ = decoded_steps(steps)
    if read(text) != verdict:
        return "the answer's tokens do not spell the verdict read from its text"
    spans: dict[int, list[int]] = {}
    for pos, k in enumerate(owner):
        spans.setdefault(k, [pos, pos])[1] = pos + 1
    tried = 0
    for k in sorted(spans, reverse=True):
        swap = _swapped(steps[k].token)
        if swap is None:
            continue
        start, end = spans[k]
        if read(text[:start] + swap + text[end:]) != verdict:
            return _at_step(steps[k], functools.partial(_read_with, read, text[:start], text[end:]), verdict)
        tried += 1
        if tried >= MAX_CANDIDATES:
            break
    return "no token of the answer decides its verdict (no label whose swap changes the reading)"


def _read_with(read: VerdictReader, head: str, tail: str, token: str) -> Any:
    """The verdict of the answer with ``token`` in place of the verdict's token."""
    return read(head + token_text(token) + tail)


def _at_step(step: TokenStep, read_with: Callable[[str], Any], verdict: str) -> VerdictProbs | str:
    items = list(step.top)
    if step.logprob is not None and step.token not in {tok for tok, _ in items}:
        items.append((step.token, step.logprob))
    if not items:
        return "the verdict's token carries no alternatives"
    weights = dict.fromkeys(VERDICTS, 0.0)
    for tok, lp in items:
        label = read_with(tok)
        if label in weights:
            weights[label] += math.exp(lp)
    mass = sum(weights.values())
    if mass <= 0.0 or weights[verdict] <= 0.0:
        return "no alternative at the verdict's token is read as the verdict"
    return VerdictProbs({v: w / mass for v, w in weights.items()}, mass, LOGPROBS)


def sampled_probs(verdicts: Sequence[Any]) -> VerdictProbs | str:
    """The share of sampled answers read as each verdict (answers without one left out)."""
    read = [v for v in verdicts if v in VERDICTS]
    if not read:
        return f"none of the {len(verdicts)} sampled answers held a verdict"
    return VerdictProbs({v: read.count(v) / len(read) for v in VERDICTS}, len(read) / len(verdicts), SAMPLING)


def pair_fields(orders: Sequence[VerdictProbs | str], verdict: str) -> dict[str, Any]:
    """The ``details`` fields of a pair record from its orders' distributions (mapped back to the
    original labels): ``confidence``, ``confidence_rule``, ``verdict_probs``, ``verdict_mass`` and,
    for two orders, ``order_agreement``; or ``confidence_missing`` naming the order at fault."""
    for k, o in enumerate(orders):
        if isinstance(o, str):
            which = "the answer" if len(orders) == 1 else ("the first order's answer", "the second order's answer")[k]
            return missing(f"{which}: {o}")
    dists = [o for o in orders if isinstance(o, VerdictProbs)]
    rules = sorted({d.rule for d in dists})
    fields: dict[str, Any] = {
        "confidence": vote_probability([d.probs for d in dists], verdict),
        "confidence_rule": "+".join(rules),
        "verdict_probs": [d.probs for d in dists],
        "verdict_mass": [d.mass for d in dists],
    }
    if len(dists) == 2:
        fields["order_agreement"] = sum(dists[0].probs[v] * dists[1].probs[v] for v in VERDICTS)
    return fields


def vote_probability(dists: Sequence[Mapping[str, float]], verdict: str) -> float:
    """The probability of ``verdict``: one order's own, or for two orders taken as independent the
    probability that their dual-sided vote gives it."""
    if len(dists) == 1:
        return float(dists[0][verdict])
    p1, p2 = dists
    return float(sum(p1[a] * p2[b] for a in VERDICTS for b in VERDICTS if dual_sided_vote(a, b) == verdict))


def missing(why: str) -> dict[str, Any]:
    """The fields of a record whose confidence cannot be taken."""
    return {"confidence": None, "confidence_rule": None, "confidence_missing": why}


def panel_fields(verdict: str, verdicts: Sequence[Any]) -> dict[str, Any]:
    """A panel's pair record: the share of its answering judges whose verdict is the panel's."""
    said = [v for v in verdicts if v in VERDICTS]
    if not said:
        return missing("no judge of the panel gave a verdict")
    return {"confidence": sum(v == verdict for v in said) / len(said), "confidence_rule": PANEL}


def score_fields_from_distribution(expected: Expected) -> dict[str, Any]:
    """A score record's ``score_sd`` and ``confidence`` from the distribution at its printed number."""
    dist = expected.distribution
    if not dist:
        return missing("the printed number has too many digits to spell out its distribution")
    mean = sum(v * p for v, p in dist)
    var = sum(p * (v - mean) ** 2 for v, p in dist)
    fields = {"confidence": expected.printed_probability, "confidence_rule": LOGPROBS, "score_sd": math.sqrt(max(var, 0.0))}
    return {**fields, **_stored(dist)}


MAX_STORED_VALUES = 1000
"""The most values of a score's distribution a record keeps (``details.score_distribution``)."""


def _stored(dist: Sequence[tuple[float, float]]) -> dict[str, Any]:
    return {"score_distribution": [[v, p] for v, p in dist]} if len(dist) <= MAX_STORED_VALUES else {}


def score_fields_from_samples(scores: Sequence[Any], printed: float | None) -> dict[str, Any]:
    """A score record's ``score_sd`` (population) and ``confidence`` (share equal to ``printed``)
    from the scores of its sampled answers (those without a score left out)."""
    vals = [float(s) for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]
    if not vals:
        return missing(f"none of the {len(scores)} sampled answers held a score")
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    conf = None if printed is None else sum(math.isclose(v, printed, rel_tol=1e-9, abs_tol=1e-12) for v in vals) / len(vals)
    counts: dict[float, int] = {}
    for v in vals:
        counts[v] = counts.get(v, 0) + 1
    return {"confidence": conf, "confidence_rule": SAMPLING, "score_sd": sd, **_stored(sorted((v, c / len(vals)) for v, c in counts.items()))}


def graded_fields(a: Mapping[str, Any], b: Mapping[str, Any], verdict: str) -> dict[str, Any]:
    """A pair record by grading from its two score records' ``details``: the probability of its
    verdict under the two score distributions taken as independent (``A``: P(score A > score B),
    ``B``: P(score B > score A), ``tie``: P(equal)), and both scores' ``score_sd``."""
    dists = []
    for side, d in (("A", a), ("B", b)):
        dist = d.get("score_distribution")
        if not isinstance(dist, list) or not dist:
            return missing(f"caption {side}'s score has no distribution ({d.get('confidence_missing') or 'too many values to keep'})")
        dists.append([(float(v), float(p)) for v, p in dist])
    da, db = dists
    total = {"A": 0.0, "B": 0.0, "tie": 0.0}
    for x, p in da:
        for y, q in db:
            total["A" if x > y else "B" if y > x else "tie"] += p * q
    rules = sorted({str(a.get("confidence_rule")), str(b.get("confidence_rule"))})
    return {"confidence": total[verdict], "confidence_rule": "+".join(rules), "score_sd": [a.get("score_sd"), b.get("score_sd")]}


NO_LOGPROBS = "the backend gave no token log-probabilities (estimate_by_sampling=N asks N sampled answers instead)"


def printed_number(method: Method, text: str) -> Printed | str:
    """The number the method's reader printed in ``text`` (capjudge's rules or the first integer)."""
    low, high = method.scale
    if method.parser == "first-integer":
        return printed_first_integer(text, low, high)
    parsed = parse_score_details(text, low=low, high=high, answer_form=method.options.get("answer_form", "decimal"))
    return printed_by_rules(text, parsed, low, high)


def score_fields(method: Method, out: Completion, raw_score: float | None) -> dict[str, Any]:
    """A score record's confidence fields: from the distribution at the printed number's tokens of
    the (final) answer ``out``, else from its sampling estimate, else why not."""
    if has_logprobs(out):
        printed = printed_number(method, out.text)
        got = printed if isinstance(printed, str) else expected_score(out.steps, printed)
        return missing(got) if isinstance(got, str) else score_fields_from_distribution(got)
    est = (out.meta or {}).get("sampling_estimate")
    if isinstance(est, dict):
        return score_fields_from_samples(est.get("scores") or [], raw_score)
    return missing(NO_LOGPROBS)


SAMPLED_VERDICTS = "sampled_verdicts"
"""``Completion.meta`` key: the verdicts of the answer's sampled copies, on the captions as shown."""


def ask_verdicts(add: Callable[[Request, Callback], None], request: Request, out: Completion, n: int, then: Callback, read: VerdictReader) -> None:
    """Queue ``n`` copies of ``request`` sampled at temperature 1 (:func:`capjudge.judges.sampling.sampling_requests`);
    once all are answered, ``then`` gets ``out`` with their verdicts in ``meta["sampled_verdicts"]``
    (``None`` for a failed or unreadable one)."""
    samples = sampling_requests(request, n)
    got: list[Answer | None] = [None] * len(samples)

    def answered(k: int, answer: Answer) -> None:
        got[k] = answer
        if all(a is not None for a in got):
            verdicts = [read(answer_text(a)) if isinstance(a, Completion) else None for a in got]
            then(replace(out, meta={**(out.meta or {}), SAMPLED_VERDICTS: verdicts}))

    for k, sample in enumerate(samples):
        add(sample, functools.partial(answered, k))


def order_probs(out: Completion, steps: Sequence[TokenStep], read: VerdictReader, shown: str) -> VerdictProbs | str:
    """One order's verdict distribution on the captions as shown: from the answer's final ``steps``
    when they carry log-probabilities, else from its sampled copies (:func:`ask_verdicts`), else why not."""
    if any(s.top for s in steps):
        return verdict_probs(steps, read, shown)
    sampled = (out.meta or {}).get(SAMPLED_VERDICTS)
    if isinstance(sampled, list):
        return sampled_probs(sampled)
    return NO_LOGPROBS


__all__ = [
    "LOGPROBS",
    "SAMPLED_VERDICTS",
    "ask_verdicts",
    "order_probs",
    "MAX_CANDIDATES",
    "PANEL",
    "SAMPLING",
    "VerdictProbs",
    "VerdictReader",
    "MAX_STORED_VALUES",
    "graded_fields",
    "missing",
    "pair_fields",
    "panel_fields",
    "sampled_probs",
    "NO_LOGPROBS",
    "printed_number",
    "score_fields",
    "score_fields_from_distribution",
    "score_fields_from_samples",
    "verdict_probs",
    "vote_probability",
]
