"""Judge presets: each model family's chat format, system policy, image tokens, padding and dtype,
chosen from the config's ``model_type`` before the processor loads; explicit options win."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import Message
from capjudge.backends.presets import (
    GENERIC,
    PRESETS,
    OriginalCheckpointError,
    UnknownPresetError,
    check_loadable,
    get_preset,
    list_presets,
    preset_for_config,
    preset_of,
    preset_options,
    read_config,
    resolve,
)
from capjudge.prompts import LLAVA_V1_SYSTEM

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# config.json excerpts of the families' public checkpoints (model_type and what detection reads).
CONFIGS: dict[str, dict[str, Any]] = {
    "llava-1.5": {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "vision_config": {"model_type": "clip_vision_model"}},
    "llava-next": {"architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next"},
    "llava-onevision": {"architectures": ["LlavaOnevisionForConditionalGeneration"], "model_type": "llava_onevision", "_name_or_path": "llava-hf/llava-onevision-qwen2-7b-ov-hf"},
    "llava-critic": {"architectures": ["LlavaOnevisionForConditionalGeneration"], "model_type": "llava_onevision", "_name_or_path": "someone/llava-critic-7b-hf"},
    "qwen2-vl": {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl"},
    "qwen2.5-vl": {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl"},
    "qwen3-vl": {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl"},
    "gemma3": {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3"},
    "idefics3": {"architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3"},
    "internvl": {"architectures": ["InternVLForConditionalGeneration"], "model_type": "internvl"},
    "mistral3": {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3"},
    "pixtral": {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "vision_config": {"model_type": "pixtral"}},
    "paligemma": {"architectures": ["PaliGemmaForConditionalGeneration"], "model_type": "paligemma"},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_familys_config_chooses_its_preset(name: str) -> None:
    assert preset_for_config(CONFIGS[name]).name == name  # type: ignore[union-attr]


def test_smolvlm_and_qwen3_moe_share_presets_and_unknown_types_get_none() -> None:
    assert preset_for_config({"model_type": "smolvlm"}) is PRESETS["idefics3"]
    assert preset_for_config({"model_type": "qwen3_vl_moe"}) is PRESETS["qwen3-vl"]
    assert preset_for_config({"model_type": "llava_onevision"}, "lmms-lab/llava-critic-7b-hf") is PRESETS["llava-critic"]
    assert preset_for_config({"model_type": "blip-2"}) is None
    assert preset_for_config({}) is None


def test_the_table_states_each_familys_settings() -> None:
    """The facts the presets carry (what a wrong one silently changes)."""
    llava = PRESETS["llava-1.5"]
    assert (llava.chat_format, llava.pad_square, llava.dtype, llava.system_for(LLAVA_V1_SYSTEM)) == ("llava", True, "float16", LLAVA_V1_SYSTEM)
    assert "llamacpp" in llava.backends
    for name in ("llava-next", "llava-onevision", "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "gemma3", "idefics3", "internvl", "mistral3", "pixtral"):
        p = PRESETS[name]
        assert p.chat_format == "template" and not p.pad_square and p.image_tokens == "template", name
        assert p.system_for(LLAVA_V1_SYSTEM) is None, name  # LLaVA's sentence is not theirs
        assert p.backends == (("hf",) if name == "llava-onevision" else ("hf", "llamacpp")), name  # libmtmd's families
    assert PRESETS["gemma3"].system_policy == "keep" and PRESETS["gemma3"].dtype == "bfloat16"  # its template folds
    pali = PRESETS["paligemma"]
    assert (pali.chat_format, pali.system_policy, pali.image_tokens) == ("plain", "fold", "prefix")
    assert PRESETS["llava-critic"].system_for(LLAVA_V1_SYSTEM) == "You are a helpful assistant."
    assert {p.name for p in list_presets()} == set(PRESETS)
    rows = [p.as_row() for p in list_presets()]
    assert all(json.dumps(r) for r in rows) and rows[0]["judge"] == "llava-1.5"


def test_names_aliases_and_unknown_names() -> None:
    assert get_preset("Qwen2.5-VL").name == "qwen2.5-vl"
    assert get_preset("gemma-3").name == "gemma3"
    assert get_preset("smolvlm").name == "idefics3"
    with pytest.raises(UnknownPresetError, match="known: llava-1.5"):
        get_preset("gpt-5")


def test_resolve_explicit_options_win_over_the_preset() -> None:
    qwen = CONFIGS["qwen2.5-vl"]
    r = resolve("Qwen/Qwen2.5-VL-7B-Instruct", config=qwen)
    assert (r.preset, r.chat_format, r.pad_square, r.system_policy, r.dtype, r.source) == ("qwen2.5-vl", "template", False, "keep", "bfloat16", "config")
    r = resolve("m", config=qwen, chat_format="llava", pad_square=True, system_policy="fold")
    assert (r.preset, r.chat_format, r.pad_square, r.system_policy) == ("qwen2.5-vl", "llava", True, "fold")
    r = resolve("m", preset="paligemma", config=qwen)  # a named preset beats the config
    assert (r.preset, r.chat_format, r.system_policy, r.source) == ("paligemma", "plain", "fold", "explicit")
    r = resolve("m", config={"model_type": "blip-2"})
    assert (r.preset, r.chat_format, r.pad_square, r.source) == (GENERIC.name, "template", False, "default")
    assert resolve("m", config=None).preset == GENERIC.name


def test_authors_format_checkpoints_are_refused_with_the_conversion_to_use() -> None:
    with pytest.raises(OriginalCheckpointError, match="llava-hf conversion"):
        check_loadable({"architectures": ["LlavaQwenForCausalLM"], "model_type": "llava"}, "lmms-lab/llava-critic-7b")
    check_loadable(CONFIGS["llava-onevision"], "llava-hf/llava-onevision-qwen2-7b-ov-hf")


def test_preset_options_per_backend_kind() -> None:
    assert preset_options("hf", "qwen2.5-vl") == {"preset": "qwen2.5-vl"}
    assert preset_options("hf", "auto") == {"preset": "auto"}
    assert preset_options("llamacpp", "llava-1.5") == {"prompt_format": "llava_v1"}
    assert preset_options("llamacpp", "qwen2.5-vl") == {"prompt_format": "chat_template"}
    assert preset_options("llamacpp", "auto") == {}
    with pytest.raises(ValueError, match="libmtmd runs: llava-1.5, llava-next, qwen2-vl"):
        preset_options("llamacpp", "paligemma")
    with pytest.raises(ValueError, match="own chat template"):
        preset_options("openai-compatible", "qwen2.5-vl")
    with pytest.raises(UnknownPresetError):
        preset_options("hf", "nope")


def test_preset_of_an_identity() -> None:
    assert preset_of({"preset": "gemma3"}) is PRESETS["gemma3"]
    assert preset_of({"preset": "generic"}) is GENERIC
    assert preset_of({"kind": "scripted"}) is None
    # llama.cpp: the prompt format it chose from the GGUF headers, or the preset asked for
    assert preset_of({"kind": "llamacpp", "prompt_format": "llava_v1"}) is PRESETS["llava-1.5"]
    assert preset_of({"kind": "llamacpp", "prompt_format": "chat_template"}) is GENERIC
    assert preset_of({"kind": "llamacpp", "prompt_format": "chat_template"}, "llava-critic") is PRESETS["llava-critic"]


def test_fold_system_and_plain_rendering() -> None:
    from capjudge.backends.hf.backend import fold_system, render_plain

    msgs = (Message("system", "Be strict."), Message("user", "Rate it."), Message("assistant", "0.5"), Message("user", "Why?"))
    folded = fold_system(msgs)
    assert [m.role for m in folded] == ["user", "assistant", "user"]
    assert folded[0].content == "Be strict.\n\nRate it." and folded[2].content == "Why?"
    assert fold_system(msgs[1:]) == list(msgs[1:])
    assert render_plain(folded, "<image>") == "Be strict.\n\nRate it.\n0.5\nWhy?"  # no image: no image token
    # a caption holding the image token cannot stand for an image
    assert render_plain([Message("user", "a <image> cat")], "<image>") == "a < image> cat"


# ---------------------------------------------------------------- config read before any processor
def _fake_hub_cache(root: Path, repo: str, config: dict[str, Any]) -> None:
    """The layout huggingface_hub keeps in its cache: blobs, a snapshot and refs/main."""
    base = root / ("models--" + repo.replace("/", "--"))
    sha = "0" * 40
    (base / "snapshots" / sha).mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(sha)
    (base / "snapshots" / sha / "config.json").write_text(json.dumps(config))


@pytest.mark.hf
def test_qwen25_hub_id_just_works_offline_from_its_cached_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hf:Qwen/Qwen2.5-VL-7B-Instruct``: the preset comes from config.json alone (the weights
    and processor load later, at the first cache miss): chat template, no square padding,
    bfloat16 on a GPU, and the preset is in the identity the cache keys are made of."""
    pytest.importorskip("transformers")
    import huggingface_hub.constants

    from capjudge.backends.registry import check_backend, load_backend

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    repo = "Qwen/Qwen2.5-VL-7B-Instruct"
    _fake_hub_cache(tmp_path, repo, CONFIGS["qwen2.5-vl"])
    assert read_config(repo, local_files_only=True) == CONFIGS["qwen2.5-vl"]
    check_backend(f"hf:{repo}")
    backend = load_backend(f"hf:{repo}", lazy=True, local_files_only=True)
    ident = backend.identity()
    assert (ident["preset"], ident["chat_format"], ident["pad_square"], ident["system_policy"], ident["dtype"]) == ("qwen2.5-vl", "template", False, "keep", "float32")
    from capjudge.backends.lazy import LazyBackend

    assert isinstance(backend, LazyBackend) and not backend.loaded  # nothing but config.json was read
    explicit = load_backend(f"hf:{repo}?chat_format=llava&pad_square=true", lazy=True, local_files_only=True).identity()
    assert (explicit["preset"], explicit["chat_format"], explicit["pad_square"]) == ("qwen2.5-vl", "llava", True)
    pali = load_backend(f"hf:{repo}", lazy=True, local_files_only=True, preset="paligemma").identity()
    assert (pali["preset"], pali["chat_format"], pali["system_policy"]) == ("paligemma", "plain", "fold")


@pytest.mark.hf
def test_gpu_dtype_comes_from_the_preset() -> None:
    torch = pytest.importorskip("torch")
    from capjudge.backends.hf.settings import device_and_dtype as _device_and_dtype

    assert _device_and_dtype(torch, "cuda", "auto", "bfloat16")[1] == "bfloat16"
    assert _device_and_dtype(torch, "cuda", "float16", "bfloat16")[1] == "float16"  # explicit wins
    assert _device_and_dtype(torch, "cpu", "auto", "bfloat16")[1] == "float32"


def test_bad_preset_options_are_usage_errors_before_loading(tmp_path: Path) -> None:
    from capjudge.backends.options import OptionError
    from capjudge.backends.registry import check_backend

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIGS["gemma3"]))
    with pytest.raises(OptionError, match="unknown judge preset"):
        check_backend(f"hf:{folder}?preset=gpt5")
    with pytest.raises(OptionError, match="system_policy"):
        check_backend(f"hf:{folder}?system_policy=drop")
    with pytest.raises(OptionError, match="chat_format"):
        check_backend(f"hf:{folder}?chat_format=chatml")


def test_cli_judge_flag_and_listing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    assert main(["judges"]) == 0
    out = capsys.readouterr().out
    for name in PRESETS:
        assert name in out
    assert "chat plain, system fold" in out and "GPU dtype bfloat16" in out
    assert main(["judges", "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["judge"] for r in rows] == list(PRESETS)
    args = ["score", "--method", "fleur", "--input", str(EXAMPLES / "captions.jsonl"), "--images", str(EXAMPLES / "images"), "--out", str(tmp_path / "o.jsonl"), "--no-cache", "--quiet"]
    assert main([*args, "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--judge", "qwen2.5-vl"]) == 2
    assert "own chat template" in capsys.readouterr().err
    assert main([*args, "--backend", "hf:Qwen/Qwen2.5-VL-7B-Instruct", "--judge", "nope"]) == 2
    assert "unknown judge preset 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------- on the tiny LLaVA
@pytest.mark.hf
def test_tiny_llava_auto_preset_is_llava15_and_keeps_the_papers_prompt(hf_backend, tiny_llava_dir: Path) -> None:
    from capjudge import Judge

    assert hf_backend.preset == "llava-1.5" and hf_backend.chat_format == "llava" and hf_backend.pad_square
    assert hf_backend.identity()["preset"] == "llava-1.5"
    judge = Judge("fleur", f"hf:{tiny_llava_dir}")
    assert judge.judge_preset == "llava-1.5" and judge.system == LLAVA_V1_SYSTEM
    assert judge.backend.identity() == hf_backend.identity()  # lazy and loaded agree


@pytest.mark.hf
@pytest.mark.slow
def test_a_named_preset_changes_format_padding_and_system_on_the_tiny_llava(tiny_llava_dir: Path, example_images) -> None:
    from capjudge import Judge, Sample
    from capjudge.backends.hf import HFBackend
    from capjudge.data.images import load_image

    be = HFBackend(str(tiny_llava_dir), preset="qwen2.5-vl")
    try:
        assert (be.preset, be.chat_format, be.pad_square, be.system_policy) == ("qwen2.5-vl", "template", False, "keep")
        img = load_image(example_images[0])
        assert be.prepare_image(img).size == img.pil().size  # not padded to a square
        msgs = (Message("system", "Be strict."), Message("user", "Rate it.", images=(img,)))
        assert be.format_prompt(msgs) == "Be strict. USER: <image>\nRate it. ASSISTANT:"  # the model's own template
        # A template that raises on a system role: the text is folded before the user's, once logged.
        template = be.processor.chat_template
        be.processor.chat_template = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" + template
        assert be.format_prompt(msgs) == "USER: <image>\nBe strict.\n\nRate it. ASSISTANT:"
        be.processor.chat_template = template
    finally:
        be.close()
    folded = HFBackend(str(tiny_llava_dir), preset="paligemma", chat_format="llava")  # explicit chat_format wins
    try:
        assert (folded.chat_format, folded.system_policy) == ("llava", "fold")
        assert folded.format_prompt((Message("system", "Be strict."), Message("user", "Rate it."))) == "USER: Be strict.\n\nRate it. ASSISTANT:"
    finally:
        folded.close()
    plain = HFBackend(str(tiny_llava_dir), preset="paligemma")  # no chat: image tokens, then the text
    try:
        img = load_image(example_images[1])
        msgs = (Message("system", "Be strict."), Message("user", "Rate it.", images=(img,)))
        assert plain.format_prompt(msgs) == "<image>Be strict.\n\nRate it."
        from capjudge.backends.base import GenerationConfig, Request

        (out,) = plain.generate([Request(msgs, GenerationConfig(max_new_tokens=4, top_logprobs=5))])
        assert not isinstance(out, BaseException) and out.usage is not None and out.usage.prompt_tokens > 576
    finally:
        plain.close()
    with Judge("fleur", f"hf:{tiny_llava_dir}", preset="llava-critic") as judge:
        assert judge.system == "You are a helpful assistant." and judge.judge_preset == "llava-critic"
        r = judge.score(Sample(example_images[0], "two cats lying together"))
        assert r.details["judge_preset"] == "llava-critic"
        assert r.ok or r.error
    with Judge("fleur", f"hf:{tiny_llava_dir}", preset="qwen2.5-vl", system=None) as judge:
        assert judge.system is None and judge.backend.identity()["preset"] == "qwen2.5-vl"


def test_docs_tables_name_every_preset_and_method() -> None:
    """The judge-preset table in docs/backends.md and the method tables of docs/methods.md (the full
    one and the one "In short") list what the registries hold."""
    from capjudge.prompts import list_methods

    root = Path(__file__).resolve().parents[1]
    backends = (root / "docs" / "backends.md").read_text(encoding="utf-8")
    table = backends[backends.index("| `--judge` |") :].split("\n\n")[0]
    for name in PRESETS:
        assert f"`{name}`" in table, name
    methods = (root / "docs" / "methods.md").read_text(encoding="utf-8")
    full = methods[methods.index("\n## Methods\n") :]
    mtable = full[full.index("| method | source |") :].split("\n\n")[0]
    short = methods[methods.index("\n## In short\n") :]
    rtable = short[short.index("| method | source |") :].split("\n\n")[0]
    for name in list_methods():
        if name.endswith("-hardened"):
            continue  # opt-in variants: named in the short table and in the text of methods.md
        assert f"`{name}`" in mtable, name
        assert f"`{name}`" in rtable, name


# ---------------------------------------------------------------- every architecture (capjudge.testing.tiny_vlm)
TINY_PRESET = {
    "llava": "llava-1.5", "llava_next": "llava-next", "llava_onevision": "llava-onevision", "qwen2_vl": "qwen2-vl",
    "qwen2_5_vl": "qwen2.5-vl", "qwen3_vl": "qwen3-vl", "gemma3": "gemma3", "idefics3": "idefics3",
    "internvl": "internvl", "mistral3": "mistral3", "paligemma": "paligemma",
}


def test_every_tiny_architecture_has_a_preset() -> None:
    from capjudge.testing.tiny_vlm import ARCHITECTURES

    assert set(ARCHITECTURES) == set(TINY_PRESET)


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(TINY_PRESET))
def test_auto_preset_on_each_architecture(tiny_vlm, example_images, arch: str) -> None:
    """``hf:<folder>`` with nothing else: the preset comes from the folder's config, the prompt is
    the family's (its chat template, or PaliGemma's plain text; LLaVA-1.5's sentence only for
    LLaVA-1.5), and FLEUR scores and smooths through it."""
    from capjudge import Judge, Sample
    from capjudge.backends.base import Message

    folder = tiny_vlm(arch)
    expected = PRESETS[TINY_PRESET[arch]]
    with Judge("fleur", f"hf:{folder}") as judge:
        assert judge.judge_preset == expected.name
        assert judge.system == (LLAVA_V1_SYSTEM if arch == "llava" else None)
        r = judge.score(Sample(example_images[0], "two cats lying on a blanket"))
        assert r.details["judge_preset"] == expected.name
        assert r.ok and r.smoothed and 0.0 <= (r.score or 0.0) <= 1.0, r.error
        be = judge.backend.load()
        assert (be.chat_format, be.pad_square, be.system_policy) == (expected.chat_format, expected.pad_square, expected.system_policy)
        img = judge.prepare_sample(0, Sample(example_images[0], "x")).image
        prompt = be.format_prompt((Message("system", "Be strict."), Message("user", "Rate it.", images=(img,))))
        assert "Rate it." in prompt
        # (The tiny Gemma 3 template sets its folded system text inside the loop, where Jinja's
        # scoping loses it; Gemma 3's own template sets it before the loop and keeps it.)
        if arch != "gemma3":
            assert "Be strict." in prompt
        if arch == "paligemma":
            assert prompt == "<image>Be strict.\n\nRate it."
        assert judge.backend.identity()["preset"] == expected.name


@pytest.mark.llamacpp
@pytest.mark.slow
def test_gguf_families_get_their_own_system_default(tmp_path: Path, example_images) -> None:
    """llama.cpp picks its prompt format from the GGUF headers; the judge follows it: LLaVA's
    system sentence for a LLaVA-1.5 GGUF, none for a Qwen2.5-VL GGUF and its chat template (the
    tiny Qwen's answers mean nothing); --judge maps to the backend's prompt_format."""
    pytest.importorskip("llama_cpp")
    from capjudge import Judge, Sample
    from capjudge.testing.tiny_gguf import build_tiny_llava_gguf
    from capjudge.testing.tiny_gguf_qwen import build_tiny_qwen25vl_gguf

    model, mmproj = build_tiny_qwen25vl_gguf(tmp_path / "qwen")
    spec = f"llamacpp:{model}?mmproj={mmproj}&n_ctx=1024&n_threads=2"
    with Judge("fleur", spec) as judge:
        assert judge.judge_preset == GENERIC.name and judge.system is None
        r = judge.score(Sample(example_images[0], "two cats"))
        assert r.details["judge_preset"] == GENERIC.name
    with Judge("fleur", spec, preset="qwen2.5-vl") as judge:
        assert judge.judge_preset == "qwen2.5-vl" and judge.system is None
        assert judge.backend.identity()["prompt_format"] == "chat_template"
    with pytest.raises(ValueError, match="does not apply to the llamacpp backend"):
        Judge("fleur", spec, preset="paligemma")
    lmodel, lproj = build_tiny_llava_gguf(tmp_path / "llava")
    with Judge("fleur", f"llamacpp:{lmodel}?mmproj={lproj}&n_ctx=1024&n_threads=2") as judge:
        assert judge.judge_preset == "llava-1.5" and judge.system == LLAVA_V1_SYSTEM
