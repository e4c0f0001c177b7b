"""Methods made of steps per caption, and answers asked again when their format is wrong.

A *pipeline* (``Method.pipeline``, the table :data:`capjudge.judges.detailed.PIPELINES`) is a
generator function of a :class:`StepContext`: it yields a :class:`Request`, receives the answer
(a :class:`Completion`), yields the next, and finally returns an :class:`Outcome` (the caption's
score and the steps that led to it, or the error). :func:`run_steps` drives it through any
executor's ``add`` (:mod:`capjudge.judges.dispatch`), so a step's requests still go out in
batches or a sliding window with every other sample's; a sample's next step waits only for its own
previous one. A backend failure ends the pipeline with that error (the record says whether a
re-run may cure it).

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


Pipeline = Callable[[StepContext], Generator[Request, Completion, Outcome]]


def run_steps(add: Add, ctx: StepContext, pipeline: Pipeline, finish: Callable[[Outcome | BaseException], None]) -> None:
    """Drive ``pipeline`` for one caption: each request it yields goes through ``add``; its answer
    is sent back in; ``finish`` gets the :class:`Outcome`, or the backend's exception (the
    pipeline is then closed), or the exception a pipeline raised (a bug: that sample's error)."""
    gen = pipeline(ctx)

    def advance(answer: Completion | None) -> None:
        try:
            request = next(gen) if answer is None else gen.send(answer)
        except StopIteration as stop:
            finish(stop.value)
            return
        except Exception as exc:  # noqa: BLE001 - one odd answer never stops a run
            finish(Outcome(None, answer.text if answer is not None else None, error=f"sample {ctx.sid}: the answer could not be read: {type(exc).__name__}: {exc}"))
            return
        add(request, answered)

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


__all__ = ["FORMAT_RETRIES", "Add", "Outcome", "Pipeline", "StepContext", "format_retrying", "run_steps"]
