"""``Panel([...])``: several judges as one, against a judge's self-preference.

Judges favour captions of their own model family; a panel of judges from different families is the
known remedy. A panel asks every sample of each of its judges and writes one record per sample:

- scores: the ``mean`` (or ``median``) of the judges that gave one; verdicts: the majority (the
  verdict most judges gave; when two or more verdicts share the most votes the panel's verdict is
  ``"tie"`` and ``details.panel_tie`` is true);
- ``details.panel``: one entry per judge with its ``name``, ``backend``, ``judge_preset``, its
  ``score`` (or ``verdict``, ``votes`` and, by grading, ``scores``), ``raw``, ``status`` and
  ``error``;
- quorum: the record is ``ok`` when at least ``quorum`` judges answered (default: more than half
  of them); a judge's failure is kept in its entry and left out of the aggregate. Under the quorum
  the record is an error naming each failed judge, resumable when one of them failed for backend
  reasons (a re-run asks it again);
- ``backend``: the panel as a spec, ``panel:mean(spec1, spec2, ...)`` (credentials shown as
  ``***``), so a re-run of a results file with another panel is refused, as with another backend.

Every judge must run the same method (name, template, scale): a panel aggregates like with like.
Judges on API backends run at the same time (one thread each); the others one after another, a
window of samples at a time. :func:`member_records` splits panel records back into each judge's
records (for :func:`capjudge.agree` and the arena's per-judge leaderboards).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from capjudge.backends import kinds
from capjudge.data.types import ImageInput, PairResult, Sample, ScoreResult
from capjudge.judges import confidence, pairwise
from capjudge.judges.dispatch import in_input_order
from capjudge.judges.invariants import checked_score
from capjudge.judges.judge import Judge
from capjudge.judges.scoring import read_windows
from capjudge.prompts.registry import Method

Aggregate = Literal["mean", "median"]
AGGREGATES: tuple[str, ...] = ("mean", "median")
WINDOW = 256
"""Samples asked of every judge before the panel's records of them are made."""


class PanelBackends:
    """The panel's judges' backends seen as one by the runner: ``spec`` (the panel's), ``model``,
    the cache bypassed for all of them (``bypass_reads``), ``close``."""

    kind = "panel"

    def __init__(self, spec: str, backends: Sequence[Any]) -> None:
        self.spec = spec
        self.backends = list(backends)
        self.model = "panel(" + ", ".join(str(b.model) for b in self.backends) + ")"

    def identity(self) -> dict[str, Any]:
        """The panel's spec and every judge's backend identity."""
        return {"kind": self.kind, "spec": self.spec, "members": [b.identity() for b in self.backends]}

    @contextlib.contextmanager
    def bypass_reads(self) -> Iterator[None]:
        """Within the block every judge's cached backend asks again (``--retry-errors``)."""
        from capjudge.backends.cache import bypass_cache

        with contextlib.ExitStack() as stack:
            for b in self.backends:
                stack.enter_context(bypass_cache(b))
            yield

    def close(self) -> None:
        """Release every judge's backend."""
        for b in self.backends:
            b.close()


def _as_judge(item: Any, method: str | Method | None, options: Mapping[str, Any]) -> Judge:
    if isinstance(item, Judge):
        return item
    if method is None:
        raise ValueError("Panel: give method= to build judges from backend specs")
    if isinstance(item, Mapping):
        unknown = sorted(set(item) - {"backend", "judge", "backend_options", "name"})
        if unknown or not isinstance(item.get("backend"), str):
            raise ValueError(f"Panel: a judge given as a mapping has 'backend' (a spec) and optionally 'judge', 'backend_options', 'name'; got keys {sorted(item)}")
        opts = {**dict(options), "backend_options": {**dict(options.get("backend_options") or {}), **dict(item.get("backend_options") or {})}}
        if item.get("judge") is not None:
            opts["preset"] = item["judge"]
        return Judge(method, item["backend"], **opts)
    return Judge(method, item, **dict(options))


def _all_cached(value: Any) -> bool:
    """Whether a result's answers all came from the cache (``details.cached``: a flag, or one per order)."""
    return all(bool(v) for v in value) if isinstance(value, list) and value else value is True


def _names(judges: Sequence[Judge], given: Sequence[str | None]) -> list[str]:
    names = [g or j.backend_spec for j, g in zip(judges, given, strict=True)]
    if len(set(names)) < len(names):
        seen: Counter[str] = Counter(names)
        names = [f"{n}#{k + 1}" if seen[n] > 1 else n for k, n in enumerate(names)]
    return names


class Panel:
    """Several judges as one: each sample asked of every judge, the scores aggregated (``mean`` or
    ``median``), the verdicts by majority, each judge's own result kept in ``details.panel``.

    ``judges``: :class:`~capjudge.Judge` objects, backend spec strings, or mappings ``{"backend":
    SPEC, "judge": PRESET, "backend_options": {...}, "name": NAME}`` (specs and mappings are built
    with ``method`` and ``judge_options``, the keyword arguments of ``Judge``). ``quorum``: the
    judges that must answer for an ``ok`` record (default: more than half). ``names``: one per
    judge (default: its backend spec). Judges of different methods are a ``ValueError``.

    >>> panel = Panel(["openai:gpt-4o", "hf:llava-hf/llava-1.5-13b-hf"], method="fleur")  # doctest: +SKIP
    >>> panel.score("cats.jpg", "two cats").details["panel"]                               # doctest: +SKIP
    """

    def __init__(
        self,
        judges: Sequence[Judge | str | Mapping[str, Any]],
        *,
        aggregate: Aggregate = "mean",
        method: str | Method | None = None,
        quorum: int | None = None,
        names: Sequence[str | None] | None = None,
        window: int = WINDOW,
        **judge_options: Any,
    ) -> None:
        if aggregate not in AGGREGATES:
            raise ValueError(f"Panel: aggregate must be one of {', '.join(AGGREGATES)}, not {aggregate!r}")
        items = list(judges)
        if len(items) < 2:
            raise ValueError(f"Panel: a panel needs two or more judges, got {len(items)}")
        given = list(names) if names is not None else [it.get("name") if isinstance(it, Mapping) else None for it in items]
        if len(given) != len(items):
            raise ValueError(f"Panel: {len(given)} names for {len(items)} judges")
        built: list[Judge] = []
        try:
            for it in items:
                built.append(_as_judge(it, method, judge_options))
        except BaseException:
            for j in built:
                if j not in items:
                    j.close()
            raise
        first = built[0].method
        for k, j in enumerate(built[1:], start=2):
            m = j.method
            if (m.name, m.template_hash, tuple(m.scale)) != (first.name, first.template_hash, tuple(first.scale)):
                raise ValueError(f"Panel: every judge must run the same method; judge 1 runs {first.name!r} (scale {first.scale}), judge {k} {m.name!r} (scale {m.scale})")
        n = len(built)
        q = n // 2 + 1 if quorum is None else int(quorum)
        if not 1 <= q <= n:
            raise ValueError(f"Panel: quorum must be 1 to {n} (the number of judges), not {quorum}")
        self.members: list[Judge] = built
        self.names: list[str] = _names(built, given)
        self.aggregate: Aggregate = aggregate
        self.quorum = q
        self.default_quorum = quorum is None or q == n // 2 + 1
        self.window = max(1, int(window))
        self.method: Method = first
        self.judge_preset: str | None = None
        self.batch_size = max(j.batch_size for j in built)
        self.backend = PanelBackends(self.backend_spec, [j.backend for j in built])

    # ------------------------------------------------------------------ identity
    @property
    def backend_spec(self) -> str:
        """The panel as written into records: ``panel:mean(spec1, spec2)`` (``panel:mean:quorum=K(...)``
        with a quorum other than the default); the judges' specs with credentials as ``***``.
        Parentheses, not brackets: terminals that read markup keep it whole."""
        how = self.aggregate if self.default_quorum else f"{self.aggregate}:quorum={self.quorum}"
        return f"panel:{how}(" + ", ".join(j.backend_spec for j in self.members) + ")"

    def describe(self) -> list[dict[str, Any]]:
        """One entry per judge: ``name``, ``backend``, ``judge_preset``."""
        return [{"name": n, "backend": j.backend_spec, "judge_preset": j.judge_preset} for n, j in zip(self.names, self.members, strict=True)]

    # ------------------------------------------------------------------ asking every judge
    def _ask_all(self, items: Iterable[Any], ask: Any) -> Iterator[tuple[int, list[Any]]]:
        """``(index, [each judge's result])`` per item, a window at a time; API judges in threads."""
        for window in read_windows(items, self.window):
            rows = [s for _, s in window]
            got: list[dict[int, Any]] = [{} for _ in self.members]
            failures: list[BaseException] = []

            def run(k: int, judge: Judge, rows: list[Any] = rows, got: list[dict[int, Any]] = got, failures: list[BaseException] = failures) -> None:
                try:
                    for i, res in ask(judge, rows):
                        got[k][i] = res
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    failures.append(exc)

            threads = []
            for k, judge in enumerate(self.members):
                if kinds.is_api(judge.backend.kind):
                    t = threading.Thread(target=run, args=(k, judge), daemon=True, name=f"capjudge-panel-{k + 1}")
                    t.start()
                    threads.append(t)
            for k, judge in enumerate(self.members):
                if not kinds.is_api(judge.backend.kind):
                    run(k, judge)
            for t in threads:
                t.join()
            if failures:
                raise failures[0]
            for pos, (index, _) in enumerate(window):
                yield index, [g.get(pos) for g in got]

    # ------------------------------------------------------------------ scores
    def score_stream(self, samples: Iterable[Sample | dict[str, Any]]) -> Iterator[tuple[int, ScoreResult]]:
        """Score samples with every judge, yielding ``(input index, panel record)``."""
        if self.method.pairwise:
            raise ValueError(f"method {self.method.name!r} compares pairs: use Panel.compare / compare_many")
        for index, results in self._ask_all(samples, lambda judge, rows: judge.score_stream(rows)):
            yield index, self._score_record(index, results)

    def score_many(self, samples: Iterable[Sample | dict[str, Any]]) -> Iterator[ScoreResult]:
        """Score samples, yielding the panel's records in input order."""
        if self.method.pairwise:
            raise ValueError(f"method {self.method.name!r} compares pairs: use Panel.compare / compare_many")
        return in_input_order(self.score_stream(samples))

    def score(self, sample: Sample | dict[str, Any] | ImageInput, caption: str | None = None, references: Sequence[str] = (), *, id: str | None = None) -> ScoreResult:
        """Score one sample (a :class:`Sample`, a dict, or an image and its caption)."""
        if caption is not None:
            if isinstance(sample, (Sample, dict)):
                raise TypeError("Panel.score: give a Sample (or dict), or an image and a caption, not both")
            sample = Sample(sample, caption, references=tuple(references), id=id)
        item: Any = sample
        return next(iter(self.score_many([item])))

    def _entries(self, results: Sequence[Any]) -> list[dict[str, Any]]:
        out = []
        for name, judge, res in zip(self.names, self.members, results, strict=True):
            entry: dict[str, Any] = {"name": name, "backend": judge.backend_spec, "judge_preset": judge.judge_preset}
            if res is None:
                entry.update(status="error", error="the judge returned no result for this sample", raw=None)
            elif isinstance(res, ScoreResult):
                entry.update(score=res.score, raw=res.raw, status=res.status, error=res.error, smoothed=res.smoothed)
            else:
                entry.update(verdict=res.verdict, votes=list(res.votes), raw=list(res.raw), status=res.status, error=res.error)
                if res.scores is not None:
                    entry["scores"] = list(res.scores)
            details = res.details if res is not None else {}
            if "confidence" in details:  # confidence=on: each judge's own
                entry["confidence"] = details["confidence"]
            entry["cached"] = _all_cached(details.get("cached"))
            if details.get("resumable"):
                entry["resumable"] = True
            out.append(entry)
        return out

    def _shortfall(self, entries: list[dict[str, Any]], ok: int) -> tuple[str, dict[str, Any]]:
        failed = [e for e in entries if e["status"] != "ok"]
        why = "; ".join(f"{e['name']}: {e.get('error') or 'no result'}" for e in failed)
        details: dict[str, Any] = {}
        if any(e.get("resumable") for e in failed):
            details["resumable"] = True
        return f"panel: {ok} of {len(entries)} judges answered, the quorum is {self.quorum} ({why})", details

    def _score_record(self, index: int, results: Sequence[ScoreResult | None]) -> ScoreResult:
        entries = self._entries(results)
        oks = [r for r in results if r is not None and r.ok and r.score is not None]
        base = next((r for r in results if r is not None), None)
        details: dict[str, Any] = {"panel": entries, "aggregate": self.aggregate, "panel_ok": len(oks), "panel_size": len(entries), "cached": [e["cached"] for e in entries]}
        if self.method.options:  # as a single judge's records say them (a re-run checks them)
            details["method_options"] = dict(self.method.options)
        fields: dict[str, Any] = {"score": None, "raw": None, "status": "error", "error": None, "smoothed": False}
        if len(oks) >= self.quorum:
            scores = [float(r.score) for r in oks if r.score is not None]
            value = statistics.fmean(scores) if self.aggregate == "mean" else float(statistics.median(scores))
            checked, problem = checked_score(value, self.method.scale, outside_ok=self.method.parser == "first-integer")
            if problem is None:
                low, high = self.method.scale
                if checked is not None and not low <= checked <= high:
                    details["outside_scale"] = True
                fields.update(score=checked, status="ok", smoothed=all(r.smoothed for r in oks))
                if self.method.confidence:  # the judges' spread, the share that gave the panel's score
                    details.update(confidence.score_fields_from_samples(scores, checked))
                    details["confidence_rule"] = confidence.PANEL
            else:
                fields["error"] = f"panel: {problem}"
        else:
            fields["error"], more = self._shortfall(entries, len(oks))
            details.update(more)
        return ScoreResult(
            id=base.id if base is not None else str(index),
            image=base.image if base is not None else "",
            caption=base.caption if base is not None else "",
            references=list(base.references) if base is not None else [],
            context=None,
            method=self.method.name,
            backend=self.backend_spec,
            model=self.backend.model,
            template_hash=self.method.template_hash,
            scale=self.method.scale,
            details=details,
            **fields,
        )

    # ------------------------------------------------------------------ pairs
    def compare_stream(self, pairs: Iterable[pairwise.Pair | dict[str, Any] | tuple[Any, ...]], *, mode: pairwise.CompareMode | None = None) -> Iterator[tuple[int, PairResult]]:
        """Compare pairs with every judge, yielding ``(input index, panel record)``."""
        resolved = pairwise.resolve_mode(self.method, mode)
        for index, results in self._ask_all(pairs, lambda judge, rows: judge.compare_stream(rows, mode=mode)):
            yield index, self._pair_record(index, results, resolved)

    def compare_many(self, pairs: Iterable[pairwise.Pair | dict[str, Any] | tuple[Any, ...]], *, mode: pairwise.CompareMode | None = None) -> Iterator[PairResult]:
        """Compare pairs, yielding the panel's records in input order."""
        pairwise.resolve_mode(self.method, mode)
        return in_input_order(self.compare_stream(pairs, mode=mode))

    def compare(self, image: ImageInput, caption_a: str, caption_b: str, *, mode: pairwise.CompareMode | None = None, references: Sequence[str] = (), id: str | None = None) -> PairResult:
        """Which caption the panel finds better: ``"A"``, ``"B"`` or ``"tie"`` (majority)."""
        return next(iter(self.compare_many([pairwise.Pair(image, caption_a, caption_b, tuple(references), id)], mode=mode)))

    def _pair_record(self, index: int, results: Sequence[PairResult | None], mode: pairwise.CompareMode) -> PairResult:
        entries = self._entries(results)
        verdicts = [r.verdict for r in results if r is not None and r.ok and r.verdict is not None]
        base = next((r for r in results if r is not None), None)
        run = pairwise.run_fields(self.members[0], mode)  # the judges' method, template and mode
        run["backend"] = self.backend_spec
        counts = Counter(verdicts)
        details: dict[str, Any] = {"panel": entries, "panel_votes": {v: counts.get(v, 0) for v in ("A", "B", "tie")}, "panel_ok": len(verdicts), "panel_size": len(entries), "cached": [e["cached"] for e in entries]}
        verdict: Any = None
        status: Any = "error"
        error = None
        if len(verdicts) >= self.quorum:
            top = max(counts.values())
            leaders = sorted(v for v, c in counts.items() if c == top)
            verdict = leaders[0] if len(leaders) == 1 else "tie"
            details["panel_tie"] = len(leaders) > 1
            status = "ok"
            if self.method.confidence:
                details.update(confidence.panel_fields(verdict, verdicts))
        else:
            error, more = self._shortfall(entries, len(verdicts))
            details.update(more)
        return PairResult(
            id=base.id if base is not None else str(index),
            image=base.image if base is not None else "",
            caption_a=base.caption_a if base is not None else "",
            caption_b=base.caption_b if base is not None else "",
            verdict=verdict,
            method=run["method"],
            backend=run["backend"],
            model=self.backend.model,
            template_hash=run["template_hash"],
            mode=run["mode"],
            status=status,
            error=error,
            details=details,
        )

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release every judge's backend."""
        for j in self.members:
            j.close()

    def __enter__(self) -> Panel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Panel(method={self.method.name!r}, backend={self.backend_spec!r})"


_MEMBER_DROP = ("panel", "panel_votes", "panel_tie", "panel_ok", "panel_size", "aggregate", "cached", "resumable", "outside_scale")


def member_records(records: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """Each judge's own records in panel records (dicts or results; records without
    ``details.panel`` are skipped): judge name -> records of the results-file form, ``backend``
    the judge's, ``score`` or ``verdict`` (``votes``, ``scores``), ``raw``, ``status``, ``error``
    its own, everything else (``id``, ``image``, captions, ``model_a`` / ``model_b`` ...) the
    panel record's. Ready for :func:`capjudge.agree` and the arena's ranking."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        d = rec.to_dict() if hasattr(rec, "to_dict") else dict(rec)
        details = d.get("details") or {}
        panel = details.get("panel")
        if not isinstance(panel, list):
            continue
        for entry in panel:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            own = {k: v for k, v in d.items() if k not in ("details", "score", "verdict", "votes", "scores", "raw", "status", "error", "backend", "smoothed")}
            own.update(backend=entry.get("backend"), status=entry.get("status"), error=entry.get("error"), raw=entry.get("raw"))
            if "caption_a" in d:
                own.update(verdict=entry.get("verdict"), votes=entry.get("votes") or [], scores=entry.get("scores"))
            else:
                own.update(score=entry.get("score"), smoothed=bool(entry.get("smoothed")))
            own["details"] = {k: v for k, v in details.items() if k not in _MEMBER_DROP}
            if entry.get("judge_preset") is not None:
                own["details"]["judge_preset"] = entry["judge_preset"]
            out.setdefault(entry["name"], []).append(own)
    return out


__all__ = ["AGGREGATES", "Panel", "PanelBackends", "member_records"]
