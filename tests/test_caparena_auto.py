"""CapArena-Auto: ``capjudge arena --caparena-results`` (the numbers of ``caparena_auto_scores.py``)
and ``--protocol caparena-auto`` (the battles of ``caparena_auto_eval.py``)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from capjudge.arena.battles import shown_first
from capjudge.arena.caparena import judgment, load_assignments
from capjudge.arena.caparena_files import BASELINES, read_results, score_model
from capjudge.backends.base import Request
from capjudge.cli import main
from openai_fake_server import Received, Reply, chat_body, running_server

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "examples" / "images"
IMGS = sorted(p.name for p in IMAGES.iterdir() if p.suffix in (".jpg", ".png"))
KEY = "sk-test-caparena"
WORDS = ["one", "two", "three", "four", "five", "six", "seven"]


# ------------------------------------------------------------------------------- battle files
def battle(model: str, ref: str, outcome: str, rng: random.Random, k: int) -> dict[str, Any]:
    """One entry of ``model``'s battle file against ``ref``: outcome win / loss / tie / invalid / none."""
    mine, theirs = " ".join(WORDS[: 1 + k % 6]), "baseline caption " + "x " * (k % 3)
    first_is_model = rng.random() < 0.5
    e: dict[str, Any] = {"img": f"test_{k:05d}.jpg", "ref": "human words", "ref_model": ref}
    e.update(source1=model, source2=ref, caption1=mine, caption2=theirs) if first_is_model else e.update(source1=ref, source2=model, caption1=theirs, caption2=mine)
    dot = "." if rng.random() < 0.5 else ""
    if outcome == "win":
        e["judge"] = f"Caption {1 if first_is_model else 2} is better{dot}"
    elif outcome == "loss":
        e["judge"] = f"Caption {2 if first_is_model else 1} is better{dot}"
    elif outcome == "tie":
        e["judge"] = "Tie" + dot
    elif outcome == "invalid":
        e["judge"] = rng.choice(["<Caption 1 is better>", "Caption 3 is better", "caption 1 is better", ""])
    return e


SPEC = {  # model -> baseline -> (wins, losses, ties, invalid, unjudged)
    "Model-X": {"GPT-4o-0806": (3, 5, 2, 1, 1), "CogVLM2-llama3-chat-19B": (6, 1, 0, 0, 0), "MiniCPM-V2.6-8B": (4, 4, 3, 2, 0)},
    "Model-Y": {"GPT-4o-0806": (0, 7, 1, 0, 2), "CogVLM2-llama3-chat-19B": (2, 2, 2, 2, 2), "MiniCPM-V2.6-8B": (9, 0, 0, 0, 0)},
    "GPT-4o-0806": {"CogVLM2-llama3-chat-19B": (5, 2, 1, 0, 0), "MiniCPM-V2.6-8B": (7, 0, 1, 1, 0)},
}


def write_files(root: Path, seed: int = 1) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    files: dict[str, list[dict[str, Any]]] = {}
    for model, per in SPEC.items():
        entries: list[dict[str, Any]] = []
        for ref, counts in per.items():
            for outcome, n in zip(("win", "loss", "tie", "invalid", "none"), counts, strict=True):
                entries += [battle(model, ref, outcome, rng, len(entries) + j) for j in range(n)]
        rng.shuffle(entries)
        files[model] = entries
        (root / f"{model}.json").write_text(json.dumps(entries))
    return files


def expected(model: str, entries: list[dict[str, Any]]) -> dict[str, float]:
    """The protocol written out again from the spec: (wins - losses) / 2 per baseline, mean of
    three; length over every entry, the model's caption split on single spaces."""
    per = {b: (SPEC[model].get(b, (0, 0, 0, 0, 0))[0] - SPEC[model].get(b, (0, 0, 0, 0, 0))[1]) / 2 for b in BASELINES}
    lengths = Counter()
    for e in entries:
        cap = e["caption1"] if e["source1"] == model else e["caption2"]
        lengths[len(cap.split(" "))] += 1
    return {**per, "avg": sum(per.values()) / 3, "length": sum(k * v for k, v in lengths.items()) / sum(lengths.values())}


def test_caparena_results_equal_the_protocol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    (tmp_path / "caparena_auto_600.json").write_text(json.dumps({"test_00001.jpg": {"ref_model": "GPT-4o-0806", "captions": {}}}))
    board, _ = read_results(tmp_path)
    assert not board.errors
    assert [e.model for e in board.entries] == sorted(SPEC, key=lambda m: -expected(m, files[m])["avg"])
    for e in board.entries:
        want = expected(e.model, files[e.model])
        for b in BASELINES:
            assert e.scores[b] == pytest.approx(want[b], abs=1e-9)
        assert e.score_avg == pytest.approx(want["avg"], abs=1e-9)
        assert e.length_avg == pytest.approx(want["length"], abs=1e-9)
        assert e.invalid == sum(c[3] for c in SPEC[e.model].values())
        assert e.unjudged == sum(c[4] for c in SPEC[e.model].values())
    assert main(["arena", "--caparena-results", str(tmp_path), "--format", "json", "--bootstrap", "20"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    got = {e["model"]: e for e in out["caparena"]["leaderboard"]}
    for model, entries in files.items():
        want = expected(model, entries)
        assert got[model]["Score_Avg"] == pytest.approx(want["avg"], abs=1e-9)
        assert [got[model][k] for k in ("Score_gpt", "Score_cog", "Score_cpm")] == pytest.approx([want[b] for b in BASELINES], abs=1e-9)
        assert got[model]["Length_Avg"] == pytest.approx(want["length"], abs=1e-9)
    # capjudge's Bradley-Terry view of the same battles, beside: every model, baselines included.
    assert {e["model"] for e in out["leaderboard"]} == set(SPEC) | set(BASELINES)
    assert main(["arena", "--caparena-results", str(tmp_path), "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "CapArena-Auto Leaderboard:"
    assert lines[1].startswith("Model                          | Score_avg | Score_gpt  |")
    top = board.entries[0]
    assert lines[3] == f"{top.model:<30} | {top.score_avg:<8.2f} | {top.scores[BASELINES[0]]:<10.2f} | {top.scores[BASELINES[1]]:<10.2f} | {top.scores[BASELINES[2]]:<10.2f} | {top.length_avg:<10.2f} |"


def test_bad_battle_files_are_named_and_the_others_scored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    (tmp_path / "Broken.json").write_text("[{not json")
    bad = [dict(files["Model-Y"][0]), {k: v for k, v in files["Model-Y"][1].items() if k != "caption2"}]
    (tmp_path / "Missing.json").write_text(json.dumps(bad))
    odd = [dict(files["Model-X"][0], ref_model="Some-Other", judge="Tie")]
    (tmp_path / "Odd.json").write_text(json.dumps(odd))
    (tmp_path / "Empty.json").write_text("[]")
    board, _ = read_results(tmp_path)
    assert sorted(e.model for e in board.entries) == sorted(SPEC)
    text = "\n".join(board.errors)
    assert "Broken.json: not a readable JSON file" in text
    assert "Missing.json: entry 1" in text and "caption2" in text
    assert "Odd.json: entry 0" in text and "Some-Other" in text
    assert "Empty.json: no battles" in text
    assert main(["arena", "--caparena-results", str(tmp_path), "--format", "json", "--bootstrap", "0"]) == 2
    captured = capsys.readouterr()
    assert len(json.loads(captured.out.strip().splitlines()[-1])["caparena"]["leaderboard"]) == len(SPEC)
    assert "Missing.json: entry 1" in captured.err
    assert main(["arena", "--caparena-results", str(tmp_path / "nope")]) == 2
    with pytest.raises(ValueError, match="not a JSON object"):
        score_model("m", [1])


# ------------------------------------------------------------------------------- the protocol
def make_assignments(path: Path) -> dict[str, Any]:
    data = {}
    for k, img in enumerate(IMGS * 2):
        name = img if k < len(IMGS) else f"copy_{img}"
        ref = BASELINES[k % 3]
        data[name] = {"ref_model": ref, "captions": {"human": f"human caption {k}", ref: f"{ref} says {k}", "unused": "no"}}
    data["broken.jpg"] = {"ref_model": "Nobody", "captions": {"human": "h"}}
    path.write_text(json.dumps(data))
    return data


@pytest.fixture
def arena_files(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, Path]]:
    (tmp_path / "imgs").mkdir()
    for k, img in enumerate(IMGS * 2):
        name = img if k < len(IMGS) else f"copy_{img}"
        (tmp_path / "imgs" / name).write_bytes((IMAGES / img).read_bytes())
    assign = make_assignments(tmp_path / "caparena_auto_600.json")
    models = {}
    for model, word in (("Model-Test", "good"), ("MiniCPM-V2.6-8B", "fine")):
        caps = {img: f"a {word} caption of {img}" for img in assign if img != "broken.jpg"}
        models[model] = tmp_path / f"{model}.json"
        models[model].write_text(json.dumps(caps))
    return tmp_path, assign, models


def fake_judge(req: Received) -> Reply:
    """Prefers the caption saying 'good', then 'fine'; a tie between baselines' own words."""
    text = req.prompt_text()
    first = text.split("Answer 1: ", 1)[1].split("\n", 1)[0]
    second = text.split("Answer 2: ", 1)[1].split("\n", 1)[0]
    rank = lambda c: 2 if "good" in c else (1 if "fine" in c else 0)  # noqa: E731
    verdict = "Answer 1" if rank(first) > rank(second) else ("Answer 2" if rank(second) > rank(first) else "Tie")
    return Reply(body=chat_body(verdict, model="fake"))


def test_protocol_caparena_auto_against_the_fake_server(arena_files: tuple[Path, dict[str, Any], dict[str, Path]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root, assign, models = arena_files
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    out, cdir = root / "battles.jsonl", root / "out_caparena"
    usable = {k: v for k, v in assign.items() if k != "broken.jpg"}
    with running_server(responder=fake_judge) as srv:
        argv = ["arena", "--protocol", "caparena-auto", "--method", "gpt4v-pairwise", "--assignments", str(root / "caparena_auto_600.json"),
                "--models", *(f"{m}={p}" for m, p in models.items()), "--backend", f"openai-compatible:{srv.base_url}#fake", "--images", str(root / "imgs"),
                "--no-cache", "--quiet", "--out", str(out), "--caparena-out", str(cdir), "--format", "json", "--bootstrap", "20", "--seed", "3"]
        assert main(argv) == 0
        # One request per battle: every image for Model-Test, the non-MiniCPM images for MiniCPM.
        n_cpm = sum(1 for a in usable.values() if a["ref_model"] == "MiniCPM-V2.6-8B")
        assert srv.count == 2 * len(usable) - n_cpm
        for req in srv.received:
            text = req.prompt_text()
            assert sum(f"{b} says" in text for b in BASELINES) == 1
        d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert d["protocol"] == "caparena-auto" and d["mode"] == "single"
        srv.reset()
        assert main(argv) == 0  # resumed: nothing asked again
        assert srv.count == 0
        capsys.readouterr()
        assert main([*argv, "--budget", "3"]) == 2
    for model in models:
        entries = json.loads((cdir / f"{model}.json").read_text())
        imgs = [img for img, a in usable.items() if a["ref_model"] != model]
        assert [e["img"] for e in entries] == imgs  # the assignments' order, self-battles skipped
        for e in entries:
            a = usable[e["img"]]
            assert set(e) >= {"img", "source1", "source2", "caption1", "caption2", "ref", "ref_model", "judge"}
            assert e["ref"] == a["captions"]["human"] and e["ref_model"] == a["ref_model"]
            assert e["source1"] == shown_first(3, e["img"], model, a["ref_model"])
            own = e["caption1"] if e["source1"] == model else e["caption2"]
            assert own == json.loads(models[model].read_text())[e["img"]]
            assert {e["source1"], e["source2"]} == {model, a["ref_model"]}
            model_first = e["source1"] == model
            assert e["judge"] == ("Caption 1 is better" if model_first else "Caption 2 is better")
    # The leaderboard printed equals --caparena-results on the files written.
    got = {e["model"]: e for e in d["caparena"]["leaderboard"]}
    board, _ = read_results(cdir)
    for e in board.entries:
        assert got[e.model]["Score_Avg"] == pytest.approx(e.score_avg, abs=1e-9)
        assert got[e.model]["Length_Avg"] == pytest.approx(e.length_avg, abs=1e-9)
    n_test = Counter(a["ref_model"] for a in usable.values())
    assert got["Model-Test"]["Score_Avg"] == pytest.approx(sum(n / 2 for n in n_test.values()) / 3, abs=1e-9)
    assert got["MiniCPM-V2.6-8B"]["Score_cpm"] == 0
    assert any("broken.jpg" in n for n in d["notes"])


def test_protocol_usage_errors(arena_files: tuple[Path, dict[str, Any], dict[str, Path]]) -> None:
    root, _, models = arena_files
    base = ["arena", "--protocol", "caparena-auto", "--backend", "scripted:Answer 1", "--images", str(root / "imgs"), "--out", str(root / "b.jsonl"), "--quiet"]
    spec = [f"{m}={p}" for m, p in models.items()]
    assert main([*base, "--models", *spec]) == 2  # no --assignments
    assign = ["--assignments", str(root / "caparena_auto_600.json")]
    assert main([*base, *assign, "--models", *spec, "--method", "gpt4v-pairwise", "--baseline", "Model-Test"]) == 2
    assert main([*base, *assign, "--models", *spec, "--method", "visce2"]) == 2  # a scoring method
    assert main([*base, *assign, "--models", f"a/b={models['Model-Test']}", "--method", "gpt4v-pairwise"]) == 2
    (root / "b.caparena").mkdir()
    (root / "b.caparena" / "Model-Test.json").write_text("{}")
    assert main([*base, *assign, "--models", *spec, "--method", "gpt4v-pairwise"]) == 2  # would replace a non-battle file
    (root / "b.caparena" / "Model-Test.json").unlink()
    assert main([*base, *assign, "--models", *spec, "--method", "gpt4v-pairwise", "--bootstrap", "0"]) == 0
    assert json.loads((root / "b.caparena" / "Model-Test.json").read_text())
    assert main(["arena", "--caparena-results", str(root / "b.caparena"), "--out", "x.jsonl"]) == 2
    # The other protocols by name; CapArena options outside their protocol.
    ex = ROOT / "examples"
    plain = ["arena", "--input", str(ex / "arena.jsonl"), "--backend", "scripted:Answer 1", "--images", str(ex / "images"), "--quiet", "--bootstrap", "0", "--no-cache"]
    assert main([*plain, "--protocol", "round-robin", "--out", str(root / "rr.jsonl")]) == 0
    rr = [json.loads(line) for line in (root / "rr.jsonl").read_text().splitlines()]
    assert any("human" not in (r["model_a"], r["model_b"]) for r in rr)  # every pair, not only against one
    assert main([*plain, "--protocol", "baseline", "--out", str(root / "x.jsonl")]) == 2  # no --baseline NAME
    assert main([*plain, "--baseline", "human", *assign, "--out", str(root / "y.jsonl")]) == 2


def test_assignments_and_judgment_text(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    make_assignments(path)
    a = load_assignments(path)
    assert "broken.jpg" not in a.items and any("broken.jpg" in b for b in a.bad)
    assert all(x.caption.startswith(x.ref_model) for x in a.items.values())
    rec = {"status": "ok", "verdict": "B", "details": {"shown_first": "A"}, "raw": ["Reason: r\nJudgment: Caption 2 is better."]}
    assert judgment(rec) == "Caption 2 is better."
    assert judgment({**rec, "details": {"shown_first": "B"}}) == "Caption 1 is better"
    assert judgment({**rec, "verdict": "tie", "raw": ["Answer: Tie"]}) == "Tie"
    assert judgment({**rec, "status": "error"}) is None


def test_single_order_request_matches_the_dual_order(tmp_path: Path) -> None:
    """The protocol's request for a battle is the pairwise request of that order (scripted backend)."""
    from capjudge.backends.scripted import ScriptedBackend
    from capjudge.judges.judge import Judge
    from capjudge.judges.pairwise import Pair

    seen: list[Request] = []

    def record(req: Request) -> str:
        seen.append(req)
        return "Answer 1"

    judge = Judge("gpt4v-pairwise", ScriptedBackend(record), images_root=str(IMAGES))
    list(judge.compare_many([Pair(IMGS[0], "x one", "y two", ("ref",), "1", "B")], mode="single"))
    list(judge.compare_many([Pair(IMGS[0], "y two", "x one", ("ref",), "1")], mode="pairwise"))
    assert seen[0].fingerprint() == seen[1].fingerprint()


def test_run_caparena_in_python(arena_files: tuple[Path, dict[str, Any], dict[str, Path]]) -> None:
    from capjudge.arena import run_caparena
    from capjudge.backends.scripted import ScriptedBackend
    from capjudge.judges.judge import Judge

    root, assign, models = arena_files

    def prefer_good(req: Request) -> str:
        text = req.messages[-1].content
        first = text.split("Answer 1: ", 1)[1].split("\n", 1)[0]
        return "Answer 1" if "good" in first else "Answer 2"

    judge = Judge("gpt4v-pairwise", ScriptedBackend(prefer_good), images_root=str(root / "imgs"))
    res = run_caparena({"Model-Test": models["Model-Test"]}, root / "caparena_auto_600.json", judge, bootstrap=0)
    assert res.files == {}  # neither out nor caparena_out: nothing written
    per = Counter(a["ref_model"] for k, a in assign.items() if k != "broken.jpg")
    (entry,) = res.caparena.entries
    assert entry.scores == {b: per[b] / 2 for b in BASELINES}
    assert entry.score_avg == pytest.approx(sum(per.values()) / 2 / 3, abs=1e-9)
    assert res.to_dict()["mode"] == "single" and len(judge.backend.calls) == sum(per.values())


def test_other_method_judgment_counted_once_as_the_official_scorer_counts_it(arena_files: tuple[Path, dict[str, Any], dict[str, Path]]) -> None:
    """With a method other than `caparena`, an answer `Judgment: Caption 1 is better..` is read as
    caption 1 by that method, and written to the battle file as vlm_as_a_judge.py writes it (the
    text after `Judgment:`), which caparena_auto_scores.py drops as invalid. capjudge's own
    Bradley-Terry view counts the battles the official scorer counts (official_detailed.py's copy)."""
    from capjudge.arena import run_caparena
    from capjudge.backends.scripted import ScriptedBackend
    from capjudge.judges.judge import Judge
    from official_detailed import caparena_score_refs

    root, assign, models = arena_files

    def answer(req: Request) -> str:
        first = req.messages[-1].content.split("Answer 1: ", 1)[1].split("\n", 1)[0]
        # Model-Test's caption wins either way; shown first, its judgment has two dots.
        return "Reason: r\nJudgment: " + ("Caption 1 is better.." if "good" in first else "Caption 2 is better.")

    judge = Judge("gpt4v-pairwise", ScriptedBackend(answer), images_root=str(root / "imgs"))
    res = run_caparena({"Model-Test": models["Model-Test"]}, root / "caparena_auto_600.json", judge, bootstrap=0, caparena_out=root / "files", seed=2)
    entries = json.loads((root / "files" / "Model-Test.json").read_text())
    judges = Counter(e["judge"] for e in entries)
    assert set(judges) == {"Caption 1 is better..", "Caption 2 is better."} and all(v > 0 for v in judges.values())
    assert all(r["verdict"] == ("A" if r["model_a"] == "Model-Test" else "B") for r in res.arena.run.records)  # the method read both
    official = caparena_score_refs("Model-Test", entries)
    counted = sum(official[b][0] for b in BASELINES)
    assert counted == judges["Caption 2 is better."]
    (mine,) = [e for e in res.arena.leaderboard.entries if e["model"] == "Model-Test"]
    assert (mine["battles"], mine["wins"], mine["losses"], mine["ties"]) == (counted, sum(int(official[b][1] * 2) for b in BASELINES), 0, 0)
    assert mine["failed"] == judges["Caption 1 is better.."]
    (board,) = res.caparena.entries
    assert board.score_avg == pytest.approx(official["Score_Avg"], abs=1e-12) and board.invalid == judges["Caption 1 is better.."]
    assert any("drops as invalid" in n for n in res.arena.leaderboard.notes)


def test_protocol_default_method_sends_the_official_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--protocol caparena-auto` with its default method (`caparena`): each battle is one request
    equal to vlm_as_a_judge.py's payload with the reference (the human caption), the shown-first
    model's caption as Caption 1; a bad format is asked again; the battle files carry the judgment."""
    import base64
    import io

    from PIL import Image

    from official_detailed import caparena_payload

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    (tmp_path / "imgs").mkdir()
    names = [f"test_{k:05d}.png" for k in range(4)]
    b64 = {}
    for k, name in enumerate(names):
        buf = io.BytesIO()
        Image.new("RGB", (12, 10), (40 * k, 90, 200 - 30 * k)).save(buf, format="PNG")
        (tmp_path / "imgs" / name).write_bytes(buf.getvalue())
        b64[name] = base64.b64encode(buf.getvalue()).decode("utf-8")
    assign = {n: {"ref_model": BASELINES[k % 3], "captions": {"human": f"Human: a picture {k}.", BASELINES[k % 3]: f"Baseline words  {k}\n"}} for k, n in enumerate(names)}
    (tmp_path / "caparena_auto_600.json").write_text(json.dumps(assign))
    mine = {n: f"My  detailed caption {k}.\n" for k, n in enumerate(names)}
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    bad_once = {"n": 0}

    def respond(req: Received) -> Reply:
        text = req.prompt_text()
        if "My  detailed caption 2." in text and bad_once["n"] == 0:  # one answer of the wrong form
            bad_once["n"] += 1
            return Reply(body=chat_body("I prefer the first one."))
        first = text.split("Caption 1:\n", 1)[1]
        return Reply(body=chat_body("Reason: mine is richer.\nJudgment: " + ("Caption 1 is better." if first.startswith("My") else "Caption 2 is better")))

    out, cdir = tmp_path / "battles.jsonl", tmp_path / "files"
    with running_server(responder=respond) as srv:
        argv = ["arena", "--protocol", "caparena-auto", "--assignments", str(tmp_path / "caparena_auto_600.json"), "--models", f"Mine={tmp_path / 'mine.json'}",
                "--backend", "openai:gpt-4o-2024-08-06", "--backend-opt", f"base_url={srv.base_url}", "--images", str(tmp_path / "imgs"),
                "--no-cache", "--quiet", "--out", str(out), "--caparena-out", str(cdir), "--format", "json", "--bootstrap", "0"]
        assert main(argv) == 0
        bodies = [dict(r.body) for r in srv.received]
    assert len(bodies) == len(names) + 1  # one request per battle, one asked again for its format
    entries = json.loads((cdir / "Mine.json").read_text())
    assert [e["img"] for e in entries] == names
    expected = []
    for e in entries:
        a = assign[e["img"]]
        assert e["ref"] == a["captions"]["human"] and e["ref_model"] == a["ref_model"]
        body = caparena_payload(b64[e["img"]], e["caption1"], e["caption2"], e["ref"])
        expected += [body, body] if e["img"] == names[2] else [body]
        assert e["judge"] == ("Caption 1 is better." if e["source1"] == "Mine" else "Caption 2 is better")
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731  (the same fields and values; key order aside)
    assert sorted(map(key, bodies)) == sorted(map(key, expected))
    assert {e["caption1" if e["source1"] == "Mine" else "caption2"] for e in entries} == set(mine.values())  # raw, as sent
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    board = {e["model"]: e for e in d["caparena"]["leaderboard"]}
    per = Counter(a["ref_model"] for a in assign.values())
    assert board["Mine"]["Score_Avg"] == pytest.approx(sum(per[b] / 2 for b in BASELINES) / 3, abs=1e-9)


# -------------------------------------------------- hostile files: deep nesting, wrong types (#30, item 16)
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"ref_model": ["GPT-4o-0806"]}, "field 'ref_model' must be text, not a list"),
        ({"source2": {"name": "x"}}, "field 'source2' must be text, not an object"),
        ({"caption2": None}, "field 'caption2' must be text, not null"),
    ],
)
def test_battle_files_of_wrong_types_are_usage_errors_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], named: str) -> None:
    files = write_files(tmp_path)
    bad = [dict(files["Model-X"][0], **change), *files["Model-X"][1:]]
    (tmp_path / "Model-X.json").write_text(json.dumps(bad))
    assert main(["arena", "--caparena-results", str(tmp_path), "--format", "json", "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert f"Model-X.json: entry 0 (img {bad[0]['img']!r}): {named}" in err and "internal error" not in err


def test_battle_files_without_img_and_nested_too_deeply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    no_img = [{k: v for k, v in dict(files["Model-X"][0], ref_model="Nobody").items() if k != "img"}]
    (tmp_path / "Model-X.json").write_text(json.dumps(no_img))
    (tmp_path / "Deep.json").write_text(DEEP)
    assert main(["arena", "--caparena-results", str(tmp_path), "--format", "json", "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert "Model-X.json: entry 0 (img None): ref_model 'Nobody'" in err
    assert "Deep.json: not a readable JSON file: nested too deeply" in err and "internal error" not in err


def test_assignments_nested_too_deeply_or_of_wrong_types(arena_files: tuple[Path, dict[str, Any], dict[str, Path]], capsys: pytest.CaptureFixture[str]) -> None:
    root, assign, models = arena_files
    base = ["arena", "--protocol", "caparena-auto", "--backend", "scripted:Answer 1", "--method", "gpt4v-pairwise", "--images", str(root / "imgs"),
            "--out", str(root / "b.jsonl"), "--quiet", "--models", *[f"{m}={p}" for m, p in models.items()]]
    deep = root / "deep.json"
    deep.write_text(DEEP)
    assert main([*base, "--assignments", str(deep)]) == 2
    assert f"--assignments {deep}: cannot be read: nested too deeply" in capsys.readouterr().err
    listed = root / "listed.json"
    listed.write_text(json.dumps({img: dict(a, ref_model=[a["ref_model"]]) for img, a in assign.items()}))
    assert main([*base, "--assignments", str(listed)]) == 2
    err = capsys.readouterr().err
    assert f"--assignments {listed}: no usable image" in err and "ref_model [" in err and "internal error" not in err

