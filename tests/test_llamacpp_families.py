"""llama.cpp backend beyond LLaVA-1.5: tiny random-weight Qwen2.5-VL and Gemma 3 GGUF pairs (built
offline by capjudge.testing.tiny_gguf_qwen / tiny_gguf_gemma) through libmtmd's generic path, the
prompt format chosen from the GGUF headers, and the errors for pairs llama.cpp cannot run.

The real multimodal path runs: clip.cpp encodes the image (Qwen2.5-VL's window-attention tower and
merger; Gemma 3's pooled SigLIP), libmtmd places it (Qwen: multimodal rotary positions, M-RoPE, an
image taking max(rows, columns) positions; Gemma 3: bidirectional attention over the image, a
sliding-window text model), and the backend reads the digits' probabilities from the logits.
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
    GenerationConfig,
    Message,
    Request,
)
from capjudge.backends.llamacpp import (  # noqa: E402
    LlamaCppBackend,
    ProjectorMismatchError,
    UnsupportedModelError,
)
from capjudge.backends.llamacpp.chat_template import render_chat_template  # noqa: E402
from capjudge.backends.llamacpp.families import (  # noqa: E402
    AUDIO_PROJECTORS,
    LLAMA_CPP_PYTHON_VERSION,
    VISION_PROJECTORS,
    read_pair,
)
from capjudge.backends.registry import load_backend  # noqa: E402
from capjudge.data.images import load_image  # noqa: E402
from capjudge.judges.smoothing import smooth_from_steps  # noqa: E402
from capjudge.testing.tiny_gguf import build_tiny_llava_gguf  # noqa: E402
from capjudge.testing.tiny_gguf_gemma import GEMMA_CHAT_TEMPLATE, build_tiny_gemma3_gguf  # noqa: E402
from capjudge.testing.tiny_gguf_qwen import QWEN_CHAT_TEMPLATE, build_tiny_qwen25vl_gguf  # noqa: E402
from llamacpp_helpers import assert_steps_match_scores, reference_chat  # noqa: E402

SYSTEM = "A chat between a curious human and an artificial intelligence assistant."
FLEUR_LIKE = "Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0.\n\nCaption: {c}\n\nScore:"


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_tiny_qwen25vl_gguf(tmp_path_factory.mktemp("tiny-qwen"), seed=0)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_tiny_gemma3_gguf(tmp_path_factory.mktemp("tiny-gemma"), seed=0)


@pytest.fixture(scope="module")
def backend(qwen: tuple[Path, Path]) -> LlamaCppBackend:
    model, mmproj = qwen
    # 2048: VisCE2's first step asks 512 new tokens after a prompt of ~850 tiny-vocabulary tokens,
    # and the prompt plus its answer budget must fit n_ctx
    be = load_backend(f"llamacpp:{model}?mmproj={mmproj}&n_ctx=2048&n_threads=2")
    assert isinstance(be, LlamaCppBackend)
    yield be
    be.close()


@pytest.fixture(scope="module")
def gemma_backend(gemma: tuple[Path, Path]) -> LlamaCppBackend:
    be = LlamaCppBackend(gemma[0], gemma[1], n_ctx=2048, n_threads=2)
    yield be
    be.close()


@pytest.fixture(scope="module", params=["qwen2.5-vl", "gemma-3"])
def family(request: pytest.FixtureRequest) -> tuple[str, tuple[Path, Path], LlamaCppBackend]:
    """Each non-LLaVA family: its name, files and loaded backend."""
    if request.param == "qwen2.5-vl":
        return request.param, request.getfixturevalue("qwen"), request.getfixturevalue("backend")
    return request.param, request.getfixturevalue("gemma"), request.getfixturevalue("gemma_backend")


def _image(color: tuple[int, int, int], size: tuple[int, int]):
    return load_image(Image.new("RGB", size, color))


RED = _image((200, 30, 30), (60, 40))  # 4 x 3 merged patches: 12 tokens, 4 positions
GREEN = _image((20, 160, 40), (40, 64))
WIDE = _image((30, 30, 200), (252, 28))  # 9 x 1: 9 tokens and 9 positions (a 1x1 image: 3 x 3)


def _request(caption: str, image=RED, *, top: int = 10, max_new: int = 16) -> Request:
    return Request(
        (Message("system", SYSTEM), Message("user", FLEUR_LIKE.format(c=caption), (image,))),
        GenerationConfig(max_new_tokens=max_new, top_logprobs=top),
    )


def _key(c: Completion) -> tuple:
    return (c.text, c.finish_reason, [s.to_dict() for s in c.steps], c.usage)


def _fresh(files: tuple[Path, Path], requests: list[Request]) -> list[Completion]:
    """Each request answered by a freshly loaded backend (nothing in its KV cache)."""
    outs = []
    for r in requests:
        be = LlamaCppBackend(files[0], files[1], n_ctx=1024)
        try:
            outs.append(be.generate_one(r))
        finally:
            be.close()
    return outs


# -- the tiny model and the family choice -----------------------------------------------------------


def test_tiny_qwen_gguf_is_deterministic_and_tokenizes_digits_one_by_one(tmp_path: Path, qwen: tuple[Path, Path]) -> None:
    a = build_tiny_qwen25vl_gguf(tmp_path / "a", seed=0)
    b = build_tiny_qwen25vl_gguf(tmp_path / "b", seed=1)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in qwen]
    assert a[0].read_bytes() != b[0].read_bytes() and a[1].read_bytes() != b[1].read_bytes()
    llm = llama_cpp.Llama(model_path=str(qwen[0]), vocab_only=True, verbose=False)
    try:
        ids = llm.tokenize(b"Score: 0.85", add_bos=True)  # the vocabulary adds no BOS
        assert [llm._model.token_get_text(i) for i in ids] == ["Score", ":", "\u0120", "0", ".", "8", "5"]
        assert llm.tokenize(b"<|im_end|>", add_bos=False, special=True) == [llm.token_eos()]
    finally:
        llm.close()


def test_tiny_gemma_gguf_is_deterministic_and_adds_its_bos(tmp_path: Path, gemma: tuple[Path, Path]) -> None:
    a = build_tiny_gemma3_gguf(tmp_path / "a", seed=0)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in gemma]
    llm = llama_cpp.Llama(model_path=str(gemma[0]), vocab_only=True, verbose=False)
    try:
        ids = llm.tokenize(b"Score: 0.85", add_bos=True)
        assert [llm._model.token_get_text(i) for i in ids] == ["<bos>", "Score", ":", "\u2581", "0", ".", "8", "5"]
    finally:
        llm.close()


def test_prompt_format_is_chosen_from_the_gguf_headers(qwen: tuple[Path, Path], tmp_path: Path) -> None:
    llava = build_tiny_llava_gguf(tmp_path / "llava", seed=0)
    lp = read_pair(*llava)
    assert (lp.architecture, lp.projector_type, lp.prompt_format, lp.chat_template) == ("llama", "mlp", "llava_v1", None)
    assert lp.identity() == {"prompt_format": "llava_v1"}  # LLaVA's identity (cache keys) as before
    qp = read_pair(*qwen)
    assert (qp.architecture, qp.projector_type, qp.prompt_format) == ("qwen2vl", "qwen2.5vl_merger", "chat_template")
    assert qp.chat_template == QWEN_CHAT_TEMPLATE and qp.family == "Qwen2.5-VL"
    assert (qp.text_width, qp.projector_width) == (64, 64)
    ident = qp.identity()
    assert ident["prompt_format"] == "chat_template" and len(ident["chat_template_digest"]) == 16
    assert ident["architecture"] == "qwen2vl" and ident["projector_type"] == "qwen2.5vl_merger"
    assert read_pair(*qwen, prompt_format="llava_v1").prompt_format == "llava_v1"  # forced
    jinja = tmp_path / "mine.jinja"
    jinja.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:")
    own = read_pair(*qwen, chat_template=jinja)
    assert own.chat_template == jinja.read_text() and own.identity()["chat_template_digest"] != ident["chat_template_digest"]


def test_projector_table_matches_the_installed_libmtmd() -> None:
    """Every projector type in the table is a name the installed libmtmd knows (its string table)."""
    if llama_cpp.__version__ != LLAMA_CPP_PYTHON_VERSION:
        pytest.skip(f"the table is for llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}")
    lib = next((Path(llama_cpp.__file__).parent / "lib").glob("libmtmd.so*"), None)
    if lib is None:
        pytest.skip("libmtmd.so not found next to llama_cpp (not a Linux build)")
    data = lib.read_bytes()
    missing = [name for name in [*VISION_PROJECTORS, *sorted(AUDIO_PROJECTORS)] if name.encode() + b"\0" not in data]
    assert missing == []
    assert not set(VISION_PROJECTORS) & AUDIO_PROJECTORS


# -- image + text -> digits with probabilities, through the GGUF's own chat template ----------------


def test_prompt_is_the_gguf_chat_template(backend: LlamaCppBackend) -> None:
    text = backend.render(_request("a dog").messages)
    assert text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<__media__>"
        f"{FLEUR_LIKE.format(c='a dog')}<|im_end|>\n<|im_start|>assistant\n"
    )
    chunks, mt_chunks, bitmaps = backend._tokenize(_request("a dog"))
    backend._free(mt_chunks, bitmaps)
    # libmtmd wraps the image in Qwen's vision tokens; under M-RoPE 12 image tokens take 4 positions
    assert [c.key[0] for c in chunks] == ["text", "media", "text"]
    assert backend._llm._model.token_get_text(chunks[0].key[1][-1]) == "<|vision_start|>"
    assert backend._llm._model.token_get_text(chunks[2].key[1][0]) == "<|vision_end|>"
    assert (chunks[1].n_tokens, chunks[1].n_pos) == (12, 4)


def test_image_request_gives_a_fleur_score_with_digit_probabilities(family) -> None:
    name, files, backend = family
    assert backend.capabilities.images and backend.capabilities.exact_digit_probs
    out = backend.generate_one(_request("a dog on the grass"))
    assert re.fullmatch(r"0\.\d", out.text), out.text
    assert out.finish_reason == "stop" and out.model == f"tiny-{name}"
    for step in out.steps:
        assert step.top[0] == (step.token, step.logprob) and len(step.top) == 10
        assert step.digits is not None and sum(math.exp(x) for x in step.digits) <= 1.0 + 1e-9
    units, dot, decimal = out.steps
    assert units.token == "0" and dot.token == "."
    assert sorted(t for t, _ in decimal.top) == list(DIGITS)
    assert dict(decimal.top) == pytest.approx(dict(zip(DIGITS, decimal.digits, strict=True)))
    smoothed = smooth_from_steps(out.steps)
    assert smoothed is not None and 0.0 <= smoothed.score <= 1.0 and smoothed.raw_score == float(out.text)
    other = backend.generate_one(_request("a dog on the grass", GREEN))
    assert other.steps[-1].digits != decimal.digits  # the image reaches the answer


def test_digit_logprobs_equal_llama_cpp_logits(family) -> None:
    """The same chat through llama-cpp-python's own MTMDChatHandler (which renders the GGUF's chat
    template itself) with logits_all=True: same answer, same number of positions, and the
    backend's log-probabilities are the log-softmax of the logits llama.cpp computed there.

    MTMDChatHandler keeps a BOS that the template writes although the tokenizer adds one too
    (Gemma 3 would start with two BOS there); its template is given without it."""
    from llama_cpp.llama_chat_format import MTMDChatHandler

    class OneBos(MTMDChatHandler):
        def _get_chat_template(self, llama_model):
            return super()._get_chat_template(llama_model).replace("{{ bos_token }}", "")

    _, (model, mmproj), backend = family
    caption = "a red car on the street"
    ours = backend.generate_one(_request(caption))
    chunks, mt_chunks, bitmaps = backend._tokenize(_request(caption))
    backend._free(mt_chunks, bitmaps)
    llm = llama_cpp.Llama(
        model_path=str(model), chat_handler=OneBos(clip_model_path=str(mmproj), verbose=False),
        n_ctx=1024, logits_all=True, verbose=False,
    )
    try:
        ref = reference_chat(llm, SYSTEM, FLEUR_LIKE.format(c=caption), RED.data_url())
        assert ref["choices"][0]["message"]["content"].strip() == ours.text
        # llama-cpp-python counts positions; the backend reports tokens (Qwen: the image's 12, not 4)
        n_pos = ref["usage"]["prompt_tokens"]
        assert n_pos == sum(c.n_pos for c in chunks)
        assert ours.usage.prompt_tokens == sum(c.n_tokens for c in chunks)
        digit_ids = [llm.tokenize(d.encode(), add_bos=False)[0] for d in DIGITS]
        assert_steps_match_scores(llm, ours.steps, n_pos, digit_ids)
    finally:
        llm.close()


# -- prefix reuse under M-RoPE ------------------------------------------------------------------------


def test_prefix_reuse_is_bit_identical_to_a_fresh_model(family) -> None:
    _, files, backend = family
    reqs = [
        _request("a cat on a red car"),
        _request("a cat on a red car parked in the old street"),  # extends the caption: partial reuse
        _request("a cat on a red car", GREEN),  # another image (other size, other token count)
        _request("a cat on a red bike"),  # back to the first image
        _request("a dog", WIDE),
        _request("a dog on the grass", WIDE),  # the placeholder of WIDE has 9 tokens too, in 3 positions
    ]
    ours = [backend.generate_one(r) for r in reqs]
    assert [_key(o) for o in ours] == [_key(f) for f in _fresh(files, reqs)]
    reused = [o.meta["reused_prompt_tokens"] for o in ours]
    system, image, _ = _chunks(backend, reqs[0])  # system turn and "<|vision_start|>"; the image
    lead = system.n_tokens + image.n_tokens
    assert reused[1] >= lead + 16 and (reused[1] - lead) % 16 == 0  # whole blocks of text after the image
    assert reused[2] < lead and reused[3] < lead  # another image: only the text before it
    assert reused[5] >= lead - image.n_tokens + 8  # the same wide image: system turn and image reused


def _chunks(backend: LlamaCppBackend, request: Request) -> list:
    chunks, mt_chunks, bitmaps = backend._tokenize(request)
    backend._free(mt_chunks, bitmaps)
    assert [c.key[0] for c in chunks] == ["text", "media", "text"]
    return chunks


def test_batch_groups_requests_of_one_image(family) -> None:
    backend = family[2]
    reqs = [_request("a dog", RED), _request("a dog", GREEN), _request("a cat", RED), _request("a car", GREEN)]
    outs = backend.generate(reqs)
    assert all(isinstance(o, Completion) for o in outs)
    assert outs[2].meta["reused_prompt_tokens"] > 12 and outs[3].meta["reused_prompt_tokens"] > 12
    singles = [backend.generate_one(r) for r in reversed(reqs)][::-1]
    assert [_key(o) for o in outs] == [_key(s) for s in singles]


def test_text_only_and_multi_turn_go_through_the_template(qwen: tuple[Path, Path], backend: LlamaCppBackend) -> None:
    text_only = LlamaCppBackend(qwen[0], None, n_ctx=512)
    try:
        out = text_only.generate_one(Request((Message("user", "Score:"),), GenerationConfig(max_new_tokens=6)))
        assert text_only.render((Message("user", "Score:"),)).startswith("<|im_start|>system\nYou are a helpful assistant.")
        assert re.fullmatch(r"0\.\d", out.text)
    finally:
        text_only.close()
    first = backend.generate_one(_request("a dog on the grass"))
    follow = Request(
        (*_request("a dog on the grass").messages, Message("assistant", first.text), Message("user", "Why? Tell me the reason.")),
        GenerationConfig(max_new_tokens=6),
    )
    text = backend.render(follow.messages)
    assert f"<|im_start|>assistant\n{first.text}<|im_end|>\n<|im_start|>user\nWhy?" in text
    assert backend.generate_one(follow).usage.prompt_tokens > first.usage.prompt_tokens + 8


def test_gemma_prompt_has_one_bos_and_its_image_tokens(gemma_backend: LlamaCppBackend, gemma: tuple[Path, Path]) -> None:
    be = gemma_backend
    assert read_pair(*gemma).chat_template == GEMMA_CHAT_TEMPLATE and be.pair.projector_type == "gemma3"
    text = be.render(_request("a dog").messages)
    # the template's {{ bos_token }} is dropped: the tokenizer adds BOS itself (no double BOS)
    assert text == f"<start_of_turn>user\n{SYSTEM}\n\n<__media__>{FLEUR_LIKE.format(c='a dog')}<end_of_turn>\n<start_of_turn>model\n"
    chunks = _chunks(be, _request("a dog"))
    pieces = [be._llm._model.token_get_text(t) for t in chunks[0].key[1]]
    assert pieces[:2] == ["<bos>", "<start_of_turn>"] and pieces.count("<bos>") == 1
    assert pieces[-1] == "<start_of_image>" and be._llm._model.token_get_text(chunks[2].key[1][0]) == "<end_of_image>"
    assert (chunks[1].n_tokens, chunks[1].n_pos) == (16, 16)  # fixed count, whatever the image size
    assert [(c.n_tokens, c.n_pos) for c in _chunks(be, _request("a dog", WIDE))][1] == (16, 16)


def test_gemma_cached_image_is_not_decoded_again(gemma: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    be = LlamaCppBackend(gemma[0], gemma[1], n_ctx=1024)
    decoded: list[str] = []
    real = be._bitmap
    monkeypatch.setattr(be, "_bitmap", lambda img: decoded.append(img.label) or real(img))
    try:
        outs = be.generate([_request("a dog"), _request("a cat"), _request("a dog", GREEN), _request("a cat")])
        assert decoded == [RED.label, GREEN.label]  # a fixed token count: the 1x1 placeholder matches
        assert all(isinstance(o, Completion) for o in outs)
        assert outs[1].meta["reused_prompt_tokens"] >= 10 + 16
        assert [_key(o) for o in outs] == [_key(f) for f in _fresh(gemma, [_request("a dog"), _request("a cat"), _request("a dog", GREEN), _request("a cat")])]
    finally:
        be.close()


# -- identity, lazy loading and errors ------------------------------------------------------------------


def test_identity_names_what_was_chosen(backend: LlamaCppBackend, qwen: tuple[Path, Path], tmp_path: Path) -> None:
    ident = backend.identity()
    assert ident["prompt_format"] == "chat_template" and ident["projector_type"] == "qwen2.5vl_merger"
    lazy = load_backend(f"llamacpp:{qwen[0]}?mmproj={qwen[1]}&n_ctx=1024&n_threads=2", lazy=True)
    assert not lazy.loaded and lazy.identity() == ident
    forced = load_backend(f"llamacpp:{qwen[0]}?mmproj={qwen[1]}&prompt_format=llava_v1", lazy=True)
    assert forced.identity()["prompt_format"] == "llava_v1" and forced.cache_key(_request("x")) != backend.cache_key(_request("x"))
    with pytest.raises(BackendError, match="prompt_format='qwen'"):
        load_backend(f"llamacpp:{qwen[0]}?mmproj={qwen[1]}&prompt_format=qwen", lazy=True)


def test_model_without_chat_template_needs_one(tmp_path: Path) -> None:
    model, mmproj = build_tiny_qwen25vl_gguf(tmp_path, chat_template=None)
    with pytest.raises(UnsupportedModelError, match=r"tiny-qwen2.5-vl-other-template.gguf.*no tokenizer.chat_template.*Qwen2.5-VL.*chat_template=<file.jinja>"):
        load_backend(f"llamacpp:{model}?mmproj={mmproj}", lazy=True)
    jinja = tmp_path / "qwen.jinja"
    jinja.write_text(QWEN_CHAT_TEMPLATE)
    be = load_backend(f"llamacpp:{model}?mmproj={mmproj}&chat_template={jinja}&n_ctx=1024")
    try:
        assert re.fullmatch(r"0\.\d", be.generate_one(_request("a dog")).text)
    finally:
        be.close()
    with pytest.raises(FileNotFoundError, match="nope.jinja"):
        load_backend(f"llamacpp:{model}?mmproj={mmproj}&chat_template={tmp_path / 'nope.jinja'}", lazy=True)


def test_unsupported_projectors_are_refused_naming_the_file(qwen: tuple[Path, Path], tmp_path: Path) -> None:
    _, unknown = build_tiny_qwen25vl_gguf(tmp_path / "u", projector_type="qwen9vl_merger")
    with pytest.raises(UnsupportedModelError, match=r"mmproj-qwen9vl_merger.gguf.*'qwen9vl_merger'.*does not support(.|\n)*qwen2.5vl_merger: Qwen2.5-VL"):
        LlamaCppBackend(qwen[0], unknown)
    _, audio = build_tiny_qwen25vl_gguf(tmp_path / "a", projector_type="ultravox")
    with pytest.raises(UnsupportedModelError, match=r"mmproj-ultravox.gguf.*no vision encoder"):
        load_backend(f"llamacpp:{qwen[0]}?mmproj={audio}", lazy=True)
    with pytest.raises(UnsupportedModelError, match="is a projector.*not a text model"):
        LlamaCppBackend(qwen[1], qwen[0])
    with pytest.raises(UnsupportedModelError, match="swap model and mmproj"):
        LlamaCppBackend(qwen[0], qwen[0])


def test_mismatched_projector_is_refused(qwen: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import capjudge.backends.llamacpp.backend as mod

    _, wrong = build_tiny_qwen25vl_gguf(tmp_path, projector_width=48)
    with pytest.raises(ProjectorMismatchError, match="48-wide.*width 64"):  # from the headers, before loading
        LlamaCppBackend(qwen[0], wrong)
    monkeypatch.setattr(mod, "gguf_widths", lambda *a: (None, None))  # header check unavailable: libmtmd's
    with pytest.raises(ProjectorMismatchError, match=r"could not load projector.*'qwen2.5vl_merger'.*'qwen2vl'(.|\n)*gemma3: Gemma 3"):
        LlamaCppBackend(qwen[0], wrong, n_ctx=256)


# -- end to end ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fleur_and_visce2_end_to_end(family, tmp_path: Path) -> None:
    backend = family[2]
    from capjudge.data.types import Sample
    from capjudge.judges.judge import Judge

    Image.new("RGB", (60, 40), (200, 30, 30)).save(tmp_path / "red.png")
    Image.new("RGB", (40, 64), (20, 160, 40)).save(tmp_path / "green.jpg", quality=95)
    red, green = str(tmp_path / "red.png"), str(tmp_path / "green.jpg")
    samples = [Sample(red, "a red car on the street", id="r1"), Sample(red, "a dog", id="r2"), Sample(green, "a dog", id="g1")]
    fleur = list(Judge("fleur", backend).score_many(samples))
    assert [r.id for r in fleur] == ["r1", "r2", "g1"]
    assert all(r.status == "ok" and r.smoothed and 0.0 <= r.score <= 1.0 for r in fleur), [r.error for r in fleur]
    assert len({r.score for r in fleur}) > 1
    visce2 = list(Judge("visce2", backend).score_many(samples))
    # both steps ran on every sample; the random model's answer ("0.d", or "0.0.d") may not parse
    assert all(r.context for r in visce2)
    assert all((r.status == "ok" and 0.0 <= r.score <= 100.0) or "no score in the answer" in r.error for r in visce2)
    assert any(r.status == "ok" for r in visce2)


# -- the chat template renderer alone ----------------------------------------------------------------------


def test_render_chat_template_rules() -> None:
    img = RED
    msgs = (Message("system", "S"), Message("user", "rate <M> it", (img, img)))
    typed = "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{% for p in m['content'] %}{{ p['text'] }}|{% endfor %}{% endfor %}"
    assert render_chat_template(typed, msgs, "<M>", bos="<s>", eos="</s>", strip_bos=False) == "<s>[system]S|[user]<M>|<M>|rate < M> it|"
    # the tokenizer adds BOS itself: the template's is dropped (no double BOS)
    assert render_chat_template(typed, msgs, "<M>", bos="<s>", eos="</s>", strip_bos=True).startswith("[system]")
    # a template that prints content as is gets strings, not a list's repr
    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    assert render_chat_template(plain, msgs, "<M>", bos="", eos="", strip_bos=False) == "system: S\nuser: <M><M>rate < M> it\nassistant:"
    # a final assistant message is continued
    pre = (*msgs, Message("assistant", "0."))
    assert render_chat_template(plain, pre, "<M>", bos="", eos="", strip_bos=False).endswith("assistant: 0.")
    with pytest.raises(BackendError, match="refused the conversation: no system"):
        render_chat_template("{{ raise_exception('no system') }}", msgs, "<M>", bos="", eos="", strip_bos=False)
