"""The prompt text of LLaVA-1.5's ``llava_v1`` conversation, shared by the local LLaVA backends."""

from __future__ import annotations

from collections.abc import Sequence

from capjudge.backends.base import Message


def render_llava_v1(messages: Sequence[Message], image_marker: str = "<image>", eos: str = "</s>") -> str:
    """The prompt text of LLaVA's ``llava_v1`` conversation, with ``image_marker`` per image.

    ``SYSTEM USER: <image>\\n{prompt} ASSISTANT:``; assistant turns end with ``eos``, user turns
    with a space; images come first in their message, each followed by a newline. Without a system
    message the prompt starts at ``USER:`` (the llava-hf chat template). A final assistant message
    is continued, not closed. A literal marker inside a message's text is defused so that it cannot
    stand for an image.
    """
    system = " ".join(m.content.strip() for m in messages if m.role == "system" and m.content)
    out = system + " " if system else ""
    turns = [m for m in messages if m.role != "system"]
    safe_marker = image_marker.replace("<", "< ")
    for i, m in enumerate(turns):
        text = m.content.replace(image_marker, safe_marker)
        if m.role == "user":
            out += "USER: " + "".join(image_marker + "\n" for _ in m.images) + text + " "
        elif i == len(turns) - 1:
            out += "ASSISTANT: " + text
        else:
            out += "ASSISTANT: " + text + eos
    if not turns or turns[-1].role != "assistant":
        out += "ASSISTANT:"
    return out
