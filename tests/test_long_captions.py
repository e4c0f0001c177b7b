"""Long (detailed) captions: a prompt that would overflow the model's context is that sample's
error record with the token counts, before any decoding, on the tiny HF model (both decoding
paths) and the tiny llama.cpp model; an OpenAI-protocol server's context refusal (vLLM's 400, OpenAI's
``context_length_exceeded``) is read into the same counts and not retried; ``details.caption_words``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge, Sample, load_backend
from capjudge.backends.base import ContextLengthError, GenerationConfig, Message, Request
from capjudge.backends.faults import failure_details
from capjudge.backends.hf.context import context_error, context_limit
from capjudge.backends.openai.context import context_error as server_context_error
from capjudge.cli import main
from capjudge.judges.records import LONG_CAPTION_WORDS, caption_words
from openai_fake_server import Received, Reply, chat_body, error_body, running_server

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "examples" / "images"
CATS = IMAGES / "cats.jpg"
KEY = "sk-test-long-captions"

SHORT = "an orange cat and a grey cat are lying together."
LONG = " ".join(["The orange cat rests on a soft blue blanket near the window."] * 25)  # 300 words
SAMPLES = [Sample(CATS, SHORT, id="a"), Sample(CATS, LONG, id="long"), Sample(CATS, "a cat on a bed.", id="b")]


def _check_records(records: list[Any], limit: int, max_new_tokens: int, option: str) -> dict[str, Any]:
    by_id = {r.id: r for r in records}
    assert by_id["a"].status == "ok" and by_id["b"].status == "ok"  # the neighbours are scored
    bad = by_id["long"]
    assert bad.status == "error" and bad.score is None
    ctx = bad.details["context"]
    assert ctx["limit"] == limit and ctx["max_new_tokens"] == max_new_tokens
    assert ctx["prompt_tokens"] + max_new_tokens > limit and ctx["image_tokens"] > 0
    assert f"{ctx['prompt_tokens']} tokens" in bad.error and str(limit) in bad.error and option in bad.error
    assert "ContextLengthError" in bad.error and bad.details["resumable"] is False
    assert bad.details["caption_words"] == 300 and "caption_words" not in by_id["a"].details
    return ctx


# ------------------------------------------------------------------------------ HF
@pytest.fixture(scope="module")
def small_context_llava(tiny_llava_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LLaVA with a context of 1000 tokens: its short-caption FLEUR prompts (576 image
    tokens) fit, a 300-word caption does not."""
    d = tmp_path_factory.mktemp("small-ctx") / "llava"
    shutil.copytree(tiny_llava_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"]["max_position_embeddings"] = 1000
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize("prefix_reuse", [True, False])
def test_hf_overflow_is_the_samples_error_record(small_context_llava: Path, prefix_reuse: bool) -> None:
    be = load_backend(f"hf:{small_context_llava}?prefix_reuse={str(prefix_reuse).lower()}&batch_size=3")
    try:
        assert (be.max_context, be.context_source) == (1000, "text_config.max_position_embeddings")  # type: ignore[attr-defined]
        records = list(Judge("fleur", be, max_new_tokens=4).score_many(SAMPLES))
    finally:
        be.close()
    ctx = _check_records(records, 1000, 4, "--max-new-tokens")
    assert ctx["image_tokens"] == 576 and ctx["prompt_tokens"] > 1000 - 4


def test_hf_context_limit_from_the_config() -> None:
    class Cfg:
        def __init__(self, **kw: Any) -> None:
            self.__dict__.update(kw)

    assert context_limit(Cfg(text_config=Cfg(max_position_embeddings=2048), max_position_embeddings=9)) == (2048, "text_config.max_position_embeddings")
    assert context_limit(Cfg(n_positions=1024)) == (1024, "n_positions")
    assert context_limit(Cfg(text_config=Cfg(), seq_length=8192)) == (8192, "seq_length")
    assert context_limit(Cfg())[0] == 4096
    assert context_error(990, 576, 10, 1000, "x") is None  # exactly full: fits
    exc = context_error(991, 576, 10, 1000, "text_config.max_position_embeddings")
    assert isinstance(exc, ContextLengthError) and exc.counts == {"prompt_tokens": 991, "image_tokens": 576, "max_new_tokens": 10, "limit": 1000}
    assert "prompt of 991 tokens (576 of them image tokens) + max_new_tokens=10 = 1001 tokens exceeds the model's context of 1000 tokens" in str(exc)
    assert failure_details(exc) == {"resumable": False, "context": exc.counts}


# ------------------------------------------------------------------------------ llama.cpp
@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from capjudge.testing.tiny_gguf import build_tiny_llava_gguf

    return build_tiny_llava_gguf(tmp_path_factory.mktemp("tiny-gguf-long"), seed=0)


@pytest.mark.slow
def test_llamacpp_overflow_is_the_samples_error_record(tiny_gguf: tuple[Path, Path]) -> None:
    model, mmproj = tiny_gguf
    be = load_backend(f"llamacpp:{model}?mmproj={mmproj}&n_ctx=512&n_threads=2")
    try:
        records = list(Judge("fleur", be, max_new_tokens=4).score_many(SAMPLES))
        ctx = _check_records(records, 512, 4, "n_ctx")
        assert "raise n_ctx (spec option ?n_ctx=)" in records[1].error
        # the answer budget counts: a prompt that fits alone but not with its budget is refused
        short = Request((Message("user", "Score:"),), GenerationConfig(max_new_tokens=4))
        n = be.generate([short])[0].usage.prompt_tokens  # type: ignore[union-attr]
        outs = be.generate([Request(short.messages, GenerationConfig(max_new_tokens=512 - n + 1)), Request(short.messages, GenerationConfig(max_new_tokens=512 - n))])
        assert isinstance(outs[0], ContextLengthError) and outs[0].counts["prompt_tokens"] == n
        assert not isinstance(outs[1], BaseException)
    finally:
        be.close()
    assert ctx["prompt_tokens"] > 512


# ------------------------------------------------------------------------------ OpenAI protocol
VLLM_MESSAGE = (
    "This model's maximum context length is 2048 tokens. However, your prompt contains {n} input tokens, which "
    "exceeds this limit even without any output tokens. Please reduce the length of the input prompt. "
    "(parameter=input_tokens, value={n})"
)


def vllm_like(req: Received) -> Reply:
    """vLLM 0.32's answer to a prompt over --max-model-len (HTTP 400, ``code`` the status), else a score."""
    n = 8 * len(req.prompt_text().split())
    if n > 2048:
        body = {"error": {"message": VLLM_MESSAGE.format(n=n), "type": "BadRequestError", "param": "input_tokens", "code": 400}}
        return Reply(status=400, body=body)
    return Reply(body=chat_body("0.7", model="served"))


def test_openai_compatible_context_refusal_is_read_and_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rows = tmp_path / "in.jsonl"
    rows.write_text("".join(json.dumps({"id": s.id, "image": "cats.jpg", "caption": s.caption}) + "\n" for s in SAMPLES))
    out = tmp_path / "out.jsonl"
    with running_server(responder=vllm_like) as srv:
        rc = main(["score", "--method", "vanilla", "--backend", f"openai-compatible:{srv.base_url}#served", "--images", str(IMAGES),
                   "--input", str(rows), "--out", str(out), "--no-cache", "--quiet"])
        asked = [r for r in srv.received if r.path.endswith("/chat/completions")]
    assert rc in (0, 1)
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["a"]["status"] == records["b"]["status"] == "ok"
    bad = records["long"]
    assert bad["status"] == "error" and bad["details"]["context"]["limit"] == 2048
    n = bad["details"]["context"]["prompt_tokens"]
    assert n > 2048 and f"prompt of {n} tokens exceeds the server's context of 2048 tokens" in bad["error"]
    assert "--max-model-len" in bad["error"] and "HTTP 400" in bad["error"] and bad["details"]["resumable"] is False
    assert bad["details"]["caption_words"] == 300
    assert sum(LONG[:40] in r.prompt_text() for r in asked) == 1  # asked once: no retry of a context error


def test_openai_context_length_exceeded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    message = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages."

    def refuse(req: Received) -> Reply:
        return Reply(status=400, body=error_body(message, code="context_length_exceeded", param="messages"))

    with running_server(responder=refuse) as srv:
        be = load_backend(f"openai-compatible:{srv.base_url}#gpt")
        try:
            out = be.generate([Request((Message("user", "rate this"),), GenerationConfig(max_new_tokens=8))])[0]
        finally:
            be.close()
        assert len([r for r in srv.received if r.path.endswith("/chat/completions")]) == 1
    assert isinstance(out, ContextLengthError) and out.counts == {"limit": 128000, "prompt_tokens": 130532}
    assert "prompt of 130532 tokens exceeds the server's context of 128000 tokens" in str(out)


@pytest.mark.parametrize(
    "message, counts",
    [
        ("The decoder prompt (length 3000) is longer than the maximum model length of 2048. Make sure that `max_model_len` is no smaller than the number of text tokens.", {"limit": 2048, "prompt_tokens": 3000}),
        ("The decoder prompt (length 2048) plus the number of requested output tokens (at least 1) is longer than the maximum model length of 2048. Make sure ...", {"limit": 2048, "prompt_tokens": 2048}),
        ("Input length (3000) exceeds model's maximum context length (2048).", {"limit": 2048, "prompt_tokens": 3000}),
        ("This model's maximum context length is 2048 tokens. However, your prompt contains at least 2049 input tokens, which exceeds ...", {"limit": 2048, "prompt_tokens": 2049}),
        ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce ...", {"limit": 4096, "prompt_tokens": 4000, "max_new_tokens": 1000}),
        ("This model's maximum context length is 2048 tokens. However, your prompt contains 99999 characters (more than 8192 characters, which is the upper bound for 2048 input tokens).", {"limit": 2048}),
    ],
)
def test_vllm_context_messages(message: str, counts: dict[str, int]) -> None:
    exc = server_context_error(400, 400, message, reported=f"HTTP 400: {message}")
    assert isinstance(exc, ContextLengthError) and exc.counts == counts
    assert str(exc).endswith(f"(HTTP 400: {message})")


def test_other_refusals_are_not_context_errors() -> None:
    assert server_context_error(400, None, "max_completion_tokens must be a positive integer", reported="x") is None
    assert server_context_error(500, None, "This model's maximum context length is 2048 tokens.", reported="x") is None


# ------------------------------------------------------------------------------ caption_words
def test_caption_words_only_for_long_captions() -> None:
    assert caption_words(SHORT) is None and caption_words(SHORT, "a dog") is None
    assert caption_words(LONG) == 300 and caption_words(SHORT, LONG) == [len(SHORT.split()), 300]
    assert caption_words(" ".join(["w"] * LONG_CAPTION_WORDS)) == LONG_CAPTION_WORDS
    assert caption_words(" ".join(["w"] * (LONG_CAPTION_WORDS - 1))) is None
    assert caption_words(None) is None  # a bad row's caption


def test_pair_records_carry_both_caption_words(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"id": "long", "image": "cats.jpg", "caption_a": SHORT, "caption_b": LONG}, {"id": "short", "image": "cats.jpg", "caption_a": SHORT, "caption_b": "a cat."}]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    assert main(["compare", "--backend", "scripted:Answer 1", "--input", str(pairs), "--images", str(IMAGES), "--out", str(out), "--no-cache", "--quiet"]) == 0
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["long"]["status"] == "ok" and records["long"]["details"]["caption_words"] == [len(SHORT.split()), 300]
    assert "caption_words" not in records["short"]["details"]
