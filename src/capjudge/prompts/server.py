"""Chat templates to serve judges with (vLLM ``--chat-template FILE``, or a request's
``chat_template`` field on a server started with ``--trust-request-chat-template``).

``llava_v1``: LLaVA-1.5's conversation exactly as capjudge's local backends render it, BOS
included (the llava-hf chat template has none, and vLLM adds no special tokens to a rendered chat
template, so a LLaVA-1.5 served with its own template reads a prompt one token shorter than the
same model in transformers).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SERVER_CHAT_TEMPLATES = ("llava_v1",)


def server_chat_template_path(name: str = "llava_v1") -> Path:
    """The path of a packaged server chat template (pass it to ``vllm serve --chat-template``)."""
    if name not in SERVER_CHAT_TEMPLATES:
        raise ValueError(f"unknown server chat template {name!r} (known: {', '.join(SERVER_CHAT_TEMPLATES)})")
    return Path(str(resources.files("capjudge.prompts").joinpath("server_templates").joinpath(f"{name}.jinja")))


def server_chat_template(name: str = "llava_v1") -> str:
    """The text of a packaged server chat template."""
    return server_chat_template_path(name).read_text(encoding="utf-8")


if __name__ == "__main__":  # python -m capjudge.prompts.server [NAME]: print the template's path
    import sys

    print(server_chat_template_path(sys.argv[1] if len(sys.argv) > 1 else "llava_v1"))
