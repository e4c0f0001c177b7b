"""``Judge(method, backend)``: score captions, compare pairs, explain scores.

The judge renders the method's templates, parses the answers and turns every failure into an
``error`` result that names the sample and the cause. Nothing a single sample does can stop a run.
How requests reach the backend (whole image groups for backends that batch, a sliding window for
API backends) is :mod:`capjudge.judges.scoring` and :mod:`capjudge.judges.dispatch`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.backends.base import Backend, Completion, GenerationConfig, Message, Request
from capjudge.backends.faults import failure_details
from capjudge.backends.presets import preset_of, preset_options
from capjudge.backends.registry import load_backend
from capjudge.images import DEFAULT_LIMITS, ImageError, ImageLimits, LoadedImage, load_image
from capjudge.judges import pairwise
from capjudge.judges.dispatch import generate_all, in_input_order
from capjudge.judges.invariants import checked_score
from capjudge.judges.scoring import ScoringRun, cached_note, image_key, sample_id, short
from capjudge.judges.smoothing import (
    BARE_SCORE_PATTERN,
    SCORE_PATTERN,
    CodeSearchError,
    smooth_by_code_search,
    smooth_from_steps,
)
from capjudge.parsing import parse_score_details
from capjudge.parsing._text import clean, coerce_text
from capjudge.parsing.official import first_integer, fleur_code_number
from capjudge.prompts.registry import Method, get_method, get_template
from capjudge.redact import get_logger
from capjudge.types import (
    ImageInput,
    PairResult,
    Sample,
    ScoreResult,
    image_label,
    normalize_caption,
)

log = get_logger(__name__)

API_KINDS = frozenset({"openai", "azure", "openai-compatible"})


class SampleError(ValueError):
    """A sample cannot be judged (empty caption, missing references, ...)."""


@dataclass
class _Prepared:
    """A sample ready to judge, or the error that stops it."""

    index: int
    sample: Sample
    image: LoadedImage | None = None
    error: str | None = None
    context: str | None = None
    cause: BaseException | None = None  # the backend failure behind ``error``, if any


def _occurrence(text: str, parsed: Any) -> int:
    """How many numbers with the parsed score's value stand before it in the answer (so that
    "on a scale of 0.0 to 1.0, I'd give 1.0" smooths the second "1.0", not the restated scale)."""
    if parsed.span is None or parsed.value is None:
        return 0
    before = clean(coerce_text(text) or "")[: parsed.span[0]]
    if _is_bare(parsed):
        return sum(1 for m in BARE_SCORE_PATTERN.finditer(before) if float(m.group(1)) == parsed.value)
    return sum(1 for m in SCORE_PATTERN.finditer(before) if abs(float(m.group(0)) - parsed.value) < 1e-9)


def _is_bare(parsed: Any) -> bool:
    """The parser read a bare ``0`` or ``1`` (no decimals), which FLEUR's code smooths too."""
    return parsed.value in (0.0, 1.0) and (parsed.matched or "").strip() in ("0", "1")


class Judge:
    """A caption judge: a judging method run on a backend.

    Parameters
    ----------
    method:
        A method name (see :func:`capjudge.list_methods`) or a :class:`~capjudge.prompts.Method`.
    backend:
        A backend spec string (``"hf:llava-hf/llava-1.5-7b-hf"``) or a :class:`Backend`.
    cache_dir:
        Directory of the response cache (shared by all backends); ``None`` for no cache. A re-run
        with the same cache answers every deterministic request already asked without the model.
    system:
        ``"auto"`` (local backends: what the judge preset says, i.e. the method's paper-faithful
        system sentence for LLaVA-1.5, the model's own default for other families; none on API
        backends), a system sentence, or ``None`` for no system turn.
    images_root:
        Directory that relative image paths are resolved against.
    batch_size:
        How many samples are prepared and handed to the backend together (whole image groups;
        a group larger than this is one batch). Backends that run concurrent requests (API
        judges) get no batches: they keep their ``concurrency`` requests in flight.
    group_window:
        How many input samples are read ahead and grouped by image, whatever their order.
    top_logprobs:
        Alternatives asked per generated token when the method smooths (API backends cap it).
    max_new_tokens:
        Override of the method's answer length.
    method_options:
        Method options (:meth:`capjudge.prompts.Method.configure`): ``second_decimal`` and
        ``answer_form`` for FLEUR-style smoothing, ``no_number`` for the VisCE2 code's first-integer methods,
        ``temperature`` for any method.
    backend_options:
        Keyword options for :func:`capjudge.load_backend` when ``backend`` is a spec string.
    preset:
        A judge preset (:func:`capjudge.backends.presets.list_presets`: ``"qwen2.5-vl"``,
        ``"gemma3"``, ...) for a local backend spec; ``None`` lets an ``hf:`` backend choose it
        from the model's config (the CLI's ``--judge``).
    allow_outside_images:
        With ``images_root``: also read image paths that leave it (``../``, absolute paths,
        symlinks pointing outside). Off by default: such a sample is an error record.
    max_image_pixels:
        Pixel budget of a decoded image (0: none): larger pictures are downscaled at load to fit
        (records say so in ``details["image_downscaled"]``), or refused with
        ``oversize_images="refuse"``.
    oversize_images:
        ``"downscale"`` (default) or ``"refuse"`` (an error record naming the sample).
    max_image_bytes, image_timeout:
        Size cap (bytes) and overall deadline (seconds, the whole download) of an ``http(s)`` image
        that a local backend downloads.
    """

    def __init__(
        self,
        method: str | Method,
        backend: str | Backend,
        *,
        cache_dir: str | Path | None = None,
        system: str | None = "auto",
        images_root: str | Path | None = None,
        batch_size: int = 64,
        group_window: int = 1024,
        top_logprobs: int = 20,
        max_new_tokens: int | None = None,
        backend_options: dict[str, Any] | None = None,
        method_options: dict[str, Any] | None = None,
        preset: str | None = None,
        allow_outside_images: bool = False,
        max_image_pixels: int = DEFAULT_LIMITS.max_pixels,
        oversize_images: str = DEFAULT_LIMITS.oversize,
        max_image_bytes: int = DEFAULT_LIMITS.max_download_bytes,
        image_timeout: float = DEFAULT_LIMITS.download_timeout,
    ) -> None:
        self.method = get_method(method).configure(method_options)
        self.image_limits = ImageLimits(max_pixels=max_image_pixels, oversize=oversize_images, max_download_bytes=max_image_bytes, download_timeout=image_timeout)  # type: ignore[arg-type]
        self.allow_outside_images = bool(allow_outside_images)
        options = dict(backend_options or {})
        if preset is not None:
            if not isinstance(backend, str):
                raise ValueError("preset= applies to a backend spec string; a ready backend was built with its own settings")
            options.update(preset_options(backend.split(":", 1)[0], preset))
        # Lazy: a run that the cache answers entirely never loads the model.
        inner = load_backend(backend, lazy=True, **options)
        if cache_dir is not None:
            from capjudge.backends.cache import CachedBackend

            inner = CachedBackend(inner, cache_dir)
        self.backend: Backend = inner
        self.images_root = images_root
        self.batch_size = max(1, int(batch_size))
        self.group_window = max(self.batch_size, int(group_window))
        self.top_logprobs = top_logprobs
        self.max_new_tokens = max_new_tokens
        chosen = preset_of(self.backend.identity(), preset if self.backend.kind == "llamacpp" else None)
        self.judge_preset: str | None = chosen.name if chosen is not None else None
        if system == "auto":
            if self.backend.kind in API_KINDS:
                system = None
            else:
                system = chosen.system_for(self.method.system) if chosen is not None else self.method.system
        self.system = system
        self._contexts: dict[tuple[str, str], str] = {}

    # ------------------------------------------------------------------ identity
    @property
    def backend_spec(self) -> str:
        """The backend spec written into results."""
        return self.backend.spec or f"{self.backend.kind}:{self.backend.model}"

    def _result(self, prep: _Prepared, **fields: Any) -> ScoreResult:
        """Every score record is made here: one that would say ``ok`` without a finite score on
        the method's scale becomes an error record naming the cause (:mod:`.invariants`)."""
        if self.judge_preset is not None:
            fields["details"] = {**(fields.get("details") or {}), "judge_preset": self.judge_preset}
        resized = prep.image.downscale_details() if prep.image is not None else None
        if resized is not None:
            fields["details"] = {**(fields.get("details") or {}), "image_downscaled": resized}
        if fields.get("status", "ok") == "ok":
            given = fields.get("score")
            score, problem = checked_score(given, self.method.scale, outside_ok=self.method.parser == "first-integer")
            if problem is not None:
                raw = fields.get("raw")
                fields.update(score=None, status="error", error=f"sample {sample_id(prep.sample, prep.index)}: {problem}; not scored (answer {short(raw)!r})")
            elif score != given:
                fields["score"] = score  # a rounding overshoot, clipped to the scale
                fields["details"] = {**(fields.get("details") or {}), "clipped_from": given}
        s = prep.sample
        return ScoreResult(
            id=sample_id(s, prep.index),
            image=image_label(s.image),
            caption=s.caption if isinstance(s.caption, str) else repr(s.caption),
            references=list(s.references),
            method=self.method.name,
            backend=self.backend_spec,
            model=self.backend.model,
            template_hash=self.method.template_hash,
            scale=self.method.scale,
            context=prep.context,
            **fields,
        )

    def _error(self, prep: _Prepared, message: str, raw: str | None = None, cause: BaseException | None = None) -> ScoreResult:
        """An error record; ``cause`` (a backend failure) says whether a re-run may cure it."""
        details = failure_details(cause) if cause is not None else {}
        return self._result(prep, score=None, raw=raw, status="error", error=message, details=details)

    # ------------------------------------------------------------------ requests
    def _messages(self, prompt: str, image: LoadedImage, history: Sequence[Message] = ()) -> tuple[Message, ...]:
        msgs: list[Message] = []
        if self.system:
            msgs.append(Message("system", self.system))
        if history:
            msgs.extend(history)
            msgs.append(Message("user", prompt))
        else:
            msgs.append(Message("user", prompt, images=(image,)))
        return tuple(msgs)

    def _config(self, max_new_tokens: int, logprobs: bool, temperature: float = 0.0) -> GenerationConfig:
        return GenerationConfig(
            max_new_tokens=self.max_new_tokens or max_new_tokens,
            temperature=temperature,
            top_logprobs=self.top_logprobs if logprobs else 0,
        )

    def _caption(self, text: str) -> str:
        """The caption as the method's code puts it into the prompt: FLEUR's code collapses its
        whitespace, VisCE2's code passes it as it is. References go in as they are (both codes)."""
        return normalize_caption(text) if self.method.normalize_caption else str(text)

    def _score_request(self, prep: _Prepared) -> Request:
        tpl = get_template(self.method.template)
        prompt = tpl.render(caption=self._caption(prep.sample.caption), references=list(prep.sample.references), context=prep.context or "")
        assert prep.image is not None
        return Request(self._messages(prompt, prep.image), self._config(self.method.max_new_tokens, self.method.smoothing, self.method.temperature))

    def score_request(self, sample: Sample | dict[str, Any], index: int = 0) -> Request:
        """The request a one-step scoring method sends for ``sample`` (what backend parity checks
        tokenize); raises :class:`SampleError` for a sample that cannot be judged and
        ``ValueError`` for two-step methods, whose request depends on the first step's answer."""
        if self.method.context_template or self.method.kind != "score":
            raise ValueError(f"method {self.method.name!r} is not a one-step scoring method: its request depends on more than one sample or answer")
        prep = self._prepare(index, sample)
        if prep.error:
            raise SampleError(prep.error)
        return self._score_request(prep)

    # ------------------------------------------------------------------ pairwise interface
    def prepare_sample(self, index: int, sample: Sample, images: dict[Any, Any] | None = None) -> _Prepared:
        """Check a caption and load its image, or say why it cannot be judged (``.error``); part
        of the interface pairwise judging uses (:class:`~capjudge.judges.pairwise.PairJudge`)."""
        return self._prepare(index, sample, images)

    def request(self, prompt: str, image: LoadedImage, max_new_tokens: int) -> Request:
        """A request at the method's temperature (greedy unless ``--method-option temperature=``
        says otherwise): the judge's system turn, then ``prompt`` with ``image``."""
        return Request(self._messages(prompt, image), self._config(max_new_tokens, False, self.method.temperature))

    # ------------------------------------------------------------------ preparation
    def _prepare(self, index: int, sample: Sample | dict[str, Any], images: dict[Any, LoadedImage | str] | None = None) -> _Prepared:
        """Check a sample and load its image (``images`` memoises loads within a batch: the
        captions of one image read and hash it once)."""
        if isinstance(sample, dict):
            try:
                sample = Sample(image=sample["image"], caption=sample["caption"], references=sample.get("references") or (), id=sample.get("id"))
            except KeyError as exc:
                return _Prepared(index, Sample(image="<missing>", caption=""), error=f"sample {index}: missing field {exc}")
            except (TypeError, ValueError) as exc:
                return _Prepared(index, Sample(image="<invalid>", caption=""), error=f"sample {index}: malformed sample: {exc}")
        elif not isinstance(sample, Sample):
            return _Prepared(index, Sample(image="<invalid>", caption=""), error=f"sample {index}: not a Sample or a dict ({type(sample).__name__})")
        prep = _Prepared(index, sample)
        where = f"sample {sample_id(sample, index)}"
        if not isinstance(sample.caption, str) or not sample.caption.strip():
            prep.error = f"{where}: empty caption"
            return prep
        if self.method.needs_references and not [r for r in sample.references if str(r).strip()]:
            prep.error = f"{where}: method {self.method.name!r} needs reference captions and the sample has none"
            return prep
        key = image_key(sample.image)
        loaded = images.get(key) if images is not None and key is not None else None
        if loaded is None:
            loaded = self._load(sample.image)
            if images is not None and key is not None:
                images[key] = loaded
        if isinstance(loaded, str):
            prep.error = f"{where}: {loaded}"
        else:
            prep.image = loaded
        return prep

    def _load(self, image: Any) -> LoadedImage | str:
        """The image loaded (read, hashed, decoded), or the error text its samples get."""
        try:
            return load_image(image, root=self.images_root, limits=self.image_limits, confine=not self.allow_outside_images)
        except ImageError as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - any unreadable input becomes a record
            return f"image {image_label(image)!r} could not be loaded: {type(exc).__name__}: {exc}"

    # ------------------------------------------------------------------ parsing
    def _parse_safely(self, prep: _Prepared, out: Completion) -> ScoreResult:
        """:meth:`_parse`, with any parser failure turned into this sample's error record."""
        try:
            return self._parse(prep, out)
        except Exception as exc:  # noqa: BLE001 - one odd answer never stops a run
            log.exception("parsing failed")
            return self._error(prep, f"sample {sample_id(prep.sample, prep.index)}: the answer could not be parsed: {type(exc).__name__}: {exc}", raw=out.text)

    def _parse(self, prep: _Prepared, out: Completion) -> ScoreResult:
        details: dict[str, Any] = {"cached": out.cached}
        if out.usage is not None:
            details["usage"] = {"prompt_tokens": out.usage.prompt_tokens, "completion_tokens": out.usage.completion_tokens}
        meta = dict(out.meta or {})
        reuse = meta.pop("prefix_reuse", None)
        if reuse is not None:  # HF: "used", or why this answer was decoded without prefix reuse
            details["prefix_reuse"] = reuse
        if meta:
            details["backend_meta"] = meta
        if self.method.options:
            details["method_options"] = dict(self.method.options)
        if self.method.parser == "first-integer":
            return self._parse_first_integer(prep, out, details)
        if self.method.parser == "fleur-code":
            return self._parse_fleur_code(prep, out, details)
        low, high = self.method.scale
        form = self.method.options.get("answer_form", "decimal")
        parsed = parse_score_details(out.text, low=low, high=high, answer_form=form)
        if self.method.smoothing:
            second = self.method.options.get("second_decimal", "official")
            # A spaced score ("0 5") is the whole answer: the first one in the tokens.
            occurrence = 0 if parsed.rule == "spaced" else _occurrence(out.text, parsed)
            sm = smooth_from_steps(out.steps, expected=parsed.value, occurrence=occurrence, second_decimal=second, answer_form="spaced" if parsed.rule == "spaced" else "decimal", bare=_is_bare(parsed)) if out.steps and parsed.value is not None else None
            if sm is not None:
                details["digit_probs"] = {"first": sm.first, "second": sm.second, "units": sm.units}
                return self._result(prep, score=sm.score, raw_score=sm.raw_score, smoothed=True, raw=out.text, details=details)
            est = (out.meta or {}).get("sampling_estimate")
            if isinstance(est, dict) and est.get("mean") is not None:
                # No log-probabilities: the expected score is estimated from N sampled answers
                # (G-Eval style, the FLEUR paper Sec. 5.2.2): the mean of their parsed scores.
                score = float(est["mean"])
                details["smoothing"] = f"estimated by sampling {est.get('calls', '?')} answers (no log-probabilities)"
                return self._result(prep, score=score, raw_score=parsed.value, smoothed=True, raw=out.text, details=details)
            details["smoothing"] = (
                "not applied: the backend gave no token probabilities (raw score)"
                if not out.steps
                else "not applied: the answer holds no 0.x / 1.0 score at its digit tokens (raw score)"
            )
        if parsed.value is None:
            return self._result(prep, score=None, raw=out.text, status="error", error=f"sample {sample_id(prep.sample, prep.index)}: no score in the answer ({parsed.reason}): {short(out.text)!r}{cached_note(out)}", details=details)
        return self._result(prep, score=parsed.value, raw_score=parsed.value, smoothed=False, raw=out.text, details=details)

    def _parse_first_integer(self, prep: _Prepared, out: Completion, details: dict[str, Any]) -> ScoreResult:
        """The VisCE2 code's reading: the first integer of the answer, whatever it is."""
        value = first_integer(out.text)
        if value is None:
            if self.method.options.get("no_number") == "zero":
                details["fallback"] = "no number in the answer: scored 0, as the VisCE2 code does (no_number=zero)"
                return self._result(prep, score=0.0, raw_score=None, smoothed=False, raw=out.text, details=details)
            where = sample_id(prep.sample, prep.index)
            return self._result(prep, score=None, raw=out.text, status="error", error=f"sample {where}: no number in the answer (the VisCE2 code would score 0; method option no_number=zero does the same): {short(out.text)!r}{cached_note(out)}", details=details)
        low, high = self.method.scale
        if not low <= value <= high:
            details["outside_scale"] = True  # the code keeps it; so does this method
        return self._result(prep, score=value, raw_score=value, smoothed=False, raw=out.text, details=details)

    def _parse_fleur_code(self, prep: _Prepared, out: Completion, details: dict[str, Any]) -> ScoreResult:
        """The FLEUR code's reading (digits and dots of the answer) and its positional search."""
        where = sample_id(prep.sample, prep.index)
        parsed = fleur_code_number(out.text, out.finish_reason)
        if parsed.value is None:
            return self._result(prep, score=None, raw=out.text, status="error", error=f"sample {where}: FLEUR's code reads no number from the answer (its digits and dots are {parsed.digits!r}): {short(out.text)!r}{cached_note(out)}", details=details)
        if not 0.0 <= parsed.value <= 1.0:
            return self._result(prep, score=None, raw=out.text, status="error", error=f"sample {where}: FLEUR's code reads {parsed.digits.strip('.')!r} = {parsed.value:g}, outside 0-1 (its code skips such samples): {short(out.text)!r}{cached_note(out)}", details=details)
        if not out.steps:
            details["smoothing"] = "not applied: the backend gave no token probabilities (raw score)"
            return self._result(prep, score=parsed.value, raw_score=parsed.value, smoothed=False, raw=out.text, details=details)
        try:
            sm = smooth_by_code_search(out.steps, parsed.value)
        except CodeSearchError as exc:
            return self._result(prep, score=None, raw=out.text, status="error", error=f"sample {where}: FLEUR's code cannot smooth this answer ({exc}; its code would reuse the previous sample's score): {short(out.text)!r}{cached_note(out)}", details=details)
        details["digit_probs"] = {"first": sm.first, "second": sm.second, "units": sm.units}
        return self._result(prep, score=sm.score, raw_score=sm.raw_score, smoothed=True, raw=out.text, details=details)

    # ------------------------------------------------------------------ public API
    def score(
        self,
        sample: Sample | dict[str, Any] | ImageInput,
        caption: str | None = None,
        references: Sequence[str] = (),
        *,
        id: str | None = None,
    ) -> ScoreResult:
        """Score one sample (an ``error`` result on failure; never raises for bad input).

        Either a :class:`Sample` (or a dict with ``image``, ``caption``[, ``references``, ``id``]),
        or the image and its caption: ``judge.score("cats.jpg", "two cats")``, optionally with
        ``references`` and ``id``, as :meth:`compare` takes them. An image without a caption is an
        error result, as any other bad sample.
        """
        if caption is not None:
            if isinstance(sample, (Sample, dict)):
                raise TypeError("Judge.score: give a Sample (or dict), or an image and a caption, not both")
            refs = (references,) if isinstance(references, str) else tuple(references)
            sample = Sample(sample, caption, references=refs, id=id)
        elif references or id is not None:
            raise TypeError("Judge.score: references and id go with an image and a caption; a Sample carries its own")
        item: Any = sample  # anything else becomes an error record, as in score_many
        return next(iter(self.score_many([item])))

    def score_many(self, samples: Iterable[Sample | dict[str, Any]]) -> Iterator[ScoreResult]:
        """Score samples, yielding one result per sample, in input order, as soon as it and every
        sample before it are done (see :meth:`score_stream` for completion order)."""
        if self.method.kind == "pairwise":  # checked at the call, not at the first result
            raise ValueError(f"method {self.method.name!r} compares pairs: use Judge.compare / compare_many")
        return in_input_order(ScoringRun(self).run(samples))

    def score_stream(self, samples: Iterable[Sample | dict[str, Any]]) -> Iterator[tuple[int, ScoreResult]]:
        """Score samples, yielding ``(input index, result)`` as each result is made.

        Samples are read ``group_window`` at a time and grouped by image whatever their input order,
        so that two-step methods ask their first step once per image, ``listwise`` puts all the
        captions of an image in one prompt, and backends share the image prefix across captions.
        Backends that batch get whole image groups; backends that run concurrent requests (API
        judges) keep ``concurrency`` requests in flight, a new one starting as soon as one ends.
        """
        if self.method.kind == "pairwise":
            raise ValueError(f"method {self.method.name!r} compares pairs: use Judge.compare / compare_many")
        return ScoringRun(self).run(samples)

    def _generate(self, reqs: Sequence[Request]) -> list[Completion | BaseException]:
        return generate_all(self.backend, reqs)

    def compare(
        self,
        image: ImageInput,
        caption_a: str,
        caption_b: str,
        *,
        mode: pairwise.CompareMode | None = None,
        references: Sequence[str] = (),
        id: str | None = None,
    ) -> PairResult:
        """Which caption describes the image better: ``"A"``, ``"B"`` or ``"tie"``.

        ``mode=None`` picks dual-sided ``"pairwise"`` (both orders asked, votes combined by
        :func:`~capjudge.judges.voting.dual_sided_vote`) for pairwise methods and ``"grading"``
        (the higher single score wins, the GPT-4V evaluator paper) for scoring methods. Never raises for bad input.
        """
        return pairwise.compare(self, image, caption_a, caption_b, mode=mode, references=references, id=id)

    def compare_many(self, pairs: Iterable[pairwise.Pair | dict[str, Any] | tuple[Any, ...]], *, mode: pairwise.CompareMode | None = None) -> Iterator[PairResult]:
        """Compare many pairs (``Pair``, dicts with ``image``, ``caption_a``, ``caption_b`` or
        tuples), yielding results in input order."""
        pairwise.resolve_mode(self.method, mode)  # checked at the call, not at the first result
        return pairwise.compare_many(self, pairs, mode=mode)

    def compare_stream(self, pairs: Iterable[pairwise.Pair | dict[str, Any] | tuple[Any, ...]], *, mode: pairwise.CompareMode | None = None) -> Iterator[tuple[int, PairResult]]:
        """Compare many pairs, yielding ``(input index, result)`` as each comparison is done."""
        return pairwise.compare_stream(self, pairs, mode=mode)

    def explain(self, sample: Sample | dict[str, Any], result: ScoreResult | None = None) -> ScoreResult:
        """Score a sample (unless ``result`` is given) and ask the method's follow-up question
        (FLEUR: "Why? Tell me the reason.") with the score in the conversation history.

        As in FLEUR's code, the assistant turn in the history is the smoothed score when there is
        one, else the model's raw answer. The explanation goes into ``result.explanation``.
        """
        if self.method.explain_template is None:
            name = "fleur_explain"
        else:
            name = self.method.explain_template
        if result is None:
            result = self.score(sample)
        if not result.ok:
            return result
        prep = self._prepare(0, sample)
        if prep.error:
            return self._error(prep, prep.error)
        prep.context = result.context
        first = self._score_request(prep)
        answer = str(result.score) if result.smoothed else (result.raw or "").strip()
        history = [m for m in first.messages if m.role != "system"] + [Message("assistant", answer)]
        follow = get_template(name).render()
        assert prep.image is not None  # _prepare succeeded
        req = Request(self._messages(follow, prep.image, history=history), self._config(512, False))
        (out,) = self._generate([req])
        if isinstance(out, BaseException):
            # The score stands; only the explanation is missing.
            result.details["explanation_error"] = f"{type(out).__name__}: {out}"
            return result
        result.explanation = out.text.strip()
        return result

    def close(self) -> None:
        """Release the backend."""
        self.backend.close()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Judge(method={self.method.name!r}, backend={self.backend_spec!r})"


def score_images(judge: Judge, image: ImageInput, captions: Sequence[str]) -> list[ScoreResult]:
    """Score several captions of one image (convenience for notebooks)."""
    return list(judge.score_many(Sample(image, c) for c in captions))
