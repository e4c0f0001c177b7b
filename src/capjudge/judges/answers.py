"""Reading an answer: the method's parser kind picks its reader, which turns the backend's answer
into a score record (smoothed from the digit tokens' probabilities where the method smooths).

:data:`PARSERS` is the one table of parser kinds (``Method.parser``): each kind's label (as
``capjudge methods`` shows it) and its reader. A reader gets the method, the prepared sample, the
answer, the record's ``details`` so far and the judge's record maker, and returns the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from capjudge.backends.base import Completion
from capjudge.core.redact import get_logger
from capjudge.data.types import REASONING_CUT_OFF, ScoreResult
from capjudge.judges.confidence import score_fields
from capjudge.judges.expected import (
    Printed,
    expected_score,
    has_logprobs,
    printed_by_rules,
    printed_first_integer,
)
from capjudge.judges.prepare import Prepared, sample_id
from capjudge.judges.reasoning import META_KEYS, cut_off_message, final_answer, reasoning_details
from capjudge.judges.records import cached_note, short
from capjudge.judges.smoothing import (
    BARE_SCORE_PATTERN,
    SCORE_PATTERN,
    CodeSearchError,
    smooth_by_code_search,
    smooth_from_steps,
)
from capjudge.parsing import parse_score_details
from capjudge.parsing.official import first_integer, fleur_code_number
from capjudge.parsing.text import clean, coerce_text
from capjudge.prompts.registry import Method

log = get_logger(__name__)


class Record(Protocol):
    """A judge's record maker (``Judge.record``): the checked record of ``prep`` with ``fields``."""

    def __call__(self, prep: Prepared, **fields: Any) -> ScoreResult:
        """The record of ``prep``."""
        ...


Reader = Callable[[Method, Prepared, Completion, dict[str, Any], Record], ScoreResult]


@dataclass(frozen=True)
class ParserKind:
    """A parser kind: its ``label`` (``capjudge methods``) and its ``read`` function."""

    label: str
    read: Reader


def occurrence(text: str, parsed: Any) -> int:
    """How many numbers with the parsed score's value stand before it in the answer (so that
    "on a scale of 0.0 to 1.0, I'd give 1.0" smooths the second "1.0", not the restated scale)."""
    if parsed.span is None or parsed.value is None:
        return 0
    before = clean(coerce_text(text) or "")[: parsed.span[0]]
    if is_bare(parsed):
        return sum(1 for m in BARE_SCORE_PATTERN.finditer(before) if float(m.group(1)) == parsed.value)
    return sum(1 for m in SCORE_PATTERN.finditer(before) if abs(float(m.group(0)) - parsed.value) < 1e-9)


def is_bare(parsed: Any) -> bool:
    """The parser read a bare ``0`` or ``1`` (no decimals), which FLEUR's code smooths too."""
    return parsed.value in (0.0, 1.0) and (parsed.matched or "").strip() in ("0", "1")


def read_rules(method: Method, prep: Prepared, out: Completion, details: dict[str, Any], record: Record) -> ScoreResult:
    """capjudge's score rules (:func:`capjudge.parsing.parse_score_details`); smoothing methods
    smooth from the digit tokens, or take a sampling estimate's mean (:mod:`.sampling`)."""
    low, high = method.scale
    form = method.options.get("answer_form", "decimal")
    parsed = parse_score_details(out.text, low=low, high=high, answer_form=form)
    if method.smoothing:
        second = method.options.get("second_decimal", "official")
        # A spaced score ("0 5") is the whole answer: the first one in the tokens.
        where = 0 if parsed.rule == "spaced" else occurrence(out.text, parsed)
        sm = smooth_from_steps(out.steps, expected=parsed.value, occurrence=where, second_decimal=second, answer_form="spaced" if parsed.rule == "spaced" else "decimal", bare=is_bare(parsed)) if out.steps and parsed.value is not None else None
        if sm is not None:
            details["digit_probs"] = {"first": sm.first, "second": sm.second, "units": sm.units}
            return record(prep, score=sm.score, raw_score=sm.raw_score, smoothed=True, raw=out.text, details=details)
        est = (out.meta or {}).get("sampling_estimate")
        if isinstance(est, dict) and est.get("mean") is not None:
            # No log-probabilities: the expected score is estimated from N sampled answers
            # (G-Eval style, the FLEUR paper Sec. 5.2.2): the mean of their parsed scores.
            score = float(est["mean"])
            details["smoothing"] = f"estimated by sampling {sampled(est)} answers (no log-probabilities)"
            return record(prep, score=score, raw_score=parsed.value, smoothed=True, raw=out.text, details=details)
        details["smoothing"] = (
            "not applied: the backend gave no token probabilities (raw score)"
            if not out.steps
            else "not applied: the answer holds no 0.x / 1.0 score at its digit tokens (raw score)"
        )
    elif method.expected_score and parsed.value is not None:
        return read_expected(prep, out, details, record, parsed.value, printed_by_rules(out.text, parsed, low, high))
    if parsed.value is None:
        return record(prep, score=None, raw=out.text, status="error", error=f"sample {sample_id(prep.sample, prep.index)}: no score in the answer ({parsed.reason}): {short(out.text)!r}{cached_note(out)}", details=details)
    return record(prep, score=parsed.value, raw_score=parsed.value, smoothed=False, raw=out.text, details=details)


def sampled(est: dict[str, Any]) -> Any:
    """How many sampled answers an estimate stands on: its answers without an error (the calls
    made on a first run; the same again when the cache answers them), else its ``calls``."""
    if isinstance(est.get("n"), int) and isinstance(est.get("errors"), int):
        return est["n"] - est["errors"]
    return est.get("calls", "?")


def read_first_integer(method: Method, prep: Prepared, out: Completion, details: dict[str, Any], record: Record) -> ScoreResult:
    """The VisCE2 code's reading: the first integer of the answer, whatever it is."""
    value = first_integer(out.text)
    if value is None:
        if method.options.get("no_number") == "zero":
            details["fallback"] = "no number in the answer: scored 0, as the VisCE2 code does (no_number=zero)"
            return record(prep, score=0.0, raw_score=None, smoothed=False, raw=out.text, details=details)
        where = sample_id(prep.sample, prep.index)
        return record(prep, score=None, raw=out.text, status="error", error=f"sample {where}: no number in the answer (the VisCE2 code would score 0; method option no_number=zero does the same): {short(out.text)!r}{cached_note(out)}", details=details)
    low, high = method.scale
    if method.expected_score:
        return read_expected(prep, out, details, record, value, printed_first_integer(out.text, low, high))
    if not low <= value <= high:
        details["outside_scale"] = True  # the code keeps it; so does this method
    return record(prep, score=value, raw_score=value, smoothed=False, raw=out.text, details=details)


EXPECTED_HELP = "ask a sampling estimate with estimate_by_sampling=N (--backend-opt estimate_by_sampling=N), or use score=plain"


def read_expected(prep: Prepared, out: Completion, details: dict[str, Any], record: Record, raw_score: float, printed: Printed | str) -> ScoreResult:
    """``score=expected`` (:mod:`.expected`): the probability-weighted value of the number read
    (``raw_score``, located as ``printed``) at its tokens; without log-probabilities the sampling
    estimate's mean when the judge asked one, else an error record: never the plain score."""
    where = sample_id(prep.sample, prep.index)

    def failed(why: str) -> ScoreResult:
        message = f"sample {where}: score=expected: {why} (the printed score was {raw_score:g}){cached_note(out)}"
        return record(prep, score=None, raw=out.text, status="error", error=message, details=details)

    if not has_logprobs(out):
        est = (out.meta or {}).get("sampling_estimate")
        if isinstance(est, dict):
            if est.get("mean") is None:
                return failed(f"the answer has no token log-probabilities and none of the {est.get('n', '?')} sampled answers held a score")
            details["expected"] = {"rule": "sampling", "n": sampled(est)}
            details["smoothing"] = f"estimated by sampling {sampled(est)} answers (no log-probabilities)"
            return record(prep, score=float(est["mean"]), raw_score=raw_score, smoothed=True, raw=out.text, details=details)
        if "answer_steps" in details:
            return failed(f"{details['answer_steps']}; {EXPECTED_HELP}")
        return failed(f"the backend gave no token log-probabilities for this answer; {EXPECTED_HELP}")
    if isinstance(printed, str):
        return failed(printed)
    got = expected_score(out.steps, printed)
    if isinstance(got, str):
        return failed(got)
    details["expected"] = got.details
    return record(prep, score=got.score, raw_score=raw_score, smoothed=True, raw=out.text, details=details)


def read_fleur_code(method: Method, prep: Prepared, out: Completion, details: dict[str, Any], record: Record) -> ScoreResult:
    """The FLEUR code's reading (digits and dots of the answer) and its positional search."""
    where = sample_id(prep.sample, prep.index)
    parsed = fleur_code_number(out.text, out.finish_reason)
    if parsed.value is None:
        return record(prep, score=None, raw=out.text, status="error", error=f"sample {where}: FLEUR's code reads no number from the answer (its digits and dots are {parsed.digits!r}): {short(out.text)!r}{cached_note(out)}", details=details)
    if not 0.0 <= parsed.value <= 1.0:
        return record(prep, score=None, raw=out.text, status="error", error=f"sample {where}: FLEUR's code reads {parsed.digits.strip('.')!r} = {parsed.value:g}, outside 0-1 (its code skips such samples): {short(out.text)!r}{cached_note(out)}", details=details)
    if not out.steps:
        details["smoothing"] = "not applied: the backend gave no token probabilities (raw score)"
        return record(prep, score=parsed.value, raw_score=parsed.value, smoothed=False, raw=out.text, details=details)
    try:
        sm = smooth_by_code_search(out.steps, parsed.value)
    except CodeSearchError as exc:
        return record(prep, score=None, raw=out.text, status="error", error=f"sample {where}: FLEUR's code cannot smooth this answer ({exc}; its code would reuse the previous sample's score): {short(out.text)!r}{cached_note(out)}", details=details)
    details["digit_probs"] = {"first": sm.first, "second": sm.second, "units": sm.units}
    return record(prep, score=sm.score, raw_score=sm.raw_score, smoothed=True, raw=out.text, details=details)


def read_elsewhere(method: Method, prep: Prepared, out: Completion, details: dict[str, Any], record: Record) -> ScoreResult:
    """Readers of the detailed-caption methods, which read their answers in their own flow
    (pairwise verdicts: ``judges.pairwise.read_verdict``; steps: ``judges.detailed``): a single
    scoring answer is not theirs to read."""
    where = sample_id(prep.sample, prep.index)
    return record(prep, score=None, raw=out.text, status="error", error=f"sample {where}: method {method.name!r} reads its answers in its own steps, not as one score", details=details)


PARSERS: dict[str, ParserKind] = {
    "rules": ParserKind("capjudge rules", read_rules),
    "first-integer": ParserKind("first integer", read_first_integer),
    "fleur-code": ParserKind("FLEUR code digits", read_fleur_code),
    "caparena": ParserKind("CapArena code Reason/Judgment (strict, asked again)", read_elsewhere),
    "capmas": ParserKind("CapMAS code a2l lists", read_elsewhere),
    "clair": ParserKind("CLAIR code JSON or first number", read_elsewhere),
    "capability": ParserKind("CAPability eval.py literal_eval and validators", read_elsewhere),
    "captionqa": ParserKind("CaptionQA code extract_letter", read_elsewhere),
    "dcscore": ParserKind("DeCapBench code JSON lists (parse_text_json)", read_elsewhere),
}
"""Parser kinds (``Method.parser``): label and reader."""


def answer_details(method: Method, out: Completion) -> dict[str, Any]:
    """What every score record of an answer says in ``details``: cached or not, token usage,
    prefix reuse, the backend's other notes (``backend_meta``), the method options."""
    details: dict[str, Any] = {"cached": out.cached}
    if out.usage is not None:
        details["usage"] = out.usage.to_dict()  # reasoning_tokens (part of completion_tokens) when any
    meta = {k: v for k, v in (out.meta or {}).items() if k not in META_KEYS}  # the reasoning: details.reasoning
    reuse = meta.pop("prefix_reuse", None)
    if reuse is not None:  # HF: "used", or why this answer was decoded without prefix reuse
        details["prefix_reuse"] = reuse
    if meta:
        details["backend_meta"] = meta
    if method.options:
        details["method_options"] = dict(method.options)
    return details


def read_answer(method: Method, prep: Prepared, out: Completion, record: Record) -> ScoreResult:
    """The record of ``out``, read by the method's parser kind (capjudge's rules for a kind the
    table does not name) from the final answer after any reasoning (:mod:`.reasoning`): a
    reasoning cut off by the token budget is an error record."""
    kind = PARSERS.get(method.parser, PARSERS["rules"])
    fa = final_answer(out)
    if method.confidence:
        record = with_confidence(method, fa.completion, record)
    if fa.plain:
        return kind.read(method, prep, out, answer_details(method, out), record)
    details = {**answer_details(method, out), **reasoning_details(fa)}
    if fa.cut_off:
        return record(prep, score=None, raw=fa.raw, status="error", error=f"sample {sample_id(prep.sample, prep.index)}: {cut_off_message(fa)}{cached_note(out)}", details={**details, REASONING_CUT_OFF: True})

    def keep_final(prep: Prepared, **fields: Any) -> ScoreResult:
        if "raw" in fields:
            fields["raw"] = fa.raw  # the final answer, \boxed{} included; the reasoning is in details
        return record(prep, **fields)

    return kind.read(method, prep, fa.completion, details, keep_final)


def with_confidence(method: Method, out: Completion, record: Record) -> Record:
    """``record``, adding to each ok record the confidence fields of the answer ``out``
    (``confidence=on``, :func:`capjudge.judges.confidence.score_fields`)."""

    def make(prep: Prepared, **fields: Any) -> ScoreResult:
        if fields.get("status", "ok") == "ok" and fields.get("score") is not None:
            fields["details"] = {**(fields.get("details") or {}), **score_fields(method, out, fields.get("raw_score"))}
        return record(prep, **fields)

    return make


def read_safely(method: Method, prep: Prepared, out: Completion, record: Record) -> ScoreResult:
    """:func:`read_answer`, with any parser failure turned into this sample's error record."""
    try:
        return read_answer(method, prep, out, record)
    except Exception as exc:  # noqa: BLE001 - one odd answer never stops a run
        log.exception("parsing failed")
        message = f"sample {sample_id(prep.sample, prep.index)}: the answer could not be parsed: {type(exc).__name__}: {exc}"
        return record(prep, score=None, raw=out.text, status="error", error=message, details={})


__all__ = ["PARSERS", "ParserKind", "Reader", "Record", "answer_details", "is_bare", "occurrence", "read_answer", "read_elsewhere", "read_expected", "read_first_integer", "read_fleur_code", "read_rules", "read_safely"]
