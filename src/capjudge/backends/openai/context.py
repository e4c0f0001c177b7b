"""A server's refusal of a prompt too long for its context, read into a
:class:`~capjudge.backends.base.ContextLengthError` with the counts the server gave.

What servers answer (HTTP 400, never retried: the same prompt would be refused again):

* OpenAI: error code ``context_length_exceeded``, "This model's maximum context length is N
  tokens. However, your messages resulted in M tokens. ...";
* vLLM 0.32 (``vllm/renderers/params.py``): "This model's maximum context length is N tokens.
  However, your prompt contains [at least ]M input tokens, which exceeds this limit even without
  any output tokens. ...", or "... your prompt contains C characters (more than ...)";
  ``vllm/v1/engine/input_processor.py``: "The decoder prompt (length M) is longer than the maximum
  model length of N. ..." (and "... plus the number of requested output tokens (at least 1) is
  longer than ..."); ``vllm/entrypoints/serve/utils/api_utils.py``: "Input length (M) exceeds
  model's maximum context length (N).". Older vLLM: "... However, you requested M tokens (P in the
  messages, A in the completion). ...". The limit is the server's ``--max-model-len``
  (``max_model_len`` in its ``GET /v1/models``).

vLLM does not refuse a prompt that fits but leaves less room than ``max_tokens``: it shortens the
answer budget to what is left (``get_max_tokens``), so such an answer may end with
``finish_reason="length"``.
"""

from __future__ import annotations

import re

from capjudge.backends.base import ContextLengthError
from capjudge.core.redact import scrub

_LIMIT = (
    re.compile(r"maximum context length is (\d+) tokens", re.I),
    re.compile(r"longer than the maximum model length of (\d+)", re.I),
    re.compile(r"maximum context length \((\d+)\)", re.I),
)
_PROMPT = (
    re.compile(r"your prompt contains (at least )?(\d+) input tokens", re.I),
    re.compile(r"your messages resulted in (at least )?(\d+) tokens", re.I),
    re.compile(r"prompt \(length (\d+)\)", re.I),
    re.compile(r"Input length \((\d+)\)", re.I),
)
_REQUESTED = re.compile(r"you requested (\d+) tokens \((\d+) in the messages, (\d+) in the completion\)", re.I)


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> re.Match[str] | None:
    for p in patterns:
        m = p.search(text)
        if m:
            return m
    return None


def context_error(status: int | None, code: object, message: str, *, reported: str) -> ContextLengthError | None:
    """The :class:`ContextLengthError` for a server's refusal (``reported``: the described error
    text, kept at the end of the new message), or ``None`` when the refusal is of something else."""
    limit_m = _first(_LIMIT, message)
    if code != "context_length_exceeded" and (status not in (400, 413, 422) or limit_m is None):
        return None
    counts: dict[str, int] = {}
    if limit_m:
        counts["limit"] = int(limit_m.group(1))
    prompt = ""
    req = _REQUESTED.search(message)
    if req:
        counts["prompt_tokens"], counts["max_new_tokens"] = int(req.group(2)), int(req.group(3))
        prompt = f"prompt of {req.group(2)} tokens + max_tokens={req.group(3)}"
    else:
        pm = _first(_PROMPT, message)
        if pm:
            at_least = pm.group(1) if pm.lastindex and pm.lastindex > 1 else None
            counts["prompt_tokens"] = int(pm.group(pm.lastindex or 1))
            prompt = f"prompt of {at_least or ''}{counts['prompt_tokens']} tokens"
    limit = f"the server's context of {counts['limit']} tokens" if "limit" in counts else "the server's context"
    what = f"{prompt} exceeds {limit}" if prompt else f"the prompt exceeds {limit}"
    return ContextLengthError(
        scrub(f"{what}: shorten the caption (or the other texts of the prompt), lower max_new_tokens "
              f"(--max-new-tokens) or serve the model with a longer context (vLLM: --max-model-len); "
              f"the request is not retried ({reported})"),
        counts=counts,
    )


__all__ = ["context_error"]
