"""The papers' meta-evaluation protocols: which statistic, over which rows.

* Flickr8k-Expert: a caption's score is paired with *each* of its three expert ratings and Kendall
  tau-c is computed over all rating rows (CLIPScore / FLEUR; FLEUR's code repeats each score three
  times). NaN ratings are skipped by the loader.
* Flickr8k-CF: the same row-level pairing, Kendall tau-b.
* Composite: one human score per caption, Kendall tau-c.
* THumB 1.0: instance-level Pearson on Precision, Recall and the total, with and without the
  ``Human`` system's captions.
* Pascal-50S: per category (HC, HI, HM, MM) the share of pairs where the human-preferred caption got
  the higher score; a tie counts as wrong by default (FLEUR's ``true_count``), ``ties="half"`` makes
  it half right; the mean is the average of the four category accuracies.
* FOIL: the share of (original, foiled) pairs where the original scored higher.

Correlations are reported x100, accuracies in %. Failed results and unmatched rows are excluded from
every statistic and counted in :attr:`MetaEval.counts`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from capjudge.metaeval import stats
from capjudge.metaeval.datasets import PASCAL_CATEGORIES, Benchmark, iter_keys, normalize_caption
from capjudge.metaeval.join import LoadedResults

Progress = Callable[[], None] | None

PRIMARY: dict[str, str] = {
    "flickr8k-expert": "tau_c",
    "flickr8k-cf": "tau_b",
    "composite": "tau_c",
    "thumb": "pearson_total",
    "pascal50s": "mean",
    "foil": "accuracy",
}

PROTOCOLS: dict[str, str] = {
    "flickr8k-expert": "Kendall tau-c over all expert rating rows (each caption's score paired with each of its 3 ratings), x100",
    "flickr8k-cf": "Kendall tau-b over all CrowdFlower rating rows, x100",
    "composite": "Kendall tau-c, one human score per caption, x100",
    "thumb": "instance-level Pearson with P, R and total = (P+R)/2 + Fl + Con + Inc, with and without the Human system, x100",
    "pascal50s": "pairwise accuracy per category (human-preferred caption scored higher), mean of HC/HI/HM/MM, %",
    "foil": "pairwise accuracy (original caption scored higher than its foiled version), %",
}


@dataclass
class MetaEval:
    """The outcome of meta-evaluating one results file on one benchmark."""

    dataset: str
    scores_path: str
    label: str
    protocol: str
    primary: str
    unit: str  # "x100" for correlations, "%" for accuracies
    measures: dict[str, float] = field(default_factory=dict)
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    by_category: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ties: str = "wrong"
    bootstrap: int = 0
    scores_kind: str = "-"  # smoothed / raw / mixed (...) / verdicts: see LoadedResults.scores_kind
    # raw material for plots
    human: np.ndarray | None = None
    judge: np.ndarray | None = None
    scale: tuple[float, float] | None = None

    @property
    def ok(self) -> bool:
        """True when the primary measure could be computed."""
        v = self.measures.get(self.primary, math.nan)
        return not math.isnan(v)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (NaN -> null): the ``--format json`` object."""

        def num(v: float) -> float | None:
            return None if v is None or math.isnan(v) else round(float(v), 4)

        out: dict[str, Any] = {"dataset": self.dataset, "scores": self.scores_path, "judge": self.label}
        out.update({k: num(v) for k, v in self.measures.items()})
        out["primary"] = self.primary
        out["unit"] = self.unit
        out["scores_kind"] = self.scores_kind
        out["protocol"] = self.protocol
        if self.dataset in ("pascal50s", "foil"):
            out["ties"] = self.ties
            out["by_category"] = {c: {k: (num(v) if isinstance(v, float) else v) for k, v in d.items()} for c, d in self.by_category.items()}
        elif self.by_category:
            out["by_group"] = {c: {k: (num(v) if isinstance(v, float) else v) for k, v in d.items()} for c, d in self.by_category.items()}
        if self.ci:
            out["ci95"] = {k: [num(lo), num(hi)] for k, (lo, hi) in self.ci.items()}
            out["bootstrap"] = self.bootstrap
        out["counts"] = dict(self.counts)
        out["notes"] = list(self.notes)
        return out


# ------------------------------------------------------------------------------------ ratings
def _correlations(judge: np.ndarray, human: np.ndarray) -> dict[str, float]:
    return {name: 100.0 * fn(judge, human) for name, fn in stats.CORRELATIONS.items()}


def _thumb_measures(judge: np.ndarray, extra: dict[str, np.ndarray], is_human: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    keep = ~is_human
    for aspect in ("P", "R", "total"):
        out[f"pearson_{aspect}"] = 100.0 * stats.pearson(judge, extra[aspect])
        out[f"pearson_{aspect}_no_human"] = 100.0 * stats.pearson(judge[keep], extra[aspect][keep])
    return out


def _unit_rows(units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by unit with each unit's start and length (for cluster resampling)."""
    order = np.argsort(units, kind="stable")
    n_units = int(units.max()) + 1 if units.size else 0
    lengths = np.bincount(units, minlength=n_units)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n_units else np.zeros(0, dtype=int)
    return order, starts, lengths


def _expand(idx: np.ndarray, order: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    ln = lengths[idx]
    offsets = np.arange(int(ln.sum())) - np.repeat(np.cumsum(ln) - ln, ln)
    return order[np.repeat(starts[idx], ln) + offsets]


def evaluate_ratings(bench: Benchmark, res: LoadedResults, *, bootstrap: int = 0, seed: int = 0, progress: Progress = None) -> MetaEval:
    """Correlation protocols (Flickr8k-Expert/CF, Composite, THumB)."""
    judge: list[float] = []
    human: list[float] = []
    units: list[int] = []
    groups: list[str] = []
    extra: dict[str, list[float]] = {"P": [], "R": [], "total": []}
    unit_of: dict[tuple[str, str], int] = {}
    failed_rows = unmatched_rows = 0
    failed_keys: set[tuple[str, str]] = set()
    unmatched_keys: set[tuple[str, str]] = set()
    failure_examples: list[str] = []
    for r in bench.ratings:
        key = r.key
        if key in res.scores:
            judge.append(res.scores[key])
            human.append(r.rating)
            units.append(unit_of.setdefault(key, len(unit_of)))
            groups.append(r.group)
            for a in extra:
                extra[a].append(r.extra.get(a, math.nan))
        elif key in res.failed:
            failed_rows += 1
            if key not in failed_keys and len(failure_examples) < 3:
                failure_examples.append(f"{key[0]} / {key[1][:40]!r}: {res.failed[key]}")
            failed_keys.add(key)
        else:
            unmatched_rows += 1
            unmatched_keys.add(key)
    j = np.asarray(judge, dtype=float)
    h = np.asarray(human, dtype=float)
    u = np.asarray(units, dtype=int)
    g = np.asarray(groups, dtype=object)
    ex = {a: np.asarray(v, dtype=float) for a, v in extra.items()}
    is_human = g == "Human"

    def measure(rows: np.ndarray | None = None) -> dict[str, float]:
        jj, hh = (j, h) if rows is None else (j[rows], h[rows])
        m = _correlations(jj, hh)
        if bench.name == "thumb":
            e = ex if rows is None else {a: v[rows] for a, v in ex.items()}
            m.update(_thumb_measures(jj, e, is_human if rows is None else is_human[rows]))
        return m

    out = MetaEval(
        dataset=bench.name,
        scores_path=res.path,
        label=res.label,
        protocol=PROTOCOLS[bench.name],
        primary=PRIMARY[bench.name],
        unit="x100",
        human=h,
        judge=j,
        scale=res.scale,
        bootstrap=bootstrap,
    )
    out.measures = measure()
    out.measures["n"] = float(len(j))
    if bench.name == "composite":
        for name in sorted(set(groups)):
            sel = g == name
            out.by_category[name] = {"n": int(sel.sum()), "tau_c": 100.0 * stats.kendall_tau_c(j[sel], h[sel])}
    if bootstrap and len(unit_of) >= 2:
        order, starts, lengths = _unit_rows(u)
        out.ci = stats.bootstrap_cis(lambda idx: measure(_expand(idx, order, starts, lengths)), len(unit_of), n_resamples=bootstrap, seed=seed, progress=progress)
        out.notes.append(f"95% CIs: percentile bootstrap over judged captions ({bootstrap} resamples, seed {seed})")
    human_keys = set(iter_keys(bench))
    out.counts = {
        "human_rows": len(bench.ratings),
        "used_rows": len(j),
        "used_captions": len(unit_of),
        "failed_rows": failed_rows,
        "failed_captions": len(failed_keys),
        "unmatched_rows": unmatched_rows,
        "unmatched_captions": len(unmatched_keys),
        "skipped_by_protocol": bench.skipped,
        "result_records": res.records,
        "extra_results": len((set(res.scores) | set(res.failed)) - human_keys),
        "bad_lines": len(res.bad_lines),
        "conflicting_duplicates": res.conflicts,
    }
    out.notes.extend(bench.notes)
    _common_notes(out, res, failure_examples)
    return out


# ------------------------------------------------------------------------------------ pairs
def _pair_outcome(res: LoadedResults, image: str, caps: tuple[str, str], keys: tuple[tuple[str, str], tuple[str, str]], label: int) -> tuple[str, int | str, str]:
    """('ok', outcome in {1, 0, -1}, source) or ('failed'|'unmatched', reason, source).

    A pairwise verdict for the pair (in either order) wins over per-caption scores.
    """
    c0, c1 = normalize_caption(caps[0]), normalize_caption(caps[1])
    for (a, b), shown_first in (((c0, c1), 0), ((c1, c0), 1)):
        pk = (image, a, b)
        if pk in res.verdicts:
            v = res.verdicts[pk]
            if v == "tie":
                return "ok", 0, "verdict"
            winner = shown_first if v == "A" else 1 - shown_first
            return "ok", (1 if winner == label else -1), "verdict"
        if pk in res.failed_pairs:
            return "failed", res.failed_pairs[pk], "verdict"
    k0, k1 = keys
    if k0 in res.scores and k1 in res.scores:
        s = (res.scores[k0], res.scores[k1])
        return "ok", int(np.sign(s[label] - s[1 - label])), "scores"
    for k in keys:
        if k in res.failed:
            return "failed", res.failed[k], "scores"
    return "unmatched", "", ""


def evaluate_pairs(bench: Benchmark, res: LoadedResults, *, ties: stats.TieRule = "wrong", bootstrap: int = 0, seed: int = 0, progress: Progress = None) -> MetaEval:
    """Pairwise-accuracy protocols (Pascal-50S, FOIL)."""
    outcomes: dict[str, list[int]] = {}
    failed: dict[str, int] = {}
    unmatched: dict[str, int] = {}
    failure_examples: list[str] = []
    from_verdicts = 0
    for p in bench.pairs:
        cat = p.category
        outcomes.setdefault(cat, [])
        status, val, source = _pair_outcome(res, p.key(0)[0], p.captions, (p.key(0), p.key(1)), p.label)
        if status == "ok":
            outcomes[cat].append(int(val))
            from_verdicts += source == "verdict"
        elif status == "failed":
            failed[cat] = failed.get(cat, 0) + 1
            if len(failure_examples) < 3:
                failure_examples.append(f"{cat} {p.key(0)[0]}: {val}")
        else:
            unmatched[cat] = unmatched.get(cat, 0) + 1
    cats = [c for c in PASCAL_CATEGORIES if c in outcomes] + [c for c in outcomes if c not in PASCAL_CATEGORIES]
    arrays = {c: np.asarray(outcomes[c], dtype=int) for c in cats}
    out = MetaEval(
        dataset=bench.name,
        scores_path=res.path,
        label=res.label,
        protocol=PROTOCOLS[bench.name],
        primary=PRIMARY[bench.name],
        unit="%",
        ties=ties,
        bootstrap=bootstrap,
        scale=res.scale,
    )

    def accs(sel: dict[str, np.ndarray]) -> dict[str, float]:
        m = {c: 100.0 * stats.pairwise_accuracy(o, ties) for c, o in sel.items()}
        if bench.name == "foil":
            return {"accuracy": m.get("FOIL", math.nan)}
        present = [v for v in m.values() if not math.isnan(v)]
        m["mean"] = float(np.mean(present)) if present else math.nan
        return m

    out.measures = accs(arrays)
    for c in cats:
        o = arrays[c]
        out.by_category[c] = {
            "pairs": int(sum(1 for p in bench.pairs if p.category == c)),
            "evaluated": int(o.size),
            "correct": int(np.sum(o > 0)),
            "ties": int(np.sum(o == 0)),
            "wrong": int(np.sum(o < 0)),
            "failed": failed.get(c, 0),
            "unmatched": unmatched.get(c, 0),
            "accuracy": out.measures.get(c, out.measures.get("accuracy", math.nan)),
        }
    if bench.name == "pascal50s":
        missing = [c for c in PASCAL_CATEGORIES if not arrays.get(c, np.zeros(0)).size]
        if missing:
            out.notes.append(f"no evaluated pairs in {', '.join(missing)}: the mean is over the other categories")
    if bootstrap:
        rng = np.random.default_rng(seed)
        samples: dict[str, list[float]] = {}
        for _ in range(bootstrap):
            resampled = {c: o[rng.integers(0, o.size, size=o.size)] if o.size else o for c, o in arrays.items()}
            for k, v in accs(resampled).items():
                if not math.isnan(v):
                    samples.setdefault(k, []).append(v)
            if progress is not None:
                progress()
        out.ci = {k: (float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))) for k, v in samples.items()}
        out.notes.append(f"95% CIs: percentile bootstrap over pairs within each category ({bootstrap} resamples, seed {seed})")
    out.notes.append(
        "a tie counts as wrong (FLEUR's rule)" if ties == "wrong" else "a tie counts as half right (--ties half)"
    )
    if from_verdicts:
        out.notes.append(f"{from_verdicts} pairs judged from pairwise verdicts (A/B/tie records)")
    human_keys = set(iter_keys(bench))
    n_failed, n_unmatched = sum(failed.values()), sum(unmatched.values())
    out.counts = {
        "human_pairs": len(bench.pairs),
        "used_pairs": int(sum(o.size for o in arrays.values())),
        "failed_pairs": n_failed,
        "unmatched_pairs": n_unmatched,
        "skipped_by_protocol": bench.skipped,
        "result_records": res.records,
        "extra_results": len((set(res.scores) | set(res.failed)) - human_keys),
        "bad_lines": len(res.bad_lines),
        "conflicting_duplicates": res.conflicts,
    }
    out.notes.extend(bench.notes)
    _common_notes(out, res, failure_examples)
    return out


def _common_notes(out: MetaEval, res: LoadedResults, failure_examples: list[str]) -> None:
    c = out.counts
    failed = c.get("failed_rows", c.get("failed_pairs", 0))
    unmatched = c.get("unmatched_rows", c.get("unmatched_pairs", 0))
    if failed:
        out.notes.append(f"{failed} human rows/pairs excluded because their result failed (e.g. {'; '.join(failure_examples)})")
    if unmatched:
        out.notes.append(f"{unmatched} human rows/pairs excluded because the results file has no score for them")
    if c.get("extra_results"):
        out.notes.append(f"{c['extra_results']} results match no human row (ignored)")
    if res.bad_lines:
        out.notes.append(f"{len(res.bad_lines)} unreadable lines in the results file (first: {res.bad_lines[0]})")
    if res.conflicts:
        out.notes.append(f"{res.conflicts} samples scored twice with different scores (the first score is used)")


def evaluate(bench: Benchmark, res: LoadedResults, *, ties: stats.TieRule = "wrong", bootstrap: int = 0, seed: int = 0, progress: Progress = None) -> MetaEval:
    """Meta-evaluate ``res`` on ``bench`` with the benchmark's published protocol. ``progress``
    is called after each bootstrap resample (a progress bar)."""
    if bench.kind == "pairs":
        ev = evaluate_pairs(bench, res, ties=ties, bootstrap=bootstrap, seed=seed, progress=progress)
    else:
        ev = evaluate_ratings(bench, res, bootstrap=bootstrap, seed=seed, progress=progress)
    ev.scores_kind = res.scores_kind
    return ev
