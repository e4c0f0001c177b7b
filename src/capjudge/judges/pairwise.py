"""Pairwise A/B comparison (the GPT-4V evaluator paper): dual-sided voting, or single grading of both captions.

:class:`~capjudge.judges.judge.Judge` exposes these as ``Judge.compare`` and ``Judge.compare_many``.

Dual-sided: the pair is asked twice, (A, B) and (B, A); the second verdict is mapped back to the
original labels and the two are combined with :func:`~capjudge.judges.voting.dual_sided_vote`.
Grading: both captions are scored with the judge's method and the higher score wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from capjudge.backends.base import Request
from capjudge.backends.faults import failure_details
from capjudge.judges.voting import dual_sided_vote, flip, verdict_from_scores
from capjudge.parsing import parse_verdict
from capjudge.prompts.registry import TemplateError, get_template
from capjudge.types import ImageInput, PairResult, Sample, image_label, normalize_caption

if TYPE_CHECKING:
    from capjudge.judges.judge import Judge

CompareMode = Literal["pairwise", "grading"]

DEFAULT_PAIRWISE_TEMPLATE = "gpt4v_pairwise"


@dataclass(frozen=True)
class Pair:
    """Two captions of one image to compare; ``caption_a`` is shown first in the first order."""

    image: ImageInput
    caption_a: str
    caption_b: str
    references: tuple[str, ...] = ()
    id: str | None = None


def _as_pair(item: Pair | dict[str, Any] | tuple[Any, ...]) -> Pair:
    if isinstance(item, Pair):
        return item
    if isinstance(item, dict):
        refs = item.get("references") or ()
        return Pair(item["image"], item["caption_a"], item["caption_b"], (refs,) if isinstance(refs, str) else tuple(refs), item.get("id"))
    if isinstance(item, (tuple, list)):
        return Pair(*item)
    raise TypeError(f"a pair is a Pair, a dict or a tuple (image, caption_a, caption_b), not {type(item).__name__}")


def compare(
    judge: Judge,
    image: ImageInput,
    caption_a: str,
    caption_b: str,
    *,
    mode: CompareMode | None = None,
    references: Sequence[str] = (),
    id: str | None = None,
) -> PairResult:
    """Which caption describes the image better: ``"A"``, ``"B"`` or ``"tie"``.

    ``mode=None`` picks dual-sided ``"pairwise"`` for pairwise methods and ``"grading"`` (the
    higher single score wins, the GPT-4V evaluator paper) for scoring methods. Never raises for bad input.
    """
    return next(iter(judge.compare_many([Pair(image, caption_a, caption_b, tuple(references), id)], mode=mode)))


def compare_many(
    judge: Judge, pairs: Iterable[Pair | dict[str, Any] | tuple[Any, ...]], *, mode: CompareMode | None = None
) -> Iterator[PairResult]:
    """Compare many pairs, yielding results in input order (batched like ``score_many``)."""
    if mode is None:
        mode = "pairwise" if judge.method.kind == "pairwise" else "grading"
    if mode == "grading" and judge.method.kind != "score":
        raise ValueError(f"comparison by grading needs a scoring method, not {judge.method.name!r}")
    batch: list[tuple[int, Any]] = []
    for i, item in enumerate(pairs):
        batch.append((i, item))
        if len(batch) >= max(1, judge.batch_size // 2):
            yield from _compare_batch(judge, batch, mode)
            batch = []
    if batch:
        yield from _compare_batch(judge, batch, mode)


def _pair_result(judge: Judge, index: int, pair: Pair | None, raw_item: Any, mode: CompareMode, **fields: Any) -> PairResult:
    template = judge.method.template if (mode == "grading" or judge.method.kind == "pairwise") else DEFAULT_PAIRWISE_TEMPLATE
    return PairResult(
        id=(pair.id if pair and pair.id is not None else str(index)),
        image=image_label(pair.image) if pair else repr(raw_item)[:80],
        caption_a=pair.caption_a if pair else "",
        caption_b=pair.caption_b if pair else "",
        method=judge.method.name if mode == "grading" or judge.method.kind == "pairwise" else template,
        backend=judge.backend_spec,
        model=judge.backend.model,
        template_hash=judge.method.template_hash if mode == "grading" else get_template(template).hash,
        mode=mode,
        **fields,
    )


def _compare_batch(judge: Judge, batch: Sequence[tuple[int, Any]], mode: CompareMode) -> list[PairResult]:
    pairs: list[tuple[int, Pair | None, Any, str | None]] = []
    for i, item in batch:
        try:
            pairs.append((i, _as_pair(item), item, None))
        except (KeyError, TypeError, ValueError) as exc:
            pairs.append((i, None, item, f"pair {i}: malformed pair ({type(exc).__name__}: {exc})"))
    if mode == "grading":
        return _compare_by_grading(judge, pairs)
    return _compare_dual(judge, pairs)


def _compare_by_grading(judge: Judge, pairs: Sequence[tuple[int, Pair | None, Any, str | None]]) -> list[PairResult]:
    samples: list[Sample] = []
    for i, p, _, err in pairs:
        if p is not None and err is None:
            samples.append(Sample(p.image, p.caption_a, p.references, f"{p.id or i}:A"))
            samples.append(Sample(p.image, p.caption_b, p.references, f"{p.id or i}:B"))
    scored = iter(judge.score_many(samples))
    out = []
    for i, p, item, err in pairs:
        if p is None or err is not None:
            out.append(_pair_result(judge, i, p, item, "grading", verdict=None, status="error", error=err))
            continue
        ra, rb = next(scored), next(scored)
        verdict = verdict_from_scores(ra.score, rb.score)
        errors = [r.error for r in (ra, rb) if not r.ok]
        out.append(
            _pair_result(judge,
                i, p, item, "grading",
                verdict=verdict,
                scores=(ra.score, rb.score),
                raw=[ra.raw, rb.raw],
                status="ok" if verdict is not None else "error",
                error="; ".join(e for e in errors if e) or None,
                details={"smoothed": [ra.smoothed, rb.smoothed], **({"resumable": True} if any(r.details.get("resumable") for r in (ra, rb)) else {})},
            )
        )
    return out


def _compare_dual(judge: Judge, pairs: Sequence[tuple[int, Pair | None, Any, str | None]]) -> list[PairResult]:
    name = judge.method.template if judge.method.kind == "pairwise" else DEFAULT_PAIRWISE_TEMPLATE
    tpl = get_template(name)
    reqs: list[Request] = []
    images: dict[Any, Any] = {}  # each image read once per batch
    slots: list[tuple[int, Pair, Any]] = []
    errors: dict[int, str] = {}
    for i, p, item, err in pairs:
        if p is None or err is not None:
            errors[i] = err or f"pair {i}: malformed"
            continue
        prep_a = judge._prepare(i, Sample(p.image, p.caption_a, p.references, p.id), images)
        prep_b = judge._prepare(i, Sample(p.image, p.caption_b, p.references, p.id), images)
        bad = prep_a.error or prep_b.error
        if bad:
            errors[i] = bad.replace("empty caption", "empty caption in the pair")
            continue
        assert prep_a.image is not None
        norm_a, norm_b = normalize_caption(p.caption_a), normalize_caption(p.caption_b)
        try:
            prompts = [tpl.render(caption_a=first, caption_b=second, references=list(p.references)) for first, second in ((norm_a, norm_b), (norm_b, norm_a))]
        except TemplateError as exc:
            errors[i] = f"pair {p.id or i}: {exc}"
            continue
        for prompt in prompts:
            reqs.append(Request(judge._messages(prompt, prep_a.image), judge._config(judge.method.max_new_tokens if judge.method.kind == "pairwise" else 256, False)))
        slots.append((i, p, item))
    outs = judge._generate(reqs)
    by_index: dict[int, PairResult] = {}
    for k, (i, p, item) in enumerate(slots):
        o1, o2 = outs[2 * k], outs[2 * k + 1]
        failed = [o for o in (o1, o2) if isinstance(o, BaseException)]
        if failed:
            by_index[i] = _pair_result(judge, i, p, item, "pairwise", verdict=None, status="error", error=f"pair {p.id or i}: backend error: {type(failed[0]).__name__}: {failed[0]}", details=failure_details(failed[0]))
            continue
        t1, t2 = o1.text, o2.text  # type: ignore[union-attr]
        v1 = parse_verdict(t1)
        v2 = flip(parse_verdict(t2))
        votes = [v1, v2]
        if v1 is None or v2 is None:
            which = "first" if v1 is None else "second"
            by_index[i] = _pair_result(judge, i, p, item, "pairwise", verdict=None, votes=votes, raw=[t1, t2], status="error", error=f"pair {p.id or i}: no verdict in the {which} order's answer: {' '.join((t1 if v1 is None else t2).split())[:80]!r}")
            continue
        by_index[i] = _pair_result(judge, i, p, item, "pairwise", verdict=dual_sided_vote(v1, v2), votes=votes, raw=[t1, t2], details={"cached": [o1.cached, o2.cached]})  # type: ignore[union-attr]
    out = []
    for i, p, item, _ in pairs:
        out.append(by_index.get(i) or _pair_result(judge, i, p, item, "pairwise", verdict=None, status="error", error=errors.get(i, f"pair {i}: not judged")))
    return out
