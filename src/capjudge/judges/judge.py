"""``Judge(method, backend)``: score captions, compare pairs, explain scores.

The judge renders the method's templates, parses the answers and turns every failure into an
``error`` result that names the sample and the cause. Nothing a single sample does can stop a run.
How requests reach the backend (whole image groups for backends that batch, a sliding window for
API backends) is :mod:`capjudge.judges.scoring` and :mod:`capjudge.judges.dispatch`.

``Judge`` is a facade over small modules with one job each: :mod:`~capjudge.judges.prepare` (a
sample checked, its image loaded), :mod:`~capjudge.judges.requests` (the requests of a method),
:mod:`~capjudge.judges.answers` (reading an answer by the method's parser kind),
:mod:`~capjudge.judges.records` (making a record) and :mod:`~capjudge.judges.sampling` (the G-Eval
estimate for answers without log-probabilities).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from capjudge.backends import kinds
from capjudge.backends.base import Backend, Completion, Request
from capjudge.backends.presets import preset_of, preset_options
from capjudge.backends.registry import load_backend, parse_spec
from capjudge.data.images import DEFAULT_LIMITS, ImageLimits, LoadedImage
from capjudge.data.types import ImageInput, PairResult, Sample, ScoreResult
from capjudge.judges import pairwise, sampling
from capjudge.judges.answers import read_safely
from capjudge.judges.dispatch import generate_all, in_input_order
from capjudge.judges.prepare import Prepared, SampleError, load_sample_image, prepare
from capjudge.judges.records import backend_spec, error_record, score_record
from capjudge.judges.requests import RequestBuilder
from capjudge.judges.scoring import ScoringRun
from capjudge.prompts.registry import Method, get_method, get_template

API_KINDS = frozenset(kinds.api_kinds())  # kept for old imports: ask capjudge.backends.kinds


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
    image_limits:
        The image policy, one :class:`~capjudge.data.images.ImageLimits` (default
        ``ImageLimits()``): ``max_pixels``, the pixel budget of a decoded image (0: none; larger
        pictures are downscaled at load to fit, records say so in ``details["image_downscaled"]``,
        or refused with ``oversize="refuse"``: an error record naming the sample);
        ``max_download_bytes`` and ``download_timeout``, the size cap (bytes) and overall deadline
        (seconds, the whole download) of an ``http(s)`` image that a local backend downloads.
    max_image_pixels, oversize_images, max_image_bytes, image_timeout:
        Deprecated (one release, with a :class:`DeprecationWarning`): the fields of
        ``image_limits`` as separate keywords (``max_pixels``, ``oversize``,
        ``max_download_bytes``, ``download_timeout``); not together with ``image_limits``.
    estimate_by_sampling:
        N: a smoothing method's answer without usable log-probabilities (refused by the server, or
        missing) is scored by the mean of N more answers sampled at temperature 1, on any backend
        (:mod:`capjudge.judges.sampling`). Also read from ``backend_options`` (taken out of them
        before the backend is built: ``--backend-opt estimate_by_sampling=N``) and the spec's
        ``?estimate_by_sampling=N``. ``None`` or 0: no estimate.
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
        image_limits: ImageLimits | None = None,
        estimate_by_sampling: int | None = None,
        max_image_pixels: int | None = None,
        oversize_images: str | None = None,
        max_image_bytes: int | None = None,
        image_timeout: float | None = None,
    ) -> None:
        self.method = get_method(method).configure(method_options)
        old = {"max_image_pixels": max_image_pixels, "oversize_images": oversize_images, "max_image_bytes": max_image_bytes, "image_timeout": image_timeout}
        self.image_limits = image_limits_of(image_limits, old)
        self.allow_outside_images = bool(allow_outside_images)
        options = dict(backend_options or {})
        # The judge's option, not the backend's: taken out before the backend is built.
        from_options = sampling.take_option(options)
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
        chosen = preset_of(self.backend.identity(), preset if kinds.get(self.backend.kind).preset_option == "prompt_format" else None)
        self.judge_preset: str | None = chosen.name if chosen is not None else None
        # Methods whose official code sends system turns (CapArena, CapMAS, CLAIR) send them on
        # every backend when the judge's system is "auto"; another --system replaces them.
        self.official_system = system == "auto" and self.method.official_system
        if system == "auto":
            if kinds.is_api(self.backend.kind):
                system = None
            else:
                system = chosen.system_for(self.method.system) if chosen is not None else self.method.system
        self.system = system
        self.contexts: dict[tuple[str, str], str] = {}
        """First-step answers of two-step methods, by (image sha256, template hash), for the judge's lifetime."""
        from_spec = parse_spec(backend).options.get(sampling.OPTION) if isinstance(backend, str) else None
        self.estimate_samples = sampling.as_count(estimate_by_sampling) or from_options or sampling.as_count(from_spec)
        """N of the G-Eval sampling estimate (:mod:`capjudge.judges.sampling`); 0: none."""

    # ------------------------------------------------------------------ identity
    @property
    def backend_spec(self) -> str:
        """The backend spec written into results."""
        return backend_spec(self.backend)

    # ------------------------------------------------------------------ the seams (judges.prepare, .requests, .answers, .records)
    @property
    def requests(self) -> RequestBuilder:
        """How this judge builds its requests (method, system turn, answer length, alternatives)."""
        return RequestBuilder(self.method, self.system, self.max_new_tokens, self.top_logprobs, official=self.official_system, choices=kinds.is_api(self.backend.kind))

    def load_image(self, image: Any) -> LoadedImage | str:
        """The image loaded (read, hashed, decoded) under the judge's image settings, or the
        error text its samples get."""
        return load_sample_image(image, root=self.images_root, limits=self.image_limits, confine=not self.allow_outside_images)

    def prepare_sample(self, index: int, sample: Sample | dict[str, Any], images: dict[Any, Any] | None = None) -> Prepared:
        """Check a caption and load its image, or say why it cannot be judged (``.error``);
        ``images`` memoises loads (the captions of one image read and hash it once)."""
        return prepare(index, sample, self.method, self.load_image, images)

    def record(self, prep: Prepared, **fields: Any) -> ScoreResult:
        """The score record of ``prep`` (:func:`capjudge.judges.records.score_record`): one that
        would say ``ok`` without a finite score on the method's scale is an error record."""
        return score_record(prep, self.method, self.backend, self.judge_preset, **fields)

    def error_record(self, prep: Prepared, message: str, raw: str | None = None, cause: BaseException | None = None) -> ScoreResult:
        """An error record; ``cause`` (a backend failure) says whether a re-run may cure it."""
        return error_record(prep, self.method, self.backend, self.judge_preset, message, raw=raw, cause=cause)

    def read_answer(self, prep: Prepared, out: Completion) -> ScoreResult:
        """The record of the answer to ``prep``'s scoring request, read by the method's parser
        kind (:data:`capjudge.judges.answers.PARSERS`); a parser failure is an error record."""
        return read_safely(self.method, prep, out, self.record)

    def request(self, prompt: str, image: LoadedImage, max_new_tokens: int, references: Sequence[str] = (), *, logprobs: bool = False) -> Request:
        """A request at the method's temperature (greedy unless ``--method-option temperature=``
        says otherwise): the judge's system turn (a method's official one rendered with
        ``references``), then ``prompt`` with ``image``; ``logprobs``: token alternatives asked."""
        return self.requests.request(prompt, image, max_new_tokens, references, logprobs=logprobs)

    def score_request(self, sample: Sample | dict[str, Any], index: int = 0) -> Request:
        """The request a one-step scoring method sends for ``sample`` (what backend parity checks
        tokenize); raises :class:`SampleError` for a sample that cannot be judged and
        ``ValueError`` for two-step methods, whose request depends on the first step's answer."""
        if self.method.context_template or self.method.pipeline or self.method.kind != "score":
            raise ValueError(f"method {self.method.name!r} is not a one-step scoring method: its request depends on more than one sample or answer")
        prep = self.prepare_sample(index, sample)
        if prep.error:
            raise SampleError(prep.error)
        return self.requests.score_request(prep)

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
        if self.method.pairwise:  # checked at the call, not at the first result
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
        if self.method.pairwise:
            raise ValueError(f"method {self.method.name!r} compares pairs: use Judge.compare / compare_many")
        return ScoringRun(self).run(samples)

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
        if not result.ok or self.method.pipeline:
            return result  # a method of steps explains its score by them: details.steps
        prep = self.prepare_sample(0, sample)
        if prep.error:
            return self.error_record(prep, prep.error)
        prep.context = result.context
        first = self.requests.score_request(prep)
        answer = str(result.score) if result.smoothed else (result.raw or "").strip()
        assert prep.image is not None  # prepare_sample succeeded
        req = self.requests.follow_up(first, answer, get_template(name).render(), prep.image)
        (out,) = generate_all(self.backend, [req])
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



# Judge's image keywords before ImageLimits (one release): keyword -> ImageLimits field.
OLD_IMAGE_KEYWORDS = {"max_image_pixels": "max_pixels", "oversize_images": "oversize", "max_image_bytes": "max_download_bytes", "image_timeout": "download_timeout"}


def image_limits_of(image_limits: ImageLimits | None, old: dict[str, Any]) -> ImageLimits:
    """The judge's image policy: ``image_limits``, or one built from the deprecated keywords
    (``max_image_pixels=`` ...) with a :class:`DeprecationWarning` naming the new form."""
    given = {k: v for k, v in old.items() if v is not None}
    if image_limits is not None and not isinstance(image_limits, ImageLimits):
        raise TypeError(f"image_limits must be a capjudge.data.images.ImageLimits, got {type(image_limits).__name__}")
    if not given:
        return image_limits or DEFAULT_LIMITS
    names = ", ".join(f"{k}=" for k in given)
    if image_limits is not None:
        raise ValueError(f"give image_limits=ImageLimits(...) or the old keywords ({names}), not both")
    fields = ", ".join(f"{OLD_IMAGE_KEYWORDS[k]}=..." for k in given)
    warnings.warn(
        f"Judge({names}) is deprecated: pass image_limits=ImageLimits({fields}) (from capjudge.data.images); the keywords go in a future release",
        DeprecationWarning,
        stacklevel=3,
    )
    return ImageLimits(**{OLD_IMAGE_KEYWORDS[k]: v for k, v in given.items()})

__all__ = ["API_KINDS", "Judge", "SampleError", "score_images"]
