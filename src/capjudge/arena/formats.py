"""How the arena's numbers are shown, in the terminal table and on the HTML page alike."""

from __future__ import annotations

import math
from typing import Any


def number(v: Any, digits: int = 0) -> str:
    """``v`` with ``digits`` decimals; ``-`` for none or NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def percent(v: Any) -> str:
    """A share as a percentage with one decimal; ``-`` for none or NaN."""
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"
