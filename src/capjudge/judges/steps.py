"""Methods made of steps per caption, and answers asked again when their format is wrong.

A *pipeline* (``Method.pipeline``, the table :data:`capjudge.judges.detailed.PIPELINES`) is a
generator function of a :class:`StepContext`: it yields a :class:`Request`, receives the answer
(a :class:`Completion`), yields the next, and finally returns an :class:`Outcome` (the caption's
score and the steps that led to it, or the error). :func:`run_steps` drives it through any
executor's ``add`` (:mod:`capjudge.judges.dispatch`), so a step's requests still go out in
batches or a sliding window with every other sample's; a sample's next step waits only for its own
previous one. A step may also yield a tuple of requests (steps that do not wait on each other,
CaptionQA's questions): they go out together and the list of their answers, in order, comes back.
A backend failure ends the pipeline with that error (the record says whether a re-run may cure it).

:func:`format_retrying` wraps an ``add`` so that an answer whose format a reader refuses is asked
again (up to ``tries`` in all, as CapArena's judge does); the raw answers of the refused tries
reach the last answer's ``meta[FORMAT_RETRIES]``. Repeated asks carry ``sample_index`` = the
try's number, so the response cache never answers a try with the previous one's answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from capjudge.backends.base import Completion, Request
from capjudge.judges.dispatch import Answer, Callback
from capjudge.judges.prepare import Prepared, sample_id
from capjudge.judges.reasoning import final_answer
from capjudge.judges.requests import RequestBuilder
from capjudge.prompts.registry import Method

FORMAT_RETRIES = "format_retries"
"""``Completion.meta`` key: the raw answers of the tries a format check refused, in order."""

Add = Callable[[Request, Callback], None]


@dataclass
class Outcome:
    """What a pipeline made of one caption: ``score`` (``None`` with an ``error``), the last
    answer (``raw``) and ``details`` (``steps``: the intermediate steps; ``counts``: the hits and
    totals behind the run's official aggregate)."""

    score: float | None
    raw: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class StepContext:
    """What a pipeline knows: the prepared sample, the judge's request builder, and the answers
    received so far (``calls``)."""

    prep: Prepared
    requests: RequestBuilder
    calls: list[Completion] = field(default_factory=list)

    @property
    def method(self) -> Method:
        """The method being run."""
        return self.requests.method

    @property
    def caption(self) -> str:
        """The caption as the method's code passes it (raw for the detailed-caption methods)."""
        return self.requests.caption(self.prep.sample.caption)

    @property
    def sid(self) -> str:
        """The sample's id, for error texts."""
        return sample_id(self.prep.sample, self.prep.index)

    @staticmethod
    def text(out: Completion) -> str:
        """The final answer's text (after any reasoning, :mod:`capjudge.judges.reasoning`)."""
        return final_answer(out).completion.text

    @staticmethod
    def again(request: Request, attempt: int) -> Request:
        """``request`` for try number ``attempt`` (0: the first, sent as it is)."""
        return dataclasses.replace(request, sample_index=attempt) if attempt else request


Step = Request | tuple[Request, ...]
"""What a pipeline yields: one request (its answer is sent back), or a tuple of requests asked
together (the list of their answers, in order, is sent back)."""
Pipeline = Callable[[StepContext], Generator[Step, Any, Outcome]]


def run_steps(add: Add, ctx: StepContext, pipeline: Pipeline, finish: Callable[[Outcome | BaseException], None]) -> None:
    """Drive ``pipeline`` for one caption: each request it yields goes through ``add``; its answer
    is sent back in; ``finish`` gets the :class:`Outcome`, or the backend's exception (the
    pipeline is then closed), or the exception a pipeline raised (a bug: that sample's error)."""
    gen = pipeline(ctx)

    def advance(answer: Completion | list[Completion] | None) -> None:
        try:
            step = next(gen) if answer is None else gen.send(answer)
        except StopIteration as stop:
            finish(stop.value)
            return
        except Exception as exc:  # noqa: BLE001 - one odd answer never stops a run
            last = answer[-1] if isinstance(answer, list) and answer else answer
            finish(Outcome(None, last.text if isinstance(last, Completion) else None, error=f"sample {ctx.sid}: the answer could not be read: {type(exc).__name__}: {exc}"))
            return
        if isinstance(step, tuple):
            together(step)
        else:
            add(step, answered)

    def together(requests: tuple[Request, ...]) -> None:
        """Requests that do not wait on each other: all sent at once, answers back in order."""
        got: list[Completion | None] = [None] * len(requests)
        state = {"left": len(requests), "failed": False}

        def one(i: int, out: Answer) -> None:
            if state["failed"]:
                return
            if isinstance(out, BaseException):
                state["failed"] = True
                gen.close()
                finish(out)
                return
            got[i] = out
            state["left"] -= 1
            if not state["left"]:
                answers = [c for c in got if c is not None]
                ctx.calls.extend(answers)
                advance(answers)

        def callback(i: int) -> Callback:
            return lambda out: one(i, out)

        if not requests:
            advance([])
        for i, request in enumerate(requests):
            if state["failed"]:
                break
            add(request, callback(i))

    def answered(out: Answer) -> None:
        if isinstance(out, BaseException):
            gen.close()
            finish(out)
            return
        ctx.calls.append(out)
        advance(out)

    advance(None)


def format_retrying(add: Add, tries: int, accept: Callable[[str], bool]) -> Add:
    """``add``, asking a request again (up to ``tries`` in all) while ``accept`` refuses its
    answer's final text; the callback gets the accepted answer, or the last one, with the refused
    answers in ``meta[FORMAT_RETRIES]``. A backend error goes to the callback as it is."""
    if tries <= 1:
        return add

    def add_retrying(request: Request, callback: Callback) -> None:
        refused: list[str] = []

        def on_answer(out: Answer, attempt: int = 0) -> None:
            if isinstance(out, Completion) and not accept(StepContext.text(out)) and attempt + 1 < tries:
                refused.append(out.text)
                add(StepContext.again(request, attempt + 1), lambda nxt: on_answer(nxt, attempt + 1))
                return
            if isinstance(out, Completion) and refused:
                out = dataclasses.replace(out, meta={**(out.meta or {}), FORMAT_RETRIES: list(refused)})
            callback(out)

        add(request, on_answer)

    return add_retrying


__all__ = ["FORMAT_RETRIES", "Add", "Outcome", "Pipeline", "Step", "StepContext", "format_retrying", "run_steps"]
