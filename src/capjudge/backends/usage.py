"""Token usage, cost and budgets for API judges.

Every API call reports its token counts (:class:`Usage`); a
:class:`UsageTracker` adds them up for a run and prices them from a :class:`PriceTable` (USD per
million tokens, overridable from a dict or a JSON file). With ``max_cost`` set, the tracker refuses
to send a request whose worst-case cost could take the run over budget: that request, and every
later one, fails with :class:`BudgetExceeded` (an error record), and results already obtained are
kept. Cached answers cost nothing and are not counted.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Union

from capjudge.core.errors import BackendError
from capjudge.core.redact import get_logger

log = get_logger(__name__)


@dataclass
class Usage:
    """Token counts of one call (also importable from :mod:`capjudge.backends.base`)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    """Hidden reasoning of a reasoning model (``completion_tokens_details.reasoning_tokens``):
    already part of ``completion_tokens`` (billed as output), never added to it again."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, int]:
        """JSON form (cache entries, records): ``reasoning_tokens`` only when there are some, so
        that the answers of other models are stored exactly as before."""
        d = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
        if self.reasoning_tokens:
            d["reasoning_tokens"] = self.reasoning_tokens
        return d

_warned_lock = threading.Lock()

MAX_TOKEN_COUNT = 100_000_000
"""The most tokens one call is believed to count (ten times the largest context window known): a
larger report (``1e30``, which would cost 4e24 USD and make a budget meaningless) is no count."""


def token_count(value: Any, name: str, warned: set[str] | None = None) -> int:
    """A token count a server reported, or 0 when it is none: negative, not a whole number, not a
    number at all, or absurd (over :data:`MAX_TOKEN_COUNT`), said once per field as a warning
    (``warned`` holds the fields already warned about: one set per run; none given, a fresh one
    each call). A count is never taken below 0, so no cost is ever negative."""
    if value is None:
        return 0
    whole = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    if whole and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)
    why = f"more than one call can count (over {MAX_TOKEN_COUNT:,})" if whole and value > MAX_TOKEN_COUNT else "not a token count"
    seen = warned if warned is not None else set()
    with _warned_lock:
        first = name not in seen
        seen.add(name)
    if first:
        try:
            shown = repr(value)
        except ValueError:  # an int past Python's digit limit for text
            shown = "<a number of thousands of digits>"
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        log.warning("the server reported usage %s=%s, which is %s: ignored (counted as 0, so costs may be under-counted; said once)", name, shown, why)
    return 0


def usage_from_report(report: Mapping[str, Any], *, warned: set[str] | None = None) -> Usage:
    """The :class:`Usage` of a server's ``usage`` object, each count checked by :func:`token_count`;
    reasoning tokens from ``completion_tokens_details.reasoning_tokens`` (OpenAI's reasoning models),
    which ``completion_tokens`` already includes."""
    details = report.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    return Usage(
        prompt_tokens=token_count(report.get("prompt_tokens"), "prompt_tokens", warned),
        completion_tokens=token_count(report.get("completion_tokens"), "completion_tokens", warned),
        reasoning_tokens=token_count(reasoning, "completion_tokens_details.reasoning_tokens", warned),
    )


class BudgetExceeded(BackendError):
    """A request was not sent because it could take the run past its ``max_cost`` budget."""

    resumable = True  # a re-run answers the paid requests from the cache and spends the rest


@dataclass(frozen=True)
class Price:
    """USD per one million tokens."""

    input: float
    output: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The cost of one call in USD (a negative count, from an old cache entry, counts as 0)."""
        return (max(0, prompt_tokens) * self.input + max(0, completion_tokens) * self.output) / 1e6


PRICES_AS_OF = "2025-08"
"""When :data:`DEFAULT_PRICES` was written down; prices change, override them for real budgets."""

# Standard (non-batch, non-cached-input) list prices in USD per 1M tokens, as published by OpenAI.
# Azure's prices for the same models are close but not identical; pass your own for exact budgets.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-2024-05-13": Price(5.00, 15.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4-turbo": Price(10.00, 30.00),
    "gpt-4-vision-preview": Price(10.00, 30.00),
    "gpt-4-1106-vision-preview": Price(10.00, 30.00),
    "gpt-4": Price(30.00, 60.00),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "o1": Price(15.00, 60.00),
    "o3": Price(2.00, 8.00),
    "o3-mini": Price(1.10, 4.40),
    "o4-mini": Price(1.10, 4.40),
    "gpt-5": Price(1.25, 10.00),
    "gpt-5-mini": Price(0.25, 2.00),
    "gpt-5-nano": Price(0.05, 0.40),
}

BATCH_DISCOUNT = 0.5
"""Batch prices as a share of the standard ones: OpenAI's Batch API and Azure OpenAI's Global Batch
deployments both bill 50% of the standard price of input and output tokens."""

PriceSource = Union["PriceTable", Mapping[str, Any], str, Path, None]


def _to_batch_price(value: Any, name: str) -> Price | None:
    """The explicit batch price of a price-file entry (``batch_input`` / ``batch_output``), if any."""
    if not isinstance(value, Mapping) or ("batch_input" not in value and "batch_output" not in value):
        return None
    try:
        return Price(float(value["batch_input"]), float(value["batch_output"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"batch price of {name!r} needs numeric 'batch_input' and 'batch_output' (USD per 1M tokens): {value!r}") from exc


def _to_price(value: Any, name: str) -> Price:
    if isinstance(value, Price):
        return value
    if isinstance(value, Mapping):
        try:
            return Price(float(value["input"]), float(value["output"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"price of {name!r} needs numeric 'input' and 'output' (USD per 1M tokens): {value!r}") from exc
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return Price(float(value[0]), float(value[1]))
    raise ValueError(f"price of {name!r} must be {{'input': x, 'output': y}} or [x, y], got {value!r}")


class PriceTable:
    """Model name -> :class:`Price`. Lookup is case-insensitive: the exact name first, then the longest
    table entry that the name starts with followed by ``-`` (``gpt-4o-2024-08-06`` -> ``gpt-4o``)."""

    def __init__(self, prices: Mapping[str, Any] | None = None, *, include_defaults: bool = True) -> None:
        self.prices: dict[str, Price] = dict(DEFAULT_PRICES) if include_defaults else {}
        # Explicit batch prices (``batch_input`` / ``batch_output`` in a price file); other models'
        # batch price is BATCH_DISCOUNT of their standard price.
        self.batch_prices: dict[str, Price] = {}
        for name, value in (prices or {}).items():
            self.prices[name.lower()] = _to_price(value, name)
            batch = _to_batch_price(value, name)
            if batch is not None:
                self.batch_prices[name.lower()] = batch

    @classmethod
    def load(cls, source: PriceSource = None) -> PriceTable:
        """A table from ``None`` (defaults), a mapping, a JSON file path or a table (returned as is).

        The JSON file maps model names to ``{"input": usd_per_1M, "output": usd_per_1M}``; its entries
        are added to (and override) the defaults.
        """
        if isinstance(source, PriceTable):
            return source
        if source is None:
            return cls()
        if isinstance(source, (str, Path)):
            path = Path(source)
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ValueError(f"price file {str(path)!r} could not be read: {exc}") from exc
            if not isinstance(data, dict):
                raise ValueError(f"price file {str(path)!r} must hold a JSON object of model -> price")
            return cls(data)
        return cls(source)

    def lookup(self, model: str | None) -> Price | None:
        """The price of ``model``, or ``None`` when the table does not know it."""
        if not model:
            return None
        name = model.lower()
        if name not in self.prices:
            name = name.rsplit("/", 1)[-1]  # "openai/gpt-4o" as some gateways name it
        if name in self.prices:
            return self.prices[name]
        best = None
        for key in self.prices:
            if name.startswith(key + "-") and (best is None or len(key) > len(best)):
                best = key
        return self.prices[best] if best is not None else None

    def batch_lookup(self, model: str | None) -> Price | None:
        """The batch price of ``model``: its explicit batch price from a price file, else
        :data:`BATCH_DISCOUNT` of its standard price (``None`` when the table does not know it)."""
        standard = self.lookup(model)
        if standard is None or model is None:
            return None
        for key, value in self.prices.items():
            if value is standard and key in self.batch_prices:
                return self.batch_prices[key]
        return Price(standard.input * BATCH_DISCOUNT, standard.output * BATCH_DISCOUNT)

    def cost(self, model: str | None, usage: Usage | None, *, batch: bool = False) -> float | None:
        """The cost of one call (at batch prices with ``batch=True``), or ``None`` when the model
        has no price."""
        price = self.batch_lookup(model) if batch else self.lookup(model)
        if price is None or usage is None:
            return None
        return price.cost(usage.prompt_tokens, usage.completion_tokens)


@dataclass
class _ModelTotals:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    batch_calls: int = 0
    reasoning_tokens: int = 0  # part of completion_tokens (summaries show it only when there are some)


@dataclass
class UsageTracker:
    """Run-level token and cost accounting with an optional budget (thread-safe).

    Before a call, :meth:`reserve` books its worst-case cost; after it, :meth:`settle` replaces the
    booking by the real cost (or :meth:`release` drops it when the call failed). A reservation that
    would take ``spent + reserved`` above ``max_cost`` raises :class:`BudgetExceeded`, and from then
    on every reservation does, so a run stops cleanly instead of trickling on.
    """

    prices: PriceTable = field(default_factory=PriceTable)
    max_cost: float | None = None
    spent: float = 0.0
    reserved: float = 0.0
    stopped: bool = False
    by_model: dict[str, _ModelTotals] = field(default_factory=dict)
    refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def reserve(self, amount: float, *, what: str = "request") -> float:
        """Book ``amount`` USD for a call about to be sent; raises :class:`BudgetExceeded`."""
        with self._lock:
            if self.max_cost is not None and (self.stopped or self.spent + self.reserved + amount > self.max_cost):
                self.stopped = True
                self.refused += 1
                raise BudgetExceeded(
                    f"{what} not sent: budget max_cost=${self.max_cost:.4f} reached "
                    f"(spent ${self.spent:.4f}, in flight ${self.reserved:.4f}, this call up to ${amount:.4f})"
                )
            self.reserved += amount
            return amount

    def release(self, reserved: float) -> None:
        """Drop a booking whose call failed without a usage report."""
        with self._lock:
            self.reserved = max(0.0, self.reserved - reserved)

    def settle(self, reserved: float, model: str, usage: Usage | None, cost: float | None, *, batch: bool = False) -> None:
        """Replace a booking by the call's real usage and cost (``None``: unknown price);
        ``batch``: the call was a line of a provider batch (priced at batch rates)."""
        with self._lock:
            self.reserved = max(0.0, self.reserved - reserved)
            totals = self.by_model.setdefault(model or "?", _ModelTotals())
            totals.calls += 1
            totals.batch_calls += int(batch)
            if usage is not None:
                totals.prompt_tokens += usage.prompt_tokens
                totals.completion_tokens += usage.completion_tokens
                totals.reasoning_tokens += usage.reasoning_tokens
            if cost is None:
                totals.unpriced_calls += 1
            else:
                totals.cost_usd += cost
                self.spent += cost

    def record(self, model: str, usage: Usage | None) -> float | None:
        """Count one call made outside :meth:`reserve` (priced from the table); returns its cost."""
        cost = self.prices.cost(model, usage)
        self.settle(0.0, model, usage, cost)
        return cost

    @property
    def calls(self) -> int:
        """Calls that reached the server and answered."""
        with self._lock:
            return sum(t.calls for t in self.by_model.values())

    def summary(self) -> dict[str, Any]:
        """Totals for a run summary: calls, tokens, cost (USD), budget, refused requests, per model.
        ``reasoning_tokens`` (part of ``completion_tokens``) only when a reasoning model spent some."""
        with self._lock:
            models = {k: asdict(v) for k, v in self.by_model.items()}
            for m in models.values():
                if not m["reasoning_tokens"]:
                    del m["reasoning_tokens"]
            reasoning = sum(t.reasoning_tokens for t in self.by_model.values())
            out: dict[str, Any] = {
                "calls": sum(t.calls for t in self.by_model.values()),
                "prompt_tokens": sum(t.prompt_tokens for t in self.by_model.values()),
                "completion_tokens": sum(t.completion_tokens for t in self.by_model.values()),
                "cost_usd": round(self.spent, 6),
                "unpriced_calls": sum(t.unpriced_calls for t in self.by_model.values()),
                "batch_calls": sum(t.batch_calls for t in self.by_model.values()),
                "max_cost": self.max_cost,
                "budget_refused": self.refused,
                "prices_as_of": PRICES_AS_OF,
                "by_model": models,
            }
            if reasoning:
                out["reasoning_tokens"] = reasoning
            return out


def image_tokens(width: int | None, height: int | None, detail: str | None, *, base: int = 85, tile: int = 170) -> int:
    """OpenAI's token count for one image: ``base`` for ``detail="low"``; else the image is fitted in
    2048x2048, its short side scaled to 768, and each 512-pixel tile costs ``tile`` more.

    With an unknown size the worst case for ``high``/``auto`` (8 tiles) is returned.
    """
    if detail == "low":
        return base
    if not width or not height:
        return base + 8 * tile
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        s = 2048 / max(w, h)
        w, h = w * s, h * s
    if min(w, h) > 768:
        s = 768 / min(w, h)
        w, h = w * s, h * s
    return base + tile * math.ceil(w / 512) * math.ceil(h / 512)


def estimate_text_tokens(text: str) -> int:
    """A deliberately generous token estimate for budgeting (about 3 characters per token)."""
    return len(text) // 3 + 4
