"""Open thinking models on ``llamacpp:`` (issue 22, items 2 and 5): a tiny GGUF with Qwen3's
hybrid chat template (capjudge.testing.tiny_gguf_qwen, thinking variant) writes
``<think>score 97 out of 100, or 3</think>`` and then its answer. FLEUR's smoothed score equals
the official rule applied to llama-cpp-python's own logits (its chat handler renders the GGUF's
template, ``logits_all``) at the final answer's digits; a first-integer method reads the final
answer; ``compare`` reads the verdicts after the reasoning; ``thinking=off`` renders the template
with ``enable_thinking=False``; a reasoning cut off is an error record; ``thinking=on`` on a GGUF
whose template has no switch is a usage error before the model loads."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capjudge import Judge, load_backend
from capjudge.backends.base import DIGITS
from capjudge.backends.options import OptionError

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = [pytest.mark.slow]

CATS = Path(__file__).resolve().parents[1] / "examples" / "images" / "cats.jpg"
REASONING = "score 97 out of 100, or 3"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    from capjudge.testing.tiny_gguf_qwen import build_tiny_thinking_gguf

    folder = tmp_path_factory.mktemp("tiny-thinking-gguf")
    model, mmproj = build_tiny_thinking_gguf(folder)
    verdicts, _ = build_tiny_thinking_gguf(folder, verdicts=True)
    return model, mmproj, verdicts


def _recording(backend: Any) -> list[Any]:
    seen: list[Any] = []
    inner = backend.generate

    def generate(requests: Any) -> Any:
        seen.extend(requests)
        return inner(requests)

    backend.generate = generate
    return seen


def _official(model: Path, mmproj: Path, request: Any) -> tuple[float, str]:
    """llama-cpp-python's own greedy chat on the same messages (no enable_thinking: the template's
    default, thinking) and FLEUR's rule at the digits of the answer after ``</think>``."""
    from llama_cpp.llama_chat_format import MTMDChatHandler

    messages = []
    for m in request.messages:
        parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": img.data_url()}} for img in m.images]
        messages.append({"role": m.role, "content": [*parts, {"type": "text", "text": m.content}] if parts else m.content})
    llm = llama_cpp.Llama(model_path=str(model), chat_handler=MTMDChatHandler(clip_model_path=str(mmproj), verbose=False), n_ctx=1024, logits_all=True, verbose=False)
    try:
        ref = llm.create_chat_completion(messages=messages, temperature=0.0, repeat_penalty=1.0, max_tokens=24)
        n_pos = ref["usage"]["prompt_tokens"]
        generated = list(llm.input_ids[n_pos : llm.n_tokens])
        pieces = [llm.detokenize([t]).decode("utf-8") for t in generated]
        digit_ids = [llm.tokenize(d.encode(), add_bos=False)[0] for d in DIGITS]
        close = pieces.index("</think>")
        at = [k for k in range(close + 1, len(pieces)) if pieces[k].strip()]
        answer = "".join(pieces[k] for k in at)

        def probs(k: int) -> list[float]:
            logits = np.asarray(llm.scores[n_pos - 1 + k], dtype=np.float64)
            logp = logits - np.logaddexp.reduce(logits)
            return [math.exp(logp[i]) for i in digit_ids]

        score = 0.1 * sum(d * p for d, p in enumerate(probs(at[2])))
        if len(str(float(answer))) > 3:
            score += 0.01 * sum(d * p for d, p in enumerate(probs(at[3])))
        return score, answer
    finally:
        llm.close()


def test_fleur_and_first_integer_read_the_final_answer(gguf: tuple[Path, Path, Path]) -> None:
    model, mmproj, _ = gguf
    backend = load_backend(f"llamacpp:{model}?mmproj={mmproj}", thinking_budget=16)
    seen = _recording(backend)
    try:
        r = Judge("fleur", backend).score(CATS, "two cats lying on a pink blanket")
        assert r.error is None, r.error
        assert r.details["reasoning"] == REASONING and r.details["reasoning_tokens"] == 3
        expected, answer = _official(model, mmproj, seen[0])
        assert r.raw_score == float(answer) and r.raw_score not in (0.97, 0.3)
        assert r.smoothed is True and r.score == pytest.approx(expected, abs=1e-6)
        first = Judge("vanilla", backend).score(CATS, "a cat")
        assert first.details["reasoning"] == REASONING and first.raw_score not in (97, 100, 3)
        assert "97" not in str(first.raw)
        cut = Judge("fleur", load_backend(f"llamacpp:{model}?mmproj={mmproj}", thinking_budget=0), max_new_tokens=2).score(CATS, "a cat")
        assert cut.score is None and "did not finish within the token budget" in (cut.error or "")
    finally:
        backend.close()


def test_thinking_off_and_identity(gguf: tuple[Path, Path, Path]) -> None:
    model, mmproj, _ = gguf
    off = load_backend(f"llamacpp:{model}?mmproj={mmproj}", thinking="off")
    try:
        assert off.identity()["thinking"] == "off"
        r = Judge("fleur", off).score(CATS, "a cat")
        assert r.error is None and "reasoning" not in r.details and re.fullmatch(r"0\.\d\d?", r.raw.strip())
    finally:
        off.close()
    plain = load_backend(f"llamacpp:{model}?mmproj={mmproj}")
    try:
        assert not {"thinking", "thinking_budget", "reasoning_markers"} & set(plain.identity())
    finally:
        plain.close()


def test_compare_reads_verdicts_after_the_reasoning(gguf: tuple[Path, Path, Path]) -> None:
    _, mmproj, verdicts = gguf
    b = load_backend(f"llamacpp:{verdicts}?mmproj={mmproj}", thinking_budget=16)
    try:
        r = Judge("gpt4v-pairwise", b).compare(CATS, "two cats", "a dog")
        assert r.error is None and r.verdict in ("A", "B", "tie")
        assert r.details["reasoning"] == [REASONING, REASONING]
        assert all(v is not None and v.strip() in ("A", "B") for v in r.raw)
    finally:
        b.close()


def test_thinking_on_without_the_switch_is_refused_before_loading(tmp_path: Path) -> None:
    from capjudge.testing.tiny_gguf_qwen import build_tiny_qwen25vl_gguf

    model, mmproj = build_tiny_qwen25vl_gguf(tmp_path)
    with pytest.raises(OptionError, match=r"thinking=off: the chat template of 'tiny-qwen2.5-vl.gguf' has no enable_thinking switch"):
        load_backend(f"llamacpp:{model}?mmproj={mmproj}", thinking="off")
