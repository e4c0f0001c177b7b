"""DCScore (DeCapBench, "Painting with Words", ICLR 2025) as its code runs it (MAGAer13/DeCapBench
9f3fb10, eval/evaluation_decapbench.py; docs/methods.md "DCScore").

Three calls per try, each with the system turn "You are a helpful assistant." (a string), up to
2000 tokens:

1. extraction, text only, temperature 1, one answer: the caption's atomic facts with ``relevance``;
2. matching, text only, temperature 1, 3 answers: the facts (without ``relevance``) against the
   image's human facts (``oracle_facts=FILE``: DeCapBench's ``human_annotated_oracle_facts.jsonl``);
3. verification, the image (JPEG, ``detail`` high) then the text, temperature 0.3, 3 answers: each
   fact checked against the image and the reference caption.

The 3 answers of a step are one request with ``n=3`` on API backends (the code's request), else 3
requests of one answer, each with its own ``sample_index`` (so each is cached). Whatever would
raise in the code (an answer that does not read as a list of facts, a fact without ``relevance``, a
matching whose facts are not the verification's, nothing to divide by) makes the code evaluate the
caption again from the extraction, 5 tries in all; a caption with no valid try is an error record,
as the code leaves it out of the DCScore. Score: ``(F1 + relevant F1) / 2`` averaged over the 3 x 3
trials (:func:`capjudge.parsing.dcscore.sample_scores`); the run's DCScore is the mean x 100.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import io
import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

from capjudge.backends.base import Completion, Message, Request
from capjudge.data.images import ImageError, LoadedImage
from capjudge.judges.steps import Outcome, StepContext
from capjudge.parsing.dcscore import json_lines, mapping_of, read_json_answer, sample_scores
from capjudge.prompts.registry import get_template

Steps = Generator[Request, Completion, Outcome]

TRIES = 5
"""The code's ``MAX_TRIES``: evaluations of one caption until one is valid."""
MATCHINGS = 3
"""Matching answers per try (``n=3``)."""
VERIFICATIONS = 3
"""Verification answers per try (``--n_ai_eval``'s default)."""


@functools.lru_cache(maxsize=8)
def _read_oracle(path: str, stamp: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """The entries of an oracle facts file by ``image_name`` (``stamp``: size and mtime, so an edited
    file is read again)."""
    entries: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"oracle facts file {path} line {number} is not JSON: {exc}") from None
            if not isinstance(entry, dict) or not isinstance(entry.get("image_name"), str):
                raise ValueError(f"oracle facts file {path} line {number} has no \"image_name\" text")
            facts = entry.get("oracle_facts")
            if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
                raise ValueError(f"oracle facts file {path} line {number} ({entry['image_name']}): \"oracle_facts\" is not a list of texts")
            entries[entry["image_name"]] = entry
    return entries


def oracle_entry(path: str, image: Any) -> dict[str, Any]:
    """The human facts of ``image`` in DeCapBench's ``human_annotated_oracle_facts.jsonl`` (lines of
    ``{"image_name", "oracle_caption", "oracle_facts": [...]}``): the entry whose ``image_name`` is
    the sample's image as written, else its file name. ``ValueError`` naming the file and cause."""
    if not isinstance(image, (str, Path)):
        raise ValueError("DCScore finds an image's human facts by its file name; this image has none")
    try:
        stat = Path(path).stat()
        entries = _read_oracle(str(path), (stat.st_size, stat.st_mtime_ns))
    except OSError as exc:
        raise ValueError(f"oracle facts file {path} cannot be read: {type(exc).__name__}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"oracle facts file {path} is not UTF-8: {exc}") from None
    for name in (str(image), Path(str(image)).name):
        if name in entries:
            return entries[name]
    raise ValueError(f"no human facts for image {str(image)!r} in {path} (no line with that image_name)")


def official_jpeg(image: LoadedImage) -> LoadedImage:
    """The image as the code sends it: decoded to RGB and saved as JPEG at Pillow's default quality
    (``pil2base64``), a ``data:image/jpeg`` URL."""
    buf = io.BytesIO()
    image.pil().save(buf, format="jpeg")
    data = buf.getvalue()
    return LoadedImage(sha256=hashlib.sha256(data).hexdigest(), label=image.label, data=data, mime="image/jpeg")


def _request(ctx: StepContext, prompt: str, image: LoadedImage | None, temperature: float) -> Request:
    """One call as ``run_gpt_text`` / ``run_gpt_multimodal`` make it: the system turn and the user
    turn as strings (the image part before the text)."""
    msgs: list[Message] = []
    turn = ctx.requests.system_turn(get_template("dcscore_system").render())
    if turn is not None:
        msgs.append(dataclasses.replace(turn, parts=False))
    images = (image,) if image is not None else ()
    msgs.append(Message("user", prompt, images=images, detail=ctx.method.image_detail if images else None))
    return Request(tuple(msgs), ctx.requests.config(ctx.method.max_new_tokens, False, temperature))


def draws(ctx: StepContext, request: Request, n: int, attempt: int) -> Generator[Request, Completion, list[str]]:
    """``n`` answers to ``request`` in try ``attempt``: one request of ``n`` choices where the
    backend answers so, else ``n`` requests; every request carries a ``sample_index``."""
    if n > 1 and ctx.requests.choices:
        cfg = dataclasses.replace(request.config, n=n)
        out = yield dataclasses.replace(request, config=cfg, sample_index=attempt)
        choices = (out.meta or {}).get("choices")
        return [str(c) for c in choices] if isinstance(choices, list) and choices else [ctx.text(out)]
    texts = []
    for k in range(n):
        out = yield dataclasses.replace(request, sample_index=attempt * n + k)
        texts.append(ctx.text(out))
    return texts


def _try(ctx: StepContext, attempt: int, oracle: list[dict[str, Any]], reference: str, image: LoadedImage, trace: dict[str, Any]) -> Generator[Request, Completion, dict[str, Any]]:
    """One evaluation of the caption (the code's try block); raises where the code raises."""
    method = ctx.method
    extract = get_template("dcscore_extract").render(caption=ctx.caption)
    answer = (yield from draws(ctx, _request(ctx, extract, None, method.context_temperature), 1, attempt))[0]
    trace["extraction"] = answer
    facts = read_json_answer(answer)
    for_mapping = copy.deepcopy(facts)
    for x in for_mapping:
        del x["relevance"]
    match = get_template("dcscore_match").render(predicted_atomic_facts=json_lines(for_mapping), oracle_atomic_facts=json_lines(oracle))
    matched = yield from draws(ctx, _request(ctx, match, None, method.context_temperature), MATCHINGS, attempt)
    trace["matchings"] = matched
    mappings = [mapping_of(read_json_answer(t)) for t in matched]
    verify = get_template(method.template).render(reference_caption=reference, atomic_facts=json_lines(for_mapping))
    verified = yield from draws(ctx, _request(ctx, verify, image, method.temperature), VERIFICATIONS, attempt)
    trace["verifications"] = verified
    verifications = [read_json_answer(t) for t in verified]
    rules: dict[str, Any] = {"relevant_weights": "all", "ids_as_text": False} if method.pipeline == "dcscore-code" else {}
    scores = sample_scores(facts, oracle, verifications, mappings, **rules)
    return {"facts": facts, "mappings": mappings, "verifications": verifications, **scores}


def dcscore(ctx: StepContext) -> Steps:
    """DCScore of one caption (see the module's docstring); ``details.steps`` holds the facts, the
    matchings, the verifications, every trial and the averages; ``details.counts`` the caption's
    DCScore as a term of the run's mean."""
    method = ctx.method
    path = str(method.options.get("oracle_facts") or "")
    if not path:
        return Outcome(None, None, {}, f"sample {ctx.sid}: {method.name} needs DeCapBench's human facts (method option oracle_facts=FILE: human_annotated_oracle_facts.jsonl)")
    try:
        entry = oracle_entry(path, ctx.prep.sample.image)
        assert ctx.prep.image is not None
        image = official_jpeg(ctx.prep.image)
    except (ValueError, OSError, ImageError) as exc:
        return Outcome(None, None, {}, f"sample {ctx.sid}: {exc}")
    references = list(ctx.prep.sample.references)
    reference = "\n".join(references) if references else entry.get("oracle_caption")
    if not isinstance(reference, str):
        return Outcome(None, None, {}, f"sample {ctx.sid}: no reference caption (the sample has no references and {path} no \"oracle_caption\" for its image)")
    oracle = [{"id": i, "fact": fact} for i, fact in enumerate(entry["oracle_facts"])]
    invalid: list[dict[str, Any]] = []
    for attempt in range(TRIES):
        trace: dict[str, Any] = {}
        try:
            result = yield from _try(ctx, attempt, oracle, reference, image, trace)
        except Exception as exc:  # noqa: BLE001 - the code's `except Exception`: the caption is evaluated again
            invalid.append({**trace, "error": f"{type(exc).__name__}: {exc}"})
            continue
        steps = {"oracle_facts_file": path, "invalid_tries": invalid, **result}
        counts = {"measure": "DCScore", "hits": result["dcscore"], "total": 1}
        return Outcome(result["dcscore"], trace["verifications"][-1], {"steps": steps, "counts": counts})
    last = invalid[-1]["error"]
    return Outcome(None, None, {"steps": {"oracle_facts_file": path, "invalid_tries": invalid}}, f"sample {ctx.sid}: no valid evaluation in {TRIES} tries (the DeCapBench code leaves the caption invalid, out of the DCScore); last: {last}")


__all__ = ["MATCHINGS", "TRIES", "VERIFICATIONS", "dcscore", "draws", "official_jpeg", "oracle_entry"]
