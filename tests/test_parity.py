"""Backend parity without a server: token diffs, reports over scripted backends, the CLI, the
OpenAI-compatible request fields that keep a served judge like the local one, the packaged server
chat template, and the vLLM checkpoint conversion. (The real vLLM server: test_vllm_server.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import (
    BackendError,
    Completion,
    GenerationConfig,
    Message,
    PromptTokens,
    Request,
)
from capjudge.backends.openai import OpenAIBackend
from capjudge.backends.options import OptionError
from capjudge.backends.registry import check_backend, load_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.parity import first_difference, run_parity
from openai_fake_server import Received, Reply, default_responder, error_body, running_server

IMG = 9  # image token id in the synthetic prompts below


def _p(tokens: list[str], ids: list[int] | None = None, image: int | None = IMG) -> PromptTokens:
    return PromptTokens(ids=tuple(ids if ids is not None else range(100, 100 + len(tokens))), tokens=tuple(tokens), image_token_id=image)


# -- first differing token -----------------------------------------------------------------------------
def test_equal_prompts_have_no_difference() -> None:
    a = PromptTokens(ids=(1, 5, IMG, IMG, IMG, 6), tokens=("<s>", "▁A", "<image>", "<image>", "<image>", ":"), image_token_id=IMG)
    assert first_difference(a, a) is None


def test_image_runs_of_any_length_line_up() -> None:
    """576 image tokens on one side and one placeholder on the other are the same image."""
    a = PromptTokens(ids=(1, 5, *[IMG] * 576, 6), tokens=("<s>", "▁A", *["<image>"] * 576, ":"), image_token_id=IMG)
    b = PromptTokens(ids=(1, 5, IMG, 6), tokens=("<s>", "▁A", "<image>", ":"))
    assert first_difference(a, b) is None
    c = PromptTokens(ids=(1, 5, IMG, 7), tokens=("<s>", "▁A", "<image>", "▁B"))
    d = first_difference(a, c)
    assert d is not None and d.index == 3 and (d.a_token, d.b_token) == (":", "▁B")
    assert d.a_length == 579 and d.b_length == 4 and d.hint is None


def test_missing_bos_is_named() -> None:
    a = PromptTokens(ids=(1, 5, 6), tokens=("<s>", "▁A", ":"))
    b = PromptTokens(ids=(5, 6), tokens=("▁A", ":"))
    d = first_difference(a, b)
    assert d is not None and d.index == 0 and d.a_token == "<s>" and d.b_token == "▁A"
    assert d.hint is not None and "prompt b lacks the BOS" in d.hint and "add_special_tokens" in d.hint
    back = first_difference(b, a)
    assert back is not None and back.hint is not None and "prompt a lacks" in back.hint
    # A different first token that is not a missing BOS gets no hint.
    e = first_difference(a, PromptTokens(ids=(2, 5, 6), tokens=("</s>", "▁A", ":")))
    assert e is not None and e.index == 0 and e.hint is None


def test_one_prompt_longer() -> None:
    a = PromptTokens(ids=(1, 5), tokens=("<s>", "▁A"))
    b = PromptTokens(ids=(1, 5, 6), tokens=("<s>", "▁A", ":"))
    d = first_difference(a, b)
    assert d is not None and d.index == 2 and d.a_token is None and d.b_token == ":"


# -- reports over scripted backends --------------------------------------------------------------------
def _samples(example_images: list[Path]) -> list[dict[str, Any]]:
    caps = ["A cat on a sofa.", "A dog in the park.", "Two birds on a tree."]
    return [{"image": str(img), "caption": c, "id": f"{img.stem}{i}"} for img in example_images for i, c in enumerate(caps)]


def _by_caption(scores: dict[str, str]) -> ScriptedBackend:
    def answer(req: Request) -> str:
        text = req.messages[-1].content
        return next(v for k, v in scores.items() if k in text)

    return ScriptedBackend(answer)


def test_report_measures_differences_ranks_and_flips(example_images: list[Path]) -> None:
    a = _by_caption({"cat": "0.80", "dog": "0.60", "birds": "0.40"})
    b = _by_caption({"cat": "0.78", "dog": "0.61", "birds": "0.40"})
    samples = _samples(example_images)
    r = run_parity(samples, a, b, method="fleur")
    assert r.n == r.n_both == 6 and r.errors_a == r.errors_b == 0
    assert r.max_abs_diff == pytest.approx(0.02) and r.mean_abs_diff == pytest.approx((0.02 + 0.01 + 0.0) / 3)
    assert r.kendall_tau_b == pytest.approx(1.0) and r.spearman == pytest.approx(1.0)
    assert r.same_answer == pytest.approx(1 / 3)
    assert r.prompt_checked == 0 and r.first_token_diff is None  # scripted backends show no prompt tokens
    assert r.worst[0].abs_diff == pytest.approx(0.02) and r.worst[0].raw_a == "0.80"
    assert r.within(0.05) and not r.within(0.01)
    d = r.to_dict()
    assert json.loads(json.dumps(d))["max_abs_diff"] == pytest.approx(0.02)


def test_reversed_ranking_and_errors(example_images: list[Path]) -> None:
    a = _by_caption({"cat": "0.80", "dog": "0.60", "birds": "0.40"})
    b = ScriptedBackend(lambda req: BackendError("down") if "birds" in req.messages[-1].content else ("0.20" if "cat" in req.messages[-1].content else "0.90"))
    r = run_parity(_samples(example_images), a, b, method="fleur")
    assert r.errors_b == 2 and r.one_sided_errors == 2 and r.n_both == 4
    assert r.kendall_tau_b == pytest.approx(-1.0) and r.spearman == pytest.approx(-1.0)
    assert r.max_abs_diff == pytest.approx(0.6)
    assert not r.within(1.0)  # a sample scored on one backend only is no parity


def test_verdict_flips_are_counted(example_images: list[Path]) -> None:
    a = ScriptedBackend("[[A]]")
    b = ScriptedBackend("[[B]]")
    pairs = [{"image": str(example_images[0]), "caption_a": "A cat.", "caption_b": "A dog.", "id": "q1"}, {"image": str(example_images[1]), "caption_a": "A dog.", "caption_b": "A cat.", "id": "q2"}]
    r = run_parity(_samples(example_images)[:1], ScriptedBackend("0.5"), ScriptedBackend("0.5"), method="fleur", pairs=pairs, pair_method="gpt4v-pairwise")
    assert r.verdict_flips == 0
    # The same model always answering "A" (a position bias) and always "B" give opposite votes in
    # each order: dual-sided voting turns both into ties, so the verdicts agree.
    r = run_parity(_samples(example_images)[:1], a, b, method="fleur", pairs=pairs)
    assert r.n_pairs_both == 2 and r.verdict_flips == 0
    prefer_cat = ScriptedBackend(lambda req: "[[A]]" if req.messages[-1].content.index("cat") < req.messages[-1].content.index("dog") else "[[B]]")
    prefer_dog = ScriptedBackend(lambda req: "[[B]]" if req.messages[-1].content.index("cat") < req.messages[-1].content.index("dog") else "[[A]]")
    r = run_parity(_samples(example_images)[:1], prefer_cat, prefer_dog, method="fleur", pairs=pairs)
    assert r.n_pairs_both == 2 and r.verdict_flips == 2 and r.flipped == ["q1", "q2"]
    assert not r.within(1.0)


def test_parity_cli_exit_codes(example_images: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    inp = tmp_path / "s.jsonl"
    inp.write_text("".join(json.dumps({"image": p.name, "caption": "A cat.", "id": p.stem}) + "\n" for p in example_images) + "not json\n")
    base = ["parity", "--input", str(inp), "--images", str(example_images[0].parent), "--format", "json"]
    assert main([*base, "--a", "scripted:0.8", "--b", "scripted:0.8", "--tolerance", "0"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["n_both"] == 2 and rep["max_abs_diff"] == 0 and any("unreadable row" in n for n in rep["notes"])
    assert main([*base, "--a", "scripted:0.8", "--b", "scripted:0.7", "--tolerance", "0.05"]) == 5
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["max_abs_diff"] == pytest.approx(0.1)
    assert main([*base, "--a", "scripted:0.8", "--b", "scripted:0.7"]) == 0  # no tolerance: a report only
    capsys.readouterr()
    # Usage errors before anything loads.
    assert main([*base, "--a", "scripted:0.8", "--b", "nosuch:x"]) == 2
    assert main([*base, "--a", "scripted:0.8", "--b", "scripted:0.8", "--method", "gpt4v-pairwise"]) == 2
    assert main(["parity", "--input", str(tmp_path / "missing.jsonl"), "--a", "scripted:1", "--b", "scripted:1"]) == 2
    assert main([*base, "--a", "scripted:0.8", "--b", "openai:gpt-4o", "--b-opt", "add_special_tokens=true"]) == 2


def test_parity_table_output(example_images: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    inp = tmp_path / "s.jsonl"
    inp.write_text(json.dumps({"image": str(example_images[0]), "caption": "A cat."}) + "\n")
    assert main(["parity", "--input", str(inp), "--a", "scripted:0.8", "--b", "scripted:0.75"]) == 0
    out = capsys.readouterr().out
    assert "max |score a - score b|" in out and "0.05" in out and "not compared" in out


# -- request fields of OpenAI-compatible servers ---------------------------------------------------------
def _req() -> Request:
    return Request((Message("user", "Rate."),), GenerationConfig(max_new_tokens=4))


def test_neutral_penalties_and_add_special_tokens_fields() -> None:
    compat = OpenAIBackend("m", kind="openai-compatible", base_url="http://127.0.0.1:9/v1", add_special_tokens=True)
    body = compat._params(_req(), with_logprobs=False)
    assert body["temperature"] == 0.0
    assert body["extra_body"] == {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "add_special_tokens": True}
    assert compat.identity()["add_special_tokens"] is True and compat.identity()["neutral_penalties"] is True
    # extra_body wins over the defaults.
    mine = OpenAIBackend("m", kind="openai-compatible", base_url="http://127.0.0.1:9/v1", extra_body={"repetition_penalty": 1.1})
    assert mine._params(_req(), with_logprobs=False)["extra_body"]["repetition_penalty"] == 1.1
    off = OpenAIBackend("m", kind="openai-compatible", base_url="http://127.0.0.1:9/v1", neutral_penalties=False)
    assert "extra_body" not in off._params(_req(), with_logprobs=False)
    assert off.identity() != compat.identity()
    # OpenAI itself refuses fields outside its protocol: none are sent, and asking is an error.
    openai = OpenAIBackend("gpt-4o", kind="openai", api_key="sk-test-xxxxxxxx")
    assert "extra_body" not in openai._params(_req(), with_logprobs=False)
    assert openai.prompt_tokens(_req()) is None
    with pytest.raises(ValueError, match="add_special_tokens"):
        OpenAIBackend("gpt-4o", kind="openai", api_key="sk-test-xxxxxxxx", add_special_tokens=True)
    with pytest.raises(OptionError, match="add_special_tokens"):
        check_backend("openai:gpt-4o?add_special_tokens=true")
    with pytest.raises(OptionError):
        check_backend("openai-compatible:http://h:8000/v1#m", add_special_tokens="maybe")
    for b in (compat, mine, off, openai):
        b.close()


def test_server_refusing_repetition_penalty_is_asked_again_without() -> None:
    def responder(r: Received) -> Reply:
        if "repetition_penalty" in r.body:
            return Reply(status=400, body=error_body("Unrecognized request argument supplied: repetition_penalty"))
        return default_responder(r)

    with running_server(responder=responder) as srv:
        b = load_backend(f"openai-compatible:{srv.base_url}#m", retry_base_delay=0.01, concurrency=1)
        first = b.generate_one(_req())
        second = b.generate_one(_req())
        assert first.text and second.text
        assert ["repetition_penalty" in r.body for r in srv.received] == [True, False, False]
        # A server without vLLM's /tokenize shows no prompt tokens.
        assert b.prompt_tokens(_req()) is None
        b.close()


def test_requests_in_flight_when_the_penalty_fields_are_refused_are_asked_again() -> None:
    def responder(r: Received) -> Reply:
        if "repetition_penalty" in r.body:
            return Reply(status=400, body=error_body("Unrecognized request argument supplied: repetition_penalty"))
        return default_responder(r)

    with running_server(responder=responder, delay=0.2) as srv:
        b = load_backend(f"openai-compatible:{srv.base_url}#m", retry_base_delay=0.01, concurrency=8)
        outs = b.generate([_req() for _ in range(8)])
        assert all(isinstance(o, Completion) and o.text for o in outs), outs
        sent = ["repetition_penalty" in r.body for r in srv.received]
        assert sent.count(True) >= 2  # several were in flight with the fields
        assert sent.count(False) == 8  # every request answered once without them
        b.close()


# -- the packaged server chat template -------------------------------------------------------------------
@pytest.mark.hf
def test_server_template_renders_the_local_prompt_with_bos(example_images: list[Path]) -> None:
    """The llava_v1 server template renders capjudge's LLaVA prompt after the BOS, and tokenizes to
    the same ids as the HF path (BOS added by the tokenizer)."""
    from capjudge.backends.llava_prompt import render_llava_v1
    from capjudge.data.images import load_image
    from capjudge.prompts.server import server_chat_template, server_chat_template_path
    from capjudge.testing.tiny_llava import build_tokenizer

    tok = build_tokenizer()
    img = load_image(example_images[0])
    convs = [
        (Message("system", "Be a judge."), Message("user", "Rate this.", (img,))),
        (Message("user", "Rate this.", (img,)),),
        (Message("system", "S."), Message("user", "Rate.", (img,)), Message("assistant", "0.85"), Message("user", "Why?")),
    ]

    def openai_form(m: Message) -> dict[str, Any]:
        if not m.images:
            return {"role": m.role, "content": m.content}
        return {"role": m.role, "content": [*({"type": "image_url", "image_url": {"url": "x"}} for _ in m.images), {"type": "text", "text": m.content}]}

    for conv in convs:
        served = tok.apply_chat_template([openai_form(m) for m in conv], chat_template=server_chat_template(), add_generation_prompt=True, tokenize=False)
        local = render_llava_v1(conv)
        assert served == "<s> " + local
        assert tok(served, add_special_tokens=False).input_ids == tok(local).input_ids
    assert server_chat_template_path().name == "llava_v1.jinja"
    with pytest.raises(ValueError, match="unknown server chat template"):
        server_chat_template_path("nosuch")


@pytest.mark.hf
def test_vllm_checkpoint_renames_vision_keys(tmp_path: Path) -> None:
    from safetensors import safe_open

    from capjudge.testing.vllm_server import build_tiny_llava_for_vllm, vllm_checkpoint

    hf_dir, vllm_dir = build_tiny_llava_for_vllm(tmp_path, num_layers=1, vision_layers=1)
    with safe_open(str(hf_dir / "model.safetensors"), "pt") as f:
        hf_keys = set(f.keys())
    with safe_open(str(vllm_dir / "model.safetensors"), "pt") as f:
        v_keys = set(f.keys())
        assert f.get_tensor("vision_tower.vision_model.embeddings.class_embedding").shape[0] == 32
    assert any(k.startswith("vision_tower.embeddings") for k in hf_keys)
    assert not any(k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.") for k in v_keys)
    assert {k.replace("vision_tower.vision_model.", "vision_tower.") for k in v_keys} == hf_keys
    assert (vllm_dir / "config.json").read_text() == (hf_dir / "config.json").read_text()
    assert json.loads((vllm_dir / "config.json").read_text())["text_config"]["hidden_size"] == 128
    with pytest.raises(ValueError, match="head size"):
        build_tiny_llava_for_vllm(tmp_path / "x", hidden_size=64, num_heads=4)
    with pytest.raises(FileNotFoundError):
        vllm_checkpoint(tmp_path / "empty", tmp_path / "out")
