"""HF transformers backend (``hf:<model>``): the backend itself (:mod:`.backend`), the prefix-reuse
path for many captions of one image (:mod:`.prefix`) and its in-place KV cache (:mod:`.kv`).

Importing this package imports neither torch nor transformers; they load with the first model."""

from capjudge.backends.hf.backend import (
    HFBackend,
    check_4bit_packages,
    check_options,
    from_spec,
    lazy_from_spec,
    llava_4bit_settings,
    missing_package_message,
    model_identity,
)

__all__ = [
    "HFBackend",
    "check_4bit_packages",
    "check_options",
    "from_spec",
    "lazy_from_spec",
    "llava_4bit_settings",
    "missing_package_message",
    "model_identity",
]
