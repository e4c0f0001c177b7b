"""Backend parity: the same samples judged through two backends, and how far the answers part.

The same model served two ways (HF transformers and a vLLM server, HF float16 and a GGUF Q4_K)
should give the same scores; small numerical differences are expected, a different prompt is a bug
that changes every score a little without anyone noticing. :func:`run_parity` judges the samples
(and, optionally, caption pairs) with one method on both backends, with the same system turn on
both, and reports score differences, rank agreement, verdict flips and, where both backends can
show their prompt tokens, the first token where the prompts part.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from capjudge.backends.base import Backend
from capjudge.backends.kinds import is_local
from capjudge.core.redact import get_logger
from capjudge.data.types import PairResult, Sample, ScoreResult
from capjudge.metaeval.stats import kendall_tau_b, spearman
from capjudge.parity.tokens import TokenDiff, first_difference

log = get_logger("capjudge.parity")


@dataclass
class SampleDiff:
    """One sample scored on both backends."""

    id: str | None
    score_a: float | None
    score_b: float | None
    raw_a: str | None
    raw_b: str | None

    @property
    def abs_diff(self) -> float | None:
        """``|score_a - score_b|``, ``None`` unless both scored."""
        if self.score_a is None or self.score_b is None:
            return None
        return abs(self.score_a - self.score_b)


@dataclass
class ParityReport:
    """What :func:`run_parity` measured.

    Scores: ``n`` samples, ``n_both`` scored on both backends, ``errors_a`` / ``errors_b`` failed on
    a / b, ``one_sided_errors`` failed on one backend only; ``max_abs_diff`` / ``mean_abs_diff`` over ``n_both``; ``same_answer`` the share of those
    whose answer text is identical; ``kendall_tau_b`` / ``spearman`` between the two score lists
    (``nan`` with fewer than two distinct scores); ``smoothed_a`` / ``smoothed_b`` how many scores
    were smoothed from log-probabilities. Pairs: ``n_pairs``, ``n_pairs_both``, ``verdict_flips``
    (pairs whose verdicts differ) and their ids. Prompts: ``prompt_checked`` samples whose prompt
    tokens both backends showed, ``prompt_differs`` of them with a difference, ``first_token_diff``
    the first such difference. ``notes``: known causes of differences found in the backends'
    settings. ``worst``: the samples with the largest differences.
    """

    backend_a: str
    backend_b: str
    method: str
    n: int = 0
    n_both: int = 0
    errors_a: int = 0
    errors_b: int = 0
    one_sided_errors: int = 0
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    same_answer: float | None = None
    kendall_tau_b: float | None = None
    spearman: float | None = None
    smoothed_a: int = 0
    smoothed_b: int = 0
    n_pairs: int = 0
    n_pairs_both: int = 0
    verdict_flips: int = 0
    flipped: list[str | None] = field(default_factory=list)
    prompt_checked: int = 0
    prompt_differs: int = 0
    first_token_diff: TokenDiff | None = None
    notes: list[str] = field(default_factory=list)
    worst: list[SampleDiff] = field(default_factory=list)

    def within(self, tolerance: float) -> bool:
        """No prompt difference, no verdict flip, no sample failed on one backend only, and every
        score within ``tolerance``."""
        return not self.tolerance_failures(tolerance)

    def tolerance_failures(self, tolerance: float) -> list[str]:
        """Why the backends are not within ``tolerance``, one sentence per reason (empty: within)."""
        out = []
        if self.n_both == 0 or self.max_abs_diff is None:
            out.append("no sample was scored on both backends")
        elif self.max_abs_diff > tolerance:
            where = f" (sample {self.worst[0].id})" if self.worst and self.worst[0].id is not None else ""
            out.append(f"largest score difference {self.max_abs_diff:.4g}{where} > tolerance {tolerance:g}")
        if self.one_sided_errors:
            out.append(f"{self.one_sided_errors} sample(s) failed on one backend only (errors: a {self.errors_a}, b {self.errors_b})")
        if self.verdict_flips:
            out.append(f"{self.verdict_flips} verdict flip(s) of {self.n_pairs_both} pairs")
        if self.prompt_differs:
            out.append(f"the prompt tokens differ on {self.prompt_differs} of {self.prompt_checked} checked samples")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``nan`` becomes ``None``)."""
        d = asdict(self)
        d["first_token_diff"] = self.first_token_diff.to_dict() if self.first_token_diff else None
        d["worst"] = [{**asdict(w), "abs_diff": w.abs_diff} for w in self.worst]
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _settings_notes(a: Backend, b: Backend) -> list[str]:
    """Known setting differences that change answers (read from the backends' identities)."""
    notes = []
    ids = {"a": a.identity(), "b": b.identity()}
    for name, other in (("a", "b"), ("b", "a")):
        me, them = ids[name], ids[other]
        if is_local(str(me.get("kind"))) and me.get("pad_square") and not them.get("pad_square") and me.get("kind") != them.get("kind"):
            notes.append(
                f"backend {name} ({me.get('kind')}) pads images to a square first (LLaVA-1.5's own preprocessing); servers such as vLLM run "
                f"the processor alone, which centre-crops: use pad_square=false on backend {name} to compare like with like"
            )
    return notes


def run_parity(
    samples: Iterable[Sample | dict[str, Any]],
    backend_a: str | Backend,
    backend_b: str | Backend,
    *,
    method: str = "fleur",
    pairs: Iterable[Any] | None = None,
    pair_method: str = "gpt4v-pairwise",
    system: str | None = "method",
    images_root: str | None = None,
    cache_dir: str | None = None,
    backend_options_a: dict[str, Any] | None = None,
    backend_options_b: dict[str, Any] | None = None,
    prompt_checks: int = 5,
    worst: int = 5,
    image_options: dict[str, Any] | None = None,
) -> ParityReport:
    """Judge ``samples`` with ``method`` on both backends (and ``pairs`` with ``pair_method``, if
    given) and compare.

    ``system="method"`` gives both backends the method's own system sentence (a judge would
    otherwise use it on local backends only, and the prompts would differ by design); pass a
    sentence or ``None`` to choose. ``cache_dir=None`` (the default) asks both backends afresh.
    The prompt tokens of the first ``prompt_checks`` samples are compared where both backends
    can show them (:meth:`~capjudge.backends.base.Backend.prompt_tokens`). ``image_options`` are
    :class:`~capjudge.judges.judge.Judge`'s image arguments (``allow_outside_images``,
    ``max_image_pixels``, ...), the same for every judge built here.
    """
    from capjudge import Judge
    from capjudge.prompts.registry import get_method

    samples = list(samples)
    m = get_method(method)
    sys_turn = m.system if system == "method" else system
    report = ParityReport(backend_a=_spec(backend_a), backend_b=_spec(backend_b), method=m.name, n=len(samples))
    img_opts = dict(image_options or {})
    ja = Judge(m, backend_a, system=sys_turn, images_root=images_root, cache_dir=cache_dir, backend_options=backend_options_a, **img_opts)
    jb = Judge(m, backend_b, system=sys_turn, images_root=images_root, cache_dir=cache_dir, backend_options=backend_options_b, **img_opts)
    try:
        report.backend_a, report.backend_b = ja.backend_spec, jb.backend_spec
        ra = list(ja.score_many(samples))
        rb = list(jb.score_many(samples))
        _score_stats(report, ra, rb, worst)
        report.notes = _settings_notes(ja.backend, jb.backend)
        _prompt_stats(report, ja, jb, samples[:prompt_checks])
        if pairs is not None:
            pm = get_method(pair_method)
            pa = Judge(pm, ja.backend, system=pm.system if system == "method" else system, images_root=images_root, **img_opts)
            pb = Judge(pm, jb.backend, system=pm.system if system == "method" else system, images_root=images_root, **img_opts)
            pairs = list(pairs)
            _pair_stats(report, list(pa.compare_many(pairs)), list(pb.compare_many(pairs)))
    finally:  # close what was built here; backends passed in stay open
        if isinstance(backend_a, str):
            ja.close()
        if isinstance(backend_b, str):
            jb.close()
    return report


def _spec(backend: str | Backend) -> str:
    return backend if isinstance(backend, str) else (backend.spec or f"{backend.kind}:{backend.model}")


def _score_stats(report: ParityReport, ra: Sequence[ScoreResult], rb: Sequence[ScoreResult], worst: int) -> None:
    diffs = [SampleDiff(a.id, a.score if a.ok else None, b.score if b.ok else None, a.raw, b.raw) for a, b in zip(ra, rb)]
    report.errors_a = sum(1 for a in ra if not a.ok)
    report.errors_b = sum(1 for b in rb if not b.ok)
    report.one_sided_errors = sum(1 for a, b in zip(ra, rb) if a.ok != b.ok)
    report.smoothed_a = sum(1 for a in ra if a.ok and a.smoothed)
    report.smoothed_b = sum(1 for b in rb if b.ok and b.smoothed)
    both = [d for d in diffs if d.abs_diff is not None]
    report.n_both = len(both)
    if both:
        ad = [d.abs_diff for d in both if d.abs_diff is not None]
        report.max_abs_diff = max(ad)
        report.mean_abs_diff = sum(ad) / len(ad)
        report.same_answer = sum(1 for d in both if d.raw_a == d.raw_b) / len(both)
        xs = [float(d.score_a) for d in both if d.score_a is not None]
        ys = [float(d.score_b) for d in both if d.score_b is not None]
        report.kendall_tau_b = kendall_tau_b(xs, ys)
        report.spearman = spearman(xs, ys)
        report.worst = sorted(both, key=lambda d: -(d.abs_diff or 0.0))[:worst]


def _prompt_stats(report: ParityReport, ja: Any, jb: Any, samples: Sequence[Any]) -> None:
    for i, s in enumerate(samples):
        try:
            req = ja.score_request(s, i)
            pa = ja.backend.prompt_tokens(req)
            pb = jb.backend.prompt_tokens(req) if pa is not None else None
        except ValueError as exc:  # a two-step method, a bad sample
            log.info("prompt check skipped: %s", exc)
            return
        except Exception as exc:  # noqa: BLE001 - the check is a diagnosis; scores were compared
            report.notes.append(f"prompt tokens could not be compared: {type(exc).__name__}: {exc}")
            return
        if pa is None or pb is None:
            return  # one backend cannot show its prompt (OpenAI, a server without /tokenize)
        report.prompt_checked += 1
        diff = first_difference(pa, pb)
        if diff is not None:
            report.prompt_differs += 1
            if report.first_token_diff is None:
                report.first_token_diff = diff


def _pair_stats(report: ParityReport, pa: Sequence[PairResult], pb: Sequence[PairResult]) -> None:
    report.n_pairs = len(pa)
    for a, b in zip(pa, pb):
        if a.ok and b.ok:
            report.n_pairs_both += 1
            if a.verdict != b.verdict:
                report.verdict_flips += 1
                report.flipped.append(a.id)
