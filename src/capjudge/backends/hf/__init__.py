"""HF transformers backend (``hf:<model>``): the backend itself (:mod:`.backend`), the prefix-reuse
path for many captions of one image (:mod:`.prefix`) and its in-place KV cache (:mod:`.kv`).

Importing this package imports neither torch nor transformers; they load with the first model."""

from capjudge.backends.hf.backend import (
    HFBackend,
    check_4bit_packages,
    llava_4bit_settings,
    missing_package_message,
)
from capjudge.backends.hf.identity import model_identity
from capjudge.backends.hf.spec import check_options, from_spec, lazy_from_spec

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
