"""llama.cpp backend on a tiny random-weight LLaVA GGUF (built offline by capjudge.testing.tiny_gguf).

The real multimodal path runs: llama.cpp decodes the image, clip.cpp encodes it, the projector maps
it into the text model, and the backend reads tokens and probabilities from llama.cpp's logits.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.llamacpp
llama_cpp = pytest.importorskip("llama_cpp")

from PIL import Image  # noqa: E402

from capjudge.backends.base import (  # noqa: E402
    DIGITS,
    BackendError,
    Completion,
    ContextLengthError,
    GenerationConfig,
    Message,
    Request,
)
from capjudge.backends.llamacpp import LlamaCppBackend, ProjectorMismatchError, render_llava_v1  # noqa: E402
from capjudge.backends.registry import load_backend  # noqa: E402
from capjudge.data.images import load_image  # noqa: E402
from capjudge.judges.smoothing import smooth_from_steps  # noqa: E402
from capjudge.testing.tiny_gguf import build_tiny_llava_gguf  # noqa: E402
from llamacpp_helpers import assert_steps_match_scores, reference_chat  # noqa: E402

SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the human's questions."
)
FLEUR_LIKE = "Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0.\n\nCaption: {c}\n\nScore:"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_tiny_llava_gguf(tmp_path_factory.mktemp("tiny-gguf"), seed=0)


@pytest.fixture(scope="module")
def backend(tiny: tuple[Path, Path]) -> LlamaCppBackend:
    model, mmproj = tiny
    be = load_backend(f"llamacpp:{model}?mmproj={mmproj}&n_ctx=2048&n_threads=2")
    assert isinstance(be, LlamaCppBackend)
    yield be
    be.close()


def _image(color: tuple[int, int, int], size: tuple[int, int] = (60, 40)):
    return load_image(Image.new("RGB", size, color))


RED = _image((200, 30, 30))
GREEN = _image((20, 160, 40), (40, 64))


def _request(caption: str, image=RED, *, top: int = 10, max_new: int = 16) -> Request:
    return Request(
        (Message("system", SYSTEM), Message("user", FLEUR_LIKE.format(c=caption), (image,))),
        GenerationConfig(max_new_tokens=max_new, top_logprobs=top),
    )


def _key(c: Completion) -> tuple:
    return (c.text, c.finish_reason, [s.to_dict() for s in c.steps], c.usage)


# -- the tiny model -------------------------------------------------------------------------------


def test_tiny_gguf_is_deterministic(tmp_path: Path, tiny: tuple[Path, Path]) -> None:
    a = build_tiny_llava_gguf(tmp_path / "a", seed=0)
    b = build_tiny_llava_gguf(tmp_path / "b", seed=1)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in tiny]
    assert a[0].read_bytes() != b[0].read_bytes() and a[1].read_bytes() != b[1].read_bytes()


def test_tiny_tokenizer_has_single_digit_tokens(tiny: tuple[Path, Path]) -> None:
    llm = llama_cpp.Llama(model_path=str(tiny[0]), vocab_only=True, verbose=False)
    try:
        ids = llm.tokenize(b"Score: 0.85", add_bos=False)
        pieces = [llm._model.token_get_text(i) for i in ids]
        assert pieces == ["\u2581Score", ":", "\u2581", "0", ".", "8", "5"]
        for d in DIGITS:
            (tid,) = llm.tokenize(d.encode(), add_bos=False)[-1:]
            assert llm._model.token_get_text(tid) == d
    finally:
        llm.close()


# -- prompt format --------------------------------------------------------------------------------


def test_render_llava_v1_prompt() -> None:
    msgs = (Message("system", "SYS."), Message("user", "Rate it.", (RED,)))
    assert render_llava_v1(msgs, "<M>") == "SYS. USER: <M>\nRate it. ASSISTANT:"
    follow = (*msgs, Message("assistant", "0.7"), Message("user", "Why? Tell me the reason."))
    assert render_llava_v1(follow, "<M>") == "SYS. USER: <M>\nRate it. ASSISTANT: 0.7</s>USER: Why? Tell me the reason. ASSISTANT:"
    assert render_llava_v1((Message("user", "hi"),), "<M>") == "USER: hi ASSISTANT:"
    # a caption that contains the media marker cannot smuggle in an image slot
    assert render_llava_v1((Message("user", "a <M> b"),), "<M>").count("<M>") == 0


# -- image + text -> tokens with probabilities ------------------------------------------------------


def test_image_request_gives_tokens_with_probabilities(backend: LlamaCppBackend) -> None:
    assert backend.capabilities.logprobs and backend.capabilities.exact_digit_probs
    out = backend.generate_one(_request("a dog on the grass"))
    assert re.fullmatch(r"0\.\d", out.text), out.text
    assert out.logprobs and out.finish_reason == "stop" and out.model == "tiny-llava"
    assert out.usage is not None and out.usage.prompt_tokens > 16  # 16 image tokens + text
    assert "".join(s.token for s in out.steps).strip() == out.text
    for step in out.steps:
        assert step.logprob is not None and step.logprob <= 0.0
        assert len(step.top) == 10
        lps = [lp for _, lp in step.top]
        assert lps == sorted(lps, reverse=True)
        assert step.top[0] == (step.token, step.logprob)  # greedy: the chosen token is the argmax
        assert step.digits is not None and len(step.digits) == 10
        assert sum(math.exp(x) for x in step.digits) <= 1.0 + 1e-9
    units, dot, decimal = out.steps[-3:]
    assert units.token == "0" and dot.token == "."
    # after "." the ten digits are the ten most likely tokens, and digits[] is the same softmax
    assert sorted(t for t, _ in decimal.top) == list(DIGITS)
    assert dict(decimal.top) == pytest.approx(dict(zip(DIGITS, decimal.digits, strict=True)))
    assert decimal.digits[int(decimal.token)] == pytest.approx(decimal.logprob)
    smoothed = smooth_from_steps(out.steps)
    assert smoothed is not None and 0.0 <= smoothed.score <= 1.0
    assert smoothed.raw_score == float(out.text)


def test_digit_logprobs_equal_llama_cpp_logits(backend: LlamaCppBackend, tiny: tuple[Path, Path]) -> None:
    """The same chat through llama-cpp-python's own create_chat_completion (logits_all=True): the
    backend's log-probabilities equal the log-softmax of the logits llama.cpp computed there."""
    from llama_cpp.llama_chat_format import Llava15ChatHandler

    class LlavaV1Handler(Llava15ChatHandler):
        DEFAULT_SYSTEM_MESSAGE = None
        CHAT_FORMAT = (
            "{% for m in messages %}"
            "{% if m.role == 'system' %}{{ m.content }} {% endif %}"
            "{% if m.role == 'user' %}USER: "
            "{% for c in m.content %}{% if c.type == 'image_url' %}{{ c.image_url.url }}\n{% endif %}{% endfor %}"
            "{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %} {% endif %}"
            "{% endfor %}ASSISTANT:"
        )

    caption = "a red car on the street"
    ours = backend.generate_one(_request(caption))
    model, mmproj = tiny
    llm = llama_cpp.Llama(
        model_path=str(model), chat_handler=LlavaV1Handler(clip_model_path=str(mmproj), verbose=False),
        n_ctx=512, logits_all=True, verbose=False,
    )
    try:
        ref = reference_chat(llm, SYSTEM, FLEUR_LIKE.format(c=caption), RED.data_url())
        assert ref["choices"][0]["message"]["content"].strip() == ours.text
        assert ref["usage"]["prompt_tokens"] == ours.usage.prompt_tokens
        n_prompt = ref["usage"]["prompt_tokens"]
        vocab = {llm._model.token_get_text(i): i for i in range(llm.n_vocab())}
        digit_ids = [vocab[d] for d in DIGITS]
        assert_steps_match_scores(llm, ours.steps, n_prompt, digit_ids)
    finally:
        llm.close()


def test_same_request_twice_is_identical(backend: LlamaCppBackend, tiny: tuple[Path, Path]) -> None:
    req = _request("a cat on a red car")
    first = backend.generate_one(req)
    again = backend.generate_one(req)  # prefix reused from the KV cache
    other = backend.generate([_request("a dog", GREEN), _request("the street"), req])
    fresh_backend = LlamaCppBackend(tiny[0], tiny[1], n_ctx=512)
    try:
        fresh = fresh_backend.generate_one(req)
    finally:
        fresh_backend.close()
    assert again.meta["reused_prompt_tokens"] > 16  # system text and the image were not re-evaluated
    for c in (again, other[2], fresh):
        assert isinstance(c, Completion)
        assert _key(c) == _key(first)


def test_prefix_reuse_groups_requests_of_one_image(backend: LlamaCppBackend) -> None:
    reqs = [_request("a dog", RED), _request("a dog", GREEN), _request("a cat", RED), _request("a car", GREEN)]
    outs = backend.generate(reqs)
    assert all(isinstance(o, Completion) for o in outs)
    reused = [o.meta["reused_prompt_tokens"] for o in outs]
    # run order is RED, RED, GREEN, GREEN: the second request of each image reuses system + image
    assert reused[2] > 16 and reused[3] > 16
    # and answers do not depend on what ran before
    singles = [backend.generate_one(r) for r in reversed(reqs)][::-1]
    assert [_key(o) for o in outs] == [_key(s) for s in singles]
    # different captions of one image give different digit distributions (the image/caption matter)
    assert outs[0].steps[-1].digits != outs[2].steps[-1].digits


def _fresh(tiny: tuple[Path, Path], requests: list[Request], **kw) -> list[Completion]:
    """Each request answered by a freshly loaded backend (nothing in its KV cache)."""
    outs = []
    for r in requests:
        be = LlamaCppBackend(tiny[0], tiny[1], n_ctx=512, **kw)
        try:
            outs.append(be.generate_one(r))
        finally:
            be.close()
    return outs


def test_partial_text_reuse_is_bit_identical_to_a_fresh_model(backend: LlamaCppBackend, tiny: tuple[Path, Path]) -> None:
    reqs = [
        _request("a cat on a red car"),
        _request("a cat on a red car parked in the old street near the river"),  # extends the last caption
        _request("a cat on a red car", GREEN),  # another image in between
        _request("a cat on a red bike"),  # back to the first image
        _request("a cat on a red bike"),  # the same prompt again
        _request("a cat on a red bicycle"),  # shares a prefix with the last caption
        _request("the cat"),
    ]
    ours = [backend.generate_one(r) for r in reqs]  # one at a time: this order, after other tests' requests
    fresh = _fresh(tiny, reqs)
    assert [_key(o) for o in ours] == [_key(f) for f in fresh]
    reused = [o.meta["reused_prompt_tokens"] for o in ours]
    n_prompt = [o.usage.prompt_tokens for o in ours]
    lead = _leading_positions(backend, reqs[0])  # system text + image
    shared = _common_text_tokens(backend, reqs[0], reqs[1])
    assert shared >= 32  # instructions and the first caption
    assert reused[1] == lead + shared - shared % 16  # in whole blocks of 16 tokens
    assert reused[2] < lead and reused[3] < lead  # another image: only the system text
    assert n_prompt[4] - 16 <= reused[4] < n_prompt[4]  # only the last block is evaluated again
    assert reused[5] == lead + _common_text_tokens(backend, reqs[4], reqs[5]) // 16 * 16
    assert reused[6] > lead


def _common_text_tokens(backend: LlamaCppBackend, a: Request, b: Request) -> int:
    """How many leading tokens the text chunks after the image of two requests share."""
    (ta, tb) = (_chunks(backend, r)[-1].key[1] for r in (a, b))
    return next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))


def _chunks(backend: LlamaCppBackend, request: Request) -> list:
    chunks, mt_chunks, bitmaps = backend._tokenize(request)
    backend._free(mt_chunks, bitmaps)
    assert [c.key[0] for c in chunks] == ["text", "media", "text"]
    return chunks


def _leading_positions(backend: LlamaCppBackend, request: Request) -> int:
    chunks = _chunks(backend, request)
    return chunks[0].n_pos + chunks[1].n_pos


def test_prompt_block_only_changes_speed(backend: LlamaCppBackend, tiny: tuple[Path, Path]) -> None:
    reqs = [_request("a dog on the grass"), _request("a dog on the sofa"), _request("a dog on the grass")]
    whole = LlamaCppBackend(tiny[0], tiny[1], n_ctx=512, prompt_block=0)  # whole chunks only
    small = load_backend(f"llamacpp:{tiny[0]}?mmproj={tiny[1]}&n_ctx=512&prompt_block=5")
    try:
        outs_whole = [whole.generate_one(r) for r in reqs]
        outs_small = [small.generate_one(r) for r in reqs]
    finally:
        whole.close()
        small.close()
    lead = _leading_positions(backend, reqs[0])
    assert outs_whole[1].meta["reused_prompt_tokens"] == lead  # the text chunk is evaluated whole
    assert outs_small[1].meta["reused_prompt_tokens"] > lead
    assert (outs_small[1].meta["reused_prompt_tokens"] - lead) % 5 == 0
    # the block size may move the last bits of the logits, never the answer
    for a, b in zip(outs_whole, outs_small, strict=True):
        assert a.text == b.text
        for sa, sb in zip(a.steps, b.steps, strict=True):
            assert sa.token == sb.token and sa.digits == pytest.approx(sb.digits, abs=1e-4)
    assert [_key(o) for o in outs_small] == [_key(f) for f in _fresh(tiny, reqs, prompt_block=5)]
    with pytest.raises(BackendError, match="prompt_block"):
        load_backend(f"llamacpp:{tiny[0]}?mmproj={tiny[1]}&prompt_block=many")


def test_cached_image_is_not_decoded_again(tiny: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    be = LlamaCppBackend(tiny[0], tiny[1], n_ctx=512)
    decoded: list[str] = []
    real = be._bitmap
    monkeypatch.setattr(be, "_bitmap", lambda img: decoded.append(img.label) or real(img))
    try:
        outs = be.generate([_request("a dog"), _request("a cat"), _request("a dog", GREEN), _request("a cat")])
        assert decoded == [RED.label, GREEN.label]  # run order RED, RED, GREEN, GREEN: once per image
        assert all(isinstance(o, Completion) for o in outs)
        # a request holding an image that is no longer cached decodes it again
        out = be.generate_one(_request("a cat"))
        assert decoded == [RED.label, GREEN.label, RED.label] and out.text == outs[1].text
    finally:
        be.close()


def test_text_only_prompts_reuse_their_common_prefix(tiny: tuple[Path, Path]) -> None:
    long = "Rate the caption from 0.0 to 1.0. " * 4
    reqs = [
        Request((Message("user", long + "Caption: a dog. Score:"),), GenerationConfig(max_new_tokens=6, top_logprobs=3)),
        Request((Message("user", long + "Caption: a cat. Score:"),), GenerationConfig(max_new_tokens=6, top_logprobs=3)),
    ]
    be = LlamaCppBackend(tiny[0], None, n_ctx=512)
    try:
        outs = [be.generate_one(r) for r in reqs]
        fresh = LlamaCppBackend(tiny[0], None, n_ctx=512)
        try:
            again = fresh.generate_one(reqs[1])
        finally:
            fresh.close()
    finally:
        be.close()
    assert outs[1].meta["reused_prompt_tokens"] >= 32
    assert _key(outs[1]) == _key(again)


def test_multi_turn_explain_follow_up(backend: LlamaCppBackend) -> None:
    first = backend.generate_one(_request("a dog on the grass"))
    follow = Request(
        (*_request("a dog on the grass").messages, Message("assistant", first.text), Message("user", "Why? Tell me the reason.")),
        GenerationConfig(max_new_tokens=8),
    )
    out = backend.generate_one(follow)
    assert out.text and out.usage.prompt_tokens > first.usage.prompt_tokens + 8
    assert out.steps and all(s.top == () for s in out.steps)  # top_logprobs=0: no alternatives


def test_text_only_request_and_stop_strings(backend: LlamaCppBackend) -> None:
    req = Request((Message("user", "Score:"),), GenerationConfig(max_new_tokens=8, stop=(".",)))
    out = backend.generate_one(req)
    assert out.text == "0" and out.finish_reason == "stop"


def test_sampling_is_reproducible_per_sample_index(backend: LlamaCppBackend) -> None:
    cfg = GenerationConfig(max_new_tokens=6, temperature=1.0, seed=3)
    msgs = _request("a dog").messages
    a = backend.generate([Request(msgs, cfg, sample_index=i) for i in range(3)])
    b = backend.generate([Request(msgs, cfg, sample_index=i) for i in range(3)])
    assert [_key(x) for x in a] == [_key(x) for x in b]


def test_identity_names_model_and_projector_content(backend: LlamaCppBackend, tiny: tuple[Path, Path], tmp_path: Path) -> None:
    ident = backend.identity()
    assert ident["kind"] == "llamacpp" and ident["model"] == "tiny-llava"
    assert ident["mmproj"] == tiny[1].name and len(ident["model_digest"]) == 16
    assert "n_ctx" not in ident and "n_threads" not in ident
    other = build_tiny_llava_gguf(tmp_path, seed=7)
    be = LlamaCppBackend(tiny[0], other[1], n_ctx=256)
    try:
        assert be.identity()["mmproj_digest"] != ident["mmproj_digest"]
        assert be.identity()["model_digest"] == ident["model_digest"]
        assert be.cache_key(_request("x")) != backend.cache_key(_request("x"))
    finally:
        be.close()


# -- errors ---------------------------------------------------------------------------------------


def test_missing_files_name_the_path(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        load_backend(f"llamacpp:{missing}?mmproj={tiny[1]}")
    with pytest.raises(FileNotFoundError, match="mmproj.*nope.gguf"):
        LlamaCppBackend(tiny[0], missing)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(BackendError, match="not a GGUF file"):
        LlamaCppBackend(junk, tiny[1])


def test_mismatched_projector_is_refused_before_llama_cpp(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    _, wrong = build_tiny_llava_gguf(tmp_path, seed=0, projector_width=48)
    with pytest.raises(ProjectorMismatchError, match="48-wide.*width 64"):
        LlamaCppBackend(tiny[0], wrong, n_ctx=256)


def test_mismatched_projector_is_also_caught_from_llama_cpp(tiny: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import capjudge.backends.llamacpp.backend as mod

    _, wrong = build_tiny_llava_gguf(tmp_path, seed=0, projector_width=48)
    monkeypatch.setattr(mod, "gguf_widths", lambda *a: (None, None))  # header check unavailable
    with pytest.raises(ProjectorMismatchError, match="could not load projector"):
        LlamaCppBackend(tiny[0], wrong, n_ctx=256)


def test_bad_requests_become_error_items(backend: LlamaCppBackend, tiny: tuple[Path, Path]) -> None:
    small = LlamaCppBackend(tiny[0], tiny[1], n_ctx=48)
    try:
        outs = small.generate([_request("a dog"), Request((Message("user", "Score:"),), GenerationConfig(max_new_tokens=4))])
    finally:
        small.close()
    assert isinstance(outs[0], ContextLengthError) and "n_ctx=48" in str(outs[0])
    assert isinstance(outs[1], Completion) and outs[1].text
    two = Request(_request("x").messages, GenerationConfig(n=2))
    outs = backend.generate([two, _request("a dog")])
    assert isinstance(outs[0], BackendError) and "n=1" in str(outs[0])
    assert isinstance(outs[1], Completion)
    from capjudge.data.images import ImageError, LoadedImage

    corrupt = LoadedImage(sha256="0" * 64, label="broken.png", data=b"\x89PNG not really")
    two_images = Request((Message("user", "Compare.", (RED, GREEN)),), GenerationConfig(max_new_tokens=4))
    outs = backend.generate([_request("a dog", corrupt), two_images])
    assert isinstance(outs[0], ImageError) and "broken.png" in str(outs[0])
    assert isinstance(outs[1], Completion) and outs[1].usage.prompt_tokens > 32  # 2 x 16 image tokens
    text_only = LlamaCppBackend(tiny[0], None, n_ctx=256)
    try:
        (err,) = text_only.generate([_request("a dog")])
        assert isinstance(err, BackendError) and "mmproj" in str(err)
        assert not text_only.capabilities.images
    finally:
        text_only.close()


def test_unknown_spec_option_is_rejected(tiny: tuple[Path, Path]) -> None:
    with pytest.raises(BackendError, match="unknown llamacpp option"):
        load_backend(f"llamacpp:{tiny[0]}?mmproj={tiny[1]}&ctx=512")


# -- served mode: python -m llama_cpp.server with the projector -------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tiny: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory):
    """``python -m llama_cpp.server`` on 127.0.0.1 with the tiny model, stopped after the module."""
    import subprocess
    import sys
    import time

    for extra in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        pytest.importorskip(extra)
    httpx = pytest.importorskip("httpx")
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(tiny[0]), "--clip_model_path", str(tiny[1]),
        "--chat_format", "llava-1-5", "--model_alias", "tiny", "--n_ctx", "1024",
        "--host", "127.0.0.1", "--port", str(port),
    ]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start in 60 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_server_returns_top_logprobs_for_image_requests(server: str) -> None:
    import httpx

    body = {
        "model": "tiny",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": RED.data_url()}},
                {"type": "text", "text": FLEUR_LIKE.format(c="a dog on the grass")},
            ]},
        ],
        "temperature": 0, "max_tokens": 16, "logprobs": True, "top_logprobs": 10,
        "repeat_penalty": 1.0,  # the server's default is 1.1; create_chat_completion's is 1.0
    }
    first = httpx.post(f"{server}/chat/completions", json=body, timeout=60).json()
    again = httpx.post(f"{server}/chat/completions", json=body, timeout=60).json()
    choice = first["choices"][0]
    assert re.fullmatch(r"0\.\d", choice["message"]["content"].strip())
    steps = choice["logprobs"]["content"]
    assert steps and all(s["top_logprobs"] for s in steps)
    assert [s["token"] for s in steps][-2:] == [".", choice["message"]["content"].strip()[-1]]
    assert first["usage"]["prompt_tokens"] > 16  # the image's tokens are in the prompt
    assert again["choices"][0]["logprobs"] == choice["logprobs"]  # deterministic


@pytest.mark.slow
def test_server_through_openai_compatible_backend(server: str) -> None:
    pytest.importorskip("capjudge.backends.openai")
    be = load_backend(f"openai-compatible:{server}#tiny", extra_body={"repeat_penalty": 1.0})
    try:
        outs = be.generate([_request("a dog on the grass"), _request("a red car", GREEN)])
    finally:
        be.close()
    for out in outs:
        assert isinstance(out, Completion), out
        assert re.fullmatch(r"0\.\d", out.text)
        assert out.steps and all(s.top and s.digits is None for s in out.steps)
        assert smooth_from_steps(out.steps) is not None  # FLEUR smoothing from the server's top_logprobs


# -- end to end: FLEUR, VisCE2 and pairwise judging on the tiny model -------------------------------


@pytest.fixture(scope="module")
def judge_cls():
    return pytest.importorskip("capjudge.judges.judge", exc_type=ImportError).Judge


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("images")
    Image.new("RGB", (60, 40), (200, 30, 30)).save(d / "red.png")
    Image.new("RGB", (40, 64), (20, 160, 40)).save(d / "green.jpg", quality=95)
    return str(d / "red.png"), str(d / "green.jpg")


def _samples(images: tuple[str, str]) -> list:
    from capjudge.data.types import Sample

    red, green = images
    return [
        Sample(red, "a red car on the street", id="r1"),
        Sample(red, "a dog on the grass", id="r2"),
        Sample(green, "a dog on the grass", id="g1"),
        Sample(red, "a cat", id="r3"),
    ]


def _check_scores(results: list, *, smoothed: bool, low: float, high: float) -> None:
    assert [r.id for r in results] == ["r1", "r2", "g1", "r3"]
    for r in results:
        assert r.status == "ok", r.error
        assert r.score is not None and low <= r.score <= high
        assert r.smoothed is smoothed


@pytest.mark.slow
def test_fleur_end_to_end_in_process(judge_cls, backend: LlamaCppBackend, tiny: tuple[Path, Path], images) -> None:
    results = list(judge_cls("fleur", backend).score_many(_samples(images)))
    _check_scores(results, smoothed=True, low=0.0, high=1.0)
    assert all(re.fullmatch(r"0\.\d", (r.raw or "").strip()) for r in results)
    assert len({r.score for r in results}) > 1  # captions and images change the digit distribution
    # determinism: a freshly loaded model judges the same samples identically
    fresh = LlamaCppBackend(tiny[0], tiny[1], n_ctx=2048)
    try:
        again = list(judge_cls("fleur", fresh).score_many(_samples(images)))
    finally:
        fresh.close()
    assert [(r.score, r.raw) for r in again] == [(r.score, r.raw) for r in results]


@pytest.mark.slow
def test_visce2_end_to_end_in_process(judge_cls, backend: LlamaCppBackend, images) -> None:
    results = list(judge_cls("visce2", backend).score_many(_samples(images)))
    _check_scores(results, smoothed=False, low=0.0, high=100.0)
    assert all(r.context for r in results)  # the per-image visual context of step 1


@pytest.mark.slow
def test_pairwise_end_to_end_in_process(judge_cls, backend: LlamaCppBackend, images) -> None:
    judge = judge_cls("fleur", backend)
    red, _ = images
    graded = judge.compare(red, "a red car on the street", "a dog on the grass")
    assert graded.status == "ok" and graded.verdict in {"A", "B", "tie"}
    assert graded.scores is not None and all(s is not None for s in graded.scores)
    assert judge.compare(red, "a red car on the street", "a dog on the grass") == graded
    dual = judge.compare(red, "a red car on the street", "a dog on the grass", mode="pairwise")
    # The tiny GGUF answers every prompt with "0.d", never "Answer 1"/"Answer 2"/"Tie": both orders
    # are asked and the record says that no verdict could be read, naming the answer.
    assert dual.mode == "pairwise" and len(dual.raw) == 2 and all(r and r.startswith("0.") for r in dual.raw)
    assert dual.status == "error" and dual.verdict is None and "no verdict" in dual.error


@pytest.mark.slow
def test_judging_through_the_local_server(judge_cls, server: str, images) -> None:
    pytest.importorskip("capjudge.backends.openai")
    spec = f"openai-compatible:{server}#tiny"
    opts = {"backend_options": {"extra_body": {"repeat_penalty": 1.0}}}
    fleur = list(judge_cls("fleur", spec, **opts).score_many(_samples(images)))
    _check_scores(fleur, smoothed=True, low=0.0, high=1.0)
    visce2 = list(judge_cls("visce2", spec, **opts).score_many(_samples(images)))
    _check_scores(visce2, smoothed=False, low=0.0, high=100.0)
    pair = judge_cls("fleur", spec, **opts).compare(images[0], "a red car on the street", "a dog on the grass")
    assert pair.status == "ok" and pair.verdict in {"A", "B", "tie"}


def test_lazy_spec_checks_files_and_knows_the_identity_without_loading(backend: LlamaCppBackend, tiny: tuple[Path, Path], tmp_path: Path) -> None:
    from capjudge.backends.lazy import LazyBackend

    model, mmproj = tiny
    lazy = load_backend(f"llamacpp:{model}?mmproj={mmproj}&n_ctx=2048&n_threads=2", lazy=True)
    assert isinstance(lazy, LazyBackend) and not lazy.loaded
    assert lazy.identity() == backend.identity() and lazy.spec == backend.spec and lazy.model == backend.model
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        load_backend(f"llamacpp:{tmp_path / 'nope.gguf'}", lazy=True)
