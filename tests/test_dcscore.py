"""DCScore (dcscore, dcscore-code) against DeCapBench's official code (tests/official_dcscore.py, commit
9f3fb10): every request body capjudge sends to the OpenAI-protocol fake server equals what the code's
``evaluate_sample`` asks its client for the same caption, human facts and answers; the per-caption numbers
and compute_results.py's DCScore equal the code's; ``dcscore`` differs only by its fixes. Fixtures are
written here in DeCapBench's schema (its data may not be redistributed)."""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import official_dcscore as official
from capjudge import Judge, Sample
from capjudge.backends.base import Request
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.parsing.dcscore import json_lines, read_json_answer, sample_scores, trial_scores
from capjudge.run.summary import RunTally
from openai_fake_server import FakeOpenAIServer, Received, Reply, running_server

KEY = "sk-test-dcscore"
FAST = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "timeout": 10.0, "concurrency": 1}
MODEL = "gpt-4o-2024-05-13"
EXTRACT, MATCH, VERIFY = "extracting atomic facts", "matching two set of atomic facts", "verifying the correctness"

HUMAN = {
    "aar_test_00001.png": ("A red car is parked on a street.", ["There is a car.", "The car is red.", "The car is parked.", "The car is on a street."]),
    "aar_test_00002.png": ("Two dogs play on grass.", ["There are two dogs.", "The dogs play.", "The dogs are on grass."]),
}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An images folder and human_annotated_oracle_facts.jsonl in DeCapBench's schema."""
    from PIL import Image

    root = tmp_path_factory.mktemp("decapbench")
    for k, name in enumerate(HUMAN):
        Image.new("RGBA" if k else "RGB", (24, 16), (200, 30 + 60 * k, 40, 255)).save(root / name, format="PNG")
    with open(root / "human_annotated_oracle_facts.jsonl", "w", encoding="utf-8") as fh:
        for name, (cap, facts) in HUMAN.items():
            fh.write(json.dumps({"image_name": name, "oracle_caption": cap, "oracle_facts": facts}) + "\n")
    return root


def fenced(items: list[dict[str, Any]]) -> str:
    return "```json\n[\n" + ",\n".join("   " + json.dumps(i) for i in items) + "\n]\n```"


FACTS = [
    {"fact": "There is a car_0.", "identifier": "car_0", "relevance": 1},
    {"fact": "The car_0 is red.", "relevance": 1},
    {"fact": "There is a vehicle.", "relevance": 0},
    {"fact": "The car_0 is on a road.", "relevance": 1},
    {"fact": "The car_0 looks expensive.", "relevance": 0},
]


def matching(ids: list[Any]) -> str:
    return fenced([{"fact": f["fact"], "matched_oracle_id": i} for f, i in zip(FACTS, ids)])


def verification(marks: list[int]) -> str:
    return fenced([{"fact": f["fact"], "verification": v} for f, v in zip(FACTS, marks)])


# "There is a vehicle." (not relevant) shares human fact 0 with "There is a car_0." (relevant): the
# code's relevant recall gives the relevant one weight 1/2, the fixed one 1. Ids 3 and "3" in one matching.
MATCHINGS = [matching([0, 1, 0, 3, "None"]), matching([0, 1, 0, "3", None]), matching([0, "None", 0, 3, "None"])]
VERIFICATIONS = [verification([1, 1, 1, 1, 0]), verification([1, 0, 1, 1, 1]), verification([1, 1, 0, 1, 0])]


def script() -> dict[str, list[str]]:
    return {EXTRACT: [fenced(FACTS)], MATCH: list(MATCHINGS), VERIFY: list(VERIFICATIONS)}


def step_of(text: str) -> str:
    return next(k for k in (EXTRACT, MATCH, VERIFY) if k in text)


def served(queues: dict[str, deque[list[str]]]) -> Callable[[Received], Reply]:
    """The fake server's responder: by step, the next list of choices of that step."""

    def respond(req: Received) -> Reply:
        texts = queues[step_of(req.prompt_text())].popleft()
        choices = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"} for i, t in enumerate(texts)]
        return Reply(body={"id": "x", "object": "chat.completion", "model": MODEL, "choices": choices, "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    return respond


class FakeClient:
    """The code's ``client``: records each ``chat.completions.create(**kwargs)`` and answers, by step,
    the next list of choices of that step (as :func:`served` does)."""

    def __init__(self, queues: dict[str, deque[list[str]]]) -> None:
        self.queues = queues
        self.calls: list[dict[str, Any]] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        content = kwargs["messages"][1]["content"]
        text = content if isinstance(content, str) else content[1]["text"]
        texts = self.queues[step_of(text)].popleft()
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=t)) for t in texts], usage=SimpleNamespace(prompt_tokens=10, completion_tokens=5))


def tries(*steps: dict[str, list[str]]) -> tuple[dict[str, deque[list[str]]], dict[str, deque[list[str]]]]:
    """Answer queues for each try's steps, twice: capjudge's server and the code's client."""

    def build() -> dict[str, deque[list[str]]]:
        q: dict[str, deque[list[str]]] = {EXTRACT: deque(), MATCH: deque(), VERIFY: deque()}
        for s in steps:
            for key, texts in s.items():
                q[key].append(list(texts))
        return q

    return build(), build()


def oracle_map(bench: Path) -> dict[str, Any]:
    return {x["image_name"]: x for x in official.load_jsonl(str(bench / "human_annotated_oracle_facts.jsonl"))}


def run_capjudge(srv: FakeOpenAIServer, bench: Path, method: str, rows: list[dict[str, Any]]) -> list[Any]:
    opts = {"oracle_facts": str(bench / "human_annotated_oracle_facts.jsonl")}
    with Judge(method, f"openai:{MODEL}", backend_options={"base_url": srv.base_url, "api_key": KEY, **FAST}, method_options=opts, images_root=str(bench)) as j:
        return j.score_many([Sample(image=r["image_path"], caption=r["caption"], references=[r["oracle_caption"]]) for r in rows])


def official_bodies(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The code's kwargs as JSON bodies; ``n=1`` (the API's default, sent by the code's extraction)
    is the one field capjudge leaves out."""
    return [{k: v for k, v in c.items() if not (k == "n" and v == 1)} for c in calls]


ROW = {"image_path": "aar_test_00001.png", "caption": "A red  car\non a road. ", "oracle_caption": "A red car is parked on a street."}


ROW_RGBA = {"image_path": "aar_test_00002.png", "caption": "Two dogs.", "oracle_caption": "Two dogs play on grass."}


@pytest.mark.parametrize(("method", "row"), [("dcscore-code", ROW), ("dcscore", ROW), ("dcscore", ROW_RGBA)])
def test_request_bodies_equal_the_official_calls(srv: FakeOpenAIServer, bench: Path, method: str, row: dict[str, str]) -> None:
    ours, theirs = tries(script())
    srv.responder = served(ours)
    (res,) = run_capjudge(srv, bench, method, [row])
    client = FakeClient(theirs)
    (result,) = official.evaluate_sample(client, dict(row), oracle_map(bench), str(bench))
    assert res.ok and result["valid"]
    bodies = [dict(r.body) for r in srv.received]
    assert bodies == official_bodies(client.calls)
    assert [b.get("n", 1) for b in bodies] == [1, 3, 3] and [b["temperature"] for b in bodies] == [1, 1, 0.3]
    # The image: RGB, JPEG at Pillow's default quality, detail high, before the text.
    image_part = bodies[2]["messages"][1]["content"][0]
    assert image_part["image_url"]["url"].startswith("data:image/jpeg;base64,") and image_part["image_url"]["detail"] == "high"


def test_code_variant_numbers_equal_the_official_ones(srv: FakeOpenAIServer, bench: Path) -> None:
    ours, theirs = tries(script())
    srv.responder = served(ours)
    (res,) = run_capjudge(srv, bench, "dcscore-code", [ROW])
    (result,) = official.evaluate_sample(FakeClient(theirs), dict(ROW), oracle_map(bench), str(bench))
    steps, want = res.details["steps"], result["eval_details"]
    for key in ("precision", "recall", "f1_score", "precision_relevant", "recall_relevant", "f1_score_relevant"):
        assert steps[f"{key}_avg"] == pytest.approx(want[key], abs=1e-12)
    assert steps["trials"] == want["scores"]["trials"]  # the same sums in the same order: equal to the bit
    assert res.score == pytest.approx((want["f1_score_relevant"] + want["f1_score"]) / 2, abs=1e-12)


def test_plain_method_fixes_the_relevant_recall_weights_and_reads_ids_as_text(srv: FakeOpenAIServer, bench: Path) -> None:
    ours, theirs = tries(script())
    srv.responder = served(ours)
    (res,) = run_capjudge(srv, bench, "dcscore", [ROW])
    (result,) = official.evaluate_sample(FakeClient(theirs), dict(ROW), oracle_map(bench), str(bench))
    got, code = res.details["steps"], result["eval_details"]
    assert got["precision_avg"] == pytest.approx(code["precision"]) and got["precision_relevant_avg"] == pytest.approx(code["precision_relevant"])
    # Trial (verification 0, matching 0): human facts 0, 1, 3 matched; facts 0 and 2 share human fact 0.
    # All facts: correct 1/2 + 1 + 1/2 + 1 = 3 over 4 human facts. Relevant (facts 0, 1, 3): fact 0 alone
    # on human fact 0 now weighs 1: 3 / 4 (the code: 1/2 + 1 + 1 = 2.5 / 4).
    first, code_first = got["trials"][0], code["scores"]["trials"][0]
    assert first["recall"] == pytest.approx(3 / 4) and code_first["recall"] == pytest.approx(3 / 4)
    assert first["recall_relevant"] == pytest.approx(3 / 4) and code_first["recall_relevant"] == pytest.approx(2.5 / 4)
    # Matching 1 holds 3 and "3" for fact 3 alone: the same human fact either way once read as text.
    assert got["trials"][1]["recall"] == pytest.approx(code["scores"]["trials"][1]["recall"])
    assert got["recall_relevant_avg"] > code["recall_relevant"]


def test_invalid_tries_are_asked_again_as_the_code_does(srv: FakeOpenAIServer, bench: Path) -> None:
    no_relevance = fenced([{"fact": "There is a car_0."}])  # del x['relevance'] fails: a new try
    # A matching that leaves out a fact: the code's assertion fails after the verification.
    unequal = {EXTRACT: [fenced(FACTS)], MATCH: [fenced([{"fact": f["fact"], "matched_oracle_id": 0} for f in FACTS[:4]]), MATCHINGS[1], MATCHINGS[2]], VERIFY: VERIFICATIONS}
    ours, theirs = tries(unequal, {EXTRACT: [no_relevance]}, script())
    srv.responder = served(ours)
    (res,) = run_capjudge(srv, bench, "dcscore-code", [ROW])
    client = FakeClient(theirs)
    results = official.evaluate_sample(client, dict(ROW), oracle_map(bench), str(bench))
    assert [r["valid"] for r in results] == [False, False, True] and res.ok
    assert [dict(r.body) for r in srv.received] == official_bodies(client.calls)
    assert len(res.details["steps"]["invalid_tries"]) == 2
    assert res.score == pytest.approx((results[-1]["eval_details"]["f1_score_relevant"] + results[-1]["eval_details"]["f1_score"]) / 2)


def test_five_invalid_tries_make_an_error_record_the_code_leaves_out(srv: FakeOpenAIServer, bench: Path) -> None:
    ours, theirs = tries(*[{EXTRACT: ["no json here"]}] * 5)
    srv.responder = served(ours)
    (res,) = run_capjudge(srv, bench, "dcscore", [ROW])
    assert not res.ok and "no valid evaluation in 5 tries" in (res.error or "") and srv.count == 5
    assert len(res.details["steps"]["invalid_tries"]) == 5
    # The code: its except block prints match_results_with_human_raw, a name not yet bound when the
    # first caption a process evaluates fails before its matching (docs/methods.md).
    with pytest.raises(UnboundLocalError):
        official.evaluate_sample(FakeClient(theirs), dict(ROW), oracle_map(bench), str(bench))


def test_run_dcscore_equals_compute_results(srv: FakeOpenAIServer, bench: Path) -> None:
    rows = [ROW, {"image_path": "aar_test_00002.png", "caption": "Dogs on grass.", "oracle_caption": "Two dogs play on grass."}]
    dog_facts = [{"fact": "There are dogs.", "relevance": 1}, {"fact": "The grass is green.", "relevance": 1}, {"fact": "It is fun.", "relevance": 0}]
    dog = {
        EXTRACT: [fenced(dog_facts)],
        MATCH: [fenced([{"fact": f["fact"], "matched_oracle_id": m} for f, m in zip(dog_facts, ms)]) for ms in ([0, 2, "None"], [0, "None", "None"], [0, 2, 1])],
        VERIFY: [fenced([{"fact": f["fact"], "verification": v} for f, v in zip(dog_facts, vs)]) for vs in ([1, 1, 0], [1, 0, 1], [0, 1, 1])],
    }
    ours, _ = tries(script(), dog)
    srv.responder = served(ours)
    results = run_capjudge(srv, bench, "dcscore-code", rows)
    valid = []
    for row, steps in zip(rows, (script(), dog)):
        (r,) = official.evaluate_sample(FakeClient(tries(steps)[1]), dict(row), oracle_map(bench), str(bench))
        valid.append(r)
    tally = RunTally()
    for r in results:
        tally.add(r)
    hits, total = tally.micro["DCScore"]
    assert hits / total * 100 == pytest.approx(official.dcscore(valid), abs=1e-9)
    assert f"{hits / total * 100:.2f}" == f"{official.dcscore(valid):.2f}"


# ---------------------------------------------------------------------------------- any backend
def test_local_backends_ask_each_draw_as_its_own_request(bench: Path) -> None:
    """A backend without n choices (scripted, HF, llama.cpp) gets n requests, each its sample_index."""

    def respond(req: Request) -> str:
        step = step_of("\n".join(m.content for m in req.messages))
        k = (req.sample_index or 0) % 3
        return {EXTRACT: fenced(FACTS), MATCH: MATCHINGS[k], VERIFY: VERIFICATIONS[k]}[step]

    backend = ScriptedBackend(respond)
    with Judge("dcscore-code", backend, method_options={"oracle_facts": str(bench / "human_annotated_oracle_facts.jsonl")}, images_root=str(bench)) as j:
        res = j.score(Sample(image=ROW["image_path"], caption=ROW["caption"], references=[ROW["oracle_caption"]]))
    assert res.ok and len(backend.calls) == 7 and all(c.config.n == 1 for c in backend.calls)
    assert [c.sample_index for c in backend.calls] == [0, 0, 1, 2, 0, 1, 2]
    assert not backend.calls[0].images and not backend.calls[1].images and backend.calls[4].images
    facts = read_json_answer(fenced(FACTS))
    want = sample_scores(facts, [{"id": i, "fact": f} for i, f in enumerate(HUMAN[ROW["image_path"]][1])], [read_json_answer(v) for v in VERIFICATIONS], [{d["fact"]: d["matched_oracle_id"] for d in read_json_answer(m)} for m in MATCHINGS], relevant_weights="all", ids_as_text=False)
    assert res.score == pytest.approx(want["dcscore"], abs=1e-12)


@pytest.mark.parametrize(
    ("options", "image", "needle"),
    [
        ({}, "aar_test_00001.png", "oracle_facts=FILE"),
        ({"oracle_facts": "missing.jsonl"}, "aar_test_00001.png", "missing.jsonl cannot be read"),
        (None, "other.png", "no human facts for image 'other.png'"),
    ],
)
def test_bad_oracle_inputs_are_error_records_naming_the_cause(bench: Path, options: dict[str, str] | None, image: str, needle: str) -> None:
    from PIL import Image

    Image.new("RGB", (8, 8)).save(bench / "other.png")
    opts = {"oracle_facts": str(bench / "human_annotated_oracle_facts.jsonl")} if options is None else options
    backend = ScriptedBackend("x")
    with Judge("dcscore", backend, method_options=opts, images_root=str(bench)) as j:
        res = j.score(Sample(image=image, caption="c", references=["r"]))
    assert not res.ok and needle in (res.error or "") and not backend.calls


def test_a_bad_oracle_line_names_the_file_and_line(tmp_path: Path, bench: Path) -> None:
    bad = tmp_path / "facts.jsonl"
    bad.write_text('{"image_name": "aar_test_00001.png", "oracle_facts": ["a"]}\n{"image_name": "x.png", "oracle_facts": "not a list"}\n', encoding="utf-8")
    with Judge("dcscore", ScriptedBackend("x"), method_options={"oracle_facts": str(bad)}, images_root=str(bench)) as j:
        res = j.score(Sample(image="aar_test_00001.png", caption="c", references=["r"]))
    assert not res.ok and f"{bad} line 2" in (res.error or "")


# ---------------------------------------------------------------------------------- the readers
ANSWERS = [
    fenced(FACTS),
    "Here:\n```json\n[{'fact': 'a', 'relevance': 1}]\n```\nDone.",
    '```json\n[{"fact": "a", "ok": true, "x": null}]\n```',
    '[{"fact": "a"}',
    "no json",
    "```json\n[\n  {\"fact\": \"a\"},\n]\n``",
    '```json[{"fact": "a`b"}]',
    "",
]


@pytest.mark.parametrize("text", ANSWERS)
def test_answers_read_as_parse_text_json_reads_them(text: str) -> None:
    assert read_json_answer(text) == official.parse_text_json(text)


def test_json_lines_equal_format_json_input() -> None:
    items = [{"fact": "Ünïcode \"q\"", "identifier": "x_0"}, {"id": 3, "fact": "b"}]
    assert json_lines(items) == official.format_json_input(items)
    assert json_lines([]) == official.format_json_input([])


def test_trial_scores_equal_compute_precision_recall_on_random_fixtures() -> None:
    rng = random.Random(32)
    for _ in range(300):
        n_oracle, n_facts = rng.randint(1, 6), rng.randint(1, 8)
        facts = [{"fact": f"f{i}", "relevance": rng.choice([0, 1, 1])} for i in range(n_facts)]
        if not any(f["relevance"] for f in facts):
            facts[0]["relevance"] = 1
        oracle = [{"id": i, "fact": f"h{i}", "relevance": 1} for i in range(n_oracle)]
        ids = [rng.choice([None, "None", *range(n_oracle), *map(str, range(n_oracle))]) for _ in facts]
        verification = [{"fact": f["fact"], "verification": rng.choice([0, 1])} for f in facts]
        mapping = {f["fact"]: i for f, i in zip(facts, ids)}
        want = official.compute_precision_recall(facts, oracle, [dict(v) for v in verification], mapping)
        assert trial_scores(facts, oracle, verification, mapping, relevant_weights="all", ids_as_text=False) == pytest.approx(want)
        fixed = trial_scores(facts, oracle, verification, mapping)
        assert fixed["precision"] == pytest.approx(want["precision"]) and fixed["precision_relevant"] == pytest.approx(want["precision_relevant"])
        assert fixed["recall_relevant"] >= trial_scores(facts, oracle, verification, {k: None if v is None else str(v) for k, v in mapping.items()}, relevant_weights="all")["recall_relevant"] - 1e-12


def test_example_rules_give_each_step_an_answer_of_its_form() -> None:
    root = Path(__file__).resolve().parents[1] / "examples"
    rules = json.loads((root / "scripted_dcscore.json").read_text(encoding="utf-8"))
    assert [isinstance(read_json_answer(answer), list) for _, answer in rules] == [True, True, True]
    entries = [json.loads(line) for line in (root / "decapbench" / "oracle_facts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {e["image_name"] for e in entries} == {"cats.jpg", "dog.jpg"}


def test_the_offline_example_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README's "What else" command: the examples with the scripted rules and the example human facts."""
    root = Path(__file__).resolve().parents[1] / "examples"
    out = tmp_path / "dcscore.jsonl"
    argv = ["score", "--method", "dcscore", "--method-option", f"oracle_facts={root / 'decapbench' / 'oracle_facts.jsonl'}", "--backend", f"scripted:fallback?rules={root / 'scripted_dcscore.json'}", "--images", str(root / "images"), "--input", str(root / "captions.jsonl"), "--out", str(out), "--no-cache"]
    assert main(argv) == 0
    assert "DCScore (micro, official)" in capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert records and all(r["status"] == "ok" and r["details"]["calls"] == 7 for r in records)
    assert all(0 < r["score"] <= 1 and len(r["details"]["steps"]["trials"]) == 9 for r in records)


def test_batch_mode_sends_the_n_choice_bodies_and_equals_an_online_run(tmp_path: Path) -> None:
    """OpenAI batch mode: each step one round of batch lines holding the same n=3 bodies; the records
    equal an online run's."""
    root = Path(__file__).resolve().parents[1] / "examples"
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"s{i}", "image": ("cats.jpg", "dog.jpg")[i % 2], "caption": f"A red car {i}.", "references": ["a car"]}) + "\n" for i in range(4)), encoding="utf-8")
    oracle = tmp_path / "facts.jsonl"
    oracle.write_text("".join(json.dumps({"image_name": n, "oracle_caption": "c", "oracle_facts": HUMAN[ROW["image_path"]][1]}) + "\n" for n in ("cats.jpg", "dog.jpg")), encoding="utf-8")

    def respond(req: Received) -> Reply:
        step = step_of(req.prompt_text())
        return served({step: deque([{EXTRACT: [fenced(FACTS)], MATCH: MATCHINGS, VERIFY: VERIFICATIONS}[step]])})(req)

    def run(server: FakeOpenAIServer, out: Path, *extra: str) -> list[dict[str, Any]]:
        argv = ["score", "--method", "dcscore", "--method-option", f"oracle_facts={oracle}", "--backend", f"openai-compatible:{server.base_url}#gpt-4o", "--input", str(inp), "--images", str(root / "images"), "--out", str(out), "--quiet", *extra]
        assert main(argv) == 0
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        for r in records:
            (r["details"].get("backend_meta") or {}).pop("batch_id", None)
            r["backend"] = ""
        return records

    with running_server(responder=respond) as online:
        expected = run(online, tmp_path / "online.jsonl", "--no-cache")
        online_bodies = [r.body for r in online.received]
    with running_server(responder=respond) as server:
        got = run(server, tmp_path / "batch.jsonl", "--cache-dir", str(tmp_path / "cache"), "--batch", "--wait", "--poll-interval", "0.05")
        assert not [r for r in server.received if r.path.endswith("/chat/completions")]
    assert all(r["status"] == "ok" for r in expected) and [(r["id"], r["score"]) for r in got] == [(r["id"], r["score"]) for r in expected]
    assert sorted(b.get("n", 1) for b in online_bodies) == [1] * 4 + [3] * 8


def test_the_command_line_refuses_a_run_without_its_human_facts(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1] / "examples"
    base = ["score", "--method", "dcscore", "--backend", "scripted:x", "--images", str(root / "images"), "--input", str(root / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]
    assert main(base) == 2
    assert main([*base, "--method-option", f"oracle_facts={tmp_path / 'none.jsonl'}"]) == 2
    assert not (tmp_path / "o.jsonl").exists()


def test_the_report_shows_the_facts_means_and_invalid_tries() -> None:
    from capjudge.report.records import step_lines

    steps = {"facts": FACTS[:2] + [{"fact": "x", "relevance": 0}], "f1_score_avg": 0.5, "precision_avg": 1.0, "trials": [{}] * 9, "invalid_tries": [{"error": "KeyError: 'relevance'"}]}
    lines = step_lines(steps)
    assert lines[:3] == ["R There is a car_0.", "R The car_0 is red.", "- x"]
    assert lines[3] == "means of 9 trials: precision 1, f1_score 0.5" and lines[4] == "invalid try: KeyError: 'relevance'"


@pytest.mark.slow
def test_tiny_hf_runs_the_text_only_and_image_steps(hf_backend: Any, bench: Path) -> None:
    """On a local backend (the tiny random LLaVA): the matching reaches the model text only, the
    verification with the image, every request one answer; the tiny model's answers are no JSON, so
    the caption ends as the code leaves it, invalid after 5 tries."""
    seen: list[Request] = []

    def respond(req: Request) -> Any:
        seen.append(req)
        step = step_of("\n".join(m.content for m in req.messages))
        if step == EXTRACT:  # the extraction prompt (its five worked examples) exceeds the tiny model's context
            return fenced(FACTS)
        out = hf_backend.generate([req])[0]
        if isinstance(out, BaseException):
            return out
        return MATCHINGS[0] if step == MATCH else out  # the model's own verification

    with Judge("dcscore", ScriptedBackend(respond), max_new_tokens=8, method_options={"oracle_facts": str(bench / "human_annotated_oracle_facts.jsonl")}, images_root=str(bench)) as j:
        res = j.score(Sample(image=ROW["image_path"], caption=ROW["caption"], references=[ROW["oracle_caption"]]))
    steps = [step_of("\n".join(m.content for m in r.messages)) for r in seen]
    assert steps == [EXTRACT, MATCH, MATCH, MATCH, VERIFY, VERIFY, VERIFY] * 5
    assert all(bool(r.images) == (s == VERIFY) and r.config.n == 1 for r, s in zip(seen, steps))
    assert not res.ok and "no valid evaluation in 5 tries" in (res.error or "")
