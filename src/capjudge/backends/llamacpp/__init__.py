"""llama.cpp backend (``llamacpp:<gguf>?mmproj=<gguf>``) through llama-cpp-python and libmtmd
(:mod:`.backend`; model families and prompt formats: :mod:`.families`, :mod:`.chat_template`).
Importing this package does not import llama_cpp; it loads with the first model."""

from capjudge.backends.llamacpp.backend import (
    LlamaCppBackend,
    ProjectorMismatchError,
    UnsupportedModelError,
    check_files,
    check_options,
    from_spec,
    gguf_widths,
    lazy_from_spec,
    model_identity,
    render_llava_v1,
)

__all__ = [
    "LlamaCppBackend",
    "ProjectorMismatchError",
    "UnsupportedModelError",
    "check_files",
    "check_options",
    "from_spec",
    "gguf_widths",
    "lazy_from_spec",
    "model_identity",
    "render_llava_v1",
]
