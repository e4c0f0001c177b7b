"""``thinking=on|off|auto``, ``thinking_budget`` and ``reasoning_markers`` (issue 22, item 2)
without a model: the plan (template variables, budget, markers), the template-opened cut-off,
the OpenAI-compatible body against the fake server (``chat_template_kwargs``, ``max_tokens`` with
the budget, the separate reasoning field read after a thinking server), the usage errors
(``openai:``, clashes with ``--backend-opt`` and ``extra_body``), identities unchanged by default,
and the thinking presets of ``capjudge judges --json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge import Judge, load_backend
from capjudge.backends.base import Completion
from capjudge.backends.options import OptionError
from capjudge.backends.presets import PRESETS, preset_for_config
from capjudge.backends.thinking import DEFAULT_THINKING_BUDGET, Thinking, parse, plan
from capjudge.cli import main
from capjudge.judges.reasoning import final_answer
from openai_fake_server import Received, Reply, chat_body, running_server

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CATS = EXAMPLES / "images" / "cats.jpg"
KEY = "sk-test-THINKOPT-5b2"
HYBRID = "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
OPENS = "<|im_start|>assistant\n<think>\n"


def test_plan_modes_budgets_and_markers() -> None:
    auto = plan(Thinking(), HYBRID, "m")
    assert auto.template_kwargs == {} and auto.extra_tokens == DEFAULT_THINKING_BUDGET and auto.watch_prompt
    assert plan(Thinking("on", 64), HYBRID, "m").template_kwargs == {"enable_thinking": True}
    off = plan(Thinking("off", 64), HYBRID, "m")
    assert off.template_kwargs == {"enable_thinking": False} and off.extra_tokens == 0
    # a template without markers thinks by default only when the preset says so
    assert plan(Thinking(), "<|im_start|>assistant\n", "m").extra_tokens == 0
    assert plan(Thinking(), "<|im_start|>assistant\n", "m", preset_thinks=True).extra_tokens == DEFAULT_THINKING_BUDGET
    assert plan(Thinking(budget=10), None, "m").extra_tokens == 10
    with pytest.raises(OptionError, match=r"thinking=on: the chat template of 'my/model' has no enable_thinking switch"):
        plan(Thinking("on"), OPENS, "my/model")
    # a server: kwargs whatever its template; auto adds only a given budget
    assert plan(Thinking("off"), None, "m", local=False).template_kwargs == {"enable_thinking": False}
    assert plan(Thinking(), None, "m", local=False).extra_tokens == 0
    kimi = plan(Thinking(), "<|im_assistant|>\u25c1think\u25b7", "m")
    assert kimi.markers == "kimi" and kimi.pair == ("\u25c1think\u25b7", "\u25c1/think\u25b7")
    assert plan(Thinking(markers="[R],[/R]"), None, "m").pair == ("[R]", "[/R]")
    for bad in ({"thinking": "maybe"}, {"thinking_budget": "-1"}, {"thinking_budget": "lots"}, {"reasoning_markers": "nope"}):
        with pytest.raises(OptionError):
            parse(bad)
    assert Thinking().identity() == {} and Thinking("off", 5).identity() == {"thinking": "off", "thinking_budget": 5}


def test_annotate_marks_a_template_opened_reasoning_and_the_reader_cuts_it_off() -> None:
    p = plan(Thinking(), OPENS, "m")
    out = Completion(text="the image shows 97 cats", finish_reason="length")
    p.annotate(out, lambda _: "<|im_start|>assistant\n<think>\n", ())
    assert out.meta == {"reasoning_opened": True}
    fa = final_answer(out)
    assert fa.cut_off and fa.reasoning == "the image shows 97 cats"
    done = Completion(text="I count 97</think>\n\n0.4")
    p.annotate(done, lambda _: "<|im_start|>assistant\n<think>\n", ())
    assert final_answer(done).completion.text == "\n\n0.4" and not final_answer(done).cut_off
    # the prompt did not open it (thinking off): an answer without markers is an answer
    plain = Completion(text="0.4")
    p.annotate(plain, lambda _: "<|im_start|>assistant\n<think>\n\n</think>\n\n", ())
    assert plain.meta == {} and final_answer(plain).plain
    # a server that split the reasoning out sent the answer: not a cut-off
    sep = Completion(text="0.4", meta={"reasoning_opened": True, "reasoning": "97?"})
    assert not final_answer(sep).cut_off and final_answer(sep).completion.text == "0.4"


def test_thinking_presets_are_listed_with_their_markers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judges", "--json"]) == 0
    rows = {r["judge"]: r for r in (json.loads(x) for x in capsys.readouterr().out.splitlines())}
    thinking = {name for name, r in rows.items() if r["thinking"]}
    assert thinking == {"qwen3-vl-thinking", "qwen3-hybrid", "glm-4.1v-thinking", "glm-4.5v", "kimi-vl-thinking", "llava-critic-r1"}
    assert rows["kimi-vl-thinking"]["reasoning_markers"] == ["\u25c1think\u25b7", "\u25c1/think\u25b7"]
    assert rows["qwen3-vl-thinking"]["reasoning_markers"] == ["<think>", "</think>"]
    assert rows["llava-critic-r1"]["answer_box"] == "\\boxed{}"
    assert rows["glm-4.1v-thinking"]["answer_box"].startswith("<|begin_of_box|>")
    assert rows["qwen2.5-vl"]["thinking"] is None and rows["qwen2.5-vl"]["reasoning_markers"] is None
    assert preset_for_config({"model_type": "qwen3_vl"}, "Qwen/Qwen3-VL-8B-Thinking") is PRESETS["qwen3-vl-thinking"]
    assert preset_for_config({"model_type": "qwen3_vl"}, "Qwen/Qwen3-VL-8B-Instruct") is PRESETS["qwen3-vl"]
    assert preset_for_config({"model_type": "qwen2_5_vl"}, "lmms-lab/LLaVA-Critic-R1-7B") is PRESETS["llava-critic-r1"]
    assert preset_for_config({"model_type": "glm4v"}) is PRESETS["glm-4.1v-thinking"]


def test_glm_answer_box_is_read_after_the_reasoning() -> None:
    from capjudge.backends.scripted import ScriptedBackend

    glm = "<think>I count 97 objects, maybe 3.</think><answer>It fits well: <|begin_of_box|>85<|end_of_box|></answer>"
    r = Judge("vanilla", ScriptedBackend(glm)).score(CATS, "two cats")
    assert r.raw_score == 85 and r.details["boxed"] is True and r.details["reasoning"].startswith("I count 97")
    both = "<think>x</think> \\boxed{70} and <|begin_of_box|>20<|end_of_box|>"
    assert Judge("vanilla", ScriptedBackend(both)).score(CATS, "two cats").raw_score == 70  # \\boxed{} first


def _thinking_server(req: Received) -> Reply:
    """vLLM with ``--reasoning-parser qwen3``: thinking unless the template was told otherwise."""
    kwargs = (req.body or {}).get("chat_template_kwargs") or {}
    pairwise = "Answer 1" in req.prompt_text()
    final = "Answer 1" if pairwise else "0.4"
    body = chat_body(final, model="qwen3-vl")
    if kwargs.get("enable_thinking", True):
        body["choices"][0]["message"]["reasoning"] = "score 97 out of 100, or 3"
    return Reply(body=body)


def test_openai_compatible_sends_chat_template_kwargs_and_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with running_server(responder=_thinking_server) as srv:
        spec = f"openai-compatible:{srv.base_url}#qwen3-vl"
        assert "thinking" not in load_backend(spec).identity()
        on = Judge("vanilla", spec, backend_options={"thinking": "on", "thinking_budget": 100}).score(CATS, "a cat")
        sent = srv.received[-1].body
        assert sent["chat_template_kwargs"] == {"enable_thinking": True}
        assert on.raw_score == 0.4 and on.details["reasoning"] == "score 97 out of 100, or 3"
        plain = Judge("vanilla", spec).score(CATS, "a cat")
        assert "chat_template_kwargs" not in srv.received[-1].body
        assert sent["max_tokens"] == srv.received[-1].body["max_tokens"] + 100
        assert plain.raw_score == 0.4
        rows = tmp_path / "pairs.jsonl"
        rows.write_text(json.dumps({"id": "p", "image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}) + "\n", encoding="utf-8")
        out = tmp_path / "out.jsonl"
        args = ["compare", "--backend", spec, "--images", str(EXAMPLES / "images"), "--input", str(rows), "--no-cache", "--quiet"]
        assert main([*args, "--out", str(out), "--thinking", "off"]) == 0
        rec = json.loads(out.read_text().splitlines()[0])
        assert rec["status"] == "ok" and "reasoning" not in rec["details"]
        assert all(r.body["chat_template_kwargs"] == {"enable_thinking": False} for r in srv.received[-2:])
        assert load_backend(spec, thinking="off").identity()["thinking"] == "off"
        with pytest.raises(OptionError, match="disagree"):
            load_backend(spec, thinking="off", extra_body='{"chat_template_kwargs": {"enable_thinking": true}}')
    assert KEY not in out.read_text()


def test_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(OptionError, match="reasoning_effort"):
        load_backend("openai:gpt-4o", thinking="on")
    args = ["score", "--method", "fleur", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache", "--quiet"]
    assert main([*args, "--backend", "openai:gpt-4o", "--thinking", "on"]) == 2
    assert "reasoning_effort" in capsys.readouterr().err
    assert main([*args, "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--thinking-budget", "5", "--backend-opt", "thinking_budget=6"]) == 2
    assert "disagree" in capsys.readouterr().err
