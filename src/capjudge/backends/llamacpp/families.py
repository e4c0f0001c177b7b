"""Which GGUF model families the llama.cpp backend runs, and how each is prompted.

Everything here is read from the GGUF headers (``gguf.GGUFReader``; nothing is loaded into
llama.cpp): the text model's ``general.architecture``, embedding width and
``tokenizer.chat_template``, the projector's ``clip.projector_type`` and output width. From them
:func:`read_pair` decides the prompt format:

* ``llava_v1``: LLaVA's own conversation string (``SYSTEM USER: <image>\\n... ASSISTANT:``), used
  by FLEUR's and VisCE2's code. Chosen for LLaVA-1.5's projector (``mlp`` without any-resolution
  grid) whatever the file's chat template, and for the other LLaVA-style projectors (``mlp``,
  ``ldp``, ``ldpv2``) when the model has no chat template; also for text-only use of
  a model without a chat template.
* ``chat_template``: the model's own ``tokenizer.chat_template`` (or a Jinja file given with the
  ``chat_template=`` option), rendered as llama.cpp's server renders it: images become libmtmd's
  media marker, which libmtmd then replaces with the model's image tokens (``<|vision_start|>``...,
  ``<start_of_image>``..., Idefics3's tiles).

The table of projector types is the one of the llama.cpp that llama-cpp-python
:data:`LLAMA_CPP_PYTHON_VERSION` vendors (``tools/mtmd/clip-impl.h``); with another version
installed, unknown types are left to llama.cpp to accept or refuse.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.backends.base import BackendError

__all__ = [
    "AUDIO_PROJECTORS",
    "LLAMA_CPP_PYTHON_VERSION",
    "LLAVA_PROJECTORS",
    "VISION_PROJECTORS",
    "GGUFPair",
    "Headers",
    "UnsupportedModelError",
    "read_headers",
    "read_pair",
    "supported_families",
]

LLAMA_CPP_PYTHON_VERSION = "0.3.36"

# clip.projector_type -> the model family that uses it (vision projectors of llama.cpp's libmtmd).
VISION_PROJECTORS: dict[str, str] = {
    "mlp": "LLaVA-1.5 / LLaVA-1.6 (LLaVA-NeXT), BakLLaVA, ShareGPT4V, Yi-VL, Granite Vision",
    "ldp": "MobileVLM",
    "ldpv2": "MobileVLM V2",
    "resampler": "MiniCPM-V 2.5-4.5",
    "minicpmv4_6": "MiniCPM-V 4.6",
    "adapter": "GLM-Edge-V",
    "qwen2vl_merger": "Qwen2-VL",
    "qwen2.5vl_merger": "Qwen2.5-VL",
    "qwen3vl_merger": "Qwen3-VL",
    "qwen2.5o": "Qwen2.5-Omni (vision part)",
    "ling3vl": "Ling-3-VL",
    "step3vl": "Step3-VL",
    "gemma3": "Gemma 3",
    "gemma3nv": "Gemma 3n",
    "gemma4v": "Gemma 4",
    "gemma4uv": "Gemma 4 (unified)",
    "phi4": "Phi-4-multimodal",
    "idefics3": "Idefics3, SmolVLM, SmolVLM2",
    "pixtral": "Pixtral, Mistral-Small-3.1/3.2",
    "internvl": "InternVL 2.5/3",
    "llama4": "Llama 4",
    "lfm2": "LFM2-VL",
    "kimivl": "Kimi-VL",
    "kimik25": "Kimi-K2.5",
    "paddleocr": "PaddleOCR-VL",
    "lightonocr": "LightOnOCR",
    "cogvlm": "CogVLM",
    "janus_pro": "Janus-Pro",
    "dots_ocr": "dots.ocr",
    "dots3note_v": "dots3-note",
    "deepseekocr": "DeepSeek-OCR",
    "deepseekocr2": "DeepSeek-OCR 2",
    "deepseek4v": "DeepSeek-V4 vision",
    "glm4v": "GLM-4.1V / GLM-4.5V",
    "glm5v": "GLM-5V",
    "youtuvl": "Youtu-VL",
    "yasa2": "Yasa-2",
    "nemotron_v2_vl": "Nemotron Nano VL v2",
    "exaone4_5": "EXAONE 4.5",
    "hunyuanvl": "HunyuanVL",
    "mimovl": "MiMo-VL",
    "minimax_m3": "MiniMax-M3",
    "granite4_vision": "Granite 4 Vision",
    "muse-glimmer": "Muse Glimmer",
}
# Projectors that llama.cpp knows but that take audio (or make it), not images.
AUDIO_PROJECTORS: frozenset[str] = frozenset({
    "ultravox", "qwen2a", "qwen3a", "glma", "voxtral", "meralion", "musicflamingo", "lfm2a", "gemma3na",
    "gemma4a", "gemma4ua", "dots3note_a", "granite_speech", "parakeet", "mimo_audio", "qwen3tts_spkenc",
    "qwen3tts_gen", "pockettts_spkenc", "pockettts_gen",
})
# LLaVA-style projectors, whose models (when they carry no chat template) speak llava_v1.
LLAVA_PROJECTORS: frozenset[str] = frozenset({"mlp", "ldp", "ldpv2"})

# Where the projector's output width is in its tensors (as clip.cpp's clip_n_mmproj_embd reads
# it): tensor name and dimension (ggml order). Other types are checked by libmtmd when it loads.
_WIDTH_TENSORS: dict[str, tuple[str, int]] = {
    "mlp": ("mm.2.weight", 1),  # Yi-VL's variant has no mm.2: left to libmtmd
    "pixtral": ("mm.2.weight", 1),
    "qwen2vl_merger": ("mm.2.bias", 0),
    "qwen2.5vl_merger": ("mm.2.bias", 0),
    "gemma3": ("mm.input_projection.weight", 0),
    "idefics3": ("mm.model.fc.weight", 1),
}


class UnsupportedModelError(BackendError):
    """The GGUF files are not a multimodal pair this llama.cpp can run (the message says why)."""


def supported_families() -> str:
    """One line per projector type llama.cpp supports for images: ``type: families``."""
    return "\n".join(f"  {k}: {v}" for k, v in VISION_PROJECTORS.items())


@dataclass(frozen=True)
class GGUFPair:
    """What the headers of a model (and projector) file say, and the prompt format chosen.

    ``prompt_format`` is ``"llava_v1"`` or ``"chat_template"``; ``chat_template`` is the Jinja
    source used for the latter (``None`` for ``llava_v1``)."""

    architecture: str | None
    text_width: int | None
    projector_type: str | None
    projector_width: int | None
    prompt_format: str
    chat_template: str | None

    @property
    def family(self) -> str | None:
        """The model family of the projector type (``None`` without a projector or if unknown)."""
        return VISION_PROJECTORS.get(self.projector_type or "")

    def identity(self) -> dict[str, Any]:
        """What was chosen, for the backend's identity (cache keys): the prompt format and, for a
        chat template, its digest and the projector type that supplies the image tokens."""
        if self.prompt_format == "llava_v1":
            return {"prompt_format": "llava_v1"}
        assert self.chat_template is not None
        return {
            "prompt_format": "chat_template",
            "chat_template_digest": hashlib.sha256(self.chat_template.encode("utf-8")).hexdigest()[:16],
            "architecture": self.architecture,
            "projector_type": self.projector_type,
        }


def _stamp(path: Path | None) -> tuple[str, int, int] | None:
    if path is None:
        return None
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns)


def read_pair(model_path: Path, mmproj_path: Path | None, *, prompt_format: str = "auto", chat_template: Path | None = None) -> GGUFPair:
    """Read both headers and choose the prompt format (see the module docstring).

    ``prompt_format``: ``auto``, ``llava_v1`` or ``chat_template``; ``chat_template``: a Jinja file
    that replaces the model's template. Raises :class:`UnsupportedModelError` naming the file for
    a projector llama.cpp cannot use for images, a swapped model/projector, or a non-LLaVA model
    without any chat template."""
    template_text = None
    if chat_template is not None:
        if not chat_template.is_file():
            raise FileNotFoundError(f"chat template file not found: {str(chat_template)!r}")
        template_text = chat_template.read_text(encoding="utf-8")
    h = read_headers(model_path, mmproj_path)
    own_template = h.chat_template
    fmt = _choose_format(model_path, h.projector_type, h.pinpoints, own_template if template_text is None else template_text, prompt_format)
    return GGUFPair(
        architecture=h.architecture,
        text_width=h.text_width,
        projector_type=h.projector_type,
        projector_width=h.projector_width,
        prompt_format=fmt,
        chat_template=None if fmt == "llava_v1" else (template_text or own_template),
    )


@dataclass(frozen=True)
class Headers:
    """The header fields of a model (and projector) file that the backend uses."""

    architecture: str | None
    text_width: int | None
    chat_template: str | None
    projector_type: str | None
    projector_width: int | None
    pinpoints: bool


def read_headers(model_path: Path, mmproj_path: Path | None) -> Headers:
    """The headers of both files, read once per version of the files (a large model's header holds
    its whole vocabulary). Raises :class:`UnsupportedModelError` for swapped files and projectors
    llama.cpp cannot use for images."""
    return _read_headers(_stamp(model_path), _stamp(mmproj_path))


@functools.lru_cache(maxsize=8)
def _read_headers(model: tuple[str, int, int], mmproj: tuple[str, int, int] | None) -> Headers:
    try:
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - gguf comes with the extra
        raise BackendError(f"reading GGUF headers needs the gguf package ({exc}): pip install 'capjudge[llamacpp]'") from exc

    def field(reader: Any, key: str) -> Any:
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    model_path = Path(model[0])
    reader = GGUFReader(str(model_path))
    arch = field(reader, "general.architecture")
    if arch == "clip":
        raise UnsupportedModelError(
            f"model file {str(model_path)!r} is a projector (mmproj), not a text model: "
            "give the text model as llamacpp:<model.gguf> and the projector as ?mmproj=<mmproj.gguf>"
        )
    width = field(reader, f"{arch}.embedding_length") if arch else None
    own_template = field(reader, "tokenizer.chat_template")
    own_template = own_template if isinstance(own_template, str) and own_template.strip() else None
    del reader

    proj_type = None
    proj_width = None
    pinpoints = False
    if mmproj is not None:
        mmproj_path = Path(mmproj[0])
        proj = GGUFReader(str(mmproj_path))
        if field(proj, "general.architecture") not in (None, "clip"):
            raise UnsupportedModelError(
                f"projector file {str(mmproj_path)!r} is a text model (general.architecture = "
                f"{field(proj, 'general.architecture')!r}), not an mmproj: did you swap model and mmproj?"
            )
        proj_type = field(proj, "clip.projector_type") or field(proj, "clip.vision.projector_type")
        has_vision = field(proj, "clip.has_vision_encoder")
        _check_projector(mmproj_path, proj_type, has_vision)
        pinpoints = "clip.vision.image_grid_pinpoints" in proj.fields
        where = _WIDTH_TENSORS.get(str(proj_type))
        if where is not None:
            for t in proj.tensors:
                if t.name == where[0] and len(t.shape) > where[1]:
                    proj_width = int(t.shape[where[1]])
        del proj

    return Headers(
        architecture=arch,
        text_width=int(width) if width is not None else None,
        chat_template=own_template,
        projector_type=proj_type,
        projector_width=proj_width,
        pinpoints=pinpoints,
    )


def _check_projector(path: Path, proj_type: Any, has_vision: Any) -> None:
    try:
        import llama_cpp

        known = getattr(llama_cpp, "__version__", None) == LLAMA_CPP_PYTHON_VERSION
    except ImportError:  # checked without llama.cpp (the backend itself needs it)
        known = False
    if proj_type in AUDIO_PROJECTORS or (has_vision is False and proj_type not in VISION_PROJECTORS):
        raise UnsupportedModelError(
            f"projector {str(path)!r} ({proj_type!r}) has no vision encoder: it takes audio, and capjudge "
            f"judges images. Projector types llama.cpp supports for images:\n{supported_families()}"
        )
    if known and proj_type not in VISION_PROJECTORS:
        raise UnsupportedModelError(
            f"projector {str(path)!r} has clip.projector_type {proj_type!r}, which the llama.cpp of "
            f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} does not support. Projector types it supports "
            f"for images:\n{supported_families()}"
        )


def _choose_format(model_path: Path, proj_type: str | None, pinpoints: bool, template: str | None, requested: str) -> str:
    if requested == "llava_v1":
        return "llava_v1"
    if requested == "chat_template":
        if template is None:
            raise UnsupportedModelError(_no_template(model_path, proj_type))
        return "chat_template"
    if requested != "auto":
        raise BackendError(f"llamacpp option prompt_format={requested!r}: use auto, llava_v1 or chat_template")
    if proj_type == "mlp" and not pinpoints:  # LLaVA-1.5: FLEUR's and VisCE2's own prompt
        return "llava_v1"
    if template is not None:
        return "chat_template"
    if proj_type is None or proj_type in LLAVA_PROJECTORS:
        return "llava_v1"
    raise UnsupportedModelError(_no_template(model_path, proj_type))


def _no_template(model_path: Path, proj_type: str | None) -> str:
    family = VISION_PROJECTORS.get(proj_type or "", "this model")
    return (
        f"model {str(model_path)!r} has no tokenizer.chat_template, and {family} ({proj_type}) does not speak "
        "LLaVA's llava_v1 conversation: give the model's chat template as a Jinja file with the option "
        "chat_template=<file.jinja> (or force prompt_format=llava_v1)"
    )
