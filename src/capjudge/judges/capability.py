"""The CAPability pipeline (ali-vilab/CAPability cebb82a, ``evaluation/eval.py``; docs/methods.md).

A sample is one caption of a benchmark file: its ``id`` is the benchmark's ``file_id``. The
annotations come from the benchmark's own ``annotations/*.jsonl`` (method option
``annotations=DIR``); the caption is judged on every dimension whose file holds its ``file_id``
(an ``event_*`` video is judged on ``event`` and on ``action``, as ``eval.py`` copies the event
captions to the action dimension); an id ``<dimension>/<file_id>`` (``action/event_1``: eval.py's
own action caption file) is judged on that dimension only. Each dimension sends ``prompt.py``'s text-only request (system
turn, then the user turn, both plain strings; ``dynamic_object_number`` one request per object),
reads the answer as the code does, and asks again (up to ``MAX_RETRY_TIMES`` + 1 asks) while the
code refuses it. The record's score is the mean of its item scores (1 correct, 0 not mentioned,
-1 wrong; a dimension without an accepted answer is left out, with ``score`` null, as ``eval.py``
leaves the item out); ``details.capability`` holds each dimension's item scores, from which the run's
per-dimension precision, recall, hit rate and F1 and their means are made
(:func:`capjudge.parsing.capability.dimension_metrics`).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from functools import lru_cache
from pathlib import Path
from typing import Any

from capjudge.backends.base import Completion, Request
from capjudge.judges.steps import Outcome, StepContext
from capjudge.parsing.capability import (
    MAX_RETRY_TIMES,
    PAIRS,
    TASKS,
    AnswerFormatError,
    item_score,
    read_answer,
    validate,
)
from capjudge.prompts.registry import get_template

Steps = Generator[Request, Completion, Outcome]

ASKS = MAX_RETRY_TIMES + 1
"""Asks of one item at most: the first round and ``eval.py``'s ``--max_retry_times`` (5) more."""


@lru_cache(maxsize=8)
def _load(folder: str, stamp: tuple[tuple[str, float], ...]) -> dict[str, list[tuple[str, Any]]]:
    by_file: dict[str, list[tuple[str, Any]]] = {}
    for task, _ in stamp:
        rows: dict[
            str, Any
        ] = {}  # a file_id twice: the last row counts, as eval.py's file2anno keeps it
        path = Path(folder) / f"{task}.jsonl"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                file_id, annotation = row["file_id"], row["annotation"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(
                    f'{path} line {n} is not a CAPability annotation ({{"file_id": ..., "annotation": ...}}): {type(exc).__name__}: {exc}'
                ) from None
            rows[str(file_id)] = annotation
        for file_id, annotation in rows.items():
            by_file.setdefault(file_id, []).append((task, annotation))
    return by_file


def load_annotations(folder: str | Path) -> dict[str, list[tuple[str, Any]]]:
    """``file_id`` -> ``[(dimension, annotation), ...]`` over ``FOLDER/<dimension>.jsonl`` of the
    13 dimensions present (read once per folder and change). Raises ``ValueError`` naming the
    folder or the file and line at fault."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"CAPability annotations folder {str(folder)!r} does not exist")
    stamp = tuple(
        (t, (root / f"{t}.jsonl").stat().st_mtime) for t in TASKS if (root / f"{t}.jsonl").is_file()
    )
    if not stamp:
        raise ValueError(
            f"CAPability annotations folder {str(folder)!r} holds none of {', '.join(t + '.jsonl' for t in TASKS)}"
        )
    return _load(str(root.resolve()), stamp)


def dimension_prompts(task: str, caption: str, annotation: Any) -> tuple[str, list[str]]:
    """``Prompts.get_prompts_by_task``: the system text and the user texts (one, or one per
    object for ``dynamic_object_number``)."""
    system = get_template(f"capability_{task}_system").render()
    tpl = get_template(f"capability_{task}")
    if task in PAIRS:
        if not isinstance(annotation, dict) or not annotation:
            raise ValueError(
                f"the {task} annotation {annotation!r} is not a non-empty {{object: value}} dict"
            )
        pairs = list(annotation.items())
        if task != "dynamic_object_number":
            pairs = pairs[:1]
        return system, [tpl.render(caption=caption, object=k, value=v) for k, v in pairs]
    return system, [tpl.render(caption=caption, annotation=annotation)]


def _ask(
    ctx: StepContext, task: str, annotation: Any, code: bool, log: list[dict[str, Any]]
) -> Generator[Request, Completion, dict[str, Any] | None]:
    """One dimension of one caption: up to :data:`ASKS` rounds, each asking every user text in
    turn (a refused one ends the round, as ``evaluate_sample_worker`` returns ``None``)."""
    method = ctx.method
    system, prompts = dimension_prompts(task, ctx.caption, annotation)
    requests = [
        ctx.requests.step_request(
            system,
            p,
            temperature=method.temperature,
            max_new_tokens=method.max_new_tokens,
            parts=False,
        )
        for p in prompts
    ]
    for attempt in range(ASKS):
        answers: list[Any] = []
        for request in requests:
            text = ctx.text((yield ctx.again(request, attempt)))
            answer = read_answer(text)
            if answer is None:
                log.append(
                    {"dimension": task, "answer": text, "refused": "not a python/JSON literal"}
                )
                break
            answers.append(answer)
        else:
            response: Any = {"response": answers} if task == "dynamic_object_number" else answers[0]
            try:
                validate(task, response, code=code)
            except AnswerFormatError as exc:
                log.append({"dimension": task, "answer": text, "refused": str(exc)})
                continue
            return {
                "dimension": task,
                "annotation": annotation,
                "response": response,
                "score": item_score(task, response, annotation),
                "asks": attempt + 1,
            }
    return None


def capability(ctx: StepContext) -> Steps:
    """CAPability ``eval.py`` for one caption: every dimension its ``file_id`` is annotated in."""
    method = ctx.method
    folder = str(method.options.get("annotations") or "")
    if not folder:
        return Outcome(
            None,
            None,
            {},
            f"sample {ctx.sid}: {method.name} needs the benchmark's annotations folder (method option annotations=DIR: CAPability's annotations/*.jsonl)",
        )
    file_id, only = str(ctx.prep.sample.id), None
    if "/" in file_id and file_id.split("/", 1)[0] in TASKS:
        only, file_id = file_id.split("/", 1)  # "action/event_1": that dimension only
    try:
        annotated = load_annotations(folder).get(file_id) if ctx.prep.sample.id is not None else None
    except (OSError, ValueError) as exc:
        return Outcome(None, None, {}, f"sample {ctx.sid}: {exc}")
    if annotated and only is not None:
        annotated = [(t, a) for t, a in annotated if t == only]
    if not annotated:
        return Outcome(
            None,
            None,
            {},
            f"sample {ctx.sid}: its id is no file_id of {folder}/*.jsonl (the id of a CAPability sample is its file_id, or <dimension>/<file_id> for one dimension)",
        )
    code = method.name.endswith("-code")
    refused: list[dict[str, Any]] = []
    dimensions: list[dict[str, Any]] = []
    for task, annotation in annotated:
        try:
            done = yield from _ask(ctx, task, annotation, code, refused)
        except ValueError as exc:
            return Outcome(
                None, None, {"steps": {"refused_answers": refused}}, f"sample {ctx.sid}: {exc}"
            )
        dimensions.append(
            done
            or {
                "dimension": task,
                "annotation": annotation,
                "score": None,
                "missing": f"no answer eval.py accepts in {ASKS} asks (eval.py leaves the item out)",
            }
        )
    scored = [d for d in dimensions if d["score"] is not None]
    steps = {"dimensions": dimensions, "refused_answers": refused}
    capability_items = [{"dimension": d["dimension"], "score": d["score"]} for d in dimensions]
    if not scored:
        last = refused[-1]["answer"] if refused else None
        return Outcome(
            None,
            last,
            {"capability": capability_items, "steps": steps},
            f"sample {ctx.sid}: no answer eval.py accepts in {ASKS} asks on {', '.join(d['dimension'] for d in dimensions)} (eval.py leaves the item out)",
        )
    items = [
        s for d in scored for s in (d["score"] if isinstance(d["score"], list) else [d["score"]])
    ]
    return Outcome(
        sum(items) / len(items),
        ctx.calls[-1].text if ctx.calls else None,
        {"capability": capability_items, "steps": steps},
    )


__all__ = ["ASKS", "capability", "dimension_prompts", "load_annotations"]
