"""Numbers as the report's summaries show them: fixed decimals, ``-`` for none, a CI in brackets."""

from __future__ import annotations

import math
from typing import Any


def fixed(v: Any, digits: int = 1) -> str:
    """``v`` with ``digits`` decimals when a float, as text otherwise; ``-`` for None or NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def fixed_ci(value: Any, ci: tuple[float, float] | None, digits: int = 1) -> str:
    """:func:`fixed` of ``value``, then ``[lo, hi]`` when the interval is known."""
    text = fixed(value, digits)
    if ci and not any(isinstance(x, float) and math.isnan(x) for x in ci):
        text += f" [{fixed(ci[0], digits)}, {fixed(ci[1], digits)}]"
    return text
