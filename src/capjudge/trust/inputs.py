"""Reading what the trust tools work on: a judge's results file and a file of human labels, joined
by ``id``.

Human labels: JSONL, one object per line with ``id`` and ``human``: a number (a score), ``"A"`` /
``"B"`` / ``"tie"`` (a pair verdict), or a list of them (one per annotator): the mean of the scores,
the most common verdict (a shared top is ``"tie"``).

Results: capjudge's results JSONL (score records and pair records, :mod:`capjudge.data.types`), keyed by
``id``; records with ``status: "error"`` are counted as failed and left out. The confidence of a
pair record, and the rule it came from (``confidence_rule``):

- ``details.confidence`` when the record has it (a number in [0, 1]), its rule the record's
  ``details.confidence_rule`` (``logprobs``, ``sampling``, ``panel``, ...: method option
  ``confidence=on``, :mod:`capjudge.judges.confidence`) or ``details.confidence`` when it names none;
- else ``votes``: the share of the record's votes that equal its verdict, when it has two votes
  or more (a dual-sided run: 1.0 when both orders agree; 0.0 when they part and the verdict is a
  tie that neither order said). A record with one vote and no ``details.confidence`` has no
  confidence: a bad row.

Score records keep their ``details.confidence`` and ``details.score_sd`` when they carry them.

A bad row (not JSON, not an object, no usable ``id``, an ``id`` twice, a value of the wrong kind) is
a problem naming the file, the line and the cause; the other rows are kept.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.data.io import InputFormatError, read_jsonl

VERDICTS = ("A", "B", "tie")


class TrustInputError(InputFormatError):
    """A file the trust tools cannot use at all (missing, no usable row)."""


@dataclass(frozen=True)
class HumanLabel:
    """One id's human label: ``value`` (the mean score, or the majority verdict) and the
    annotators' ``votes`` as given."""

    value: float | str
    votes: tuple[Any, ...]


@dataclass
class HumanLabels:
    """The labels of a human-labels file by id, and its bad rows."""

    path: str
    labels: dict[str, HumanLabel] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``score``, ``pair`` or ``mixed`` (``empty`` without labels)."""
        kinds = {"pair" if isinstance(h.value, str) else "score" for h in self.labels.values()}
        return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "empty")


def _id(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, str)) and str(value).strip():
        return str(value)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def majority(votes: list[str]) -> str:
    """The most common verdict; a shared top is ``"tie"``."""
    counts = Counter(votes).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return "tie"
    return counts[0][0]


def _human_value(raw: Any) -> float | str:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise ValueError("'human' is an empty list")
    if all(isinstance(v, str) for v in items):
        bad = [v for v in items if v not in VERDICTS]
        if bad:
            raise ValueError(f"'human' verdict {bad[0]!r} is not one of A, B, tie")
        return majority(list(items))
    numbers = [_number(v) for v in items]
    if any(n is None for n in numbers):
        raise ValueError(f"'human' must be a finite number, A/B/tie, or a list of one kind of them, not {raw!r}")
    return sum(n for n in numbers if n is not None) / len(numbers)


def read_human(path: str | Path) -> HumanLabels:
    """Read a human-labels JSONL file (``id``, ``human``)."""
    out = HumanLabels(str(path))
    seen: dict[str, int] = {}
    for number, where, key, value in _keyed_objects(path, seen, out.problems, "a non-empty string or an integer"):
        if "human" not in value:
            out.problems.append(f"{where}: id {key!r}: no 'human' field")
            continue
        try:
            label = _human_value(value["human"])
        except ValueError as exc:
            out.problems.append(f"{where}: id {key!r}: {exc}")
            continue
        seen[key] = number
        votes = value["human"] if isinstance(value["human"], list) else [value["human"]]
        out.labels[key] = HumanLabel(label, tuple(votes))
    return out


def _keyed_objects(path: str | Path, seen: dict[str, int], problems: list[str], id_rule: str) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """``(line number, "FILE line N", id, object)`` for each line of ``path`` that is a JSON object
    with a usable id not in ``seen`` (the caller records the ids it keeps); every other line is a
    problem naming the file and line (``id_rule`` says what an id must be)."""
    for number, value, error in _lines(path):
        where = f"{path} line {number}"
        if error is not None:
            problems.append(f"{where}: {error}")
            continue
        if not isinstance(value, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        key = _id(value.get("id"))
        if key is None:
            problems.append(f"{where}: no usable 'id' ({id_rule})")
            continue
        if key in seen:
            problems.append(f"{where}: id {key!r} again (first on line {seen[key]}): kept the first")
            continue
        yield number, where, key, value


def _lines(path: str | Path) -> list[tuple[int, Any, str | None]]:
    try:
        return [(line.number, line.value, line.error) for line in read_jsonl(path)]
    except FileNotFoundError:
        raise TrustInputError(f"{path}: no such file") from None
    except OSError as exc:
        raise TrustInputError(f"{path}: cannot be read: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class JudgeRow:
    """One ok record: ``value`` its score (score records) or verdict (pair records), its
    ``confidence`` and ``rule`` (pair records; score records: when they carry one), the record's
    ``scale``, ``image`` (for clustering), the ``cost_usd`` / ``tokens`` it reports (``None``: not
    said), a score's ``score_sd`` (``details.score_sd``) and the
    ``details.calibration.calibrated`` value a ``--calibration`` run added (``None``: none)."""

    id: str
    value: float | str
    image: str
    confidence: float | None = None
    rule: str | None = None
    scale: tuple[float, float] | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    score_sd: float | None = None
    calibrated: float | None = None


@dataclass
class JudgeResults:
    """The ok records of a results file by id, the failed ids, its bad rows, and what made it."""

    path: str
    kind: str = "empty"
    rows: dict[str, JudgeRow] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    methods: Counter[str] = field(default_factory=Counter)
    backends: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)
    templates: Counter[str] = field(default_factory=Counter)

    def run(self) -> dict[str, Any]:
        """How the judge was run, as its records say (the most common of each): ``backend`` (as
        records show it, secrets masked), ``method``, ``mode`` (pair records), ``template_hash``,
        and the ``results`` file."""
        top = {k: (c.most_common(1)[0][0] if c else None) for k, c in (("backend", self.backends), ("method", self.methods), ("mode", self.modes), ("template_hash", self.templates))}
        return {**top, "results": self.path}

    @property
    def name(self) -> str:
        """The file's stem (how tables name the judge)."""
        return Path(self.path).stem

    @property
    def confidence_rule(self) -> str | None:
        """The confidence rule of the records (a record's ``details.confidence_rule``,
        ``details.confidence``, ``votes``, or ``mixed: ...``); ``None`` when no record has one
        (score records without ``confidence=on``)."""
        rules = Counter(r.rule for r in self.rows.values() if r.rule)
        if not rules:
            return None
        return next(iter(rules)) if len(rules) == 1 else "mixed: " + ", ".join(f"{k} {v}" for k, v in sorted(rules.items()))

    @property
    def scale(self) -> tuple[float, float] | None:
        """The score records' most common scale."""
        scales = Counter(r.scale for r in self.rows.values() if r.scale)
        return scales.most_common(1)[0][0] if scales else None

    def cost_per_judgment(self) -> float | None:
        """The mean ``cost_usd`` of the records that report one (``None`` when none does)."""
        costs = [r.cost_usd for r in self.rows.values() if r.cost_usd is not None]
        return sum(costs) / len(costs) if costs else None

    def tokens_per_judgment(self) -> float | None:
        """The mean token count (prompt and completion) of the records that report usage."""
        tokens = [r.tokens for r in self.rows.values() if r.tokens is not None]
        return sum(tokens) / len(tokens) if tokens else None


def record_usage(details: dict[str, Any], rec: dict[str, Any]) -> tuple[float | None, int | None]:
    """The cost and token count a record reports: ``cost_usd`` (top level, ``details``, or
    ``details.backend_meta``) and ``details.usage`` (an object, or a list of them for the orders of
    a pair), summed."""
    meta = details.get("backend_meta")
    cost = None
    for where in (rec, details, meta if isinstance(meta, dict) else {}):
        c = where.get("cost_usd")
        c = [c] if not isinstance(c, list) else c
        nums = [_number(v) for v in c if v is not None]
        if nums and all(v is not None for v in nums):
            cost = sum(v for v in nums if v is not None)
            break
    usage = details.get("usage")
    items = usage if isinstance(usage, list) else [usage]
    tokens = None
    counted = [u for u in items if isinstance(u, dict)]
    if counted:
        tokens = sum(int(_number(u.get("prompt_tokens")) or 0) + int(_number(u.get("completion_tokens")) or 0) for u in counted)
    return cost, tokens


def pair_confidence(rec: dict[str, Any], details: dict[str, Any]) -> tuple[float, str]:
    """A pair record's confidence and its rule (module docstring); ``ValueError`` when none."""
    given = details.get("confidence")
    if given is not None:
        c = _number(given)
        if c is None or not 0.0 <= c <= 1.0:
            raise ValueError(f"details.confidence {given!r} is not a number in [0, 1]")
        rule = details.get("confidence_rule")
        return c, rule if isinstance(rule, str) and rule else "details.confidence"
    votes = [v for v in (rec.get("votes") or []) if isinstance(v, str)]
    if rec.get("mode", "pairwise") == "grading":
        raise ValueError("a grading record (two scores) has no confidence: give details.confidence")
    if len(votes) >= 2:
        return sum(v == rec.get("verdict") for v in votes) / len(votes), "votes"
    raise ValueError("no confidence: one vote and no details.confidence (a single-order run: ask both orders)")


def read_results(path: str | Path) -> JudgeResults:
    """Read a judge's results file (module docstring)."""
    out = JudgeResults(str(path))
    kinds: Counter[str] = Counter()
    seen: dict[str, int] = {}
    for number, where, key, rec in _keyed_objects(path, seen, out.problems, "the trust tools join by id"):
        seen[key] = number
        kind = "pair" if "verdict" in rec else ("score" if "score" in rec else None)
        if kind is None:
            out.problems.append(f"{where}: id {key!r}: neither a score nor a pair record")
            continue
        kinds[kind] += 1
        if rec.get("status", "ok") != "ok":
            out.failed[key] = str(rec.get("error") or "failed")
            continue
        raw_details = rec.get("details")
        details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
        cost, tokens = record_usage(details, rec)
        image = str(rec.get("image") or key)
        out.methods[str(rec.get("method"))] += 1
        out.backends[str(rec.get("backend"))] += 1
        out.templates[str(rec.get("template_hash"))] += 1
        if kind == "pair":
            out.modes[str(rec.get("mode") or "pairwise")] += 1
        try:
            out.rows[key] = _row(kind, key, rec, details, image, cost, tokens)
        except ValueError as exc:
            out.problems.append(f"{where}: id {key!r}: {exc}")
    if len(kinds) > 1:
        raise TrustInputError(f"{path}: holds both score and pair records ({kinds['score']} and {kinds['pair']}): one kind per file")
    out.kind = next(iter(kinds)) if kinds else "empty"
    return out


def _row(kind: str, key: str, rec: dict[str, Any], details: dict[str, Any], image: str, cost: float | None, tokens: int | None) -> JudgeRow:
    if kind == "pair":
        verdict = rec.get("verdict")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r} is not one of A, B, tie")
        conf, rule = pair_confidence(rec, details)
        return JudgeRow(key, verdict, image, conf, rule, None, cost, tokens)
    score = _number(rec.get("score"))
    if score is None:
        raise ValueError(f"score {rec.get('score')!r} is not a finite number")
    scale = rec.get("scale")
    sc = None
    if isinstance(scale, list) and len(scale) == 2 and all(_number(v) is not None for v in scale):
        sc = (float(scale[0]), float(scale[1]))
    score_conf, score_rule = _number(details.get("confidence")), details.get("confidence_rule")
    if score_conf is not None and not 0.0 <= score_conf <= 1.0:
        raise ValueError(f"details.confidence {details.get('confidence')!r} is not a number in [0, 1]")
    sd = _number(details.get("score_sd"))
    if sd is not None and sd < 0.0:
        raise ValueError(f"details.score_sd {details.get('score_sd')!r} is negative")
    named = (score_rule if isinstance(score_rule, str) and score_rule else "details.confidence") if score_conf is not None else None
    cal = details.get("calibration")
    calibrated = _number(cal.get("calibrated")) if isinstance(cal, dict) else None
    return JudgeRow(key, score, image, score_conf, named, sc, cost, tokens, sd, calibrated)
