"""Prompt templates and judging methods, by name.

A *template* is a Jinja file (``templates/*.j2``, shipped as package data) or a user's string or
file, rendered with ``StrictUndefined`` so that a missing variable is an error, never a silent blank.
User templates are rendered in jinja2's sandboxed environment.

A *method* ties templates to a parser and a scale: ``vanilla``, ``reference``, ``description``,
``visce2`` (the VisCE2 paper), ``fleur``, ``ref-fleur`` (the FLEUR paper), ``gpt4v-grade``,
``gpt4v-pairwise`` (the GPT-4V evaluator paper), ``listwise`` (the Cobra-effect paper),
``llava-critic-pointwise``, ``llava-critic-pairwise`` (LLaVA-Critic's published prompts), and the
``*-code`` variants that run what the official VisCE2 and FLEUR code ran (see
:mod:`capjudge.prompts.sources`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import jinja2
import jinja2.meta
import jinja2.sandbox

from capjudge.core.errors import UsageError
from capjudge.prompts.capability import SOURCES as CAPABILITY_SOURCES
from capjudge.prompts.dcscore import SOURCES as DCSCORE_SOURCES
from capjudge.prompts.detailed import SOURCES as DETAILED_SOURCES
from capjudge.prompts.paperjudge import (
    CAPABILITY_JUDGE,
    CAPARENA_JUDGE,
    CAPMAS_JUDGE,
    CAPTIONQA_JUDGE,
    DCSCORE_JUDGE,
    PaperJudge,
)
from capjudge.prompts.sandbox import (
    BoundedSandbox,
    RenderLimitError,
    UnsafeTemplateError,
    check_source,
    render_bounded,
)

LLAVA_V1_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)
"""The system sentence of LLaVA's ``llava_v1`` conversation, used by FLEUR's and VisCE2's code."""


class UnknownMethodError(UsageError, ValueError):
    """No method or template of that name is registered."""


class TemplateError(UsageError, ValueError):
    """A template could not be parsed or rendered (names the template and the cause)."""


_PACKAGE_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
# User templates: jinja2's immutable sandbox with loops, calls, sizes and time bounded
# (capjudge.prompts.sandbox); constructs that load other templates are refused at registration.
_SANDBOX_ENV = BoundedSandbox(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)


@dataclass(frozen=True)
class PromptTemplate:
    """A named Jinja template. ``hash`` identifies its exact source (written into every result)."""

    name: str
    source: str
    origin: str = "package"
    sandboxed: bool = False

    @cached_property
    def _compiled(self) -> jinja2.Template:
        try:
            if not self.sandboxed:
                return _PACKAGE_ENV.from_string(self.source)
            return _SANDBOX_ENV.from_string(check_source(_SANDBOX_ENV, self.source))
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"template {self.name!r} ({self.origin}) has a syntax error on line {exc.lineno}: {exc.message}") from None
        except UnsafeTemplateError as exc:
            raise TemplateError(f"template {self.name!r} ({self.origin}) is refused: it {exc}") from None

    def compile(self) -> None:
        """Parse the template now (a user template: check its constructs too), so that a syntax
        error or a refused construct raises :class:`TemplateError` here, not at the first render."""
        self._compiled  # noqa: B018 - cached: renders reuse it

    @cached_property
    def hash(self) -> str:
        """First 16 hex digits of the SHA-256 of the template source."""
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()[:16]

    @cached_property
    def variables(self) -> frozenset[str]:
        """The variables the template uses (``caption``, ``references``, ``context``, ...)."""
        env = _SANDBOX_ENV if self.sandboxed else _PACKAGE_ENV
        return frozenset(jinja2.meta.find_undeclared_variables(env.parse(self.source)))

    def render(self, **variables: Any) -> str:
        """Render with the given variables; a missing variable, an unsafe operation or (user
        templates) a render over the sandbox's bounds raises :class:`TemplateError`."""
        try:
            if self.sandboxed:
                return render_bounded(self._compiled, variables)
            return self._compiled.render(**variables)
        except jinja2.UndefinedError as exc:
            raise TemplateError(f"template {self.name!r} needs a variable that was not given: {exc.message}") from None
        except jinja2.sandbox.SecurityError as exc:
            raise TemplateError(f"template {self.name!r} tried an unsafe operation: {exc}") from None
        except RenderLimitError as exc:
            raise TemplateError(f"template {self.name!r} went over a render limit: {exc}") from None
        except Exception as exc:
            if not self.sandboxed:
                raise
            # A user template's own failure (1/0, a string plus a number ...) is that row's error.
            raise TemplateError(f"template {self.name!r} failed: {type(exc).__name__}: {exc}") from None


_TEMPLATES: dict[str, PromptTemplate] = {
    # Packaged templates held as Python sources (the detailed-caption methods' official texts).
    name: PromptTemplate(name=name, source=source, origin="capjudge/prompts/detailed.py")
    for name, source in DETAILED_SOURCES.items()
}
_TEMPLATES.update({name: PromptTemplate(name=name, source=source, origin="capjudge/prompts/capability.py") for name, source in CAPABILITY_SOURCES.items()})
_TEMPLATES.update({name: PromptTemplate(name=name, source=source, origin="capjudge/prompts/dcscore.py") for name, source in DCSCORE_SOURCES.items()})


def _package_template(name: str) -> PromptTemplate:
    src = resources.files("capjudge.prompts").joinpath("templates").joinpath(f"{name}.j2").read_text(encoding="utf-8")
    return PromptTemplate(name=name, source=src, origin=f"capjudge/prompts/templates/{name}.j2")


def get_template(name: str) -> PromptTemplate:
    """A registered template, or a packaged ``templates/<name>.j2``."""
    if name in _TEMPLATES:
        return _TEMPLATES[name]
    try:
        tpl = _package_template(name)
    except (FileNotFoundError, OSError):
        raise UnknownMethodError(f"no template named {name!r} (known: {', '.join(list_templates())})") from None
    _TEMPLATES[name] = tpl
    return tpl


def list_templates() -> list[str]:
    """Names of the packaged and registered templates."""
    packaged = {p.name[:-3] for p in resources.files("capjudge.prompts").joinpath("templates").iterdir() if p.name.endswith(".j2")}
    return sorted(packaged | set(_TEMPLATES))


def register_template(name: str, source: str | None = None, *, path: str | Path | None = None, overwrite: bool = False) -> PromptTemplate:
    """Register a user template from a string or a file; it is rendered in a sandbox.

    Raises :class:`TemplateError` for a syntax error or a refused construct (checked at once:
    ``include`` / ``import`` / ``extends``, a constant ``range()`` over the sandbox's limit, loops
    nested too deep; see :mod:`capjudge.prompts.sandbox`) and ``ValueError`` when the
    name is taken (unless ``overwrite``) or neither/both of ``source`` and ``path`` are given.
    """
    if (source is None) == (path is None):
        raise ValueError("give exactly one of source= or path=")
    if not overwrite and name in list_templates():
        raise ValueError(f"a template named {name!r} already exists (pass overwrite=True to replace it)")
    if path is not None:
        source = Path(path).read_text(encoding="utf-8")
        origin = str(path)
    else:
        origin = "<string>"
    assert source is not None
    tpl = PromptTemplate(name=name, source=source, origin=origin, sandboxed=True)
    tpl.compile()  # fail now on a syntax error
    _TEMPLATES[name] = tpl
    return tpl


Kind = Literal["score", "pairwise", "listwise"]
Parser = Literal["rules", "first-integer", "fleur-code", "caparena", "capmas", "clair", "capability", "captionqa", "dcscore"]

OPTION_CHOICES: dict[str, tuple[str, ...]] = {
    "second_decimal": ("official", "printed"),
    "no_number": ("error", "zero"),
    "answer_form": ("decimal", "spaced"),
    "score": ("plain", "expected"),
    "confidence": ("off", "on"),
}
"""Method options with a fixed set of values (``temperature`` takes a number)."""

SCORE_OPTION = "score"
"""``score=plain|expected`` (every scoring method with a plain numeric score; not a default of any
method, so that records without it stay as they were): ``expected`` weights the printed number by
its token probabilities (:mod:`capjudge.judges.expected`)."""

CONFIDENCE_OPTION = "confidence"
"""``confidence=off|on`` (pairwise methods answered in one request per order, and the methods that
take ``score``; not a default of any method, so that records without it stay as they were): ``on``
asks the answer's token log-probabilities and writes ``details.confidence`` and
``details.confidence_rule`` (scores: ``details.score_sd`` too) on every record
(:mod:`capjudge.judges.confidence`)."""

FREE_OPTIONS: frozenset[str] = frozenset({"vqa_dir", "questions", "captioned"}) | {"annotations", "oracle_facts"}
"""Method options that take any text (``vqa_dir``: the folder of CapMAS's per-image question files;
``annotations``: CAPability's ``annotations/`` folder; ``questions``: CaptionQA's question set,
``captioned``: the input file whose images have a caption; ``oracle_facts``: DeCapBench's
human_annotated_oracle_facts.jsonl)."""


class MethodOptionError(UsageError, ValueError):
    """A method option that the method does not take, or a value it does not accept."""


@dataclass(frozen=True)
class Method:
    """A judging method: which templates, how to decode, how to parse, on which scale.

    ``context_template`` (two-step methods) is asked once per image and its answer fills
    ``{{ context }}`` of ``template``. ``smoothing`` applies FLEUR's digit-probability smoothing.
    ``system`` is the system sentence the paper's code used with LLaVA (``None``: no system turn).
    ``temperature`` / ``context_temperature`` and ``max_new_tokens`` / ``context_max_new_tokens``
    are the decoding of the scoring step and of the first step (0: greedy). ``parser`` reads the
    score: ``"rules"`` (capjudge's parser, :mod:`capjudge.parsing.scores`), ``"first-integer"``
    (the VisCE2 code's first ``[0-9]+``) or ``"fleur-code"`` (the FLEUR code's digits and dots of
    the whole answer, and its positional search for the digit tokens). ``normalize_caption``
    collapses whitespace in the caption before it enters the prompt (FLEUR's code does; VisCE2's
    code does not; neither touches the references). ``source`` keys :data:`capjudge.prompts.sources.SOURCES`;
    ``paper`` names the section or file. ``options`` holds the method options and their values
    (see :meth:`configure`).

    Detailed-caption methods (CapArena, CapMAS, CLAIR) send the official code's requests:
    ``system_template`` renders their system turn (with ``references``), sent on every backend,
    API ones included (:attr:`official_system`); ``top_p`` and ``image_detail`` (OpenAI's image
    ``detail``) are their decoding and image settings; ``format_tries`` how many times an answer
    of the wrong format is asked again; ``pipeline`` names their steps per caption
    (``judges.steps.PIPELINES``), whose templates ``step_templates`` lists. ``needs_image``:
    ``False`` for a text-only method (CAPability), whose samples' images are never read.
    ``paper_judge``: the judge the official code hard-wires, behind the paper's numbers
    (:mod:`capjudge.prompts.paperjudge`); ``None`` for methods without one.
    """

    name: str
    template: str
    kind: Kind = "score"
    scale: tuple[float, float] = (0.0, 100.0)
    context_template: str | None = None
    explain_template: str | None = None
    smoothing: bool = False
    needs_references: bool = False
    system: str | None = None
    max_new_tokens: int = 32
    stop_rule: str = ""
    context_max_new_tokens: int = 512
    temperature: float = 0.0
    context_temperature: float = 0.0
    parser: Parser = "rules"
    normalize_caption: bool = True
    source: str = "capjudge"
    paper: str = ""
    description: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    top_p: float = 1.0
    system_template: str | None = None
    image_detail: str | None = None
    format_tries: int = 1
    pipeline: str | None = None
    step_templates: tuple[str, ...] = ()
    needs_image: bool = True
    paper_judge: PaperJudge | None = None

    @property
    def official_system(self) -> bool:
        """The method's system turns are its official code's (sent on API backends too)."""
        return self.system_template is not None or self.pipeline is not None

    @property
    def pairwise(self) -> bool:
        """The method compares two captions (a verdict), rather than scoring one (``kind``)."""
        return self.kind == "pairwise"

    @property
    def two_step(self) -> bool:
        """True when a per-image first step (description / visual context) precedes scoring."""
        return self.context_template is not None

    def templates(self) -> list[PromptTemplate]:
        """Every template the method renders, in order."""
        names = [n for n in (self.system_template, *self.step_templates, self.context_template, self.template, self.explain_template) if n]
        return [get_template(n) for n in names]

    @property
    def template_hash(self) -> str:
        """One hash over all the method's templates (written into results)."""
        h = hashlib.sha256()
        for t in self.templates():
            h.update(t.source.encode("utf-8"))
            h.update(b"\0")
        return h.hexdigest()[:16]

    def with_options(self, **changes: Any) -> Method:
        """A copy with some fields changed (e.g. another template)."""
        return replace(self, **changes)

    def option_names(self) -> list[str]:
        """The method options this method takes (``temperature`` always; others by method)."""
        extra = {SCORE_OPTION} if self.score_option_refusal() is None else set()
        if self.confidence_option_refusal() is None:
            extra.add(CONFIDENCE_OPTION)
        return sorted({*self.options, "temperature", *extra})

    def option_defaults(self) -> dict[str, Any]:
        """The method's options with their defaults, as ``capjudge methods`` shows them (``score``
        is ``plain`` where the method takes it, without being written into records)."""
        extra = {SCORE_OPTION: "plain"} if self.score_option_refusal() is None and SCORE_OPTION not in self.options else {}
        if self.confidence_option_refusal() is None and CONFIDENCE_OPTION not in self.options:
            extra[CONFIDENCE_OPTION] = "off"
        return {k: v for k, v in sorted({**self.options, **extra}.items())}

    def score_option_refusal(self) -> str | None:
        """Why this method takes no ``score`` option (``None``: it takes it): only methods of kind
        ``score`` whose answer is a plain number read by capjudge's rules or the first integer."""
        if self.kind != "score":
            what = "compares two captions (its answer is a verdict)" if self.pairwise else "scores a list of captions in one answer"
            return f"method {self.name!r} has no option 'score': it {what}, so there is no single printed score to weight"
        if self.smoothing or self.parser == "fleur-code":
            return (
                f"method {self.name!r} has no option 'score': it already takes the expected value of its printed digits "
                "(FLEUR's smoothing); score=expected is for methods that print a plain score"
            )
        if self.pipeline is not None:
            return (
                f"method {self.name!r} has no option 'score': its score is made from several answers "
                "(steps per caption), not one printed number to weight"
            )
        return None

    def confidence_option_refusal(self) -> str | None:
        """Why this method takes no ``confidence`` option (``None``: it takes it): pairwise methods
        answered in one request per order, and the methods that take ``score``."""
        if self.pairwise and self.pipeline is None:
            return None
        if not self.pairwise and self.score_option_refusal() is None:
            return None
        return (
            f"method {self.name!r} has no option 'confidence': it takes a pairwise verdict or a plain printed "
            "score (capjudge.judges.confidence), and this method's answer is neither"
        )

    @property
    def confidence(self) -> bool:
        """``confidence=on``: every record carries the judgment's confidence (:mod:`capjudge.judges.confidence`)."""
        return self.options.get(CONFIDENCE_OPTION) == "on"

    @property
    def expected_score(self) -> bool:
        """``score=expected``: the score is the probability-weighted value of the printed number."""
        return self.options.get(SCORE_OPTION) == "expected"

    @property
    def reads_logprobs(self) -> bool:
        """The scoring request asks for token log-probabilities (FLEUR smoothing, ``score=expected``,
        ``confidence=on``)."""
        return self.smoothing or self.expected_score or self.confidence

    def configure(self, options: Mapping[str, Any] | None = None) -> Method:
        """A copy with method options set, checked.

        ``second_decimal`` (smoothing methods): ``"official"`` uses the second decimal only when
        the printed score has a non-zero digit after the first decimal, as FLEUR's code does
        (``0.80`` counts as ``0.8``); ``"printed"`` uses it whenever a second digit is printed.
        ``answer_form`` (smoothing methods read by capjudge's rules): ``"decimal"`` reads ``0.5``
        and records an answer of spaced digits (``0 5``) as an error that names this option;
        ``"spaced"`` also reads ``0 5`` as 0.5, MiniGPT-v2's form (the FLEUR paper, Sec. 5.4), and
        smooths the digit after the space.
        ``no_number`` (``first-integer`` methods): ``"error"`` records an answer without a number
        as an error; ``"zero"`` scores it 0 as VisCE2's code does (the record says so).
        ``temperature``: decoding temperature of both steps (0: greedy).
        ``score`` (methods of kind ``score`` with a plain numeric answer, :meth:`score_option_refusal`):
        ``"plain"`` (the default) records the printed number; ``"expected"`` its probability-weighted
        value at the number's tokens (:mod:`capjudge.judges.expected`).
        Raises :class:`MethodOptionError` naming the method and what it accepts.
        """
        if not options:
            return self
        merged = dict(self.options)
        temperature: float | None = None
        for key, value in options.items():
            name = str(key).strip().replace("-", "_")
            if name == "temperature":
                try:
                    t = float(value)
                except (TypeError, ValueError):
                    raise MethodOptionError(f"method option temperature must be a number, not {value!r}") from None
                if not 0.0 <= t <= 2.0:
                    raise MethodOptionError(f"method option temperature must be between 0 and 2, not {t}")
                temperature = t
                continue
            if name in FREE_OPTIONS and name in self.options:
                merged[name] = str(value)
                continue
            if name in (SCORE_OPTION, CONFIDENCE_OPTION) and name not in self.options:
                refusal = self.score_option_refusal() if name == SCORE_OPTION else self.confidence_option_refusal()
                if refusal is not None:
                    raise MethodOptionError(refusal)
            elif name not in self.options:
                raise MethodOptionError(f"method {self.name!r} has no option {name!r} (its options: {', '.join(self.option_names())})")
            text = str(value).strip().lower()
            if text not in OPTION_CHOICES[name]:
                raise MethodOptionError(f"method option {name} must be one of {', '.join(OPTION_CHOICES[name])}, not {value!r}")
            merged[name] = text
        if temperature is None:
            return replace(self, options=merged)
        return replace(self, options=merged, temperature=temperature, context_temperature=temperature)

    def decoding(self) -> str:
        """The decoding settings in words (``capjudge methods``)."""

        def one(temp: float, tokens: int) -> str:
            return f"greedy, <= {tokens} tokens" if temp == 0 else f"sampled T={temp:g}, <= {tokens} tokens"

        score = one(self.temperature, self.max_new_tokens) + (f", top_p {self.top_p:g}" if self.top_p != 1.0 else "")
        if self.two_step:
            return f"step 1: {one(self.context_temperature, self.context_max_new_tokens)}; step 2: {score}"
        return score


_METHODS: dict[str, Method] = {}


def register_method(method: Method, *, overwrite: bool = False) -> Method:
    """Register a method (its templates must exist)."""
    if method.name in _METHODS and not overwrite:
        raise ValueError(f"a method named {method.name!r} already exists (pass overwrite=True to replace it)")
    for name in (method.template, method.context_template, method.explain_template, method.system_template, *method.step_templates):
        if name:
            get_template(name)
    unknown = set(method.options) - set(OPTION_CHOICES) - FREE_OPTIONS
    if unknown:
        raise ValueError(f"method {method.name!r} declares unknown options {sorted(unknown)}")
    _METHODS[method.name] = method
    return method


def get_method(name: str | Method) -> Method:
    """A registered method by name (a :class:`Method` is returned unchanged)."""
    if isinstance(name, Method):
        return name
    key = name.strip().lower().replace("_", "-")
    if key not in _METHODS:
        raise UnknownMethodError(f"unknown method {name!r} (known: {', '.join(list_methods())})")
    return _METHODS[key]


def paper_judge_of(name: str) -> PaperJudge | None:
    """The paper judge of the method named ``name`` (as records and runs name it: ``caparena``,
    ``capability+mine`` for a method run with ``--template``), or ``None``: no such judge, or no
    registered method of that name."""
    try:
        return get_method(name.partition("+")[0]).paper_judge if name else None
    except UnknownMethodError:
        return None


def list_methods() -> list[str]:
    """Names of the registered methods."""
    return sorted(_METHODS)


# The LLaVA-Critic model card's Quick Start decodes greedily with max_new_tokens=4096; the methods
# stop at 1024 (docs/methods.md, "Differences from the official code"): greedy answers shorter than
# that are the same, and 4096 plus the prompt exceeds the 4096-token context of LLaVA-1.5-class
# judges, which the HF backend refuses. --max-new-tokens 4096 decodes as the card does.
LLAVA_CRITIC_MAX_NEW_TOKENS = 1024
LLAVA_CRITIC_CARD_MAX_NEW_TOKENS = 4096

# The VisCE2 code's decoding (src/models/llava_v15.py): sampling at temperature 0.2, up to 1024 new
# tokens, for both steps; its released runs loaded LLaVA in 4 bits (hf backend option load_4bit).
_VISCE2_CODE: dict[str, Any] = dict(
    system=LLAVA_V1_SYSTEM,
    source="visce2-code",
    temperature=0.2,
    context_temperature=0.2,
    max_new_tokens=1024,
    context_max_new_tokens=1024,
    parser="first-integer",
    normalize_caption=False,
    options={"no_number": "error"},
)
_FLEUR: dict[str, Any] = dict(scale=(0.0, 1.0), smoothing=True, explain_template="fleur_explain", system=LLAVA_V1_SYSTEM, max_new_tokens=16, stop_rule="score", options={"second_decimal": "official", "answer_form": "decimal"})
# The FLEUR code (fleur.py, reffleur.py): greedy, up to 512 new tokens, every digit and dot of the
# answer read as one number, digit tokens found by searching the generated ids.
_FLEUR_CODE: dict[str, Any] = dict(_FLEUR, max_new_tokens=512, stop_rule="", parser="fleur-code", source="fleur-code", options={})

for _m in (
    Method("vanilla", "vanilla", system=LLAVA_V1_SYSTEM, source="visce2", paper="Appendix A, Table 5 (Vanilla)", description="Task instruction and caption only; 0-100."),
    Method("reference", "reference", needs_references=True, system=LLAVA_V1_SYSTEM, source="visce2", paper="Appendix A, Table 5 (Reference)", description="Vanilla plus the reference captions; 0-100."),
    Method("description", "description_score", context_template="description_context", system=LLAVA_V1_SYSTEM, source="visce2", paper="Appendix A, Table 5 (Description)", description="Step 1: detailed description of the image (once per image); step 2: rate with it; 0-100."),
    Method("visce2", "visce2_score", context_template="visce2_context", system=LLAVA_V1_SYSTEM, source="visce2", paper="Appendix A, Table 5 (VisCE2)", description="Step 1: structured visual context (objects, features, relations; once per image); step 2: rate with it; 0-100."),
    Method("vanilla-code", "vanilla_code", paper="prompts/base.txt, src/eval.py", description="Vanilla as the released code ran it: its prompt, sampling, first-integer parse.", **_VISCE2_CODE),
    Method("reference-code", "reference_code", needs_references=True, paper="prompts/references.txt, src/eval.py", description="Reference as the released code ran it.", **_VISCE2_CODE),
    Method("description-code", "description_code", paper="prompts/captions.txt, src/eval.py", description="Description as the released code ran it: its eval.py never filled the description, so the prompt holds the literal placeholder [caption] (one step).", **_VISCE2_CODE),
    Method("visce2-code", "visce2_score_code", context_template="visce2_context_code", paper="prompts/visual_context.txt, prompts/visce_2.txt, src/inference.py, src/eval.py", description="VisCE2 as the released code ran it: its two prompts, sampling, first-integer parse.", **_VISCE2_CODE),
    Method("fleur", "fleur", source="fleur", paper="Sec. 3.1-3.2; smoothing as fleur.py", description="Reference-free 0.0-1.0 score, smoothed over the digit probabilities.", **_FLEUR),
    Method("ref-fleur", "ref_fleur", needs_references=True, source="fleur", paper="Sec. 3.3; smoothing as reffleur.py", description="FLEUR with the reference captions in the prompt.", **_FLEUR),
    Method("fleur-code", "fleur", paper="fleur.py", description="FLEUR as the released code ran it: 512 tokens, digits and dots of the whole answer, digit tokens found by search.", **_FLEUR_CODE),
    Method("ref-fleur-code", "ref_fleur", needs_references=True, paper="reffleur.py", description="RefFLEUR as the released code ran it.", **_FLEUR_CODE),
    Method("gpt4v-grade", "gpt4v_grade", max_new_tokens=256, source="gpt4v", paper="Sec. 2, single-answer grading", description="Single-answer grading on a 0-100 scale; JSON answer with score and reasoning."),
    Method("gpt4v-pairwise", "gpt4v_pairwise", kind="pairwise", max_new_tokens=256, source="gpt4v", paper="Sec. 2, pairwise comparison", description="Pairwise comparison (Answer 1 / Answer 2 / Tie), asked in both orders and combined by the dual-sided vote."),
    Method("fleur-hardened", "fleur_hardened", paper="FLEUR paper Sec. 3.1 with the caption delimited as data", description="FLEUR with the caption between markers and a note that text inside them is data, not instructions (opt-in hardening).", **_FLEUR),
    Method("vanilla-hardened", "vanilla_hardened", system=LLAVA_V1_SYSTEM, paper="VisCE2 paper Table 5 (Vanilla) with the caption delimited as data", description="Vanilla with the caption between markers and a note that text inside them is data, not instructions (opt-in hardening)."),
    Method("llava-critic-pointwise", "llava_critic_pointwise", max_new_tokens=LLAVA_CRITIC_MAX_NEW_TOKENS, source="llava-critic", paper="model card Quick Start, pointwise scoring (https://huggingface.co/lmms-lab/llava-critic-7b)", description="LLaVA-Critic's published pointwise prompt: score the caption out of 100 with reasons; read by capjudge's rules."),
    Method("llava-critic-pairwise", "llava_critic_pairwise", kind="pairwise", max_new_tokens=LLAVA_CRITIC_MAX_NEW_TOKENS, source="llava-critic", paper="model card Quick Start, pairwise ranking (https://huggingface.co/lmms-lab/llava-critic-7b)", description="LLaVA-Critic's published pairwise prompt (first / second response), asked in both orders; 'The better response: [1]' or 'Two responses are equally good'."),
    Method("listwise", "listwise", kind="listwise", scale=(0.0, 1.0), max_new_tokens=128, source="cobra", paper="Fig. 4, GPT-4V listwise grading", description="All candidate captions of an image in one prompt, each scored 0-1."),
):
    register_method(_m)

# The detailed-caption methods (docs/methods.md "Detailed captions"): their official code's
# requests. CapArena's judge (vlm_as_a_judge.py): gpt-4o-2024-08-06, temperature 0.1 (call_llm
# overrides the payload's 0.5), top_p 0.9, max_tokens 1500, image detail high, 5 tries on a bad
# format. CapMAS (eval_*.py through util/azureopenai_api_call_vision.py): gpt-4o-2024-05-13,
# temperature 1e-7 (CLAIR: 0.0), max_tokens 4096 (make_call's default: eval_clair.py's 128 never
# reaches it).
CAPMAS_TEMPERATURE = 0.0000001
CAPMAS_MAX_TOKENS = 4096
for _m in (
    Method("caparena", "caparena", kind="pairwise", system_template="caparena_system", temperature=0.1, top_p=0.9, max_new_tokens=1500, image_detail="high", format_tries=5, parser="caparena", normalize_caption=False, source="caparena-code", paper="vlm_as_a_judge.py (mllm_judge_pairs, call_llm)", description="CapArena's pairwise VLM-as-a-judge: its system prompt with the human reference when the pair has one (else the one without), 'Reason: ... Judgment: ...', asked again up to 5 times on a bad format.", paper_judge=CAPARENA_JUDGE),
    Method("capmas-factuality", "capmas_verify", scale=(0.0, 1.0), needs_references=True, pipeline="capmas-factuality", parser="capmas", step_templates=("capmas_decompose_system", "capmas_verify_system"), temperature=CAPMAS_TEMPERATURE, context_temperature=CAPMAS_TEMPERATURE, max_new_tokens=CAPMAS_MAX_TOKENS, context_max_new_tokens=CAPMAS_MAX_TOKENS, normalize_caption=False, source="capmas-code", paper="eval_factuality.py", description="CapMAS factuality: the caption decomposed into atomic propositions (text only), each verified True/False against the image and the reference description; score = share of true propositions; the run's precision over all propositions.", paper_judge=CAPMAS_JUDGE),
    Method("capmas-coverage", "capmas_coverage", scale=(0.0, 1.0), pipeline="capmas-coverage", parser="capmas", step_templates=("capmas_coverage_system",), temperature=CAPMAS_TEMPERATURE, max_new_tokens=CAPMAS_MAX_TOKENS, normalize_caption=False, source="capmas-code", paper="eval_coverage.py", options={"vqa_dir": ""}, description="CapMAS coverage: a text-only judge answers the image's multiple-choice questions (--vqa-dir, CapMAS's per-image JSON) from the caption alone; score = share of correct answers; the run's recall over all questions.", paper_judge=CAPMAS_JUDGE),
    Method("clair", "clair", scale=(0.0, 1.0), needs_references=True, pipeline="clair", parser="clair", temperature=0.0, max_new_tokens=CAPMAS_MAX_TOKENS, format_tries=3, normalize_caption=False, source="clair", paper="eval_clair.py (CapMAS), CLAIR Sec. 3", description="CLAIR: a text-only LLM rates 0-100 how likely the caption and the references describe the same image (JSON score and reason, else the first number); score / 100; 3 tries.", paper_judge=CAPMAS_JUDGE),
):
    register_method(_m)

# CAPability (ali-vilab/CAPability cebb82a, evaluation/eval.py): text-only, one dimension's
# prompt.py request per annotation; call_gpt sends model and messages only (the API's defaults:
# temperature 1; gpt-4-turbo's 4096-token completion cap), eval.py's default judge gpt-4-turbo.
CAPABILITY_TEMPERATURE = 1.0
CAPABILITY_MAX_TOKENS = 4096
_CAPABILITY_STEPS = tuple(f"capability_{t}{s}" for t in ("object_category", "object_number", "object_color", "spatial_relation", "scene", "camera_angle", "OCR", "style", "character_identification", "dynamic_object_number", "action", "camera_movement", "event") for s in ("_system", ""))
_CAPABILITY: dict[str, Any] = dict(scale=(-1.0, 1.0), pipeline="capability", parser="capability", step_templates=_CAPABILITY_STEPS[1:], temperature=CAPABILITY_TEMPERATURE, max_new_tokens=CAPABILITY_MAX_TOKENS, normalize_caption=False, needs_image=False, options={"annotations": ""}, paper_judge=CAPABILITY_JUDGE)
for _m in (
    Method("capability", "capability_object_category_system", source="capability", paper="evaluation/eval.py, evaluation/prompt.py", description="CAPability: a text-only judge compares the caption with each annotation of its file_id (annotations=DIR, the benchmark's annotations/*.jsonl): 1 correct, 0 not mentioned, -1 wrong; the run's precision, recall, hit rate and F1 per dimension and their mean over the 13 dimensions. eval.py's answer-format bugs fixed.", **_CAPABILITY),
    Method("capability-code", "capability_object_category_system", source="capability", paper="evaluation/eval.py, evaluation/prompt.py", description="CAPability as eval.py runs it, its answer-format bugs kept (a camera category's explanation, dict-valued object numbers refused and asked again).", **_CAPABILITY),
):
    register_method(_m)
# CaptionQA (qa.py, bronyayang/CaptionQA f729489): Qwen/Qwen2.5-72B-Instruct on vLLM, greedy
# (temperature 0), max_tokens 4 (--max-tokens default), the shuffles' seed 0 (--seed default).
register_method(Method("captionqa", "captionqa", scale=(0.0, 1.0), pipeline="captionqa", parser="captionqa", step_templates=("captionqa_system",), temperature=0.0, max_new_tokens=4, normalize_caption=False, source="captionqa-code", paper="qa.py", options={"questions": "", "captioned": ""}, description="CaptionQA: a text-only judge answers the image's multiple-choice questions (questions=FILE_OR_DIR, the benchmark's question set; options shuffled with random.Random(0) over the set, \"Cannot answer from the caption\" added) from the caption alone; score = mean of 1 (right), 1/n + 0.05 (cannot answer), 0; the run's qa.py summary per category and overall.", paper_judge=CAPTIONQA_JUDGE))
# DCScore (DeCapBench, MAGAer13/DeCapBench 9f3fb10 eval/evaluation_decapbench.py; docs/methods.md
# "DCScore"): gpt-4o-2024-05-13, max_tokens 2000; extraction at temperature 1 (n=1), matching at
# temperature 1 (n=3), verification with the image (detail high) at 0.3 (n=3). ``dcscore`` fixes the
# relevant-subset recall's weights and reads oracle ids as text; ``dcscore-code`` runs the code's.
DCSCORE_MAX_TOKENS = 2000
for _m in (
    Method("dcscore", "dcscore_verify", scale=(0.0, 1.0), pipeline="dcscore", parser="dcscore", step_templates=("dcscore_system", "dcscore_extract", "dcscore_match"), temperature=0.3, context_temperature=1.0, max_new_tokens=DCSCORE_MAX_TOKENS, context_max_new_tokens=DCSCORE_MAX_TOKENS, image_detail="high", normalize_caption=False, source="dcscore-code", paper="eval/evaluation_decapbench.py, eval/compute_results.py", options={"oracle_facts": ""}, description="DCScore (DeCapBench): atomic facts extracted from the caption (text only), matched 3 times to the image's human facts (oracle_facts=FILE, text only), verified 3 times against the image and the reference; score = (F1 + relevant-subset F1) / 2 over the 9 trials, the relevant recall with the relevant facts' own weights.", paper_judge=DCSCORE_JUDGE),
    Method("dcscore-code", "dcscore_verify", scale=(0.0, 1.0), pipeline="dcscore-code", parser="dcscore", step_templates=("dcscore_system", "dcscore_extract", "dcscore_match"), temperature=0.3, context_temperature=1.0, max_new_tokens=DCSCORE_MAX_TOKENS, context_max_new_tokens=DCSCORE_MAX_TOKENS, image_detail="high", normalize_caption=False, source="dcscore-code", paper="eval/evaluation_decapbench.py, eval/compute_results.py", options={"oracle_facts": ""}, description="DCScore as the released code computes it: as dcscore, but the relevant-subset recall weighs each match by the matches of all facts (the code's predict_weights) and oracle ids 3 and '3' count apart.", paper_judge=DCSCORE_JUDGE),
):
    register_method(_m)
