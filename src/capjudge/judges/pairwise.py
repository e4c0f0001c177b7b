"""Pairwise A/B comparison (the GPT-4V evaluator paper): dual-sided voting, or single grading of both captions.

:class:`~capjudge.judges.judge.Judge` exposes these as ``Judge.compare``, ``Judge.compare_many`` and
``Judge.compare_stream``; ``capjudge compare`` and ``capjudge arena`` go through them. What pairwise
judging needs from a judge is the small public interface :class:`PairJudge` (``Judge`` provides it),
so this module never imports ``judge.py``: the dependency goes one way.

Dual-sided: the pair is asked twice, (A, B) and (B, A); the second verdict is mapped back to the
original labels and the two are combined with :func:`~capjudge.judges.voting.dual_sided_vote`.
Grading: both captions are scored with the judge's method and the higher score wins.
Single order (``mode="single"``, CapArena's protocol): the pair is asked once, the caption shown
first chosen by a seeded hash of the image and the two captions (:func:`shown_first_of`) unless
the pair fixes it (``Pair.first``); the verdict is mapped back to the original labels and the
record says which caption was shown first (``details["shown_first"]``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from capjudge.backends.base import Backend, Completion, Request
from capjudge.backends.faults import failure_details
from capjudge.data.images import LoadedImage
from capjudge.data.types import (
    REASONING_CUT_OFF,
    ImageInput,
    PairResult,
    Sample,
    ScoreResult,
    image_label,
    normalize_caption,
)
from capjudge.judges import confidence
from capjudge.judges.dispatch import (
    Answer,
    BatchExecutor,
    drive,
    in_input_order,
    make_executor,
)
from capjudge.judges.invariants import pair_problem
from capjudge.judges.reasoning import cut_off_message, final_answer, reasoning_details
from capjudge.judges.records import bound_raw_fields, cached_note, caption_words
from capjudge.judges.sampling import wants_estimate
from capjudge.judges.scoring import ImageMemo, read_windows
from capjudge.judges.steps import FORMAT_RETRIES, format_retrying
from capjudge.judges.voting import dual_sided_vote, flip, seeded_first, verdict_from_scores
from capjudge.parsing import parse_verdict
from capjudge.parsing.detailed import caparena_answer
from capjudge.prompts.registry import Method, TemplateError, get_template

CompareMode = Literal["pairwise", "grading", "single"]

DEFAULT_PAIRWISE_TEMPLATE = "gpt4v_pairwise"


class PreparedSample(Protocol):
    """A caption checked and its image loaded, or the error that stops it."""

    image: LoadedImage | None
    error: str | None


class PairJudge(Protocol):
    """What pairwise judging needs from a judge (:class:`~capjudge.judges.judge.Judge` provides it)."""

    method: Method
    backend: Backend
    batch_size: int

    @property
    def backend_spec(self) -> str:
        """The backend spec written into results."""
        ...

    def prepare_sample(self, index: int, sample: Sample, images: dict[Any, Any] | None = None) -> PreparedSample:
        """Check a caption and load its image (``images`` memoises loads)."""
        ...

    def request(self, prompt: str, image: LoadedImage, max_new_tokens: int, references: Sequence[str] = (), *, logprobs: bool = False) -> Request:
        """A request with the judge's system turn (a method's official one rendered with
        ``references``), the image and ``prompt`` (``logprobs``: the token alternatives asked)."""
        ...

    def score_stream(self, samples: Iterable[Sample]) -> Iterator[tuple[int, ScoreResult]]:
        """Score samples, yielding ``(input index, result)`` as each result is made."""
        ...


def resolve_mode(method: Method, mode: CompareMode | None) -> CompareMode:
    """The comparison mode a run uses: ``mode``, or by the method's kind (``"pairwise"`` for
    pairwise methods, ``"grading"`` for scoring methods); ``"single"`` (one order per pair) only
    when asked. ``ValueError`` when grading is asked of a method that does not score single captions."""
    resolved: CompareMode = mode or ("pairwise" if method.pairwise else "grading")
    if resolved == "grading" and method.kind != "score":
        raise ValueError(f"comparison by grading needs a scoring method, not {method.name!r}")
    return resolved


def run_fields(judge: PairJudge, mode: CompareMode | None = None) -> dict[str, Any]:
    """The fields every pair record of this judge and mode carries (``method``, ``backend``,
    ``template_hash``, ``mode``): what a re-run checks before it continues a results file."""
    probe = _pair_result(judge, 0, None, None, resolve_mode(judge.method, mode), verdict=None)
    return {"method": probe.method, "backend": probe.backend, "template_hash": probe.template_hash, "mode": probe.mode}


@dataclass(frozen=True)
class Pair:
    """Two captions of one image to compare; ``caption_a`` is shown first in the first order.
    ``first`` (``"A"`` or ``"B"``) fixes the caption shown first in single-order comparison (none:
    a seeded hash decides, :func:`shown_first_of`)."""

    image: ImageInput
    caption_a: str
    caption_b: str
    references: tuple[str, ...] = ()
    id: str | None = None
    first: str | None = None

    def __post_init__(self) -> None:
        if self.first not in (None, "A", "B"):
            raise ValueError(f"shown_first must be 'A' or 'B', not {self.first!r}")


def shown_first_of(pair: Pair, seed: int = 0) -> str:
    """``"A"`` or ``"B"``: the caption a single-order comparison shows first, ``pair.first`` when
    the caller fixed it, else a seeded hash of the image and the two captions
    (:func:`capjudge.judges.voting.seeded_first`, the arena's choice of who is shown first)."""
    if pair.first is not None:
        return pair.first
    return "A" if seeded_first(seed, image_label(pair.image), pair.caption_a, pair.caption_b) == pair.caption_a else "B"


def with_order(item: Pair | dict[str, Any] | tuple[Any, ...], seed: int) -> Any:
    """``item`` as a :class:`Pair` whose ``first`` is fixed by ``seed`` (a malformed item is given
    back as it is, to become its error record)."""
    try:
        p = _as_pair(item)
    except (KeyError, TypeError, ValueError):
        return item
    return dataclasses.replace(p, first=shown_first_of(p, seed))


def _as_pair(item: Pair | dict[str, Any] | tuple[Any, ...]) -> Pair:
    if isinstance(item, Pair):
        return item
    if isinstance(item, dict):
        refs = item.get("references") or ()
        first = item.get("shown_first")
        return Pair(item["image"], item["caption_a"], item["caption_b"], (refs,) if isinstance(refs, str) else tuple(refs), item.get("id"), first if first not in ("", None) else None)
    if isinstance(item, (tuple, list)):
        return Pair(*item)
    raise TypeError(f"a pair is a Pair, a dict or a tuple (image, caption_a, caption_b), not {type(item).__name__}")


def compare(
    judge: PairJudge,
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
    higher single score wins, the GPT-4V evaluator paper) for scoring methods; ``"single"`` asks one
    order (seed 0 picks it, see :func:`shown_first_of`). Never raises for bad input.
    """
    return next(iter(compare_many(judge, [Pair(image, caption_a, caption_b, tuple(references), id)], mode=mode)))


def compare_many(
    judge: PairJudge, pairs: Iterable[Pair | dict[str, Any] | tuple[Any, ...]], *, mode: CompareMode | None = None
) -> Iterator[PairResult]:
    """Compare many pairs, yielding results in input order."""
    return in_input_order(compare_stream(judge, pairs, mode=mode))


def compare_stream(
    judge: PairJudge, pairs: Iterable[Pair | dict[str, Any] | tuple[Any, ...]], *, mode: CompareMode | None = None
) -> Iterator[tuple[int, PairResult]]:
    """Compare many pairs, yielding ``(input index, result)`` as each comparison is done.

    Dual-sided pairs go to the backend as ``score_stream`` sends captions: in batches of whole
    pairs for backends that batch, through a sliding window for API backends. Comparison by grading
    scores both captions through :meth:`Judge.score_stream`. Single order asks each pair once, the
    caption shown first fixed by the pair or chosen with seed 0 (:func:`with_order` fixes another seed).
    """
    resolved = resolve_mode(judge.method, mode)
    if resolved == "grading":
        return _graded(judge, pairs)
    if resolved == "single":
        return _single(judge, pairs)
    return _dual(judge, pairs)


def _pair_result(judge: PairJudge, index: int, pair: Pair | None, raw_item: Any, mode: CompareMode, **fields: Any) -> PairResult:
    template = judge.method.template if (mode == "grading" or judge.method.pairwise) else DEFAULT_PAIRWISE_TEMPLATE
    preset = getattr(judge, "judge_preset", None)
    if preset is not None:  # what ran: the judge preset of a local model
        fields["details"] = {**(fields.get("details") or {}), "judge_preset": preset}
    words = caption_words(pair.caption_a, pair.caption_b) if pair else None
    if words is not None:  # detailed captions: both captions' word counts
        fields["details"] = {**(fields.get("details") or {}), "caption_words": words}
    bound_raw_fields(fields)
    if fields.get("status", "ok") == "ok":  # every pair record is made here: "ok" has a valid verdict
        problem = pair_problem(fields.get("verdict"), fields.get("scores"))
        if problem is not None:
            fields.update(verdict=None, status="error", error=f"pair {pair.id if pair and pair.id is not None else index}: {problem}; not decided")
    return PairResult(
        id=(pair.id if pair and pair.id is not None else str(index)),
        image=image_label(pair.image) if pair else repr(raw_item)[:80],
        caption_a=pair.caption_a if pair else "",
        caption_b=pair.caption_b if pair else "",
        method=judge.method.name if mode == "grading" or judge.method.pairwise else template,
        backend=judge.backend_spec,
        model=judge.backend.model,
        template_hash=judge.method.template_hash if mode == "grading" else get_template(template).hash,
        mode=mode,
        **fields,
    )


def _parsed(i: int, item: Any) -> tuple[Pair | None, str | None]:
    try:
        return _as_pair(item), None
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"pair {i}: malformed pair ({type(exc).__name__}: {exc})"


def _graded(judge: PairJudge, pairs: Iterable[Any]) -> Iterator[tuple[int, PairResult]]:
    """Both captions scored by the judge's method; the higher score wins (the GPT-4V evaluator paper)."""
    ready: deque[tuple[int, PairResult]] = deque()  # malformed pairs, answered without the backend
    sides: list[tuple[int, int]] = []  # sample position -> (pair index, 0 for A / 1 for B)
    open_pairs: dict[int, tuple[Pair, Any, list[ScoreResult | None]]] = {}

    def samples() -> Iterator[Sample]:
        for i, item in enumerate(pairs):
            p, err = _parsed(i, item)
            if p is None:
                ready.append((i, _pair_result(judge, i, None, item, "grading", verdict=None, status="error", error=err)))
                continue
            open_pairs[i] = (p, item, [None, None])
            sides.append((i, 0))
            yield Sample(p.image, p.caption_a, p.references, f"{p.id or i}:A")
            sides.append((i, 1))
            yield Sample(p.image, p.caption_b, p.references, f"{p.id or i}:B")

    for k, res in judge.score_stream(samples()):
        while ready:
            yield ready.popleft()
        i, side = sides[k]
        p, item, got = open_pairs[i]
        got[side] = res
        if got[0] is not None and got[1] is not None:
            del open_pairs[i]
            yield i, _graded_result(judge, i, p, item, got[0], got[1])
    while ready:
        yield ready.popleft()


def _graded_result(judge: PairJudge, i: int, p: Pair, item: Any, ra: ScoreResult, rb: ScoreResult) -> PairResult:
    verdict = verdict_from_scores(ra.score, rb.score)
    errors = [r.error for r in (ra, rb) if not r.ok]
    return _pair_result(
        judge,
        i, p, item, "grading",
        verdict=verdict,
        scores=(ra.score, rb.score),
        raw=[ra.raw, rb.raw],
        status="ok" if verdict is not None else "error",
        error="; ".join(e for e in errors if e) or None,
        details={
            "smoothed": [ra.smoothed, rb.smoothed],
            "cached": [bool(ra.details.get("cached")), bool(rb.details.get("cached"))],
            **({"resumable": True} if any(r.details.get("resumable") for r in (ra, rb)) else {}),
            **(confidence.graded_fields(ra.details, rb.details, verdict) if judge.method.confidence and verdict is not None else {}),
        },
    )


class _DualRun:
    """Dual-sided comparison: each pair asked in both orders, the votes combined."""

    def __init__(self, judge: PairJudge) -> None:
        self.judge = judge
        self.executor = make_executor(judge.backend)
        self.done: deque[tuple[int, PairResult]] = deque()
        self.images = ImageMemo()  # the last images read: the pairs of one image read it once
        self.name = judge.method.template if judge.method.pairwise else DEFAULT_PAIRWISE_TEMPLATE
        self.tpl = get_template(self.name)

    def batches(self, pairs: Iterable[Any]) -> Iterator[list[tuple[int, Any]]]:
        size = max(1, self.judge.batch_size // 2) if isinstance(self.executor, BatchExecutor) else 1
        return read_windows(pairs, size)

    def _error(self, i: int, p: Pair | None, item: Any, message: str, **fields: Any) -> None:
        self.done.append((i, _pair_result(self.judge, i, p, item, "pairwise", verdict=None, status="error", error=message, **fields)))

    def orders(self, p: Pair, norm_a: str, norm_b: str) -> tuple[tuple[str, str], ...]:
        """The captions in the order of each request: (A, B) then (B, A)."""
        return ((norm_a, norm_b), (norm_b, norm_a))

    def start(self, batch: Sequence[tuple[int, Any]]) -> None:
        judge = self.judge
        for i, item in batch:
            p, err = _parsed(i, item)
            if p is None:
                self._error(i, None, item, err or f"pair {i}: malformed")
                continue
            prep_a = judge.prepare_sample(i, Sample(p.image, p.caption_a, p.references, p.id), self.images)
            prep_b = judge.prepare_sample(i, Sample(p.image, p.caption_b, p.references, p.id), self.images)
            bad = prep_a.error or prep_b.error
            if bad:
                self._error(i, p, item, bad.replace("empty caption", "empty caption in the pair"))
                continue
            assert prep_a.image is not None
            # Captions go in as the method's code passes them (CapArena's: raw).
            norm = normalize_caption if judge.method.normalize_caption else str
            norm_a, norm_b = norm(p.caption_a), norm(p.caption_b)
            try:
                prompts = [self.tpl.render(caption_a=first, caption_b=second, references=list(p.references)) for first, second in self.orders(p, norm_a, norm_b)]
            except TemplateError as exc:
                self._error(i, p, item, f"pair {p.id or i}: {exc}")
                continue
            got: list[Answer | None] = [None] * len(prompts)
            max_new = judge.method.max_new_tokens if judge.method.pairwise else 256
            # A method with official system turns renders them with the pair's references.
            refs = tuple(p.references) if judge.method.official_system else ()
            add = format_retrying(self.executor.add, judge.method.format_tries, functools.partial(format_ok, judge.method))
            for order, prompt in enumerate(prompts):
                # confidence=on: the answer's alternatives asked (other requests keep their cache keys)
                request = judge.request(prompt, prep_a.image, max_new, refs, logprobs=True) if judge.method.confidence else judge.request(prompt, prep_a.image, max_new, refs)
                add(request, self._sampled(request, functools.partial(self._answered, i, p, item, got, order, prep_a.image)))

    def _sampled(self, request: Request, then: Callable[[Answer], None]) -> Callable[[Answer], None]:
        """``then``, preceded for an answer without log-probabilities by the judge's sampled copies
        of ``request`` (``confidence=on`` with ``estimate_by_sampling=N``: their verdicts)."""
        n = int(getattr(self.judge, "estimate_samples", 0) or 0)
        if not (self.judge.method.confidence and n):
            return then

        def answered(out: Answer) -> None:
            if isinstance(out, Completion) and wants_estimate(request, out, n):
                confidence.ask_verdicts(self.executor.add, request, out, n, then, self.read)
            else:
                then(out)

        return answered

    def read(self, text: str) -> Any:
        """The method's verdict of ``text`` (on the captions as shown)."""
        return read_verdict(self.judge.method, text)[0]

    def _answered(self, i: int, p: Pair, item: Any, got: list[Answer | None], order: int, image: LoadedImage, out: Answer) -> None:
        got[order] = out
        o1, o2 = got
        if o1 is None or o2 is None:
            return
        failed = [o for o in (o1, o2) if isinstance(o, BaseException)]
        if failed:
            self._error(i, p, item, f"pair {p.id or i}: backend error: {type(failed[0]).__name__}: {failed[0]}", details=failure_details(failed[0]))
            return
        assert isinstance(o1, Completion) and isinstance(o2, Completion)
        # Verdicts are read from the final answers, after any reasoning (judges/reasoning.py).
        f1, f2 = final_answer(o1), final_answer(o2)
        t1, t2 = f1.raw, f2.raw
        thought = not (f1.plain and f2.plain)
        more: dict[str, Any] = {}
        if thought:
            for key in ("reasoning", "reasoning_tokens", "answer_cut"):
                both = [reasoning_details(f).get(key) for f in (f1, f2)]
                if any(v is not None for v in both):
                    more[key] = both
        cut = [f for f in (f1, f2) if f.cut_off]
        if cut:
            which = "first" if f1.cut_off else "second"
            self._error(i, p, item, f"pair {p.id or i}: the {which} order's answer: {cut_off_message(cut[0])}", raw=[t1, t2], details={**more, REASONING_CUT_OFF: True})
            return
        (v1, why1), (v2, why2) = read_verdict(self.judge.method, f1.completion.text), read_verdict(self.judge.method, f2.completion.text)
        shown = (v1, v2)
        v2 = flip(v2)
        votes = [v1, v2]
        retried = [list((o.meta or {}).get(FORMAT_RETRIES) or []) for o in (o1, o2)]
        if any(retried):  # answers of a bad format, asked again (CapArena: 5 tries)
            more["format_retries"] = retried
        if v1 is None or v2 is None:
            which, bad_out = ("first", o1) if v1 is None else ("second", o2)
            bad_text = (f1 if v1 is None else f2).completion.text
            why = why1 if v1 is None else why2
            tries = 1 + len(retried[0 if v1 is None else 1])
            said = f" ({why}; {tries} tries)" if why else ""
            message = f"pair {p.id or i}: no verdict in the {which} order's answer{said}: {' '.join(bad_text.split())[:80]!r}{cached_note(bad_out)}"
            self._error(i, p, item, message, votes=votes, raw=[t1, t2], **({"details": more} if more else {}))
            return
        details: dict[str, Any] = {"cached": [o1.cached, o2.cached], **more}
        resized = image.downscale_details()
        if resized is not None:  # the picture was above the pixel limit
            details["image_downscaled"] = resized
        verdict = dual_sided_vote(v1, v2)
        if self.judge.method.confidence:
            first = confidence.order_probs(o1, f1.completion.steps, self.read, str(shown[0]))
            second = confidence.order_probs(o2, f2.completion.steps, self.read, str(shown[1]))
            details.update(confidence.pair_fields([first, second if isinstance(second, str) else second.flipped()], verdict))
        result = _pair_result(self.judge, i, p, item, "pairwise", verdict=verdict, votes=votes, raw=[t1, t2], details=details)
        self.done.append((i, result))


def format_ok(method: Method, text: str) -> bool:
    """Whether an answer has the form its method's code keeps (CapArena: ``Reason:`` and
    ``Judgment:`` both filled); any other answer is asked again, up to ``Method.format_tries``."""
    return caparena_answer(text).formatted if method.parser == "caparena" else True


def read_verdict(method: Method, text: str) -> tuple[Any, str | None]:
    """The verdict of an answer by the method's reader (``"A"`` / ``"B"`` / ``"tie"`` or ``None``)
    and, for a strict reader (CapArena's), what is wrong when there is none."""
    if method.parser == "caparena":
        read = caparena_answer(text)
        return read.verdict, read.problem
    return parse_verdict(text), None


def _dual(judge: PairJudge, pairs: Iterable[Any]) -> Iterator[tuple[int, PairResult]]:
    run = _DualRun(judge)
    return drive(run.executor, run.batches(pairs), run.start, run.done)


class _SingleRun(_DualRun):
    """Single-order comparison (CapArena's protocol): each pair asked once, in the order
    :func:`shown_first_of` gives (the requests are :class:`_DualRun`'s, one order of them); the
    verdict mapped back to the original labels."""

    def batches(self, pairs: Iterable[Any]) -> Iterator[list[tuple[int, Any]]]:
        size = max(1, self.judge.batch_size) if isinstance(self.executor, BatchExecutor) else 1
        return read_windows(pairs, size)

    def orders(self, p: Pair, norm_a: str, norm_b: str) -> tuple[tuple[str, str], ...]:
        """The one order asked: A first or B first."""
        return ((norm_a, norm_b),) if shown_first_of(p) == "A" else ((norm_b, norm_a),)

    def _error(self, i: int, p: Pair | None, item: Any, message: str, **fields: Any) -> None:
        if p is not None:
            fields["details"] = {"shown_first": shown_first_of(p), **(fields.get("details") or {})}
        self.done.append((i, _pair_result(self.judge, i, p, item, "single", verdict=None, status="error", error=message, **fields)))

    def _answered(self, i: int, p: Pair, item: Any, got: list[Answer | None], order: int, image: LoadedImage, out: Answer) -> None:
        first = shown_first_of(p)
        if isinstance(out, BaseException):
            self._error(i, p, item, f"pair {p.id or i}: backend error: {type(out).__name__}: {out}", details=failure_details(out))
            return
        f = final_answer(out)
        more: dict[str, Any] = {"shown_first": first}
        if not f.plain:
            more.update({k: v for k, v in reasoning_details(f).items() if k in ("reasoning", "reasoning_tokens", "answer_cut")})
        retried = list((out.meta or {}).get("format_retries") or [])
        if retried:  # answers of a bad format, asked again (a method's format tries)
            more["format_retries"] = [retried]
        if f.cut_off:
            self._error(i, p, item, f"pair {p.id or i}: the answer: {cut_off_message(f)}", raw=[f.raw], details={**more, REASONING_CUT_OFF: True})
            return
        shown, why = read_verdict(self.judge.method, f.completion.text)  # the verdict on the captions as shown
        vote = flip(shown) if first == "B" else shown
        if vote is None:
            said = f" ({why}; {1 + len(retried)} tries)" if why else ""
            message = f"pair {p.id or i}: no verdict in the answer{said}: {' '.join(f.completion.text.split())[:80]!r}{cached_note(out)}"
            self._error(i, p, item, message, votes=[None], raw=[f.raw], details=more)
            return
        details: dict[str, Any] = {"cached": [out.cached], **more}
        resized = image.downscale_details()
        if resized is not None:
            details["image_downscaled"] = resized
        if self.judge.method.confidence:
            got_probs = confidence.order_probs(out, f.completion.steps, self.read, str(shown))
            details.update(confidence.pair_fields([got_probs.flipped() if first == "B" and not isinstance(got_probs, str) else got_probs], vote))
        self.done.append((i, _pair_result(self.judge, i, p, item, "single", verdict=vote, votes=[vote], raw=[f.raw], details=details)))


def _single(judge: PairJudge, pairs: Iterable[Any]) -> Iterator[tuple[int, PairResult]]:
    run = _SingleRun(judge)
    return drive(run.executor, run.batches(pairs), run.start, run.done)
