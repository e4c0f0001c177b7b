"""Where two backends' prompts part: the first differing token of the same request.

Image placeholders are compared as one item per image (a run of the image token stands for one
image's features, whatever its length), so a backend that expands an image to 576 tokens and one
that shows it as one placeholder still line up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from capjudge.backends.base import PromptTokens

BOS_TOKENS = ("<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>")


@dataclass(frozen=True)
class TokenDiff:
    """The first position (after collapsing image runs) where prompt ``a`` and prompt ``b`` differ.

    ``a_token`` / ``b_token`` are ``None`` where that prompt has already ended; ``a_context`` /
    ``b_context`` the few tokens around the position; ``hint`` a plain-words reading of the
    difference where it is a known one (a missing BOS).
    """

    index: int
    a_token: str | None
    b_token: str | None
    a_length: int
    b_length: int
    a_context: list[str]
    b_context: list[str]
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def _items(p: PromptTokens, image_id: int | None) -> list[tuple[int | str, str]]:
    """(id or "<image>", text) per token, a run of image tokens collapsed into one item."""
    out: list[tuple[int | str, str]] = []
    for i, t in zip(p.ids, p.tokens):
        if image_id is not None and i == image_id:
            if out and out[-1][0] == "<image>":
                continue
            out.append(("<image>", "<image>"))
        else:
            out.append((i, t))
    return out


def first_difference(a: PromptTokens, b: PromptTokens, *, context: int = 3) -> TokenDiff | None:
    """The first differing token of two prompts of the same model, or ``None`` if they are equal.

    Tokens are compared by id (both backends serve the same tokenizer). The image token id comes
    from whichever side knows it."""
    image_id = a.image_token_id if a.image_token_id is not None else b.image_token_id
    ia, ib = _items(a, image_id), _items(b, image_id)
    n = min(len(ia), len(ib))
    k = next((j for j in range(n) if ia[j][0] != ib[j][0]), n)
    if k == len(ia) == len(ib):
        return None
    ta = ia[k][1] if k < len(ia) else None
    tb = ib[k][1] if k < len(ib) else None
    lo = max(0, k - context)
    return TokenDiff(
        index=k,
        a_token=ta,
        b_token=tb,
        a_length=len(a.ids),
        b_length=len(b.ids),
        a_context=[t for _, t in ia[lo : k + context + 1]],
        b_context=[t for _, t in ib[lo : k + context + 1]],
        hint=_hint(k, ia, ib),
    )


def _hint(k: int, ia: list[tuple[int | str, str]], ib: list[tuple[int | str, str]]) -> str | None:
    """Name a missing BOS: one prompt starts with a BOS token and the other is that prompt without it."""
    if k != 0:
        return None
    for first, rest, name in ((ia, ib, "b"), (ib, ia, "a")):
        if first and first[0][1] in BOS_TOKENS and [x[0] for x in first[1:]] == [x[0] for x in rest]:
            return (
                f"prompt {name} lacks the BOS token {first[0][1]!r}: the server rendered a chat template without it and "
                "added no special tokens (vLLM's default for chat requests); send add_special_tokens=true "
                "or serve a chat template that starts with the BOS token"
            )
    return None
