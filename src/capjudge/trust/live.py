"""A saved cascade plan run live (``capjudge compare --cascade PLAN``).

:class:`LiveCascade` asks the plan's judges in order: the first on every pair, each next one only on
the pairs no judge before it kept (confidence below that judge's threshold, a failed record, or no
confidence), and abstains at the end. The confidence of a record is the trust tools' reading
(:func:`~capjudge.trust.inputs.pair_confidence`: ``details.confidence``, else the agreement of the
two votes), compared with the threshold as :func:`capjudge.trust.cascade.apply` does (the
``official`` rule rounds it to float32 first), so a live run keeps what the offline cascade keeps on
the same records.

Each record is the deciding judge's, with ``details.cascade``: ``decided_by`` (the judge's name,
``null`` when the cascade abstained), ``judge`` (its place, 0 first), ``confidence`` and
``threshold`` of that judge (for an abstention, the last judge's), ``abstained``, ``plan`` (file,
digest, alpha, delta, rule) and ``asked``: every judge asked on the pair, in order, with its
``backend``, ``verdict``, ``confidence``, ``status``, ``usage``, ``tokens`` and ``cost_usd`` (as
:func:`~capjudge.trust.inputs.record_usage` reads them; :meth:`LiveCascade.summary` sums them per
judge). An abstained
record keeps the last judge's verdict (``status: ok``), which the plan does not vouch for: read
``details.cascade.abstained``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from capjudge.trust.cascade import CascadePlan
from capjudge.trust.inputs import pair_confidence, record_usage


def load_plan(path: str | Path) -> tuple[CascadePlan, str]:
    """A plan file and the ``sha256:`` digest of its bytes; ``ValueError`` naming the file and the
    cause (a plan without the judges' runs included: it cannot be run live)."""
    p = Path(path)
    try:
        digest = "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    plan = CascadePlan.load(p)
    if len(plan.runs) != len(plan.judges):
        raise ValueError(f"{path}: the plan does not say how its judges were run (\"runs\"): save it again with `capjudge cascade --save`")
    for jt, run in zip(plan.judges, plan.runs):
        if not run.get("backend") or not run.get("method"):
            raise ValueError(f"{path}: judge {jt.name!r}: the plan names no backend or method")
        if "***" in str(run["backend"]):
            raise ValueError(f"{path}: judge {jt.name!r}: its backend spec {run['backend']!r} had a secret, masked in the records: give the key through the backend's environment variable and write the spec without it in the plan")
    return plan, digest


@dataclass
class JudgeTally:
    """What one judge of a live cascade did: pairs ``asked``, ``decided``, ``failed`` records, and
    the ``cost_usd`` and ``tokens`` its records report (``None`` while none reports them)."""

    name: str
    asked: int = 0
    decided: int = 0
    failed: int = 0
    cost_usd: float | None = None
    tokens: int | None = None

    def count(self, cost: float | None, tokens: int | None) -> None:
        """Add one record's cost and tokens."""
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens


@dataclass
class LiveCascade:
    """The plan's judges (``judges[j]``: an object with ``compare_stream(pairs, mode=...)``, e.g.
    :class:`~capjudge.judges.judge.Judge`), the ``modes`` they are asked in (the plan's: ``pairwise``,
    ``single``, ``grading``), ``seed`` of the shown-first choice of single-order judges."""

    plan: CascadePlan
    judges: Sequence[Any]
    plan_file: str = ""
    plan_digest: str = ""
    seed: int = 0
    tallies: list[JudgeTally] = field(default_factory=list)
    abstained: int = 0

    def __post_init__(self) -> None:
        if len(self.judges) != len(self.plan.judges):
            raise ValueError(f"the plan has {len(self.plan.judges)} judges, {len(self.judges)} given")
        self.tallies = [JudgeTally(j.name) for j in self.plan.judges]

    def mode(self, j: int) -> str | None:
        """The compare mode of judge ``j`` (the plan's; ``None``: its method's default)."""
        return self.plan.runs[j].get("mode") if j < len(self.plan.runs) else None

    def _confidence(self, rec: Any) -> tuple[float | None, str | None]:
        if getattr(rec, "status", "ok") != "ok":
            return None, None
        try:
            conf, rule = pair_confidence(rec.to_dict(), rec.details or {})
        except ValueError:
            return None, None
        return conf, rule

    def _keeps(self, j: int, conf: float | None) -> bool:
        t = self.plan.judges[j].threshold
        if t is None or conf is None:
            return False
        c = float(np.float32(conf)) if self.plan.rule == "official" else float(conf)
        return c >= t

    def _ask(self, j: int, pairs: list[Any]) -> Iterator[tuple[int, Any]]:
        mode = self.mode(j)
        if mode == "single":
            from capjudge.judges.pairwise import with_order

            pairs = [with_order(p, self.seed) for p in pairs]
        return self.judges[j].compare_stream(pairs, mode=mode)  # type: ignore[no-any-return]

    def stream(self, pairs: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """Judge ``pairs`` through the cascade: ``(position, record)`` as each pair is decided
        (or abstained on)."""
        pairs = list(pairs)
        pending = list(range(len(pairs)))
        asked: dict[int, list[dict[str, Any]]] = {i: [] for i in pending}
        last = len(self.plan.judges) - 1
        for j, jt in enumerate(self.plan.judges):
            if not pending:
                break
            still: list[int] = []
            for k, rec in self._ask(j, [pairs[i] for i in pending]):
                i = pending[k]
                conf, rule = self._confidence(rec)
                tally = self.tallies[j]
                tally.asked += 1
                tally.failed += getattr(rec, "status", "ok") != "ok"
                entry = _entry(jt.name, rec, conf)
                tally.count(entry["cost_usd"], entry["tokens"])
                asked[i].append(entry)
                if self._keeps(j, conf):
                    tally.decided += 1
                    yield i, self._stamp(rec, j, conf, rule, asked.pop(i), abstained=False)
                elif j == last:
                    self.abstained += 1
                    yield i, self._stamp(rec, j, conf, rule, asked.pop(i), abstained=True)
                else:
                    still.append(i)
            pending = sorted(still)

    def _stamp(self, rec: Any, j: int, conf: float | None, rule: str | None, asked: list[dict[str, Any]], *, abstained: bool) -> Any:
        jt = self.plan.judges[j]
        details = rec.details if isinstance(rec.details, dict) else {}
        details["cascade"] = {
            "decided_by": None if abstained else jt.name,
            "judge": None if abstained else j,
            "confidence": conf,
            "confidence_rule": rule,
            "threshold": jt.threshold,
            "abstained": abstained,
            "plan": {"file": self.plan_file, "digest": self.plan_digest, "alpha": self.plan.alpha, "delta": self.plan.delta, "rule": self.plan.rule},
            "asked": asked,
        }
        rec.details = details
        return rec

    def summary(self) -> dict[str, Any]:
        """Pairs asked and decided per judge, abstentions, coverage (share decided)."""
        done = sum(t.decided for t in self.tallies)
        total = done + self.abstained
        return {"judges": [t.__dict__.copy() for t in self.tallies], "decided": done, "abstained": self.abstained, "coverage": done / total if total else None}


def _entry(name: str, rec: Any, conf: float | None) -> dict[str, Any]:
    details = rec.details if isinstance(rec.details, dict) else {}
    cost, tokens = record_usage(details, rec.to_dict())
    return {"name": name, "backend": getattr(rec, "backend", None), "verdict": getattr(rec, "verdict", None), "confidence": conf, "status": getattr(rec, "status", "ok"), "usage": details.get("usage"), "tokens": tokens, "cost_usd": cost}
