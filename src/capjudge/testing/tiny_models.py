"""The tiny random-weight test models by name, built once into a cache folder.

``hf:tiny-llava`` (and the other names of :data:`TINY_MODELS`) is how the command line runs any
command on a model with no download and no network: the first use builds the model offline (a few
seconds) into ``$CAPJUDGE_HOME/tiny-random-weights/NAME-VERSION`` (default ``~/.cache/capjudge/tiny-random-weights``: the folder name, which records carry as their ``model``, says what they are), later uses
load it from there. VERSION hashes the builder's source, so a changed builder builds afresh.

These models' scores are **meaningless**: each folder holds the marker file of
:mod:`capjudge.report.random_model`, so every HTML report of their results says so at the top,
and :func:`resolve_spec` warns on stderr.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# The file every builder writes beside the weights (capjudge.report.random_model reads it).
MARKER = "CAPJUDGE_TINY_MODEL.txt"

SPEC_PREFIX = "hf:"


@dataclass(frozen=True)
class TinyModel:
    """One buildable tiny model: its name, what it is, and the modules whose source makes it."""

    name: str
    title: str
    modules: tuple[str, ...]
    build: Callable[[Path], object]


def _llava(folder: Path) -> object:
    from capjudge.testing.tiny_llava import build_tiny_llava

    return build_tiny_llava(folder)


def _thinking(folder: Path) -> object:
    from capjudge.testing.tiny_thinking import build_tiny_thinking_vlm

    return build_tiny_thinking_vlm(folder)


def _arch(arch: str) -> Callable[[Path], object]:
    def build(folder: Path) -> object:
        from capjudge.testing.tiny_vlm import build_tiny_vlm

        return build_tiny_vlm(arch, folder)

    return build


# tiny_vlm's architectures (HF model_type), named as in `capjudge judges`; its llava is tiny-llava.
_ARCHS = {
    "llava_next": "LLaVA-NeXT",
    "llava_onevision": "LLaVA-OneVision",
    "qwen2_vl": "Qwen2-VL",
    "qwen2_5_vl": "Qwen2.5-VL",
    "qwen3_vl": "Qwen3-VL",
    "gemma3": "Gemma 3",
    "idefics3": "Idefics3 / SmolVLM",
    "internvl": "InternVL",
    "mistral3": "Mistral 3 (Pixtral)",
    "paligemma": "PaliGemma",
}

TINY_MODELS: dict[str, TinyModel] = {
    m.name: m
    for m in [
        TinyModel("tiny-llava", "LLaVA-1.5 (the demo's model; answers 0.xy, A/B for pairs)", ("tiny_llava",), _llava),
        TinyModel("tiny-thinking", "Qwen3-VL thinking model: <think>...</think> before its answer, --thinking on|off", ("tiny_llava", "tiny_vlm", "tiny_thinking"), _thinking),
        *(TinyModel("tiny-" + arch.replace("_", "-"), title, ("tiny_llava", "tiny_vlm"), _arch(arch)) for arch, title in _ARCHS.items()),
    ]
}
"""The tiny models by name (``hf:NAME`` on the command line, ``capjudge tiny build NAME``)."""


class UnknownTinyModelError(ValueError):
    """A ``tiny-*`` name that is not in :data:`TINY_MODELS`."""


def get_tiny(name: str) -> TinyModel:
    """The entry of ``name`` (raises :class:`UnknownTinyModelError` listing the known names)."""
    try:
        return TINY_MODELS[name]
    except KeyError:
        raise UnknownTinyModelError(f"unknown tiny model {name!r} (known: {', '.join(TINY_MODELS)})") from None


def tiny_home() -> Path:
    """The folder the tiny models are built into: ``$CAPJUDGE_HOME/tiny-random-weights`` (default ``~/.cache/capjudge/tiny-random-weights``)."""
    return Path(os.environ.get("CAPJUDGE_HOME", Path.home() / ".cache" / "capjudge")).expanduser() / "tiny-random-weights"


def tiny_path(name: str) -> Path:
    """Where ``name`` is (or will be) built: its folder name carries a hash of its builders' source."""
    model = get_tiny(name)
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for module in model.modules:
        digest.update((here / f"{module}.py").read_bytes())
    return tiny_home() / f"{name}-{digest.hexdigest()[:10]}"


def is_built(folder: Path) -> bool:
    """Whether ``folder`` holds a finished tiny model (the marker is written last)."""
    return (folder / "config.json").is_file() and (folder / MARKER).is_file()


def ensure_tiny(name: str, folder: str | Path | None = None) -> Path:
    """The folder of the tiny model ``name``, built there first when it is not yet (``folder``:
    a folder of your choice instead of :func:`tiny_path`). The build goes to a temporary folder
    beside it, moved into place when done, so that two runs never see half a model."""
    model = get_tiny(name)
    target = Path(folder).expanduser() if folder is not None else tiny_path(name)
    if is_built(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.build(work)
        try:
            work.rename(target)
        except OSError:  # another run finished first (or an old half-built folder is in the way)
            if not is_built(target):
                shutil.rmtree(target, ignore_errors=True)
                work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def tiny_name_of(spec: str) -> str | None:
    """The tiny model a backend spec names (``hf:tiny-llava``, ``hf:tiny-thinking?device=cpu``),
    else ``None``; a local folder of that name wins over the alias."""
    if not spec.startswith(SPEC_PREFIX + "tiny-"):
        return None
    name = spec[len(SPEC_PREFIX) :].split("?", 1)[0]
    if Path(name).exists():
        return None
    get_tiny(name)  # an unknown tiny-* name is an error naming the known ones
    return name


def resolve_spec(spec: str, *, quiet: bool = False) -> str:
    """``hf:tiny-NAME[?options]`` as ``hf:FOLDER[?options]``, the model built on first use (with a
    warning on stderr that its scores are meaningless); any other spec unchanged."""
    name = tiny_name_of(spec)
    if name is None:
        return spec
    folder = ensure_tiny(name)
    if not quiet:
        print(
            f"capjudge: warning: {SPEC_PREFIX}{name} is a tiny RANDOM-WEIGHT test model ({folder}): its scores are "
            "MEANINGLESS; it only shows that the pipeline runs",
            file=sys.stderr,
        )
    query = spec.split("?", 1)[1] if "?" in spec else ""
    return f"{SPEC_PREFIX}{folder}" + (f"?{query}" if query else "")
