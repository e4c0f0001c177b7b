"""CaptionQA (method ``captionqa``) against the official ``qa.py`` (tests/official_captionqa.py, a
verification copy): the planned shuffles and prompts, the credits of every answer letter, the
letter reader, the request bodies on the fake OpenAI server, qa.py's final summary, and the
offline run on examples/. The question set is tests/data/captionqa/questions.json, written for
these tests in the benchmark's schema (58 questions over 15 images: yes/no by options and by
opening, one-question rows, entries qa.py skips; the benchmark's data may not be redistributed)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

import official_captionqa as oc
from capjudge import Judge, Sample
from capjudge.judges.captionqa import judge_answer, summary_lines, summary_rows
from capjudge.judges.captionqa_set import PlannedQuestion, plan, question_plan, read_entries
from capjudge.parsing.captionqa import LETTERS, answer_letter, is_yesno, option_lines
from capjudge.prompts.registry import get_template
from capjudge.run.summary import RunTally
from openai_fake_server import FakeOpenAIServer, Received, Reply, chat_body, running_server

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "tests" / "data" / "captionqa" / "questions.json"
ENTRIES: list[dict[str, Any]] = json.loads(QUESTIONS.read_text(encoding="utf-8"))
IDS = [str(e["id"]) for e in ENTRIES if e.get("id") is not None]
ALL = sorted(set(IDS))
# images without a caption: qa.py skips them without advancing its random.Random(0)
SKIPPED = {"nat_002", "doc_003", "eco_001", "emb_100"}
KEY = "sk-test-captionqa"
FAST = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "timeout": 10.0, "concurrency": 1}
# answers of every form the reader meets: letters, numbers, "Answer: ", thinking, newlines, none
ANSWERS = ["A", "B", "C", "D", "E", "F", "Answer: B", "</think>\nC", "2", "7", "(d)", "I think A\nB", "", "Z", "Cannot", " a "]


def caption_of(key: str) -> str:
    return f"Caption of {key}:\nthe {key[:3]} scene, described at length. "


def official_plan(captioned: set[str]) -> tuple[list[str], list[tuple[Any, ...]]]:
    prompts, meta, _, _ = oc.prepare(ENTRIES, {k: caption_of(k) for k in captioned})
    return prompts, meta


def planned(captioned: set[str] | None) -> list[PlannedQuestion]:
    p = plan(read_entries(QUESTIONS), frozenset(captioned) if captioned is not None else None)
    return sorted((q for qs in p.by_image.values() for q in qs), key=lambda q: q.position)


def prompt_of(q: PlannedQuestion) -> str:
    return get_template("captionqa").render(caption=caption_of(q.image), question=q.question, options=option_lines(q.shown))


def answer_for(prompt: str) -> str:
    """A fixed answer per prompt (both sides answer the same prompt the same way)."""
    return ANSWERS[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(ANSWERS)]


@pytest.mark.parametrize("captioned", [set(ALL), set(ALL) - SKIPPED], ids=["all-captioned", "skipped-images"])
def test_shuffles_prompts_and_credits_equal_qa_py(captioned: set[str]) -> None:
    prompts, meta = official_plan(captioned)
    mine = planned(captioned if captioned != set(ALL) else None)
    assert len(mine) == len(meta) >= (50 if captioned == set(ALL) else 35)
    assert sum(len(q.options) == len(q.choices) for q in mine) >= 8  # yes/no questions: no added option
    for q, m, prompt in zip(mine, meta, prompts):
        image_key, q_idx, perm, n_opts, gt_idx, data = m
        assert (q.image, q.q_idx, list(q.perm), len(q.options), q.truth) == (image_key, q_idx, perm, n_opts, gt_idx)
        assert prompt_of(q) == prompt  # byte for byte
        # every letter a judge may answer (and a few other answers): qa.py's credit
        for answer in [*LETTERS[: n_opts + 1], *ANSWERS]:
            official = oc.score([prompt], [m], lambda _p, a=answer: a)[image_key][0]
            got = judge_answer(q, answer.strip())
            assert {k: got[k] for k in ("model_answer", "is_correct", "is_cannot_answer", "score", "category")} == {k: official[k] for k in ("model_answer", "is_correct", "is_cannot_answer", "score", "category")}, (q.image, q.q_idx, answer)


def test_skipped_images_shift_the_later_shuffles() -> None:
    """The shuffles depend on the images that have a caption: the plan follows them (not a per-image seed)."""
    full = {(q.image, q.q_idx): q.perm for q in planned(None)}
    part = {(q.image, q.q_idx): q.perm for q in planned(set(ALL) - SKIPPED)}
    assert any(full[k] != part[k] for k in part)


def test_reader_and_yesno_equal_qa_py() -> None:
    texts = [*ANSWERS, "B.", "b", "Answer: 3", "The answer is C", "A\nB\nC", "x</think>Answer: D\nE", "</think>", "12", "0", "10", "Option 4", "ÄB C", "Answer:C", "\nD"]
    for text in texts:
        for n in (1, 2, 3, 5, 12):
            assert answer_letter(text, n) == oc.extract_letter(text, n), (text, n)
    cases = [("Is it red?", ["red", "blue"]), ("What?", ["Yes", "No"]), ("What?", ["None", "Two"]), ("Which?", ["eyes", "nose"]), ("  DOES it?", ["a", "b"]), ("Isolated?", ["a", "b"]), ("must go", ["x", "y"]), ("What?", [1, 2])]
    for question, choices in cases:
        assert is_yesno(question, choices) == oc.is_yesno_question(question, choices), (question, choices)


def test_template_texts_are_qa_py_bytes() -> None:
    assert get_template("captionqa_system").render() == oc.SYSTEM_PROMPT
    assert get_template("captionqa").render(caption="c {{ x }}\n", question="q?", options=option_lines(["one", 2])) == oc.build_caption_qa_prompt("c {{ x }}\n", "q?", ["one", 2])


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    folder = tmp_path_factory.mktemp("cqa")
    for key in ALL:
        Image.new("RGB", (8, 8), (10, 20, 30)).save(folder / f"{key}.png")
    return folder


def respond(req: Received) -> Reply:
    user = [m["content"] for m in req.body["messages"] if m["role"] == "user"][0]
    return Reply(body=chat_body(answer_for(user)))


def test_requests_scores_and_summary_equal_qa_py(server: FakeOpenAIServer, images: Path, tmp_path: Path) -> None:
    server.reset()
    server.responder = respond
    captioned = set(ALL) - SKIPPED
    inp = tmp_path / "captions.jsonl"
    # ids of the input's own (not the set's): each sample found by its image file's stem
    rows = [{"id": f"row-{k}", "image": str(images / f"{k}.png"), "caption": caption_of(k)} for k in sorted(captioned)]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    options = {"questions": str(QUESTIONS), "captioned": str(inp)}
    model = "Qwen/Qwen2.5-72B-Instruct"
    with Judge("captionqa", f"openai:{model}", backend_options={"base_url": server.base_url, "api_key": KEY, **FAST}, method_options=options) as j:
        samples = [Sample(r["image"], r["caption"], id=r["id"]) for r in rows]
        # one at a time, last first (a resumed run): the plan, not the run's order, gives the shuffles
        results = [list(j.score_many([s]))[0] for s in reversed(samples)][::-1]
    prompts, meta = official_plan(captioned)
    bodies = sorted(json.dumps(dict(r.body), sort_keys=True) for r in server.received)
    assert bodies == sorted(json.dumps(oc.request_body(p, model), sort_keys=True) for p in prompts)
    official = oc.score(prompts, meta, answer_for)
    ok = [r for r in results if r.ok]
    assert {r.details["steps"]["image"] for r in ok} == set(official)  # images whose questions are all skipped: error records
    for r in ok:
        items = official[r.details["steps"]["image"]]
        assert [q["score"] for q in r.details["steps"]["questions"]] == [q["score"] for q in items]
        assert [q["model_response"] for q in r.details["steps"]["questions"]] == [q["model_response"] for q in items]
        assert r.score == pytest.approx(sum(q["score"] for q in items) / len(items), abs=1e-12)
        assert r.details["counts"]["total"] == len(items)
    for r in results:
        if not r.ok:
            assert "no question qa.py asks" in (r.error or "")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        oc.print_final_summary(official)
    got = [q for r in ok for q in r.details["steps"]["questions"]]
    assert "\n".join(summary_lines(got, oc.EVAL_MODEL)) + "\n" == out.getvalue()
    tally = RunTally(method="captionqa")
    for r in results:
        tally.add(r)
    rows_printed = dict(tally.score_rows())
    assert rows_printed["CaptionQA overall Average score"] in out.getvalue()
    assert rows_printed["CaptionQA overall Total score"] in out.getvalue()
    assert any(label.startswith("CaptionQA category ") for label in rows_printed)
    assert summary_rows(got) == [row for row in tally.score_rows() if row[0].startswith(("CaptionQA category", "CaptionQA overall"))]


def test_bad_question_sets_and_samples_are_error_records(images: Path, tmp_path: Path) -> None:
    def run(options: dict[str, str], image: str = "nat_001") -> str:
        with Judge("captionqa", "scripted:A", method_options=options) as j:
            res = j.score(str(images / f"{image}.png"), "a caption")
        assert not res.ok
        return res.error or ""

    assert "needs the question set" in run({})
    assert "does not exist" in run({"questions": str(tmp_path / "missing.json")})
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": 1}', encoding="utf-8")
    assert "holds a list of entries" in run({"questions": str(bad)})
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"id": "zzz", "questions": []}]), encoding="utf-8")
    assert "not in the question set" in run({"questions": str(other)})
    only = tmp_path / "only.jsonl"
    only.write_text(json.dumps({"id": "x", "image": "doc_001.png", "caption": "c"}) + "\n", encoding="utf-8")
    assert "no row in the captioned input file" in run({"questions": str(QUESTIONS), "captioned": str(only)})
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps([{"id": "nat_001", "questions": [{"question": "Which?", "choices": [str(i) for i in range(26)], "answer": "1"}]}]), encoding="utf-8")
    assert "more than the 26 letters" in run({"questions": str(wide)})


def test_question_set_as_jsonl_folder_and_parquet(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    half = len(ENTRIES) // 2
    (folder / "a.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ENTRIES[:half]), encoding="utf-8")
    (folder / "b.json").write_text(json.dumps(ENTRIES[half:]), encoding="utf-8")
    assert read_entries(folder) == ENTRIES
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [e for e in ENTRIES if e.get("id") and e.get("questions") and all(isinstance(c, str) for q in e["questions"] for c in q["choices"]) and all(isinstance(q["category"], str) for q in e["questions"])]
    table = pa.Table.from_pylist([{"id": e["id"], "image": b"\x89PNG", "questions": e["questions"]} for e in rows])
    pq.write_table(table, tmp_path / "set.parquet")
    assert question_plan(str(tmp_path / "set.parquet")).by_image == plan(rows, None, source=str(tmp_path / "set.parquet")).by_image


def test_examples_run_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from capjudge.cli.app import main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "captionqa.jsonl"
    argv = ["score", "--method", "captionqa", "--method-option", "questions=examples/captionqa/questions.json", "--backend", "scripted:A?rules=examples/scripted_captionqa.json", "--images", "examples/images", "--input", "examples/captions.jsonl", "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["status"] for r in records] == ["ok"] * 6
    assert all(r["details"]["method_options"]["captioned"] == "examples/captions.jsonl" for r in records)
    printed = capsys.readouterr().out
    assert "CaptionQA overall" in printed and "Average score" in printed
    assert main(argv) == 0  # a re-run keeps every record
    assert "kept from --out" in capsys.readouterr().out


@pytest.mark.slow
def test_tiny_hf_answers_captionqa_text_only(hf_backend: Any) -> None:
    """A local backend runs the text-only requests: one per question, no image, every sample a record."""
    from capjudge.backends.scripted import ScriptedBackend

    seen: list[Any] = []

    def answer(request: Any) -> Any:
        seen.append(request)
        return hf_backend.generate([request])[0]

    sample = Sample(str(ROOT / "examples" / "images" / "dog.jpg"), "a black dog wearing headphones.", id="d1")
    with Judge("captionqa", ScriptedBackend(answer, model="spy"), method_options={"questions": str(ROOT / "examples" / "captionqa" / "questions.json")}) as j:
        res = j.score(sample)
    assert res.ok, res.error
    assert len(seen) == res.details["calls"] == 3 and all(not m.images for r in seen for m in r.messages)
    assert [m.role for m in seen[0].messages] == ["system", "user"] and seen[0].config.max_new_tokens == 4


def test_a_captions_questions_go_out_together_and_a_failed_one_fails_the_caption(images: Path) -> None:
    """The questions of a caption do not wait on each other: one batch (one round in batch mode);
    a backend error on one of them is the caption's error record, the other captions scored."""
    from capjudge.backends.scripted import ScriptedBackend

    class Recording(ScriptedBackend):
        batches: list[int] = []

        def generate(self, requests: Any) -> Any:
            self.batches.append(len(requests))
            return super().generate(requests)

    def answer(request: Any) -> Any:
        text = request.messages[-1].content
        return RuntimeError("server gone") if "bad caption" in text else "A"

    backend = Recording(answer, model="rec")
    opts = {"questions": str(QUESTIONS)}
    n_questions = len(plan(read_entries(QUESTIONS), None).by_image["nat_001"])
    with Judge("captionqa", backend, method_options=opts, batch_size=64) as j:
        good, bad = list(j.score_many([Sample(str(images / "nat_001.png"), "good caption", id="g"), Sample(str(images / "nat_003.png"), "bad caption", id="b")]))
    assert good.ok and good.details["calls"] == n_questions
    assert not bad.ok and "server gone" in (bad.error or "")
    assert backend.batches[0] >= n_questions  # every question of the first caption in the first batch


def test_cli_needs_a_readable_question_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from capjudge.cli.app import main

    monkeypatch.chdir(ROOT)
    base = ["score", "--method", "captionqa", "--backend", "scripted:A", "--images", "examples/images", "--input", "examples/captions.jsonl", "--out", str(tmp_path / "o.jsonl"), "--cache-dir", str(tmp_path / "cache")]
    assert main(base) == 2
    assert main([*base, "--method-option", f"questions={tmp_path / 'missing'}"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    assert main([*base, "--method-option", f"questions={bad}"]) == 2
    assert not (tmp_path / "o.jsonl").exists()


def test_batch_mode_asks_every_question_in_one_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from capjudge.cli.app import main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "b.jsonl"
    with running_server(responder=respond) as srv:
        argv = ["score", "--method", "captionqa", "--method-option", "questions=examples/captionqa/questions.json", "--backend", f"openai-compatible:{srv.base_url}#m",
                "--images", "examples/images", "--input", "examples/captions.jsonl", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet", "--batch", "--wait", "--poll-interval", "0.05"]  # fmt: skip
        assert main(argv) == 0
        assert len(srv.batches) == 1  # one round: all 18 questions of the 6 captions
        batch_url = srv.base_url
    batch = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["status"] for r in batch] == ["ok"] * 6
    with running_server(responder=respond) as online:
        argv_online = [a.replace(batch_url, online.base_url) for a in argv if a not in ("--batch", "--wait", "--poll-interval", "0.05")]
        argv_online[argv_online.index("--out") + 1] = str(tmp_path / "online.jsonl")
        argv_online[argv_online.index("--cache-dir") + 1] = str(tmp_path / "cache-online")
        assert main(argv_online) == 0
    online_records = [json.loads(line) for line in (tmp_path / "online.jsonl").read_text(encoding="utf-8").splitlines()]

    def same(rec: dict[str, Any]) -> Any:
        return (rec["id"], rec["score"], rec["details"]["steps"], rec["details"]["counts"])

    assert [same(r) for r in batch] == [same(r) for r in online_records]  # the records of an online run
