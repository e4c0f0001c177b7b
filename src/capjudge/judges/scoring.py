"""The flow of one scoring run: samples in, ``(input index, result)`` out as results are made.

:class:`~capjudge.judges.judge.Judge` exposes this as ``Judge.score_stream`` (completion order) and
``Judge.score_many`` (input order). Samples are read ``group_window`` at a time and grouped by image
whatever their input order, so that two-step methods ask their first step once per image,
``listwise`` puts all the captions of an image in one prompt, and backends share the image prefix.

What is sent when is up to the executor (:mod:`capjudge.judges.dispatch`): backends that batch get
batches of whole image groups (up to ``batch_size`` samples, a larger group alone); backends that run
concurrent requests get a sliding window, and a caption's scoring request waits only for its own
image's first step.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from capjudge.backends.base import Backend, Completion, Request
from capjudge.data.images import LoadedImage
from capjudge.data.types import Sample, ScoreResult, normalize_caption
from capjudge.judges.detailed import PIPELINES
from capjudge.judges.dispatch import Answer, BatchExecutor, Executor, drive, make_executor
from capjudge.judges.expected import estimate_parser
from capjudge.judges.prepare import Prepared, image_key, sample_id
from capjudge.judges.records import cached_note, short
from capjudge.judges.requests import RequestBuilder
from capjudge.judges.sampling import ask_estimate, wants_estimate
from capjudge.judges.steps import Outcome, StepContext, run_steps
from capjudge.parsing import parse_score_list
from capjudge.prompts.registry import Method, TemplateError, get_template

Item = tuple[int, Any]  # (input index, sample as given)

# Decoded images kept for the next samples (captions of one image are adjacent), by bytes held
# (encoded + decoded): twelve 40-megapixel pictures are 1.4 GB, twelve thumbnails a few MB.
IMAGE_MEMO_BYTES = 256 * 1024 * 1024
_PREFETCH = 4  # image groups whose pictures are loaded ahead in a sliding-window run, at most
PREFETCH_BYTES = 256 * 1024 * 1024  # and no more ahead than this, loaded and not yet used


def _held(value: LoadedImage | str) -> int:
    return value.nbytes() if isinstance(value, LoadedImage) else len(value)


class ImageMemo(OrderedDict[Any, "LoadedImage | str"]):
    """The last images loaded (or their load errors), so the captions of one image read it once;
    at most ``budget`` bytes of them (the newest is kept whatever its size)."""

    def __init__(self, budget: int = IMAGE_MEMO_BYTES) -> None:
        super().__init__()
        self.budget = budget
        self.held = 0

    def __setitem__(self, key: Any, value: LoadedImage | str) -> None:
        if key in self:
            self.held -= _held(super().__getitem__(key))
        super().__setitem__(key, value)
        self.move_to_end(key)
        self.held += _held(value)
        while self.held > self.budget and len(self) > 1:
            _, old = self.popitem(last=False)
            self.held -= _held(old)


def read_windows(samples: Iterable[Any], size: int) -> Iterator[list[Item]]:
    """``(index, sample)`` lists of ``size``; when the input raises, what was read comes first."""
    window: list[Item] = []
    try:
        for i, s in enumerate(samples):
            window.append((i, s))
            if len(window) >= size:
                yield window
                window = []
    except Exception:
        if window:
            yield window
        raise
    if window:
        yield window


def _item_windows(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """Lists of at most ``size`` ``(index, sample)`` pairs, as given."""
    window: list[Item] = []
    for item in items:
        window.append(item)
        if len(window) >= size:
            yield window
            window = []
    if window:
        yield window


def image_groups(items: Sequence[Item]) -> list[list[Item]]:
    """The items grouped by image (groups in first-seen order, input order inside a group)."""
    groups: dict[Any, list[Item]] = {}
    for pos, item in enumerate(items):
        key = image_key(_image_of(item[1]))
        groups.setdefault(key if key is not None else ("position", pos), []).append(item)
    return list(groups.values())


def pack(groups: Iterable[list[Item]], size: int) -> Iterator[list[Item]]:
    """Whole groups packed into batches of at most ``size`` items (a larger group is one batch)."""
    batch: list[Item] = []
    for group in groups:
        if batch and len(batch) + len(group) > size:
            yield batch
            batch = []
        batch.extend(group)
    if batch:
        yield batch


class ScoringJudge(Protocol):
    """What a scoring run needs from a judge (:class:`~capjudge.judges.judge.Judge` provides it)."""

    method: Method
    backend: Backend
    batch_size: int
    group_window: int
    contexts: dict[tuple[str, str], str]
    estimate_samples: int

    @property
    def requests(self) -> RequestBuilder:
        """How the judge builds its requests."""
        ...

    def load_image(self, image: Any) -> LoadedImage | str:
        """The image loaded, or the error text its samples get."""
        ...

    def prepare_sample(self, index: int, sample: Sample | dict[str, Any], images: dict[Any, Any] | None = None) -> Prepared:
        """Check a caption and load its image (``images`` memoises loads)."""
        ...

    def record(self, prep: Prepared, **fields: Any) -> ScoreResult:
        """The checked score record of ``prep``."""
        ...

    def error_record(self, prep: Prepared, message: str, raw: str | None = None, cause: BaseException | None = None) -> ScoreResult:
        """An error record of ``prep``."""
        ...

    def read_answer(self, prep: Prepared, out: Completion) -> ScoreResult:
        """The record of the answer to ``prep``'s scoring request."""
        ...


class ScoringRun:
    """One pass over samples: prepares them, asks the backend through an executor, parses answers."""

    def __init__(self, judge: ScoringJudge, executor: Executor | None = None) -> None:
        self.judge = judge
        self.executor = executor or make_executor(judge.backend)
        self.done: deque[tuple[int, ScoreResult]] = deque()
        self.images: ImageMemo = ImageMemo()
        # (image sha, first-step template hash) -> samples waiting for that first step
        self.waiting: dict[tuple[str, str], list[Prepared]] = {}
        # images of the next groups, loading in a background thread (sliding window only)
        self._loading: dict[Any, concurrent.futures.Future[LoadedImage | str]] = {}
        self._loader: concurrent.futures.ThreadPoolExecutor | None = None
        self._largest = 0  # bytes of the largest picture loaded ahead so far

    # ------------------------------------------------------------------ batches of work
    def batches(self, samples: Iterable[Any], *, indexed: bool = False) -> Iterator[list[Item]]:
        """Image groups of each read window: packed into batches for a batching backend, one group
        at a time for a sliding window (which starts the next as soon as a slot is free).
        ``indexed``: ``samples`` are ``(input index, sample)`` pairs (see :meth:`run_items`)."""
        judge = self.judge
        size = max(judge.batch_size, judge.group_window)
        windows = _item_windows(samples, size) if indexed else read_windows(samples, size)
        try:
            for window in windows:
                groups = image_groups(window)
                if isinstance(self.executor, BatchExecutor):
                    yield from pack(groups, judge.batch_size)
                else:
                    yield from self._prefetching(groups)
        finally:
            if self._loader is not None:
                self._loader.shutdown(wait=False, cancel_futures=True)
                self._loader = None

    # ------------------------------------------------------------------ images ahead (sliding window)
    def _prefetching(self, groups: list[list[Item]]) -> Iterator[list[Item]]:
        """Each group, once the images of the next ``_PREFETCH`` groups are loading in a background
        thread: reading, hashing and decoding a picture (~5 ms for a 750x750 JPEG, mostly outside
        the GIL) then overlaps the requests in flight instead of holding up the thread that reads
        their answers and sends the next ones. The same loader, the same error texts. Bounded by
        bytes (:meth:`_room_ahead`)."""
        for i, group in enumerate(groups):
            # The group's own picture first (the loader thread works on it anyway): its size is
            # then known when deciding how many more may load ahead.
            self._collect(group)
            for ahead in groups[i + 1 : i + 1 + _PREFETCH]:
                if not self._room_ahead():
                    break  # the next pictures load when their turn comes
                self._load_ahead(ahead)
            yield group

    def _room_ahead(self) -> bool:
        """Whether one more picture may load ahead: the pictures loaded ahead and not yet used,
        those still loading and the next one (each counted as the largest picture seen so far)
        stay within ``PREFETCH_BYTES``. Until a picture's size is known, one loads at a time."""
        held = pending = 0
        for future in self._loading.values():
            if not future.done():
                pending += 1
            elif not future.cancelled() and future.exception() is None:
                size = _held(future.result())
                self._largest = max(self._largest, size)
                held += size
        if pending and not self._largest:
            return False
        return held + (pending + 1) * self._largest < PREFETCH_BYTES

    def _load_ahead(self, group: list[Item]) -> None:
        image = _image_of(group[0][1])
        key = image_key(image)
        if key is None or key in self.images or key in self._loading or not isinstance(image, (str, Path, bytes, bytearray)):
            return
        if self._loader is None:
            self._loader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="capjudge-images")
        self._loading[key] = self._loader.submit(self.judge.load_image, image)

    def _collect(self, group: list[Item]) -> None:
        """Move the group's image, if it was loaded ahead, into the memo ``start`` reads."""
        key = image_key(_image_of(group[0][1]))
        future = self._loading.pop(key, None) if key is not None else None
        if future is not None:
            with contextlib.suppress(Exception):  # cancelled or broken: start() loads it itself
                loaded = future.result()
                self._largest = max(self._largest, _held(loaded))
                self.images[key] = loaded

    def run(self, samples: Iterable[Any]) -> Iterator[tuple[int, ScoreResult]]:
        """``(input index, result)`` for every sample, in the order results are made."""
        return drive(self.executor, self.batches(samples), self.start, self.done)

    def run_items(self, items: Iterable[Item]) -> Iterator[tuple[int, ScoreResult]]:
        """As :meth:`run`, for ``(input index, sample)`` pairs whose indices the caller chose (a
        distributed run judges a part of the input and keeps the input's positions: default ids
        and error texts are then those of a run over the whole input)."""
        return drive(self.executor, self.batches(items, indexed=True), self.start, self.done)

    # ------------------------------------------------------------------ starting samples
    def start(self, batch: Sequence[Item]) -> None:
        """Prepare a batch's samples and queue their first requests (errors are results at once)."""
        judge = self.judge
        valid: dict[str, list[Prepared]] = {}  # by image content: one group per picture
        for index, sample in batch:
            prep = judge.prepare_sample(index, sample, self.images)
            if prep.error is not None or (prep.image is None and judge.method.needs_image):
                self.done.append((index, judge.error_record(prep, prep.error or "not judged", cause=prep.cause)))
            else:
                valid.setdefault(prep.image.sha256 if prep.image is not None else "", []).append(prep)
        for group in valid.values():
            if judge.method.kind == "listwise":
                self._ask_list(group)
            elif judge.method.pipeline:
                for prep in group:
                    self._run_steps(prep)
            else:
                for prep in group:
                    self._ask_context_then_score(prep)

    def _fail(self, prep: Prepared, message: str, cause: BaseException | None = None) -> None:
        self.done.append((prep.index, self.judge.error_record(prep, message, cause=cause)))

    def _ask_context_then_score(self, prep: Prepared) -> None:
        """Two-step methods: the first step once per image (memoised for the judge's lifetime,
        across runs by the response cache); the scoring step once it is answered."""
        judge = self.judge
        name = judge.method.context_template
        if not name:
            self._ask_score(prep)
            return
        assert prep.image is not None
        tpl = get_template(name)
        key = (prep.image.sha256, tpl.hash)
        if key in judge.contexts:
            prep.context = judge.contexts[key]
            self._ask_score(prep)
        elif key in self.waiting:
            self.waiting[key].append(prep)
        else:
            self.waiting[key] = [prep]
            request = judge.requests.context_request(tpl.render(), prep.image)
            self.executor.add(request, lambda out: self._context_answered(key, name, out))

    def _context_answered(self, key: tuple[str, str], name: str, out: Answer) -> None:
        judge = self.judge
        cause = out if isinstance(out, BaseException) else None
        if isinstance(out, BaseException):
            failure: str | None = f"{type(out).__name__}: {out}"
        elif not out.text.strip():
            failure = "the model returned an empty context"
        else:
            failure = None
            judge.contexts[key] = out.text.strip()
        for prep in self.waiting.pop(key, []):
            assert prep.image is not None
            if failure is not None:
                self._fail(prep, f"sample {_sid(prep)}: first step ({name}) failed for image {prep.image.label!r}: {failure}", cause)
            else:
                prep.context = judge.contexts[key]
                self._ask_score(prep)

    def _ask_score(self, prep: Prepared) -> None:
        judge = self.judge
        try:
            request = judge.requests.score_request(prep)
        except TemplateError as exc:
            self._fail(prep, f"sample {_sid(prep)}: {exc}")
            return
        self.executor.add(request, lambda out: self._score_answered(prep, request, out))

    def _score_answered(self, prep: Prepared, request: Request, out: Answer) -> None:
        """The record, once the answer is there; an answer without the log-probabilities its
        method reads waits first for the judge's sampling estimate (:mod:`.sampling`), if asked."""
        n = self.judge.estimate_samples
        if isinstance(out, Completion) and wants_estimate(request, out, n):
            ask_estimate(self.executor.add, request, out, n, lambda estimated: self.done.append((prep.index, self._scored(prep, estimated))), estimate_parser(self.judge.method))
            return
        self.done.append((prep.index, self._scored(prep, out)))

    def _scored(self, prep: Prepared, out: Answer) -> ScoreResult:
        if isinstance(out, BaseException):
            return self.judge.error_record(prep, f"sample {_sid(prep)}: backend error: {type(out).__name__}: {out}", cause=out)
        return self.judge.read_answer(prep, out)

    # ------------------------------------------------------------------ multi-step methods
    def _run_steps(self, prep: Prepared) -> None:
        """A method made of steps per caption (:mod:`.steps`, :mod:`.detailed`): each step's
        request goes through the executor with everyone else's; the record once it is done."""
        judge = self.judge
        name = judge.method.pipeline or ""
        if name not in PIPELINES:
            self._fail(prep, f"sample {_sid(prep)}: method {judge.method.name!r} names an unknown pipeline {name!r}")
            return
        ctx = StepContext(prep, judge.requests)
        run_steps(self.executor.add, ctx, PIPELINES[name], lambda outcome: self.done.append((prep.index, self._stepped(ctx, outcome))))

    def _stepped(self, ctx: StepContext, outcome: Outcome | BaseException) -> ScoreResult:
        judge, prep = self.judge, ctx.prep
        if isinstance(outcome, BaseException):
            return judge.error_record(prep, f"sample {_sid(prep)}: backend error: {type(outcome).__name__}: {outcome}", cause=outcome)
        details: dict[str, Any] = {"cached": bool(ctx.calls) and all(c.cached for c in ctx.calls), "calls": len(ctx.calls), **outcome.details}
        if judge.method.options:
            details["method_options"] = dict(judge.method.options)
        if outcome.error is not None:
            return judge.record(prep, score=None, raw=outcome.raw, status="error", error=outcome.error, details=details)
        return judge.record(prep, score=outcome.score, raw_score=outcome.score, smoothed=False, raw=outcome.raw, details=details)

    # ------------------------------------------------------------------ listwise
    def _ask_list(self, group: list[Prepared]) -> None:
        """Seed 002: one prompt per image listing all its captions; one score per caption."""
        judge = self.judge
        try:
            prompt = get_template(judge.method.template).render(captions=[normalize_caption(p.sample.caption) for p in group])
        except TemplateError as exc:
            for prep in group:
                self._fail(prep, f"sample {_sid(prep)}: {exc}")
            return
        assert group[0].image is not None
        request = judge.requests.list_request(prompt, group[0].image, len(group))
        self.executor.add(request, lambda out: self._list_answered(group, out))

    def _list_answered(self, group: list[Prepared], out: Answer) -> None:
        judge = self.judge
        if isinstance(out, BaseException):
            for prep in group:
                self._fail(prep, f"sample {_sid(prep)}: backend error: {type(out).__name__}: {out}", out)
            return
        low, high = judge.method.scale
        scores = parse_score_list(out.text, len(group), low=low, high=high)
        for k, (prep, score) in enumerate(zip(group, scores)):
            details = {"list_position": k + 1, "list_size": len(group), "cached": out.cached}
            if score is None:
                message = f"sample {_sid(prep)}: no score for item {k + 1} in the listwise answer: {short(out.text)!r}{cached_note(out)}"
                result = judge.record(prep, score=None, raw=out.text, status="error", error=message, details=details)
            else:
                result = judge.record(prep, score=score, raw_score=score, raw=out.text, details=details)
            self.done.append((prep.index, result))


def _image_of(sample: Any) -> Any:
    return sample.get("image") if isinstance(sample, dict) else getattr(sample, "image", None)


def _sid(prep: Prepared) -> str:
    return sample_id(prep.sample, prep.index)


__all__ = [
    "IMAGE_MEMO_BYTES",
    "PREFETCH_BYTES",
    "ImageMemo",
    "ScoringJudge",
    "ScoringRun",
    "cached_note",
    "image_groups",
    "image_key",
    "pack",
    "read_windows",
    "sample_id",
    "short",
]
