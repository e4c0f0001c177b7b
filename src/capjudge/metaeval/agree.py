"""Agreement between judges without human labels: "can I replace judge A with judge B on my data?"

>>> from capjudge import agree
>>> report = agree(["gpt4o_fleur.jsonl", "llava13b_fleur.jsonl"], names=["GPT-4o", "LLaVA"])  # doctest: +SKIP
>>> report.pairs[0].measures["kendall_tau_b"], report.pairs[0].ci["kendall_tau_b"]             # doctest: +SKIP
(61.2, (58.9, 63.4))

Score results: Kendall tau-b, Spearman, Pearson (x100, as ``meta-eval`` prints them) with 95%
bootstrap intervals, the mean difference B - A (same scale only), a calibration table, the ordering
of same-image caption pairs, and the largest rank differences. Results on different scales (FLEUR
0-1 vs VisCE2 0-100) are compared by rank: no mean difference, and the report says so. Pairwise
verdicts: Cohen's kappa (Fleiss' for three or more judges, x100), agreement (%), and each judge's
position bias. With three or more files every pair of judges is compared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from capjudge.metaeval.agree_load import (
    AgreeInputError,
    JudgeFile,
    KeyMode,
    Kind,
    Source,
    index_rows,
    join,
    key_mode,
    load_judge,
)

UNITS = {"coefficients": "x100", "shares": "%", "mean_diff": "score units of the judges"}
"""Output convention: correlations and kappas x100 (as ``meta-eval``), shares in %."""

TOP_DISAGREEMENTS = 10


def _num(v: Any, digits: int = 4) -> Any:
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else round(float(v), digits)
    return v


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _num(obj)


@dataclass
class PairComparison:
    """Two judges compared on the samples both judged: ``measures`` (coefficients x100, shares in %,
    ``mean_diff`` in score units), their 95% bootstrap intervals ``ci``, join ``counts`` and
    ``notes``. Score judges add ``comparison`` (``"values"`` or ``"ranks"``), ``same_image_pairs``,
    ``calibration`` and ``disagreements``; verdict judges a ``confusion`` table."""

    a: str
    b: str
    kind: Kind
    n: int
    counts: dict[str, int]
    measures: dict[str, float] = field(default_factory=dict)
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    comparison: str = "values"
    same_image_pairs: dict[str, Any] = field(default_factory=dict)
    calibration: list[dict[str, float]] = field(default_factory=list)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    confusion: list[list[int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    undefined: dict[str, str] = field(default_factory=dict)  # measure -> why it has no value
    # Score judges: the joined scores and the positions of ``disagreements`` in them (for plots;
    # not part of the JSON).
    scores: tuple[list[float], list[float]] = field(default=([], []), repr=False)
    top: list[int] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (NaN -> null)."""
        out: dict[str, Any] = {"a": self.a, "b": self.b, "n": self.n}
        out.update(self.measures)
        if self.kind == "score":
            out["comparison"] = self.comparison
        out["ci95"] = {k: list(v) for k, v in self.ci.items()}
        out["counts"] = dict(self.counts)
        if self.kind == "score":
            out["same_image_pairs"] = self.same_image_pairs
            out["calibration"] = self.calibration
            out["disagreements"] = self.disagreements
        else:
            out["confusion"] = {"rows": self.a, "columns": self.b, "labels": ["A", "B", "tie"], "table": self.confusion}
        out["notes"] = list(self.notes)
        if self.undefined:
            out["undefined"] = dict(self.undefined)
        return _clean(out)


@dataclass
class AgreeReport:
    """What :func:`agree` found: the judges, how their records were joined, every pair of judges
    compared, and for three or more the figures over all of them (``overall``)."""

    kind: Kind
    key: KeyMode
    judges: list[dict[str, Any]]
    pairs: list[PairComparison]
    overall: dict[str, Any] = field(default_factory=dict)
    position_bias: dict[str, dict[str, Any]] = field(default_factory=dict)
    bootstrap: int = 0
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when at least one pair of judges had two or more samples in common."""
        return any(p.n >= 2 for p in self.pairs)

    def to_dict(self) -> dict[str, Any]:
        """The ``--format json`` object. With two judges their comparison's fields (``n``,
        ``kendall_tau_b``, ``spearman``, ``pearson``, ``mean_diff`` or ``cohen_kappa``,
        ``agreement``, ``ci95``, ...) are at the top level; ``pairs`` always lists every pair."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "key": self.key,
            "judges": self.judges,
            "unit": "x100",
            "units": UNITS,
        }
        pairs = [p.to_dict() for p in self.pairs]
        if len(self.pairs) == 1:
            out.update({k: v for k, v in pairs[0].items() if k not in ("a", "b")})
        else:
            out.update(self.overall)
        out["pairs"] = pairs
        if self.position_bias:
            out["position_bias"] = self.position_bias
        out["bootstrap"] = self.bootstrap
        out["seed"] = self.seed
        # with two judges their comparison's notes (scales, mismatches) lead the report's own
        out["notes"] = (list(self.pairs[0].notes) if len(self.pairs) == 1 else []) + list(self.notes)
        return _clean(out)


# ----------------------------------------------------------------------------------- comparisons
def _scale_text(s: tuple[float, float] | None) -> str:
    return "unknown" if s is None else f"{s[0]:g}-{s[1]:g}"


def _compare_scores(fa: JudgeFile, fb: JudgeFile, mode: KeyMode, bootstrap: int, seed: int) -> PairComparison:
    from capjudge.metaeval import agree_stats as S
    from capjudge.metaeval import stats

    j = join(fa, fb, mode)
    a = np.asarray([r.score for r in j.a], dtype=float)
    b = np.asarray([r.score for r in j.b], dtype=float)
    same_scale = fa.scale is not None and fa.scale == fb.scale
    pc = PairComparison(fa.name, fb.name, "score", a.size, j.counts, comparison="values" if same_scale else "ranks")
    pc.measures = {
        "kendall_tau_b": 100.0 * stats.kendall_tau_b(a, b),
        "spearman": 100.0 * stats.spearman(a, b),
        "pearson": 100.0 * stats.pearson(a, b),
        "mean_diff": float(np.mean(b - a)) if same_scale and a.size else math.nan,
    }
    if not same_scale:
        del pc.measures["mean_diff"]
        pc.notes.append(
            f"scales differ ({fa.name}: {_scale_text(fa.scale)}, {fb.name}: {_scale_text(fb.scale)}): compared by rank "
            "(Kendall, Spearman, same-image pair order, rank differences); no mean difference. Pearson is kept: a "
            "linear rescaling of either scale does not change it. The calibration table gives each judge in its own units."
        )
    if bootstrap and a.size >= 2:
        pc.ci = S.score_bootstrap(a, b, n_resamples=bootstrap, seed=seed, with_mean_diff=same_scale)
    pc.same_image_pairs = S.same_image_order(a, b, [r.image for r in j.a])
    pc.calibration = S.calibration(a, b)
    largest = S.largest_rank_differences(a, b, TOP_DISAGREEMENTS)
    pc.disagreements = [
        {
            "id": j.a[i].id,
            "image": j.a[i].image,
            "caption": j.a[i].caption,
            "score_a": j.a[i].score,
            "score_b": j.b[i].score,
            "rank_a": ra,
            "rank_b": rb,
            "rank_diff": d,
        }
        for i, ra, rb, d in largest
    ]
    pc.scores = (a.tolist(), b.tolist())
    pc.top = [i for i, *_ in largest]
    _join_notes(pc, fa, fb, j.mismatch_examples)
    return pc


def _compare_verdicts(fa: JudgeFile, fb: JudgeFile, mode: KeyMode, bootstrap: int, seed: int) -> PairComparison:
    from capjudge.metaeval import agree_stats as S

    j = join(fa, fb, mode)
    x = S.verdict_codes([r.canonical_verdict() or "" for r in j.a])
    y = S.verdict_codes([r.canonical_verdict() or "" for r in j.b])
    table = S.confusion(x, y)
    pc = PairComparison(fa.name, fb.name, "pairwise", x.size, j.counts, confusion=table.tolist())
    pc.measures = {
        "cohen_kappa": 100.0 * float(S.cohen_kappa_from_table(table)) if x.size else math.nan,
        "agreement": 100.0 * float(np.trace(table)) / x.size if x.size else math.nan,
    }
    why = S.kappa_undefined_reason(table)
    if why is not None:
        pc.undefined["cohen_kappa"] = why
        pc.notes.append(f"Cohen's kappa is undefined ({why})")
    if bootstrap and x.size >= 2:
        pc.ci = S.verdict_bootstrap(x, y, n_resamples=bootstrap, seed=seed)
    if any(r.swapped != s.swapped for r, s in zip(j.a, j.b, strict=True)):
        pc.notes.append("some pairs were shown with the captions in the other order in one file: their verdicts were mapped to the same order before comparing")
    _join_notes(pc, fa, fb, j.mismatch_examples)
    return pc


def _join_notes(pc: PairComparison, fa: JudgeFile, fb: JudgeFile, examples: list[str]) -> None:
    c = pc.counts
    if c["only_a"] or c["only_b"]:
        pc.notes.append(
            f"the files hold different samples: {c['only_a']} only in {fa.name}, {c['only_b']} only in {fb.name}; "
            f"the statistics use the {c['joined']} judged by both"
        )
    if c["excluded_errors"]:
        pc.notes.append(f"{c['excluded_errors']} samples left out because the result of {fa.name} or {fb.name} is an error record")
    if c.get("content_mismatch"):
        pc.notes.append(
            f"WARNING: {c['content_mismatch']} ids join records with a different image or caption "
            f"(e.g. {'; '.join(examples)}): were both files made from the same input file?"
        )
    if pc.n < 2:
        pc.notes.append(f"only {pc.n} samples in common: nothing to measure")


def _common_keys(files: Sequence[JudgeFile]) -> list[Any]:
    """The samples every judge judged successfully, in the first file's order."""
    return [k for k in files[0].index if all(k in f.index and f.index[k].ok for f in files)]


def _fleiss(files: Sequence[JudgeFile], bootstrap: int, seed: int) -> dict[str, Any]:
    from capjudge.metaeval import agree_stats as S

    common = _common_keys(files)
    counts = S.verdict_counts([[f.index[k].canonical_verdict() or "" for f in files] for k in common])
    unanimous = counts.max(axis=1) == len(files) if common else np.zeros(0, dtype=bool)
    out: dict[str, Any] = {
        "n": len(common),
        "fleiss_kappa": 100.0 * float(S.fleiss_kappa_from_counts(counts)) if common else math.nan,
        "agreement": 100.0 * float(unanimous.mean()) if common else math.nan,
    }
    why = S.fleiss_undefined_reason(counts)
    if why is not None:
        out["undefined"] = {"fleiss_kappa": why}
    if bootstrap and len(common) >= 2:
        out["ci95"] = {k: list(v) for k, v in S.fleiss_bootstrap(counts, n_resamples=bootstrap, seed=seed).items()}
    out["agreement_means"] = "share of samples on which every judge gave the same verdict"
    return out


def _score_overall(files: Sequence[JudgeFile], pairs: Sequence[PairComparison]) -> dict[str, Any]:
    names = [f.name for f in files]
    common = _common_keys(files)
    matrices: dict[str, list[list[float]]] = {}
    for m in ("kendall_tau_b", "spearman", "pearson"):
        mat = [[100.0 if i == j else math.nan for j in range(len(files))] for i in range(len(files))]
        for p in pairs:
            i, j = names.index(p.a), names.index(p.b)
            mat[i][j] = mat[j][i] = p.measures.get(m, math.nan)
        matrices[m] = mat
    return {"n": len(common), "n_means": "samples judged successfully by every judge", "matrix": {"names": names, **matrices}}


# --------------------------------------------------------------------------------------- entry
def _default_names(sources: Sequence[Source]) -> list[str]:
    names = [Path(s).stem if isinstance(s, (str, Path)) else f"judge{i + 1}" for i, s in enumerate(sources)]
    if len(set(names)) < len(names):  # same stem in two folders: number them
        names = [f"{n}#{i + 1}" for i, n in enumerate(names)]
    return names


def agree(
    sources: Sequence[Source],
    names: Sequence[str] | None = None,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
) -> AgreeReport:
    """Compare two or more judges' results on the same samples.

    ``sources``: results files (JSONL from ``capjudge score`` / ``compare``) or lists of records
    (dicts, ``ScoreResult``, ``PairResult``), all of one kind. ``names``: one per source (default:
    the file stems). ``bootstrap``: resamples for the 95% percentile intervals (0: none); ``seed``
    makes them repeatable. Raises :class:`AgreeInputError` on unusable input (naming file and line).
    """
    if isinstance(sources, (str, Path)) or len(sources) < 2:
        raise AgreeInputError("agree needs two or more results files (or record lists)")
    names = list(names) if names is not None else _default_names(sources)
    if len(names) != len(sources):
        raise AgreeInputError(f"{len(names)} names for {len(sources)} results files")
    if len(set(names)) < len(names):
        raise AgreeInputError(f"judge names must differ: {names}")
    files = [load_judge(s, n) for s, n in zip(sources, names, strict=True)]
    kinds = {f.kind for f in files}
    if len(kinds) > 1:
        which = ", ".join(f"{f.name}: {f.kind}" for f in files)
        raise AgreeInputError(f"agree compares like with like: these files mix score and pairwise records ({which})")
    kind = files[0].kind
    mode = key_mode(files)
    for f in files:
        index_rows(f, mode)
    report = AgreeReport(kind=kind, key=mode, judges=[f.summary() for f in files], pairs=[], bootstrap=max(0, bootstrap), seed=seed)
    compare = _compare_scores if kind == "score" else _compare_verdicts
    for i in range(len(files)):
        for j in range(i + 1, len(files)):
            report.pairs.append(compare(files[i], files[j], mode, report.bootstrap, seed))
    if len(files) > 2:
        report.overall = _score_overall(files, report.pairs) if kind == "score" else _fleiss(files, report.bootstrap, seed)
    if kind == "pairwise":
        from capjudge.metaeval.agree_stats import position_bias

        report.position_bias = {f.name: position_bias([(r.verdict, r.votes) for r in f.rows if r.ok]) for f in files}
    report.notes.append(
        "joined on sample id (every record has one)" if mode == "id" else "joined on image file name + whitespace-normalised caption (not every record has an id)"
    )
    for f in files:
        if f.errors:
            report.notes.append(f"{f.name}: {len(f.errors)} error records left out (first: {f.summary()['error_examples'][0]})")
        if len(f.scales) > 1:
            report.notes.append(f"{f.name}: records on several scales {sorted(f.scales)}; the most common, {_scale_text(f.scale)}, is taken as its scale")
    if report.bootstrap:
        report.notes.append(f"95% CIs: percentile bootstrap over samples ({report.bootstrap} resamples, seed {seed})")
    report.notes.append("coefficients (Kendall, Spearman, Pearson, kappa) x100 as meta-eval prints them; shares in %")
    return report


__all__ = ["AgreeInputError", "AgreeReport", "PairComparison", "agree"]
