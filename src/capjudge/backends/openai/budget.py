"""The cost side of an API backend's requests: a worst-case estimate booked before a request is
sent (refused by the :class:`~capjudge.backends.usage.UsageTracker` when it could take the run past
``max_cost``), and the reported usage settled once the answer is in."""

from __future__ import annotations

import math

from capjudge.backends.base import Completion, Request
from capjudge.backends.openai.caps import ModelCaps
from capjudge.backends.usage import PriceTable, UsageTracker, estimate_text_tokens, image_tokens


class RequestBudget:
    """Books and settles the cost of one backend's requests on its usage tracker.

    The prompt estimate is scaled by the largest ratio of reported to estimated prompt tokens seen
    so far (self-calibrating), so a model that reads more than the estimate is booked for more.
    """

    def __init__(self, prices: PriceTable, usage: UsageTracker, model_name: str, caps: ModelCaps, detail: str | None, *, extra_completion_tokens: int = 0) -> None:
        self.prices = prices
        self.usage = usage
        self.model_name = model_name
        self.caps = caps
        self.detail = detail
        self.prompt_scale = 1.0
        self.extra_completion_tokens = extra_completion_tokens  # a reasoning model's reasoning budget

    def estimate_prompt_tokens(self, request: Request) -> int:
        """A generous prompt-token estimate: text at ~3 characters a token, images by OpenAI's rule
        (worst case when the size is unknown)."""
        prompt = 3
        for m in request.messages:
            prompt += estimate_text_tokens(m.content) + 4
            for img in m.images:
                pil = getattr(img, "_pil", None)
                w, h = pil.size if pil is not None else (None, None)
                prompt += image_tokens(w, h, self.detail, base=self.caps.image_base_tokens, tile=self.caps.image_tile_tokens)
        return prompt

    def estimate_cost(self, prompt_estimate: int, request: Request) -> float:
        """Worst-case cost of a request, for the budget."""
        price = self.prices.lookup(self.model_name)
        if price is None:
            return 0.0
        prompt = math.ceil(prompt_estimate * self.prompt_scale)
        completion = (request.config.max_new_tokens + self.extra_completion_tokens) * max(1, request.config.n)
        return price.cost(prompt, completion)

    def book(self, request: Request, label: str) -> tuple[int, float]:
        """The request's prompt estimate and the cost booked for it (0 without a budget); raises
        :class:`~capjudge.backends.usage.BudgetExceeded` when the budget cannot take it."""
        estimate = self.estimate_prompt_tokens(request)
        booked = self.usage.reserve(self.estimate_cost(estimate, request), what=label) if self.usage.max_cost is not None else 0.0
        return estimate, booked

    def release(self, booked: float) -> None:
        """Give back what a request that failed had booked."""
        self.usage.release(booked)

    def settle(self, booked: float, estimate: int, completion: Completion) -> None:
        """Count the answer's reported usage and cost (``meta["cost_usd"]``) in place of the booking."""
        cost = self.prices.cost(self.model_name, completion.usage)
        if cost is None and completion.model != self.model_name:
            cost = self.prices.cost(completion.model, completion.usage)
        self.usage.settle(booked, completion.model, completion.usage, cost)
        if completion.usage is not None and completion.usage.prompt_tokens > estimate:
            self.prompt_scale = max(self.prompt_scale, completion.usage.prompt_tokens / estimate)
        completion.meta["cost_usd"] = cost
