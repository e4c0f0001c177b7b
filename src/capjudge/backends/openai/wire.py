"""The chat-completions wire format: the JSON body of a :class:`~capjudge.backends.base.Request`,
and the :class:`~capjudge.backends.base.Completion` of an answer's JSON object.

Online requests (:mod:`.backend`) and batch mode (:mod:`.batch_store` writes the bodies,
:mod:`.batch_run` reads the answers) go through the same :class:`ChatWire`, so that a batch answer
is the answer of the same request. What a server taught the run (log-probabilities refused, a lower
``top_logprobs`` cap, penalty fields refused) lives here too, as public state both modes update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from capjudge.backends.base import BackendError, Completion, Request, TokenStep
from capjudge.backends.logprobs import InvalidLogprobError, as_logprob, steps_problem
from capjudge.backends.openai.caps import AZURE_MAX_TOP_LOGPROBS, ModelCaps
from capjudge.backends.openai.retry import MalformedResponseError
from capjudge.backends.options import OptionError
from capjudge.backends.thinking import SWITCH, Thinking
from capjudge.backends.thinking import parse as parse_thinking
from capjudge.backends.thinking import plan as thinking_plan
from capjudge.backends.usage import usage_from_report

Refusal = Literal["penalties", "top_logprobs", "logprobs"]


class ReasoningBudgetExceeded(BackendError):
    """A reasoning model's hidden reasoning spent the whole ``max_completion_tokens`` and the answer
    came back empty (``finish_reason == "length"``). Not retried, not resumable: the same request
    spends the same budget; a larger ``reasoning_budget`` or a lower ``reasoning_effort`` cures it."""

    resumable = False


def thinking_request(kind: str, url_target: bool, thinking: str | None, budget: Any, extra_body: dict[str, Any]) -> tuple[Thinking, dict[str, Any], int]:
    """An OpenAI-compatible server's thinking settings (:mod:`capjudge.backends.thinking`): the
    settings, the ``extra_body`` with ``chat_template_kwargs: {"enable_thinking": ...}`` added
    (``on``/``off``; vLLM and SGLang pass it to the chat template), and the tokens added to
    ``max_tokens``. ``openai:``/``azure:`` take ``reasoning_effort``/``reasoning_budget`` instead
    (an :class:`OptionError`), as does a ``chat_template_kwargs`` of ``extra_body`` that says
    otherwise."""
    settings = parse_thinking({"thinking": thinking, "thinking_budget": budget})
    if settings.default:
        return settings, extra_body, 0
    if not url_target:
        raise OptionError(
            f"thinking / thinking_budget are for open thinking models (hf:, llamacpp:, openai-compatible:); {kind} reasoning models "
            "take --backend-opt reasoning_effort=low|medium|high and reasoning_budget=N"
        )
    plan = thinking_plan(settings, None, "", local=False)
    body = dict(extra_body)
    if plan.template_kwargs:
        given = body.get("chat_template_kwargs") or {}
        if not isinstance(given, dict) or given.get(SWITCH, plan.template_kwargs[SWITCH]) != plan.template_kwargs[SWITCH]:
            raise OptionError(f"thinking={settings.mode} and extra_body's chat_template_kwargs {given!r} disagree: give one of them")
        body["chat_template_kwargs"] = {**given, **plan.template_kwargs}
    return settings, body, plan.extra_tokens


def separate_reasoning(message: dict[str, Any]) -> str | None:
    """The reasoning an OpenAI-protocol server sent apart from the content: ``reasoning`` (vLLM
    0.32, which renames ``reasoning_content`` to it) or ``reasoning_content`` (llama.cpp server
    ``--reasoning-format deepseek``, SGLang, older vLLM); ``None`` when neither is a non-empty text."""
    for key in ("reasoning", "reasoning_content"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def merge_extra(params: dict[str, Any]) -> dict[str, Any]:
    """The body sent for ``params``: ``extra_body`` merged as the SDK merges it (shallow, over the
    named fields)."""
    body = dict(params)
    extra = body.pop("extra_body", None)
    if extra:
        body.update(extra)
    return body


def refused_field(status: int | None, message: str, *, sent_penalties: bool, sent_logprobs: bool, top_logprobs: int) -> Refusal | None:
    """Which field a server's 400/422 refusal names, among those capjudge may drop and ask again
    without: ``"penalties"`` (vLLM's neutral penalty fields, when this request sent them),
    ``"top_logprobs"`` (more than Azure's cap asked), ``"logprobs"`` (none at all); ``None``: the
    refusal is of something else (the request fails)."""
    text = message.lower()
    if status not in (400, 422):
        return None
    if sent_penalties and "repetition_penalty" in text:
        return "penalties"
    if not (sent_logprobs and "logprob" in text):
        return None
    if "top_logprobs" in text and top_logprobs > AZURE_MAX_TOP_LOGPROBS:
        return "top_logprobs"
    return "logprobs"


@dataclass
class ChatWire:
    """How one backend's requests become chat-completions bodies and its answers completions.

    ``send_penalties``, ``top_cap`` and ``logprobs_refused`` change as servers answer (online) or
    as batch rounds learn (batch mode): every later body follows them.
    """

    model: str
    caps: ModelCaps
    model_name: str = ""  # the model behind an Azure deployment (messages name it); "" : ``model``
    detail: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    add_special_tokens: bool | None = None
    send_penalties: bool = False
    top_cap: int = 0
    logprobs_refused: str | None = None
    reasoning_effort: str | None = None  # reasoning models: sent as ``reasoning_effort`` (None: not sent)
    reasoning_budget: int = 0  # reasoning models: tokens given on top of the answer budget
    thinking_budget: int = 0  # open thinking models (thinking=on): tokens added to max_tokens
    usage_warned: set[str] = field(default_factory=set)  # usage fields this server reported badly (warned once)

    # -- requests --------------------------------------------------------------------------------
    def messages(self, request: Request) -> list[dict[str, Any]]:
        """The request's messages in the protocol's form (images as data URLs, shown first)."""
        out: list[dict[str, Any]] = []
        for m in request.messages:
            if not m.images:
                # A text-only turn: a string, or one text part where the method's code sent that.
                out.append({"role": m.role, "content": [{"type": "text", "text": m.content}] if m.parts else m.content})
                continue
            if not self.caps.images:
                raise BackendError(f"{self.model_name or self.model} reads no images ({self.caps.note})")
            parts: list[dict[str, Any]] = []
            detail = m.detail or self.detail
            for img in m.images:
                image_url: dict[str, Any] = {"url": img.data_url()}
                if detail:
                    image_url["detail"] = detail
                parts.append({"type": "image_url", "image_url": image_url})
            if m.content:
                text = {"type": "text", "text": m.content}
                if m.text_first:
                    parts.insert(0, text)
                else:
                    parts.append(text)
            out.append({"role": m.role, "content": parts})
        return out

    def params(self, request: Request, *, with_logprobs: bool) -> dict[str, Any]:
        """The arguments ``chat.completions.create`` would take for ``request``."""
        cfg = request.config
        params: dict[str, Any] = {"model": self.model, "messages": self.messages(request)}
        if self.caps.reasoning:
            # Hidden reasoning spends max_completion_tokens before the answer does; these models
            # refuse temperature / top_p other than the defaults (and log-probabilities).
            params["max_completion_tokens"] = cfg.max_new_tokens + self.reasoning_budget
            if self.reasoning_effort is not None:
                params["reasoning_effort"] = self.reasoning_effort
        else:
            params["max_tokens"] = cfg.max_new_tokens + self.thinking_budget
            params["temperature"] = cfg.temperature
            if cfg.top_p != 1.0:
                params["top_p"] = cfg.top_p
        if cfg.seed is not None:
            params["seed"] = cfg.seed
        if cfg.stop:
            params["stop"] = list(cfg.stop)
        if cfg.n != 1:
            params["n"] = cfg.n
        if with_logprobs:
            params["logprobs"] = True
            params["top_logprobs"] = min(cfg.top_logprobs, self.top_cap)
        extra = self.server_fields()
        if extra:
            params["extra_body"] = extra
        return params

    def server_fields(self) -> dict[str, Any]:
        """Fields outside the OpenAI protocol that this backend sends (``extra_body`` wins)."""
        extra: dict[str, Any] = {}
        if self.send_penalties:
            # vLLM takes unset sampling fields from the model's generation_config.json; a
            # repetition penalty there would change greedy answers without anyone asking for it.
            extra.update(repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
        if self.add_special_tokens is not None:
            extra["add_special_tokens"] = self.add_special_tokens
        extra.update(self.extra_body)
        return extra

    def sends_logprobs(self, request: Request) -> bool:
        """Whether ``request``'s body asks for log-probabilities (wanted, not refused, a cap above 0)."""
        return request.config.top_logprobs > 0 and self.logprobs_refused is None and self.top_cap > 0

    def body(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for ``request`` on its first attempt (``extra_body`` merged): what a
        batch line carries."""
        return merge_extra(self.params(request, with_logprobs=self.sends_logprobs(request)))

    def sent_penalties(self, fields: dict[str, Any]) -> bool:
        """Whether ``fields`` (a merged body, or the ``extra_body`` of unmerged arguments) carry the
        neutral penalty fields capjudge added, not the user's ``extra_body``."""
        return "repetition_penalty" in fields and "repetition_penalty" not in self.extra_body

    # -- answers ---------------------------------------------------------------------------------
    def read(self, response: dict[str, Any], *, asked_logprobs: bool) -> Completion:
        """The answer's JSON object as a :class:`Completion` (read as the SDK's models would).
        Its log-probabilities are checked here, once: one that is not one fails the answer."""
        choices = response["choices"]
        choice = choices[0]
        message = choice.get("message") or {}
        text = message.get("content") or ""
        steps: list[TokenStep] = []
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        for t in content or ():
            # Values are kept as sent (numbers made floats) and checked below: a log-probability
            # that is not one fails this answer, never reaches the cache or a score.
            top = tuple((str(a["token"]), as_logprob(a.get("logprob"))) for a in t.get("top_logprobs") or ())
            lp = t.get("logprob")
            steps.append(TokenStep(token=str(t["token"]), logprob=as_logprob(lp) if lp is not None else None, top=top))
        problem = steps_problem(steps, who="the server")
        if problem:
            raise InvalidLogprobError(f"{problem}; the answer is not scored")
        u = response.get("usage")
        usage = usage_from_report(u, warned=self.usage_warned) if isinstance(u, dict) else None
        meta: dict[str, Any] = {}
        if response.get("id"):
            meta["response_id"] = response["id"]
        if response.get("system_fingerprint"):
            meta["system_fingerprint"] = response["system_fingerprint"]
        if len(choices) > 1:
            meta["choices"] = [((c.get("message") or {}).get("content")) or "" for c in choices]
        reasoning = separate_reasoning(message)
        if reasoning is not None:  # the server split it out of the content (read by the judge)
            meta["reasoning"] = reasoning
        if asked_logprobs and not steps:
            meta["logprobs_missing"] = True  # asked, but the server sent none
        completion = Completion(
            text=text,
            steps=steps,
            logprobs=bool(steps),
            model=response.get("model") or self.model,
            usage=usage,
            finish_reason=choice.get("finish_reason"),
            meta=meta,
        )
        completion.steps_checked = True  # the cache and the judge need not check them again
        return completion

    def budget_spent(self, completion: Completion, limit: Any) -> ReasoningBudgetExceeded | None:
        """The error of a reasoning model's answer that came back empty because its reasoning spent
        the whole budget (``finish_reason == "length"``, no content), sent ``max_completion_tokens``
        = ``limit``; ``None`` for any other answer."""
        if not self.caps.reasoning or completion.finish_reason != "length" or completion.text.strip():
            return None
        usage = completion.usage
        spent = f"{usage.completion_tokens} tokens, {usage.reasoning_tokens} of them reasoning" if usage is not None else "no usage reported"
        effort = f"reasoning_effort={self.reasoning_effort}" if self.reasoning_effort else "the provider's default reasoning_effort"
        return ReasoningBudgetExceeded(
            f"the answer came back empty: the model's reasoning spent the whole token budget (max_completion_tokens={limit}: {spent}) "
            f"before it could answer, with {effort}; give it more with --backend-opt reasoning_budget=N (now {self.reasoning_budget}, "
            f"e.g. reasoning_budget={max(2 * self.reasoning_budget, 1024)}) or ask for less reasoning with a lower --backend-opt reasoning_effort"
        )

    def mark_logprobs(self, completion: Completion, *, sent: bool, top_logprobs: Any, wanted: bool) -> Completion:
        """Record on ``completion`` the ``top_logprobs`` sent, or that log-probabilities were wanted
        and not asked (refused by the server, or a cap of 0)."""
        if sent:
            completion.meta["top_logprobs"] = top_logprobs
        if wanted and not sent:
            completion.meta["logprobs_refused"] = True
            completion.meta["logprobs_refused_reason"] = self.logprobs_refused or "top_logprobs cap is 0"
        return completion

    def completion_from_body(self, response: dict[str, Any], request_body: dict[str, Any], *, wanted_logprobs: bool) -> Completion:
        """The :class:`Completion` of a chat-completions ``response`` to ``request_body`` (a batch
        output line's body), with the same metadata an online answer gets (cost aside)."""
        if not isinstance(response, dict) or not isinstance(response.get("choices"), list) or not response["choices"]:
            raise MalformedResponseError(f"answer holds no choices: {str(response)[:200]}")
        with_lp = bool(request_body.get("logprobs"))
        completion = self.read(response, asked_logprobs=with_lp)
        return self.mark_logprobs(completion, sent=with_lp, top_logprobs=request_body.get("top_logprobs"), wanted=wanted_logprobs)
