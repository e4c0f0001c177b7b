"""The prompt text of the chat formats without a chat template: system turns folded into the first
user turn, the plain format (PaliGemma), and image tokens in a message's text defused."""

from __future__ import annotations

from collections.abc import Sequence

from capjudge.backends.base import Message


def fold_system(messages: Sequence[Message]) -> list[Message]:
    """The conversation without system turns: their text goes before the first user turn's text
    (a blank line between), as Gemma 3's template itself does; for templates and models without a
    system role."""
    system = "\n\n".join(m.content.strip() for m in messages if m.role == "system" and m.content.strip())
    out = [m for m in messages if m.role != "system"]
    if not system:
        return out
    for i, m in enumerate(out):
        if m.role == "user":
            out[i] = Message("user", f"{system}\n\n{m.content}", images=m.images)
            break
    return out


def render_plain(messages: Sequence[Message], image_token: str) -> str:
    """The prompt of a model without a chat (PaliGemma): one image token per image, then the
    turns' texts, one per line (the processor adds the BOS after the images and the final newline)."""
    images = sum(len(m.images) for m in messages)
    text = "\n".join(defuse(m.content, image_token) for m in messages if m.role != "system")
    return image_token * images + text


def defuse(text: str, image_token: str | None) -> str:
    """``text`` with any literal image token broken up, so that a caption cannot stand for an image
    (the processor would expand it and fail, or misplace the real one)."""
    if not image_token or image_token not in text:
        return text
    return text.replace(image_token, image_token[:1] + " " + image_token[1:])
