"""Open thinking models on ``hf:`` (issue 22, items 2 and 5): the tiny thinking Qwen3-VL
(capjudge.testing.tiny_thinking) writes ``<think>score 97 out of 100, or 3</think>`` and then its
answer. The score is read from the final answer only (never 97 or 3 from the reasoning), FLEUR's
smoothed score equals the official rule computed here from the model's own distributions at the
final answer's digits (the model run forward by this test), the reasoning is in the record,
``--thinking off`` renders the template with ``enable_thinking=False`` (the model answers at once),
the thinking budget is added to the token budget, a reasoning cut off is an error record (also when
the template opened it), ``compare`` reads the verdict after the reasoning, and ``thinking=on`` on
a template without the switch is a usage error naming the model."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge, load_backend
from capjudge.backends.options import OptionError
from capjudge.cli import main

pytestmark = [pytest.mark.hf, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CATS = EXAMPLES / "images" / "cats.jpg"


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from capjudge.testing.tiny_thinking import build_tiny_thinking_vlm

    return build_tiny_thinking_vlm(tmp_path_factory.mktemp("tiny-thinking"))


def _with_template(folder: Path, dest: Path, template: str) -> Path:
    shutil.copytree(folder, dest)
    (dest / "chat_template.jinja").write_text(template, encoding="utf-8")
    return dest


class Recording:
    """Wraps a backend's ``generate`` to keep the requests it was given."""

    def __init__(self, backend: Any) -> None:
        self.requests: list[Any] = []
        inner = backend.generate

        def generate(requests: Any) -> Any:
            self.requests.extend(requests)
            return inner(requests)

        backend.generate = generate


def _official_fleur(backend: Any, request: Any, budget: int = 40) -> tuple[float, str]:
    """Greedy decoding by hand (the model run forward on the whole sequence each step) and FLEUR's
    rule at the digits of the answer after ``</think>``: 0.1 * E[d1] (+ 0.01 * E[d2] when the
    code's ``len(str(float(answer))) > 3``), full-vocabulary softmax."""
    import torch

    inputs = backend.encode([request])
    ids = inputs["input_ids"]
    tok = backend.tokenizer
    digit_ids = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]
    probs: list[list[float]] = []
    pieces: list[str] = []
    n_prompt = ids.shape[1]
    for _ in range(budget):
        # per-token inputs (attention mask, Qwen3-VL's mm_token_type_ids) grow with the answer: text
        grown = {k: torch.cat([v, torch.full((1, ids.shape[1] - n_prompt), 1 if k == "attention_mask" else 0, dtype=v.dtype)], dim=1) for k, v in inputs.items() if k != "input_ids" and getattr(v, "shape", None) == (1, n_prompt)}
        with torch.no_grad():
            logits = backend.net(**{**inputs, **grown, "input_ids": ids}).logits[0, -1]
        p = torch.softmax(logits.double(), dim=-1)
        nxt = int(p.argmax())
        if nxt == tok.eos_token_id:
            break
        probs.append([float(p[i]) for i in digit_ids])
        pieces.append(tok.convert_ids_to_tokens([nxt])[0])
        ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    close = pieces.index("</think>")
    answer_at = [i for i in range(close + 1, len(pieces)) if pieces[i] not in ("\n\n",)]
    answer = "".join(pieces[i] for i in answer_at)
    assert re.fullmatch(r"0\.\d\d?", answer), answer
    first = answer_at[2]
    score = 0.1 * sum(d * q for d, q in enumerate(probs[first]))
    if len(str(float(answer))) > 3:
        score += 0.01 * sum(d * q for d, q in enumerate(probs[answer_at[3]]))
    return score, answer


def test_fleur_reads_the_final_answer_and_smooths_its_digits(thinking_model: Path) -> None:
    backend = load_backend(f"hf:{thinking_model}", thinking_budget=32)
    seen = Recording(backend)
    r = Judge("fleur", backend).score(CATS, "two cats lying on a pink blanket")
    assert r.error is None, r.error
    assert r.details["reasoning"] == "score 97 out of 100, or 3"
    assert r.details["reasoning_tokens"] == 3  # <think>, the reasoning token, </think>
    assert r.raw_score not in (97, 0.97, 3, 0.3) and 0 < r.raw_score < 1
    expected, answer = _official_fleur(backend, seen.requests[0])
    assert r.raw_score == float(answer) and r.smoothed is True
    assert r.score == pytest.approx(expected, abs=1e-6)  # float32: cached decoding vs a full pass each step


def test_first_integer_method_never_reads_the_reasoning(thinking_model: Path) -> None:
    r = Judge("vanilla", f"hf:{thinking_model}", backend_options={"thinking_budget": 32}).score(CATS, "a cat")
    assert r.details.get("reasoning") == "score 97 out of 100, or 3"
    assert r.raw_score not in (97, 100, 3)
    assert "97" not in str(r.raw)


def test_thinking_off_answers_at_once(thinking_model: Path) -> None:
    b = load_backend(f"hf:{thinking_model}", thinking="off")
    assert b.identity()["thinking"] == "off"
    assert "thinking" not in load_backend(f"hf:{thinking_model}").identity()  # default: identity unchanged
    assert b.format_prompt(_messages()).endswith("<think>\n\n</think>\n\n")
    r = Judge("fleur", b).score(CATS, "two cats lying on a pink blanket")
    assert r.error is None and "reasoning" not in r.details
    assert re.fullmatch(r"0\.\d\d?", r.raw.strip())


def test_compare_reads_the_verdict_after_the_reasoning(thinking_model: Path) -> None:
    r = Judge("gpt4v-pairwise", f"hf:{thinking_model}", backend_options={"thinking_budget": 16}).compare(CATS, "two cats on a blanket", "a dog in the snow")
    assert r.error is None, r.error
    assert r.verdict in ("A", "B", "tie") and len(r.votes) == 2
    assert all(v is not None and "97" not in v for v in r.raw)  # the final answers: the verdicts
    text = json.dumps(r.details)
    assert "score 97 out of 100, or 3" in text  # the reasoning of each order is in the record


def test_cut_off_reasoning_is_an_error_record(thinking_model: Path, tmp_path: Path) -> None:
    from capjudge.testing.tiny_thinking import HYBRID_TEMPLATE

    cut = Judge("fleur", f"hf:{thinking_model}", max_new_tokens=2, backend_options={"thinking_budget": 0}).score(CATS, "a cat")
    assert cut.score is None and "did not finish within the token budget" in (cut.error or "")
    # Qwen3-VL-Thinking style: the template opens the reasoning; the answer holds no marker at all
    opened = _with_template(thinking_model, tmp_path / "opened", HYBRID_TEMPLATE.replace("<|im_start|>assistant\n", "<|im_start|>assistant\n<think>", 1))
    full = Judge("fleur", f"hf:{opened}", backend_options={"thinking_budget": 16}).score(CATS, "a cat")
    assert full.error is None and full.details["reasoning"] == "score 97 out of 100, or 3"
    short = Judge("fleur", f"hf:{opened}", max_new_tokens=1, backend_options={"thinking_budget": 0}).score(CATS, "a cat")
    assert short.score is None and "did not finish" in (short.error or ""), short


def test_thinking_switch_missing_is_a_usage_error(thinking_model: Path, tmp_path: Path) -> None:
    from capjudge.testing.tiny_vlm import QWEN_VL_TEMPLATE

    plain = _with_template(thinking_model, tmp_path / "plain", QWEN_VL_TEMPLATE)
    with pytest.raises(OptionError, match=r"thinking=on: the chat template of .*plain.* has no enable_thinking switch"):
        load_backend(f"hf:{plain}", thinking="on")
    with pytest.raises(OptionError, match="thinking="):
        load_backend(f"hf:{thinking_model}", thinking="sometimes")


def test_cli_thinking_flags(thinking_model: Path, tmp_path: Path) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text(json.dumps({"image": str(CATS), "caption": "two cats"}) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    base = ["score", "--method", "fleur", "--backend", f"hf:{thinking_model}", "--input", str(rows), "--no-cache", "--quiet", "--allow-outside-images"]
    assert main([*base, "--out", str(out), "--thinking-budget", "16"]) == 0
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["details"]["reasoning"] == "score 97 out of 100, or 3" and 0 < rec["raw_score"] < 1
    off = tmp_path / "off.jsonl"
    assert main([*base, "--out", str(off), "--thinking", "off"]) == 0
    assert "reasoning" not in json.loads(off.read_text().splitlines()[0])["details"]
    assert main([*base, "--out", str(tmp_path / "x.jsonl"), "--thinking", "off", "--backend-opt", "thinking=on"]) == 2


def _messages() -> list[Any]:
    from capjudge.backends.base import Message

    return [Message("user", "Rate the caption.")]
