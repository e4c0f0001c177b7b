"""Judge presets: how each model family is prompted (``--judge NAME``, or chosen from the model's
config ``model_type`` for ``hf:`` models).

A preset fixes, for one family of VLMs, what capjudge would otherwise get wrong by assuming
LLaVA-1.5:

- ``chat_format``: ``llava`` (LLaVA-1.5's own ``llava_v1`` conversation, as FLEUR's and VisCE2's
  code build it), ``template`` (the processor's chat template) or ``plain`` (no chat at all: the
  prompt text after the image, as PaliGemma takes it);
- ``system_policy``: ``keep`` (a system turn is sent as such: LLaVA's conversation and most
  templates take it, Gemma 3's folds it into the first user turn itself; a template that raises
  on a system role gets the text folded as below, logged once), ``fold`` (the system text is put
  before the first user turn's text, a blank line between: for models without a chat, such as
  PaliGemma);
- ``default_system``: the system text used when the judge's ``system`` is ``"auto"``: the
  method's paper sentence (:data:`METHOD_SYSTEM`, LLaVA-1.5 only: the papers' code used it with
  LLaVA), a fixed text (LLaVA-Critic's ``qwen_1_5`` conversation), or none (the model's own
  template decides);
- ``image_tokens``: how the image enters the prompt (``marker``: a literal ``<image>`` in LLaVA's
  conversation; ``template``: the chat template's image placeholder, which the processor expands
  (tiles, grids); ``prefix``: image tokens before the text, PaliGemma's layout);
- ``pad_square``: pad images to a square with the processor's mean colour first (LLaVA-1.5 does;
  any-resolution models tile or resize the image themselves and must not be padded);
- ``dtype``: the dtype the family's authors run it in on a GPU (``dtype=auto`` picks it on CUDA;
  a CPU runs float32);
- thinking models: ``thinking`` (``""``: not one; ``always``: it writes its reasoning itself, or
  its template opens it; ``hybrid``: its chat template switches it with ``enable_thinking``,
  on by default), ``reasoning_markers`` (a name of
  :data:`capjudge.parsing.reasoning.KNOWN_MARKERS`) and ``answer_box`` (how the final answer is
  boxed: ``\\boxed{}`` or GLM's ``<|begin_of_box|>...<|end_of_box|>``). A thinking model's
  score is read from its final answer only (:mod:`capjudge.judges.reasoning`); the thinking
  budget is added to its token budget (:mod:`capjudge.backends.thinking`).

Options given explicitly (``?chat_format=...``, ``pad_square``, ``dtype``, ``system_policy``) always
win over the preset. The preset's name is part of the backend's identity (cache keys) and of every
result's ``details.judge_preset``. This module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from capjudge.backends import kinds
from capjudge.core.errors import CapjudgeError
from capjudge.parsing.reasoning import DEFAULT_MARKERS, KNOWN_MARKERS

ChatFormat = Literal["llava", "template", "plain"]
SystemPolicy = Literal["keep", "fold"]
ImageTokens = Literal["marker", "template", "prefix"]

CHAT_FORMATS: tuple[str, ...] = ("llava", "template", "plain")
SYSTEM_POLICIES: tuple[str, ...] = ("keep", "fold")
METHOD_SYSTEM = "method"
"""``default_system`` value meaning: the method's own system sentence (``Method.system``)."""


class UnknownPresetError(CapjudgeError, ValueError):
    """No judge preset of that name."""


@dataclass(frozen=True)
class JudgePreset:
    """How one model family is prompted (see the module doc)."""

    name: str
    family: str
    model_types: tuple[str, ...]
    chat_format: ChatFormat
    system_policy: SystemPolicy
    image_tokens: ImageTokens
    pad_square: bool
    dtype: str
    default_system: str | None = None
    backends: tuple[str, ...] = ("hf",)
    examples: tuple[str, ...] = ()
    notes: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)
    detected_by: str = ""
    """How ``preset=auto`` recognises the family when its ``model_type`` is shared with another."""
    thinking: str = ""
    reasoning_markers: str | None = None
    answer_box: str | None = None

    @property
    def thinks(self) -> bool:
        """The model reasons before answering by default."""
        return self.thinking in ("always", "hybrid")

    def system_for(self, method_system: str | None) -> str | None:
        """The system text of a judge whose ``system`` is ``"auto"``, given the method's sentence."""
        return method_system if self.default_system == METHOD_SYSTEM else self.default_system

    def as_row(self) -> dict[str, Any]:
        """The preset as one JSON-able row (``capjudge judges --json``)."""
        return {
            "judge": self.name,
            "family": self.family,
            "model_types": list(self.model_types),
            "detected_by": self.detected_by or None,
            "chat_format": self.chat_format,
            "system_policy": self.system_policy,
            "default_system": self.default_system,
            "image_tokens": self.image_tokens,
            "pad_square": self.pad_square,
            "dtype": self.dtype,
            "backends": list(self.backends),
            "examples": list(self.examples),
            "notes": self.notes,
            "thinking": self.thinking or None,
            "reasoning_markers": list(KNOWN_MARKERS[self.reasoning_markers]) if self.reasoning_markers else (list(DEFAULT_MARKERS) if self.thinking else None),
            "answer_box": self.answer_box,
        }


_HF_GGUF = ("hf", "llamacpp")  # families whose GGUF + mmproj llama.cpp's libmtmd runs

QWEN_DEFAULT_SYSTEM = "You are a helpful assistant."
"""The system turn of LLaVA-NeXT's ``qwen_1_5`` conversation, which LLaVA-Critic is run with."""

_PRESETS: tuple[JudgePreset, ...] = (
    JudgePreset(
        "llava-1.5", "LLaVA-1.5", ("llava",), "llava", "keep", "marker", True, "float16", METHOD_SYSTEM,
        backends=("hf", "llamacpp"), examples=("llava-hf/llava-1.5-7b-hf", "llava-hf/llava-1.5-13b-hf"),
        notes="the papers' setting: llava_v1 conversation with the method's system sentence, images padded to a square",
        aliases=("llava", "llava-1.5-hf"),
    ),
    JudgePreset(
        "llava-next", "LLaVA-NeXT (1.6)", ("llava_next",), "template", "keep", "template", False, "float16",
        backends=_HF_GGUF, examples=("llava-hf/llava-v1.6-mistral-7b-hf", "llava-hf/llava-v1.6-vicuna-13b-hf"),
        notes="any-resolution tiling by the processor (no square padding)", aliases=("llava-1.6",),
    ),
    JudgePreset(
        "llava-onevision", "LLaVA-OneVision", ("llava_onevision",), "template", "keep", "template", False, "float16",
        examples=("llava-hf/llava-onevision-qwen2-7b-ov-hf",), notes="Qwen2 chat template; any-resolution tiling",
        aliases=("onevision",),
    ),
    JudgePreset(
        "llava-critic", "LLaVA-Critic", (), "template", "keep", "template", False, "float16", QWEN_DEFAULT_SYSTEM,
        examples=("a llava-hf (transformers) conversion of lmms-lab/llava-critic-7b",),
        notes="LLaVA-OneVision trained to judge; system turn of its qwen_1_5 conversation; "
        "pair with methods llava-critic-pointwise / llava-critic-pairwise",
        aliases=("critic",), detected_by="model_type llava_onevision and 'critic' in the model's name",
    ),
    JudgePreset(
        "qwen2-vl", "Qwen2-VL", ("qwen2_vl",), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("Qwen/Qwen2-VL-7B-Instruct",), notes="dynamic resolution (image grid); template adds its default system turn",
    ),
    JudgePreset(
        "qwen2.5-vl", "Qwen2.5-VL", ("qwen2_5_vl",), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-72B-Instruct"),
        notes="dynamic resolution (image grid); template adds its default system turn", aliases=("qwen2_5-vl", "qwen25-vl"),
    ),
    JudgePreset(
        "qwen3-vl", "Qwen3-VL", ("qwen3_vl", "qwen3_vl_moe"), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("Qwen/Qwen3-VL-8B-Instruct",), notes="dynamic resolution (image grid)",
    ),
    JudgePreset(
        "qwen3-vl-thinking", "Qwen3-VL Thinking", (), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("Qwen/Qwen3-VL-8B-Thinking", "Qwen/Qwen3-VL-30B-A3B-Thinking"),
        notes="its chat template opens <think> at the end of the prompt; the answer follows </think>",
        detected_by="model_type qwen3_vl / qwen3_vl_moe and 'thinking' in the model's name",
        thinking="always", reasoning_markers="think",
    ),
    JudgePreset(
        "qwen3-hybrid", "Qwen3 hybrid thinking (template with enable_thinking)", (), "template", "keep", "template", False, "bfloat16",
        backends=("hf", "llamacpp"), examples=("Qwen/Qwen3-8B (text only)", "a Qwen3-VL fine-tune with Qwen3's hybrid template"),
        notes="thinks unless --thinking off (enable_thinking=False writes an empty <think></think> into the prompt)",
        detected_by="named only (--judge qwen3-hybrid); thinking=auto detects the switch from the template",
        thinking="hybrid", reasoning_markers="think",
    ),
    JudgePreset(
        "glm-4.1v-thinking", "GLM-4.1V-Thinking", ("glm4v",), "template", "keep", "template", False, "bfloat16",
        backends=("hf",), examples=("zai-org/GLM-4.1V-9B-Thinking",),
        notes="always thinks: <think>...</think> then <answer>...</answer>, the final answer inside <|begin_of_box|>...<|end_of_box|>",
        thinking="always", reasoning_markers="think", answer_box="<|begin_of_box|>...<|end_of_box|>", aliases=("glm4v", "glm-4.1v"),
    ),
    JudgePreset(
        "glm-4.5v", "GLM-4.5V", ("glm4v_moe",), "template", "keep", "template", False, "bfloat16",
        backends=("hf",), examples=("zai-org/GLM-4.5V",),
        notes="hybrid: thinks unless enable_thinking is false (--thinking off); answer inside <|begin_of_box|>...<|end_of_box|>",
        thinking="hybrid", reasoning_markers="think", answer_box="<|begin_of_box|>...<|end_of_box|>", aliases=("glm4.5v",),
    ),
    JudgePreset(
        "kimi-vl-thinking", "Kimi-VL Thinking", ("kimi_vl",), "template", "keep", "template", False, "bfloat16",
        backends=("hf",), examples=("moonshotai/Kimi-VL-A3B-Thinking-2506",),
        notes="reasoning between \u25c1think\u25b7 and \u25c1/think\u25b7; needs trust_remote_code=true",
        thinking="always", reasoning_markers="kimi", aliases=("kimi-vl",),
    ),
    JudgePreset(
        "llava-critic-r1", "LLaVA-Critic-R1", (), "template", "keep", "template", False, "bfloat16",
        backends=("hf",), examples=("lmms-lab/LLaVA-Critic-R1-7B",),
        notes="Qwen2.5-VL trained with RL to judge: <think>...</think> then the verdict or score in \\boxed{}",
        detected_by="model_type qwen2_5_vl and 'critic-r1' in the model's name",
        thinking="always", reasoning_markers="think", answer_box="\\boxed{}", aliases=("critic-r1",),
    ),
    JudgePreset(
        "gemma3", "Gemma 3", ("gemma3",), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("google/gemma-3-4b-it", "google/gemma-3-27b-it"),
        notes="no system role of its own: its template folds a system turn into the first user turn (before the image); "
        "float16 overflows",
        aliases=("gemma-3",),
    ),
    JudgePreset(
        "idefics3", "Idefics3 / SmolVLM", ("idefics3", "smolvlm"), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("HuggingFaceM4/Idefics3-8B-Llama3", "HuggingFaceTB/SmolVLM-Instruct"), notes="image split into tiles by the processor",
        aliases=("smolvlm",),
    ),
    JudgePreset(
        "internvl", "InternVL (HF format)", ("internvl",), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("OpenGVLab/InternVL3-8B-hf",), notes="the -hf conversions; the original checkpoints need trust_remote_code and are not supported",
        aliases=("internvl3",),
    ),
    JudgePreset(
        "mistral3", "Mistral-Small-3 / Pixtral", ("mistral3",), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("mistralai/Mistral-Small-3.1-24B-Instruct-2503",), notes="Pixtral vision encoder at native resolution",
        aliases=("mistral-small-3",),
    ),
    JudgePreset(
        "pixtral", "Pixtral (llava-style HF conversion)", (), "template", "keep", "template", False, "bfloat16",
        backends=_HF_GGUF, examples=("mistral-community/pixtral-12b",), notes="the llava-style conversion of Pixtral-12B",
        detected_by="model_type llava with vision_config.model_type pixtral",
    ),
    JudgePreset(
        "paligemma", "PaliGemma", ("paligemma",), "plain", "fold", "prefix", False, "bfloat16",
        examples=("google/paligemma-3b-mix-448", "google/paligemma2-3b-mix-448"),
        notes="no chat: image tokens, then the prompt text; a system text is put before the prompt",
        aliases=("paligemma2",),
    ),
)

PRESETS: dict[str, JudgePreset] = {p.name: p for p in _PRESETS}
"""The judge presets by name."""

_BY_ALIAS: dict[str, str] = {alias: p.name for p in _PRESETS for alias in (p.name, *p.aliases)}
_BY_MODEL_TYPE: dict[str, str] = {mt: p.name for p in _PRESETS for mt in p.model_types}


def list_presets() -> list[JudgePreset]:
    """Every judge preset, in table order."""
    return list(_PRESETS)


def get_preset(name: str | JudgePreset) -> JudgePreset:
    """A preset by name or alias (``qwen2.5-vl``, ``Qwen2.5-VL``, ``gemma-3``...)."""
    if isinstance(name, JudgePreset):
        return name
    key = str(name).strip().lower().replace("_", "-")
    if key in _BY_ALIAS:
        return PRESETS[_BY_ALIAS[key]]
    raise UnknownPresetError(f"unknown judge preset {name!r} (known: {', '.join(PRESETS)}; or 'auto')")


def preset_for_config(config: Mapping[str, Any], name_hint: str = "") -> JudgePreset | None:
    """The preset of a model from its ``config.json`` (``model_type``; for ``llava``, the vision
    tower's type; for LLaVA-OneVision, ``critic`` in the model's name), or ``None`` for a family
    without a preset."""
    model_type = str(config.get("model_type") or "").lower()
    if model_type == "llava":
        vision = config.get("vision_config") or {}
        if isinstance(vision, Mapping) and str(vision.get("model_type", "")).lower() == "pixtral":
            return PRESETS["pixtral"]
    names = f"{name_hint} {config.get('_name_or_path', '')}".lower()
    if model_type == "llava_onevision" and "critic" in names:
        return PRESETS["llava-critic"]
    if model_type in ("qwen3_vl", "qwen3_vl_moe") and "thinking" in names:
        return PRESETS["qwen3-vl-thinking"]
    if model_type == "qwen2_5_vl" and "critic-r1" in names:
        return PRESETS["llava-critic-r1"]
    name = _BY_MODEL_TYPE.get(model_type)
    return PRESETS[name] if name else None


class OriginalCheckpointError(CapjudgeError, ValueError):
    """The folder or hub id holds a checkpoint in its authors' own format, which transformers
    cannot load (LLaVA-NeXT's ``LlavaQwenForCausalLM``, InternVL's remote code, ...)."""


_ORIGINAL_ARCHS = {
    "LlavaQwenForCausalLM": "an original LLaVA-NeXT / LLaVA-OneVision / LLaVA-Critic checkpoint (LlavaQwenForCausalLM)",
    "LlavaLlamaForCausalLM": "an original LLaVA checkpoint (LlavaLlamaForCausalLM)",
    "LlavaMistralForCausalLM": "an original LLaVA-NeXT checkpoint (LlavaMistralForCausalLM)",
}


def check_loadable(config: Mapping[str, Any], model: str) -> None:
    """Raise :class:`OriginalCheckpointError` for an authors'-format checkpoint, naming what to use."""
    archs = config.get("architectures") or []
    for arch in archs if isinstance(archs, list) else []:
        if arch in _ORIGINAL_ARCHS:
            raise OriginalCheckpointError(
                f"{model!r} is {_ORIGINAL_ARCHS[arch]}, which transformers cannot load: use its llava-hf conversion "
                "(e.g. llava-hf/llava-onevision-qwen2-7b-ov-hf), or convert it with transformers' "
                "convert_llava_onevision_weights_to_hf.py / convert_llava_weights_to_hf.py"
            )


def read_config(model: str, *, local_files_only: bool) -> dict[str, Any] | None:
    """The model's ``config.json`` as a dict (a folder's file, or the hub file from the local HF
    cache, downloaded when allowed), or ``None`` when it cannot be read."""
    path = Path(model).expanduser()
    try:
        if path.is_dir():
            file = path / "config.json"
        else:
            from huggingface_hub import hf_hub_download

            file = Path(hf_hub_download(model, "config.json", local_files_only=local_files_only))
        data = json.loads(file.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - no config: the caller falls back and says so
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class Resolved:
    """The prompting settings an HF backend runs with, and where each came from."""

    preset: str
    chat_format: str
    system_policy: str
    pad_square: bool
    dtype: str  # the preset's GPU dtype ("auto" resolves to it on CUDA)
    source: str  # "explicit", "config", "default"


GENERIC = JudgePreset(
    "generic", "any other model", (), "template", "keep", "template", False, "float16",
    notes="a model_type without a preset: the processor's chat template, no padding",
)


def resolve(
    model: str,
    *,
    preset: str | None = "auto",
    chat_format: str | None = None,
    system_policy: str | None = None,
    pad_square: bool | None = None,
    config: Mapping[str, Any] | None = None,
) -> Resolved:
    """The settings for ``model``: the named preset (or, for ``"auto"``, the one its config names,
    else :data:`GENERIC`), with every explicitly given option winning over it."""
    source = "explicit"
    if preset is None or str(preset).strip().lower() in ("", "auto"):
        found = preset_for_config(config or {}, model) if config else None
        chosen, source = (found, "config") if found is not None else (GENERIC, "default")
    else:
        chosen = get_preset(preset)
    return Resolved(
        preset=chosen.name,
        chat_format=chat_format if chat_format is not None else chosen.chat_format,
        system_policy=system_policy if system_policy is not None else chosen.system_policy,
        pad_square=pad_square if pad_square is not None else chosen.pad_square,
        dtype=chosen.dtype,
        source=source,
    )


def preset_options(kind: str, name: str) -> dict[str, str]:
    """The backend options that apply judge preset ``name`` to a backend of ``kind``
    (``Judge(..., preset=)``, CLI ``--judge``). ``hf`` takes any preset (option ``preset``);
    ``llamacpp`` the families libmtmd runs, as its ``prompt_format`` (``llava_v1`` for LLaVA-1.5,
    the GGUF's ``chat_template`` otherwise); API backends none: their server applies the model's
    own chat template. Raises :class:`UnknownPresetError` or ``ValueError`` naming what applies."""
    entry = kinds.get(kind)
    if str(name).strip().lower() == "auto":
        return {"preset": "auto"} if entry.preset_option == "preset" else {}
    preset = get_preset(name)
    if entry.preset_option == "preset":
        return {"preset": preset.name}
    if entry.preset_option == "prompt_format":
        if entry.name not in preset.backends:
            runs = ", ".join(p.name for p in _PRESETS if entry.name in p.backends)
            raise ValueError(f"judge preset {preset.name!r} does not apply to the {entry.name} backend (llama.cpp's libmtmd runs: {runs})")
        return {"prompt_format": "llava_v1" if preset.chat_format == "llava" else "chat_template"}
    if entry.api:
        local = ", ".join(kinds.preset_kinds())
        raise ValueError(f"judge presets apply to local backends ({local}); an {entry.name} server applies the model's own chat template (use --system none where it rejects a system turn)")
    raise ValueError(f"judge presets do not apply to {entry.name!r} backends")


def preset_of(identity: Mapping[str, Any], requested: str | None = None) -> JudgePreset | None:
    """The preset a backend ran with: the one its identity names (``hf``), else the one
    ``requested`` (``--judge`` on ``llamacpp``), else, for a llama.cpp identity, ``llava-1.5`` for
    its ``llava_v1`` prompt and :data:`GENERIC` for a GGUF's own chat template; ``None`` for
    backends without presets."""
    name = identity.get("preset")
    if not name and requested and str(requested).strip().lower() != "auto":
        return get_preset(requested)
    if not name:
        fmt = identity.get("prompt_format")
        return PRESETS["llava-1.5"] if fmt == "llava_v1" else GENERIC if fmt == "chat_template" else None
    if name == GENERIC.name:
        return GENERIC
    try:
        return get_preset(str(name))
    except UnknownPresetError:
        return None
