"""Single-order pairwise comparison (``mode="single"``, ``capjudge compare --order single``): one
request per pair, the caption shown first by a seeded hash (or fixed), the verdict mapped back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.arena.battles import shown_first
from capjudge.backends.base import Request
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.judges.judge import Judge
from capjudge.judges.pairwise import Pair, run_fields, shown_first_of, with_order
from capjudge.judges.voting import seeded_first
from openai_fake_server import Received, Reply, chat_body, running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CATS = str(EXAMPLES / "images" / "cats.jpg")
KEY = "sk-test-order"


def shown_text(req: Request) -> tuple[str, str]:
    """The two captions of a gpt4v-pairwise prompt, in the order shown."""
    text = req.messages[-1].content
    first = text.split("Answer 1: ", 1)[1].split("\n", 1)[0]
    second = text.split("Answer 2: ", 1)[1].split("\n", 1)[0]
    return first, second


def prefers(word: str):  # noqa: ANN201 - a scripted responder
    """A judge that prefers the caption containing ``word``, wherever it is shown."""

    def respond(req: Request) -> str:
        first, second = shown_text(req)
        return "Answer 1" if word in first else ("Answer 2" if word in second else "Tie")

    return respond


def test_seeded_first_ignores_argument_order_and_splits_the_pairs() -> None:
    pairs = [(f"img{k}.jpg", f"caption {k}", f"other {k}") for k in range(400)]
    for key, x, y in pairs[:50]:
        assert seeded_first(3, key, x, y) == seeded_first(3, key, y, x)
    firsts = sum(seeded_first(0, key, x, y) == x for key, x, y in pairs)
    assert 120 < firsts < 280  # a hash, not the argument order
    assert any(seeded_first(0, k, x, y) != seeded_first(1, k, x, y) for k, x, y in pairs)
    # The arena's choice of who is shown first is the same function, on model names.
    assert all(shown_first(5, k, "m1", "m2") == seeded_first(5, k, "m2", "m1") for k, _, _ in pairs[:50])


def test_single_order_asks_once_and_maps_the_verdict_back() -> None:
    backend = ScriptedBackend(prefers("dog"))
    judge = Judge("gpt4v-pairwise", backend)
    pairs = [Pair(CATS, f"a dog {k}", f"a cat {k}", id=str(k)) for k in range(12)] + [Pair(CATS, "a cat x", "a dog x", id="fixed", first="B")]
    results = list(judge.compare_many(pairs, mode="single"))
    assert len(backend.calls) == len(pairs)
    for p, r in zip(pairs, results, strict=True):
        assert r.mode == "single" and r.status == "ok" and len(r.votes) == 1
        assert r.verdict == ("A" if "dog" in p.caption_a else "B")
        assert r.details["shown_first"] == shown_first_of(p)
    seen = {shown_text(q) for q in backend.calls}
    for p, r in zip(pairs, results, strict=True):
        order = (p.caption_a, p.caption_b) if r.details["shown_first"] == "A" else (p.caption_b, p.caption_a)
        assert order in seen
    assert results[-1].details["shown_first"] == "B"
    shown = [r.details["shown_first"] for r in results[:-1]]
    assert "A" in shown and "B" in shown  # the hash, not always the first caption
    assert run_fields(judge, "single")["mode"] == "single"


def test_single_order_errors_keep_the_order_and_other_pairs() -> None:
    def answer(req: Request) -> str:
        first, _ = shown_text(req)
        return "I cannot tell" if "bad" in first else "Answer 1"

    judge = Judge("gpt4v-pairwise", ScriptedBackend(answer))
    pairs = [Pair(CATS, "bad one", "bad two", id="b"), Pair(CATS, "fine", "also fine", id="f"), {"image": CATS, "caption_a": "x"}, Pair(CATS, "", "y", id="e")]
    r = list(judge.compare_many(pairs, mode="single"))
    assert r[0].status == "error" and "no verdict" in r[0].error and r[0].details["shown_first"] in ("A", "B")
    assert r[1].status == "ok"
    assert r[2].status == "error" and "malformed" in r[2].error
    assert r[3].status == "error" and "empty caption" in r[3].error
    with pytest.raises(ValueError):
        Pair(CATS, "a", "b", first="C")


def test_with_order_fixes_the_seed() -> None:
    p = Pair(CATS, "a", "b")
    assert with_order(p, 0).first == shown_first_of(p, 0)
    firsts = {with_order(Pair(CATS, f"a{k}", f"b{k}"), 9).first for k in range(40)}
    assert firsts == {"A", "B"}
    assert with_order({"image": CATS}, 0) == {"image": CATS}


def fake_answer(req: Received) -> Reply:
    text = req.prompt_text()
    first = text.split("Answer 1: ", 1)[1].split("\n", 1)[0]
    return Reply(body=chat_body("Answer 1" if "orange" in first or "hat" in first else "Answer 2", model="fake"))


def test_cli_compare_order_single_against_the_fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rows = [json.loads(line) for line in (EXAMPLES / "pairs.jsonl").read_text().splitlines() if line.strip()]
    single, dual = tmp_path / "single.jsonl", tmp_path / "dual.jsonl"
    with running_server(responder=fake_answer) as srv:
        common = ["--backend", f"openai-compatible:{srv.base_url}#fake", "--images", str(EXAMPLES / "images"), "--no-cache", "--quiet", "--input", str(EXAMPLES / "pairs.jsonl")]
        assert main(["compare", *common, "--out", str(dual)]) == 0
        dual_bodies = [json.dumps(r.body, sort_keys=True) for r in srv.received]
        assert len(dual_bodies) == 2 * len(rows)
        srv.reset()
        assert main(["compare", *common, "--out", str(single), "--order", "single", "--seed", "4"]) == 0
        single_bodies = [json.dumps(r.body, sort_keys=True) for r in srv.received]
        # One request per pair, each the very request the dual-sided run sent for that order.
        assert len(single_bodies) == len(rows)
        assert set(single_bodies) <= set(dual_bodies)
        recs = [json.loads(line) for line in single.read_text().splitlines()]
        assert [r["mode"] for r in recs] == ["single"] * len(rows)
        for row, rec in zip(rows, recs, strict=True):
            p = Pair(row["image"], row["caption_a"], row["caption_b"])
            assert rec["details"]["shown_first"] == shown_first_of(p, 4)
        # Resume: nothing asked again; a dual-sided file is not continued by a single-order run.
        srv.reset()
        assert main(["compare", *common, "--out", str(single), "--order", "single", "--seed", "4"]) == 0
        assert srv.count == 0
        assert main(["compare", *common, "--out", str(dual), "--order", "single"]) == 2
        assert main(["compare", *common, "--out", str(tmp_path / "g.jsonl"), "--order", "single", "--mode", "grading"]) == 2
        assert srv.count == 0


def test_cli_compare_order_single_reads_the_shown_first_column(tmp_path: Path) -> None:
    """`capjudge compare --order single`: a `shown_first` column (A/B) fixes the caption shown first
    (against the seeded hash's choice); another value is that row's error record naming the row and
    the cause; an empty cell leaves the choice to the hash. JSONL and CSV."""
    import csv

    rows = [{"image": img, "caption_a": f"a caption {k}", "caption_b": f"another caption {k}"} for k, img in enumerate(["cats.jpg", "dog.jpg", "cats.jpg", "dog.jpg"])]
    pairs = [Pair(r["image"], r["caption_a"], r["caption_b"]) for r in rows]
    flipped = ["B" if shown_first_of(p) == "A" else "A" for p in pairs]
    cells = [flipped[0], flipped[1], "b", ""]
    src = [{"image": r["image"], "caption_a": r["caption_a"], "caption_b": r["caption_b"], "shown_first": c} for r, c in zip(rows, cells, strict=True)]
    jsonl, csv_in = tmp_path / "pairs.jsonl", tmp_path / "pairs.csv"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in src))
    with csv_in.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(src[0]))
        w.writeheader()
        w.writerows(src)
    for path in (jsonl, csv_in):
        out = tmp_path / f"{path.suffix[1:]}.out.jsonl"
        # The judge always prefers the caption shown first: the verdict names it.
        argv = ["compare", "--input", str(path), "--out", str(out), "--order", "single", "--backend", "scripted:Answer 1", "--images", str(EXAMPLES / "images"), "--no-cache", "--quiet"]
        assert main(argv) == 0
        recs = [json.loads(line) for line in out.read_text().splitlines()]
        assert [(r["status"], r["verdict"], (r.get("details") or {}).get("shown_first")) for r in recs[:2]] == [("ok", flipped[0], flipped[0]), ("ok", flipped[1], flipped[1])]
        assert recs[2]["status"] == "error" and recs[2]["id"] == "3" and "row 3: shown_first must be 'A' or 'B', not 'b'" in recs[2]["error"]
        assert recs[3]["status"] == "ok" and recs[3]["verdict"] == recs[3]["details"]["shown_first"] == shown_first_of(pairs[3])
