"""Choose one of N (the Cobra-effect paper, Sec. 4.4, the "Flaws Caption" benchmark): can the judge pick a true
caption out of a set where some captions are flawed?

Each group is one image with its true captions (ground truth) and flawed ones. The judge ranks all
candidates; the group counts as solved when the top-ranked candidate is a true caption. Two ways to
rank: the **listwise** method (the Cobra-effect paper, Fig. 4: all candidates in one prompt, one 0-1 score each)
and **per-caption scoring** with any scoring method (the higher score ranks first). Candidates are
shown in a seeded random order so that no true caption has a fixed slot.

Ties at the top are scored as a random tie-break would be, in expectation: with ``k`` candidates
tied for first of which ``t`` are true, the group counts ``t / k`` (``accuracy``); ``strict_accuracy``
counts only a unique true winner. A group in which any candidate could not be scored is an error
(counted, left out of the accuracies). Seed 002 built its flawed captions from the outputs of
captioners optimised against metrics; :func:`build_groups` stands in for that with this package's
fluency perturbations (repetition, truncation, incoherent run-ons) of the true captions.
"""

from __future__ import annotations

import random
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from capjudge.core.redact import stable
from capjudge.data.rowtext import FieldError, text_value
from capjudge.data.types import ImageInput, Sample, image_label, normalize_caption
from capjudge.probes.perturbations import DEFAULT_FLAW_KINDS, PerturbOptions, perturb, resolve_kinds
from capjudge.probes.runner import whole_lists

if TYPE_CHECKING:
    from capjudge.judges.judge import Judge

@dataclass(frozen=True)
class ChoiceGroup:
    """One image, its true captions and its flawed captions."""

    image: ImageInput
    true: tuple[str, ...]
    flawed: tuple[str, ...]
    id: str = ""
    kinds: tuple[str, ...] = ()  # how each flawed caption was made, when known


@dataclass
class ChoiceOutcome:
    """How the judge ranked one group."""

    id: str
    image: str
    candidates: list[str]
    is_true: list[bool]
    scores: list[float | None]
    top: list[int] = field(default_factory=list)  # indices tied for first
    correct: float | None = None  # expected under a random tie-break
    strict: bool | None = None
    error: str | None = None
    causes: list[str] = field(default_factory=list, repr=False)  # each failed candidate's cause

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``causes`` are summed up in the report's ``error_causes``)."""
        d = asdict(self)
        d.pop("causes")
        return d


TOP_CAUSES = 5
_SAMPLE_PREFIX = re.compile(r"^(?:sample|group) .*?: (?:backend error: )?")


def error_cause(error: str | None) -> str:
    """A candidate's error without the sample it names, so that equal causes count together."""
    return _SAMPLE_PREFIX.sub("", stable(error or "unknown cause")).strip() or "unknown cause"


@dataclass
class ChooseOneReport:
    """Accuracy of a judge at putting a true caption first (accuracies in %)."""

    method: str
    mode: str  # "listwise" or "scoring"
    backend: str
    model: str
    template_hash: str
    seed: int
    n_groups: int
    n_scored: int
    n_errors: int
    accuracy: float | None
    strict_accuracy: float | None
    ties_at_top: int
    chance: float | None
    outcomes: list[ChoiceOutcome]
    # Why groups were not ranked: each failed candidate's cause and how often it came up, most
    # common first (at most ``TOP_CAUSES``).
    error_causes: dict[str, int] = field(default_factory=dict)

    def to_dict(self, *, with_groups: bool = True) -> dict[str, Any]:
        """JSON form."""
        d = asdict(self)
        d["outcomes"] = [o.to_dict() for o in self.outcomes]
        if not with_groups:
            d.pop("outcomes")
        return d


def _as_tuple(value: Any, field: str) -> tuple[str, ...]:
    """Text or a list of texts; anything else (NaN, a number, an object) raises FieldError."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if not isinstance(value, list):
        text_value(value, field)  # raises, naming the field
    return tuple(t for i, v in enumerate(value) if (t := text_value(v, f"{field}[{i}]")).strip())


def group_from_row(row: dict[str, Any], line: int) -> ChoiceGroup | str:
    """A group from an input row (``image``, ``true`` (list or text), ``flawed`` (list)), or the
    reason the row cannot be used. ``references`` is accepted for ``true``."""
    if "image" not in row:
        return f"row {line}: missing field image"
    try:
        true = _as_tuple(row.get("true", row.get("references")), "true" if "true" in row else "references")
        flawed = _as_tuple(row.get("flawed"), "flawed")
    except FieldError as exc:
        return f"row {line}: {exc}"
    if not true:
        return f"row {line}: no true caption (field true)"
    if not flawed:
        return f"row {line}: no flawed caption (field flawed)"
    return ChoiceGroup(image=str(row["image"]), true=true, flawed=flawed, id=str(row.get("id") or line))


def build_groups(
    samples: Iterable[Sample | dict[str, Any]],
    *,
    n_flawed: int = 5,
    n_true: int = 5,
    kinds: Iterable[str] | str | None = DEFAULT_FLAW_KINDS,
    seed: int = 0,
    use_references: bool = True,
) -> list[ChoiceGroup]:
    """Groups from a captions file: per image, up to ``n_true`` true captions (the captions of
    that image and, with ``use_references``, their references) and ``n_flawed`` flawed captions
    made from them with the perturbations ``kinds`` (cycled). Images for which fewer flawed
    captions could be made keep what there is; images with none are left out."""
    kind_list = resolve_kinds(kinds)
    by_image: dict[str, tuple[ImageInput, list[str]]] = {}
    for s in samples:
        if isinstance(s, dict):
            s = Sample(s["image"], s.get("caption") or "", tuple(s.get("references") or ()), s.get("id"))
        img, caps = by_image.setdefault(image_label(s.image), (s.image, []))
        for c in (s.caption, *(s.references if use_references else ())):
            if isinstance(c, str) and c.strip() and c.strip() not in caps:
                caps.append(c.strip())
    labels = list(by_image)
    groups = []
    for gi, label in enumerate(labels):
        image, caps = by_image[label]
        true = tuple(caps[:n_true])
        if not true:
            continue
        donors = [c for other in labels if other != label for c in by_image[other][1]]
        flawed: list[str] = []
        made_by: list[str] = []
        seen = {normalize_caption(t).lower() for t in true}
        attempt = 0
        while len(flawed) < n_flawed and attempt < 4 * n_flawed * max(1, len(kind_list)):
            kind = kind_list[attempt % len(kind_list)]
            src = true[(attempt // len(kind_list)) % len(true)]
            donor = donors[(gi + attempt) % len(donors)] if donors else None
            out = perturb(src, kind, seed + attempt // (len(kind_list) * len(true)), PerturbOptions(donor=donor))
            attempt += 1
            if not out.applicable:
                continue
            key = normalize_caption(out.caption).lower()  # type: ignore[union-attr]
            if key in seen:
                continue
            seen.add(key)
            flawed.append(out.caption)  # type: ignore[union-attr]
            made_by.append(kind)
        if flawed:
            groups.append(ChoiceGroup(image=image, true=true, flawed=tuple(flawed), id=str(gi + 1), kinds=tuple(made_by)))
    return groups


def _outcome(group: ChoiceGroup, gid: str, cands: list[str], truth: list[bool], results: Sequence[Any]) -> ChoiceOutcome:
    from capjudge.metaeval.stats import pick_one_credit  # here: metaeval imports scipy

    scores = [r.score if r.ok else None for r in results]
    out = ChoiceOutcome(id=gid, image=image_label(group.image), candidates=cands, is_true=truth, scores=scores)
    failed = [r for r in results if not r.ok]
    out.causes = [error_cause(r.error) for r in failed]
    if failed:
        out.error = f"group {gid}: {len(failed)} of {len(results)} candidates not scored; first: {failed[0].error}"
        return out
    values = [float(s) for s in scores if s is not None]
    best = max(values)
    out.top = [k for k, s in enumerate(values) if s == best]
    right = [k for k, is_true in enumerate(truth) if is_true]
    out.correct = pick_one_credit(values, right, "half")
    out.strict = pick_one_credit(values, right, "wrong") == 1.0
    return out


def run_choose_one(judge: Judge, groups: Iterable[ChoiceGroup], *, seed: int = 0) -> ChooseOneReport:
    """Rank every group's candidates with ``judge`` (listwise method: one prompt per group;
    scoring method: every candidate scored alone) and measure how often a true caption is first."""
    method = judge.method
    if method.pairwise:
        raise ValueError(f"choose-one needs a scoring or listwise method, not the pairwise method {method.name!r}")
    prepared = []
    for gi, g in enumerate(groups):
        gid = g.id or str(gi + 1)
        cands = list(g.true) + list(g.flawed)
        truth = [True] * len(g.true) + [False] * len(g.flawed)
        order = list(range(len(cands)))
        random.Random(f"{seed}:{gid}").shuffle(order)
        prepared.append((g, gid, [cands[k] for k in order], [truth[k] for k in order]))
    outcomes: list[ChoiceOutcome] = []
    if method.kind == "listwise":
        for g, gid, cands, truth in prepared:
            with whole_lists(judge, len(cands)):
                res = list(judge.score_many(Sample(g.image, c, id=f"{gid}:{k}") for k, c in enumerate(cands)))
            outcomes.append(_outcome(g, gid, cands, truth, res))
    else:
        flat = [Sample(g.image, c, id=f"{gid}:{k}") for g, gid, cands, _ in prepared for k, c in enumerate(cands)]
        it = iter(judge.score_many(flat))
        for g, gid, cands, truth in prepared:
            outcomes.append(_outcome(g, gid, cands, truth, [next(it) for _ in cands]))
    done = [o for o in outcomes if o.error is None]
    return ChooseOneReport(
        method=method.name,
        mode="listwise" if method.kind == "listwise" else "scoring",
        backend=judge.backend_spec,
        model=judge.backend.model,
        template_hash=method.template_hash,
        seed=seed,
        n_groups=len(outcomes),
        n_scored=len(done),
        n_errors=len(outcomes) - len(done),
        accuracy=100.0 * statistics.fmean(o.correct or 0.0 for o in done) if done else None,
        strict_accuracy=100.0 * statistics.fmean(float(bool(o.strict)) for o in done) if done else None,
        ties_at_top=sum(len(o.top) > 1 for o in done),
        chance=100.0 * statistics.fmean(sum(o.is_true) / len(o.is_true) for o in outcomes) if outcomes else None,
        outcomes=outcomes,
        error_causes=dict(Counter(c for o in outcomes for c in o.causes).most_common(TOP_CAUSES)),
    )
