"""The probe runner: judge each caption and its perturbations, and summarise per perturbation kind.

For every kind the summary says how often the judge **prefers the original** caption by score
(ties and failures counted separately, never folded into either side), the **mean score drop**
(original minus perturbed, also as % of the method's scale), optionally the same preference by
**dual-sided pairwise comparison** (the GPT-4V evaluator paper), and for the injection kinds the share of answers
that **obeyed** the caption (gave the injected score, or the canary word), next to the share of
answers to the clean captions that already did (the baseline).

Scoring methods score all captions in one ``score_many`` call (batched and grouped by image);
the listwise method gets one prompt per original caption listing it with its perturbations in a
seeded random order; pairwise methods (``gpt4v-pairwise``) can only be probed by comparison.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from capjudge.data.types import Sample, ScoreResult, image_label, normalize_caption
from capjudge.judges.pairwise import Pair
from capjudge.parsing import parse_score
from capjudge.probes.perturbations import PERTURBATIONS, PerturbOptions, perturb, resolve_kinds

if TYPE_CHECKING:
    from capjudge.data.io import ResultWriter
    from capjudge.judges.judge import Judge

Preference = Literal["original", "tie", "perturbed"]

INJECTION_KINDS = ("inject_score", "inject_text")


def format_target(high: float) -> str:
    """The top of a scale as a judge would write it: ``100`` for 0-100, ``1.0`` for 0-1."""
    return str(int(high)) if high > 1 and float(high).is_integer() else f"{high:.1f}"


@dataclass
class ProbePair:
    """One original caption and one perturbation of it, with what the judge made of both."""

    id: str
    image: str
    kind: str
    family: str
    original: str
    perturbed: str | None = None
    change: str | None = None
    reason: str | None = None  # why the perturbation did not apply
    score_original: float | None = None
    score_perturbed: float | None = None
    preference: Preference | None = None  # by score
    error: str | None = None  # why there is no preference by score
    verdict: Preference | None = None  # by dual-sided pairwise comparison
    pairwise_error: str | None = None
    obeyed: bool | None = None  # injection kinds only
    raw_perturbed: str | None = None

    @property
    def applicable(self) -> bool:
        """True when the perturbation applied to this caption."""
        return self.perturbed is not None


@dataclass
class KindSummary:
    """Per-kind statistics. Shares are fractions of the pairs where both captions were scored
    (``n_scored``); ties are neither a success nor a failure and are reported on their own."""

    kind: str
    family: str
    source: str
    n_captions: int = 0
    n_applicable: int = 0
    n_scored: int = 0
    prefer_original: int = 0
    ties: int = 0
    prefer_perturbed: int = 0
    n_errors: int = 0
    mean_drop: float | None = None
    mean_drop_pct: float | None = None
    pairwise: dict[str, Any] | None = None
    n_obeyed: int | None = None
    n_obedience_checked: int | None = None
    baseline_rate: float | None = None
    not_applicable: dict[str, int] = field(default_factory=dict)

    @property
    def n_not_applicable(self) -> int:
        """Captions the perturbation could not apply to."""
        return self.n_captions - self.n_applicable

    def share(self, count: int) -> float | None:
        """``count`` as a fraction of the scored pairs (``None`` when none was scored)."""
        return count / self.n_scored if self.n_scored else None

    @property
    def share_original(self) -> float | None:
        """Fraction of scored pairs where the original scored strictly higher."""
        return self.share(self.prefer_original)

    @property
    def share_ties(self) -> float | None:
        """Fraction of scored pairs with equal scores."""
        return self.share(self.ties)

    @property
    def share_perturbed(self) -> float | None:
        """Fraction of scored pairs where the perturbed caption scored strictly higher."""
        return self.share(self.prefer_perturbed)

    @property
    def obedience_rate(self) -> float | None:
        """Injection kinds: fraction of checked answers that did what the caption asked."""
        if not self.n_obedience_checked:
            return None
        return (self.n_obeyed or 0) / self.n_obedience_checked

    def to_dict(self) -> dict[str, Any]:
        """JSON form, with the derived shares."""
        d = asdict(self)
        d.update(
            n_not_applicable=self.n_not_applicable,
            share_original=self.share_original,
            share_ties=self.share_ties,
            share_perturbed=self.share_perturbed,
            obedience_rate=self.obedience_rate,
        )
        return d


@dataclass
class ProbeReport:
    """Everything a probe run found: per-kind summaries and every judged pair."""

    method: str
    backend: str
    model: str
    template_hash: str
    scale: tuple[float, float]
    seed: int
    kinds: list[str]
    n_captions: int
    summaries: list[KindSummary]
    pairs: list[ProbePair]
    clean_scores: dict[str, float | None]
    clean_errors: int
    by_score: bool
    by_pairwise: bool
    target: str
    canary: str

    def summary(self, kind: str) -> KindSummary:
        """The summary of one kind."""
        for s in self.summaries:
            if s.kind == kind:
                return s
        raise KeyError(kind)

    def to_dict(self, *, with_pairs: bool = True) -> dict[str, Any]:
        """JSON form (``with_pairs=False`` leaves out the per-pair records)."""
        d: dict[str, Any] = {
            "method": self.method,
            "backend": self.backend,
            "model": self.model,
            "template_hash": self.template_hash,
            "scale": list(self.scale),
            "seed": self.seed,
            "kinds": self.kinds,
            "n_captions": self.n_captions,
            "clean_errors": self.clean_errors,
            "by_score": self.by_score,
            "by_pairwise": self.by_pairwise,
            "injection": {"target": self.target, "canary": self.canary},
            "ties": "counted separately: share_original + share_ties + share_perturbed = 1 over the scored pairs",
            "summaries": [s.to_dict() for s in self.summaries],
        }
        if with_pairs:
            d["pairs"] = [asdict(p) for p in self.pairs]
        return d


# ----------------------------------------------------------------------------------- helpers
def _as_sample(item: Sample | dict[str, Any], index: int) -> Sample:
    if isinstance(item, Sample):
        return item if item.id is not None else Sample(item.image, item.caption, item.references, str(index))
    caption = item.get("caption")
    return Sample(
        image=item.get("image", "<missing>"),
        caption=caption if isinstance(caption, str) else "",
        references=tuple(item.get("references") or ()),
        id=str(item["id"]) if item.get("id") is not None else str(index),
    )


def _donor(samples: Sequence[Sample], i: int) -> str | None:
    """A caption of another image (else any other caption) for ``incoherent``: the next one, cyclically."""
    me = samples[i]
    n = len(samples)
    others = [samples[(i + k) % n] for k in range(1, n)]
    norm = normalize_caption(str(me.caption)).lower()
    for pick in (lambda s: image_label(s.image) != image_label(me.image), lambda s: True):
        for s in others:
            if isinstance(s.caption, str) and s.caption.strip() and normalize_caption(s.caption).lower() != norm and pick(s):
                return s.caption
    return None


def _prefer(a: float, b: float) -> Preference:
    return "original" if a > b else "perturbed" if b > a else "tie"


def _verdict(v: str | None) -> Preference | None:
    return {"A": "original", "B": "perturbed", "tie": "tie"}.get(v or "")  # type: ignore[return-value]


def _answer_value(res: ScoreResult, low: float, high: float) -> float | None:
    """The number the judge wrote (not the smoothed score), for the obedience check."""
    if res.raw_score is not None:
        return res.raw_score
    if res.status == "ok" and not res.smoothed:
        return res.score
    return parse_score(res.raw, low=low, high=high) if res.raw else None


def _contains_canary(answer: str | None, caption: str, canary: str) -> bool | None:
    """Does the answer say the canary word, not counting a quoted copy of the caption?"""
    if answer is None:
        return None
    text = answer.lower()
    text = text.replace(normalize_caption(caption).lower(), " ")
    return canary.lower() in text


def _obeyed(kind: str, res: ScoreResult, caption: str, target: float, canary: str, scale: tuple[float, float]) -> bool | None:
    if res.raw is None:
        return None
    if kind == "inject_score":
        v = _answer_value(res, *scale)
        return v is not None and math.isclose(v, target, abs_tol=1e-6 * (scale[1] - scale[0]))
    return _contains_canary(res.raw, caption, canary)


# ----------------------------------------------------------------------------------- runner
def run_probe(
    judge: Judge,
    samples: Iterable[Sample | dict[str, Any]],
    *,
    kinds: Iterable[str] | str | None = None,
    seed: int = 0,
    pairwise: bool = False,
    canary: str = "xyzzy",
    target: str | None = None,
    writer: ResultWriter | None = None,
) -> ProbeReport:
    """Probe ``judge`` with the perturbations ``kinds`` (default: all) of every sample's caption.

    ``pairwise`` also compares each original with its perturbation by dual-sided pairwise
    comparison (with the judge's backend and the default pairwise prompt); a pairwise method is
    probed that way only. ``target`` is the score the injection asks for (default: the top of the
    method's scale). ``writer`` receives every score record (with ``details["probe"]``). Bad
    samples and failed answers become counted errors; nothing here raises for them.
    """
    kinds_list = resolve_kinds(kinds)
    items = [_as_sample(s, i) for i, s in enumerate(samples)]
    method = judge.method
    low, high = method.scale
    target = target or format_target(high)
    by_score = method.kind in ("score", "listwise")
    by_pairwise = pairwise or method.pairwise

    pairs: list[ProbePair] = []
    per_sample: list[list[ProbePair]] = []
    for i, s in enumerate(items):
        opts = PerturbOptions(target=target, canary=canary, donor=_donor(items, i))
        row = []
        for kind in kinds_list:
            out = perturb(s.caption, kind, seed, opts)
            p = ProbePair(id=str(s.id), image=image_label(s.image), kind=kind, family=PERTURBATIONS[kind].family, original=s.caption)
            if out.applicable:
                p.perturbed, p.change = out.caption, out.change  # type: ignore[union-attr]
            else:
                p.reason = out.reason  # type: ignore[union-attr]
            row.append(p)
            pairs.append(p)
        per_sample.append(row)

    clean: dict[str, float | None] = {}
    clean_results: dict[str, ScoreResult] = {}
    clean_errors = 0
    if by_score:
        scored = _score(judge, items, per_sample, seed, writer)
        for s, row, (orig, perts) in zip(items, per_sample, scored):
            clean[str(s.id)] = orig.score if orig.ok else None
            clean_results[str(s.id)] = orig
            clean_errors += not orig.ok
            for p, res in zip([p for p in row if p.applicable], perts):
                p.score_original, p.score_perturbed, p.raw_perturbed = orig.score, res.score, res.raw
                if orig.ok and res.ok and orig.score is not None and res.score is not None:
                    p.preference = _prefer(orig.score, res.score)
                else:
                    p.error = orig.error if not orig.ok else res.error
                if p.kind in INJECTION_KINDS:
                    p.obeyed = _obeyed(p.kind, res, s.caption, float(target), canary, (low, high))
    if by_pairwise:
        todo = [p for p in pairs if p.applicable]
        by_id = {str(s.id): s for s in items}
        cmp = [Pair(by_id[p.id].image, p.original, p.perturbed or "", by_id[p.id].references, f"{p.id}:{p.kind}") for p in todo]
        for p, r in zip(todo, judge.compare_many(cmp, mode="pairwise")):
            p.verdict = _verdict(r.verdict) if r.ok else None
            p.pairwise_error = None if r.ok else r.error
            if p.kind == "inject_text" and not by_score and r.raw:
                p.obeyed = any(_contains_canary(t, p.original, canary) for t in r.raw if t is not None)

    summaries = [_summarise(kind, [p for p in pairs if p.kind == kind], method.scale, clean_results, float(target), canary, by_pairwise) for kind in kinds_list]
    return ProbeReport(
        method=method.name,
        backend=judge.backend_spec,
        model=judge.backend.model,
        template_hash=method.template_hash,
        scale=method.scale,
        seed=seed,
        kinds=kinds_list,
        n_captions=len(items),
        summaries=summaries,
        pairs=pairs,
        clean_scores=clean,
        clean_errors=clean_errors,
        by_score=by_score,
        by_pairwise=by_pairwise,
        target=target,
        canary=canary,
    )


@contextmanager
def whole_lists(judge: Judge, n: int) -> Iterator[None]:
    """Let one ``score_many`` batch hold ``n`` samples, so that a listwise prompt is never split."""
    old = judge.batch_size
    judge.batch_size = max(old, n)
    try:
        yield
    finally:
        judge.batch_size = old


def _tag(res: ScoreResult, sample_id: str, kind: str | None) -> ScoreResult:
    res.details["probe"] = {"of": sample_id, "kind": kind or "original"}
    return res


def _score(judge: Judge, items: Sequence[Sample], per_sample: Sequence[Sequence[ProbePair]], seed: int, writer: ResultWriter | None) -> list[tuple[ScoreResult, list[ScoreResult]]]:
    """(original result, results of the applicable perturbations) per sample."""
    out: list[tuple[ScoreResult, list[ScoreResult]]] = []
    if judge.method.kind == "listwise":
        for s, row in zip(items, per_sample):
            texts = [s.caption] + [p.perturbed or "" for p in row if p.applicable]
            order = list(range(len(texts)))
            random.Random(f"{seed}:{s.id}").shuffle(order)  # no fixed slot for the original
            batch = [Sample(s.image, texts[k], s.references, f"{s.id}:{k}") for k in order]
            with whole_lists(judge, len(batch)):
                got = dict(zip(order, judge.score_many(batch)))
            results = [got[k] for k in range(len(texts))]
            out.append((results[0], results[1:]))
    else:
        batch = []
        for s, row in zip(items, per_sample):
            batch.append(Sample(s.image, s.caption, s.references, str(s.id)))
            batch.extend(Sample(s.image, p.perturbed or "", s.references, f"{s.id}:{p.kind}") for p in row if p.applicable)
        stream = iter(judge.score_many(batch))
        for row in per_sample:
            orig = next(stream)
            out.append((orig, [next(stream) for p in row if p.applicable]))
    if writer is not None:
        for s, row, (orig, perts) in zip(items, per_sample, out):
            writer.write(_tag(orig, str(s.id), None))
            for p, r in zip([p for p in row if p.applicable], perts):
                writer.write(_tag(r, str(s.id), p.kind))
    return out


def _summarise(kind: str, rows: Sequence[ProbePair], scale: tuple[float, float], clean: dict[str, ScoreResult], target: float, canary: str, by_pairwise: bool) -> KindSummary:
    spec = PERTURBATIONS[kind]
    s = KindSummary(kind=kind, family=spec.family, source=spec.source, n_captions=len(rows))
    applicable = [p for p in rows if p.applicable]
    s.n_applicable = len(applicable)
    s.not_applicable = dict(Counter(p.reason or "?" for p in rows if not p.applicable).most_common())
    drops = []
    for p in applicable:
        if p.preference is None:
            s.n_errors += p.error is not None
            continue
        s.n_scored += 1
        s.prefer_original += p.preference == "original"
        s.ties += p.preference == "tie"
        s.prefer_perturbed += p.preference == "perturbed"
        drops.append((p.score_original or 0.0) - (p.score_perturbed or 0.0))
    if drops:
        s.mean_drop = statistics.fmean(drops)
        s.mean_drop_pct = 100.0 * s.mean_drop / (scale[1] - scale[0])
    if by_pairwise:
        verdicts = Counter(p.verdict for p in applicable if p.verdict is not None)
        n = sum(verdicts.values())
        s.pairwise = {
            "n_compared": n,
            "prefer_original": verdicts["original"],
            "ties": verdicts["tie"],
            "prefer_perturbed": verdicts["perturbed"],
            "n_errors": sum(p.pairwise_error is not None for p in applicable),
            "share_original": verdicts["original"] / n if n else None,
            "share_ties": verdicts["tie"] / n if n else None,
        }
    if kind in INJECTION_KINDS:
        checked = [p.obeyed for p in applicable if p.obeyed is not None]
        s.n_obedience_checked = len(checked)
        s.n_obeyed = sum(checked)
        base = [_obeyed(kind, clean[p.id], p.original, target, canary, scale) for p in applicable if p.id in clean]
        base_ok = [b for b in base if b is not None]
        s.baseline_rate = sum(base_ok) / len(base_ok) if base_ok else None
    return s


# ----------------------------------------------------------------------------------- hardening
@dataclass
class HardeningComparison:
    """A method and its hardened variant on the same probe: injection obedience and clean grading."""

    plain: str
    hardened: str
    obedience: dict[str, dict[str, float | None]]  # kind -> {plain, hardened}
    prefer_original: dict[str, dict[str, float | None]]  # non-injection kinds -> {plain, hardened}
    clean_mean: dict[str, float | None]  # method -> mean clean score (% of scale)
    clean_pearson: float | None  # agreement of the two methods on the clean captions
    clean_mean_abs_diff_pct: float | None
    n_clean_both: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def _pct(v: float, scale: tuple[float, float]) -> float:
    return 100.0 * (v - scale[0]) / (scale[1] - scale[0])


def compare_hardening(plain: ProbeReport, hardened: ProbeReport) -> HardeningComparison:
    """Compare two probe reports on the same captions (a method and its hardened variant)."""
    obedience = {}
    prefer = {}
    for k in plain.kinds:
        if k not in hardened.kinds:
            continue
        a, b = plain.summary(k), hardened.summary(k)
        if k in INJECTION_KINDS:
            obedience[k] = {"plain": a.obedience_rate, "hardened": b.obedience_rate, "plain_baseline": a.baseline_rate, "hardened_baseline": b.baseline_rate}
        else:
            prefer[k] = {"plain": a.share_original, "hardened": b.share_original}
    ids = [i for i in plain.clean_scores if plain.clean_scores[i] is not None and hardened.clean_scores.get(i) is not None]
    xs = [_pct(plain.clean_scores[i], plain.scale) for i in ids]  # type: ignore[arg-type]
    ys = [_pct(hardened.clean_scores[i], hardened.scale) for i in ids]  # type: ignore[arg-type]
    pearson = None
    if len(ids) >= 3 and statistics.pstdev(xs) > 0 and statistics.pstdev(ys) > 0:
        pearson = statistics.correlation(xs, ys)
    return HardeningComparison(
        plain=plain.method,
        hardened=hardened.method,
        obedience=obedience,
        prefer_original=prefer,
        clean_mean={plain.method: statistics.fmean(xs) if xs else None, hardened.method: statistics.fmean(ys) if ys else None},
        clean_pearson=pearson,
        clean_mean_abs_diff_pct=statistics.fmean(abs(x - y) for x, y in zip(xs, ys)) if ids else None,
        n_clean_both=len(ids),
    )
